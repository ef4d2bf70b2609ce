//! The content-addressed blob store: large outputs kept beside the log, named by the BLAKE3
//! hash of their bytes (`blobs/ab/abcdef...`), referenced from events as `blake3:<hex>` in
//! `outputRef` or `refs`. A blob is written to a temporary file, synced, renamed into place, and
//! the directory synced, so a crash never leaves a partial blob under its final name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use journal_format::envelope::BLOB_REF_PREFIX;
use journal_format::ChainHash;

use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage};

/// The directory inside the journal that holds blobs.
pub(crate) const BLOBS_DIR: &str = "blobs";

/// The file beside the blob store listing the blobs redactions destroyed.
const SHREDDED_FILE: &str = "blobs.shredded";

/// The largest blob accepted (1 GiB).
pub const BLOB_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// What checking one blob found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobCheck {
    /// Present, and its bytes hash to its name.
    Ok,
    /// Not in the store.
    Missing,
    /// Present, but its bytes hash to something else.
    Mismatch {
        /// The hash of the bytes found.
        actual: String,
    },
}

/// The blob store of one journal.
#[derive(Debug, Clone)]
pub struct BlobStore {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
}

impl BlobStore {
    pub(crate) fn new(storage: Arc<dyn Storage>, journal_dir: &Path) -> BlobStore {
        BlobStore {
            storage,
            dir: journal_dir.join(BLOBS_DIR),
        }
    }

