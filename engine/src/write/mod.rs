//! The writer thread: group commit, segment rolls and seals, and the poisoning rule.
//!
//! Every append goes through one thread. It takes all requests waiting in its queue, checks each
//! (duplicates, expected stream version), frames them into one buffer, writes the buffer with a
//! single `write` and makes it durable with a single `fdatasync`, and only then answers the
//! requests (in durable mode). The first frame of every write carries `FIRST_IN_WRITE` and the
//! last frame of every request carries `END_OF_BATCH`, which is how recovery tells a torn final
//! write from damage and keeps batches atomic.
//!
//! A blocking caller that finds the writer idle commits its own request on its own thread (the
//! **leader**): the same group commit, with no hand-off to the writer thread and back. Requests
//! that arrive while a commit is under way go through the writer thread's queue and are
//! committed together by it, as before. The writer's state sits behind one mutex ([`Cell`]):
//! whoever holds it is the only one appending. A caller does not lead while requests wait in
//! the writer thread's queue: they were there first.
//!
//! The sync and what follows it (the answers, the log's head, the index entries) may go to the
//! syncer thread ([`crate::write::syncer`]): a write of 512 KiB or more made while requests wait is
//! handed over, and the writer stages those requests during its sync; it writes them once that
//! sync is done (at most one write is unsynced). Groups are published in the order they were
//! written, each after a sync that began after its write.
//!
//! A failed write or sync poisons the writer: the state of the unsynced bytes is unknown
//! (after a failed `fsync` the kernel may have dropped them), so every later request is refused
//! until the journal is reopened and recovery has looked at the tail.

pub(crate) mod answer;
mod commit;
pub(crate) mod filler;
pub(crate) mod lookup;
pub(crate) mod recent;
mod stage;
pub(crate) mod syncer;
pub(crate) mod thread;
pub(crate) mod verbatim;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// foldhash, not std's SipHash: the writer looks up and inserts event ids and stream keys in
// these maps several times per event, on the commit path, where SipHash was one of the largest
// costs of an append. Its seed is random per process, as std's is.
use foldhash::{HashMap, HashMapExt};
use journal_format::{ChainHash, FooterEntry, Position, FRAME_HEADER_LEN};
use tokio::sync::oneshot;

use crate::error::Result;
use crate::keys::Keys;
use crate::log::entries::IndexBatch;
use crate::log::head_file::HeadFile;
use crate::log::{Log, Segment, SegmentEnd};
use crate::options::{Durability, Limits, Options};
use crate::progress::IndexProgress;
use crate::seams::Clock;
use crate::storage::Storage;
use crate::strings::{Span, Strings};
use crate::write::filler::Filler;
use crate::write::recent::Recent;
use crate::write::syncer::{Publisher, Reply, Syncer};
use journal_format::merkle::TreeHash;

pub(crate) use answer::{Appended, Poison};
use lookup::{Lookup, LookupView};

/// An event checked and encoded by the caller, ready to be framed.
#[derive(Debug)]
pub(crate) struct PreparedEvent {
    /// Where its body lies in its request's `bodies`.
    pub body: std::ops::Range<usize>,
    /// Shared, not copied, by the idempotency maps (the index entry copies it into its batch).
    pub event_id: Arc<str>,
    /// The journal generated the id, so it cannot be a duplicate.
    pub id_assigned: bool,
    /// In its request's `ids`, as are its task and run ids.
    pub stream_key: Span,
    pub task: Option<Span>,
    pub run: Option<Span>,
    /// Its body's Merkle leaf hash, hashed here, beside its encoding, when the journal keeps
    /// its tree: the indexer then grows the tree without reading the body back.
    pub leaf: Option<TreeHash>,
}

/// One atomic append.
#[derive(Debug)]
pub(crate) struct WriteRequest {
    pub events: Vec<PreparedEvent>,
    /// The events' bodies, back to back: one allocation per request, not one per event.
    pub bodies: Vec<u8>,
    /// The events' stream keys, task and run ids.
    pub ids: Strings,
    pub expected_version: Option<u64>,
    /// Set for frames copied from another journal: each event's stored fields and link, kept
    /// as they are (see [`verbatim`]). `None` for an ordinary append.
    pub verbatim: Option<Vec<verbatim::Verbatim>>,
    pub reply: Reply,
}

impl WriteRequest {
    /// The bytes its frames take.
    fn frame_bytes(&self) -> u64 {
        self.events
            .iter()
            .map(|e| e.body.len() as u64 + FRAME_HEADER_LEN as u64)
            .sum()
    }
}

