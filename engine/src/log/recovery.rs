//! Opening the log: checking every segment's header and footer, scanning the unsealed tail,
//! and deciding, row by row of the recovery table in `docs/FORMAT.md`, what damage means.
//!
//! Only the unsealed tail is scanned frame by frame, so opening does not slow down as the
//! journal grows; sealed segments are checked through their header and footer (their frames are
//! `verify`'s job). A torn final write is cut off and reported (its bytes kept in
//! `quarantine/`); any other damage refuses to open, naming the segment, offset and position,
//! unless the caller asked for salvage.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use journal_format::bit_rot::{flipped_bit, FlippedBit};
use journal_format::frame::{decode_frame, is_zeroed, peek_position};
use journal_format::segment::Trailer;
use journal_format::{
    FooterEntry, FormatError, FrameHeader, Position, RunCheck, SegmentFooter, SegmentHeader,
    SegmentId, FRAME_HEADER_LEN, SEGMENT_FOOTER_TRAILER_LEN, SEGMENT_HEADER_LEN,
};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::log::salvage;
use crate::log::scan::{FrameScanner, Stop};
use crate::log::{Head, Segment, SegmentState, SPARSE_INTERVAL_BYTES};
use crate::storage::{OpenMode, Storage, StorageFile};

/// The directory inside the journal that holds segment files.
pub(crate) const SEGMENTS_DIR: &str = "segments";
/// The directory inside the journal that holds bytes moved aside by recovery.
pub(crate) const QUARANTINE_DIR: &str = "quarantine";

/// What recovery did when the journal was opened.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RecoveryReport {
    /// How many segment files were found.
    pub segments: usize,
    /// How many bytes of the unsealed tail were scanned.
    pub tail_bytes_scanned: u64,
    /// What was repaired or moved aside; empty after a clean shutdown.
    pub actions: Vec<RecoveryAction>,
}

/// One thing recovery did.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The final write was torn (a crash during an unacknowledged write): its bytes were cut
    /// from the log and kept in `saved_to`.
    TornTailCut {
        /// The segment file name.
        segment: String,
        /// Where the cut starts.
        offset: u64,
        /// How many bytes were cut.
        bytes: u64,
        /// Complete frames of an unfinished batch that were cut with it, as `[first, last]`.
        positions: Option<[u64; 2]>,
        /// What was found at the cut.
        detail: String,
        /// Where the cut bytes were kept.
        saved_to: Option<String>,
    },
    /// A segment file whose creation did not complete (no valid header, no frames) was removed.
    IncompleteSegmentRemoved {
        /// The segment file name.
        segment: String,
        /// Its length.
        bytes: u64,
    },
    /// Salvage: damaged bytes (and everything after them) were moved aside.
    Quarantined {
        /// The segment file name where the damage starts.
        segment: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong there.
        detail: String,
        /// The files the bytes were moved to.
        files: Vec<String>,
        /// The positions of the readable frames among the moved bytes, as `[first, last]`.
        positions: Option<[u64; 2]>,
        /// How many readable frames the moved bytes hold.
        readable_frames: u64,
    },
    /// Salvage: the log contradicts the journal's evidence of its past (`HEAD` or the index's
    /// head: history lost or rewritten) and was accepted as it is.
    HistoryAccepted {
        /// The file holding the evidence.
        evidence: String,
        /// The first position concerned.
        position: u64,
        /// What the evidence records and what the log holds.
        detail: String,
    },
    /// Salvage: a segment that had lost its footer, whose frames all hold and which the next
    /// segment continues, was sealed again.
    Resealed {
        /// The segment file name.
        segment: String,
        /// Its last position.
        last_position: u64,
    },
    /// The index was cleared and rebuilt from the log.
    IndexRebuilt {
        /// Why.
        reason: String,
    },
    /// The index lagged the log (normal after a crash) and was caught up.
    IndexCaughtUp {
        /// The first position indexed.
        from: u64,
        /// The last position indexed.
        to: u64,
    },
}

/// The result of recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: Vec<Arc<Segment>>,
    pub head: Head,
    pub report: RecoveryReport,
}

/// Damage found while opening, with its place.
#[derive(Debug)]
pub(crate) struct Damage {
    segment: SegmentId,
    offset: u64,
    position: Option<Position>,
    detail: String,
    /// Not damage after all: an I/O failure while reading or repairing at this place.
    io: bool,
    /// Row 3: a segment that is not the last has no valid footer (its frames may all hold).
    unsealed: bool,
}

impl Damage {
    pub(crate) fn into_error(self) -> Error {
        if self.io {
            return Error::Io {
                context: format!(
                    "recovering segment {} at offset {}",
                    self.segment, self.offset
                ),
                source: std::io::Error::other(self.detail),
            };
        }
        Error::Corruption {
            segment: self.segment,
            offset: self.offset,
            position: self.position,
            detail: self.detail,
        }
    }
}

pub(crate) fn segment_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(SEGMENTS_DIR).join(id.file_name())
}

