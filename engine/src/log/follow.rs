//! Following a log another process writes (a read-only journal): picking up the frames
//! appended to the tail since the last look, a tail the writer sealed, and the segments it
//! created after it.

use std::path::Path;
use std::sync::Arc;

use journal_format::{Position, SegmentHeader, SegmentId};

use crate::error::{Error, Result};
use crate::log::context::RecoveryContext;
use crate::log::map::{Head, Log};
use crate::log::recovery::{self, Opening};
use crate::log::report::RecoveryReport;
use crate::log::segment::{read_footer, Segment, SEGMENTS_DIR};
use crate::log::tail::{scan_tail, Tail};
use crate::storage::Storage;

/// Picks up what the writing process appended since the last look and returns the new head.
///
/// # Errors
/// [`Error::Corruption`] when the newly written bytes are damaged, or an I/O error.
pub(crate) fn refresh(storage: &dyn Storage, dir: &Path, log: &Log) -> Result<Head> {
    let segments = log.segments();
    let Some(tail) = segments.last().cloned() else {
        // Nothing was there at open: look again from scratch.
        let recovered = recovery::recover(
            storage,
            dir,
            Opening {
                salvage: false,
                committed: Position::ZERO,
                read_only: true,
                base: None,
            },
        )?;
        log.replace(recovered.segments, recovered.head);
        return Ok(recovered.head);
    };
    let names = storage
        .list_dir(&dir.join(SEGMENTS_DIR))
        .map_err(Error::io("listing segments"))?;
    let later: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| SegmentId::from_file_name(n))
        .filter(|id| *id > tail.id)
        .collect();
    reread_tail(storage, dir, &tail, later.is_empty())?;
    let tail_state = tail.snapshot();
    let mut head = Head {
        position: tail_state.last_position,
        hash: tail_state.last_hash,
    };
    if tail_state.sealed {
        head = open_later(storage, dir, log, &later, head)?;
    }
    log.advance_head(head);
    Ok(log.head())
}

/// Brings the tail's state up to its file: sealed from its footer when the writer moved on to
/// later segments (`last`: it did not), else the frames appended since, scanned.
fn reread_tail(storage: &dyn Storage, dir: &Path, tail: &Segment, last: bool) -> Result<()> {
    let state = tail.snapshot();
    let len = tail
        .file
        .len()
        .map_err(Error::io("reading the tail length"))?;
    if !last && !state.sealed {
        // The writer sealed the tail and moved on.
        if let Ok(footer) = read_footer(&*tail.file, len) {
            tail.seal_from(footer);
        }
    } else if last && len > state.end_offset {
        let header = SegmentHeader {
            segment_id: tail.id,
            first_position: tail.first_position,
            prev_hash: tail.prev_hash,
        };
        let mut ctx = RecoveryContext {
            storage,
            dir,
            committed: Position::ZERO,
            read_only: true,
            report: &mut RecoveryReport::default(),
        };
        let scanned = Tail {
            id: tail.id,
            file: &tail.file,
            len,
            header: &header,
        };
        let fresh = match scan_tail(&mut ctx, &scanned, Some(state)) {
            Ok(fresh) => fresh,
            Err(damage) => {
                // The writer trims the preallocated space past its last frame when it closes:
                // a scan that ran into the new end read a file that shrank under it, not
                // damage. Look again at the file as it is now.
                let now = tail
                    .file
                    .len()
                    .map_err(Error::io("reading the tail length"))?;
                if now < len {
                    return reread_tail(storage, dir, tail, last);
                }
                return Err(damage.into_error());
            }
        };
        tail.set_state(fresh);
    }
    Ok(())
}

/// Opens the segments created after the tail (`later`, in order), adds them to `log`, and
/// returns the head after the last one opened.
fn open_later(
    storage: &dyn Storage,
    dir: &Path,
    log: &Log,
    later: &[SegmentId],
    mut head: Head,
) -> Result<Head> {
    let mut scratch = RecoveryReport::default();
    let mut ctx = RecoveryContext {
        storage,
        dir,
        committed: Position::ZERO,
        read_only: true,
        report: &mut scratch,
    };
    for (i, id) in later.iter().enumerate() {
        let is_last = i + 1 == later.len();
        match recovery::open_segment(&mut ctx, *id, is_last, head) {
            Ok(Some(segment)) => {
                let s = segment.snapshot();
                head = Head {
                    position: s.last_position,
                    hash: s.last_hash,
                };
                log.push(Arc::new(segment));
            }
            Ok(None) => break,
            Err(damage) => return Err(damage.into_error()),
        }
    }
    Ok(head)
}
