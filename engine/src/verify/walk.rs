//! The walk over the log that `verify` makes, segment by segment: each header, every frame
//! (checksums, positions, the chain across all segments, batch boundaries, the digest kept
//! outside the journal), each footer and its sparse index; and segment files the log does not
//! hold. What each event references is gathered on the way for the index and blob checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use journal_format::{
    ChainHash, Envelope, Position, SegmentFooter, SegmentHeader, SegmentId,
    SEGMENT_FOOTER_TRAILER_LEN, SEGMENT_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::log::scan::{FrameScanner, LinksAhead, Scanned, Stop};
use crate::log::segment::{SegmentState, SEGMENTS_DIR};
use crate::log::Segment;
use crate::verify::index_check::{Counts, IndexCompare};
use crate::verify::report::Problems;
use crate::verify::tree_check::TreeCompare;

/// How many events the walk reads between two calls of its progress callback.
const PROGRESS_EVENTS: u64 = 4096;

/// Bytes checked and bytes in all, and the callback told about them.
struct Progress<'a> {
    /// Bytes checked so far.
    done: u64,
    /// The bytes of the segments already walked.
    bytes_before: u64,
    /// The bytes of all segments.
    total: u64,
    tell: &'a mut dyn FnMut(u64, u64),
}

impl Progress<'_> {
    /// Counts a frame of `len` bytes, the walk's `events`th, telling every so many events.
    fn frame(&mut self, len: u64, events: u64) {
        self.done += len;
        if events.is_multiple_of(PROGRESS_EVENTS) {
            (self.tell)(self.done, self.total);
        }
    }

    /// Counts a segment walked whose frames end at `end_offset`, and tells.
    fn segment(&mut self, end_offset: u64) {
        self.bytes_before += end_offset;
        self.done = self.done.max(self.bytes_before);
        (self.tell)(self.done, self.total);
    }
}

/// What the walk carries from frame to frame and from segment to segment.
pub(super) struct Walk<'a> {
    /// The problems found.
    pub problems: Problems,
    /// The index being compared with the log.
    pub index: IndexCompare<'a>,
    /// The Merkle tree being compared with the log.
    pub tree: TreeCompare<'a>,
    /// What was counted, for the index's counts.
    pub counts: Counts,
    /// Each blob referenced (hex, lower case), with the first position referencing it.
    pub blob_refs: BTreeMap<String, Position>,
    /// Whether a frame held the digest's position.
    pub digest_seen: bool,
    /// The position and link kept outside the journal, if any.
    digest: Option<(Position, ChainHash)>,
    /// The position the next frame must hold.
    expected: Position,
    /// The link the last frame (or segment header) stored; `None` after damage, where it is not
    /// known.
    prev: Option<ChainHash>,
    progress: Progress<'a>,
}

/// What the walk over one segment's frames finds.
struct InSegment {
    /// The footer's sparse index, as the segment's state holds it: offset → position.
    entries: BTreeMap<u64, Position>,
    /// How many of `entries` pointed at a frame.
    entries_seen: usize,
    /// Whether the last frame read does not end a batch.
    batch_open: bool,
    /// Frames read.
    count: u64,
    /// The link the last frame read stored.
    last_hash: Option<ChainHash>,
    /// Where the frames read end.
    end: u64,
}

