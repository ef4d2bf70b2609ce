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
pub(crate) mod filler;
pub(crate) mod lookup;
pub(crate) mod recent;
pub(crate) mod syncer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// foldhash, not std's SipHash: the writer looks up and inserts event ids and stream keys in
// these maps several times per event, on the commit path, where SipHash was one of the largest
// costs of an append. Its seed is random per process, as std's is.
use foldhash::{HashMap, HashMapExt};
use journal_format::frame::{encode_unlinked, link_group, LINK_GROUP_BYTES};
use journal_format::{
    ByteOffset, ChainHash, FooterEntry, FrameFlags, FrameMeta, Located, Location, Position,
    SegmentId, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::log::entries::{IndexBatch, IndexEntry};
use crate::log::head_file::HeadFile;
use crate::log::segment::{self, SEGMENTS_DIR};
use crate::log::{Log, Segment, SegmentEnd, SPARSE_INTERVAL_BYTES};
use crate::options::{Durability, Limits, Options};
use crate::progress::{self, IndexProgress};
use crate::seams::Clock;
use crate::storage::{OpenMode, Storage};
use crate::strings::{Span, Strings};
use crate::write::filler::Filler;
use crate::write::recent::Recent;
use crate::write::syncer::{Publisher, Reply, Syncer, Written};

use answer::same_body;
pub(crate) use answer::{Appended, Committed, Poison, Stored};
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
/// hands it back otherwise, for the writer thread's queue. The answer goes to the request's
/// reply as usual.
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
        };
        writer.fill_tail();
        writer
    }

    /// Has the filler zero-fill the tail segment ahead of its frames, through a handle of its
    /// own. Best effort: without it (the handle cannot be opened), commits extend the file.
    pub(crate) fn fill_tail(&self) {
        let Some(filler) = &self.filler else {
            return;
        };
        let path = self.dir.join(SEGMENTS_DIR).join(self.tail.id.file_name());
        match self.storage.open(&path, OpenMode::ReadWrite) {
            Ok(file) => {
                let end = self.end().end_offset;
                let sync = self.durability == Durability::Durable;
                filler.attach(file, end, self.limits.segment_bytes_max, sync);
            }
            Err(e) => tracing::warn!(
                error = %e,
                segment = %self.tail.id,
                "cannot open the tail segment for the filler; commits extend it"
            ),
        }
    }

    /// Stops the filler on the tail segment, cuts the zero-filled space after the tail's
    /// frames, and syncs the new length.
    fn trim_preallocated(&mut self) -> Result<()> {
        if let Some(filler) = &self.filler {
            filler.detach();
        }
        let end = self.end().end_offset;
        let len = self.tail.file.len().map_err(Error::io_with(|| {
            format!("reading the length of segment {}", self.tail.id)
        }))?;
        if len > end {
            self.tail.file.set_len(end).map_err(Error::io_with(|| {
                format!("trimming segment {}", self.tail.id)
            }))?;
            self.tail.file.sync_data().map_err(Error::io_with(|| {
                format!("syncing segment {}", self.tail.id)
            }))?;
        }
        Ok(())
    }

    /// Records the end of the tail's frames in the head record. Only called when they are all
    /// synced (after a seal, a sync, or at close). A failure is logged: the head record is
    /// evidence, and an older record is still true.
    fn record_head(&self) {
        let end = self.end();
        if let Err(e) = self.head_file.record(end.last_position, end.last_hash) {
            tracing::warn!(error = %e, "cannot update the head record");
        }
    }

    fn sync_if_needed(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        let result = self
            .tail
            .file
            .sync_data()
            .map_err(Error::io("syncing the tail segment"));
        match result {
            Ok(()) => {
                self.unsynced = false;
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    fn poison(&self, cause: &Error) {
        self.publisher.poison(cause);
    }

    /// Where the frames written to the tail end: past what the syncer has yet to publish.
    fn end(&self) -> SegmentEnd {
        let published = self.tail.end();
        match self.ahead {
            Some(ahead) if ahead.end_offset > published.end_offset => ahead,
            _ => published,
        }
    }

    /// Waits until the syncer has published every group handed to it; then
    /// [`Error::Poisoned`] if a sync (the syncer's or any other) failed.
    fn settle(&self) -> Result<()> {
        if let Some(syncer) = &self.syncer {
            syncer.drain();
        }
        match self.poison.cause() {
            Some(cause) => Err(Error::Poisoned(cause)),
            None => Ok(()),
        }
    }

    /// An empty staging area for a write after the tail's last frame: the one the last commit
    /// left in `spare` when there is one, so that its buffer and maps are reused (a large
    /// buffer allocated and freed per commit makes the allocator consolidate freed chunks on
    /// every single append).
    fn new_staged(&mut self) -> Staged {
        let mut staged = self.spare.take().unwrap_or_else(|| Staged {
            buf: Vec::with_capacity(STAGED_BYTES),
            entries: IndexBatch::default(),
            sparse: Vec::new(),
            replies: Vec::new(),
            next_position: Position(0),
            prev_hash: ChainHash::GENESIS,
        });
        self.restage(&mut staged);
        staged
    }

    /// Empties `staged` for a write after the tail's last frame (after a flush or a roll).
    fn restage(&self, staged: &mut Staged) {
        let end = self.end();
        staged.buf.clear();
        staged.entries.clear();
        staged.sparse.clear();
        staged.replies.clear();
        staged.next_position = end.last_position.next();
        staged.prev_hash = end.last_hash;
    }

    /// Keeps `staged` for the next commit, unless a large write grew its buffer past
    /// [`STAGED_BYTES_KEPT`] (then the next commit allocates afresh).
    fn keep_spare(&mut self, staged: Staged) {
        if staged.buf.capacity() <= STAGED_BYTES_KEPT {
            self.spare = Some(staged);
        }
    }

    fn commit_group(&mut self, group: Vec<Command>) {
        if let Some(at) = self.index_complete_at {
            // Idempotency and stream versions read the index for everything before this
            // writer's first commit, so nothing is staged until the backlog is indexed.
            if let Err(e) = self.progress.wait_for(at, INDEX_BACKLOG_WAIT) {
                let message = match e {
                    Error::Index(message) => message,
                    other => other.to_string(),
                };
                for cmd in group {
                    match cmd {
                        Command::Write(request) => {
                            let _ = request.reply.send(Err(Error::Index(message.clone())));
                        }
                        Command::Sync(reply) => {
                            let _ = reply.send(self.sync_if_needed());
                        }
                    }
                }
                return;
            }
            self.index_complete_at = None;
        }
        if let Err(e) = self.refresh_view() {
            // Without a view, lookups fall back to fresh transactions; say why once.
            tracing::warn!(error = %e, "cannot renew the index view");
            self.view = None;
        }
        let mut staged = self.new_staged();
        for cmd in group {
            let request = match cmd {
                Command::Write(request) => request,
                Command::Sync(reply) => {
                    let result = self
                        .flush(&mut staged)
                        .and_then(|()| self.settle())
                        .and_then(|()| self.sync_if_needed());
                    self.restage(&mut staged);
                    let _ = reply.send(result);
                    continue;
                }
            };
            if let Some(cause) = self.poison.cause() {
                let _ = request.reply.send(Err(Error::Poisoned(cause)));
                continue;
            }
            let request_bytes = request.frame_bytes();
            let end = self.end().end_offset + staged.buf.len() as u64;
            if end + request_bytes > self.limits.segment_bytes_max
                && end > SEGMENT_HEADER_LEN as u64
            {
                let rolled = self.flush(&mut staged).and_then(|()| self.roll());
                self.restage(&mut staged);
                if let Err(e) = rolled {
                    let _ = request.reply.send(Err(e));
                    continue;
                }
            }
            match self.stage(
                &request.events,
                &request.bodies,
                &request.ids,
                request.expected_version,
                &mut staged,
            ) {
                Ok(appended) => staged.replies.push((request.reply, appended)),
                Err(e) => {
                    let _ = request.reply.send(Err(e));
                }
            }
        }
        let _ = self.flush(&mut staged);
        self.keep_spare(staged);
        self.record_head_if_due();
    }

    /// In durable mode, records the published head (every published position is synced) in the
    /// head record once [`HEAD_RECORD_INTERVAL`] of recorded time passed since the last record.
    /// Recorded time, not the clock read again: a seeded clock keeps the simulator's files
    /// the same from run to run.
    fn record_head_if_due(&mut self) {
        if self.durability != Durability::Durable {
            return;
        }
        let interval = i64::try_from(HEAD_RECORD_INTERVAL.as_nanos()).unwrap_or(i64::MAX);
        if self.last_recorded_ns.saturating_sub(self.head_recorded_ns) < interval {
            return;
        }
        self.head_recorded_ns = self.last_recorded_ns;
        let head = self.log.head();
        if let Err(e) = self.head_file.record(head.position, head.hash) {
            tracing::warn!(error = %e, "cannot update the head record");
        }
    }

    /// The current version of a stream, counting what is staged. A stream not written since
    /// open is read from the index, which holds everything before open once the backlog open
    /// left it is indexed (`index_complete_at`, waited for before anything is staged).
    fn stream_version(&self, key: &str) -> Result<u64> {
        if let Some(v) = self.streams.get(key) {
            return Ok(*v);
        }
        match &self.view {
            Some(view) => view.stream_head(key),
            None => self.lookup.stream_head(key),
        }
    }

    /// Renews the index view when the indexer has moved past it, and forgets the recent ids
    /// the new view holds. Every id committed since open is in `recent` or in `view`: an id
    /// leaves `recent` only once a view that reflects its position is in place. (Keeping a view
    /// longer saves a redb read transaction per commit but pins the pages the index frees
    /// meanwhile: the index file grew several times over when it was kept for 256 commits.)
    fn refresh_view(&mut self) -> Result<()> {
        let stale = self
            .view
            .as_ref()
            .is_none_or(|v| v.indexed() < self.progress.position());
        if stale {
            let view = self.lookup.view()?;
            let indexed = view.indexed();
            self.recent.forget_through(indexed);
            self.view = Some(view);
        }
        Ok(())
    }

    /// The originals of the event ids of a request that are already stored (or staged), by the
    /// event's index in the request.
    ///
    /// An id found is a duplicate only when its event's body is the stored one (the body holds
    /// only what the caller gave: the journal's fields are in the frame header); otherwise the
    /// request is refused with [`Error::IdReused`]. Only an id found reads a stored frame: a
    /// new id costs nothing more than its lookups.
    fn originals(
        &self,
        events: &[PreparedEvent],
        bodies: &[u8],
        staged: &Staged,
    ) -> Result<Vec<Option<Appended>>> {
        let mut out = Vec::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            if event.id_assigned {
                out.push(None);
                continue;
            }
            let id = &*event.event_id;
            let written = if id > self.greatest_id.as_str() {
                None
            } else {
                self.recent.get(id).copied()
            };
            let body = bodies.get(event.body.clone()).unwrap_or_default();
            let (committed, same) = match written {
                Some(committed) => (committed, self.stored_body_is(&committed, staged, body)?),
                None => match self.indexed(id)? {
                    Some((committed, frame)) => {
                        let stored = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
                        (committed, same_body(stored, body))
                    }
                    None => {
                        out.push(None);
                        continue;
                    }
                },
            };
            if !same {
                return Err(Error::IdReused {
                    event_id: id.to_string(),
                    index,
                    position: Some(committed.position),
                });
            }
            out.push(Some(committed.answer(&event.event_id, Stored::Before)));
        }
        Ok(out)
    }

    /// The stored event with this id, by the index (its read view when there is one): what a
    /// duplicate is answered, from its frame's header, and the frame.
    fn indexed(&self, id: &str) -> Result<Option<(Committed, Vec<u8>)>> {
        let found = match &self.view {
            Some(view) => view.event(id)?,
            None => self.lookup.event(id)?,
        };
        let Some(at) = found else {
            return Ok(None);
        };
        let (header, frame) = crate::log::read::read_frame_at(&self.log, at)?;
        let committed = Committed {
            position: at.position,
            hash: header.hash,
            stream_version: header.meta.stream_version,
            recorded_at_ns: header.meta.recorded_at_ns,
            location: at.location,
        };
        Ok(Some((committed, frame)))
    }

    /// Whether the event `committed` describes (one of the recent ids) has `body`
    /// ([`same_body`]): its frame is read from the staging area when it is not written yet
    /// (staged by an earlier request of this group), else from its segment (written, if perhaps
    /// not yet synced or published).
    fn stored_body_is(&self, committed: &Committed, staged: &Staged, body: &[u8]) -> Result<bool> {
        let staged_from = self.end().end_offset;
        let Location { segment, offset } = committed.location;
        if segment == self.tail.id && offset >= staged_from {
            let frame = usize::try_from(offset - staged_from)
                .ok()
                .and_then(|at| staged.buf.get(at..));
            let stored = frame.map(journal_format::frame::decode_frame);
            return match stored {
                Some(Ok((header, stored))) if header.meta.position == committed.position => {
                    Ok(same_body(stored, body))
                }
                _ => Err(Error::Internal(format!(
                    "event at position {} is not staged where the writer noted it",
                    committed.position
                ))),
            };
        }
        let (_, frame) = crate::log::read::read_frame_at(
            &self.log,
            Located {
                position: committed.position,
                location: committed.location,
            },
        )?;
        let stored = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
        Ok(same_body(stored, body))
    }

    /// Checks one request and frames its new events into `staged`. On error nothing of the
    /// request is staged. The ids of the events it frames are copied into their index entries.
    fn stage(
        &mut self,
        events: &[PreparedEvent],
        bodies: &[u8],
        ids: &Strings,
        expected: Option<u64>,
        staged: &mut Staged,
    ) -> Result<Vec<Appended>> {
        let originals = self.originals(events, bodies, staged)?;
        let Sorted { mut answers, new } = sort_new(events, bodies, originals)?;
        if let (Some(expected), Some((first, _))) = (expected, new.first()) {
            let key = events
                .get(*first)
                .map(|e| ids.get(e.stream_key))
                .unwrap_or_default();
            let actual = self.stream_version(key)?;
            if actual != expected {
                return Err(Error::Conflict {
                    stream: key.to_string(),
                    expected,
                    actual,
                });
            }
        }
        // Versions are decided before anything is framed, so that a failed index read leaves
        // nothing of this request in `staged`.
        let (stream_updates, versions) = self.versions(events, ids, &new)?;
        let now = self.clock.now_unix_ns().max(self.last_recorded_ns);
        let rollback = Mark {
            buf: staged.buf.len(),
            entries: staged.entries.len(),
            sparse: staged.sparse.len(),
            next_position: staged.next_position,
            prev_hash: staged.prev_hash,
        };
        let request = Request {
            events,
            bodies,
            ids,
            versions: &versions,
            now,
        };
        if let Err(e) = self.frame_new(&request, &new, &mut answers, staged) {
            unstage(staged, &mut self.recent, rollback);
            return Err(e);
        }
        answer_repeats(&new, &mut answers);
        // Every event was answered above (framed, duplicate or repeat); a request with one left
        // unanswered is refused whole, like any other failed request.
        let Some(answers) = answers.into_iter().collect::<Option<Vec<_>>>() else {
            debug_assert!(false, "an event of a request was left unanswered");
            unstage(staged, &mut self.recent, rollback);
            return Err(Error::Internal("event left unanswered".into()));
        };
        for (key, version) in stream_updates {
            // A key is copied once per stream since open.
            match self.streams.get_mut(key) {
                Some(current) => *current = version,
                None => {
                    self.streams.insert(key.to_owned(), version);
                }
            }
        }
        self.last_recorded_ns = now;
        Ok(answers)
    }

    /// Each new event's stream version, by its index in the request (0 for those not framed:
    /// duplicates and repeats; versions start at 1), and the request's last version of each
    /// stream, merged into `self.streams` only if the request succeeds.
    fn versions<'r>(
        &self,
        events: &[PreparedEvent],
        ids: &'r Strings,
        new: &[(usize, Option<usize>)],
    ) -> Result<(HashMap<&'r str, u64>, Vec<u64>)> {
        // Keyed by the request's own strings, and sized for up to 64 streams at once: a map of
        // owned keys grown from empty costs allocations and rehashing per event.
        let mut stream_updates: HashMap<&str, u64> = HashMap::with_capacity(new.len().min(64));
        let mut versions: Vec<u64> = vec![0; events.len()];
        for (i, repeat) in new {
            let Some(event) = events.get(*i).filter(|_| repeat.is_none()) else {
                continue;
            };
            let key = ids.get(event.stream_key);
            let version = match stream_updates.get_mut(key) {
                Some(version) => {
                    *version += 1;
                    *version
                }
                None => {
                    let version = self.stream_version(key)? + 1;
                    stream_updates.insert(key, version);
                    version
                }
            };
            if let Some(slot) = versions.get_mut(*i) {
                *slot = version;
            }
        }
        Ok((stream_updates, versions))
    }

    /// Frames the request's new events (those of `new` that repeat none before them) into
    /// `staged`, each link group linked as soon as it ends, and answers them in `answers`. On
    /// error the caller takes back what was staged.
    fn frame_new(
        &mut self,
        request: &Request<'_>,
        new: &[(usize, Option<usize>)],
        answers: &mut [Option<Appended>],
        staged: &mut Staged,
    ) -> Result<()> {
        let last_new = new
            .iter()
            .rev()
            .find(|(_, repeat)| repeat.is_none())
            .map(|(i, _)| *i);
        let tail_end = self.end();
        // Room for the whole request at once (at most its bodies and a header for each): a
        // buffer grown frame by frame is copied at each doubling.
        staged
            .buf
            .reserve(request.bodies.len() + new.len() * FRAME_HEADER_LEN);
        // At most every id of the request (duplicates' too): its keys and ids, and its event ids.
        let id_bytes = request.ids.len()
            + request
                .events
                .iter()
                .map(|e| e.event_id.len())
                .sum::<usize>();
        staged.entries.reserve(new.len(), id_bytes);
        // The link group being framed: where its first frame starts in `staged.buf`, and its
        // events, answered once the group is linked. The request's last framed event ends its
        // group, so no group is left open past the request.
        let mut group = Group {
            start: staged.buf.len(),
            events: Vec::new(),
        };
        for (i, repeat) in new {
            if repeat.is_some() {
                continue;
            }
            let ends = Ends {
                batch: Some(*i) == last_new,
                write_at: tail_end.end_offset,
                last_sparse: tail_end.last_sparse_offset,
            };
            let ends_group = self.frame_one(request, *i, &ends, &mut group, staged)?;
            if ends_group {
                self.link(request, &mut group, answers, staged)?;
            }
        }
        debug_assert!(
            group.events.is_empty(),
            "a request left a link group unlinked"
        );
        Ok(())
    }

    /// Frames event `i` of the request into `staged` (unlinked), with its sparse and index
    /// entries, and adds it to `group`. Returns whether it ends its link group.
    fn frame_one(
        &mut self,
        request: &Request<'_>,
        i: usize,
        ends: &Ends,
        group: &mut Group,
        staged: &mut Staged,
    ) -> Result<bool> {
        // Every event framed here was given a version (from 1).
        let version = request.versions.get(i).copied().filter(|v| *v > 0);
        let (Some(event), Some(version)) = (request.events.get(i), version) else {
            debug_assert!(false, "event {i} of a request is framed without a version");
            return Err(Error::Internal(format!(
                "event {i} of the request has no stream version"
            )));
        };
        let frame_len = FRAME_HEADER_LEN + event.body.len();
        let ends_group =
            ends.batch || (staged.buf.len() - group.start + frame_len) as u64 >= LINK_GROUP_BYTES;
        let mut flags = FrameFlags::NONE;
        if staged.buf.is_empty() {
            flags = flags.with(FrameFlags::FIRST_IN_WRITE);
        }
        if ends.batch {
            flags = flags.with(FrameFlags::END_OF_BATCH);
        }
        if ends_group {
            flags = flags.with(FrameFlags::LINK_END);
        }
        let position = staged.next_position;
        let offset = ends.write_at + staged.buf.len() as u64;
        let meta = FrameMeta {
            position,
            recorded_at_ns: request.now,
            stream_version: version,
            flags,
        };
        let body = request.bodies.get(event.body.clone()).ok_or_else(|| {
            Error::Internal(format!(
                "event {} names body bytes {:?} of {}",
                event.event_id,
                event.body,
                request.bodies.len()
            ))
        })?;
        encode_unlinked(&mut staged.buf, &meta, body)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let last_sparse = staged
            .sparse
            .last()
            .map(|e| e.offset.0)
            .or(ends.last_sparse);
        if last_sparse.is_none_or(|o| offset >= o + SPARSE_INTERVAL_BYTES) {
            staged.sparse.push(FooterEntry {
                position,
                offset: ByteOffset(offset),
            });
        }
        staged.next_position = position.next();
        if *event.event_id > *self.greatest_id {
            // Left as it is should the request fail: an upper bound stays one.
            self.greatest_id.clear();
            self.greatest_id.push_str(&event.event_id);
        }
        group.events.push((i, position, version, offset));
        let ids = request.ids;
        staged.entries.push(&IndexEntry {
            position,
            event_id: &event.event_id,
            stream_key: ids.get(event.stream_key),
            stream_version: version,
            task: event.task.map(|id| ids.get(id)),
            run: event.run.map(|id| ids.get(id)),
            location: Location::new(self.tail.id, offset),
            end_offset: offset + frame_len as u64,
        });
        Ok(ends_group)
    }

    /// Links the frames of `group` (the last ones staged), remembers its events as recent and
    /// answers them, and starts the next group after it.
    fn link(
        &mut self,
        request: &Request<'_>,
        group: &mut Group,
        answers: &mut [Option<Appended>],
        staged: &mut Staged,
    ) -> Result<()> {
        let linked = staged
            .buf
            .get_mut(group.start..)
            .ok_or(journal_format::FormatError::Truncated {
                needed: group.start as u64,
                available: 0,
            })
            .and_then(|frames| link_group(frames, &staged.prev_hash));
        let link = linked.map_err(|e| {
            debug_assert!(false, "a link group framed here does not link: {e}");
            Error::Internal(format!("cannot link the frames of a commit: {e}"))
        })?;
        staged.prev_hash = link;
        for (j, position, stream_version, offset) in group.events.drain(..) {
            let committed = Committed {
                position,
                hash: link,
                stream_version,
                recorded_at_ns: request.now,
                location: Location::new(self.tail.id, offset),
            };
            if let Some(event) = request.events.get(j) {
                self.recent.push(&event.event_id, committed);
                if let Some(slot) = answers.get_mut(j) {
                    *slot = Some(committed.answer(&event.event_id, Stored::Now));
                }
            }
        }
        group.start = staged.buf.len();
        Ok(())
    }

    /// Writes and (in durable mode) syncs the staged frames, publishes them, and answers.
    fn flush(&mut self, staged: &mut Staged) -> Result<()> {
        let replies = std::mem::take(&mut staged.replies);
        if staged.buf.is_empty() {
            for (reply, answers) in replies {
                let _ = reply.send(Ok(answers));
            }
            return Ok(());
        }
        // At most one write is unsynced in durable mode: the group the syncer holds is synced
        // before these frames are written. Were both unsynced, a power failure could keep this
        // write and lose part of that one, which recovery cannot tell from damage followed by a
        // valid write (it refuses to open: docs/OPERATIONS.md, "Buffered mode and power failures").
        if let Err(e) = self.settle() {
            self.publisher.refuse(replies);
            staged.buf.clear();
            return Err(e);
        }
        let state = self.end();
        let end = state.end_offset + staged.buf.len() as u64;
        if let Some(filler) = &self.filler {
            filler.before_write(end);
        }
        let write = self
            .tail
            .file
            .write_all_at(&staged.buf, state.end_offset)
            .map_err(Error::io_with(|| {
                format!("writing segment {}", self.tail.id)
            }));
        if let (Ok(()), Some(filler)) = (&write, &self.filler) {
            filler.after_write(end, staged.buf.len() as u64);
        }
        if let Err(e) = write {
            self.poison(&e);
            self.publisher.refuse(replies);
            staged.buf.clear();
            return Err(e);
        }
        let last_position = Position(staged.next_position.0 - 1);
        assert!(
            last_position > state.last_position,
            "positions must strictly increase across commits"
        );
        let written = Written {
            segment: Arc::clone(&self.tail),
            end: SegmentEnd {
                end_offset: end,
                last_position,
                last_hash: staged.prev_hash,
                last_sparse_offset: staged
                    .sparse
                    .last()
                    .map(|e| e.offset.0)
                    .or(state.last_sparse_offset),
            },
            sparse: std::mem::take(&mut staged.sparse),
            replies,
            entries: std::mem::take(&mut staged.entries),
        };
        staged.buf.clear();
        if let Durability::Buffered { .. } = self.durability {
            self.unsynced = true;
            self.publisher.publish(written);
            return Ok(());
        }
        // Handed over when the group is large and requests wait: the writer stages them during
        // the sync. Synced here otherwise: a small group's sync is shorter than what a
        // hand-over's wake-ups add on the way to the answer. (The syncer is idle: drained
        // above.)
        if let Some(syncer) = &self.syncer {
            let large = HAND_OVER_BYTES.min(self.limits.batch_bytes_max / 2);
            if written.end.end_offset - state.end_offset >= large
                && self.queued.load(Ordering::SeqCst) > 0
            {
                self.ahead = Some(written.end);
                syncer.hand(written);
                return Ok(());
            }
        }
        self.publisher.sync_and_publish(written)
    }

    /// Seals the tail segment with its footer and starts the next one.
    fn roll(&mut self) -> Result<()> {
        let result = self.try_roll();
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    fn try_roll(&mut self) -> Result<()> {
        self.settle()?;
        self.sync_if_needed()?;
        // The footer goes right after the frames and ends the file: cut the zeros first.
        self.trim_preallocated()?;
        let state = self.tail.seal()?;
        self.record_head();
        let next = segment::create(
            &*self.storage,
            &self.dir,
            SegmentId(self.tail.id.0 + 1),
            state.last_position.next(),
            state.last_hash,
        )?;
        let next = Arc::new(next);
        self.log.push(Arc::clone(&next));
        tracing::debug!(segment = %next.id, "rolled to a new segment");
        self.tail = next;
        self.ahead = None;
        self.fill_tail();
        Ok(())
    }
}

/// One request being staged: its events, their bodies and ids, the stream version of each new
/// event (by its index in the request), and the recorded time its frames carry.
struct Request<'r> {
    events: &'r [PreparedEvent],
    bodies: &'r [u8],
    ids: &'r Strings,
    versions: &'r [u64],
    now: i64,
}