/// What the writer thread is asked to do.
#[derive(Debug)]
pub(crate) enum Command {
    Write(WriteRequest),
    /// Sync everything written so far (buffered mode) and answer.
    Sync(oneshot::Sender<Result<()>>),
}

/// The writer's own state; only the writer thread touches it.
pub(crate) struct Writer {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    log: Arc<Log>,
    /// The events stored before those `recent` holds: the index, seen from the write side.
    lookup: Arc<dyn Lookup>,
    poison: Arc<Poison>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    durability: Durability,
    /// Publishes durable groups: moves the tail's end and the log's head, answers, and sends
    /// index entries to the indexer.
    publisher: Arc<Publisher>,
    /// The head record: the writer records the head at every seal, at a clean close, after a
    /// commit when [`HEAD_RECORD_INTERVAL`] of recorded time passed since the last record
    /// (durable mode), and after each sync (buffered mode).
    head_file: Arc<HeadFile>,
    /// The recorded time (`recordedAt`) of the commit that last updated the head record.
    head_recorded_ns: i64,
    /// Syncs and publishes written groups while the writer goes on (durable mode; `None` in
    /// buffered mode, where nothing waits on a sync).
    syncer: Option<Syncer>,
    /// Where the frames written to the tail end, when the syncer has not published them all
    /// yet (ahead of the tail's state); `None` or behind the tail's state otherwise.
    ahead: Option<SegmentEnd>,
    /// How many commands wait in the writer thread's queue, not yet taken (shared with
    /// [`WriterCell`]): a group written while some wait is handed to the syncer.
    queued: Arc<AtomicUsize>,
    progress: Arc<IndexProgress>,
    /// Set when open left an index backlog to the index thread: the position the index must
    /// reach before the writer may look up ids and stream versions in it. Cleared once reached.
    index_complete_at: Option<Position>,
    tail: Arc<Segment>,
    /// The version of each stream written since open, counting what is staged: a request's
    /// versions go in once it is staged whole (the index knows the streams not written since
    /// open). A failed write or sync poisons the writer, so versions a lost write left here
    /// are never used.
    streams: HashMap<String, u64>,
    /// Events staged or committed but perhaps not yet in `view`: each one's answer by its id.
    /// A request's ids go in as its runs are linked, and out again if it fails.
    recent: Recent,
    /// At least the greatest event id (in byte order) this writer has staged since open, or
    /// empty before the first. Every id in `recent` is at most this: an id after it is not
    /// looked up there (with ids that grow, as UUID v7 and counters do, no new id is).
    greatest_id: String,
    /// A read view of the index, renewed when the indexer has moved on.
    view: Option<Box<dyn LookupView>>,
    last_recorded_ns: i64,
    unsynced: bool,
    /// The staging area of the last commit, emptied, for the next one to reuse.
    spare: Option<Staged>,
    /// Zero-fills the tail segment ahead of its frames, off the commits' path (`None`: the
    /// journal was opened without [`crate::Options::preallocate`]; commits then extend the
    /// file).
    filler: Option<Filler>,
    /// Set when the writer thread has finished: nothing more is appended.
    closed: bool,
    /// An encrypted journal's keys, to compare a repeated id's sealed bodies opened.
    keys: Option<Arc<Keys>>,
}

/// How long the writer waits for the index thread to index the backlog open left it before it
/// answers appends with the index's error (the backlog is small, see `DEFERRED_CATCH_UP_MAX`:
/// a wait this long means the index thread is stuck, not slow).
const INDEX_BACKLOG_WAIT: Duration = Duration::from_secs(60);

/// How long an append waits for an index that lags too far before it goes on regardless.
const INDEX_LAG_WAIT: Duration = Duration::from_secs(60);

/// The smallest write handed to the syncer while requests wait (see [`crate::write::syncer`]), or half
/// the batch limit when that is less (small limits, as the simulator's, hand over too): with 8
/// producers on two cores, smaller writes gained nothing from the overlap and lost to the
/// hand-over's wake-ups (batch 100 4–7% slower with every write handed over, 6% with those of
/// 256 KiB or more; `docs/PERFORMANCE.md`).
const HAND_OVER_BYTES: u64 = 512 * 1024;
/// How much recorded time may pass between updates of the head record while appends continue
/// (durable mode): a log cut back by more than about this much of its history is refused at open
/// (`docs/FORMAT.md`, "Head record"). One small write and sync a second.
pub(crate) const HEAD_RECORD_INTERVAL: Duration = Duration::from_secs(1);

