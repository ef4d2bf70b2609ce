//! The key store file, `KEYS`: the data keys wrapped by the master key, the keys kept for single
//! events of a subject whose data key was destroyed, what was destroyed and why, and the
//! redaction facts still to append (docs/FORMAT.md "Key store").
//!
//! The file is small and replaced whole, never edited in place: the new content is written to
//! `KEYS.new` and synced, the old `KEYS` is overwritten with zeros and synced (so no copy of a
//! destroyed key stays in its blocks), then `KEYS.new` is renamed over it. A crash leaves the
//! old store (when `KEYS.new` is not whole) or the new one (once it is: the next open finishes
//! the steps), never a store that has lost a key it should hold or kept one it destroyed.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage};

/// The key store's file name in the journal's directory.
pub(crate) const KEYS_FILE: &str = "KEYS";
/// Where a new key store is written before it replaces the old one.
pub(crate) const KEYS_NEW_FILE: &str = "KEYS.new";
/// The key store's format version.
const FORMAT: u32 = 1;

/// Which field of an event names its subject, whose data key seals its content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    /// `sessionId` (the default).
    #[default]
    Session,
    /// `runtimeId`.
    Runtime,
    /// `productId`, the tenant.
    Tenant,
}

impl Subject {
    /// The subject's name, as `--subject` takes it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Subject::Session => "session",
            Subject::Runtime => "runtime",
            Subject::Tenant => "tenant",
        }
    }
}

/// The content of `KEYS` (JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct KeyFile {
    pub(crate) format: u32,
    /// Which field names an event's subject.
    pub(crate) subject: Subject,
    /// The id of the master key that wraps every key here.
    pub(crate) master: String,
    /// Each subject's current key generation (new events are sealed under it).
    pub(crate) current: BTreeMap<String, u64>,
    /// Wrapped data keys by key reference (`<subject>/<generation>`), base64.
    pub(crate) keys: BTreeMap<String, String>,
    /// Wrapped keys of single events, by key reference then event id, base64: kept when their
    /// data key was destroyed to redact other events of the same key.
    pub(crate) event_keys: BTreeMap<String, BTreeMap<String, String>>,
    /// Destroyed data keys by key reference, with what the redaction fact says (its event id,
    /// who, why).
    pub(crate) destroyed: BTreeMap<String, Value>,
    /// Single events whose keys were destroyed, by event id, with what the fact says.
    pub(crate) destroyed_events: BTreeMap<String, Value>,
    /// Redaction facts to append (their JSON form): written with the destruction, appended just
    /// after, and appended on the next open if a crash came between.
    pub(crate) pending: Vec<Value>,
}

impl KeyFile {
    /// An empty store for `master`'s id.
    pub(crate) fn new(subject: Subject, master: String) -> KeyFile {
        KeyFile {
            format: FORMAT,
            subject,
            master,
            ..KeyFile::default()
        }
    }
}

/// A step of replacing the store, for tests that crash between steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// About to write `KEYS.new`.
    Started,
    /// `KEYS.new` written and synced.
    NewWritten,
    /// The old `KEYS` overwritten with zeros and synced.
    OldZeroed,
    /// `KEYS.new` renamed over `KEYS` and the directory synced.
    Renamed,
    /// The redaction fact appended.
    FactAppended,
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let what = format!("{what} {}", path.display());
    move |e| Error::io_with(move || what)(e)
}

fn read_whole(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>> {
    let file = storage
        .open(path, OpenMode::Read)
        .map_err(io("opening", path))?;
    let len = file.len().map_err(io("reading the size of", path))?;
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0)
        .map_err(io("reading", path))?;
    Ok(bytes)
}

fn parse(bytes: &[u8]) -> Option<KeyFile> {
    serde_json::from_slice::<KeyFile>(bytes)
        .ok()
        .filter(|f| f.format == FORMAT)
}

/// Whether `dir` holds a key store (the journal is encrypted).
pub(crate) fn exists(storage: &dyn Storage, dir: &Path) -> bool {
    storage.exists(&dir.join(KEYS_FILE)) || storage.exists(&dir.join(KEYS_NEW_FILE))
}

/// Overwrites the whole of `path` with zeros and syncs it.
fn zero(storage: &dyn Storage, path: &Path) -> Result<()> {
    let file = storage
        .open(path, OpenMode::ReadWrite)
        .map_err(io("opening", path))?;
    let len = file.len().map_err(io("reading the size of", path))?;
    let zeros = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.write_all_at(&zeros, 0)
        .and_then(|()| file.sync_data())
        .map_err(io("overwriting with zeros", path))
}

