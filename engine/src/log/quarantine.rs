//! `quarantine/`: where bytes recovery or salvage cut from the log are kept, under names never
//! reused, with the report of a salvage; and moving a whole segment there.

use std::path::Path;
use std::sync::Arc;

use journal_format::frame::{decode_frame, is_zeroed};
use journal_format::{SegmentId, FRAME_HEADER_LEN};

use crate::error::{Error, Result};
use crate::log::report::{RecoveryAction, RecoveryReport};
use crate::log::segment::{read_rest, segment_path};
use crate::storage::{OpenMode, Storage, StorageFile};

/// The directory inside the journal that holds bytes moved aside by recovery.
pub(crate) const QUARANTINE_DIR: &str = "quarantine";

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
pub(crate) fn save_cut(
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

pub(crate) fn trim(
    file: &Arc<dyn StorageFile>,
    to: u64,
    len: u64,
) -> std::result::Result<(), String> {
    if to < len {
        file.set_len(to)
            .map_err(|e| format!("cannot truncate the tail: {e}"))?;
        file.sync_data()
            .map_err(|e| format!("cannot sync the truncated tail: {e}"))?;
    }
    Ok(())
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
