//! The projection worker: runs a [`Projection`] over the log and keeps its states and
//! checkpoint in the [`Store`], batch by batch, each batch one transaction.
//!
//! It resumes from the checkpoint after a crash, rebuilds from the start into a new generation
//! when the projection's version changed (the old generation keeps serving, marked
//! `rebuilding`), and stops at an event it cannot apply, recording it as the fault.
//!
//! **Invariant:** a generation's states and its position are only ever written together, and
//! the position names the last event whose effect every state includes.

use std::sync::{Arc, Mutex};

// foldhash, not std's SipHash: the maps below are looked up several times for every event a
// rebuild applies, with short string keys, where SipHash alone was 3% of a rebuild. Its seed is
// random per process, as std's is.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use journal_engine::Chain;
use journal_engine::Journal;
use journal_format::{ChainHash, Position, StoredEvent};

use crate::projection::{Event, Fault, Projection};
use crate::store::{Batch, Durability, Generation, Meta, Store};
pub use crate::worker_error::WorkerError;

/// Events applied per transaction by default. A commit rewrites every state the batch
/// changed, so fewer, larger batches cost less when catching up over many events; a worker
/// that has caught up commits after every append anyway.
pub const BATCH_EVENTS: u64 = 65_536;

/// How many bytes of state a long catch-up may rewrite per event it applies, amortized. A
/// commit rewrites every state its batch touched, whole; when every batch touches every key
/// (sessions interleaved through the log), fixed batches would make a rebuild's writing grow
/// with the square of the log. So a batch is at least as long as the last commit's bytes
/// divided by this: batches grow with the states, and the total written stays a small multiple
/// of the final states' size.
const WRITE_BYTES_PER_EVENT: u64 = 64;

/// Decoded states kept between batches; beyond this many keys, or when the states a batch
/// wrote exceed [`CACHE_BYTES_MAX`], the cache is dropped after the commit, so memory stays
/// bounded however many keys the log holds.
const CACHE_KEYS_MAX: usize = 8192;

/// See [`CACHE_KEYS_MAX`]: the encoded bytes of the states one batch wrote.
const CACHE_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Where a catch-up ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reached {
    /// Every event up to this position is applied (and, when a rebuild finished, serving).
    Position(u64),
    /// The projection is faulted at this event.
    Faulted(Fault),
}

/// Runs one projection.
#[derive(Debug)]
pub struct Worker<P: Projection> {
    projection: Arc<P>,
    store: Arc<Store>,
    /// Decoded states of the generation being written, by key.
    cache: HashMap<String, P::State>,
    /// The generation the cache is valid for: its version and the position every cached state
    /// reflects; `None` while the cache holds changes not yet committed. The cache is dropped
    /// whenever the stored checkpoint says otherwise (a reset, a rebuild, a fault, a failure
    /// mid-batch), so it never serves a state the store does not hold.
    cached: Option<(u32, u64)>,
    /// Events per transaction (the least, when `grow_batches`).
    batch_events: u64,
    /// Whether batches grow with the bytes the last commit wrote ([`WRITE_BYTES_PER_EVENT`]);
    /// off when a caller fixed the batch size.
    grow_batches: bool,
    /// The bytes of state the last commit wrote.
    last_written: u64,
    /// A build split by stream, while one runs.
    partitioned: Option<PartitionedBuild>,
}

/// Decodes a stored state.
///
/// # Errors
/// A message when the bytes are not a state of this projection.
pub fn decode<S: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<S, String> {
    rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
}

/// Encodes `state` into `bytes` (appending), as `rmp_serde::to_vec_named` would.
fn encode<S: serde::Serialize>(state: &S, bytes: &mut Vec<u8>) -> Result<(), String> {
    rmp_serde::encode::write_named(bytes, state).map_err(|e| e.to_string())
}

