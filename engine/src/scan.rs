//! Sequential frame scanning over one segment file, in bounded chunks. The scanner reports
//! *what* it found where (a frame, zeroed space, damage); callers decide what that means.
//! Readers that verify the chain have the bodies and links of the frames ahead of them
//! checked a chunk at a time on several threads ([`LinksAhead`]).

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use journal_format::frame::is_zeroed;
use journal_format::{ChainHash, FormatError, FrameHeader, Position, SegmentId, FRAME_HEADER_LEN};

use crate::error::{Error, Result};
use crate::storage::StorageFile;

/// How much the scanner reads at a time (frames larger than this are read whole).
const SCAN_CHUNK_BYTES: u64 = 256 * 1024;

/// How much a scan that checks chain links ahead reads at a time: enough frames (about 1,560
/// with 600-byte bodies) that starting the threads that hash them costs little beside the
/// hashing. (A frame larger than this is checked by the reader itself.)
const LINKS_AHEAD_BYTES: u64 = 1024 * 1024;

/// The fewest frames worth hashing on more than one thread.
const LINKS_AHEAD_PARALLEL_MIN: usize = 64;

/// The most threads that hash chain links ahead of one scan.
const LINKS_AHEAD_THREADS_MAX: usize = 8;

/// One frame whose body checksum and chain link were checked ahead of the scan that reads it
/// ([`FrameScanner::links_ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkChecked {
    /// The frame's byte offset in the segment.
    pub offset: u64,
    /// The link the frame was checked to continue: the stored link of the frame before it.
    pub prev: ChainHash,
    /// The frame's own stored link, which `BLAKE3(prev ‖ header ‖ body)` was found to equal
    /// (its body matching its checksum).
    pub hash: ChainHash,
}

/// The chain links checked ahead of a reader that walks frames in order: it asks for the next
/// chunk's links before it reads a frame ([`LinksAhead::refill`]), and whether a frame's link
/// was found to hold when it reads it ([`LinksAhead::held`]); a frame not found held is
/// checked by the reader itself, which names what is wrong.
#[derive(Debug, Default)]
pub(crate) struct LinksAhead(VecDeque<LinkChecked>);

impl LinksAhead {
    /// Checks the links of the next chunk of frames from `scanner`'s offset, the first
    /// continuing `prev` and none past position `until`, when none checked ahead are left.
    pub(crate) fn refill(
        &mut self,
        scanner: &mut FrameScanner,
        prev: ChainHash,
        until: Position,
    ) -> Result<()> {
        if self.0.is_empty() {
            self.0 = scanner.links_ahead(prev, until)?.into();
        }
        Ok(())
    }

    /// Whether the next frame checked ahead starts at `offset`: its body need not be checked
    /// when it is read, if [`LinksAhead::held`] then vouches for it.
    pub(crate) fn next_at(&self, offset: u64) -> bool {
        self.0.front().is_some_and(|c| c.offset == offset)
    }

