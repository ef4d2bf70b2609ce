//! The syncer: makes written groups durable and publishes them, on a thread of its own, while
//! the writer stages and writes the next group.
//!
//! In durable mode a commit is a `write` of the group's frames, an `fdatasync`, and then its
//! publication: the tail's end and the log's head move past the frames, the requests are
//! answered, the index entries go to the indexer. Done in line, the writer thread waits out the
//! `fdatasync` before it stages the next group, and with many producers its staging and the
//! disk's flush take turns instead of overlapping (`docs/PERFORMANCE.md`). When requests are
//! waiting as a large group is written, the writer hands the written group ([`Written`]) to
//! the syncer instead and stages the next while it syncs.
//!
//! **Invariants.** At most one write is unsynced: the writer waits for the syncer to go idle
//! ([`Syncer::drain`]) before it writes again, so a power failure never keeps a later write
//! and loses an earlier one (which recovery could not tell from damage). Groups are published
//! in the order they were written, each only after an `fdatasync` that began after its
//! `write` returned: nothing is answered, shown to readers or indexed before it is durable.
//! The writer publishes a group itself only when the syncer is idle, so the two never publish
//! out of order. Every group handed over is in the tail segment: the writer drains the syncer
//! before it seals the tail, answers a sync, or closes. A failed `fdatasync` poisons the
//! journal; the group it covered is answered [`Error::Poisoned`], and nothing is written
//! after it. A panic on the syncer thread poisons the journal too, and stops the syncer
//! (`OnPanic`): the writer never waits for a thread that is gone.

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use journal_format::FooterEntry;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::log::entries::IndexBatch;
use crate::log::{Head, Log, Segment, SegmentEnd};
use crate::progress::IndexProgress;
use crate::signal::Signal;
use crate::write::answer::{Appended, CommittedGroup, Poison};

/// Where a request's answer goes.
pub(crate) type Reply = oneshot::Sender<Result<Vec<Appended>>>;

/// A group whose frames are written to the tail segment, waiting for the sync that makes it
/// durable and its publication.
pub(crate) struct Written {
    /// The segment the frames were written to.
    pub segment: Arc<Segment>,
    /// Where the segment's frames end after this group.
    pub end: SegmentEnd,
    /// The group's sparse index entries.
    pub sparse: Vec<FooterEntry>,
    /// Each request of the group, with its answers.
    pub replies: Vec<(Reply, Vec<Appended>)>,
    /// The group's index entries.
    pub entries: IndexBatch,
}

/// Syncs and publishes written groups: shared by the writer and the syncer thread.
pub(crate) struct Publisher {
    pub log: Arc<Log>,
    pub poison: Arc<Poison>,
    pub progress: Arc<IndexProgress>,
    /// Where published entries go; `None` once the writer is closed (dropping the sender lets
    /// the index thread finish) or the index thread is gone.
    indexer: Mutex<Option<Sender<CommittedGroup>>>,
}

impl Publisher {
    pub(crate) fn new(
        log: Arc<Log>,
        poison: Arc<Poison>,
        progress: Arc<IndexProgress>,
        indexer: Sender<CommittedGroup>,
    ) -> Publisher {
        Publisher {
            log,
            poison,
            progress,
            indexer: Mutex::new(Some(indexer)),
        }
    }

    /// Records `cause` as the reason the writer is poisoned (the first reason stays).
    pub(crate) fn poison(&self, cause: &Error) {
        tracing::error!(error = %cause, "journal writer poisoned");
        self.poison.set(&cause.to_string());
    }

    /// Answers `replies` [`Error::Poisoned`], with the cause recorded.
    pub(crate) fn refuse(&self, replies: Vec<(Reply, Vec<Appended>)>) {
        let cause = self.poison.cause().unwrap_or_default();
        for (reply, _) in replies {
            let _ = reply.send(Err(Error::Poisoned(cause.clone())));
        }
    }

    /// Syncs the segment `written` is in and publishes it; when the sync fails, poisons the
    /// journal, refuses its requests and returns the sync's error.
    pub(crate) fn sync_and_publish(&self, written: Written) -> Result<()> {
        let segment = &written.segment;
        let synced = segment
            .file
            .sync_data()
            .map_err(Error::io_with(|| format!("syncing segment {}", segment.id)));
        match synced {
            Ok(()) => {
                self.publish(written);
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                self.refuse(written.replies);
                Err(e)
            }
        }
    }