/// Reads the store of `dir`. Writable, it first finishes a replacement a crash interrupted (a
/// whole `KEYS.new` replaces `KEYS`; a partial one is wiped and removed). Read-only, it reads
/// the newer whole copy and changes nothing.
///
/// # Errors
/// [`Error::Keys`] when no whole store is there; I/O errors.
pub(crate) fn load(storage: &dyn Storage, dir: &Path, writable: bool) -> Result<KeyFile> {
    let path = dir.join(KEYS_FILE);
    let new = dir.join(KEYS_NEW_FILE);
    if storage.exists(&new) {
        let bytes = read_whole(storage, &new)?;
        match parse(&bytes) {
            Some(file) if !writable => return Ok(file),
            Some(file) => {
                finish(storage, dir, &mut |_| {})?;
                return Ok(file);
            }
            None if writable => {
                zero(storage, &new)?;
                storage
                    .remove_file(&new)
                    .map_err(io("removing the partial", &new))?;
                storage.sync_dir(dir).map_err(io("syncing", dir))?;
            }
            None => {}
        }
    }
    let bytes = read_whole(storage, &path)?;
    parse(&bytes).ok_or_else(|| {
        Error::Keys(format!(
            "the key store {} is not a whole key store (format {FORMAT})",
            path.display()
        ))
    })
}

/// The store of `dir` as a source ships it to its replicas (JSON): read as it is now (a whole
/// `KEYS.new` when a replacement is under way), without the redaction facts still to append
/// (a replica gets them from the log). `None` when `dir` holds no store. The data keys in it
/// are wrapped: the master key never leaves the journal's machine.
///
/// # Errors
/// [`Error::Keys`] when no whole store is there; I/O errors.
pub(crate) fn copy(storage: &dyn Storage, dir: &Path) -> Result<Option<Vec<u8>>> {
    if !exists(storage, dir) {
        return Ok(None);
    }
    let mut file = load(storage, dir, false)?;
    file.pending.clear();
    serde_json::to_vec(&file)
        .map(Some)
        .map_err(|e| Error::Internal(format!("the key store does not serialize: {e}")))
}

/// A store a source shipped ([`copy`]), checked to be whole.
///
/// # Errors
/// [`Error::Keys`] when `bytes` are not a whole key store.
pub(crate) fn parse_copy(bytes: &[u8]) -> Result<KeyFile> {
    parse(bytes).ok_or_else(|| {
        Error::Keys(format!(
            "the key store copied from the source is not a whole key store (format {FORMAT})"
        ))
    })
}

/// Replaces the store of `dir` with `file`, calling `step` after each step.
///
/// # Errors
/// I/O errors; the store is then the old one or the new one (see the module's doc).
pub(crate) fn replace(
    storage: &dyn Storage,
    dir: &Path,
    file: &KeyFile,
    step: &mut dyn FnMut(Step),
) -> Result<()> {
    let new = dir.join(KEYS_NEW_FILE);
    step(Step::Started);
    let bytes = serde_json::to_vec_pretty(file)
        .map_err(|e| Error::Internal(format!("the key store does not serialize: {e}")))?;
    if storage.exists(&new) {
        zero(storage, &new)?;
        storage
            .remove_file(&new)
            .map_err(io("removing the stale", &new))?;
    }
    let out = storage
        .open(&new, OpenMode::CreateNew)
        .map_err(io("creating", &new))?;
    out.write_all_at(&bytes, 0)
        .and_then(|()| out.sync_data())
        .map_err(io("writing", &new))?;
    drop(out);
    storage.sync_dir(dir).map_err(io("syncing", dir))?;
    step(Step::NewWritten);
    finish(storage, dir, step)
}

/// The last two steps of [`replace`]: the old store zeroed, the new one renamed over it.
fn finish(storage: &dyn Storage, dir: &Path, step: &mut dyn FnMut(Step)) -> Result<()> {
    let path = dir.join(KEYS_FILE);
    let new = dir.join(KEYS_NEW_FILE);
    if storage.exists(&path) {
        zero(storage, &path)?;
    }
    step(Step::OldZeroed);
    storage
        .rename(&new, &path)
        .map_err(io("renaming the new key store over", &path))?;
    storage.sync_dir(dir).map_err(io("syncing", dir))?;
    step(Step::Renamed);
    Ok(())
}