/// Opens the log in `dir`, applying the recovery table.
///
/// `committed` is the last position the journal's evidence (`HEAD`, the index) records as
/// durably committed: bytes a torn-write rule would cut at or before it were acknowledged, so
/// they are damage instead (`Position::ZERO` when there is no evidence).
pub(crate) fn recover(
    storage: &dyn Storage,
    dir: &Path,
    salvage: bool,
    committed: Position,
    read_only: bool,
) -> Result<Recovered> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    storage
        .create_dir_all(&seg_dir)
        .map_err(Error::io_with(|| format!("creating {}", seg_dir.display())))?;
    let names = storage
        .list_dir(&seg_dir)
        .map_err(Error::io_with(|| format!("listing {}", seg_dir.display())))?;
    let mut report_pre = RecoveryReport::default();
    let mut ids: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| SegmentId::from_file_name(n))
        .collect();
    if ids.first() == Some(&SegmentId(0)) {
        // Segment ids start at 1: a file named 0 was never written by a journal.
        if !salvage || read_only {
            return Err(Error::Corruption {
                segment: SegmentId(0),
                offset: 0,
                position: None,
                detail: String::from(
                    "not a segment of this journal (segment ids start at 1); open with --salvage to set it aside",
                ),
            });
        }
        ids.remove(0);
        salvage::set_aside(
            storage,
            dir,
            &[SegmentId(0)],
            "not a segment of this journal: segment ids start at 1",
            &mut report_pre,
        )?;
    }
    let mut report = RecoveryReport {
        segments: ids.len(),
        ..RecoveryReport::default()
    };
    report.actions.append(&mut report_pre.actions);
    let mut segments: Vec<Arc<Segment>> = Vec::new();
    let mut head = Head::default();
    for (i, id) in ids.iter().copied().enumerate() {
        let is_last = i + 1 == ids.len();
        let expected_id = SegmentId(segments.last().map_or(1, |s| s.id.0 + 1));
        let result = if id == expected_id {
            open_segment(
                storage,
                dir,
                id,
                is_last,
                head,
                committed,
                read_only,
                &mut report,
            )
        } else {
            Err(Damage {
                segment: expected_id,
                offset: 0,
                position: Some(head.position.next()),
                detail: format!(
                    "segment file {} is missing (found {} next)",
                    expected_id, id
                ),
                io: false,
                unsealed: false,
            })
        };
        match result {
            Ok(Some(segment)) => {
                let state = segment.snapshot();
                head = Head {
                    position: state.last_position,
                    hash: state.last_hash,
                };
                segments.push(Arc::new(segment));
            }
            Ok(None) => {}
            Err(damage) if salvage && damage.unsealed => {
                let later = ids.get(i + 1..).unwrap_or_default();
                let Some((segment, continues)) =
                    salvage::unsealed(storage, dir, id, head, later, &mut report)?
                else {
                    let later: Vec<SegmentId> = later.to_vec();
                    let (kept, action) = quarantine(storage, dir, damage, id, &later)?;
                    push_kept(&mut segments, &mut head, kept);
                    report.actions.push(action);
                    break;
                };
                push_kept(&mut segments, &mut head, Some(segment));
                if !continues {
                    break;
                }
            }
            Err(damage) if salvage => {
                // A missing segment: the file found in its place (`id`) cannot follow either.
                let skip = if damage.segment == id { i + 1 } else { i };
                let later: Vec<SegmentId> = ids.iter().copied().skip(skip).collect();
                let (kept, action) = quarantine(storage, dir, damage, id, &later)?;
                if let Some(segment) = kept {
                    let state = segment.snapshot();
                    head = Head {
                        position: state.last_position,
                        hash: state.last_hash,
                    };
                    segments.push(Arc::new(segment));
                }
                report.actions.push(action);
                break;
            }
            Err(damage) => return Err(damage.into_error()),
        }
    }
    Ok(Recovered {
        segments,
        head,
        report,
    })
}

/// Adds a segment salvage kept to the log being recovered, moving the head past it.
fn push_kept(segments: &mut Vec<Arc<Segment>>, head: &mut Head, kept: Option<Segment>) {
    if let Some(segment) = kept {
        let state = segment.snapshot();
        *head = Head {
            position: state.last_position,
            hash: state.last_hash,
        };
        segments.push(Arc::new(segment));
    }
}

