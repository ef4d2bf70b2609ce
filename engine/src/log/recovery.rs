//! Opening the log: checking every segment's header and footer, scanning the unsealed tail,
//! and deciding, row by row of the recovery table in `docs/FORMAT.md`, what damage means.
//!
//! Only the unsealed tail is scanned frame by frame, so opening does not slow down as the
//! journal grows; sealed segments are checked through their header and footer (their frames are
//! `verify`'s job). A torn final write is cut off and reported (its bytes kept in
//! `quarantine/`); any other damage refuses to open, naming the segment, offset and position,
//! unless the caller asked for salvage.

use std::path::Path;
use std::sync::Arc;

use journal_format::frame::is_zeroed;
use journal_format::{
    Position, SegmentHeader, SegmentId, SEGMENT_FOOTER_TRAILER_LEN, SEGMENT_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::log::map::Head;
use crate::log::quarantine::{
    create_unique, move_whole_segment, readable_positions, Readable, QUARANTINE_DIR,
};
use crate::log::report::{Damage, RecoveryAction, RecoveryReport};
use crate::log::salvage;
use crate::log::segment::{
    read_footer, read_rest, segment_path, Segment, SegmentState, SEGMENTS_DIR,
};
use crate::log::tail::scan_tail;
use crate::storage::{OpenMode, Storage};

/// The result of recovery.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: Vec<Arc<Segment>>,
    pub head: Head,
    pub report: RecoveryReport,
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
            let state = SegmentState {
                sparse: footer.entries,
                end_offset: footer.index_offset.0,
                last_position: footer.last_position,
                last_hash: footer.last_hash,
                sealed: true,
            };
            Ok(Some(Segment::new(id, &header, file, state)))
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
            Ok(Some(Segment::new(id, &header, file, state)))
        }
    }
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
            kept = Some(Segment::new(damage.segment, &header, file, state));
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
