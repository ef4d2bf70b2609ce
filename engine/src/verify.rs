//! `verify`: an independent walk over everything the journal stores. Every frame's checksums,
//! the chain across all segments, batch boundaries, segment headers and footers (and their
//! sparse indexes), the index against the log (nothing missing, nothing extra), every referenced
//! blob against its hash, and optionally a digest (position and hash) the user kept outside the
//! journal, which also catches truncated or rewritten history. It reports every problem with
//! its place; it repairs nothing.

use std::collections::{BTreeMap, BTreeSet};

use journal_format::{
    ChainHash, Envelope, Location, Position, SegmentFooter, SegmentHeader, SegmentId,
    SEGMENT_FOOTER_TRAILER_LEN, SEGMENT_HEADER_LEN,
};
use serde::Serialize;

use crate::blobs::BlobCheck;
use crate::error::{Error, Result};
use crate::index::IndexChecker;
use crate::journal::Journal;
use crate::log::entries::index_entry;
use crate::log::scan::{FrameScanner, LinksAhead, Stop};
use crate::log::segment::SEGMENTS_DIR;
use crate::log::Head;

/// What `verify` checks beyond the log itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyOptions {
    /// A position and chain link kept outside the journal; the journal must hold that exact
    /// link at that position.
    pub digest: Option<(Position, ChainHash)>,
    /// Check the index against the log.
    pub check_index: bool,
    /// Check referenced blobs (and every stored blob) against their hashes.
    pub check_blobs: bool,
}

impl Default for VerifyOptions {
    fn default() -> VerifyOptions {
        VerifyOptions {
            digest: None,
            check_index: true,
            check_blobs: true,
        }
    }
}

/// One problem found, with its place.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// What kind of problem: `segment_header`, `frame`, `truncated`, `position_sequence`, `chain`,
    /// `unfinished_batch`, `footer`, `decode`, `index_missing`, `index_extra`,
    /// `unexpected_segment`, `blob_missing`, `blob_mismatch`, `digest_mismatch`,
    /// `digest_beyond_head`.
    pub kind: &'static str,
    /// The segment file, when the problem is in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// The byte offset in that segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The position concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

/// The head of the journal as `verify` reports it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReportHead {
    /// The head position.
    pub position: u64,
    /// The head's chain link, hex.
    pub hash: String,
}

/// The result of `verify`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct VerifyReport {
    /// Whether no problem was found.
    pub ok: bool,
    /// How many events were checked.
    pub events: u64,
    /// How many segments were checked.
    pub segments: usize,
    /// The head that was checked up to.
    pub head: ReportHead,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

struct Walk {
    problems: Vec<Problem>,
}

impl Walk {
    fn problem(
        &mut self,
        kind: &'static str,
        segment: Option<SegmentId>,
        offset: Option<u64>,
        position: Option<Position>,
        detail: String,
    ) {
        self.problems.push(Problem {
            kind,
            segment: segment.map(SegmentId::file_name),
            offset,
            position: position.map(|p| p.0),
            detail,
        });
    }
}