/// Checks one segment. Returns `None` for a last segment whose creation never completed (it is
/// removed and reported; read-only, it is only skipped).
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_segment(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    is_last: bool,
    prev: Head,
    committed: Position,
    read_only: bool,
    report: &mut RecoveryReport,
) -> Result<Option<Segment>, Damage> {
    let path = segment_path(dir, id);
    let damage = |offset: u64, position: Option<Position>, detail: String| Damage {
        segment: id,
        offset,
        position,
        detail,
        io: false,
        unsealed: false,
    };
    let io = |what: &str, e: std::io::Error| damage(0, None, format!("cannot {what}: {e}"));
    let mode = if is_last {
        OpenMode::ReadWrite
    } else {
        OpenMode::Read
    };
    let file = storage
        .open(&path, mode)
        .map_err(|e| io("open the segment", e))?;
    let len = file.len().map_err(|e| io("read the segment length", e))?;
    let mut header_bytes = vec![0u8; SEGMENT_HEADER_LEN.min(usize::try_from(len).unwrap_or(0))];
    file.read_exact_at(&mut header_bytes, 0)
        .map_err(|e| io("read the segment header", e))?;
    let header = match SegmentHeader::decode(&header_bytes) {
        Ok(header) => header,
        Err(e) => {
            // Row "incomplete segment": the last file, no valid header, nothing but zeros.
            // Its creation was never synced, so nothing in it was acknowledged.
            let mut all = vec![0u8; usize::try_from(len.min(1 << 20)).unwrap_or(0)];
            let zero = len < (1 << 20)
                && file.read_exact_at(&mut all, 0).is_ok()
                && (is_zeroed(&all) || len < SEGMENT_HEADER_LEN as u64);
            if is_last && zero && read_only {
                // Its creation is under way in the writing process, or never completed.
                return Ok(None);
            }
            if is_last && zero {
                drop(file);
                storage
                    .remove_file(&path)
                    .map_err(|e| io("remove the incomplete segment", e))?;
                report
                    .actions
                    .push(RecoveryAction::IncompleteSegmentRemoved {
                        segment: id.file_name(),
                        bytes: len,
                    });
                return Ok(None);
            }
            return Err(damage(0, None, format!("segment header: {e}")));
        }
    };
    let expected_first = prev.position.next();
    if header.segment_id != id {
        return Err(damage(
            0,
            None,
            format!(
                "header names segment {} but the file is {}",
                header.segment_id.0, id
            ),
        ));
    }
    if header.first_position != expected_first {
        return Err(damage(
            0,
            Some(expected_first),
            format!(
                "segment starts at position {} but the previous segment ends at {}",
                header.first_position, prev.position
            ),
        ));
    }
    if header.prev_hash != prev.hash {
        return Err(damage(
            0,
            Some(expected_first),
            format!(
                "segment's previous-hash {} does not match the previous segment's last hash {}",
                header.prev_hash, prev.hash
            ),
        ));
    }
    match read_footer(&*file, len) {
        Ok(footer) => {
            let expected_count = footer
                .last_position
                .0
                .checked_sub(header.first_position.0 - 1);
            if expected_count != Some(footer.count) {
                return Err(damage(
                    footer.index_offset.0,
                    None,
                    format!(
                        "footer counts {} frames for positions {}..={}",
                        footer.count, header.first_position, footer.last_position
                    ),
                ));
            }
            Ok(Some(Segment {
                id,
                first_position: header.first_position,
                prev_hash: header.prev_hash,
                file,
                state: RwLock::new(SegmentState {
                    sparse: footer.entries,
                    end_offset: footer.index_offset.0,
                    last_position: footer.last_position,
                    last_hash: footer.last_hash,
                    sealed: true,
                }),
            }))
        }
        Err(e) if !is_last => Err(Damage {
            unsealed: true,
            ..damage(
                len.saturating_sub(SEGMENT_FOOTER_TRAILER_LEN as u64),
                None,
                format!("sealed segment has no valid footer: {e}"),
            )
        }),
        Err(_) => {
            // The whole tail is scanned, checksums and chain, so damage anywhere in it (a flipped
            // bit, a body edited with its checksums recomputed, frames swapped) is found here.
            let state = scan_tail(
                storage, dir, id, &file, len, &header, None, committed, read_only, report,
            )?;
            Ok(Some(Segment {
                id,
                first_position: header.first_position,
                prev_hash: header.prev_hash,
                file,
                state: RwLock::new(state),
            }))
        }
    }
}

pub(crate) fn read_footer(
    file: &dyn StorageFile,
    len: u64,
) -> std::result::Result<SegmentFooter, FormatError> {
    let trailer_len = SEGMENT_FOOTER_TRAILER_LEN as u64;
    if len < SEGMENT_HEADER_LEN as u64 + trailer_len {
        return Err(FormatError::Truncated {
            needed: SEGMENT_HEADER_LEN as u64 + trailer_len,
            available: len,
        });
    }
    let mut trailer_bytes = [0u8; SEGMENT_FOOTER_TRAILER_LEN];
    file.read_exact_at(&mut trailer_bytes, len - trailer_len)
        .map_err(|e| FormatError::InconsistentFooter(format!("cannot read the trailer: {e}")))?;
    let trailer: Trailer = SegmentFooter::decode_trailer(&trailer_bytes, len)?;
    let entries_len = usize::try_from(len - trailer_len - trailer.index_offset.0).unwrap_or(0);
    let mut entries = vec![0u8; entries_len];
    file.read_exact_at(&mut entries, trailer.index_offset.0)
        .map_err(|e| FormatError::InconsistentFooter(format!("cannot read the index: {e}")))?;
    SegmentFooter::decode(&trailer, &entries)
}

