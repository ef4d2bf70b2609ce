//! The indexer thread: applies the entries of committed writes to the redb index, behind the
//! writer, and tells waiting readers how far the index has got.
//!
//! It gathers entries before it applies them: after a commit's entries it sleeps for slices of
//! [`GATHER_SLICE`] and takes what came meanwhile, until it holds [`GATHER_ENTRIES`] or
//! [`GATHER_IDLE_SLICES`] slices brought nothing, and applies at once whenever a reader is
//! waiting for the index. It sleeps instead of waiting on its channel because a commit that
//! sends to a receiver blocked on the channel must wake it, a system call on the committing
//! caller's path: single appends reach 0.83–0.90 × the bound this way, 0.76–0.80 × with the
//! wake-up (`compare --cell 1x1`).
//!
//! An apply's cost is mostly per key and per transaction, not per event (see the index's
//! blocks), so fewer, larger applies leave more of the CPU to the writer and the callers; when
//! nobody reads the index it lags the log by at most [`GATHER_ENTRIES`], or about
//! [`GATHER_IDLE_SLICES`] ms in which no commit came, and a reader that needs it waits at most
//! a slice longer. Single appends are gathered too: applied one by one, each would cost an index
//! transaction and a renewal of the writer's read view (0.57–0.66 × the bound, against
//! 0.83–0.92 × gathered, `compare --cell 1x1`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use journal_format::{ChainHash, Position};

use crate::error::{Error, Result};
use crate::index::{Index, IndexBatch, IndexEntry};
use crate::log::Log;

/// How long the indexer waits, idle, before making its work durable.
const PERSIST_IDLE: Duration = Duration::from_millis(500);
/// The longest the indexer goes, busy, without making its work durable: a process killed while
/// appends never pause re-indexes at most this much of the log at its next open, and the head
/// record (written with each durable commit) is at most this old.
const PERSIST_INTERVAL: Duration = Duration::from_secs(1);
/// How many applies the indexer makes, busy, before it makes its work durable anyway. redb
/// reuses the pages a non-durable commit frees only after a durable one: without this, a
/// journal never idle for `PERSIST_IDLE` (single appends arriving without pause) grows its
/// index file by the pages of every apply.
const PERSIST_APPLIES: u32 = 512;
/// The most entries applied in one index transaction.
const APPLY_ENTRIES_MAX: usize = 50_000;
/// How many slices without a message end the gathering (about 10 ms).
const GATHER_IDLE_SLICES: u32 = 10;
/// How many entries it gathers before it applies without waiting longer. Half of
/// [`INDEX_LAG_MAX`], so that appends outrunning the index are not held back while it gathers.
/// Larger applies cost the indexer less CPU per event, which on two cores leaves more to the
/// appends at batches of 100 and 1000 (`compare --cell 1000x1 --cell 100x8 --cell 1000x8`).
const GATHER_ENTRIES: usize = 25_000;
const _: () = assert!(GATHER_ENTRIES as u64 * 2 <= INDEX_LAG_MAX);
/// How long a gathering indexer sleeps before it takes the messages that came and looks for
/// waiting readers.
const GATHER_SLICE: Duration = Duration::from_millis(1);

/// How far (in events) the index may lag the log before the writer waits for it.
pub(crate) const INDEX_LAG_MAX: u64 = 50_000;

/// Whether the index lags `head` by more than [`INDEX_LAG_MAX`] events while the indexer is
/// still working (a stopped indexer is waited for by nobody).
pub(crate) fn lags_too_far(progress: &IndexProgress, head: Position) -> bool {
    head.0.saturating_sub(progress.position().0) > INDEX_LAG_MAX && !progress.stopped()
}

/// Waits while the index lags `head` by more than [`INDEX_LAG_MAX`] events, until it is within
/// half of that (or `timeout` passed, or the indexer stopped: then appends go on and the index
/// is rebuilt at the next open). Appends call this before they commit, holding nothing, so the
/// entries sent to the index thread, and the ids the writer keeps until the index holds them,
/// stay bounded however long appends outrun the indexer.
pub(crate) fn hold_back(progress: &IndexProgress, head: Position, timeout: Duration) {
    if !lags_too_far(progress, head) {
        return;
    }
    let target = Position(head.0 - INDEX_LAG_MAX / 2);
    if let Err(e) = progress.wait_for(target, timeout) {
        tracing::warn!(error = %e, "the index lags the log; appends go on");
    }
}

