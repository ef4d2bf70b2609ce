//! The tree's level files: `level-NN` holds, back to back, the 32-byte hash of every complete
//! aligned subtree of `2^NN` leaves, in leaf order (level 0 the leaf hashes). A hash is written
//! once, when its subtree completes, and never changes; a file holds `size >> NN` hashes for a
//! tree of `size` leaves.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use journal_format::merkle::TreeHash;

use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage, StorageFile};

/// Bytes per stored hash.
pub(super) const HASH_LEN: u64 = 32;

/// The most levels a tree has: one per bit of a `u64` size.
const LEVELS_MAX: usize = 64;

/// The name of level `level`'s file.
fn file_name(level: usize) -> String {
    format!("level-{level:02}")
}

/// The open level files of one tree.
#[derive(Debug)]
pub(super) struct Levels {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// `files[k]` is level `k`'s file; the levels above the last are not created yet.
    files: RwLock<Vec<Arc<dyn StorageFile>>>,
    /// Whether each level was written since it was last synced.
    dirty: Mutex<Vec<bool>>,
    /// Whether a level file was created or removed since the directory was last synced: only
    /// then does a sync make the directory durable too.
    listing_changed: AtomicBool,
}

impl Levels {
    /// Opens the level files in `dir` (the tree's directory): `level-00`, `level-01`, ... as
    /// far as they go without a gap. A file past a gap is removed (it cannot be part of a tree
    /// whose lower level is missing). Read-only, nothing is removed.
    pub(super) fn open(storage: Arc<dyn Storage>, dir: &Path, read_only: bool) -> Result<Levels> {
        let mode = if read_only {
            OpenMode::Read
        } else {
            OpenMode::ReadWrite
        };
        let names = storage
            .list_dir(dir)
            .map_err(Error::io_with(|| format!("listing {}", dir.display())))?;
        let mut files = Vec::new();
        while files.len() < LEVELS_MAX && names.contains(&file_name(files.len())) {
            let path = dir.join(file_name(files.len()));
            let file = storage
                .open(&path, mode)
                .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
            files.push(file);
        }
        let levels = Levels {
            storage,
            dir: dir.to_path_buf(),
            dirty: Mutex::new(vec![false; files.len()]),
            // Open may remove files past a gap: the first sync makes that durable too.
            listing_changed: AtomicBool::new(!read_only),
            files: RwLock::new(files),
        };
        if !read_only {
            levels.remove_from(levels.count(), &names)?;
        }
        Ok(levels)
    }

    /// No level files, none to be created: a tree that is not available.
    pub(super) fn open_none(storage: Arc<dyn Storage>, dir: &Path) -> Levels {
        Levels {
            storage,
            dir: dir.to_path_buf(),
            files: RwLock::new(Vec::new()),
            dirty: Mutex::new(Vec::new()),
            listing_changed: AtomicBool::new(false),
        }
    }