/// Scans the unsealed tail segment frame by frame (from `start` when given, else from the first
/// frame) and applies the tail rows of the table.
/// Read-only (another process writes the journal), whatever follows the last complete batch is
/// taken as a write under way: it is neither judged nor cut.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_tail(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    file: &Arc<dyn StorageFile>,
    len: u64,
    header: &SegmentHeader,
    start: Option<SegmentState>,
    committed_evidence: Position,
    read_only: bool,
    report: &mut RecoveryReport,
) -> Result<SegmentState, Damage> {
    let damage = |offset: u64, position: Option<Position>, detail: String| Damage {
        segment: id,
        offset,
        position,
        detail,
        io: false,
        unsealed: false,
    };
    let io_failure = |offset: u64, detail: String| Damage {
        segment: id,
        offset,
        position: None,
        detail,
        io: true,
        unsealed: false,
    };
    let mut committed = start.unwrap_or(SegmentState {
        sparse: Vec::new(),
        end_offset: SEGMENT_HEADER_LEN as u64,
        last_position: Position(header.first_position.0 - 1),
        last_hash: header.prev_hash,
        sealed: false,
    });
    report.tail_bytes_scanned = len.saturating_sub(committed.end_offset);
    let mut scanner = FrameScanner::new(Arc::clone(file), id, committed.end_offset, len);
    let mut pending_sparse: Vec<FooterEntry> = Vec::new();
    let mut pending_first: Option<Position> = None;
    let mut expected = committed.last_position.next();
    let mut prev = committed.last_hash;
    // The run being read, checked at its last frame; where it starts.
    let mut run = RunCheck::default();
    let mut run_start = (committed.end_offset, expected);
    let stop = loop {
        let frame = match scanner.next() {
            Ok(Ok(frame)) => frame,
            Ok(Err(stop)) => break stop,
            Err(e) => return Err(damage(scanner.offset(), Some(expected), e.to_string())),
        };
        // Row "valid frame out of sequence": a checksum-valid frame that does not continue the
        // log is never a torn write.
        if frame.header.meta.position != expected {
            return Err(damage(
                frame.offset,
                Some(expected),
                format!(
                    "frame holds position {} where {} was expected",
                    frame.header.meta.position, expected
                ),
            ));
        }
        if run.is_empty() {
            run_start = (frame.offset, expected);
        }
        match run.push(&prev, &frame.header, frame.frame) {
            Ok(Some(link)) => prev = link,
            Ok(None) => {}
            Err(e) => {
                let (offset, position) = run_start;
                return Err(damage(
                    offset,
                    Some(position),
                    format!("the run of frames from offset {offset}: {e}"),
                ));
            }
        }
        let last_sparse = pending_sparse
            .last()
            .or(committed.sparse.last())
            .map(|e| e.offset.0);
        if last_sparse.is_none_or(|o| frame.offset >= o + SPARSE_INTERVAL_BYTES) {
            pending_sparse.push(FooterEntry {
                position: expected,
                offset: journal_format::ByteOffset(frame.offset),
            });
        }
        pending_first.get_or_insert(expected);
        if frame.header.meta.flags.is_end_of_batch() {
            committed.end_offset = scanner.offset();
            committed.last_position = expected;
            committed.last_hash = prev;
            committed.sparse.append(&mut pending_sparse);
            pending_first = None;
        }
        expected = expected.next();
    };
    let cut_at = committed.end_offset;
    if read_only {
        return Ok(committed);
    }
    let detail = match stop {
        Stop::End if cut_at == len => return Ok(committed),
        Stop::End => String::from("the last batch has no end-of-batch frame"),
        Stop::Zeroed | Stop::Damaged(_) => {
            let at = scanner.offset();
            let rest = read_rest(file, at, len).map_err(|e| io_failure(at, e))?;
            let zero_tail = matches!(stop, Stop::Zeroed) && is_zeroed(&rest);
            if zero_tail && cut_at == at {
                // Row "zeroed space": preallocated or never written; the log ends here.
                trim(file, cut_at, len).map_err(|e| io_failure(cut_at, e))?;
                return Ok(committed);
            }
            // Row "damage followed by a later write": synced data is damaged.
            if let Some((offset, position)) = find_later_write(&rest, at, expected) {
                return Err(damage(at, Some(expected), format!(
                    "{} at offset {at}, but a later write starts at offset {offset} (position {position})",
                    describe(&stop)
                )));
            }
            // Row "damage that no torn write explains": a complete frame with wrong bytes and
            // no sign of unwritten space is bit rot or tampering in the last write, which was
            // acknowledged; it is never cut away.
            // Row "unfinished seal": the bytes after the last batch are what sealing writes (the
            // footer), in part. The frames are whole; only the seal is cut.
            let torn_seal =
                cut_at == at && is_partial_footer(&rest, at, &committed, header.first_position);
            // A zeroed header (72 zero bytes where a frame belongs) is itself unwritten space.
            // A frame the file holds whole whose checksum one flipped bit explains is bit rot,
            // even where its last bytes are zeros that a torn write would also leave.
            let rot = one_bit_rot(&stop, &rest);
            if !torn_seal && !matches!(stop, Stop::Zeroed) && (rot || !torn_evidence(&rest, at)) {
                let why = if rot {
                    "one flipped bit explains it, so this is bit rot, not a torn write"
                } else {
                    "the frame is complete, so this is not a torn write"
                };
                return Err(damage(
                    at,
                    Some(expected),
                    format!("{} at offset {at}: {why}", describe(&stop)),
                ));
            }
            if torn_seal {
                String::from("an unfinished seal: part of the segment footer")
            } else if zero_tail {
                String::from("the last batch has no end-of-batch frame")
            } else {
                describe(&stop)
            }
        }
    };
    // Row "a cut the evidence forbids": what the rules below would cut holds positions the
    // journal's evidence records as committed, so it was acknowledged: damage, never cut.
    if committed.last_position < committed_evidence {
        return Err(damage(
            cut_at,
            Some(committed.last_position.next()),
            format!(
                "{detail} at offset {cut_at}, but position {committed_evidence} was recorded as committed (HEAD or the index), so these bytes were acknowledged: damage, not a torn write"
            ),
        ));
    }
    // Rows "torn final write" and "unfinished batch": nothing here was acknowledged.
    let cut_bytes = len - cut_at;
    let saved_to =
        save_cut(storage, dir, id, file, cut_at, len).map_err(|e| io_failure(cut_at, e))?;
    trim(file, cut_at, len).map_err(|e| io_failure(cut_at, e))?;
    let positions = pending_first
        .map(|first| [first.0, expected.0 - 1])
        .filter(|[a, b]| a <= b);
    tracing::warn!(segment = %id, offset = cut_at, bytes = cut_bytes, %detail, "cut a torn tail");
    report.actions.push(RecoveryAction::TornTailCut {
        segment: id.file_name(),
        offset: cut_at,
        bytes: cut_bytes,
        positions,
        detail,
        saved_to,
    });
    Ok(committed)
}

