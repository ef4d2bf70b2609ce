//! How far the index has got behind the log: the watermark the indexer moves, the readers and
//! the writer wait on, and the lag past which appends wait for it. It sits below the writer and
//! the indexer, so that neither imports the other.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use journal_format::Position;

use crate::error::{Error, Result};

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
    pub(crate) waiting: AtomicUsize,
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

    pub(crate) fn fail(&self, error: &Error) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
