//! `HEAD`, the head record file: durable evidence, apart from the segment files, of how far the
//! log was committed. The writer records the head when the journal opens, at every seal, at a
//! clean close, and after a commit once a second of recorded time passed (durable mode) or after
//! each sync (buffered mode). Opening reads it
//! before recovery and refuses a log that ends before it or holds another chain link at its
//! position (`evidence::check`). Layout: `docs/FORMAT.md`, "Head record".

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use journal_format::head_record::{
    HeadRecord, HEAD_FILE_LEN, HEAD_FLAG_BUFFERED, HEAD_SLOT_STRIDE,
};
use journal_format::{ChainHash, Position};

use crate::error::{Error, Result};
use crate::log::map::Head;
use crate::storage::{OpenMode, Storage, StorageFile};

/// The head record's file name inside the journal directory.
pub(crate) const HEAD_FILE: &str = "HEAD";
const HEAD_TEMP_FILE: &str = "HEAD.tmp";

/// The open head record of a journal opened for writing.
///
/// # Invariants
/// The recorded position never moves backwards, and only positions durable in the log are
/// recorded (the callers' duty: the writer after a sync, the index thread only in durable mode or
/// for positions the writer reported synced).
pub(crate) struct HeadFile {
    file: Arc<dyn StorageFile>,
    last: Mutex<HeadRecord>,
}

impl std::fmt::Debug for HeadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadFile")
            .field(
                "last",
                &*self.last.lock().unwrap_or_else(|p| p.into_inner()),
            )
            .finish_non_exhaustive()
    }
}

fn path(dir: &Path) -> PathBuf {
    dir.join(HEAD_FILE)
}

/// Reads the head record in `dir`: `None` when there is no `HEAD` (a new journal, or one written
/// before the head record existed).
///
/// # Errors
/// [`Error::HistoryMismatch`] when the file exists but neither slot is valid; an I/O error.
pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<Option<HeadRecord>> {
    let path = path(dir);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let file = storage
        .open(&path, OpenMode::Read)
        .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
    let len = file.len().map_err(Error::io_with(|| {
        format!("reading the length of {}", path.display())
    }))?;
    let mut bytes = vec![0u8; usize::try_from(len.min(HEAD_FILE_LEN)).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0)
        .map_err(Error::io_with(|| format!("reading {}", path.display())))?;
    HeadRecord::decode_file(&bytes)
        .map(Some)
        .map_err(|e| Error::HistoryMismatch {
            evidence: HEAD_FILE.into(),
            position: Position::ZERO,
            detail: format!("{HEAD_FILE} is damaged, neither of its slots is valid ({e})"),
        })
}

impl HeadFile {
    /// Writes a new `HEAD` recording `head` (both slots), through a temporary file and a rename
    /// so that no crash leaves a `HEAD` without a valid slot.
    ///
    /// # Errors
    /// An I/O error.
    pub(crate) fn create(
        storage: &dyn Storage,
        dir: &Path,
        head: Head,
        buffered: bool,
    ) -> Result<HeadFile> {
        let flags = if buffered { HEAD_FLAG_BUFFERED } else { 0 };
        if let Some(kept) = HeadFile::reuse(storage, dir, head, flags) {
            return Ok(kept);
        }
        let temp = dir.join(HEAD_TEMP_FILE);
        let io = |what: &'static str| Error::io_with(move || format!("{what} {HEAD_FILE}"));
        if storage.exists(&temp) {
            // Left by a crash while a HEAD was being made: never renamed, so never evidence.
            storage
                .remove_file(&temp)
                .map_err(io("removing a stale copy of"))?;
        }
        let file = storage
            .open(&temp, OpenMode::CreateNew)
            .map_err(io("creating"))?;
        let (bytes, record) = HeadRecord::new_file(head.position, head.hash, flags);
        let written = file
            .write_all_at(&bytes, 0)
            .map_err(io("writing"))
            .and_then(|()| file.sync_data().map_err(io("syncing")));
        drop(file);
        if let Err(e) = written {
            // A full disk, say: leave no empty copy behind.
            let _ = storage.remove_file(&temp);
            return Err(e);
        }
        storage
            .rename(&temp, &path(dir))
            .map_err(io("renaming the new"))?;
        storage
            .sync_dir(dir)
            .map_err(io("syncing the directory of"))?;
        let file = storage
            .open(&path(dir), OpenMode::ReadWrite)
            .map_err(io("opening"))?;
        Ok(HeadFile {
            file,
            last: Mutex::new(record),
        })
    }

    /// The `HEAD` already in `dir` when it records `head` with `flags` in both of its slots:
    /// opening a journal whose head has not moved then writes nothing (a reading command leaves
    /// the directory as it found it, and works on a full disk).
    fn reuse(storage: &dyn Storage, dir: &Path, head: Head, flags: u16) -> Option<HeadFile> {
        let file = storage.open(&path(dir), OpenMode::ReadWrite).ok()?;
        let mut bytes = vec![0u8; usize::try_from(HEAD_FILE_LEN).ok()?];
        file.read_exact_at(&mut bytes, 0).ok()?;
        let slot = |offset: u64| {
            let start = usize::try_from(offset).ok()?;
            HeadRecord::decode(bytes.get(start..)?).ok()
        };
        let (a, b) = (slot(0)?, slot(HEAD_SLOT_STRIDE)?);
        let last = if b.sequence > a.sequence { b } else { a };
        let same =
            |r: &HeadRecord| r.position == head.position && r.hash == head.hash && r.flags == flags;
        (same(&a) && same(&b)).then(|| HeadFile {
            file,
            last: Mutex::new(last),
        })
    }

    /// Records `head` as durably committed, unless a later position is recorded already.
    ///
    /// # Errors
    /// An I/O error (the previous record stays valid in the other slot).
    pub(crate) fn record(&self, position: Position, hash: ChainHash) -> Result<()> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if position <= last.position {
            return Ok(());
        }
        let next = HeadRecord {
            sequence: last.sequence + 1,
            position,
            hash,
            flags: last.flags,
        };
        self.file
            .write_all_at(&next.encode(), next.slot_offset())
            .and_then(|()| self.file.sync_data())
            .map_err(Error::io_with(|| {
                format!("recording position {position} in {HEAD_FILE}")
            }))?;
        *last = next;
        Ok(())
    }
}
