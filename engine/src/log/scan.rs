//! Sequential frame scanning over one segment file, in bounded chunks. The scanner reports
//! *what* it found where (a frame, zeroed space, damage); callers decide what that means.
//! Readers that verify the chain have the groups of frames ahead of them (bodies and links)
//! checked a chunk at a time on several threads ([`LinksAhead`]).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use journal_format::frame::is_zeroed;
use journal_format::{
    ChainHash, FormatError, FrameHeader, GroupCheck, Position, SegmentId, FRAME_BODY_LEN_MAX,
    FRAME_HEADER_LEN, LINK_GROUP_BYTES,
};

use crate::error::{Error, Result};
use crate::storage::StorageFile;

/// How much the scanner reads at a time (frames larger than this are read whole).
const SCAN_CHUNK_BYTES: u64 = 256 * 1024;

/// How much a scan that checks chain links ahead reads at a time: about 16 groups of 64 KiB, so
/// that starting the threads that check them costs little beside the hashing. (A group that does
/// not fit is read whole: [`GROUP_READ_MAX`].)
const LINKS_AHEAD_BYTES: u64 = 1024 * 1024;

/// The most bytes one group can take: fewer than [`LINK_GROUP_BYTES`] before its last frame, and that
/// frame.
const GROUP_READ_MAX: u64 = LINK_GROUP_BYTES + FRAME_HEADER_LEN as u64 + FRAME_BODY_LEN_MAX as u64;

/// The fewest bytes of groups worth checking on more than one thread.
const LINKS_AHEAD_PARALLEL_MIN: usize = 256 * 1024;

/// The most threads that check groups ahead of one scan.
const LINKS_AHEAD_THREADS_MAX: usize = 8;

/// One frame whose body checksum and group's chain link were checked ahead of the scan that
/// reads it ([`FrameScanner::links_ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkChecked {
    /// The frame's byte offset in the segment.
    pub offset: u64,
    /// The link stored by the frame before it (the group before's, for a group's first frame).
    pub prev: ChainHash,
    /// The frame's own stored link: its group's, which was found to hold.
    pub hash: ChainHash,
}

/// A group found not to hold ahead of the scan: where it starts, and what is wrong where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupFailed {
    /// The offset of the group's first frame.
    pub group_offset: u64,
    /// The offset of the frame at which the check failed.
    pub offset: u64,
    /// That frame's position, when its header could be read.
    pub position: Option<Position>,
    /// What is wrong.
    pub detail: String,
    /// Whether a scan reading the frame meets the problem itself (a checksum, a header): a
    /// walk that reports every problem reports it there, not again at the group.
    pub found_by_scan: bool,
}

/// What [`FrameScanner::links_ahead`] found: the frames of the groups that hold, in order, and
/// the first group after them that does not, if one was checked.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    pub held: Vec<LinkChecked>,
    pub failed: Option<GroupFailed>,
}

/// The groups checked ahead of a reader that walks frames in order: it asks for the next chunk's
/// groups when it is about to read the first frame of a group and none are left
/// ([`LinksAhead::refill`]), and whether a frame was found to hold when it reads it
/// ([`LinksAhead::held`]). A group's first frame not found held is corruption, which
/// [`LinksAhead::failure`] names.
#[derive(Debug, Default)]
pub(crate) struct LinksAhead {
    held: VecDeque<LinkChecked>,
    failed: Option<Box<GroupFailed>>,
}

impl LinksAhead {
    /// Checks the groups of the next chunk of frames from `scanner`'s offset, which must be a
    /// group's first frame, the first group continuing `prev` and none starting past position
    /// `until`, when none checked ahead are left.
    pub(crate) fn refill(
        &mut self,
        scanner: &mut FrameScanner,
        prev: ChainHash,
        until: Position,
    ) -> Result<()> {
        if self.held.is_empty() {
            let ahead = scanner.links_ahead(prev, until)?;
            self.held = ahead.held.into();
            self.failed = ahead.failed.map(Box::new);
        }
        Ok(())
    }

    /// Whether the next frame checked ahead starts at `offset`: its body need not be checked
    /// when it is read, if [`LinksAhead::held`] then vouches for it.
    pub(crate) fn next_at(&self, offset: u64) -> bool {
        self.held.front().is_some_and(|c| c.offset == offset)
    }

