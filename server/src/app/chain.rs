//! Whether the chain verified: the app verifies the journal's hash chain and checksums (not
//! its indexes, tree or blobs) on the blocking pool, the first time a page asks and then again
//! when the head has moved, at most every [`RECHECK_INTERVAL`]; a page shows the last result
//! (verified up to a position, a failure, or a verification under way).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use journal_engine::{Journal, VerifyOptions};
use journal_replay::html::{Chain, Verified};

/// The least time between two verifications.
pub(crate) const RECHECK_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Last {
    /// The position verified up to (0: never).
    up_to: u64,
    /// The problem found, if any.
    failed: Option<String>,
    /// When the last verification started.
    started: Option<Instant>,
}

/// The chain's last verification.
#[derive(Debug, Default)]
pub(crate) struct ChainCheck {
    last: Arc<Mutex<Last>>,
    running: Arc<AtomicBool>,
}

impl ChainCheck {
    /// The head and the last verification; starts one when it is due.
    pub(crate) fn status(&self, journal: &Journal) -> Chain {
        let head = journal.head();
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let verified = match (&last.failed, last.up_to) {
            (Some(problem), _) => Verified::Failed(problem.clone()),
            (None, 0) => Verified::Pending,
            (None, p) => Verified::UpTo(p),
        };
        #[allow(
            clippy::disallowed_methods,
            reason = "how often to verify is real time, not the journal's clock"
        )]
        let due = head.position.0 > last.up_to
            && last.started.is_none_or(|s| s.elapsed() >= RECHECK_INTERVAL);
        drop(last);
        if due && !self.running.swap(true, Ordering::AcqRel) {
            self.start(journal.clone());
        }
        Chain {
            position: head.position.0,
            hash: head.hash.to_string(),
            verified,
        }
    }

    fn start(&self, journal: Journal) {
        let last = Arc::clone(&self.last);
        let running = Arc::clone(&self.running);
        #[allow(
            clippy::disallowed_methods,
            reason = "how often to verify is real time, not the journal's clock"
        )]
        let now = Instant::now();
        last.lock().unwrap_or_else(|p| p.into_inner()).started = Some(now);
        let options = VerifyOptions {
            check_index: false,
            check_tree: false,
            check_blobs: false,
            ..VerifyOptions::default()
        };
        tokio::task::spawn_blocking(move || {
            let report = journal.verify(&options, &mut |_, _| {});
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            match report {
                Ok(r) if r.ok => {
                    last.up_to = r.head.position;
                    last.failed = None;
                }
                Ok(r) => {
                    last.failed = Some(
                        r.problems
                            .first()
                            .map_or_else(|| "a problem".to_string(), |p| format!("{p:?}")),
                    );
                }
                Err(e) => last.failed = Some(e.to_string()),
            }
            running.store(false, Ordering::Release);
        });
    }
}