impl Journal {
    /// Checks everything the journal stores, up to the head at the time of the call. `progress`
    /// is called with bytes checked and bytes in all. Chain links are checked a chunk of frames
    /// at a time on as many threads as the machine has cores (up to 8).
    ///
    /// # Errors
    /// Only for failures to read at all (I/O); damage is reported in the [`VerifyReport`].
    pub fn verify(
        &self,
        options: &VerifyOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        let log = self.log();
        let head: Head = log.head();
        let segments = log.segments();
        let states: Vec<_> = segments.iter().map(|s| s.snapshot()).collect();
        let total: u64 = states.iter().map(|s| s.end_offset).sum();
        // Read-only there is no index to check: another process keeps it.
        let index = self.index().filter(|_| options.check_index);
        // What keeps the index from being checked (it failed, or is damaged): reported as a
        // problem, never a reason for `verify` itself to fail; the log is checked all the same.
        let mut index_failure: Option<String> = None;
        let note = |e: Error, failure: &mut Option<String>| {
            failure.get_or_insert_with(|| e.to_string());
        };
        let checker = match index.map(|index| self.wait_indexed().and_then(|()| index.checker())) {
            Some(Ok(checker)) => Some(checker),
            Some(Err(e)) => {
                note(e, &mut index_failure);
                None
            }
            None => None,
        };
        let mut index_sparse: BTreeMap<Location, Position> =
            match checker.as_ref().map(IndexChecker::sparse_entries) {
                Some(Ok(entries)) => entries
                    .into_iter()
                    .map(|at| (at.location, at.position))
                    .collect(),
                Some(Err(e)) => {
                    note(e, &mut index_failure);
                    BTreeMap::new()
                }
                None => BTreeMap::new(),
            };
        let mut walk = Walk {
            problems: Vec::new(),
        };
        let mut done = 0u64;
        // The bytes of the segments already walked, for progress.
        let mut bytes_before = 0u64;
        let mut events = 0u64;
        let mut expected = Position::FIRST;
        let mut prev = Some(ChainHash::GENESIS);
        let mut blob_refs: BTreeMap<String, Position> = BTreeMap::new();
        let mut with_task = 0u64;
        let mut with_run = 0u64;
        let mut digest_seen = false;

        for (segment, state) in segments.iter().zip(&states) {
            let id = segment.id;
            let mut header_bytes = [0u8; SEGMENT_HEADER_LEN];
            segment
                .file
                .read_exact_at(&mut header_bytes, 0)
                .map_err(Error::io_with(|| format!("reading segment {id}")))?;
            match SegmentHeader::decode(&header_bytes) {
                Ok(h) => {
                    if h.segment_id != id {
                        walk.problem(
                            "segment_header",
                            Some(id),
                            Some(0),
                            None,
                            format!("header names segment {}", h.segment_id.0),
                        );
                    }
                    if h.first_position != expected {
                        walk.problem(
                            "segment_header",
                            Some(id),
                            Some(0),
                            Some(expected),
                            format!(
                                "segment starts at position {}, expected {expected}",
                                h.first_position
                            ),
                        );
                        expected = h.first_position;
                    }
                    match prev {
                        Some(p) if p != h.prev_hash => walk.problem("chain", Some(id), Some(0), Some(expected), format!(
                            "segment's previous-hash {} differs from the last link before it {p}", h.prev_hash
                        )),
                        _ => {}
                    }
                    prev = Some(h.prev_hash);
                }
                Err(e) => {
                    walk.problem(
                        "segment_header",
                        Some(id),
                        Some(0),
                        Some(expected),
                        e.to_string(),
                    );
                    prev = None;
                }
            }
            let entries: BTreeMap<u64, Position> = state
                .sparse
                .iter()
                .map(|e| (e.offset.0, e.position))
                .collect();
            let mut entries_seen = 0usize;
            let mut batch_open = false;
            let mut count = 0u64;
            let mut last_hash = prev;
            let file_len = segment
                .file
                .len()
                .map_err(Error::io_with(|| format!("reading the length of {id}")))?;
            if file_len < state.end_offset {
                walk.problem(
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
            let mut scanner = FrameScanner::new(
                std::sync::Arc::clone(&segment.file),
                id,
                SEGMENT_HEADER_LEN as u64,
                state.end_offset.min(file_len),
            );
            let mut ahead = LinksAhead::default();
            // Whether the next frame continues the run of the last one: a run is checked whole
            // when its first frame comes (ahead); one that began where the link before was not
            // known (after damage) is checked only for storing one link.
            let mut run_open = prev.is_none();
            loop {
                let offset = scanner.offset();
                if let (Some(p), false) = (prev, run_open) {
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
                        walk.problem("frame", Some(id), Some(offset), Some(expected), detail);
                        prev = None;
                        break;
                    }
                };
                let position = frame.header.meta.position;
                if position != expected {
                    walk.problem(
                        "position_sequence",
                        Some(id),
                        Some(frame.offset),
                        Some(expected),
                        format!("frame holds position {position}"),
                    );
                }
                // What a scan of a run's frames meets itself (a body's checksum) is reported
                // where it meets it.
                let judged = prev
                    .map(|p| ahead.judge(frame.offset, position, p, frame.header.hash, run_open));
                if let Some(Err(f)) = judged {
                    if !f.found_by_scan {
                        walk.problem(
                            "chain",
                            Some(id),
                            Some(f.offset),
                            Some(f.position.unwrap_or(position)),
                            f.detail,
                        );
                    }
                }
                prev = Some(frame.header.hash);
                run_open = !frame.header.meta.flags.is_link_end();
                last_hash = prev;
                if let Some(p) = entries.get(&frame.offset) {
                    entries_seen += 1;
                    if *p != position {
                        walk.problem(
                            "footer",
                            Some(id),
                            Some(frame.offset),
                            Some(position),
                            format!("sparse index says position {p} starts here"),
                        );
                    }
                }
                if let Some(p) = index_sparse.remove(&Location::new(id, frame.offset)) {
                    if p != position {
                        walk.problem(
                            "index_missing",
                            Some(id),
                            Some(frame.offset),
                            Some(position),
                            format!("the index's sparse map says position {p} starts here"),
                        );
                    }
                }
                batch_open = !frame.header.meta.flags.is_end_of_batch();
                if let Some((digest_position, digest_hash)) = options.digest {
                    if digest_position == position {
                        digest_seen = true;
                        if digest_hash != frame.header.hash {
                            walk.problem("digest_mismatch", Some(id), Some(frame.offset), Some(position), format!(
                                "the kept digest says {digest_hash}, the journal holds {}: history was rewritten",
                                frame.header.hash
                            ));
                        }
                    }
                }
                match Envelope::from_msgpack(frame.body) {
                    Ok(envelope) => {
                        for hex in envelope.blob_refs() {
                            blob_refs
                                .entry(hex.to_ascii_lowercase())
                                .or_insert(position);
                        }
                        with_task += u64::from(envelope.task_id.is_some());
                        with_run += u64::from(envelope.run_id.is_some());
                        if let Some(checker) = checker.as_ref().filter(|_| index_failure.is_none())
                        {
                            let stored = journal_format::StoredEvent {
                                position,
                                recorded_at_ns: frame.header.meta.recorded_at_ns,
                                stream_version: frame.header.meta.stream_version,
                                hash: frame.header.hash,
                                envelope,
                            };
                            let end = frame.offset + frame.header.frame_len();
                            let stream_key = stored.envelope.stream_key();
                            let entry = index_entry(&stored, &stream_key, id, frame.offset, end);
                            let missing = match checker.missing(&entry) {
                                Ok(missing) => missing,
                                Err(e) => {
                                    note(e, &mut index_failure);
                                    Vec::new()
                                }
                            };
                            if !missing.is_empty() {
                                walk.problem(
                                    "index_missing",
                                    Some(id),
                                    Some(frame.offset),
                                    Some(position),
                                    format!(
                                        "the index lacks or differs in: {}",
                                        missing.join(", ")
                                    ),
                                );
                            }
                        }
                    }
                    Err(e) => walk.problem(
                        "decode",
                        Some(id),
                        Some(frame.offset),
                        Some(position),
                        e.to_string(),
                    ),
                }
                count += 1;
                events += 1;
                expected = position.next();
                done += frame.header.frame_len();
                if events.is_multiple_of(4096) {
                    progress(done, total);
                }
            }
            if expected <= state.last_position && prev.is_some() {
                walk.problem(
                    "truncated",
                    Some(id),
                    Some(scanner.offset()),
                    Some(expected),
                    format!(
                        "the segment's frames end before position {}, its last",
                        state.last_position
                    ),
                );
            }
            if batch_open {
                walk.problem(
                    "unfinished_batch",
                    Some(id),
                    Some(state.end_offset),
                    Some(Position(expected.0 - 1)),
                    String::from("the segment's last frame does not end a batch"),
                );
            }
            if entries_seen != entries.len() {
                walk.problem(
                    "footer",
                    Some(id),
                    None,
                    None,
                    format!(
                        "{} sparse index entries point at no frame",
                        entries.len() - entries_seen
                    ),
                );
            }
            if state.sealed {
                check_footer(
                    &mut walk,
                    segment,
                    count,
                    Position(expected.0 - 1),
                    last_hash,
                )?;
            }
            bytes_before += state.end_offset;
            done = done.max(bytes_before);
            progress(done, total);
        }

        let names = self
            .log()
            .segments()
            .iter()
            .map(|s| s.id.file_name())
            .collect::<BTreeSet<_>>();
        let seg_dir = self.dir().join(SEGMENTS_DIR);
        if let Ok(listing) = std::fs::read_dir(&seg_dir) {
            for entry in listing.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".seg") && !names.contains(&name) {
                    walk.problem(
                        "unexpected_segment",
                        SegmentId::from_file_name(&name),
                        None,
                        None,
                        format!("segment file {name} is not part of the log"),
                    );
                }
            }
        }
        if let Some((digest_position, _)) = options.digest {
            if !digest_seen {
                walk.problem("digest_beyond_head", None, None, Some(digest_position), format!(
                    "the kept digest is at position {digest_position} but the journal ends at {}: history was truncated",
                    head.position
                ));
            }
        }
        if let Some(detail) = &index_failure {
            walk.problem("index_damaged", None, None, None, detail.clone());
        }
        if let Some(index) = index.filter(|_| index_failure.is_none()) {
            let counts = index.counts()?;
            let expectations = [
                ("event ids", counts.event_ids, events),
                ("stream versions", counts.streams, events),
                ("task entries", counts.by_task, with_task),
                ("run entries", counts.by_run, with_run),
            ];
            for (what, have, want) in expectations {
                if have > want {
                    walk.problem(
                        "index_extra",
                        None,
                        None,
                        None,
                        format!("the index holds {have} {what} for {want} in the log"),
                    );
                }
            }
        }
        for (Location { segment, offset }, position) in index_sparse {
            walk.problem(
                "index_extra",
                Some(segment),
                Some(offset),
                Some(position),
                String::from("the index's sparse map points at no frame of the log"),
            );
        }
        if options.check_blobs {
            let blobs = self.blobs();
            for (hex, position) in &blob_refs {
                match blobs.check(hex)? {
                    BlobCheck::Ok => {}
                    BlobCheck::Missing => walk.problem(
                        "blob_missing",
                        None,
                        None,
                        Some(*position),
                        format!("blob {hex} is referenced but not stored"),
                    ),
                    BlobCheck::Mismatch { actual } => walk.problem(
                        "blob_mismatch",
                        None,
                        None,
                        Some(*position),
                        format!("blob {hex} holds bytes hashing to {actual}"),
                    ),
                }
            }
            for hex in blobs.list()? {
                if !blob_refs.contains_key(&hex) {
                    if let BlobCheck::Mismatch { actual } = blobs.check(&hex)? {
                        walk.problem(
                            "blob_mismatch",
                            None,
                            None,
                            None,
                            format!("blob {hex} holds bytes hashing to {actual}"),
                        );
                    }
                }
            }
        }
        progress(total, total);
        Ok(VerifyReport {
            ok: walk.problems.is_empty(),
            events,
            segments: segments.len(),
            head: ReportHead {
                position: head.position.0,
                hash: head.hash.to_hex(),
            },
            problems: walk.problems,
        })
    }
}

fn check_footer(
    walk: &mut Walk,
    segment: &crate::log::Segment,
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
        Err(e) => walk.problem("footer", Some(id), Some(trailer_at), None, e.to_string()),
        Ok(f) => {
            if f.count != count || f.last_position != last || Some(f.last_hash) != last_hash {
                walk.problem("footer", Some(id), Some(trailer_at), Some(last), format!(
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