    /// Whether the frame at `offset`, storing link `hash` after a frame storing `prev`, was
    /// found ahead in a group that holds, with a body that matches its checksum. Forgets the
    /// frames before it.
    pub(crate) fn held(&mut self, offset: u64, prev: ChainHash, hash: ChainHash) -> bool {
        while self.held.front().is_some_and(|c| c.offset < offset) {
            self.held.pop_front();
        }
        let held = self.held.front() == Some(&LinkChecked { offset, prev, hash });
        if held {
            self.held.pop_front();
        }
        held
    }

    /// What was found wrong with the group starting at `offset`, if it was checked ahead.
    pub(crate) fn failure(&self, offset: u64) -> Option<&GroupFailed> {
        self.failed.as_deref().filter(|f| f.group_offset == offset)
    }

    /// Judges the chain at the frame just read at `offset` (holding `position`, storing link
    /// `hash`, after a frame storing `prev`): `Ok(true)` when its group was found ahead to hold
    /// (its body checked there too), `Ok(false)` when it continues a group that began before the
    /// walk (`group_open`) storing the same link, the failure otherwise. A group's first frame not
    /// found to hold is the group's failure, as checked ahead.
    pub(crate) fn judge(
        &mut self,
        offset: u64,
        position: Position,
        prev: ChainHash,
        hash: ChainHash,
        group_open: bool,
    ) -> std::result::Result<bool, GroupFailed> {
        if self.held(offset, prev, hash) {
            return Ok(true);
        }
        if group_open && hash == prev {
            return Ok(false);
        }
        let here = |detail: String| GroupFailed {
            group_offset: offset,
            offset,
            position: Some(position),
            detail,
            found_by_scan: false,
        };
        Err(if group_open {
            here(format!(
                "the frame stores link {hash} inside a group whose frames before it store {prev}"
            ))
        } else {
            match self.failure(offset) {
                Some(failed) => failed.clone(),
                None => here("the group of linked frames starting here was not checked".into()),
            }
        })
    }
}

/// The groups held whole in a chunk read ahead.
#[derive(Debug, Default)]
struct Groups {
    /// Each frame: its header and the range of its bytes in the chunk.
    frames: Vec<(FrameHeader, Range<usize>)>,
    /// Each group, as a range of `frames`.
    groups: Vec<Range<usize>>,
    /// Whether the chunk ends inside a group (or a frame) that a longer chunk would hold.
    cut: bool,
    /// A header inside a group that does not decode: its offset in the chunk, the group's first
    /// frame's, the position it should hold, and why.
    broken: Option<(usize, usize, Position, FormatError)>,
}

