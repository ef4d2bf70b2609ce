//! [`Journal`]: opening (recovery, index check and catch-up), appending, reading, subscribing,
//! and closing.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use journal_format::head_record::HeadRecord;
use journal_format::{ChainHash, Envelope, Located, Position, SegmentId, StoredEvent};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::blobs::BlobStore;
use crate::error::{Error, Result};
use crate::evidence::{self, IndexVerdict};
use crate::index::indexer;
use crate::index::{By, Index, INDEX_FILE};
use crate::log::head_file::{self, HeadFile};
use crate::log::read::{self, EventIter};
use crate::log::recovery;
use crate::log::report::{RecoveryAction, RecoveryReport};
use crate::log::{follow, quarantine, segment};
use crate::log::{Head, Log};
use crate::options::{Durability, Options};
use crate::progress::IndexProgress;
use crate::seams::uuid_v7;
use crate::storage::StorageLock;
use crate::strings::Strings;
use crate::write::filler::Filler;
use crate::write::syncer::{Publisher, Syncer};
use crate::write::{self, Appended, Command, Poison, PreparedEvent, WriteRequest, Writer};

/// The lock file inside the journal directory.
const LOCK_FILE: &str = "LOCK";
/// How long a read that needs the index waits for it to reach the head.
const INDEX_WAIT: Duration = Duration::from_secs(30);
/// The body bytes reserved per event when a batch is encoded (events are about 500 bytes; a
/// larger one grows the buffer).
const PREPARED_BODY_BYTES: usize = 768;
/// The largest index backlog that open leaves to the index thread (the usual one after a
/// crash: what the indexer had not yet applied). A larger one (a missing or rebuilt index) is
/// indexed by open itself, so that readers are not left waiting on a long rebuild.
const DEFERRED_CATCH_UP_MAX: u64 = 20_000;

/// Options of one append.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendOptions {
    /// Refuse the append unless the stream's current version (its number of events) is this.
    /// All events of the batch must then belong to one stream.
    pub expected_stream_version: Option<u64>,
}

/// Which events a query returns. Every set field must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The first position (inclusive).
    pub from: Option<Position>,
    /// The last position (inclusive).
    pub to: Option<Position>,
    /// Events with this `sessionId`.
    pub session: Option<String>,
    /// Events with this `taskId`.
    pub task: Option<String>,
    /// Events with this `runId`.
    pub run: Option<String>,
    /// Events whose `type` starts with this.
    pub type_prefix: Option<String>,
    /// At most this many events.
    pub limit: Option<usize>,
}

impl Filter {
    /// Whether `event` matches every set field but `from` and `limit` (which say where a
    /// read starts and how much it returns): what a follower of the log keeps.
    #[must_use]
    pub fn matches(&self, event: &StoredEvent) -> bool {
        let e = &event.envelope;
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        eq(&self.session, &e.session_id)
            && eq(&self.task, &e.task_id)
            && eq(&self.run, &e.run_id)
            && self
                .type_prefix
                .as_ref()
                .is_none_or(|p| e.event_type.starts_with(p.as_str()))
            && self.to.is_none_or(|to| event.position <= to)
    }
}

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
}

