//! Who commits: the writer thread, which takes every request waiting in its queue as one group,
//! and a blocking caller that finds the writer idle and leads, committing its own request on
//! its own thread. Both hold back while the index lags too far.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

// foldhash, not std's SipHash: the writer looks up and inserts event ids and stream keys in
// these maps several times per event, on the commit path, where SipHash was one of the largest
// costs of an append. Its seed is random per process, as std's is.

use crate::error::{Error, Result};
use crate::log::Log;
use crate::options::Durability;
use crate::progress::{self, IndexProgress};

use crate::write::{Command, WriteRequest, Writer, WriterCell, INDEX_LAG_WAIT};

/// Why a writer whose mutex a panic poisoned refuses everything: its state is unknown.
fn panicked() -> Error {
    Error::Poisoned(
        "a commit panicked; reopen the journal so that recovery looks at the tail".into(),
    )
}

/// Locks the writer; a mutex poisoned by a panic in a commit is refused (see [`panicked`]).
fn lock(cell: &Mutex<Writer>) -> Result<std::sync::MutexGuard<'_, Writer>> {
    cell.lock().map_err(|_| panicked())
}

/// Before a commit, waits while the index lags the log too far (see [`progress::hold_back`]),
/// holding nothing: the commits before are answered, and readers and the indexer go on.
/// Unsynced bytes (buffered mode) are synced first, so that waiting never stretches the sync
/// interval.
fn wait_for_index(cell: &Mutex<Writer>, progress: &IndexProgress, log: &Log) {
    let head = log.head().position;
    if !progress::lags_too_far(progress, head) {
        return;
    }
    if let Ok(mut w) = lock(cell) {
        let _ = w.sync_if_needed();
    }
    progress::hold_back(progress, head, INDEX_LAG_WAIT);
}

/// Commits `request` on the caller's thread when the writer is idle (nobody holds it), and
/// hands it back otherwise, for the writer thread's queue. Either way the answer goes to the
/// request's reply.
pub(crate) fn lead(
    cell: &WriterCell,
    progress: &IndexProgress,
    log: &Log,
    request: WriteRequest,
) -> Option<WriteRequest> {
    // Requests queued for the writer thread go first. std's mutex is not fair: callers that
    // found it free as each commit ended took it ahead of the writer thread, again and again,
    // and kept queued single appends waiting 10–30 ms with 8 producers on two cores.
    if cell.queued.load(Ordering::SeqCst) > 0 {
        return Some(request);
    }
    wait_for_index(&cell.writer, progress, log);
    let mut writer = match cell.writer.try_lock() {
        Ok(writer) => writer,
        Err(std::sync::TryLockError::WouldBlock) => return Some(request),
        Err(std::sync::TryLockError::Poisoned(_)) => {
            let _ = request.reply.send(Err(panicked()));
            return None;
        }
    };
    if writer.closed {
        let _ = request.reply.send(Err(Error::Closed));
        return None;
    }
    writer.commit_group(vec![Command::Write(request)]);
    None
}

/// The writer thread: runs until every sender of `rx` is gone, then syncs, trims the tail and
/// closes the writer (later leaders get [`Error::Closed`]).
pub(crate) fn run(
    writer_cell: &WriterCell,
    progress: &IndexProgress,
    log: &Log,
    rx: Receiver<Command>,
) {
    let cell = &writer_cell.writer;
    let (limit, durability) = match lock(cell) {
        Ok(w) => (w.limits.batch_bytes_max, w.durability),
        Err(_) => return,
    };
    loop {
        let first = match durability {
            Durability::Durable => match rx.recv() {
                Ok(cmd) => cmd,
                Err(_) => break,
            },
            Durability::Buffered { sync_interval } => {
                match rx.recv_timeout(sync_interval.max(Duration::from_millis(1))) {
                    Ok(cmd) => cmd,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Ok(mut w) = lock(cell) {
                            if w.sync_if_needed().is_ok() {
                                w.record_head();
                            }
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        let mut group = vec![first];
        let mut bytes = 0u64;
        while bytes < limit {
            match rx.try_recv() {
                Ok(cmd) => {
                    if let Command::Write(w) = &cmd {
                        bytes += w.frame_bytes();
                    }
                    group.push(cmd);
                }
                Err(_) => break,
            }
        }
        wait_for_index(cell, progress, log);
        // Taken: no longer waiting (a group written while others wait is handed to the syncer).
        writer_cell.unqueue(group.len());
        match lock(cell) {
            Ok(mut w) => w.commit_group(group),
            Err(_) => {
                for cmd in group {
                    match cmd {
                        Command::Write(request) => {
                            let _ = request.reply.send(Err(panicked()));
                        }
                        Command::Sync(reply) => {
                            let _ = reply.send(Err(panicked()));
                        }
                    }
                }
            }
        }
    }
    // Even after a panic in a commit the writer is closed and lets the index thread go (its
    // sender is dropped here, or closing the journal would wait for that thread forever); only
    // an intact writer syncs and trims its tail.
    let intact = !cell.is_poisoned();
    let mut w = cell.lock().unwrap_or_else(|p| p.into_inner());
    if intact && w.settle().is_ok() {
        let _ = w.sync_if_needed();
        if w.poison.cause().is_none() {
            // A clean close leaves the tail exactly as long as its frames.
            let _ = w.trim_preallocated();
            w.record_head();
        }
    }
    w.closed = true;
    // The syncer publishes what it was handed, then stops; then the index thread may finish.
    w.syncer = None;
    w.publisher.close_indexer();
}
