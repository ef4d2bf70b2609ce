//! [`Journal`]: the facade that wires the log, the writer and the index together. Opening is in
//! `open`, appending in `append`, reading in `events`, queries in `query`; this module holds the
//! journal's parts and what it says of itself (status, head, report).

pub(crate) mod append;
pub(crate) mod archive;
mod checkpoint;
mod encryption;
mod events;
mod open;
pub(crate) mod proofs;
pub(crate) mod query;
pub(crate) mod redact;
mod replica;
mod restore;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::blobs::BlobStore;
use crate::checkpoints::CheckpointStore;
use crate::error::{Error, Result};
use crate::index::Index;
use crate::log::report::RecoveryReport;
use crate::log::{Head, Log};
use crate::options::Options;
use crate::progress::IndexProgress;
use crate::seams::uuid_v7;
use crate::storage::StorageLock;
use crate::tree::Tree;
use crate::write::{self, Command, Poison};

/// How long a read that needs the index waits for it to reach the head.
const INDEX_WAIT: Duration = Duration::from_secs(30);

/// The state of a journal, for `journal status`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The newest event's position.
    pub head_position: u64,
    /// The newest event's chain link.
    pub head_hash: String,
    /// How many segment files the log has.
    pub segments: usize,
    /// How many bytes the segment files hold.
    pub log_bytes: u64,
    /// The position the index reflects.
    pub index_position: u64,
    /// How many events the index is behind the log.
    pub index_lag: u64,
    /// Why the writer refuses appends, if it does.
    pub poisoned: Option<String>,
    /// Whether this process opened the journal read-only (another process writes it; the index
    /// fields then describe nothing).
    pub read_only: bool,
    /// The last position moved to an archive (`journal archive`); 0 when nothing is archived.
    /// The live log starts after it.
    pub last_archived: u64,
    /// Whether the archive is attached (its segments counted in `segments` and `logBytes`).
    pub archive_attached: bool,
}

/// An open journal. Cloning is cheap; the journal closes when the last clone is dropped (or
/// [`Journal::close`] is called).
#[derive(Clone, Debug)]
pub struct Journal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The journal's id; `None` read-only when it was never given one.
    id: Option<String>,
    checkpoints: CheckpointStore,
    /// Serializes signing and keeping checkpoints.
    signing: Mutex<()>,
    /// Held while segments are archived or restored.
    archiving: Mutex<()>,
    /// The checkpoint signer thread, and the sender whose drop stops it.
    signer: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
    dir: PathBuf,
    options: Options,
    log: Arc<Log>,
    /// `None` when read-only.
    index: Option<Arc<Index>>,
    /// The Merkle tree over the events, grown by the indexer.
    tree: Arc<Tree>,
    poison: Arc<Poison>,
    /// Serializes [`Journal::refresh`].
    refresh: Mutex<()>,
    progress: Arc<IndexProgress>,
    tx: Mutex<Option<mpsc::Sender<Command>>>,
    /// The writer's state, for blocking callers that commit their own request when the writer
    /// is idle (`None` when read-only).
    cell: Option<write::Cell>,
    writer: Mutex<Option<JoinHandle<()>>>,
    indexer: Mutex<Option<JoinHandle<()>>>,
    report: RecoveryReport,
    blobs: BlobStore,
    /// The keyring, when the journal is encrypted and its master key was given.
    keys: Option<Arc<crate::keys::Keys>>,
    _lock: Option<Box<dyn StorageLock>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        // The signer first: its last checkpoint needs the writer and the indexer.
        if let Some((stop, handle)) = self.signer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            drop(stop);
            if handle.join().is_err() {
                tracing::error!("the checkpoint signer thread panicked");
            }
        }
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        for slot in [&self.writer, &self.indexer] {
            if let Some(handle) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                if handle.join().is_err() {
                    tracing::error!("a journal thread panicked");
                }
            }
        }
    }
}

impl Journal {
    /// Whether this journal was opened read-only.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.inner.index.is_none()
    }

    /// The journal's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What recovery found and did when this journal was opened.
    #[must_use]
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// The blob store.
    #[must_use]
    pub fn blobs(&self) -> &BlobStore {
        &self.inner.blobs
    }

    /// A new UUID v7 from the journal's clock and entropy, for events built by callers.
    #[must_use]
    pub fn new_event_id(&self) -> String {
        uuid_v7(&*self.inner.options.clock, &*self.inner.options.entropy)
    }

    /// The newest committed event.
    #[must_use]
    pub fn head(&self) -> Head {
        self.inner.log.head()
    }

    /// A watch of the committed head: changes after every commit (and, read-only, after every
    /// [`Journal::refresh`] that found new events). Projection workers wait on it.
    #[must_use]
    pub fn watch_head(&self) -> tokio::sync::watch::Receiver<Head> {
        self.inner.log.watch_head()
    }

    /// The journal's clock: what stamps `recordedAt`, and what lag is measured against.
    #[must_use]
    pub fn clock(&self) -> Arc<dyn crate::seams::Clock> {
        Arc::clone(&self.inner.options.clock)
    }

    /// The journal's status.
    ///
    /// # Errors
    /// An I/O error reading segment lengths.
    pub fn status(&self) -> Result<Status> {
        let head = self.head();
        let mut log_bytes = 0;
        let segments = self.inner.log.segments();
        for s in &segments {
            log_bytes += s
                .file
                .len()
                .map_err(Error::io("reading a segment length"))?;
        }
        let indexed = self.inner.progress.position();
        let boundary = self.inner.log.boundary();
        Ok(Status {
            head_position: head.position.0,
            head_hash: head.hash.to_hex(),
            segments: segments.len(),
            log_bytes,
            index_position: indexed.0,
            index_lag: head.position.0.saturating_sub(indexed.0),
            poisoned: self.inner.poison.cause(),
            read_only: self.is_read_only(),
            last_archived: boundary.as_ref().map_or(0, |b| b.last_archived.0),
            archive_attached: boundary.is_some_and(|b| b.attached),
        })
    }

    /// Closes the journal: drains the writer (answering every accepted request), makes the
    /// index durable, and releases the lock once every clone is dropped.
    pub fn close(self) {
        self.inner.shutdown();
    }

    pub(crate) fn log(&self) -> &Arc<Log> {
        &self.inner.log
    }

    /// The limits the journal was opened with: what an append must keep.
    #[must_use]
    pub fn limits(&self) -> crate::options::Limits {
        self.inner.options.limits
    }

    pub(crate) fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Held while segments are archived or restored: one such change at a time.
    pub(crate) fn archiving(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner
            .archiving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn index(&self) -> Option<&Arc<Index>> {
        self.inner.index.as_ref()
    }

    pub(crate) fn tree(&self) -> &Tree {
        &self.inner.tree
    }

    /// Whether the journal keeps its Merkle tree ([`Options::tree`]).
    pub(crate) fn keeps_tree(&self) -> bool {
        self.inner.options.tree
    }

    pub(crate) fn wait_indexed(&self) -> Result<()> {
        self.wait_for_index()
    }

    fn wait_for_index(&self) -> Result<()> {
        self.inner
            .progress
            .wait_for(self.head().position, INDEX_WAIT)
    }
}
