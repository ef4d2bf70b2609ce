//! What salvage does besides moving damage aside (`recovery::quarantine`): it keeps every frame
//! whose checksums and chain hold. A segment that lost only its footer is sealed again when the
//! next file continues it, or becomes the tail when nothing after it does; files in `segments/`
//! that are not segments of this journal are set aside, each with the reason, never trusted.

use std::path::Path;

use journal_format::{SegmentFooter, SegmentHeader, SegmentId, SEGMENT_HEADER_LEN};

use crate::error::{Error, Result};
use crate::log::context::RecoveryContext;
use crate::log::map::Head;
use crate::log::quarantine::move_whole_segment;
use crate::log::quarantine::QUARANTINE_DIR;
use crate::log::report::{RecoveryAction, RecoveryReport};
use crate::log::segment::Segment;
use crate::log::segment::{segment_path, SEGMENTS_DIR};
use crate::log::tail::{scan_tail, Tail};
use crate::storage::{OpenMode, Storage};

/// Salvage of segment `id`, which is not the last and has no valid footer: its frames are
/// scanned as a tail's are (a partial footer is cut and kept). When they all hold and the next
/// file (`later[0]`) continues them, the segment is sealed again (`resealed`): `(segment, true)`.
/// When the next file does not continue them, the segment is the log's tail and every later file
/// is set aside: `(segment, false)`. `None` when the frames do not hold (the caller quarantines).
///
/// # Errors
/// An I/O error.
pub(crate) fn unsealed(
    storage: &dyn Storage,
    dir: &Path,
    id: SegmentId,
    prev: Head,
    later: &[SegmentId],
    report: &mut RecoveryReport,
) -> Result<Option<(Segment, bool)>> {
    let path = segment_path(dir, id);
    let file = storage
        .open(&path, OpenMode::ReadWrite)
        .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
    let len = file.len().map_err(Error::io("reading a segment length"))?;
    let mut header_bytes = vec![0u8; SEGMENT_HEADER_LEN];
    file.read_exact_at(&mut header_bytes, 0)
        .map_err(Error::io("reading a segment header"))?;
    let Ok(header) = SegmentHeader::decode(&header_bytes) else {
        return Ok(None);
    };
    if header.first_position != prev.position.next() || header.prev_hash != prev.hash {
        return Ok(None);
    }
    let mut scratch = RecoveryReport::default();
    let mut ctx = RecoveryContext {
        storage,
        dir,
        committed: journal_format::Position::ZERO,
        read_only: false,
        report: &mut scratch,
    };
    let tail = Tail {
        id,
        file: &file,
        len,
        header: &header,
    };
    let Ok(mut state) = scan_tail(&mut ctx, &tail, None) else {
        return Ok(None);
    };
    report.actions.append(&mut scratch.actions);
    let end = Head {
        position: state.last_position,
        hash: state.last_hash,
    };
    let continues = match later.first() {
        Some(next) => continued_by(storage, dir, *next, id, end),
        None => false,
    };
    if continues {
        let footer = SegmentFooter {
            last_position: state.last_position,
            count: state.last_position.0 + 1 - header.first_position.0,
            index_offset: journal_format::ByteOffset(state.end_offset),
            last_hash: state.last_hash,
            entries: state.sparse.clone(),
        };
        file.write_all_at(&footer.encode(), state.end_offset)
            .and_then(|()| file.sync_data())
            .map_err(Error::io_with(|| format!("sealing segment {id} again")))?;
        state.sealed = true;
        report.actions.push(RecoveryAction::Resealed {
            segment: id.file_name(),
            last_position: state.last_position.0,
        });
    } else {
        let reason = format!(
            "does not continue the log, which ends at position {} in segment {id}",
            state.last_position
        );
        set_aside(storage, dir, later, &reason, report)?;
    }
    let segment = Segment::new(id, &header, file, state);
    Ok(Some((segment, continues)))
}

/// Whether the header of segment file `next` continues segment `id`, which ends at `end`.
fn continued_by(
    storage: &dyn Storage,
    dir: &Path,
    next: SegmentId,
    id: SegmentId,
    end: Head,
) -> bool {
    let Ok(file) = storage.open(&segment_path(dir, next), OpenMode::Read) else {
        return false;
    };
    let mut bytes = vec![0u8; SEGMENT_HEADER_LEN];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return false;
    }
    SegmentHeader::decode(&bytes).is_ok_and(|h| {
        h.segment_id == next
            && next.0 == id.0 + 1
            && h.first_position == end.position.next()
            && h.prev_hash == end.hash
    })
}

/// Moves the whole segment files `ids` into `quarantine/`, reporting each with `reason` and the
/// positions of the readable frames it holds.
///
/// # Errors
/// An I/O error.
pub(crate) fn set_aside(
    storage: &dyn Storage,
    dir: &Path,
    ids: &[SegmentId],
    reason: &str,
    report: &mut RecoveryReport,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let qdir = dir.join(QUARANTINE_DIR);
    storage
        .create_dir_all(&qdir)
        .map_err(Error::io_with(|| format!("creating {}", qdir.display())))?;
    for id in ids {
        let (file, (first, last, readable)) = move_whole_segment(storage, dir, *id)?;
        tracing::warn!(segment = %id, reason, "salvage set a file aside");
        report.actions.push(RecoveryAction::Quarantined {
            segment: id.file_name(),
            offset: 0,
            detail: format!("{}: {reason}", id.file_name()),
            files: vec![file],
            positions: first.zip(last).map(|(a, b)| [a, b]),
            readable_frames: readable,
        });
    }
    storage
        .sync_dir(&qdir)
        .map_err(Error::io("syncing quarantine"))?;
    storage
        .sync_dir(&dir.join(SEGMENTS_DIR))
        .map_err(Error::io("syncing the segments directory"))?;
    Ok(())
}