/// Whether the damage `stop` found in the frame at the start of `rest` (the file's bytes from
/// there on) is one flipped bit in a frame the file holds whole: bit rot, not a torn write, whose
/// lost bytes read as zeros and change many bits (`journal_format::bit_rot`). A bit whose byte
/// lies in the zeros that end the frame's checked bytes is no proof: a torn write that lost a
/// byte holding one set bit leaves the same bytes.
fn one_bit_rot(stop: &Stop, rest: &[u8]) -> bool {
    let (stored, computed, checked) = match stop {
        // `header_crc` covers the header after itself.
        Stop::Damaged(FormatError::HeaderChecksumMismatch { stored, computed }) => {
            (*stored, *computed, rest.get(4..FRAME_HEADER_LEN))
        }
        Stop::Damaged(FormatError::BodyChecksumMismatch { stored, computed }) => {
            let body = FrameHeader::decode(rest).ok().and_then(|header| {
                let end = usize::try_from(header.frame_len()).ok()?;
                rest.get(FRAME_HEADER_LEN..end)
            });
            (*stored, *computed, body)
        }
        _ => return false,
    };
    let Some(checked) = checked else {
        return false; // not whole in the file
    };
    let written_end = checked.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    match flipped_bit(stored, computed, checked.len() as u64) {
        Some(FlippedBit::InStored) => true,
        Some(FlippedBit::InMessage { byte }) => byte < written_end as u64,
        None => false,
    }
}

fn describe(stop: &Stop) -> String {
    match stop {
        Stop::End => String::from("end of file"),
        Stop::Zeroed => String::from("zeroed bytes followed by non-zero bytes"),
        Stop::Damaged(e) => format!("damaged frame: {e}"),
    }
}

pub(crate) fn read_rest(
    file: &Arc<dyn StorageFile>,
    from: u64,
    len: u64,
) -> std::result::Result<Vec<u8>, String> {
    let mut rest = vec![0u8; usize::try_from(len - from).map_err(|e| e.to_string())?];
    file.read_exact_at(&mut rest, from)
        .map_err(|e| e.to_string())?;
    Ok(rest)
}

/// The size of the unit in which a disk persists writes; an all-zero, aligned run of this many
/// bytes inside a damaged frame is unwritten space, not bit rot.
const SECTOR_BYTES: u64 = 512;

/// Whether `rest` (file offset `base`, right after the last committed batch) is part of the
/// footer that sealing this segment writes: every sector of it either holds the footer's bytes
/// or was not written (zeros).
fn is_partial_footer(rest: &[u8], base: u64, state: &SegmentState, first: Position) -> bool {
    let footer = SegmentFooter {
        last_position: state.last_position,
        count: state.last_position.0 + 1 - first.0,
        index_offset: journal_format::ByteOffset(base),
        last_hash: state.last_hash,
        entries: state.sparse.clone(),
    }
    .encode();
    if rest.is_empty() || rest.len() > footer.len() {
        return false;
    }
    let mut at = 0usize;
    while at < rest.len() {
        let sector_end =
            usize::try_from((base + at as u64) / SECTOR_BYTES * SECTOR_BYTES + SECTOR_BYTES - base)
                .unwrap_or(usize::MAX)
                .min(rest.len());
        let got = rest.get(at..sector_end).unwrap_or_default();
        let want = footer.get(at..sector_end).unwrap_or_default();
        if got != want && !is_zeroed(got) {
            return false;
        }
        at = sector_end;
    }
    true
}

