//! The journal's identity and the signed checkpoints it keeps.
//!
//! - `JOURNAL_ID`: the journal's id, a UUID v4 made when a journal is first opened for writing,
//!   one line of text. Checkpoints name it in their origin (`agent-journal/<id>`), so a
//!   checkpoint of one journal is never taken for another's.
//! - `checkpoints/<tree size, 20 digits>.checkpoint`: a signed checkpoint of that tree size, as
//!   the C2SP signed note `journal_format::checkpoint` writes, each written whole (through a
//!   temporary file and a rename). A witness's cosignature is kept in the same note.
//!
//! The signer ([`Signer`]) signs a checkpoint every so many events or so much time, on a thread
//! of its own, when [`crate::Options::checkpoints`] gives it a key.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use journal_format::checkpoint::{SignedCheckpoint, SigningKey};

use crate::error::{Error, Result};
use crate::storage::{replace_file, OpenMode, Storage};

/// The file holding the journal's id.
pub(crate) const ID_FILE: &str = "JOURNAL_ID";
/// The directory of the signed checkpoints.
pub(crate) const CHECKPOINTS_DIR: &str = "checkpoints";
const SUFFIX: &str = ".checkpoint";
/// The longest checkpoint file read (a note with a few signatures is under 1 KiB).
const CHECKPOINT_BYTES_MAX: u64 = 64 * 1024;

/// When the journal signs checkpoints by itself: with `key`, once `every_events` events were
/// committed since the last checkpoint, or `every` passed with any committed (and at close).
#[derive(Clone, Debug)]
pub struct CheckpointPolicy {
    /// The key that signs.
    pub key: Arc<SigningKey>,
    /// Events after which a checkpoint is signed (0: none by count).
    pub every_events: u64,
    /// Time after which a checkpoint is signed when events came (zero: none by time).
    pub every: Duration,
}

/// Reads the journal's id; `None` when it has none yet.
pub(crate) fn read_id(storage: &dyn Storage, dir: &Path) -> Result<Option<String>> {
    let path = dir.join(ID_FILE);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let text = read_text(storage, &path, 1024)?;
    let id = text.trim();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(Error::Unsupported(format!(
            "{} does not hold a journal id (a UUID): {id:?}",
            path.display()
        )));
    }
    Ok(Some(id.to_owned()))
}

/// The journal's id, made (`new_id`) and kept when it has none yet.
pub(crate) fn ensure_id(
    storage: &dyn Storage,
    dir: &Path,
    new_id: impl FnOnce() -> String,
) -> Result<String> {
    if let Some(id) = read_id(storage, dir)? {
        return Ok(id);
    }
    let id = new_id();
    replace_file(storage, dir, ID_FILE, format!("{id}\n").as_bytes())?;
    Ok(id)
}

/// Reads a small text file whole.
fn read_text(storage: &dyn Storage, path: &Path, max: u64) -> Result<String> {
    let io = |what: &'static str| {
        let path = path.display().to_string();
        Error::io_with(move || format!("{what} {path}"))
    };
    let file = storage.open(path, OpenMode::Read).map_err(io("opening"))?;
    let len = file.len().map_err(io("reading the length of"))?;
    if len > max {
        return Err(Error::Unsupported(format!(
            "{} is {len} bytes, more than the {max} it can be",
            path.display()
        )));
    }
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0).map_err(io("reading"))?;
    String::from_utf8(bytes)
        .map_err(|e| Error::Unsupported(format!("{} is not UTF-8: {e}", path.display())))
}

/// The signed checkpoints in `checkpoints/`.
#[derive(Debug)]
pub(crate) struct CheckpointStore {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
}

impl CheckpointStore {
    pub(crate) fn new(storage: Arc<dyn Storage>, journal_dir: &Path) -> CheckpointStore {
        CheckpointStore {
            storage,
            dir: journal_dir.join(CHECKPOINTS_DIR),
        }
    }

    fn file_name(size: u64) -> String {
        format!("{size:020}{SUFFIX}")
    }

    /// Keeps `signed` as the checkpoint of its tree size, replacing one kept before.
    pub(crate) fn put(&self, signed: &SignedCheckpoint) -> Result<()> {
        self.storage
            .create_dir_all(&self.dir)
            .map_err(Error::io_with(|| {
                format!("creating {}", self.dir.display())
            }))?;
        let name = CheckpointStore::file_name(signed.checkpoint.tree_size);
        replace_file(
            &*self.storage,
            &self.dir,
            &name,
            signed.to_text().as_bytes(),
        )
    }

    /// The checkpoint kept for tree size `size`.
    pub(crate) fn get(&self, size: u64) -> Result<Option<SignedCheckpoint>> {
        let path = self.dir.join(CheckpointStore::file_name(size));
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let text = read_text(&*self.storage, &path, CHECKPOINT_BYTES_MAX)?;
        SignedCheckpoint::parse(&text).map(Some).map_err(|e| {
            Error::Unsupported(format!(
                "the checkpoint {} cannot be read: {e}",
                path.display()
            ))
        })
    }

    /// The tree sizes of the checkpoints kept, in order.
    pub(crate) fn sizes(&self) -> Result<Vec<u64>> {
        if !self.storage.exists(&self.dir) {
            return Ok(Vec::new());
        }
        let names = self
            .storage
            .list_dir(&self.dir)
            .map_err(Error::io_with(|| format!("listing {}", self.dir.display())))?;
        let mut sizes: Vec<u64> = names
            .iter()
            .filter_map(|n| n.strip_suffix(SUFFIX)?.parse().ok())
            .collect();
        sizes.sort_unstable();
        Ok(sizes)
    }
}

/// The signer thread's loop: every `slice`, signs a checkpoint through `sign` when the policy
/// says one is due, until the journal drops `stop`'s sender; then signs a last one when events
/// came since the last. `head` gives the committed head's position; `sign` signs the tree head
/// and returns its size.
pub(crate) fn run_signer(
    policy: &CheckpointPolicy,
    stop: &Receiver<()>,
    head: &dyn Fn() -> u64,
    sign: &dyn Fn() -> Result<u64>,
    mut signed: u64,
) {
    let slice = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    let sign_now = |signed: &mut u64| match sign() {
        Ok(size) => *signed = size,
        Err(e) => {
            tracing::error!(error = %e, "signing a checkpoint failed; the next is tried later")
        }
    };
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(slice) {
        waited += slice;
        let new = head().saturating_sub(signed);
        let by_count = policy.every_events > 0 && new >= policy.every_events;
        let by_time = !policy.every.is_zero() && waited >= policy.every && new > 0;
        if by_count || by_time {
            sign_now(&mut signed);
            waited = Duration::ZERO;
        }
    }
    if head() > signed {
        sign_now(&mut signed);
    }
}