impl Groups {
    /// Each group with the link it must continue: `prev` for the first, then the one its previous
    /// group's frames store.
    fn to_check(&self, prev: ChainHash) -> Vec<GroupToCheck<'_>> {
        let mut checks: Vec<GroupToCheck<'_>> = Vec::new();
        let mut link = prev;
        for group in &self.groups {
            let frames = self.frames.get(group.clone()).unwrap_or_default();
            checks.push((link, frames));
            if let Some((header, _)) = frames.first() {
                link = header.hash;
            }
        }
        checks
    }

    /// What ends the groups of the chunk at `offset`, when it is something wrong: a header inside
    /// a group that does not decode, or a group that the frames up to the scan's end leave
    /// unfinished (`longest`: the chunk is as long as one is read, so a longer one would hold no
    /// more).
    fn failure(&self, offset: u64, longest: bool) -> Option<GroupFailed> {
        match &self.broken {
            Some((at, start, position, error)) => Some(GroupFailed {
                group_offset: offset + *start as u64,
                offset: offset + *at as u64,
                position: Some(*position),
                detail: format!("in a link group: {error}"),
                found_by_scan: true,
            }),
            None if self.cut && longest => {
                let start = self.frames.last().map_or(0, |(_, r)| r.end);
                Some(GroupFailed {
                    group_offset: offset + start as u64,
                    offset: offset + start as u64,
                    position: None,
                    detail: String::from(
                        "a link group does not end before the segment's last frame",
                    ),
                    found_by_scan: false,
                })
            }
            None => None,
        }
    }

    /// Splits `bytes` (starting at a group's first frame) into whole groups, none starting past
    /// position `until`. Stops at a header that does not decode: the scan meets it itself.
    /// A group is closed at its `LINK_END` frame, or at the frame that finds it [`LINK_GROUP_BYTES`]
    /// long already (a group the check then refuses).
    fn split(bytes: &[u8], until: Position) -> Groups {
        let mut found = Groups::default();
        let (mut at, mut group_start, mut group_bytes) = (0usize, 0usize, 0u64);
        while let Some(rest) = bytes.get(at..).filter(|rest| !rest.is_empty()) {
            let header = match FrameHeader::decode(rest) {
                Ok(header) => header,
                Err(e) => {
                    found.cut = rest.len() < FRAME_HEADER_LEN;
                    let before = found.frames.last().filter(|_| group_bytes > 0);
                    if let (false, Some((header, range))) = (found.cut, before) {
                        let start = found
                            .frames
                            .get(group_start)
                            .map_or(range.start, |(_, r)| r.start);
                        found.broken = Some((at, start, header.meta.position.next(), e));
                    }
                    break;
                }
            };
            if group_bytes == 0 && header.meta.position > until {
                break;
            }
            let len = usize::try_from(header.frame_len()).unwrap_or(usize::MAX);
            if rest.len() < len {
                found.cut = true;
                break;
            }
            let closes = header.meta.flags.is_link_end() || group_bytes >= LINK_GROUP_BYTES;
            found.frames.push((header, at..at + len));
            group_bytes += len as u64;
            at += len;
            if closes {
                found.groups.push(group_start..found.frames.len());
                group_start = found.frames.len();
                group_bytes = 0;
            }
        }
        if group_start < found.frames.len() {
            found.cut |= found.broken.is_none();
            found.frames.truncate(group_start);
        }
        found
    }
}

/// The frames of one group in a chunk: each one's header and the range of its bytes.
type GroupFrames<'a> = &'a [(FrameHeader, Range<usize>)];

/// A group to check, with the link it must continue.
type GroupToCheck<'a> = (ChainHash, GroupFrames<'a>);

/// Checks `checks` (groups in `bytes`, a chunk read at segment offset `base`), on several threads
/// when their frames take `group_bytes` or more of it; returns each group's result, in order.
fn check_groups(
    checks: &[GroupToCheck<'_>],
    bytes: &[u8],
    base: u64,
    group_bytes: usize,
) -> Vec<std::result::Result<(), GroupFailed>> {
    let check_all = |part: &[GroupToCheck<'_>]| {
        let mut check = GroupCheck::default();
        part.iter()
            .map(|(prev, frames)| check_group(&mut check, prev, frames, bytes, base))
            .collect::<Vec<_>>()
    };
    let threads = if group_bytes >= LINKS_AHEAD_PARALLEL_MIN {
        link_threads().min(checks.len()).max(1)
    } else {
        1
    };
    if threads == 1 {
        return check_all(checks);
    }
    let part = checks.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut parts = checks.chunks(part);
        let first = parts.next().unwrap_or_default();
        // A part whose thread cannot be started (the system is out of threads) is
        // checked here, after the first.
        let others: Vec<_> = parts
            .map(|p| {
                let thread = std::thread::Builder::new()
                    .name("journal-links".into())
                    .spawn_scoped(scope, move || check_all(p));
                (p, thread)
            })
            .collect();
        let mut results = check_all(first);
        for (p, thread) in others {
            // A checking thread cannot panic short of a bug; its groups are then checked
            // here, as are those of a thread that could not be started.
            let part = match thread {
                Ok(thread) => thread.join().unwrap_or_else(|_| check_all(p)),
                Err(_) => check_all(p),
            };
            results.extend(part);
        }
        results
    })
}