/// Whether the damaged bytes `rest` (file offset `base` to the end of the file: the final write,
/// since no later write exists) look like a write that did not complete, rather than complete
/// frames whose bytes are wrong (bit rot, tampering). Unwritten space reads as zeros, a sector
/// (512 aligned bytes) at a time, so the evidence is:
///
/// - a frame in the region runs past the end of the file (of its non-zero bytes, see below);
/// - an aligned sector inside the region that is all zeros;
/// - the region's first piece (from `base` to the first sector boundary) all zeros;
/// - the region's last piece (from the last sector boundary to the end of the file) all zeros.
///
/// A flipped bit in complete frames shows none of these, unless the frame's own bytes happen to
/// be zero from a sector boundary on: from its start (about one chance in 131,072 for a checksum
/// field), or to the end of the file (k trailing zero bytes of a body, as a final `0` or `0.0`
/// gives, reach back to a sector boundary about k times in 512). Such a frame would be cut as a
/// torn write — reported, and kept in `quarantine/` — rather than refused.
///
/// Zeros after the last non-zero byte are left out first: the writer zero-fills the tail ahead
/// of its frames, so an open journal's file always ends in zeros, and they say nothing about the
/// last write. What remains must itself show unwritten space: a frame that runs past it, or a
/// zero sector inside it. (Without this, bit rot in the last acknowledged frame of a journal that
/// crashed would read as a torn write and be cut.)
fn torn_evidence(rest: &[u8], base: u64) -> bool {
    let data_len = rest.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    let Some(rest) = rest.get(..data_len).filter(|r| !r.is_empty()) else {
        return true; // nothing but zeros: unwritten space
    };
    match FrameHeader::decode(rest) {
        Ok(header) if header.frame_len() > rest.len() as u64 => return true,
        Err(FormatError::Truncated { .. }) => return true,
        _ => {}
    }
    let end = base + rest.len() as u64;
    let piece = |from: u64, to: u64| -> &[u8] {
        let a = usize::try_from(from - base).unwrap_or(usize::MAX);
        let b = usize::try_from(to - base).unwrap_or(usize::MAX);
        rest.get(a..b).unwrap_or_default()
    };
    let first_boundary = base.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    let first = piece(base, first_boundary.min(end));
    if !first.is_empty() && is_zeroed(first) {
        return true;
    }
    let mut sector = first_boundary;
    while sector + SECTOR_BYTES <= end {
        if is_zeroed(piece(sector, sector + SECTOR_BYTES)) {
            return true;
        }
        sector += SECTOR_BYTES;
    }
    let last = piece(sector.max(base), end);
    sector < end && !last.is_empty() && is_zeroed(last)
}

/// Searches `rest` (the bytes from file offset `base` on) for a valid frame that starts a write
/// and holds a position at or after `expected`: proof that the damage before it was synced.
fn find_later_write(rest: &[u8], base: u64, expected: Position) -> Option<(u64, Position)> {
    let max_frames = rest.len() as u64 / FRAME_HEADER_LEN as u64 + 1;
    (1..rest.len().saturating_sub(FRAME_HEADER_LEN - 1)).find_map(|i| {
        let candidate = rest.get(i..)?;
        let position = peek_position(candidate)?;
        if position < expected || position.0 > expected.0.saturating_add(max_frames) {
            return None;
        }
        let (header, _) = decode_frame(candidate).ok()?;
        header
            .meta
            .flags
            .is_first_in_write()
            .then_some((base + i as u64, position))
    })
}