/// The capacity a new staging buffer starts with.
const STAGED_BYTES: usize = 64 * 1024;
/// The largest staging buffer kept for the next commit.
const STAGED_BYTES_KEPT: usize = 1 << 20;

/// The frames of one write being assembled.
pub(crate) struct Staged {
    buf: Vec<u8>,
    entries: IndexBatch,
    sparse: Vec<FooterEntry>,
    replies: Vec<(Reply, Vec<Appended>)>,
    next_position: Position,
    prev_hash: ChainHash,
}

/// How far `staged` went before a request: what [`unstage`] goes back to.
#[derive(Clone, Copy)]
struct Mark {
    buf: usize,
    entries: usize,
    sparse: usize,
    next_position: Position,
    prev_hash: ChainHash,
}

/// Takes out of `staged` and `recent` everything a failed request put in since `mark`: its
/// frames, sparse entries, index entries and ids.
fn unstage(staged: &mut Staged, recent: &mut Recent, mark: Mark) {
    staged.buf.truncate(mark.buf);
    staged.sparse.truncate(mark.sparse);
    staged.next_position = mark.next_position;
    staged.prev_hash = mark.prev_hash;
    // The ids this request staged are those at its positions: every one goes.
    recent.unstage_from(mark.next_position);
    staged.entries.truncate(mark.entries);
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("tail", &self.tail.id)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

/// The writer's state, shared by the writer thread and leading callers, and how many commands
/// wait for the writer thread.
pub(crate) type Cell = Arc<WriterCell>;

/// The writer behind its mutex, and the commands sent to the writer thread that it has not yet
/// committed. A caller that finds any queued does not lead: it queues its request behind them
/// (see [`lead`]).
#[derive(Debug)]
pub(crate) struct WriterCell {
    writer: Mutex<Writer>,
    queued: Arc<AtomicUsize>,
}

impl WriterCell {
    pub(crate) fn new(writer: Writer) -> WriterCell {
        WriterCell {
            queued: Arc::clone(&writer.queued),
            writer: Mutex::new(writer),
        }
    }

    /// Counts a command about to be sent to the writer thread. Call [`WriterCell::unqueue`]
    /// if the send fails.
    pub(crate) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// The commands counted as queued now.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Uncounts `n` commands: committed (or refused) by the writer thread, or never sent.
    pub(crate) fn unqueue(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::SeqCst);
        debug_assert!(before >= n, "more commands uncounted than counted");
    }
}

/// What the writer is wired to: the parts it shares with the journal, the syncer and the
/// indexer. Everything else of its state starts empty ([`Writer::new`]).
pub(crate) struct Wiring {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    pub log: Arc<Log>,
    pub lookup: Arc<dyn Lookup>,
    pub poison: Arc<Poison>,
    pub progress: Arc<IndexProgress>,
    pub publisher: Arc<Publisher>,
    /// `None` in buffered mode, where nothing waits on a sync.
    pub syncer: Option<Syncer>,
    pub head_file: Arc<HeadFile>,
    /// The unsealed segment appends go to.
    pub tail: Arc<Segment>,
    /// An encrypted journal's keys: a repeated id's sealed bodies are compared opened.
    pub keys: Option<Arc<Keys>>,
}

impl Writer {
    /// A writer wired to `wiring`, with the limits, durability, clock and preallocation of
    /// `options`; `index_complete_at` is the position the index must reach before ids and
    /// stream versions are looked up in it (a backlog left to the index thread), and
    /// `last_recorded_ns` the `recordedAt` of the head event. It starts filling the tail ahead
    /// of its frames.
    pub(crate) fn new(
        wiring: Wiring,
        options: &Options,
        index_complete_at: Option<Position>,
        last_recorded_ns: i64,
    ) -> Writer {
        let Wiring {
            storage,
            dir,
            log,
            lookup,
            poison,
            progress,
            publisher,
            syncer,
            head_file,
            tail,
            keys,
        } = wiring;
        let writer = Writer {
            storage,
            dir,
            log,
            lookup,
            poison,
            clock: Arc::clone(&options.clock),
            limits: options.limits,
            durability: options.durability,
            publisher,
            head_file,
            head_recorded_ns: last_recorded_ns,
            syncer,
            ahead: None,
            queued: Arc::default(),
            progress,
            index_complete_at,
            tail,
            streams: HashMap::new(),
            recent: Recent::default(),
            greatest_id: String::new(),
            view: None,
            last_recorded_ns,
            unsynced: false,
            spare: None,
            filler: options.preallocate.then(Filler::start),
            closed: false,
            keys,
        };
        writer.fill_tail();
        writer
    }
}