impl<'a> Walk<'a> {
    /// A walk from `start` (the first position and the link before it: position 1 and the
    /// genesis link, or the archive's boundary when it is not attached), checking the `digest` if given, comparing with
    /// `index`, telling `progress` of bytes checked out of `total`.
    pub fn new(
        start: (Position, ChainHash),
        digest: Option<(Position, ChainHash)>,
        index: IndexCompare<'a>,
        tree: TreeCompare<'a>,
        total: u64,
        progress: &'a mut dyn FnMut(u64, u64),
    ) -> Walk<'a> {
        Walk {
            problems: Problems::default(),
            index,
            tree,
            counts: Counts::default(),
            blob_refs: BTreeMap::new(),
            digest_seen: false,
            digest,
            expected: start.0,
            prev: Some(start.1),
            progress: Progress {
                done: 0,
                bytes_before: 0,
                total,
                tell: progress,
            },
        }
    }

    /// Walks one segment, whose frames end where `state` says: its header, its frames, where
    /// they end, and its footer when it is sealed.
    ///
    /// # Errors
    /// Failing to read the segment.
    pub fn segment(&mut self, segment: &Segment, state: &SegmentState) -> Result<()> {
        let id = segment.id;
        self.header(segment)?;
        let file_len = segment
            .file
            .len()
            .map_err(Error::io_with(|| format!("reading the length of {id}")))?;
        if file_len < state.end_offset {
            self.problems.problem(
                "truncated",
                Some(id),
                Some(file_len),
                None,
                format!(
                    "the segment is {file_len} bytes long but its frames end at {}",
                    state.end_offset
                ),
            );
        }
        let found = self.frames(segment, state, file_len)?;
        self.segment_end(id, state, &found);
        if state.sealed {
            check_footer(
                &mut self.problems,
                segment,
                found.count,
                Position(self.expected.0 - 1),
                found.last_hash,
            )?;
        }
        self.progress.segment(state.end_offset);
        Ok(())
    }

    /// Checks `segment`'s header: the segment it names, and that it continues the position and
    /// link the segments before it end at. The walk goes on from what the header says.
    fn header(&mut self, segment: &Segment) -> Result<()> {
        let id = segment.id;
        let mut header_bytes = [0u8; SEGMENT_HEADER_LEN];
        segment
            .file
            .read_exact_at(&mut header_bytes, 0)
            .map_err(Error::io_with(|| format!("reading segment {id}")))?;
        let h = match SegmentHeader::decode(&header_bytes) {
            Ok(h) => h,
            Err(e) => {
                self.problems.problem(
                    "segment_header",
                    Some(id),
                    Some(0),
                    Some(self.expected),
                    e.to_string(),
                );
                self.prev = None;
                return Ok(());
            }
        };
        if h.segment_id != id {
            self.problems.problem(
                "segment_header",
                Some(id),
                Some(0),
                None,
                format!("header names segment {}", h.segment_id.0),
            );
        }
        if h.first_position != self.expected {
            self.problems.problem(
                "segment_header",
                Some(id),
                Some(0),
                Some(self.expected),
                format!(
                    "segment starts at position {}, expected {}",
                    h.first_position, self.expected
                ),
            );
            self.expected = h.first_position;
        }
        match self.prev {
            Some(p) if p != h.prev_hash => self.problems.problem(
                "chain",
                Some(id),
                Some(0),
                Some(self.expected),
                format!(
                    "segment's previous-hash {} differs from the last link before it {p}",
                    h.prev_hash
                ),
            ),
            _ => {}
        }
        self.prev = Some(h.prev_hash);
        Ok(())
    }

    /// Reads `segment`'s frames, up to where `state` says they end or the file (`file_len`
    /// bytes) does when it is shorter: positions in sequence and the chain, then each frame's
    /// contents ([`Walk::frame`]). Damage ends the segment's frames.
    fn frames(
        &mut self,
        segment: &Segment,
        state: &SegmentState,
        file_len: u64,
    ) -> Result<InSegment> {
        let id = segment.id;
        let mut found = InSegment {
            entries: state
                .sparse
                .iter()
                .map(|e| (e.offset.0, e.position))
                .collect(),
            entries_seen: 0,
            batch_open: false,
            count: 0,
            last_hash: self.prev,
            end: 0,
        };
        let mut scanner = FrameScanner::new(
            Arc::clone(&segment.file),
            id,
            SEGMENT_HEADER_LEN as u64,
            state.end_offset.min(file_len),
        );
        let mut ahead = LinksAhead::default();
        // Whether the next frame continues the group of the last one: a group is checked whole
        // when its first frame comes (ahead); one that began where the link before was not
        // known (after damage) is checked only for storing one link.
        let mut group_open = self.prev.is_none();
        loop {
            let offset = scanner.offset();
            if let (Some(p), false) = (self.prev, group_open) {
                ahead.refill(&mut scanner, p, Position(u64::MAX))?;
            }
            let frame = match scanner.next()? {
                Ok(frame) => frame,
                Err(Stop::End) => break,
                Err(stop) => {
                    let detail = match stop {
                        Stop::Damaged(e) => e.to_string(),
                        _ => String::from("zeroed bytes where a frame belongs"),
                    };
                    self.problems.problem(
                        "frame",
                        Some(id),
                        Some(offset),
                        Some(self.expected),
                        detail,
                    );
                    self.prev = None;
                    break;
                }
            };
            self.sequence_and_chain(id, &frame, &mut ahead, group_open);
            self.prev = Some(frame.header.hash);
            group_open = !frame.header.meta.flags.is_link_end();
            found.last_hash = self.prev;
            self.frame(id, &frame, &mut found);
        }
        found.end = scanner.offset();
        Ok(found)
    }

    /// Checks that `frame` of segment `id` holds the position expected and, unless the link
    /// before it is not known, that the chain holds there as `ahead` checked it (`group_open`:
    /// the frame continues the group of the one before).
    fn sequence_and_chain(
        &mut self,
        id: SegmentId,
        frame: &Scanned<'_>,
        ahead: &mut LinksAhead,
        group_open: bool,
    ) {
        let position = frame.header.meta.position;
        if position != self.expected {
            self.problems.problem(
                "position_sequence",
                Some(id),
                Some(frame.offset),
                Some(self.expected),
                format!("frame holds position {position}"),
            );
        }
        // What a scan of a group's frames meets itself (a body's checksum) is reported where it
        // meets it.
        let judged = self
            .prev
            .map(|p| ahead.judge(frame.offset, position, p, frame.header.hash, group_open));
        if let Some(Err(f)) = judged {
            if !f.found_by_scan {
                self.problems.problem(
                    "chain",
                    Some(id),
                    Some(f.offset),
                    Some(f.position.unwrap_or(position)),
                    f.detail,
                );
            }
        }
    }

    /// Checks what `frame` of segment `id` holds: against the footer's sparse index and the
    /// index's, the batch it belongs to, the digest, its leaf of the tree, its event; then counts
    /// it.
    fn frame(&mut self, id: SegmentId, frame: &Scanned<'_>, found: &mut InSegment) {
        let position = frame.header.meta.position;
        if let Some(p) = found.entries.get(&frame.offset) {
            found.entries_seen += 1;
            if *p != position {
                self.problems.problem(
                    "footer",
                    Some(id),
                    Some(frame.offset),
                    Some(position),
                    format!("sparse index says position {p} starts here"),
                );
            }
        }
        self.index
            .sparse_at(&mut self.problems, id, frame.offset, position);
        found.batch_open = !frame.header.meta.flags.is_end_of_batch();
        self.digest_at(id, frame);
        self.tree.leaf(position, frame.body);
        self.event(id, frame);
        found.count += 1;
        self.counts.events += 1;
        self.expected = position.next();
        self.progress
            .frame(frame.header.frame_len(), self.counts.events);
    }

    /// Checks `frame` of segment `id` against the digest, when it holds the digest's position.
    fn digest_at(&mut self, id: SegmentId, frame: &Scanned<'_>) {
        let position = frame.header.meta.position;
        let Some((digest_position, digest_hash)) = self.digest else {
            return;
        };
        if digest_position != position {
            return;
        }
        self.digest_seen = true;
        if digest_hash != frame.header.hash {
            self.problems.problem(
                "digest_mismatch",
                Some(id),
                Some(frame.offset),
                Some(position),
                format!(
                "the kept digest says {digest_hash}, the journal holds {}: history was rewritten",
                frame.header.hash
            ),
            );
        }
    }

    /// Decodes the event `frame` of segment `id` holds: gathers the blobs it references and
    /// counts whether it names a task and a run, then compares it with the index.
    fn event(&mut self, id: SegmentId, frame: &Scanned<'_>) {
        let position = frame.header.meta.position;
        match Envelope::from_msgpack(frame.body) {
            Ok(envelope) => {
                for hex in envelope.blob_refs() {
                    self.blob_refs
                        .entry(hex.to_ascii_lowercase())
                        .or_insert(position);
                }
                self.counts.with_task += u64::from(envelope.task_id.is_some());
                self.counts.with_run += u64::from(envelope.run_id.is_some());
                self.index.event(&mut self.problems, id, frame, envelope);
            }
            Err(e) => self.problems.problem(
                "decode",
                Some(id),
                Some(frame.offset),
                Some(position),
                e.to_string(),
            ),
        }
    }

    /// Reports what the end of segment `id`'s frames (`found`) shows against its `state`:
    /// frames missing before its last position, a batch left open, footer sparse entries that
    /// point at no frame.
    fn segment_end(&mut self, id: SegmentId, state: &SegmentState, found: &InSegment) {
        if self.expected <= state.last_position && self.prev.is_some() {
            self.problems.problem(
                "truncated",
                Some(id),
                Some(found.end),
                Some(self.expected),
                format!(
                    "the segment's frames end before position {}, its last",
                    state.last_position
                ),
            );
        }
        if found.batch_open {
            self.problems.problem(
                "unfinished_batch",
                Some(id),
                Some(state.end_offset),
                Some(Position(self.expected.0 - 1)),
                String::from("the segment's last frame does not end a batch"),
            );
        }
        if found.entries_seen != found.entries.len() {
            self.problems.problem(
                "footer",
                Some(id),
                None,
                None,
                format!(
                    "{} sparse index entries point at no frame",
                    found.entries.len() - found.entries_seen
                ),
            );
        }
    }
}