    /// How many level files there are.
    pub(super) fn count(&self) -> usize {
        self.files.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// How many whole hashes level `level`'s file holds (0 for a level not created).
    pub(super) fn hashes(&self, level: usize) -> Result<u64> {
        let Some(file) = self.file(level) else {
            return Ok(0);
        };
        let len = file.len().map_err(Error::io_with(|| {
            format!("reading the length of {}", file_name(level))
        }))?;
        Ok(len / HASH_LEN)
    }

    fn file(&self, level: usize) -> Option<Arc<dyn StorageFile>> {
        let files = self.files.read().unwrap_or_else(|p| p.into_inner());
        files.get(level).cloned()
    }

    /// Reads `count` hashes of level `level` from index `index` on.
    pub(super) fn read(&self, level: usize, index: u64, count: usize) -> Result<Vec<TreeHash>> {
        let file = self.file(level).ok_or_else(|| {
            Error::Tree(format!(
                "the tree has no level {level} (asked for hash {index})"
            ))
        })?;
        let mut bytes = vec![0u8; count * HASH_LEN as usize];
        file.read_exact_at(&mut bytes, index * HASH_LEN)
            .map_err(Error::io_with(|| {
                format!("reading {count} hashes at {index} of {}", file_name(level))
            }))?;
        Ok(bytes
            .chunks_exact(HASH_LEN as usize)
            .map(|c| {
                let mut h = [0u8; 32];
                h.copy_from_slice(c);
                TreeHash(h)
            })
            .collect())
    }

    /// Writes `hashes` (whole 32-byte hashes, back to back) into level `level` from index
    /// `index` on, creating the level's file when it is the next one.
    pub(super) fn write(&self, level: usize, index: u64, hashes: &[u8]) -> Result<()> {
        debug_assert_eq!(hashes.len() as u64 % HASH_LEN, 0);
        let file = match self.file(level) {
            Some(file) => file,
            None => self.create(level)?,
        };
        file.write_all_at(hashes, index * HASH_LEN)
            .map_err(Error::io_with(|| {
                format!("writing hashes at {index} of {}", file_name(level))
            }))?;
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dirty.get_mut(level) {
            *d = true;
        }
        Ok(())
    }

    /// Creates level `level`'s file, which must be the next level.
    fn create(&self, level: usize) -> Result<Arc<dyn StorageFile>> {
        let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
        if level != files.len() || level >= LEVELS_MAX {
            return Err(Error::Internal(format!(
                "the tree's level {level} was written before level {}",
                files.len()
            )));
        }
        let path = self.dir.join(file_name(level));
        // A file left by a crash before its level was counted (never part of a head).
        if self.storage.exists(&path) {
            self.storage
                .remove_file(&path)
                .map_err(Error::io_with(|| format!("removing {}", path.display())))?;
        }
        let file = self
            .storage
            .open(&path, OpenMode::CreateNew)
            .map_err(Error::io_with(|| format!("creating {}", path.display())))?;
        files.push(Arc::clone(&file));
        self.listing_changed.store(true, Ordering::Release);
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(true);
        Ok(file)
    }

    /// Cuts every level to the hashes a tree of `size` leaves has, removing the levels it
    /// does not reach.
    pub(super) fn truncate(&self, size: u64) -> Result<()> {
        let count = self.count();
        for level in 0..count {
            let keep = if level < 64 { size >> level } else { 0 };
            if let Some(file) = self.file(level) {
                if self.hashes(level)? != keep {
                    file.set_len(keep * HASH_LEN).map_err(Error::io_with(|| {
                        format!("cutting {} to {keep} hashes", file_name(level))
                    }))?;
                    self.mark_dirty(level);
                }
            }
        }
        Ok(())
    }

    fn mark_dirty(&self, level: usize) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dirty.get_mut(level) {
            *d = true;
        }
    }

    /// Makes every level written since the last sync durable, and the directory when a level
    /// file was created or removed since. A level (and a directory) stays to sync until its sync succeeds,
    /// so that a head is never written over hashes a failed sync left behind.
    pub(super) fn sync(&self) -> Result<()> {
        let dirty: Vec<usize> = {
            let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            dirty
                .iter()
                .enumerate()
                .filter_map(|(k, d)| d.then_some(k))
                .collect()
        };
        for level in dirty {
            if let Some(file) = self.file(level) {
                file.sync_data()
                    .map_err(Error::io_with(|| format!("syncing {}", file_name(level))))?;
            }
            let mut flags = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(d) = flags.get_mut(level) {
                *d = false;
            }
        }
        if self.listing_changed.swap(false, Ordering::AcqRel) {
            let synced = self.storage.sync_dir(&self.dir);
            if synced.is_err() {
                self.listing_changed.store(true, Ordering::Release);
            }
            synced.map_err(Error::io_with(|| format!("syncing {}", self.dir.display())))?;
        }
        Ok(())
    }

    /// Removes every level file: the tree starts again from no leaves.
    pub(super) fn clear(&self) -> Result<()> {
        let names = self
            .storage
            .list_dir(&self.dir)
            .map_err(Error::io_with(|| format!("listing {}", self.dir.display())))?;
        self.files
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.dirty.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.remove_from(0, &names)
    }

    /// Removes the level files from level `first` on, of those `names` lists.
    fn remove_from(&self, first: usize, names: &[String]) -> Result<()> {
        for level in first..LEVELS_MAX {
            let name = file_name(level);
            if names.contains(&name) {
                let path = self.dir.join(&name);
                self.storage
                    .remove_file(&path)
                    .map_err(Error::io_with(|| format!("removing {}", path.display())))?;
                self.listing_changed.store(true, Ordering::Release);
            }
        }
        Ok(())
    }
}