/// The [`crate::store::Encode`] of the states in `cache`: a key not cached has none to write.
fn encode_cached<S: serde::Serialize>(
    cache: &HashMap<String, S>,
) -> impl FnMut(&str, &mut Vec<u8>) -> Result<bool, String> + '_ {
    move |key, bytes| match cache.get(key) {
        Some(state) => encode(state, bytes).map(|()| true),
        None => Ok(false),
    }
}

impl<P: Projection> Worker<P> {
    /// A worker for `projection` over `store`.
    pub fn new(projection: Arc<P>, store: Arc<Store>) -> Worker<P> {
        Worker {
            projection,
            store,
            cache: HashMap::new(),
            cached: None,
            batch_events: BATCH_EVENTS,
            grow_batches: true,
            last_written: 0,
            partitioned: None,
        }
    }

    /// Commits every `n` events (at least 1), exactly, instead of at least every
    /// [`BATCH_EVENTS`] and more when the states are large.
    #[must_use]
    pub fn with_batch_events(mut self, n: u64) -> Worker<P> {
        self.batch_events = n.max(1);
        self.grow_batches = false;
        self
    }

    /// Commits at least every `n` events (at least 1), and more rarely as the states grow
    /// (a batch is at least as long as the last commit's bytes ÷ 64); the default is `n` =
    /// [`BATCH_EVENTS`].
    #[must_use]
    pub fn with_growing_batches(mut self, n: u64) -> Worker<P> {
        self.batch_events = n.max(1);
        self.grow_batches = true;
        self
    }

    /// The generation to write next, per the checkpoint: the serving one when it has the
    /// current version, else a rebuild (started now, or resumed).
    fn target(&self, meta: &mut Meta, head: u64) -> Generation {
        let version = self.projection.version();
        match (meta.serving, meta.building) {
            (_, Some((g, _))) if g.version == version => g,
            (Some(g), None) if g.version == version => g,
            (None, _) => {
                // A first build: there is nothing older to serve, so the generation serves as
                // it is built (stale, with its true lag, until it reaches the head); a build
                // by partition (any first build from `ReadModels::catch_up`, unless it fails
                // or `without_partitions` is set) serves only once it is done
                // (`crate::partition`).
                let g = Generation {
                    version,
                    position: 0,
                    hash: None,
                };
                meta.serving = Some(g);
                meta.building = None;
                meta.fault = None;
                g
            }
            _ => {
                // A new version: rebuild from the start beside the serving generation. A fault
                // of an earlier version belongs to the fold that raised it.
                let g = Generation {
                    version,
                    position: 0,
                    hash: None,
                };
                meta.building = Some((g, head));
                meta.fault = None;
                g
            }
        }
    }