/// Checks one group's bodies and link, the group continuing `prev`.
fn check_group(
    check: &mut GroupCheck,
    prev: &ChainHash,
    frames: GroupFrames<'_>,
    bytes: &[u8],
    base: u64,
) -> std::result::Result<(), GroupFailed> {
    check.clear();
    let group_offset = frames.first().map_or(base, |(_, r)| base + r.start as u64);
    for (header, range) in frames {
        let failed = |error: FormatError| GroupFailed {
            group_offset,
            offset: base + range.start as u64,
            position: Some(header.meta.position),
            found_by_scan: matches!(error, FormatError::BodyChecksumMismatch { .. }),
            detail: error.to_string(),
        };
        let frame = bytes.get(range.clone()).unwrap_or_default();
        let body = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
        header.check_body(body).map_err(failed)?;
        check.push(prev, header, frame).map_err(|e| match e {
            // The link is the whole group's: name where the group starts.
            FormatError::ChainMismatch { .. } => GroupFailed {
                group_offset,
                offset: group_offset,
                position: frames.first().map(|(h, _)| h.meta.position),
                detail: format!(
                    "the group of linked frames from offset {group_offset} to {}: {e}",
                    base + range.start as u64
                ),
                found_by_scan: false,
            },
            e => failed(e),
        })?;
    }
    Ok(())
}

/// Why a scan stopped before the next frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The scan reached its end offset exactly.
    End,
    /// The bytes at the next frame's place are zero: unwritten space.
    Zeroed,
    /// The bytes at the next frame's place are not a valid frame.
    Damaged(FormatError),
}

/// A frame found by the scanner. The body borrows the scanner's buffer.
#[derive(Debug)]
pub(crate) struct Scanned<'a> {
    /// The frame's byte offset in the segment.
    pub offset: u64,
    /// The decoded, checksum-checked header.
    pub header: FrameHeader,
    /// The body, checksum-checked unless the caller asked otherwise
    /// ([`FrameScanner::next_frame`]).
    pub body: &'a [u8],
    /// The whole frame: its header's bytes, then `body`.
    pub frame: &'a [u8],
}