    fn journal_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join(hex.get(..2).unwrap_or("00")).join(hex)
    }

    /// Stores `bytes` and returns the reference to put in an event: `blake3:<hex>`. Storing the
    /// same bytes twice stores them once.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] over [`BLOB_BYTES_MAX`], or an I/O error.
    pub fn put(&self, bytes: &[u8]) -> Result<String> {
        if bytes.len() as u64 > BLOB_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: "blob size",
                actual: bytes.len() as u64,
                limit: BLOB_BYTES_MAX,
            });
        }
        let hex = ChainHash(*blake3::hash(bytes).as_bytes()).to_hex();
        let path = self.path_of(&hex);
        if self.storage.exists(&path) {
            return Ok(format!("{BLOB_REF_PREFIX}{hex}"));
        }
        let shard = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone());
        self.storage
            .create_dir_all(&shard)
            .map_err(Error::io_with(|| format!("creating {}", shard.display())))?;
        let tmp = shard.join(format!("{hex}.tmp"));
        if self.storage.exists(&tmp) {
            self.storage
                .remove_file(&tmp)
                .map_err(Error::io("removing a stale blob temp file"))?;
        }
        let file = self
            .storage
            .open(&tmp, OpenMode::CreateNew)
            .map_err(Error::io_with(|| format!("creating {}", tmp.display())))?;
        file.write_all_at(bytes, 0)
            .map_err(Error::io("writing a blob"))?;
        file.sync_data().map_err(Error::io("syncing a blob"))?;
        drop(file);
        self.storage
            .rename(&tmp, &path)
            .map_err(Error::io_with(|| format!("renaming {}", tmp.display())))?;
        self.storage
            .sync_dir(&shard)
            .map_err(Error::io_with(|| format!("syncing {}", shard.display())))?;
        Ok(format!("{BLOB_REF_PREFIX}{hex}"))
    }

    /// The bytes of a blob, by reference (`blake3:<hex>`) or bare hex; `None` when absent.
    ///
    /// # Errors
    /// An I/O error, or [`Error::Corruption`]-like mismatch reported as `InvalidInput` when the
    /// stored bytes do not hash to the name.
    pub fn get(&self, reference: &str) -> Result<Option<Vec<u8>>> {
        let hex = reference.strip_prefix(BLOB_REF_PREFIX).unwrap_or(reference);
        let path = self.path_of(hex);
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let bytes = self.read(&path)?;
        let actual = ChainHash(*blake3::hash(&bytes).as_bytes()).to_hex();
        if actual != hex {
            return Err(Error::InvalidInput(format!(
                "blob {hex} is damaged: its bytes hash to {actual}"
            )));
        }
        Ok(Some(bytes))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let file = self
            .storage
            .open(path, OpenMode::Read)
            .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
        let len = file.len().map_err(Error::io("reading a blob length"))?;
        if len > BLOB_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: "blob size",
                actual: len,
                limit: BLOB_BYTES_MAX,
            });
        }
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        file.read_exact_at(&mut bytes, 0)
            .map_err(Error::io("reading a blob"))?;
        Ok(bytes)
    }

    /// Checks one blob against its name.
    ///
    /// # Errors
    /// An I/O error other than the blob being absent.
    pub fn check(&self, hex: &str) -> Result<BlobCheck> {
        let path = self.path_of(hex);
        if !self.storage.exists(&path) {
            return Ok(BlobCheck::Missing);
        }
        let bytes = self.read(&path)?;
        let actual = ChainHash(*blake3::hash(&bytes).as_bytes()).to_hex();
        Ok(if actual == hex {
            BlobCheck::Ok
        } else {
            BlobCheck::Mismatch { actual }
        })
    }

    /// Destroys a redacted event's blob: its bytes overwritten with zeros and synced, the file
    /// removed, and its name recorded in `blobs.shredded` (so `verify` knows why it is missing).
    /// Nothing happens for a blob not stored.
    ///
    /// # Errors
    /// An I/O error.
    pub fn shred(&self, hex: &str) -> Result<bool> {
        let path = self.path_of(hex);
        if !self.storage.exists(&path) {
            return Ok(false);
        }
        let io = |what: &'static str| {
            let path = path.display().to_string();
            Error::io_with(move || format!("{what} {path}"))
        };
        let file = self
            .storage
            .open(&path, OpenMode::ReadWrite)
            .map_err(io("opening"))?;
        let len = file.len().map_err(io("reading the size of"))?;
        let zeros = vec![0u8; usize::try_from(len).unwrap_or(0)];
        file.write_all_at(&zeros, 0)
            .and_then(|()| file.sync_data())
            .map_err(io("overwriting with zeros"))?;
        drop(file);
        let mut shredded = self.shredded()?;
        shredded.push(hex.to_string());
        shredded.sort_unstable();
        shredded.dedup();
        let text: String = shredded.iter().map(|h| format!("{h}\n")).collect();
        crate::storage::replace_file(
            &*self.storage,
            self.journal_dir(),
            SHREDDED_FILE,
            text.as_bytes(),
        )?;
        self.storage.remove_file(&path).map_err(io("removing"))?;
        let shard = path.parent().unwrap_or(&self.dir);
        self.storage
            .sync_dir(shard)
            .map_err(Error::io_with(|| format!("syncing {}", shard.display())))?;
        Ok(true)
    }

    /// The blobs destroyed by redactions (hex).
    ///
    /// # Errors
    /// An I/O error reading `blobs.shredded`.
    pub fn shredded(&self) -> Result<Vec<String>> {
        let path = self.journal_dir().join(SHREDDED_FILE);
        if !self.storage.exists(&path) {
            return Ok(Vec::new());
        }
        let bytes = self.read(&path)?;
        Ok(String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The names (hex) of every blob in the store.
    ///
    /// # Errors
    /// An I/O error listing the store.
    pub fn list(&self) -> Result<Vec<String>> {
        if !self.storage.exists(&self.dir) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for shard in self
            .storage
            .list_dir(&self.dir)
            .map_err(Error::io("listing blobs"))?
        {
            let shard_dir = self.dir.join(&shard);
            for name in self
                .storage
                .list_dir(&shard_dir)
                .map_err(Error::io("listing blobs"))?
            {
                if name.len() == 64 && !name.ends_with(".tmp") {
                    out.push(name);
                }
            }
        }
        Ok(out)
    }
}