/// An open journal. Cloning is cheap; the journal closes when the last clone is dropped (or
/// [`Journal::close`] is called).
#[derive(Clone, Debug)]
pub struct Journal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    options: Options,
    log: Arc<Log>,
    /// `None` when read-only.
    index: Option<Arc<Index>>,
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
    _lock: Option<Box<dyn StorageLock>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
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
    /// Opens (or creates) the journal in `dir`: takes its lock, runs recovery (see
    /// [`RecoveryReport`]), checks the index against the log and catches it up (rebuilding it
    /// when missing, damaged or ahead of the log), and starts the writer and indexer threads.
    ///
    /// # Errors
    /// [`Error::Locked`] when another process has it open, [`Error::Corruption`] naming the
    /// place when recovery finds damage outside a torn tail (and `options.salvage` is off),
    /// [`Error::InvalidInput`] for inconsistent options, or an I/O error.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Journal> {
        let dir = dir.as_ref().to_path_buf();
        options.validate()?;
        if options.read_only {
            return Journal::open_read_only(dir, options);
        }
        if !options.salvage {
            return Journal::open_once(dir, options, Vec::new());
        }
        // Salvage: a frame whose checksums and chain hold but whose stream version does not
        // follow its stream's (history rewritten with a consistent chain) stops the index's
        // rebuild; the log is cut there, as at any other damage, and opened again.
        match Journal::open_once(dir.clone(), options.clone(), Vec::new()) {
            Err(Error::Corruption {
                segment,
                offset,
                position,
                detail,
            }) => {
                let storage = Arc::clone(&options.storage);
                let action =
                    recovery::quarantine_from(&*storage, &dir, segment, offset, position, detail)?;
                Journal::open_once(dir, options, vec![action])
            }
            other => other,
        }
    }

    /// One attempt of [`Journal::open`]; `carried` are actions of an earlier attempt, reported
    /// first.
    fn open_once(dir: PathBuf, options: Options, carried: Vec<RecoveryAction>) -> Result<Journal> {
        let storage = Arc::clone(&options.storage);
        storage
            .create_dir_all(&dir)
            .map_err(Error::io_with(|| format!("creating {}", dir.display())))?;
        let lock = storage.lock(&dir.join(LOCK_FILE)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked(dir.clone())
            } else {
                Error::io_with(|| format!("locking {}", dir.display()))(e)
            }
        })?;
        // The head record is read before the log: it is the evidence the log is held against.
        let (record, unreadable_record) = read_head_record(&*storage, &dir, options.salvage)?;
        // The index is opened next: its head is evidence too (`evidence::committed`).
        let index_path = dir.join(INDEX_FILE);
        let existed = index_path.exists();
        let (index, recreated) = Index::open(&index_path)?;
        let index = Arc::new(index);
        let index_head = index.indexed()?;
        let committed = evidence::committed(record, index_head);
        let recovered = recovery::recover(&*storage, &dir, options.salvage, committed, false)?;
        let mut report = recovered.report;
        report.actions.splice(0..0, carried);
        report.actions.extend(unreadable_record);
        let segments = recovered.segments;
        let head = recovered.head;
        let log = Arc::new(Log::new(segments, head));

        if let Some(why) = recreated {
            report.actions.push(RecoveryAction::IndexRebuilt {
                reason: format!("the index file could not be used ({why})"),
            });
        } else if !existed && head.position > Position::ZERO {
            report.actions.push(RecoveryAction::IndexRebuilt {
                reason: "the index file was missing".into(),
            });
        }
        let verdict = evidence::check(&log, record, index_head, options.salvage, &mut report)?;
        if let IndexVerdict::Rebuild(reason) = verdict {
            index.clear()?;
            report.actions.push(RecoveryAction::IndexRebuilt { reason });
        }
        if options.salvage {
            quarantine::keep_salvage_report(&*storage, &dir, &report)?;
        }
        // Only once the log stands against its evidence is anything written.
        let tail = open_tail(&*storage, &dir, &log)?;
        let buffered = matches!(options.durability, Durability::Buffered { .. });
        let head_file = Arc::new(HeadFile::create(&*storage, &dir, head, buffered)?);
        let (indexed, _) = index.indexed()?;
        // A small backlog is indexed by the index thread once the journal is open (readers and
        // the writer wait for it, see `IndexProgress`); a large one here. Either way the
        // catch-up commits without a sync: the index is derived from the log, so if the process
        // dies before the indexer's next durable commit (it makes one as soon as it is idle),
        // the next open catches up again. Open waits on no device flush.
        let lagging = indexed < head.position;
        let mut backlog = None;
        if lagging {
            // Salvage indexes everything before it opens: damage the index finds is then
            // salvage's to deal with.
            if head.position.0 - indexed.0 <= DEFERRED_CATCH_UP_MAX && !options.salvage {
                backlog = Some((Arc::clone(&log), indexed.next(), head.position));
            } else {
                indexer::catch_up(&log, &index, indexed.next(), head.position)?;
            }
            report.actions.push(RecoveryAction::IndexCaughtUp {
                from: indexed.next().0,
                to: head.position.0,
            });
        }
        let index_complete_at = backlog.as_ref().map(|(_, _, to)| *to);

        let poison = Arc::new(Poison::default());
        let progress = Arc::new(IndexProgress::new(if backlog.is_some() {
            indexed
        } else {
            head.position
        }));
        let (index_tx, index_rx) = mpsc::channel();
        let indexer = {
            let (index, progress) = (Arc::clone(&index), Arc::clone(&progress));
            std::thread::Builder::new()
                .name("journal-indexer".into())
                .spawn(move || indexer::run(index, progress, index_rx, backlog, lagging))
                .map_err(Error::io("starting the indexer thread"))?
        };
        let (tx, rx) = mpsc::channel();
        let publisher = Arc::new(Publisher::new(
            Arc::clone(&log),
            Arc::clone(&poison),
            Arc::clone(&progress),
            index_tx,
        ));
        let writer = Writer {
            storage: Arc::clone(&storage),
            dir: dir.clone(),
            log: Arc::clone(&log),
            lookup: Arc::clone(&index) as Arc<dyn crate::write::lookup::Lookup>,
            poison: Arc::clone(&poison),
            clock: Arc::clone(&options.clock),
            limits: options.limits,
            durability: options.durability,
            syncer: match options.durability {
                Durability::Durable => Some(Syncer::start(Arc::clone(&publisher))?),
                Durability::Buffered { .. } => None,
            },
            publisher,
            head_file,
            head_recorded_ns: last_recorded_ns(&log, head)?,
            ahead: None,
            queued: Arc::default(),
            progress: Arc::clone(&progress),
            index_complete_at,
            tail,
            streams: Default::default(),
            recent: Default::default(),
            greatest_id: String::new(),
            view: None,
            last_recorded_ns: last_recorded_ns(&log, head)?,
            unsynced: false,
            spare: None,
            filler: options.preallocate.then(Filler::start),
            closed: false,
        };
        writer.fill_tail();
        let cell: write::Cell = Arc::new(write::WriterCell::new(writer));
        let writer = {
            let cell = Arc::clone(&cell);
            let progress = Arc::clone(&progress);
            let log = Arc::clone(&log);
            std::thread::Builder::new()
                .name("journal-writer".into())
                .spawn(move || write::run(&cell, &progress, &log, rx))
                .map_err(Error::io("starting the writer thread"))?
        };
        let blobs = BlobStore::new(Arc::clone(&storage), &dir);
        Ok(Journal {
            inner: Arc::new(Inner {
                dir,
                options,
                log,
                index: Some(index),
                poison,
                refresh: Mutex::new(()),
                progress,
                tx: Mutex::new(Some(tx)),
                cell: Some(cell),
                writer: Mutex::new(Some(writer)),
                indexer: Mutex::new(Some(indexer)),
                report,
                blobs,
                _lock: Some(lock),
            }),
        })
    }

    fn open_read_only(dir: PathBuf, options: Options) -> Result<Journal> {
        let storage = Arc::clone(&options.storage);
        let (record, _) = read_head_record(&*storage, &dir, false)?;
        let committed = evidence::committed(record, (Position::ZERO, ChainHash::GENESIS));
        let recovered = recovery::recover(&*storage, &dir, false, committed, true)?;
        let head = recovered.head;
        let log = Arc::new(Log::new(recovered.segments, head));
        let mut report = recovered.report;
        let no_index = (Position::ZERO, ChainHash::GENESIS);
        evidence::check(&log, record, no_index, false, &mut report)?;
        let blobs = BlobStore::new(Arc::clone(&storage), &dir);
        Ok(Journal {
            inner: Arc::new(Inner {
                dir,
                options,
                log,
                index: None,
                poison: Arc::new(Poison::default()),
                refresh: Mutex::new(()),
                progress: Arc::new(IndexProgress::new(head.position)),
                tx: Mutex::new(None),
                cell: None,
                writer: Mutex::new(None),
                indexer: Mutex::new(None),
                report,
                blobs,
                _lock: None,
            }),
        })
    }

    /// Whether this journal was opened read-only.
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.inner.index.is_none()
    }

    /// Read-only: picks up what the writing process appended since the last look (new frames
    /// of the tail segment, new segments) and returns the new head. A no-op for a journal open
    /// for writing, which always knows its head.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the newly written bytes are damaged, or an I/O error.
    pub fn refresh(&self) -> Result<Head> {
        if !self.is_read_only() {
            return Ok(self.head());
        }
        let _one_at_a_time = self.inner.refresh.lock().unwrap_or_else(|p| p.into_inner());
        follow::refresh(
            &*self.inner.options.storage,
            &self.inner.dir,
            &self.inner.log,
        )
    }

    /// The journal's directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Checks `events` as [`Journal::append_batch`] would (form, this journal's limits and
    /// conformance profile), without writing anything: lets a caller that appends in several
    /// batches refuse bad input before the first one.
    ///
    /// # Errors
    /// As [`crate::Limits::check_batch`].
    pub fn check_batch(&self, events: &[Envelope]) -> Result<()> {
        let options = &self.inner.options;
        options.limits.check_batch(events, options.conformance)
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

    /// Checks and encodes a batch for the writer: its events, their bodies back to back, and
    /// their stream keys, task and run ids back to back.
    ///
    /// A given batch (`Cow::Owned`) hands its event ids over to the prepared events; a lent one
    /// (`Cow::Borrowed`) is left as it was (the ids are copied), and is copied whole only when
    /// one of its events has no id yet, to be given one.
    fn prepare(
        &self,
        mut events: Cow<'_, [Envelope]>,
        options: &AppendOptions,
    ) -> Result<(Vec<PreparedEvent>, Vec<u8>, Strings)> {
        let limits = &self.inner.options.limits;
        if events.len() > limits.batch_events_max {
            return Err(Error::LimitExceeded {
                what: "batch length (events)",
                actual: events.len() as u64,
                limit: limits.batch_events_max as u64,
            });
        }
        let mut prepared = Vec::with_capacity(events.len());
        let mut bodies = Vec::with_capacity(events.len() * PREPARED_BODY_BYTES);
        let mut ids = Strings::default();
        for i in 0..events.len() {
            let index = Some(i);
            let missing = || Error::Internal(format!("no event {i} in the batch"));
            // An event without an id is given one here, in batch order, so that a batch refused
            // at an event has drawn no id for the events after it. A lent batch is copied first.
            let id_assigned = events.get(i).is_some_and(|e| e.event_id.is_empty());
            if id_assigned {
                let event = events.to_mut().get_mut(i).ok_or_else(missing)?;
                event.event_id = uuid_v7(&*self.inner.options.clock, &*self.inner.options.entropy);
            }
            let event = events.get(i).ok_or_else(missing)?;
            crate::options::check_fact(event, self.inner.options.conformance)
                .map_err(|source| Error::InvalidEvent { index, source })?;
            let start = bodies.len();
            event
                .write_msgpack(&mut bodies)
                .map_err(|source| Error::InvalidEvent { index, source })?;
            let (kind, id) = event.ids().stream_key_parts();
            let stream_key = ids.push_joined(&[kind, id]);
            let task = event.task_id.as_deref().map(|id| ids.push(id));
            let run = event.run_id.as_deref().map(|id| ids.push(id));
            // The event id the writer's idempotency maps share: taken from a given batch,
            // copied from a lent one. By reference either way: an envelope is a few
            // kilobytes, and moving each one out costs a copy.
            let event_id = match &mut events {
                Cow::Owned(given) => {
                    let event = given.get_mut(i).ok_or_else(missing)?;
                    Arc::from(std::mem::take(&mut event.event_id))
                }
                Cow::Borrowed(lent) => {
                    let event = lent.get(i).ok_or_else(missing)?;
                    Arc::from(event.event_id.as_str())
                }
            };
            prepared.push(PreparedEvent {
                body: start..bodies.len(),
                event_id,
                id_assigned,
                stream_key,
                task,
                run,
            });
        }
        let sizes: Vec<(&str, u64)> = prepared
            .iter()
            .map(|e| (&*e.event_id, e.body.len() as u64))
            .collect();
        limits.check_sizes(&sizes)?;
        if options.expected_stream_version.is_some() {
            if let Some(first) = prepared.first() {
                let first_key = ids.get(first.stream_key);
                if let Some(other) = prepared
                    .iter()
                    .map(|e| ids.get(e.stream_key))
                    .find(|key| *key != first_key)
                {
                    return Err(Error::InvalidInput(format!(
                        "an expected stream version needs every event of the batch in one stream; found {first_key} and {other}"
                    )));
                }
            }
        }
        Ok((prepared, bodies, ids))
    }

    /// Sends `cmd` to the writer thread, counted as queued until the thread has committed it
    /// (see `write::lead`).
    fn send(&self, cmd: Command) -> Result<()> {
        let tx = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
        let tx = tx.as_ref().ok_or(Error::Closed)?;
        if let Some(cell) = &self.inner.cell {
            cell.queue();
        }
        tx.send(cmd).map_err(|_| {
            if let Some(cell) = &self.inner.cell {
                cell.unqueue(1);
            }
            Error::Closed
        })
    }

    /// Prepares a batch and hands it to the writer thread; with `lead`, commits it on this
    /// thread instead when the writer is idle (see `write::lead`).
    fn submit(
        &self,
        events: Cow<'_, [Envelope]>,
        options: &AppendOptions,
        lead: bool,
    ) -> Result<Option<oneshot::Receiver<Result<Vec<Appended>>>>> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = self.inner.poison.cause() {
            return Err(Error::Poisoned(cause));
        }
        let (events, bodies, ids) = self.prepare(events, options)?;
        if events.is_empty() {
            return Ok(None);
        }
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            events,
            bodies,
            ids,
            expected_version: options.expected_stream_version,
            reply,
        };
        let request = match (&self.inner.cell, lead) {
            (Some(cell), true) => write::lead(cell, &self.inner.progress, &self.inner.log, request),
            _ => Some(request),
        };
        if let Some(request) = request {
            self.send(Command::Write(request))?;
        }
        Ok(Some(rx))
    }

    /// Appends one event; see [`Journal::append_batch`].
    ///
    /// # Errors
    /// As [`Journal::append_batch`].
    pub async fn append(&self, event: Envelope) -> Result<Appended> {
        let mut appended = self
            .append_batch(vec![event], AppendOptions::default())
            .await?;
        appended
            .pop()
            .ok_or_else(|| Error::Internal("no answer for the event".into()))
    }

    /// Appends a batch atomically: all of it becomes durable, or none of it. Events without an
    /// `eventId` get a UUID v7; events whose id is already stored with the same body are not
    /// stored again and are answered with their original position (`duplicate: true`); an id
    /// stored with another body refuses the batch. Returns once the batch is durable (or, in
    /// buffered mode, written).
    ///
    /// `events` is given (a `Vec<Envelope>` the journal takes) or lent (a `&[Envelope]` or
    /// `&Vec` it only reads): with a lent batch the caller keeps its envelopes, to retry after a
    /// conflict or to reuse them, and frees them when it likes, off the append's path (freeing
    /// an envelope with a JSON payload of nested maps costs about as much as encoding it). A
    /// lent batch with an event that has no id is copied, to give it one; that id is the
    /// journal's answer, not the caller's envelope's, so a batch to be retried after an unclear
    /// outcome (`Io`, `Poisoned`, `Closed`) should carry its ids
    /// ([`Journal::new_event_id`]): a retry is then answered as duplicates, never stored twice.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::EventTooLarge`] or [`Error::LimitExceeded`] for bad
    /// input, [`Error::IdReused`] for an event id stored (or earlier in the batch) with another
    /// body, [`Error::Conflict`] when the expected stream version differs, [`Error::Poisoned`]
    /// after an I/O failure, [`Error::Closed`]. On any error nothing of the batch is written.
    pub async fn append_batch<'e>(
        &self,
        events: impl Into<Cow<'e, [Envelope]>>,
        options: AppendOptions,
    ) -> Result<Vec<Appended>> {
        // Not led: a commit's `fdatasync` must not block the runtime's thread.
        match self.submit(events.into(), &options, false)? {
            None => Ok(Vec::new()),
            Some(rx) => rx.await.map_err(|_| Error::Closed)?,
        }
    }

    /// [`Journal::append_batch`] for callers outside an async runtime.
    ///
    /// # Errors
    /// As [`Journal::append_batch`].
    ///
    /// # Panics
    /// When called from inside an async runtime (use `append_batch` there).
    pub fn append_batch_blocking<'e>(
        &self,
        events: impl Into<Cow<'e, [Envelope]>>,
        options: AppendOptions,
    ) -> Result<Vec<Appended>> {
        match self.submit(events.into(), &options, true)? {
            None => Ok(Vec::new()),
            Some(rx) => rx.blocking_recv().map_err(|_| Error::Closed)?,
        }
    }

    /// Makes everything acknowledged so far durable (useful in buffered mode).
    ///
    /// # Errors
    /// The sync's I/O error (which poisons the writer), or [`Error::Closed`].
    pub async fn sync(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Sync(reply))?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Events `from..=to` (`to` defaults to the head), streamed in bounded memory, with
    /// checksums checked. With `verify_chain`, chain links are checked too, those of the next
    /// 1 MiB of frames in the range at a time, on as many threads as the machine has cores (up
    /// to 8), before the events are handed out in order.
    #[must_use]
    pub fn read(&self, from: Position, to: Option<Position>, verify_chain: bool) -> EventIter {
        let head = self.head().position;
        let to = to.map_or(head, |t| t.min(head));
        EventIter::new(Arc::clone(&self.inner.log), from, to, verify_chain)
    }

    /// Calls `f` with each record `from..=to` (`to` defaults to the head) in position order,
    /// before its body is decoded, until `f` breaks. Checksums are checked always, chain links
    /// with `verify_chain` (ahead, on several threads), exactly as [`Journal::read`] does; the
    /// body borrows the reader's buffer, so nothing is allocated per event.
    /// [`Record::decode`](crate::Record::decode) gives the event when it is wanted.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming where a frame is damaged or out of place, an I/O error, or
    /// the first error `f` returns.
    pub fn scan(
        &self,
        from: Position,
        to: Option<Position>,
        verify_chain: bool,
        f: impl FnMut(crate::Record<'_>) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        self.scan_where(from, to, verify_chain, |_| true, f)
    }

    /// As [`Journal::scan`], calling `f` only with the records whose position `select`
    /// accepts, for a reader that knows which events it wants before reading them (a rebuild
    /// that goes over the log once per partition). The other frames are stepped over: their
    /// headers are checked and must hold the positions expected, but unless `verify_chain` is
    /// set (the chain needs every body) their bodies' checksums are not, since nothing reads
    /// them.
    ///
    /// # Errors
    /// As [`Journal::scan`].
    pub fn scan_where(
        &self,
        from: Position,
        to: Option<Position>,
        verify_chain: bool,
        mut select: impl FnMut(Position) -> bool,
        mut f: impl FnMut(crate::Record<'_>) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        let head = self.head().position;
        let to = to.map_or(head, |t| t.min(head));
        if from.max(Position::FIRST) > to {
            return Ok(());
        }
        read::for_each_selected_frame(
            &self.inner.log,
            from,
            to,
            verify_chain,
            &mut select,
            &mut |raw| Ok(f(raw.record())?.is_continue()),
        )
    }

    /// A reader of single frames at locations noted from earlier reads ([`crate::Record::location`]):
    /// for a reader that comes back for some of the frames it scanned, as a build by partition
    /// does for each partition's, without stepping through the others again.
    #[must_use]
    pub fn frame_reader(&self) -> crate::FrameReader {
        crate::FrameReader::new(Arc::clone(&self.inner.log))
    }

    fn wait_for_index(&self) -> Result<()> {
        self.inner
            .progress
            .wait_for(self.head().position, INDEX_WAIT)
    }

    /// The event with this id.
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails, [`Error::Corruption`] when the frame is damaged.
    pub fn get(&self, event_id: &str) -> Result<Option<StoredEvent>> {
        let Some(index) = &self.inner.index else {
            return self
                .read(Position::FIRST, None, false)
                .find(|e| e.as_ref().map_or(true, |e| e.envelope.event_id == event_id))
                .transpose();
        };
        self.wait_for_index()?;
        match index.event(event_id)? {
            Some(at) => read::read_at(&self.inner.log, at).map(Some),
            None => Ok(None),
        }
    }

    /// The event at `position`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] past the head, [`Error::Corruption`] when the frame is damaged.
    pub fn get_position(&self, position: Position) -> Result<StoredEvent> {
        if position == Position::ZERO || position > self.head().position {
            return Err(Error::InvalidInput(format!(
                "position {position} is not in the log"
            )));
        }
        read::read_position(&self.inner.log, position)
    }

    /// The version of a stream (its number of events), by stream key (see
    /// [`Envelope::stream_key`]).
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails.
    pub fn stream_version(&self, stream_key: &str) -> Result<u64> {
        let Some(index) = &self.inner.index else {
            let mut version = 0;
            for e in self.read(Position::FIRST, None, false) {
                version += u64::from(e?.envelope.stream_key() == stream_key);
            }
            return Ok(version);
        };
        self.wait_for_index()?;
        index.stream_head(stream_key)
    }

    /// Events matching `filter`, in position order, streamed in bounded memory. Filters by
    /// session, task or run use the index; a type prefix alone scans the log.
    ///
    /// # Errors
    /// [`Error::Index`] when the index is needed and fails.
    pub fn query(&self, filter: Filter) -> Result<Query> {
        let by = [
            (By::Session, &filter.session),
            (By::Task, &filter.task),
            (By::Run, &filter.run),
        ]
        .into_iter()
        .find_map(|(by, id)| id.clone().map(|id| (by, id)));
        let head = self.head().position;
        let by = by.filter(|_| !self.is_read_only());
        let source = match by {
            Some((by, id)) => {
                self.wait_for_index()?;
                Source::Index {
                    by,
                    id,
                    next: filter.from.unwrap_or(Position::FIRST),
                    head,
                    page: std::collections::VecDeque::new(),
                }
            }
            None => {
                Source::Scan(self.read(filter.from.unwrap_or(Position::FIRST), filter.to, false))
            }
        };
        Ok(Query {
            journal: self.clone(),
            remaining: filter.limit.unwrap_or(usize::MAX),
            filter,
            source,
        })
    }

    /// Events of one stream from stream version `from_version`, by stream key.
    ///
    /// # Errors
    /// [`Error::Index`] when the index fails; reading errors per event.
    pub fn read_stream(&self, stream_key: &str, from_version: u64) -> Result<Vec<StoredEvent>> {
        let Some(index) = &self.inner.index else {
            let mut out = Vec::new();
            for e in self.read(Position::FIRST, None, false) {
                let e = e?;
                if e.envelope.stream_key() == stream_key && e.stream_version >= from_version {
                    out.push(e);
                }
            }
            return Ok(out);
        };
        self.wait_for_index()?;
        let mut out = Vec::new();
        let mut version = from_version.max(1);
        loop {
            let page = index.stream_positions(stream_key, version, 1024)?;
            if page.is_empty() {
                return Ok(out);
            }
            version += page.len() as u64;
            for at in page {
                out.push(read::read_at(&self.inner.log, at)?);
            }
        }
    }

    /// Follows the log from `from` (inclusive): first the history, then live appends, with no
    /// gap and no duplicate at the switch. Resume from a cursor by passing the position after
    /// the last event seen.
    #[must_use]
    pub fn subscribe(&self, from: Position) -> crate::subscribe::Subscription {
        crate::subscribe::Subscription::new(
            Arc::new(self.clone()),
            self.inner.log.watch_head(),
            from.max(Position::FIRST),
        )
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
        Ok(Status {
            head_position: head.position.0,
            head_hash: head.hash.to_hex(),
            segments: segments.len(),
            log_bytes,
            index_position: indexed.0,
            index_lag: head.position.0.saturating_sub(indexed.0),
            poisoned: self.inner.poison.cause(),
            read_only: self.is_read_only(),
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

    pub(crate) fn index(&self) -> Option<&Arc<Index>> {
        self.inner.index.as_ref()
    }

    pub(crate) fn wait_indexed(&self) -> Result<()> {
        self.wait_for_index()
    }
}

/// Where a [`Query`] gets its positions.
#[derive(Debug)]
enum Source {
    Scan(EventIter),
    Index {
        by: By,
        id: String,
        next: Position,
        head: Position,
        page: std::collections::VecDeque<Located>,
    },
}

/// The events of a [`Filter`], in position order.
#[derive(Debug)]
pub struct Query {
    journal: Journal,
    filter: Filter,
    source: Source,
    remaining: usize,
}

impl Query {
    fn next_candidate(&mut self) -> Option<Result<StoredEvent>> {
        match &mut self.source {
            Source::Scan(iter) => iter.next(),
            Source::Index {
                by,
                id,
                next,
                head,
                page,
            } => {
                if page.is_empty() {
                    if *next > *head {
                        return None;
                    }
                    let Some(index) = &self.journal.inner.index else {
                        return Some(Err(Error::ReadOnly));
                    };
                    match index.positions_by(*by, id, *next, 512) {
                        Ok(found) => {
                            page.extend(found.into_iter().filter(|at| at.position <= *head))
                        }
                        Err(e) => return Some(Err(e)),
                    }
                }
                let at = page.pop_front()?;
                *next = at.position.next();
                Some(read::read_at(&self.journal.inner.log, at))
            }
        }
    }
}

impl Iterator for Query {
    type Item = Result<StoredEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.remaining > 0 {
            match self.next_candidate()? {
                Ok(event) if self.filter.matches(&event) => {
                    self.remaining -= 1;
                    return Some(Ok(event));
                }
                Ok(event) => {
                    if self.filter.to.is_some_and(|to| event.position > to) {
                        return None;
                    }
                }
                Err(e) => {
                    self.remaining = 0;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// The log's tail segment: its last segment when that is unsealed, else a new one created after
/// it and added to the log.
fn open_tail(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    log: &Log,
) -> Result<Arc<crate::log::Segment>> {
    let segments = log.segments();
    if let Some(last) = segments.last().filter(|s| !s.snapshot().sealed) {
        return Ok(Arc::clone(last));
    }
    let head = log.head();
    let id = SegmentId(segments.last().map_or(1, |s| s.id.0 + 1));
    let tail = Arc::new(segment::create(
        storage,
        dir,
        id,
        head.position.next(),
        head.hash,
    )?);
    log.push(Arc::clone(&tail));
    Ok(tail)
}

/// The head record in `dir`, if any. A damaged one refuses the open, unless `salvage`: then it
/// is set aside as no evidence, with the action that says so.
fn read_head_record(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    salvage: bool,
) -> Result<(Option<HeadRecord>, Option<RecoveryAction>)> {
    match head_file::read(storage, dir) {
        Ok(record) => Ok((record, None)),
        Err(Error::HistoryMismatch {
            evidence,
            position,
            detail,
        }) if salvage => Ok((
            None,
            Some(RecoveryAction::HistoryAccepted {
                evidence,
                position: position.0,
                detail,
            }),
        )),
        Err(e) => Err(e),
    }
}

/// The `recordedAt` of the head event, so `recordedAt` never goes backwards across a reopen.
fn last_recorded_ns(log: &Log, head: Head) -> Result<i64> {
    if head.position == Position::ZERO {
        return Ok(i64::MIN);
    }
    let mut ns = i64::MIN;
    read::for_each_frame(log, head.position, head.position, false, &mut |raw| {
        ns = raw.header.meta.recorded_at_ns;
        Ok(false)
    })?;
    Ok(ns)
}

impl crate::subscribe::Source for Journal {
    fn read_chunk(&self, from: Position, to: Position) -> Result<Vec<StoredEvent>> {
        self.read(from, Some(to), true).collect()
    }

    fn is_read_only(&self) -> bool {
        Journal::is_read_only(self)
    }

    fn refresh(&self) -> Result<Head> {
        Journal::refresh(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(producer: u64, i: u64) -> Envelope {
        let mut e = Envelope::new(
            "turn.submitted",
            format!("evt-{producer}-{i:04}"),
            "2026-05-11T10:00:00Z",
        );
        e.session_id = Some(format!("s{producer}"));
        e
    }

    /// Every command sent to the writer thread is uncounted once committed: a count left
    /// behind would send every later append through the writer thread's queue (`write::lead`).
    #[test]
    fn queued_commands_are_uncounted_once_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Journal::open(dir.path(), Options::default()).expect("open");
        std::thread::scope(|scope| {
            for producer in 0..8 {
                let journal = &journal;
                scope.spawn(move || {
                    for i in 0..40 {
                        journal
                            .append_batch_blocking(
                                vec![event(producer, i)],
                                AppendOptions::default(),
                            )
                            .expect("append");
                    }
                });
            }
        });
        // A sync goes through the queue whatever the timing.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(journal.sync()).expect("sync");
        assert_eq!(journal.head().position, Position(320));
        // The writer thread uncounts a group just after answering it.
        let cell = journal.inner.cell.as_ref().expect("a writable journal");
        for _ in 0..5_000 {
            if cell.queued() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(cell.queued(), 0, "nothing left counted as queued");
    }
}