/// Reads frames one after another from `offset` up to `end`.
#[derive(Debug)]
pub(crate) struct FrameScanner {
    file: Arc<dyn StorageFile>,
    segment: SegmentId,
    offset: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl FrameScanner {
    pub(crate) fn new(
        file: Arc<dyn StorageFile>,
        segment: SegmentId,
        offset: u64,
        end: u64,
    ) -> Self {
        FrameScanner {
            file,
            segment,
            offset,
            end,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// The offset of the next frame.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Ensures bytes `offset..offset + len` are buffered and returns them.
    fn fill(&mut self, offset: u64, len: u64) -> Result<&[u8]> {
        let buffered_end = self.buf_start + self.buf.len() as u64;
        if !(self.buf_start <= offset && offset + len <= buffered_end) {
            let read_len = len.max(SCAN_CHUNK_BYTES).min(self.end - offset).max(len);
            let read_len = usize::try_from(read_len)
                .map_err(|_| Error::Internal("scan chunk does not fit memory".into()))?;
            self.buf.resize(read_len, 0);
            self.file
                .read_exact_at(&mut self.buf, offset)
                .map_err(Error::io_with(|| {
                    format!("reading segment {} at {offset}", self.segment)
                }))?;
            self.buf_start = offset;
        }
        let start = usize::try_from(offset - self.buf_start).unwrap_or(usize::MAX);
        let stop = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .saturating_add(start);
        self.buf
            .get(start..stop)
            .ok_or_else(|| Error::Internal("scanner buffer out of range".into()))
    }

    /// Checks the bodies and chain links of the whole groups in the next [`LINKS_AHEAD_BYTES`]
    /// from the scanner's offset, which must be a group's first frame (more when the first group
    /// is longer; none starting past position `until`: a reader of a few events hashes no more
    /// than their groups), the first group continuing `prev`, on several threads (the groups' links
    /// are independent once read: each frame stores its group's). Returns the frames of the groups
    /// that hold, in order, up to the first group that does not, and what is wrong with that one;
    /// a header that does not decode ends the groups checked, and the scan itself meets it. Reads
    /// ahead but does not move the scanner; the frames it returns stay buffered until the
    /// scanner has passed them.
    pub(crate) fn links_ahead(&mut self, prev: ChainHash, until: Position) -> Result<Ahead> {
        let offset = self.offset;
        let available = self.end.saturating_sub(offset);
        let longest = GROUP_READ_MAX.min(available);
        let first_len = LINKS_AHEAD_BYTES.min(available);
        let Some((len, groups)) = self.chunk_ahead(first_len, longest, until)? else {
            return Ok(Ahead::default());
        };
        let bytes = self.fill(offset, len)?;
        let checks = groups.to_check(prev);
        let group_bytes = groups.frames.last().map_or(0, |(_, r)| r.end);
        let results = check_groups(&checks, bytes, offset, group_bytes);
        let mut ahead = Ahead {
            held: Vec::with_capacity(groups.frames.len()),
            failed: groups.failure(offset, len == longest),
        };
        for ((prev, frames), result) in checks.iter().zip(results) {
            if let Err(failed) = result {
                ahead.failed = Some(failed);
                break;
            }
            let mut before = *prev;
            for (header, range) in frames.iter() {
                ahead.held.push(LinkChecked {
                    offset: offset + range.start as u64,
                    prev: before,
                    hash: header.hash,
                });
                before = header.hash;
            }
        }
        Ok(ahead)
    }

    /// Reads a chunk from the scanner's offset that holds at least one whole group, when the
    /// segment has one: `len` bytes first, four times more each time none is held whole, up to
    /// `longest`. Returns the chunk's length and its groups (none starting past position
    /// `until`), or `None` when there is nothing to read.
    fn chunk_ahead(
        &mut self,
        mut len: u64,
        longest: u64,
        until: Position,
    ) -> Result<Option<(u64, Groups)>> {
        loop {
            if len == 0 {
                return Ok(None);
            }
            let groups = Groups::split(self.fill(self.offset, len)?, until);
            if groups.groups.is_empty() && groups.cut && len < longest {
                len = len.saturating_mul(4).min(longest);
                continue;
            }
            return Ok(Some((len, groups)));
        }
    }

    /// The next frame, or why there is none. I/O errors are `Err`; what the bytes hold is
    /// `Ok(Err(stop))`.
    pub(crate) fn next(&mut self) -> Result<std::result::Result<Scanned<'_>, Stop>> {
        self.next_frame(true)
    }

    /// As [`FrameScanner::next`]; with `check_body` false, the body's checksum is not checked
    /// (the header's always is): for a frame the caller steps over without reading its body.
    pub(crate) fn next_frame(
        &mut self,
        check_body: bool,
    ) -> Result<std::result::Result<Scanned<'_>, Stop>> {
        let offset = self.offset;
        if offset >= self.end {
            return Ok(Err(Stop::End));
        }
        let available = self.end - offset;
        let header_len = FRAME_HEADER_LEN as u64;
        if available < header_len {
            let rest = self.fill(offset, available)?;
            return Ok(Err(if is_zeroed(rest) {
                Stop::Zeroed
            } else {
                Stop::Damaged(FormatError::Truncated {
                    needed: header_len,
                    available,
                })
            }));
        }
        let header_bytes = self.fill(offset, header_len)?;
        if is_zeroed(header_bytes) {
            return Ok(Err(Stop::Zeroed));
        }
        let header = match FrameHeader::decode(header_bytes) {
            Ok(header) => header,
            Err(e) => return Ok(Err(Stop::Damaged(e))),
        };
        let frame_len = header.frame_len();
        if frame_len > available {
            return Ok(Err(Stop::Damaged(FormatError::Truncated {
                needed: frame_len,
                available,
            })));
        }
        self.fill(offset, frame_len)?;
        let start = usize::try_from(offset - self.buf_start).unwrap_or(usize::MAX);
        let body_start = start.saturating_add(FRAME_HEADER_LEN);
        let body_end = body_start.saturating_add(header.body_len() as usize);
        let (Some(frame), Some(body)) = (
            self.buf.get(start..body_end),
            self.buf.get(body_start..body_end),
        ) else {
            return Err(Error::Internal("scanner buffer out of range".into()));
        };
        if check_body {
            if let Err(e) = header.check_body(body) {
                return Ok(Err(Stop::Damaged(e)));
            }
        }
        self.offset = offset + frame_len;
        Ok(Ok(Scanned {
            offset,
            header,
            body,
            frame,
        }))
    }
}

/// How many threads hash chain links ahead of a scan: the machine's parallelism, at most
/// [`LINKS_AHEAD_THREADS_MAX`].
fn link_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .min(LINKS_AHEAD_THREADS_MAX)
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use journal_format::frame::{encode_unlinked, link_group};
    use journal_format::{FrameFlags, FrameMeta};