    /// Applies every event up to the journal's head (as of the call), in batches; calls
    /// `progress(position, head)` after each batch. The last batch reaches the disk before it
    /// returns.
    ///
    /// # Errors
    /// [`WorkerError`] when the journal or the store fails; the checkpoint then names the last
    /// batch committed.
    pub fn catch_up(
        &mut self,
        journal: &Journal,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Reached, WorkerError> {
        self.catch_up_with(journal, progress, Durability::Immediate)
    }

    /// [`Worker::catch_up`], without waiting for the disk: every batch is visible to readers
    /// once committed, and durable once a later commit is ([`Store::sync`]); a crash before
    /// then rolls the projection back to its last durable checkpoint (states and checkpoint
    /// together), from which the next catch-up applies the events again. For a worker that
    /// follows the log live and commits often.
    ///
    /// # Errors
    /// As [`Worker::catch_up`].
    pub fn catch_up_deferred(
        &mut self,
        journal: &Journal,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Reached, WorkerError> {
        self.catch_up_with(journal, progress, Durability::Deferred)
    }

    /// [`Worker::catch_up`], its last batch committed with `durability_last`.
    fn catch_up_with(
        &mut self,
        journal: &Journal,
        progress: &mut dyn FnMut(u64, u64),
        durability_last: Durability,
    ) -> Result<Reached, WorkerError> {
        let head = journal.head().position.0;
        let (stored, mut meta, mut generation) = match self.prepare(journal, head)? {
            Prepared::Faulted(fault) => return Ok(Reached::Faulted(fault)),
            Prepared::Ready {
                stored,
                meta,
                generation,
            } => (*stored, *meta, generation),
        };
        loop {
            if generation.position >= head {
                // Nothing to read; a build that has caught up (a rebuild of an empty log, or a
                // first build) commits its checkpoint and serves.
                if meta.building.is_some() || meta != stored {
                    let batch = Batch::default();
                    self.commit(&mut meta, generation, &batch, Durability::Immediate)?;
                }
                progress(generation.position, head);
                return Ok(Reached::Position(generation.position));
            }
            let from = generation.position + 1;
            let to = generation
                .position
                .saturating_add(self.batch_len())
                .min(head);
            // Applying changes the cached states beyond the checkpoint: they are valid again
            // only once committed (`commit` says so), never after an error on the way.
            self.cached = None;
            match self.apply_range(journal, generation.version, from, to)? {
                Applied::All(batch, last) => {
                    generation.position = to;
                    generation.hash = last;
                    // The last batch reaches the disk before the catch-up returns (unless
                    // deferred).
                    let durability = if to >= head {
                        durability_last
                    } else {
                        Durability::Deferred
                    };
                    self.commit(&mut meta, generation, &batch, durability)?;
                    progress(to, head);
                    if to >= head {
                        return Ok(Reached::Position(to));
                    }
                }
                Applied::FaultAt(fault) => {
                    let fault = self.stop_at_fault(journal, &mut meta, generation, from, fault)?;
                    progress(fault.position - 1, head);
                    return Ok(Reached::Faulted(fault));
                }
            }
        }
    }

    /// How many events the next batch takes: the batch size, or with growing batches at least
    /// the last commit's bytes ÷ [`WRITE_BYTES_PER_EVENT`].
    fn batch_len(&self) -> u64 {
        if self.grow_batches {
            self.batch_events
                .max(self.last_written / WRITE_BYTES_PER_EVENT)
        } else {
            self.batch_events
        }
    }

    /// Stops at `fault`, met in the batch that began at `from`: the failing event may have left
    /// its state half-changed, so the batch is forgotten and applied again up to the event
    /// before, and committed with the fault in the checkpoint.
    ///
    /// # Errors
    /// [`WorkerError`] when the journal or the store fails, or the fold fails earlier on the
    /// second application (it is not deterministic).
    fn stop_at_fault(
        &mut self,
        journal: &Journal,
        meta: &mut Meta,
        mut generation: Generation,
        from: u64,
        fault: Fault,
    ) -> Result<Fault, WorkerError> {
        let name = self.projection.name();
        self.cache.clear();
        let batch = if fault.position > from {
            match self.apply_range(journal, generation.version, from, fault.position - 1)? {
                Applied::All(batch, last) => {
                    generation.hash = last;
                    batch
                }
                Applied::FaultAt(again) => {
                    return Err(WorkerError::Codec {
                        projection: name,
                        key: again.event_id,
                        message: format!(
                            "the fold is not deterministic: {} failed only on a second pass",
                            again.position
                        ),
                    })
                }
            }
        } else {
            Batch::default()
        };
        generation.position = fault.position - 1;
        meta.fault = Some(fault.clone());
        self.commit(meta, generation, &batch, Durability::Immediate)?;
        self.cache.clear();
        tracing::warn!(
            projection = name,
            position = fault.position,
            event_id = %fault.event_id,
            error = %fault.error,
            "projection faulted"
        );
        Ok(fault)
    }

    /// Reads the checkpoint and settles what to write next: starts over when the log no longer
    /// holds what the projection applied, starts a rebuild on a version change, stops at a
    /// fault of the current fold. A generation at position 0 is emptied, in the store and in
    /// the cache, of anything an interrupted build left, so that a build always starts from
    /// default states.
    fn prepare(&mut self, journal: &Journal, head: u64) -> Result<Prepared, WorkerError> {
        let name = self.projection.name();
        let mut stored = self.store.meta(name)?;
        if self.diverged(&stored, journal, head)? {
            // What the projection applied is not the log's history any more: start over.
            tracing::warn!(
                projection = name,
                head,
                "the read model reflects events the log no longer holds; rebuilding it"
            );
            self.store.reset(name)?;
            self.cache.clear();
            self.cached = None;
            stored = Meta::default();
        }
        let mut meta = stored.clone();
        // A version change starts a rebuild and clears the fault of the old fold; a fault of
        // the current fold stops the worker where it is.
        let generation = self.target(&mut meta, head);
        if let Some(fault) = &meta.fault {
            return Ok(Prepared::Faulted(fault.clone()));
        }
        if generation.position == 0 && head > 0 {
            self.store
                .clear_generation(name, generation.version, None)?;
            self.cached = None;
        }
        if self.cached != Some((generation.version, generation.position)) {
            self.cache.clear();
            self.cached = Some((generation.version, generation.position));
        }
        Ok(Prepared::Ready {
            stored: Box::new(stored),
            meta: Box::new(meta),
            generation,
        })
    }

    /// Whether a stored generation names an event the log does not hold (beyond the head, or
    /// with another chain link).
    fn diverged(&self, meta: &Meta, journal: &Journal, head: u64) -> Result<bool, WorkerError> {
        for g in meta
            .serving
            .iter()
            .chain(meta.building.iter().map(|(g, _)| g))
        {
            if g.position == 0 {
                continue;
            }
            if g.position > head {
                return Ok(true);
            }
            let event = journal
                .get_position(Position(g.position))
                .map_err(|source| WorkerError::Journal {
                    projection: self.projection.name(),
                    source,
                })?;
            if g.hash.is_some_and(|h| h != event.hash) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn commit(
        &mut self,
        meta: &mut Meta,
        generation: Generation,
        batch: &Batch,
        durability: Durability,
    ) -> Result<(), WorkerError> {
        match &mut meta.building {
            Some((g, target)) => {
                *g = generation;
                if generation.position >= *target {
                    meta.serving = Some(generation);
                    meta.building = None;
                }
            }
            None => meta.serving = Some(generation),
        }
        let written = self.store.commit(
            self.projection.name(),
            generation.version,
            batch,
            &mut encode_cached(&self.cache),
            meta,
            durability,
        )?;
        self.last_written = written;
        if self.cache.len() > CACHE_KEYS_MAX || written > CACHE_BYTES_MAX {
            self.cache.clear();
        }
        self.cached = Some((generation.version, generation.position));
        Ok(())
    }

    /// Applies events `from..=to` to the cached states; the batch of changed states.
    fn apply_range(
        &mut self,
        journal: &Journal,
        version: u32,
        from: u64,
        to: u64,
    ) -> Result<Applied, WorkerError> {
        let name = self.projection.name();
        let mut dirty: HashSet<String> = HashSet::new();
        let mut aliases = Aliases::default();
        let mut last = None;
        for event in journal.read(Position(from), Some(Position(to)), Chain::Unverified) {
            let event: StoredEvent = event.map_err(|source| WorkerError::Journal {
                projection: name,
                source,
            })?;
            last = Some(event.hash);
            let Some(key) = self.projection.key(&event) else {
                continue;
            };
            for (kind, id) in self.projection.aliases(&event) {
                aliases.note(kind, id, event.position.0, &key);
            }
            if !self.cache.contains_key(&key) {
                let state = match self.store.get(name, version, &key)? {
                    Some(bytes) => decode(&bytes).map_err(|message| WorkerError::Codec {
                        projection: name,
                        key: key.clone(),
                        message,
                    })?,
                    None => P::State::default(),
                };
                self.cache.insert(key.clone(), state);
            }
            let Some(state) = self.cache.get_mut(&key) else {
                continue;
            };
            if let Err(error) = self.projection.apply(state, &Event::new(&event)) {
                return Ok(Applied::FaultAt(Fault {
                    position: event.position.0,
                    event_id: event.envelope.event_id.clone(),
                    error,
                }));
            }
            dirty.insert(key);
        }
        let mut keys: Vec<String> = dirty.into_iter().collect();
        keys.sort_unstable();
        let aliases = aliases.drain_sorted();
        Ok(Applied::All(Batch { keys, aliases }, last))
    }
}

/// A build from the start of a generation, split by stream ([`crate::partition`]): the
/// checkpoint it will write and the aliases of the partition being applied.
#[derive(Debug)]
struct PartitionedBuild {
    /// The checkpoint the build started from, written back if it is abandoned, so that the
    /// ordinary catch-up takes over as if the build had never run.
    before: Meta,
    /// The checkpoint the build writes with each partition (position 0, not serving).
    meta: Meta,
    generation: Generation,
    /// The aliases of the partition being applied. Passes go back to the start of the log, so
    /// the store keeps the alias of the newest event across partitions by position
    /// ([`Store::commit_partition`]).
    aliases: Aliases,
}

/// The aliases gathered while applying events: for each kind and id, the key of the newest
/// event that gave it, and that event's position. The newest wins, as it would if each event's
/// aliases were written in order.
#[derive(Debug, Default)]
struct Aliases(HashMap<&'static str, HashMap<String, (u64, String)>>);

impl Aliases {
    /// Notes that the event at `position`, of stream `key`, names `id` of `kind`. Allocates only
    /// for an alias not seen before or one that moves to another key.
    fn note(&mut self, kind: &'static str, id: &str, position: u64, key: &str) {
        let ids = self.0.entry(kind).or_default();
        match ids.get_mut(id) {
            Some((at, of)) => {
                if *at < position {
                    *at = position;
                    if of != key {
                        key.clone_into(of);
                    }
                }
            }
            None => {
                ids.insert(id.to_owned(), (position, key.to_owned()));
            }
        }
    }

    /// Every alias as (kind, id, key, position), sorted, leaving the map empty.
    fn drain_sorted(&mut self) -> Vec<(&'static str, String, String, u64)> {
        let mut out: Vec<_> = self
            .0
            .drain()
            .flat_map(|(kind, ids)| {
                ids.into_iter()
                    .map(move |(id, (position, key))| (kind, id, key, position))
            })
            .collect();
        out.sort_unstable();
        out
    }
}

impl<P: Projection> crate::partition::Build for Worker<P> {
    fn name(&self) -> &'static str {
        self.projection.name()
    }

    fn begin(&mut self, journal: &Journal, head: u64) -> Result<bool, WorkerError> {
        self.partitioned = None;
        if !self.projection.keyed_by_stream() {
            return Ok(false);
        }
        let (mut meta, generation) = match self.prepare(journal, head)? {
            Prepared::Ready {
                meta, generation, ..
            } if generation.position == 0 && head > 0 => (*meta, generation),
            _ => return Ok(false),
        };
        // The cache now fills with the build's states, which are valid only once it finishes.
        self.cache.clear();
        self.cached = None;
        let before = meta.clone();
        // Until the last partition is in, the generation's states reflect different positions
        // per stream: it must not serve. A first build is shown as a rebuild with progress.
        if meta.serving == Some(generation) {
            meta.serving = None;
            meta.building = Some((generation, head));
        }
        self.partitioned = Some(PartitionedBuild {
            before,
            meta,
            generation,
            aliases: Aliases::default(),
        });
        Ok(true)
    }

    fn apply(&mut self, event: &Event<'_>, stream_key: &str) -> Result<Option<Fault>, WorkerError> {
        let name = self.projection.name();
        let Some(build) = &mut self.partitioned else {
            return Err(WorkerError::Codec {
                projection: name,
                key: stream_key.to_string(),
                message: "a partitioned build applied an event before it began".into(),
            });
        };
        if !self.projection.has_key(event, stream_key) {
            let Some(key) = self.projection.key(event) else {
                return Ok(None);
            };
            return Err(WorkerError::Codec {
                projection: name,
                key,
                message: format!(
                    "the projection says it is keyed by stream, but keys event {} of stream {stream_key} otherwise",
                    event.position.0
                ),
            });
        }
        let position = event.position.0;
        for (kind, id) in self.projection.aliases(event) {
            build.aliases.note(kind, id, position, stream_key);
        }
        // Every key of a partition is first touched in its pass, and the generation held
        // nothing when the build began: a state missing from the cache is new. The key is
        // copied only then.
        if !self.cache.contains_key(stream_key) {
            self.cache
                .insert(stream_key.to_owned(), P::State::default());
        }
        let state = self
            .cache
            .get_mut(stream_key)
            .ok_or_else(|| WorkerError::Codec {
                projection: name,
                key: stream_key.to_owned(),
                message: "the state just cached is missing".into(),
            })?;
        Ok(self
            .projection
            .apply(state, event)
            .err()
            .map(|error| Fault {
                position,
                event_id: event.envelope.event_id.clone(),
                error,
            }))
    }

    fn flush(&mut self) -> Result<(), WorkerError> {
        let Some(build) = &mut self.partitioned else {
            return Ok(());
        };
        let mut keys: Vec<String> = self.cache.keys().cloned().collect();
        keys.sort_unstable();
        let aliases = build.aliases.drain_sorted();
        // Each state leaves the cache as it is encoded, and is freed then, while the encoding
        // has its memory in the processor's cache: freed all together after the commit, the
        // partition's states (tens of MB) would be read back from memory for their frees
        // alone. Whatever the commit's outcome, the
        // partition's states are not kept: a build that fails is started again.
        let cache = &mut self.cache;
        let mut encode_and_free = |key: &str, bytes: &mut Vec<u8>| match cache.remove(key) {
            Some(state) => encode(&state, bytes).map(|()| true),
            None => Ok(false),
        };
        let committed = self.store.commit_partition(
            self.projection.name(),
            build.generation.version,
            &keys,
            &mut encode_and_free,
            &aliases,
            &build.meta,
        );
        self.cache.clear();
        committed?;
        Ok(())
    }

    fn finish(&mut self, position: u64, hash: Option<ChainHash>) -> Result<(), WorkerError> {
        let Some(build) = self.partitioned.take() else {
            return Ok(());
        };
        let PartitionedBuild {
            mut meta,
            mut generation,
            ..
        } = build;
        generation.position = position;
        generation.hash = hash;
        self.cache.clear();
        self.last_written = 0;
        self.commit(
            &mut meta,
            generation,
            &Batch::default(),
            Durability::Immediate,
        )
    }

    fn abandon(&mut self) -> Result<(), WorkerError> {
        self.cache.clear();
        self.cached = None;
        if let Some(build) = self.partitioned.take() {
            self.store.clear_generation(
                self.projection.name(),
                build.generation.version,
                Some(&build.before),
            )?;
        }
        Ok(())
    }
}

/// What [`Worker::prepare`] settled.
enum Prepared {
    /// The current fold is faulted: nothing to apply.
    Faulted(Fault),
    /// Apply from `generation`; `stored` is the checkpoint as read, `meta` as it will be written.
    Ready {
        stored: Box<Meta>,
        meta: Box<Meta>,
        generation: Generation,
    },
}

enum Applied {
    /// Every event applied: the changed states, and the chain link of the last event read.
    All(Batch, Option<ChainHash>),
    FaultAt(Fault),
}

/// A worker shared between the live task and callers that want it caught up now.
pub type Shared<P> = Arc<Mutex<Worker<P>>>;