/// Creates `dir/stem.ext`, or `dir/stem.N.ext` with the first free N, so that nothing already
/// in quarantine is ever overwritten.
pub(crate) fn create_unique(
    storage: &dyn Storage,
    dir: &Path,
    stem: &str,
    ext: &str,
) -> std::result::Result<(String, Arc<dyn StorageFile>), String> {
    for n in 0..10_000u32 {
        let name = if n == 0 {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}.{n}.{ext}")
        };
        match storage.open(&dir.join(&name), OpenMode::CreateNew) {
            Ok(file) => return Ok((name, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: {e}", dir.join(&name).display())),
        }
    }
    Err(format!("no free quarantine file name for {stem}"))
}

/// Copies bytes `from..len` of a segment into `quarantine/`, returning the file's path.
fn save_cut(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    file: &Arc<dyn StorageFile>,
    from: u64,
    len: u64,
) -> std::result::Result<Option<String>, String> {
    if from >= len {
        return Ok(None);
    }
    let bytes = read_rest(file, from, len)?;
    if is_zeroed(&bytes) {
        return Ok(None);
    }
    let qdir = dir.join(QUARANTINE_DIR);
    storage.create_dir_all(&qdir).map_err(|e| e.to_string())?;
    let (name, out) = create_unique(storage, &qdir, &format!("{:020}-{from:020}", id.0), "torn")?;
    let written = out
        .write_all_at(&bytes, 0)
        .and_then(|()| out.sync_data())
        .and_then(|()| storage.sync_dir(&qdir));
    if let Err(e) = written {
        // Nothing is cut unless its bytes are kept: leave no empty or partial copy behind.
        drop(out);
        let _ = storage.remove_file(&qdir.join(&name));
        return Err(e.to_string());
    }
    Ok(Some(format!("{QUARANTINE_DIR}/{name}")))
}

fn trim(file: &Arc<dyn StorageFile>, to: u64, len: u64) -> std::result::Result<(), String> {
    if to < len {
        file.set_len(to)
            .map_err(|e| format!("cannot truncate the tail: {e}"))?;
        file.sync_data()
            .map_err(|e| format!("cannot sync the truncated tail: {e}"))?;
    }
    Ok(())
}

/// Salvage: moves the damaged part of segment `id` (from the damage offset) and all later
/// segments into `quarantine/`, and returns what remains of segment `id` (if anything) as the
/// new unsealed tail.
fn quarantine(
    storage: &dyn Storage,
    dir: &Path,
    damage: Damage,
    id: SegmentId,
    later: &[SegmentId],
) -> Result<(Option<Segment>, RecoveryAction)> {
    let qdir = dir.join(QUARANTINE_DIR);
    storage
        .create_dir_all(&qdir)
        .map_err(Error::io_with(|| format!("creating {}", qdir.display())))?;
    let mut files = Vec::new();
    let mut first: Option<u64> = None;
    let mut last: Option<u64> = None;
    let mut readable = 0u64;
    let mut note = |(f, l, n): Readable| {
        if let Some(f) = f {
            first = Some(first.map_or(f, |x| x.min(f)));
        }
        if let Some(l) = l {
            last = Some(last.map_or(l, |x| x.max(l)));
        }
        readable += n;
    };
    let path = segment_path(dir, damage.segment);
    let cut = if damage.segment == id && damage.offset >= SEGMENT_HEADER_LEN as u64 {
        Some(damage.offset)
    } else {
        None
    };
    let mut kept = None;
    if storage.exists(&path) {
        let file = storage
            .open(&path, OpenMode::ReadWrite)
            .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
        let len = file.len().map_err(Error::io("reading a segment length"))?;
        let from = cut.unwrap_or(0).min(len);
        let bytes = read_rest(&file, from, len).map_err(|e| Error::Io {
            context: format!("reading {}", path.display()),
            source: std::io::Error::other(e),
        })?;
        note(readable_positions(&bytes));
        let (name, out) = create_unique(
            storage,
            &qdir,
            &format!("{:020}-{from:020}", damage.segment.0),
            "damaged",
        )
        .map_err(|e| Error::Io {
            context: String::from("creating a quarantine file"),
            source: std::io::Error::other(e),
        })?;
        out.write_all_at(&bytes, 0)
            .map_err(Error::io("writing quarantine"))?;
        out.sync_data().map_err(Error::io("syncing quarantine"))?;
        files.push(format!("{QUARANTINE_DIR}/{name}"));
        if let Some(offset) = cut {
            file.set_len(offset)
                .map_err(Error::io("truncating the damaged segment"))?;
            file.sync_data()
                .map_err(Error::io("syncing the damaged segment"))?;
            // What remains is a valid prefix; rescan it as an unsealed tail.
            let header_bytes = {
                let mut b = vec![0u8; SEGMENT_HEADER_LEN];
                file.read_exact_at(&mut b, 0)
                    .map_err(Error::io("reading a segment header"))?;
                b
            };
            let header = SegmentHeader::decode(&header_bytes).map_err(|e| Error::Corruption {
                segment: damage.segment,
                offset: 0,
                position: None,
                detail: format!("segment header: {e}"),
            })?;
            let mut scratch = RecoveryReport::default();
            let state = scan_tail(
                storage,
                dir,
                damage.segment,
                &file,
                offset,
                &header,
                None,
                Position::ZERO,
                false,
                &mut scratch,
            )
            .map_err(Damage::into_error)?;
            kept = Some(Segment {
                id: damage.segment,
                first_position: header.first_position,
                prev_hash: header.prev_hash,
                file,
                state: RwLock::new(state),
            });
        } else {
            drop(file);
            storage
                .remove_file(&path)
                .map_err(Error::io("removing a damaged segment"))?;
        }
    }
    for later_id in later {
        let (file, found) = move_whole_segment(storage, dir, *later_id)?;
        note(found);
        files.push(file);
    }
    storage
        .sync_dir(&qdir)
        .map_err(Error::io("syncing quarantine"))?;
    storage
        .sync_dir(&dir.join(SEGMENTS_DIR))
        .map_err(Error::io("syncing the segments directory"))?;
    tracing::warn!(segment = %damage.segment, offset = damage.offset, detail = %damage.detail, "salvage moved damaged bytes to quarantine");
    let action = RecoveryAction::Quarantined {
        segment: damage.segment.file_name(),
        offset: damage.offset,
        detail: damage.detail,
        files,
        positions: first.zip(last).map(|(a, b)| [a, b]),
        readable_frames: readable,
    };
    Ok((kept, action))
}

/// Salvage of damage found after recovery (by the index's rebuild): moves segment `segment`
/// from `offset` on, and every later segment, to `quarantine/`, as [`quarantine`] does for
/// damage recovery finds.
///
/// # Errors
/// An I/O error.
pub(crate) fn quarantine_from(
    storage: &dyn Storage,
    dir: &Path,
    segment: SegmentId,
    offset: u64,
    position: Option<Position>,
    detail: String,
) -> Result<RecoveryAction> {
    let seg_dir = dir.join(SEGMENTS_DIR);
    let names = storage
        .list_dir(&seg_dir)
        .map_err(Error::io_with(|| format!("listing {}", seg_dir.display())))?;
    let later: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| SegmentId::from_file_name(n))
        .filter(|id| id.0 > segment.0)
        .collect();
    let damage = Damage {
        segment,
        offset,
        position,
        detail,
        io: false,
        unsealed: false,
    };
    let (_, action) = quarantine(storage, dir, damage, segment, &later)?;
    Ok(action)
}