/// Where a frame being framed stands: whether it ends its batch, where the staged bytes will
/// be written in the tail, and the tail's last sparse entry before them.
struct Ends {
    batch: bool,
    write_at: u64,
    last_sparse: Option<u64>,
}

/// The link group being framed: where its first frame starts in the staged bytes, and its
/// events (index in the request, position, stream version, frame offset).
struct Group {
    start: usize,
    events: Vec<(usize, Position, u64, u64)>,
}

/// A request's events sorted: each one's answer so far (`Some` for a duplicate of a stored
/// event), and the new ones in order, each with the index of the earlier event of the same
/// request it repeats, if any.
struct Sorted {
    answers: Vec<Option<Appended>>,
    new: Vec<(usize, Option<usize>)>,
}

/// Sorts a request's events given the answers of those already stored (`originals`): a
/// repeated id inside the request is stored once and answered like a duplicate when its bodies
/// are the same, and refused ([`Error::IdReused`]) when they differ.
fn sort_new(
    events: &[PreparedEvent],
    bodies: &[u8],
    originals: Vec<Option<Appended>>,
) -> Result<Sorted> {
    let mut answers: Vec<Option<Appended>> = Vec::with_capacity(events.len());
    // The request's new ids, to find one repeated inside it. While they come in increasing
    // order (as UUID v7 and counters do) none can repeat an earlier one, and the map is built
    // only when one does not. Sized for the request when built: each growth of a large table
    // copies it.
    let mut within: Option<HashMap<&str, usize>> = None;
    let mut greatest: Option<&str> = None;
    let mut new: Vec<(usize, Option<usize>)> = Vec::with_capacity(events.len());
    for ((i, event), original) in events.iter().enumerate().zip(originals) {
        if let Some(mut a) = original {
            a.duplicate = true;
            answers.push(Some(a));
            continue;
        }
        answers.push(None);
        let id = &*event.event_id;
        if within.is_none() && greatest.is_none_or(|g| id > g) {
            greatest = Some(id);
            new.push((i, None));
            continue;
        }
        let within = within.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity(events.len());
            for (j, _) in &new {
                if let Some(earlier) = events.get(*j) {
                    map.insert(&*earlier.event_id, *j);
                }
            }
            map
        });
        if let Some(first) = within.get(id) {
            let body = |j: usize| events.get(j).and_then(|e| bodies.get(e.body.clone()));
            if !matches!((body(*first), body(i)), (Some(a), Some(b)) if same_body(a, b)) {
                return Err(Error::IdReused {
                    event_id: id.to_string(),
                    index: i,
                    position: None,
                });
            }
            new.push((i, Some(*first)));
        } else {
            within.insert(id, i);
            new.push((i, None));
        }
    }
    Ok(Sorted { answers, new })
}

/// Answers each event that repeats an earlier one of its request as a duplicate of it.
fn answer_repeats(new: &[(usize, Option<usize>)], answers: &mut [Option<Appended>]) {
    for (i, repeat) in new {
        if let Some(first) = repeat {
            let original = answers.get(*first).cloned().flatten();
            if let (Some(slot), Some(mut a)) = (answers.get_mut(*i), original) {
                a.duplicate = true;
                *slot = Some(a);
            }
        }
    }
}