/// Checks the footer of a sealed `segment` against its frames: `count` of them, the last at
/// position `last` storing `last_hash` (`None`: not known, after damage).
fn check_footer(
    problems: &mut Problems,
    segment: &Segment,
    count: u64,
    last: Position,
    last_hash: Option<ChainHash>,
) -> Result<()> {
    let id = segment.id;
    let len = segment
        .file
        .len()
        .map_err(Error::io("reading a segment length"))?;
    let trailer_at = len.saturating_sub(SEGMENT_FOOTER_TRAILER_LEN as u64);
    let mut trailer = [0u8; SEGMENT_FOOTER_TRAILER_LEN];
    segment
        .file
        .read_exact_at(&mut trailer, trailer_at)
        .map_err(Error::io_with(|| format!("reading the footer of {id}")))?;
    let footer = SegmentFooter::decode_trailer(&trailer, len).and_then(|t| {
        let mut entries = vec![0u8; usize::try_from(trailer_at - t.index_offset.0).unwrap_or(0)];
        segment
            .file
            .read_exact_at(&mut entries, t.index_offset.0)
            .map_err(|e| journal_format::FormatError::InconsistentFooter(e.to_string()))?;
        SegmentFooter::decode(&t, &entries)
    });
    match footer {
        Err(e) => problems.problem("footer", Some(id), Some(trailer_at), None, e.to_string()),
        Ok(f) => {
            if f.count != count || f.last_position != last || Some(f.last_hash) != last_hash {
                problems.problem("footer", Some(id), Some(trailer_at), Some(last), format!(
                    "footer says {} frames ending at position {} with link {}; the frames say {count}, {last}, {}",
                    f.count,
                    f.last_position,
                    f.last_hash,
                    last_hash.map_or_else(|| String::from("unknown"), |h| h.to_hex())
                ));
            }
        }
    }
    Ok(())
}

/// Reports every segment file in `journal`'s segments directory that is not part of its log.
pub(super) fn unexpected_segments(journal: &Journal, problems: &mut Problems) {
    let names = journal
        .log()
        .segments()
        .iter()
        .map(|s| s.id.file_name())
        .collect::<BTreeSet<_>>();
    let seg_dir = journal.dir().join(SEGMENTS_DIR);
    let Ok(listing) = std::fs::read_dir(&seg_dir) else {
        return;
    };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".seg") && !names.contains(&name) {
            problems.problem(
                "unexpected_segment",
                SegmentId::from_file_name(&name),
                None,
                None,
                format!("segment file {name} is not part of the log"),
            );
        }
    }
}