    /// Whether the frame at `offset`, storing link `hash`, was found ahead to continue `prev`
    /// with a body that matches its checksum. Forgets the frames before it.
    pub(crate) fn held(&mut self, offset: u64, prev: ChainHash, hash: ChainHash) -> bool {
        while self.0.front().is_some_and(|c| c.offset < offset) {
            self.0.pop_front();
        }
        let held = self.0.front() == Some(&LinkChecked { offset, prev, hash });
        if held {
            self.0.pop_front();
        }
        held
    }
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
                .map_err(|_| Error::InvalidInput("scan chunk does not fit memory".into()))?;
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
            .ok_or_else(|| Error::InvalidInput("scanner buffer out of range".into()))
    }

    /// Checks the body checksums and chain links of the whole frames in the next
    /// [`LINKS_AHEAD_BYTES`] from the scanner's offset (none past position `until`: a reader
    /// of a few events hashes no more than those), the first continuing `prev`, on several
    /// threads (BLAKE3 of each frame is most of what a verified scan costs, and frames' links
    /// are independent once read: each frame stores its own). Returns the frames that hold, in
    /// order, up to the first that does not or whose header does not decode: the scan itself
    /// then meets that frame and names what is wrong with it. Reads ahead but does not move
    /// the scanner; the frames it returns stay buffered until the scanner has passed them.
    pub(crate) fn links_ahead(
        &mut self,
        prev: ChainHash,
        until: Position,
    ) -> Result<Vec<LinkChecked>> {
        let offset = self.offset;
        let len = LINKS_AHEAD_BYTES.min(self.end.saturating_sub(offset));
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.fill(offset, len)?;
        // The frames held whole in `bytes`, each with the link it must continue.
        let mut frames: Vec<(u64, ChainHash, FrameHeader, &[u8])> = Vec::new();
        let mut at = 0usize;
        let mut link = prev;
        while let Some(rest) = bytes.get(at..) {
            let Ok(header) = FrameHeader::decode(rest) else {
                break;
            };
            if header.meta.position > until {
                break;
            }
            let body_end = FRAME_HEADER_LEN.saturating_add(header.body_len() as usize);
            let Some(body) = rest.get(FRAME_HEADER_LEN..body_end) else {
                break;
            };
            let hash = header.hash;
            frames.push((offset + at as u64, link, header, body));
            link = hash;
            at += body_end;
        }
        let check = |frames: &[(u64, ChainHash, FrameHeader, &[u8])]| -> Vec<bool> {
            frames
                .iter()
                .map(|(_, prev, header, body)| {
                    header.check_body(body).is_ok() && header.check_link(prev, body).is_ok()
                })
                .collect()
        };
        let threads = link_threads()
            .min(frames.len() / LINKS_AHEAD_PARALLEL_MIN)
            .max(1);
        let held: Vec<bool> = if threads == 1 {
            check(&frames)
        } else {
            let part = frames.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let mut parts = frames.chunks(part);
                let first = parts.next().unwrap_or_default();
                // A part whose thread cannot be started (the system is out of threads) is
                // checked here, after the first.
                let others: Vec<_> = parts
                    .map(|p| {
                        std::thread::Builder::new()
                            .name("journal-links".into())
                            .spawn_scoped(scope, move || check(p))
                            .map_err(|_| p)
                    })
                    .collect();
                let mut held = check(first);
                let mut joined = true;
                for other in others {
                    // A hashing thread cannot panic short of a bug; its frames and those after
                    // them then count as unchecked, and the scan checks them itself.
                    let part = match other {
                        Ok(thread) => thread.join().ok(),
                        Err(p) => Some(check(p)),
                    };
                    match part {
                        Some(part) if joined => held.extend(part),
                        _ => joined = false,
                    }
                }
                held
            })
        };
        Ok(frames
            .iter()
            .zip(held)
            .take_while(|(_, ok)| *ok)
            .map(|((offset, prev, header, _), _)| LinkChecked {
                offset: *offset,
                prev: *prev,
                hash: header.hash,
            })
            .collect())
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
            return Err(Error::InvalidInput("scanner buffer out of range".into()));
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

    use journal_format::frame::encode_frame;
    use journal_format::{FrameFlags, FrameMeta};

    use super::*;
    use crate::sim_disk::{Faults, SimDisk};
    use crate::storage::{OpenMode, Storage};

    /// `n` frames of about 600 bytes from offset 0, and each frame's offset and link.
    fn frames(n: u64) -> (Vec<u8>, Vec<(u64, ChainHash)>) {
        let mut bytes = Vec::new();
        let mut links = Vec::new();
        let mut prev = ChainHash::GENESIS;
        for i in 1..=n {
            let meta = FrameMeta {
                position: Position(i),
                recorded_at_ns: 1,
                stream_version: i,
                flags: FrameFlags::NONE,
            };
            let offset = bytes.len() as u64;
            let body = vec![u8::try_from(i % 251).unwrap_or(0); 600];
            prev = encode_frame(&mut bytes, &prev, &meta, &body).unwrap();
            links.push((offset, prev));
        }
        (bytes, links)
    }

    /// A scanner over `bytes`, held by a file on the simulated disk.
    fn scanner(bytes: Vec<u8>) -> FrameScanner {
        let file = SimDisk::new(0, Faults::default())
            .open(Path::new("segment"), OpenMode::CreateNew)
            .unwrap();
        file.write_all_at(&bytes, 0).unwrap();
        FrameScanner::new(file, SegmentId(1), 0, bytes.len() as u64)
    }

    #[test]
    fn links_ahead_are_every_whole_frame_of_the_chunk_up_to_the_first_that_does_not_hold() {
        let (bytes, links) = frames(2_000);
        let chunk = LINKS_AHEAD_BYTES / 672;
        let checked = scanner(bytes.clone())
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert_eq!(checked.len() as u64, chunk, "the whole frames in one chunk");
        for (i, c) in checked.iter().enumerate() {
            let prev = if i == 0 {
                ChainHash::GENESIS
            } else {
                links[i - 1].1
            };
            assert_eq!((c.offset, c.prev, c.hash), (links[i].0, prev, links[i].1));
        }

        // A body byte changed deep in the chunk (hashed by another thread than the first):
        // the frames before it are given, and nothing from it on.
        let mut forged = bytes.clone();
        let at = usize::try_from(links[1_200].0).unwrap() + FRAME_HEADER_LEN + 7;
        forged[at] ^= 1;
        let checked = scanner(forged)
            .links_ahead(ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert_eq!(checked.len(), 1_200);

        // None past the position asked for.
        let checked = scanner(bytes.clone())
            .links_ahead(ChainHash::GENESIS, Position(10))
            .unwrap();
        assert_eq!(checked.len(), 10);

        // The wrong link to continue: nothing holds.
        let checked = scanner(bytes)
            .links_ahead(links[5].1, Position(u64::MAX))
            .unwrap();
        assert!(checked.is_empty());
    }

    #[test]
    fn a_reader_checks_itself_the_frames_not_found_to_hold() {
        let (bytes, links) = frames(300);
        let mut scanner = scanner(bytes);
        let mut ahead = LinksAhead::default();
        ahead
            .refill(&mut scanner, ChainHash::GENESIS, Position(u64::MAX))
            .unwrap();
        assert!(ahead.held(links[0].0, ChainHash::GENESIS, links[0].1));
        // Frame 3 read after frame 1 (frame 2 stepped over): found, frame 2 forgotten.
        assert!(ahead.held(links[2].0, links[1].1, links[2].1));
        // A frame asked for with another link than it was checked against, or another stored
        // link, is not vouched for.
        assert!(!ahead.held(links[3].0, links[0].1, links[3].1));
        assert!(!ahead.held(links[4].0, links[3].1, links[0].1));
    }
}