/// What the writer sends the indexer.
#[derive(Debug)]
pub(crate) enum IndexMsg {
    /// Entries of one committed write, and the head after it.
    Entries {
        entries: IndexBatch,
        head: (Position, ChainHash),
    },
}

/// Why the index thread stopped: the message, and the place when what stopped it is damage in
/// the log (a frame whose stream version does not follow its stream's), so that whoever waits is
/// told [`Error::Corruption`] at that place, not an index error.
#[derive(Clone, Debug)]
struct Failure {
    message: String,
    corruption: Option<(journal_format::SegmentId, u64, Option<Position>)>,
}

impl Failure {
    fn of(error: &Error) -> Failure {
        match error {
            Error::Corruption {
                segment,
                offset,
                position,
                detail,
            } => Failure {
                message: detail.clone(),
                corruption: Some((*segment, *offset, *position)),
            },
            other => Failure {
                message: other.to_string(),
                corruption: None,
            },
        }
    }

    fn to_error(&self) -> Error {
        match self.corruption {
            Some((segment, offset, position)) => Error::Corruption {
                segment,
                offset,
                position,
                detail: self.message.clone(),
            },
            None => Error::Index(format!(
                "the indexer failed: {}; reopen the journal to rebuild",
                self.message
            )),
        }
    }
}

/// How far the index has got, for readers that wait on it.
#[derive(Debug, Default)]
pub(crate) struct IndexProgress {
    state: Mutex<(Position, Option<Failure>)>,
    changed: Condvar,
    /// Readers inside [`IndexProgress::wait_for`]: the indexer stops gathering for them.
    waiting: AtomicUsize,
}

impl IndexProgress {
    pub(crate) fn new(position: Position) -> IndexProgress {
        IndexProgress {
            state: Mutex::new((position, None)),
            changed: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    pub(crate) fn position(&self) -> Position {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    pub(crate) fn set(&self, position: Position) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0 = position;
        self.changed.notify_all();
    }

    fn fail(&self, error: &Error) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(Failure::of(error));
        self.changed.notify_all();
    }

    /// Records that the index thread stopped without saying why (it panicked), unless it said.
    pub(crate) fn stop(&self, why: &str) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .get_or_insert_with(|| Failure {
                message: why.to_string(),
                corruption: None,
            });
        self.changed.notify_all();
    }

    /// Whether the index thread stopped (failed or gone): the index moves no further.
    pub(crate) fn stopped(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .is_some()
    }