    /// Publishes `written`, durable (synced, or written in buffered mode): moves the segment's
    /// end and the log's head past it, answers its requests and sends its entries to the
    /// indexer.
    pub(crate) fn publish(&self, mut written: Written) {
        let end = written.end;
        written.segment.extend(end, &mut written.sparse);
        self.log.set_head(Head {
            position: end.last_position,
            hash: end.last_hash,
        });
        for (reply, answers) in written.replies {
            let _ = reply.send(Ok(answers));
        }
        let mut indexer = self.indexer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = &*indexer {
            let sent = sender.send(CommittedGroup {
                entries: written.entries,
                head: (end.last_position, end.last_hash),
            });
            if sent.is_err() {
                // The index thread is gone (it stopped on an error or panicked): say so to
                // whoever waits for the index, once, and stop sending.
                self.progress.stop("the index thread stopped");
                *indexer = None;
            }
        }
    }

    /// Drops the indexer's sender: the index thread finishes once it has applied what it got.
    pub(crate) fn close_indexer(&self) {
        *self.indexer.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[derive(Default)]
struct State {
    /// The group handed over and not yet taken for its sync: one at most, since the writer
    /// drains the syncer before it writes again.
    handed: Option<Written>,
    /// Whether a group taken is being synced and published now.
    busy: bool,
    stop: bool,
}

/// What the writer and the syncer thread share: the state, signalled when a group is handed
/// over, when the syncer goes idle, and on stop.
type Inner = Signal<State>;

/// The syncer thread and what it shares with the writer.
pub(crate) struct Syncer {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the syncer thread, publishing through `publisher`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub(crate) fn start(publisher: Arc<Publisher>) -> Result<Syncer> {
        let inner = Arc::new(Inner::default());
        let thread = {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("journal-syncer".into())
                .spawn(move || run(&inner, &publisher))
                .map_err(Error::io("starting the syncer thread"))?
        };
        Ok(Syncer {
            inner,
            thread: Some(thread),
        })
    }

    /// Hands `written` over, to be synced and published, once the syncer is idle
    /// ([`Syncer::drain`]). (Dropped unanswered if the syncer thread is gone: see [`OnPanic`].)
    pub(crate) fn hand(&self, written: Written) {
        let mut state = self.inner.lock();
        if state.stop {
            return;
        }
        assert!(
            state.handed.is_none() && !state.busy,
            "one group at a time: the writer drains the syncer before it writes again"
        );
        state.handed = Some(written);
        self.inner.changed();
    }

    /// Waits until the group handed over is published (or the syncer thread is gone).
    pub(crate) fn drain(&self) {
        let mut state = self.inner.lock();
        while !state.stop && (state.handed.is_some() || state.busy) {
            state = self.inner.wait(state);
        }
    }
}

impl Drop for Syncer {
    /// Publishes what was handed over, then stops the thread.
    fn drop(&mut self) {
        self.inner.lock().stop = true;
        self.inner.changed();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The syncer thread: syncs and publishes each group handed over; until stopped with nothing
/// left.
fn run(inner: &Inner, publisher: &Publisher) {
    let _on_panic = OnPanic { inner, publisher };
    let mut state = inner.lock();
    loop {
        let Some(written) = state.handed.take() else {
            if state.stop {
                return;
            }
            state = inner.wait(state);
            continue;
        };
        state.busy = true;
        drop(state);
        // A failure is recorded as the poison: the writer refuses what follows.
        let _ = publisher.sync_and_publish(written);
        state = inner.lock();
        state.busy = false;
        inner.changed();
    }
}

/// Set up by the syncer thread: if it unwinds (a panic in a sync or a publication), poisons the
/// journal and stops the syncer, so that a writer in [`Syncer::drain`] goes on (and refuses
/// what follows) instead of waiting for a thread that is gone. The groups it held are dropped
/// unanswered: their callers are told the journal is closed.
struct OnPanic<'a> {
    inner: &'a Inner,
    publisher: &'a Publisher,
}

impl Drop for OnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.publisher
                .poison(&Error::Poisoned("the syncer thread panicked".into()));
            let mut state = self.inner.lock();
            state.handed = None;
            state.busy = false;
            state.stop = true;
            self.inner.changed();
        }
    }
}