    use super::*;
    use crate::sim_disk::{Faults, SimDisk};
    use crate::storage::{OpenMode, Storage};

    /// Frames as the writer links them: groups ended at the first frame that brings them to
    /// [`LINK_GROUP_BYTES`].
    struct Log {
        bytes: Vec<u8>,
        /// Each frame's offset and link.
        frames: Vec<(u64, ChainHash)>,
        /// Each group's first frame (an index into `frames`).
        groups: Vec<usize>,
    }

    /// Frames of `body_len`-byte bodies from offset 0, one each of `bodies`.
    fn log_of(bodies: &[usize]) -> Log {
        let mut log = Log {
            bytes: Vec::new(),
            frames: Vec::new(),
            groups: Vec::new(),
        };
        let mut prev = ChainHash::GENESIS;
        let mut group_start = 0usize;
        for (i, len) in bodies.iter().enumerate() {
            if log.bytes.len() == group_start {
                log.groups.push(i);
            }
            let frame_len = FRAME_HEADER_LEN + len;
            let ends = i + 1 == bodies.len()
                || (log.bytes.len() - group_start + frame_len) as u64 >= LINK_GROUP_BYTES;
            let meta = FrameMeta {
                position: Position(i as u64 + 1),
                recorded_at_ns: 1,
                stream_version: i as u64 + 1,
                flags: if ends {
                    FrameFlags::LINK_END
                } else {
                    FrameFlags::NONE
                },
            };
            log.frames
                .push((log.bytes.len() as u64, ChainHash::GENESIS));
            let body = vec![u8::try_from(i % 251).unwrap_or(0); *len];
            encode_unlinked(&mut log.bytes, &meta, &body).unwrap();
            if ends {
                prev = link_group(&mut log.bytes[group_start..], &prev).unwrap();
                for frame in &mut log.frames[*log.groups.last().unwrap()..] {
                    frame.1 = prev;
                }
                group_start = log.bytes.len();
            }
        }
        log
    }

    /// `n` frames of 600-byte bodies (672 bytes each: groups of 98 frames).
    fn frames(n: usize) -> Log {
        log_of(&vec![600; n])
    }

    /// A scanner over `bytes`, held by a file on the simulated disk.
    fn scanner(bytes: Vec<u8>) -> FrameScanner {
        let file = SimDisk::new(0, Faults::default())
            .open(Path::new("segment"), OpenMode::CreateNew)
            .unwrap();
        file.write_all_at(&bytes, 0).unwrap();
        FrameScanner::new(file, SegmentId(1), 0, bytes.len() as u64)
    }

    fn offsets(ahead: &Ahead) -> Vec<u64> {
        ahead.held.iter().map(|c| c.offset).collect()
    }

