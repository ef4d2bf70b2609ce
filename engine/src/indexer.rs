//! The indexer thread: applies the entries of committed writes to the redb index, behind the
//! writer, and tells waiting readers how far the index has got.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use journal_format::{ChainHash, Position};

use crate::error::{Error, Result};
use crate::index::{Index, IndexEntry};
use crate::log::Log;

/// How long the indexer waits, idle, before making its work durable.
const PERSIST_IDLE: Duration = Duration::from_millis(500);
/// The most entries applied in one index transaction.
const APPLY_ENTRIES_MAX: usize = 50_000;

/// What the writer sends the indexer.
#[derive(Debug)]
pub(crate) enum IndexMsg {
    /// Entries of one committed write, and the head after it.
    Entries {
        entries: Vec<IndexEntry>,
        head: (Position, ChainHash),
    },
}

/// How far the index has got, for readers that wait on it.
#[derive(Debug, Default)]
pub(crate) struct IndexProgress {
    state: Mutex<(Position, Option<String>)>,
    changed: Condvar,
}

impl IndexProgress {
    pub(crate) fn new(position: Position) -> IndexProgress {
        IndexProgress {
            state: Mutex::new((position, None)),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn position(&self) -> Position {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn set(&self, position: Position) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0 = position;
        self.changed.notify_all();
    }

    fn fail(&self, error: String) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(error);
        self.changed.notify_all();
    }

    /// Waits until the index reflects `position`.
    ///
    /// # Errors
    /// [`Error::Index`] when the indexer failed, or did not get there within `timeout`.
    pub(crate) fn wait_for(&self, position: Position, timeout: Duration) -> Result<()> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, result) = self
            .changed
            .wait_timeout_while(guard, timeout, |(p, err)| *p < position && err.is_none())
            .unwrap_or_else(|p| p.into_inner());
        if let Some(err) = &guard.1 {
            return Err(Error::Index(format!(
                "the indexer failed: {err}; reopen the journal to rebuild"
            )));
        }
        if result.timed_out() && guard.0 < position {
            return Err(Error::Index(format!(
                "the index reached position {} but not {position} within {timeout:?}",
                guard.0
            )));
        }
        Ok(())
    }
}

/// Runs until the writer drops its sender. First indexes `backlog` (positions `from..=to` of
/// the log that open left to it), then what the writer sends. `dirty` says the index holds
/// commits not yet made durable (a catch-up at open), which the first idle moment persists.
pub(crate) fn run(
    index: Arc<Index>,
    progress: Arc<IndexProgress>,
    rx: Receiver<IndexMsg>,
    backlog: Option<(Arc<Log>, Position, Position)>,
    mut dirty: bool,
) {
    if let Some((log, from, to)) = backlog {
        if let Err(e) = crate::journal::catch_up(&log, &index, from, to) {
            tracing::error!(error = %e, "indexing the backlog left at open failed");
            progress.fail(e.to_string());
            return;
        }
        progress.set(to);
        dirty = true;
    }
    loop {
        let msg = match rx.recv_timeout(PERSIST_IDLE) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => {
                if dirty {
                    if let Err(e) = index.persist() {
                        progress.fail(e.to_string());
                        return;
                    }
                    dirty = false;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let IndexMsg::Entries {
            mut entries,
            mut head,
        } = msg;
        while entries.len() < APPLY_ENTRIES_MAX {
            match rx.try_recv() {
                Ok(IndexMsg::Entries {
                    entries: more,
                    head: h,
                }) => {
                    entries.extend(more);
                    head = h;
                }
                Err(_) => break,
            }
        }
        if let Err(e) = index.apply(&entries, head.1, false) {
            tracing::error!(error = %e, "index update failed");
            progress.fail(e.to_string());
            return;
        }
        dirty = true;
        progress.set(head.0);
    }
    if dirty {
        if let Err(e) = index.persist() {
            tracing::error!(error = %e, "making the index durable at close failed");
        }
    }
}
