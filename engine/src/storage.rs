//! The storage seam: every byte the engine reads or writes in the log and the blob store goes
//! through [`Storage`] and [`StorageFile`], so that a simulated disk can stand in for the real
//! one. [`FsStorage`] is the real one. (The redb index is derived state and uses its own files.)

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// How to open a file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write; the file must not exist yet.
    CreateNew,
}

/// One open file. Reads and writes are positional, so one handle serves many readers.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    ///
    /// # Errors
    /// The operating system's error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    ///
    /// # Errors
    /// The operating system's error; some of the bytes may have been written.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    ///
    /// # Errors
    /// The operating system's error; the durability of earlier writes is then unknown.
    fn sync_data(&self) -> io::Result<()>;
    /// The file's length.
    ///
    /// # Errors
    /// The operating system's error.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    ///
    /// # Errors
    /// The operating system's error.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends the file.
    ///
    /// # Errors
    /// The operating system's error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `offset`.
    ///
    /// # Errors
    /// `UnexpectedEof` when the file ends first, or the operating system's error.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = buf.get_mut(n..).unwrap_or_default();
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A held lock; dropping it releases the lock.
pub trait StorageLock: Send + Sync + fmt::Debug {}

/// A file system.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Opens a file.
    ///
    /// # Errors
    /// The operating system's error (`NotFound`, `AlreadyExists`, ...).
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>>;
    /// Creates a directory and its parents.
    ///
    /// # Errors
    /// The operating system's error.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries of a directory, sorted.
    ///
    /// # Errors
    /// The operating system's error.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Renames a file.
    ///
    /// # Errors
    /// The operating system's error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    ///
    /// # Errors
    /// The operating system's error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable (created, renamed and removed files).
    ///
    /// # Errors
    /// The operating system's error.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path`, creating it if needed, without waiting.
    ///
    /// # Errors
    /// `WouldBlock` when another holder has it, or the operating system's error.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>>;
}

/// Makes `bytes` the content of `dir/name`, durably and all at once: written to `name.new`,
/// synced, renamed over `name`, and the directory synced. A crash leaves the old file or the new
/// one, never a mix; a `name.new` a crash left is removed first, and one a failed write left is
/// removed after.
pub(crate) fn replace_file(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> crate::error::Result<()> {
    use crate::error::Error;
    let temp = dir.join(format!("{name}.new"));
    let path = dir.join(name);
    let io = |what: &'static str, path: &Path| {
        let path = path.display().to_string();
        Error::io_with(move || format!("{what} {path}"))
    };
    if storage.exists(&temp) {
        storage
            .remove_file(&temp)
            .map_err(io("removing the stale", &temp))?;
    }
    let file = storage
        .open(&temp, OpenMode::CreateNew)
        .map_err(io("creating", &temp))?;
    let written = file
        .write_all_at(bytes, 0)
        .and_then(|()| file.sync_data())
        .map_err(io("writing", &temp));
    drop(file);
    if let Err(e) = written {
        // A full disk, say: leave no partial copy behind.
        let _ = storage.remove_file(&temp);
        return Err(e);
    }
    storage
        .rename(&temp, &path)
        .map_err(io("renaming a new copy over", &path))?;
    storage.sync_dir(dir).map_err(io("syncing", dir))
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.0.metadata().map(|m| m.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

#[derive(Debug)]
struct FsLock(#[allow(dead_code)] File);

impl StorageLock for FsLock {}

impl Storage for FsStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        match mode {
            OpenMode::Read => options.read(true),
            OpenMode::ReadWrite => options.read(true).write(true),
            OpenMode::CreateNew => options.read(true).write(true).create_new(true),
        };
        Ok(Arc::new(FsFile(options.open(path)?)))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(FsLock(file))),
            Err(fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