    /// Waits until the index reflects `position`.
    ///
    /// # Errors
    /// [`Error::Index`] when the indexer failed, or did not get there within `timeout`.
    pub(crate) fn wait_for(&self, position: Position, timeout: Duration) -> Result<()> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if guard.0 >= position && guard.1.is_none() {
            return Ok(());
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let (guard, result) = self
            .changed
            .wait_timeout_while(guard, timeout, |(p, err)| *p < position && err.is_none())
            .unwrap_or_else(|p| p.into_inner());
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if let Some(failure) = &guard.1 {
            return Err(failure.to_error());
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

/// How much the indexer has applied and not yet made durable, and since when.
struct Persistence {
    /// Applies (or an open's catch-up, counted as one) not yet made durable.
    unpersisted: u32,
    /// When the index was last made durable.
    last: Instant,
}

/// The time between durable commits is measured, not recorded anywhere: it needs no clock seam
/// (the indexer's waits are real time too).
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

impl Persistence {
    /// Whether the applies since the last durable commit should be made durable now: after
    /// [`PERSIST_APPLIES`] of them, or [`PERSIST_INTERVAL`] after the last durable commit.
    fn due(&self) -> bool {
        self.unpersisted >= PERSIST_APPLIES
            || (self.unpersisted > 0 && self.last.elapsed() >= PERSIST_INTERVAL)
    }

    /// Makes the index's applies durable; on failure
    /// tells waiting readers and returns `false` (the indexer then stops).
    fn persist(&mut self, index: &Index, progress: &IndexProgress) -> bool {
        if self.unpersisted == 0 {
            return true;
        }
        if let Err(e) = index.persist() {
            progress.fail(&e);
            return false;
        }
        self.unpersisted = 0;
        self.last = now();
        true
    }
}

/// Runs until the writer drops its sender. First indexes `backlog` (positions `from..=to` of
/// the log that open left to it) and makes it durable, then what the writer sends. `dirty` says
/// the index holds commits not yet made durable (a catch-up at open), which the first idle
/// moment persists.
pub(crate) fn run(
    index: Arc<Index>,
    progress: Arc<IndexProgress>,
    rx: Receiver<IndexMsg>,
    backlog: Option<(Arc<Log>, Position, Position)>,
    dirty: bool,
) {
    let mut persistence = Persistence {
        unpersisted: u32::from(dirty),
        last: now(),
    };
    if let Some((log, from, to)) = backlog {
        if let Err(e) = crate::journal::catch_up(&log, &index, from, to) {
            tracing::error!(error = %e, "indexing the backlog left at open failed");
            progress.fail(&e);
            return;
        }
        progress.set(to);
        persistence.unpersisted = 1;
        // Made durable at once: were the process killed again before its next idle moment,
        // the next open would index this backlog again, and more each time.
        if !persistence.persist(&index, &progress) {
            return;
        }
    }
    loop {
        let msg = match rx.recv_timeout(PERSIST_IDLE) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => {
                if !persistence.persist(&index, &progress) {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let (head, open) = match gather_and_apply(&index, &progress, &rx, msg) {
            Ok(applied) => applied,
            Err(e) => {
                tracing::error!(error = %e, "index update failed");
                progress.fail(&e);
                return;
            }
        };
        progress.set(head.0);
        persistence.unpersisted += 1;
        if persistence.due() && !persistence.persist(&index, &progress) {
            return;
        }
        if !open {
            break;
        }
    }
    if persistence.unpersisted > 0 && !persistence.persist(&index, &progress) {
        tracing::error!("making the index durable at close failed");
    }
}

/// Gathers the entries of `first` and of the commits that follow it (see the module's doc) and
/// applies them in one transaction. Returns the head applied and whether the channel is still
/// open.
fn gather_and_apply(
    index: &Index,
    progress: &IndexProgress,
    rx: &Receiver<IndexMsg>,
    first: IndexMsg,
) -> Result<((Position, ChainHash), bool)> {
    let IndexMsg::Entries { entries, mut head } = first;
    // The batches gathered, applied together.
    let mut gathered = entries.len();
    let mut batches = vec![entries];
    let mut idle_slices = 0;
    let mut open = true;
    while gathered < APPLY_ENTRIES_MAX {
        let gather = gathered < GATHER_ENTRIES
            && progress.waiting.load(Ordering::SeqCst) == 0
            && idle_slices < GATHER_IDLE_SLICES;
        let take = || {
            rx.try_recv().map_err(|e| match e {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        };
        let mut next = take();
        if gather && matches!(next, Err(RecvTimeoutError::Timeout)) {
            // Sleeps rather than waits on the channel: a sender to a receiver blocked on it
            // wakes that thread (a system call on the committing caller's path, per
            // commit); one that sends while the indexer sleeps only queues its message.
            std::thread::sleep(GATHER_SLICE);
            next = take();
        }
        match next {
            Ok(IndexMsg::Entries {
                entries: more,
                head: h,
            }) => {
                gathered += more.len();
                batches.push(more);
                head = h;
            }
            Err(RecvTimeoutError::Timeout) if gather => idle_slices += 1,
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => {
                open = false;
                break;
            }
        }
    }
    let entries: Vec<IndexEntry<'_>> = batches.iter().flat_map(IndexBatch::iter).collect();
    index.apply(&entries, head.1, false)?;
    Ok((head, open))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_wait_while_the_index_lags_too_far() {
        let progress = Arc::new(IndexProgress::new(Position(1_000)));
        // Within the allowed lag: no wait at all (a timeout of zero would otherwise warn).
        hold_back(&progress, Position(1_000 + INDEX_LAG_MAX), Duration::ZERO);
        let head = Position(1_000 + 2 * INDEX_LAG_MAX);
        let indexer = {
            let progress = Arc::clone(&progress);
            std::thread::spawn(move || {
                // Not far enough yet (still lagging by more than the allowed lag, whether or
                // not `hold_back` has looked yet), then far enough.
                progress.set(Position(head.0 - INDEX_LAG_MAX - 1));
                std::thread::sleep(Duration::from_millis(50));
                progress.set(Position(head.0 - INDEX_LAG_MAX / 2));
            })
        };
        hold_back(&progress, head, Duration::from_secs(60));
        assert!(
            progress.position() >= Position(head.0 - INDEX_LAG_MAX / 2),
            "returned at {} before the index came within half the allowed lag",
            progress.position()
        );
        indexer.join().expect("indexer");
    }
}