    #[test]
    fn links_ahead_are_every_frame_of_the_whole_runs_of_the_chunk_up_to_the_first_that_does_not_hold(
    ) {
        let log = frames(2_000);
        assert_eq!(log.groups[1], 98, "groups of 98 frames of 672 bytes");
        let whole_groups = (LINKS_AHEAD_BYTES / (98 * 672)) as usize;
        let ahead = scanner(log.bytes.clone())
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert_eq!(
            ahead.held.len(),
            whole_groups * 98,
            "the whole groups in one chunk"
        );
        assert_eq!(ahead.failed, None);
        for (i, c) in ahead.held.iter().enumerate() {
            let prev = if i == 0 {
                ChainHash::GENESIS
            } else {
                log.frames[i - 1].1
            };
            assert_eq!(
                (c.offset, c.prev, c.hash),
                (log.frames[i].0, prev, log.frames[i].1)
            );
        }

        // A body byte changed deep in the chunk (checked by another thread than the first):
        // the groups before its group are given, and what is wrong with it is named.
        let mut forged = log.bytes.clone();
        let at = usize::try_from(log.frames[1_200].0).unwrap() + FRAME_HEADER_LEN + 7;
        forged[at] ^= 1;
        let ahead = scanner(forged)
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert_eq!(ahead.held.len(), 1_200 / 98 * 98);
        let failed = ahead.failed.unwrap();
        assert_eq!(
            (
                failed.group_offset,
                failed.offset,
                failed.position,
                failed.found_by_scan
            ),
            (
                log.frames[1_176].0,
                log.frames[1_200].0,
                Some(Position(1_201)),
                true
            )
        );
        assert!(failed.detail.contains("body checksum"), "{}", failed.detail);

        // A group linked again from another link, its checksums made to agree: its link no
        // longer continues the chain, which the group is named for.
        let mut relinked = log.bytes.clone();
        let (start, end) = (log.frames[490].0 as usize, log.frames[588].0 as usize);
        for frame in log.frames[490..588].iter() {
            let header = frame.0 as usize;
            relinked[header..header + 4].fill(0);
            relinked[header + 40..header + 72].fill(0);
        }
        link_group(&mut relinked[start..end], &ChainHash([5; 32])).unwrap();
        let ahead = scanner(relinked)
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert_eq!(ahead.held.len(), 490);
        let failed = ahead.failed.unwrap();
        assert_eq!(
            (failed.offset, failed.position, failed.found_by_scan),
            (start as u64, Some(Position(491)), false)
        );
        assert!(
            failed.detail.contains("chain link mismatch"),
            "{}",
            failed.detail
        );

        // No group starting past the position asked for; the group holding it whole.
        let ahead = scanner(log.bytes.clone())
            .links_ahead(ChainHash::GENESIS, Position(10))
            .unwrap();
        assert_eq!(ahead.held.len(), 98);

        // The wrong link to continue: nothing holds.
        let ahead = scanner(log.bytes)
            .links_ahead(log.frames[5].1, Position(u64::MAX))
            .unwrap();
        assert!(ahead.held.is_empty());
        assert_eq!(ahead.failed.map(|f| f.offset), Some(0));
    }

    #[test]
    fn a_run_longer_than_the_chunk_is_read_whole() {
        // Small frames, then one of 3 MiB ending the group; then a group of its own.
        let mut bodies = vec![600; 20];
        bodies.push(3 << 20);
        bodies.push(600);
        let log = log_of(&bodies);
        assert_eq!(log.groups, vec![0, 21]);
        let ahead = scanner(log.bytes)
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        // The chunk grown to hold the first group (to 4 MiB) holds the second too.
        assert_eq!(
            offsets(&ahead),
            log.frames.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        assert_eq!(ahead.failed, None);
    }

    #[test]
    fn a_run_the_frames_leave_unfinished_is_named() {
        let log = frames(150);
        // The scan ends inside the second group (frames 98..150).
        let end = log.frames[120].0;
        let file = SimDisk::new(0, Faults::default())
            .open(Path::new("segment"), OpenMode::CreateNew)
            .unwrap();
        file.write_all_at(&log.bytes, 0).unwrap();
        let mut scanner = FrameScanner::new(file, SegmentId(1), log.frames[98].0, end);
        let ahead = scanner
            .links_ahead(log.frames[97].1, Position(u64::MAX))
            .unwrap();
        assert!(ahead.held.is_empty());
        let failed = ahead.failed.unwrap();
        assert_eq!(failed.offset, log.frames[98].0);
        assert!(failed.detail.contains("does not end"), "{}", failed.detail);
    }

    #[test]
    fn a_reader_is_vouched_for_only_the_frames_found_to_hold() {
        let log = frames(300);
        let f = &log.frames;
        let mut scanner = scanner(log.bytes.clone());
        let mut ahead = LinksAhead::default();
        ahead
            .refill(&mut scanner, ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert!(ahead.held(f[0].0, ChainHash::GENESIS, f[0].1));
        // Frame 3 read after frame 1 (frame 2 stepped over): found, frame 2 forgotten.
        assert!(ahead.held(f[2].0, f[1].1, f[2].1));
        // The second group's first frame continues the first group's link.
        assert!(ahead.held(f[98].0, f[97].1, f[98].1));
        // A frame asked for with another link than it was checked against, or another stored
        // link, is not vouched for.
        assert!(!ahead.held(f[99].0, ChainHash::GENESIS, f[99].1));
        assert!(!ahead.held(f[150].0, f[149].1, f[0].1));
        assert_eq!(ahead.failure(0), None);
    }
}