/// Keeps the report of an open with salvage in `quarantine/salvage.N.json` when salvage moved or
/// accepted anything, so that what it decided outlives the process that decided it.
///
/// # Errors
/// An I/O error writing the file.
pub(crate) fn keep_salvage_report(
    storage: &dyn Storage,
    dir: &Path,
    report: &RecoveryReport,
) -> Result<()> {
    let salvaged = report.actions.iter().any(|a| {
        matches!(
            a,
            RecoveryAction::Quarantined { .. }
                | RecoveryAction::HistoryAccepted { .. }
                | RecoveryAction::Resealed { .. }
        )
    });
    if !salvaged {
        return Ok(());
    }
    let qdir = dir.join(QUARANTINE_DIR);
    let io = |e: String| Error::Io {
        context: String::from("keeping the salvage report"),
        source: std::io::Error::other(e),
    };
    storage
        .create_dir_all(&qdir)
        .map_err(|e| io(e.to_string()))?;
    let json = serde_json::to_vec_pretty(report).map_err(|e| io(e.to_string()))?;
    let (_, file) = create_unique(storage, &qdir, "salvage", "json").map_err(io)?;
    file.write_all_at(&json, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| io(e.to_string()))?;
    storage.sync_dir(&qdir).map_err(|e| io(e.to_string()))
}

/// Moves the whole segment file `id` into `quarantine/` (the caller syncs both directories),
/// returning the quarantine file's path and the readable frames it holds.
///
/// # Errors
/// An I/O error.
pub(crate) fn move_whole_segment(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
) -> Result<(String, Readable)> {
    let qdir = dir.join(QUARANTINE_DIR);
    let from = segment_path(dir, id);
    let file = storage
        .open(&from, OpenMode::Read)
        .map_err(Error::io_with(|| format!("opening {}", from.display())))?;
    let len = file.len().map_err(Error::io("reading a segment length"))?;
    let bytes = read_rest(&file, 0, len).map_err(|e| Error::Io {
        context: format!("reading {}", from.display()),
        source: std::io::Error::other(e),
    })?;
    drop(file);
    let (name, placeholder) = create_unique(
        storage,
        &qdir,
        &format!("{:020}-{:020}", id.0, 0),
        "damaged",
    )
    .map_err(|e| Error::Io {
        context: String::from("creating a quarantine file"),
        source: std::io::Error::other(e),
    })?;
    drop(placeholder);
    storage
        .rename(&from, &qdir.join(&name))
        .map_err(Error::io_with(|| {
            format!("moving {} to quarantine", from.display())
        }))?;
    Ok((
        format!("{QUARANTINE_DIR}/{name}"),
        readable_positions(&bytes),
    ))
}

/// The first and last positions, and the count, of checksum-valid frames in some bytes.
pub(crate) type Readable = (Option<u64>, Option<u64>, u64);

/// The first and last positions, and the count, of checksum-valid frames anywhere in `bytes`.
pub(crate) fn readable_positions(bytes: &[u8]) -> Readable {
    let mut i = 0usize;
    let (mut first, mut last, mut n) = (None, None, 0u64);
    while i + FRAME_HEADER_LEN <= bytes.len() {
        let frame = bytes.get(i..).and_then(|b| decode_frame(b).ok());
        match frame {
            Some((header, _)) => {
                let p = header.meta.position.0;
                first = Some(first.map_or(p, |f: u64| f.min(p)));
                last = Some(last.map_or(p, |l: u64| l.max(p)));
                n += 1;
                i += usize::try_from(header.frame_len()).unwrap_or(usize::MAX);
            }
            None => i += 1,
        }
    }
    (first, last, n)
}
