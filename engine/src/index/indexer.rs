//! The indexer thread: applies the entries of committed writes to the redb index, behind the
//! writer, and tells waiting readers how far the index has got.
//!
//! It gathers entries before it applies them: after a commit's entries it sleeps for slices of
//! [`GATHER_SLICE`] and takes what came meanwhile, until it holds [`GATHER_ENTRIES`] or
//! [`GATHER_IDLE_SLICES`] slices brought nothing, and applies at once whenever a reader is
//! waiting for the index. It sleeps instead of waiting on its channel because a commit that
//! sends to a receiver blocked on the channel must wake it, a system call on the committing
//! caller's path, which single appends feel (`compare --cell 1x1`).
//!
//! An apply's cost is mostly per key and per transaction, not per event (see the index's
//! blocks), so fewer, larger applies leave more of the CPU to the writer and the callers; when
//! nobody reads the index it lags the log by at most [`GATHER_ENTRIES`], or about
//! [`GATHER_IDLE_SLICES`] ms in which no commit came, and a reader that needs it waits at most
//! a slice longer. Single appends are gathered too: applied one by one, each would cost an index
//! transaction and a renewal of the writer's read view.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use journal_format::{ChainHash, Location, Position};

use crate::error::{Error, Result};
use crate::index::Index;
use crate::log::entries::{IndexBatch, IndexEntry};
use crate::log::read::{self, Chain};
use crate::log::Log;
use crate::progress::{IndexProgress, INDEX_LAG_MAX};
use crate::tree::Tree;
use crate::write::answer::CommittedGroup;
use journal_format::EventIds;

/// How long the indexer waits, idle, before making its work durable.
const PERSIST_IDLE: Duration = Duration::from_millis(500);
/// The longest the indexer goes, busy, without making its work durable: a process killed while
/// appends never pause re-indexes at most this much of the log at its next open, and the head
/// record (written with each durable commit) is at most this old.
const PERSIST_INTERVAL: Duration = Duration::from_secs(1);
/// The longest the indexer goes, busy, without making the Merkle tree durable. The tree is
/// built from the log, so what is not durable costs only time at the next open (the leaves
/// since its head are grown again from the log's bodies); each persist syncs every level file
/// written since the last, which on a busy journal competes with the appends' own syncs.
const TREE_PERSIST_INTERVAL: Duration = Duration::from_secs(10);
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
/// Larger applies cost the indexer less CPU per event, which on a small machine leaves more to
/// the appends of large batches.
const GATHER_ENTRIES: usize = 25_000;
const _: () = assert!(GATHER_ENTRIES as u64 * 2 <= INDEX_LAG_MAX);
/// How long a gathering indexer sleeps before it takes the messages that came and looks for
/// waiting readers.
const GATHER_SLICE: Duration = Duration::from_millis(1);

/// How many index entries are applied per transaction while catching up on open.
const CATCH_UP_CHUNK: usize = 20_000;

/// How much the indexer has applied and not yet made durable, and since when.
struct Persistence {
    /// Applies (or an open's catch-up, counted as one) not yet made durable.
    unpersisted: u32,
    /// When the index was last made durable.
    last: Instant,
    /// Whether the index was made durable since the tree last was.
    tree_behind: bool,
    /// When the tree was last made durable.
    tree_last: Instant,
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

    /// Makes the index's applies durable, and the tree grown with them unless `busy` and the
    /// tree was made durable less than [`TREE_PERSIST_INTERVAL`] ago; on the index's failure
    /// tells waiting readers and returns `false` (the indexer then stops). The tree's failure
    /// stops only the tree.
    fn persist(
        &mut self,
        index: &Index,
        tree: &TreeFeed,
        progress: &IndexProgress,
        busy: bool,
    ) -> bool {
        if self.unpersisted > 0 {
            if let Err(e) = index.persist() {
                progress.fail(&e);
                return false;
            }
            self.unpersisted = 0;
            self.tree_behind = true;
            self.last = now();
        }
        if self.tree_behind
            && (!busy || self.last.duration_since(self.tree_last) >= TREE_PERSIST_INTERVAL)
        {
            tree.persist();
            self.tree_behind = false;
            self.tree_last = self.last;
        }
        true
    }
}

/// Adds index entries for positions `from..=to`, read from the log.
pub(crate) fn catch_up(log: &Log, index: &Index, from: Position, to: Position) -> Result<()> {
    let mut chunk = IndexBatch::default();
    // Each event's stream key, built here: the body holds its kind and id apart.
    let mut stream_key = String::new();
    let mut last = ChainHash::GENESIS;
    read::for_each_frame(log, from, to, Chain::Unverified, &mut |raw| {
        // The index needs five ids of each event: read them without decoding the whole body.
        // The frame's checksums are checked; the rest of the body is not decoded here, so a
        // body that is damaged past its ids (yet passes its CRC) is indexed, and found by
        // `verify` and by any read of that event, as before.
        let position = raw.header.meta.position;
        let damaged = |detail: String| Error::Corruption {
            segment: raw.segment,
            offset: raw.offset,
            position: Some(position),
            detail,
        };
        let ids = EventIds::from_msgpack(raw.body)
            .map_err(|e| damaged(format!("the body's ids cannot be read: {e}")))?;
        let event_id = ids
            .event_id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| damaged("the body has no eventId".to_string()))?;
        last = raw.header.hash;
        let (kind, id) = ids.stream_key_parts();
        stream_key.clear();
        stream_key.push_str(kind);
        stream_key.push_str(id);
        chunk.push(&IndexEntry {
            position,
            event_id,
            stream_key: &stream_key,
            stream_version: raw.header.meta.stream_version,
            task: ids.task_id,
            run: ids.run_id,
            location: Location::new(raw.segment, raw.offset),
            end_offset: raw.offset + raw.header.frame_len(),
        });
        if chunk.len() >= CATCH_UP_CHUNK {
            apply_chunk(index, &mut chunk, last)?;
        }
        Ok(true)
    })?;
    apply_chunk(index, &mut chunk, last)
}

/// Applies a catch-up's chunk of entries, and empties it for the next.
fn apply_chunk(index: &Index, chunk: &mut IndexBatch, last: ChainHash) -> Result<()> {
    let entries: Vec<IndexEntry<'_>> = chunk.iter().collect();
    index.apply(&entries, last)?;
    chunk.clear();
    Ok(())
}

/// The Merkle tree the indexer grows behind the index, from the leaf hashes the writer hands
/// it, or the log's bodies where it hands none.
pub(crate) struct TreeFeed {
    pub tree: Arc<Tree>,
    pub log: Arc<Log>,
}

impl TreeFeed {
    /// Grows the tree to `to`, from the leaf hashes of `batches` as far as they go. A failure
    /// does not stop the index: the tree lags (proofs then say why) and the next growth tries
    /// again; a tree that stopped growing is rebuilt at the next open.
    fn grow(&self, batches: &[IndexBatch], to: Position) {
        if self.tree.failure().is_some() {
            return;
        }
        let given = batches.iter().flat_map(IndexBatch::leaves);
        if let Err(e) = self.tree.grow(&self.log, given, to) {
            tracing::error!(error = %e, "growing the Merkle tree failed; the next commit tries again");
        }
    }

    fn persist(&self) {
        if self.tree.failure().is_some() {
            return;
        }
        if let Err(e) = self.tree.persist() {
            tracing::error!(error = %e, "making the Merkle tree durable failed; it tries again");
        }
    }
}

/// What open leaves to the indexer: the index's backlog (positions `from..=to` of the log),
/// and the log's head at open, to which the tree is grown before anything the writer sends.
pub(crate) struct Backlog {
    pub index: Option<(Position, Position)>,
    pub head: Position,
}

/// Runs until the writer drops its sender. First indexes the backlog open left to it, grows the
/// tree to the log's head at open, and makes both durable; then applies what the writer sends,
/// growing the tree behind each apply. `dirty` says the index holds commits not yet made
/// durable (a catch-up at open), which the first idle moment persists.
pub(crate) fn run(
    index: Arc<Index>,
    tree: TreeFeed,
    progress: Arc<IndexProgress>,
    rx: Receiver<CommittedGroup>,
    backlog: Backlog,
    dirty: bool,
) {
    let mut persistence = Persistence {
        unpersisted: u32::from(dirty),
        last: now(),
        tree_behind: false,
        tree_last: now(),
    };
    if !start(&index, &tree, &progress, &backlog, &mut persistence) {
        return;
    }
    loop {
        let msg = match rx.recv_timeout(PERSIST_IDLE) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => {
                if !persistence.persist(&index, &tree, &progress, false) {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let Applied {
            batches,
            head,
            open,
        } = match gather_and_apply(&index, &progress, &rx, msg) {
            Ok(applied) => applied,
            Err(e) => {
                tracing::error!(error = %e, "index update failed");
                progress.fail(&e);
                return;
            }
        };
        tree.grow(&batches, head.0);
        progress.set(head.0);
        persistence.unpersisted += 1;
        if persistence.due() && !persistence.persist(&index, &tree, &progress, true) {
            return;
        }
        if !open {
            break;
        }
    }
    if !persistence.persist(&index, &tree, &progress, false) {
        tracing::error!("making the index durable at close failed");
    }
}

/// What the indexer does first: indexes the backlog open left to it, grows the tree to the
/// log's head at open, and makes both durable. `false` when the index failed (the indexer then
/// stops; waiting readers are told).
fn start(
    index: &Index,
    tree: &TreeFeed,
    progress: &IndexProgress,
    backlog: &Backlog,
    persistence: &mut Persistence,
) -> bool {
    if let Some((from, to)) = backlog.index {
        if let Err(e) = catch_up(&tree.log, index, from, to) {
            tracing::error!(error = %e, "indexing the backlog left at open failed");
            progress.fail(&e);
            return false;
        }
        // Made durable before the writer, which waits for `progress`, acknowledges anything:
        // were the process killed before its next idle moment, the next open would otherwise
        // index this backlog again, and more each time.
        persistence.unpersisted = 1;
        if !persistence.persist(index, tree, progress, true) {
            return false;
        }
    }
    let tree_behind = tree.tree.size() < backlog.head.0;
    if tree_behind {
        tree.grow(&[], backlog.head);
    }
    if backlog.index.is_some() || tree_behind {
        // The index held the head at open, or its backlog brought it there; readers wait for
        // the tree too.
        progress.set(backlog.head);
        // The tree grown to the head made durable too, for the same reason.
        persistence.tree_behind = true;
        return persistence.persist(index, tree, progress, false);
    }
    true
}

/// Gathers the entries of `first` and of the commits that follow it (see the module's doc) and
/// applies them in one transaction.
fn gather_and_apply(
    index: &Index,
    progress: &IndexProgress,
    rx: &Receiver<CommittedGroup>,
    first: CommittedGroup,
) -> Result<Applied> {
    let CommittedGroup { entries, mut head } = first;
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
            Ok(CommittedGroup {
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
    index.apply(&entries, head.1)?;
    drop(entries);
    Ok(Applied {
        batches,
        head,
        open,
    })
}

/// What [`gather_and_apply`] applied: the writer's batches, the head after them, and whether
/// the writer is still open.
struct Applied {
    batches: Vec<IndexBatch>,
    head: (Position, ChainHash),
    open: bool,
}
