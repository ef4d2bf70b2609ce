//! The journal's projections and the host that runs them: [`StateProjection`] (the rules'
//! fold, [`StreamState`], per stream) and [`ActivityProjection`] (the family summaries,
//! [`Activity`], per stream). [`ReadModels`] opens the store beside the journal, catches the
//! workers up (or runs them live on tokio), and answers with freshness.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use journal_engine::Journal;
use journal_format::{Position, StoredEvent};
use serde::{Deserialize, Serialize};

use crate::activity::Activity;
use crate::partition::{self, PARTITION_EVENTS};
use crate::projection::{Event, Freshness, FreshnessState, Progress, Projection};
use crate::state::StreamState;
use crate::store::{Durability, Meta, Store, StoreError};
use crate::views;
use crate::worker::{decode, Reached, Worker, WorkerError};

/// The key of an event's stream, as commands use it; `None` for an event with no session,
/// task or runtime.
fn stream_of(event: &StoredEvent) -> Option<String> {
    let key = event.envelope.stream_key();
    (key != "none:").then_some(key)
}

/// Whether [`stream_of`] the event is `key`, without building it.
fn is_stream(event: &StoredEvent, key: &str) -> bool {
    let (kind, id) = event.envelope.ids().stream_key_parts();
    kind != "none:" && key.strip_prefix(kind) == Some(id)
}

/// Where a build puts its scratch files: beside the store (the working directory for a store
/// named without a directory).
fn scratch_dir(store: &Path) -> &Path {
    store
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn aliases_of(event: &StoredEvent) -> impl Iterator<Item = (&'static str, &str)> {
    let e = &event.envelope;
    [
        ("task", e.task_id.as_deref()),
        ("run", e.run_id.as_deref()),
        ("thread", e.thread_id.as_deref()),
    ]
    .into_iter()
    .filter_map(|(kind, id)| Some((kind, id?)))
}

/// The rules' fold of each stream: tasks, actions, turns, checklist, schedules, incidents.
#[derive(Debug, Default)]
pub struct StateProjection;

impl Projection for StateProjection {
    type State = StreamState;

    fn name(&self) -> &'static str {
        "state"
    }

    fn version(&self) -> u32 {
        1
    }

    fn key(&self, event: &StoredEvent) -> Option<String> {
        stream_of(event)
    }

    fn has_key(&self, event: &StoredEvent, key: &str) -> bool {
        is_stream(event, key)
    }

    fn keyed_by_stream(&self) -> bool {
        true
    }

    fn aliases<'e>(
        &self,
        event: &'e StoredEvent,
    ) -> impl Iterator<Item = (&'static str, &'e str)> + 'e {
        aliases_of(event)
    }

    fn apply(&self, state: &mut StreamState, event: &Event<'_>) -> Result<(), String> {
        // The journal numbers each stream's events 1, 2, 3, ...: anything else means an event
        // applied twice or one missed, and the state would be wrong.
        if event.stream_version != state.version + 1 {
            return Err(format!(
                "stream version {} follows {} in {}: an event was skipped or applied twice",
                event.stream_version,
                state.version,
                event.envelope.stream_key()
            ));
        }
        state.apply(event);
        Ok(())
    }
}

/// The family summaries of each stream.
#[derive(Debug, Default)]
pub struct ActivityProjection;

impl Projection for ActivityProjection {
    type State = Activity;

    fn name(&self) -> &'static str {
        "activity"
    }

    fn version(&self) -> u32 {
        // 2: no aliases (readers find a stream by a task, run or thread id through the
        // rules' projection's aliases only; this one's were written and never read).
        // 3: the tool result's, subagent's, compaction's and evidence's payloads read for the
        // fields the fold uses alone (`activity.rs`, `read`): one whose other fields break its
        // shape no longer reads as absent.
        // 4: each model call's cost (`cost.byCall`) and the time its end was recorded
        // (`endedTimestamp`); a record that supersedes another replaces its figures.
        4
    }

    fn key(&self, event: &StoredEvent) -> Option<String> {
        stream_of(event)
    }

    fn has_key(&self, event: &StoredEvent, key: &str) -> bool {
        is_stream(event, key)
    }

    fn keyed_by_stream(&self) -> bool {
        true
    }

    fn apply(&self, state: &mut Activity, event: &Event<'_>) -> Result<(), String> {
        state.apply(event);
        Ok(())
    }
}

/// A read model answer: the model (absent when nothing is known of the id) and its freshness.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Answer<T> {
    /// The model.
    pub model: Option<T>,
    /// How current it is.
    pub freshness: Freshness,
}

/// A window of a session's history: see [`ReadModels::history`].
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryWindow {
    /// The session.
    pub session: String,
    /// The position the window starts from.
    pub cursor: u64,
    /// The events, as stored (with position, recordedAt, hash, streamVersion).
    pub events: Vec<serde_json::Value>,
    /// Where the next window starts; `None` when this one reaches the end.
    pub next_cursor: Option<u64>,
    /// The journal's head when read.
    pub head: u64,
}

/// A projection's line in `journal status`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionStatus {
    /// The projection.
    pub name: String,
    /// The version this build runs.
    pub version: u32,
    /// The version of the generation readers read, if any.
    pub serving_version: Option<u32>,
    /// Freshness.
    pub freshness: Freshness,
}

/// The error of a read model operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] journal_engine::Error),
    /// A stored state could not be decoded.
    #[error("projection {projection}, key {key}: {message}")]
    Decode {
        /// The projection.
        projection: String,
        /// The key.
        key: String,
        /// What failed.
        message: String,
    },
    /// No such projection.
    #[error("no projection named {0} (known: state, activity)")]
    UnknownProjection(String),
    /// No such read model.
    #[error("no read model named {0} (known: session, thread, task, run, checklist, queue, evidence, ecosystem, resume, history, state, activity)")]
    UnknownModel(String),
}

/// The read models of one journal: the store, the workers, and the answers.
#[derive(Debug, Clone)]
pub struct ReadModels {
    journal: Journal,
    store: Arc<Store>,
    state: Arc<Mutex<Worker<StateProjection>>>,
    activity: Arc<Mutex<Worker<ActivityProjection>>>,
    /// Events per pass of a build from the start ([`crate::partition`]).
    partition_events: u64,
    /// The most bytes of frames such a build copies into its scratch files
    /// ([`crate::partition::Scratch`]).
    copy_bytes_max: u64,
    /// Set when a build by partition failed reading the log: this process builds with the
    /// workers' ordinary catch-up from then on, rather than reading the log again by partition
    /// at every catch-up. Set from the start by [`ReadModels::without_partitions`].
    ordinary_only: Arc<AtomicBool>,
}

/// How often, at most, the live workers ([`ReadModels::spawn`]) catch up: one commit of the
/// read models takes in the journal's commits of that long, instead of one each. A reader
/// that needs a position sooner asks for it (`minPosition`, [`ReadModels::wait_for`]) and
/// catches up itself.
pub const LIVE_CATCH_UP_INTERVAL: Duration = Duration::from_millis(50);

/// How often, at most, the live workers make their commits durable (and once the journal is
/// idle that long): a crash loses at most this much of their progress, applied again from the
/// log at the next start.
pub const LIVE_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// The projections' names, in the order they run.
pub const PROJECTIONS: [&str; 2] = ["state", "activity"];

/// Each projection's name and the version this build runs.
#[must_use]
pub fn versions() -> [(&'static str, u32); 2] {
    [
        (StateProjection.name(), StateProjection.version()),
        (ActivityProjection.name(), ActivityProjection.version()),
    ]
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A worker that panicked mid-batch left nothing half-committed (batches are
    // transactions), and its cache is marked invalid until a commit, so its worker is safe
    // to use again.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ReadModels {
    /// Opens the read models of `journal`, in `projections.redb` beside its log.
    ///
    /// # Errors
    /// [`ReadError::Store`] when the store cannot be opened.
    pub fn open(journal: &Journal) -> Result<ReadModels, ReadError> {
        ReadModels::open_at(journal, &journal.dir().join(crate::store::FILE_NAME))
    }

    /// Opens the read models of `journal` with the store at `path`.
    ///
    /// # Errors
    /// [`ReadError::Store`].
    pub fn open_at(journal: &Journal, path: &Path) -> Result<ReadModels, ReadError> {
        let store = Arc::new(Store::open(path)?);
        Ok(ReadModels::with_store(journal, store))
    }

    /// The read models of `journal` in a store the caller opened (with
    /// [`Store::open_waiting`], say, before opening the journal, so that waiting for the
    /// store holds no lock on the journal).
    #[must_use]
    pub fn with_store(journal: &Journal, store: Arc<Store>) -> ReadModels {
        ReadModels::with_workers(journal.clone(), store, None)
    }

    /// The read models with their workers; `batch_events` fixes the batch size (else the
    /// workers' default, growing with the states).
    fn with_workers(journal: Journal, store: Arc<Store>, batch_events: Option<u64>) -> ReadModels {
        let state = Worker::new(Arc::new(StateProjection), Arc::clone(&store));
        let activity = Worker::new(Arc::new(ActivityProjection), Arc::clone(&store));
        let (state, activity) = match batch_events {
            Some(n) => (state.with_batch_events(n), activity.with_batch_events(n)),
            None => (state, activity),
        };
        ReadModels {
            journal,
            state: Arc::new(Mutex::new(state)),
            activity: Arc::new(Mutex::new(activity)),
            store,
            partition_events: PARTITION_EVENTS,
            copy_bytes_max: partition::COPY_BYTES_MAX,
            ordinary_only: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Makes the workers commit every `n` events exactly (see [`Worker::with_batch_events`]).
    #[must_use]
    pub fn with_batch_events(self, n: u64) -> ReadModels {
        ReadModels {
            partition_events: self.partition_events,
            copy_bytes_max: self.copy_bytes_max,
            ordinary_only: self.ordinary_only,
            ..ReadModels::with_workers(self.journal, self.store, Some(n))
        }
    }

    /// Makes every build from the start the workers' ordinary catch-up, one worker after the
    /// other, each reading the whole log and holding every stream's state at once: the build
    /// before partitions, kept to compare with ([`crate::partition`] builds the same states).
    #[must_use]
    pub fn without_partitions(self) -> ReadModels {
        ReadModels {
            ordinary_only: Arc::new(AtomicBool::new(true)),
            ..self
        }
    }

    /// Makes a build from the start read the log in passes of about `n` events' worth of
    /// streams each (see [`crate::partition`]; the default is [`PARTITION_EVENTS`]).
    #[must_use]
    pub fn with_partition_events(mut self, n: u64) -> ReadModels {
        self.partition_events = n.max(1);
        self
    }

    /// Makes a build from the start copy at most `bytes` of frames into its scratch files
    /// beside the store (the default is [`partition::COPY_BYTES_MAX`]; 0 copies none, and each
    /// later pass reads its frames from the log), for a disk with little room to spare.
    #[must_use]
    pub fn with_copy_bytes_max(mut self, bytes: u64) -> ReadModels {
        self.copy_bytes_max = bytes;
        self
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Catches every projection up to the head, calling `progress(name, position, head)`.
    ///
    /// # Errors
    /// [`ReadError`] when the journal or the store fails (a projection that cannot apply an
    /// event is faulted, not an error).
    pub fn catch_up(
        &self,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<Vec<(&'static str, Reached)>, ReadError> {
        self.catch_up_with(progress, Durability::Immediate)
    }

    /// [`ReadModels::catch_up`], the workers' last commits not waiting for the disk
    /// ([`Worker::catch_up_deferred`]); [`ReadModels::sync`] makes them durable.
    fn catch_up_with(
        &self,
        progress: &mut dyn FnMut(&str, u64, u64),
        last: Durability,
    ) -> Result<Vec<(&'static str, Reached)>, ReadError> {
        if !self.ordinary_only.load(Ordering::Relaxed) {
            // A projection at the start of a generation is built by partition first, both
            // from the same passes; the ordinary catch-up below takes it from there.
            let mut state = lock(&self.state);
            let mut activity = lock(&self.activity);
            let built = partition::build(
                &self.journal,
                &mut [&mut *state, &mut *activity],
                self.partition_events,
                partition::Scratch {
                    dir: scratch_dir(self.store.path()),
                    copy_bytes_max: self.copy_bytes_max,
                },
                progress,
            )?;
            if !built {
                self.ordinary_only.store(true, Ordering::Relaxed);
            }
        }
        let state = match last {
            Durability::Immediate => {
                lock(&self.state).catch_up(&self.journal, &mut |p, h| progress("state", p, h))?
            }
            Durability::Deferred => lock(&self.state)
                .catch_up_deferred(&self.journal, &mut |p, h| progress("state", p, h))?,
        };
        let activity = match last {
            Durability::Immediate => lock(&self.activity)
                .catch_up(&self.journal, &mut |p, h| progress("activity", p, h))?,
            Durability::Deferred => lock(&self.activity)
                .catch_up_deferred(&self.journal, &mut |p, h| progress("activity", p, h))?,
        };
        Ok(vec![("state", state), ("activity", activity)])
    }

    /// Makes every commit of the workers durable (after [`ReadModels::spawn`]'s, which do not
    /// wait for the disk).
    ///
    /// # Errors
    /// [`ReadError::Store`].
    pub fn sync(&self) -> Result<(), ReadError> {
        Ok(self.store.sync()?)
    }

    /// Runs the workers live on the current tokio runtime: after a commit to the journal they
    /// catch up, at most once every [`LIVE_CATCH_UP_INTERVAL`], so that one commit of the
    /// read models takes in every journal commit since the last. Their commits do not wait for
    /// the disk: they are made durable at most once every [`LIVE_SYNC_INTERVAL`], and once
    /// the journal is idle that long ([`ReadModels::sync`]); a crash loses at most that much
    /// of the workers' progress, which they apply again from the log (the answers' freshness
    /// says how far they are). They run until the returned handle is aborted (or the runtime
    /// shuts down); abort it, then [`ReadModels::sync`], before closing the journal, since the
    /// task holds a handle to it.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let models = self.clone();
        tokio::spawn(async move {
            let mut head = models.journal.watch_head();
            let mut sync_tick = tokio::time::interval(LIVE_SYNC_INTERVAL);
            sync_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Whether commits were made since the last sync.
            let mut unsynced = false;
            let mut reached = None;
            loop {
                let m = models.clone();
                let caught = tokio::task::spawn_blocking(move || {
                    m.catch_up_with(&mut |_, _, _| {}, Durability::Deferred)
                })
                .await;
                match caught {
                    Ok(Ok(now)) => {
                        unsynced |= reached.as_ref() != Some(&now);
                        reached = Some(now);
                    }
                    Ok(Err(e)) => tracing::error!(error = %e, "projection worker"),
                    Err(e) => tracing::error!(error = %e, "projection worker panicked"),
                }
                tokio::time::sleep(LIVE_CATCH_UP_INTERVAL).await;
                loop {
                    tokio::select! {
                        biased;
                        _ = sync_tick.tick(), if unsynced => {
                            unsynced = false;
                            models.sync_blocking().await;
                        }
                        changed = head.changed() => {
                            if changed.is_err() {
                                if unsynced {
                                    models.sync_blocking().await;
                                }
                                return;
                            }
                            break;
                        }
                    }
                }
            }
        })
    }

    /// [`ReadModels::sync`] on the blocking pool, its error logged.
    async fn sync_blocking(&self) {
        let m = self.clone();
        match tokio::task::spawn_blocking(move || m.sync()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "projection worker: sync"),
            Err(e) => tracing::error!(error = %e, "projection worker: sync panicked"),
        }
    }

    /// The freshness of projection `name`.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn freshness(&self, name: &str) -> Result<Freshness, ReadError> {
        if !PROJECTIONS.contains(&name) {
            return Err(ReadError::UnknownProjection(name.to_string()));
        }
        freshness(&self.store, &self.journal, name)
    }

    /// Waits until every projection reflects at least `position` (read your own writes), for
    /// at most `timeout`; catches up in this thread while waiting. Returns whether it got
    /// there; either way, the next answer's freshness tells the truth.
    ///
    /// # Errors
    /// [`ReadError`].
    #[allow(clippy::disallowed_methods)] // A timeout is wall time, not the journal's clock.
    pub fn wait_for(&self, position: u64, timeout: Duration) -> Result<bool, ReadError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let reached = PROJECTIONS
                .iter()
                .map(|n| self.freshness(n).map(|f| f.position >= position))
                .collect::<Result<Vec<bool>, _>>()?;
            if reached.iter().all(|r| *r) {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            self.catch_up(&mut |_, _, _| {})?;
            if self.journal.head().position.0 < position {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Every projection's status.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn status(&self) -> Result<Vec<ProjectionStatus>, ReadError> {
        versions()
            .into_iter()
            .map(|(name, version)| {
                Ok(ProjectionStatus {
                    name: (*name).to_string(),
                    version,
                    serving_version: self.store.meta(name)?.serving.map(|g| g.version),
                    freshness: self.freshness(name)?,
                })
            })
            .collect()
    }

    fn load<S: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
    ) -> Result<Option<S>, ReadError> {
        let meta = self.store.meta(name)?;
        let Some(serving) = meta.serving else {
            return Ok(None);
        };
        match self.store.get(name, serving.version, key)? {
            Some(bytes) => decode(&bytes)
                .map(Some)
                .map_err(|message| ReadError::Decode {
                    projection: name.to_string(),
                    key: key.to_string(),
                    message,
                }),
            None => Ok(None),
        }
    }

    /// The freshness of an answer drawn from both projections.
    fn combined_freshness(&self) -> Result<Freshness, ReadError> {
        let parts = [self.freshness("state")?, self.freshness("activity")?];
        Freshness::combine(&parts).ok_or_else(|| ReadError::UnknownProjection("state".into()))
    }

    /// Both projections' states of `stream`; `None` when neither holds anything about it.
    fn stream_models(
        &self,
        stream: Option<String>,
    ) -> Result<Option<(String, StreamState, Activity)>, ReadError> {
        let Some(stream) = stream else {
            return Ok(None);
        };
        let state: Option<StreamState> = self.load("state", &stream)?;
        let activity: Option<Activity> = self.load("activity", &stream)?;
        Ok(match (state, activity) {
            (None, None) => None,
            (s, a) => Some((stream, s.unwrap_or_default(), a.unwrap_or_default())),
        })
    }

    /// The stream key an id of `kind` (`task`, `run`, `thread`) belongs to.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn stream_of(&self, kind: &str, id: &str) -> Result<Option<String>, ReadError> {
        if kind == "session" {
            return Ok(Some(format!("session:{id}")));
        }
        let meta = self.store.meta("state")?;
        let Some(serving) = meta.serving else {
            return Ok(None);
        };
        Ok(self.store.lookup("state", serving.version, kind, id)?)
    }

    /// The rules' state of stream `key`, with its freshness.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn stream_state(&self, key: &str) -> Result<Answer<StreamState>, ReadError> {
        Ok(Answer {
            model: self.load("state", key)?,
            freshness: self.freshness("state")?,
        })
    }

    /// The activity of stream `key`, with its freshness.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn activity(&self, key: &str) -> Result<Answer<Activity>, ReadError> {
        Ok(Answer {
            model: self.load("activity", key)?,
            freshness: self.freshness("activity")?,
        })
    }

    /// A read model as JSON: `session`, `checklist`, `queue`, `evidence`, `ecosystem` (the
    /// ecosystem contract's AgentSession, AgentTask, AgentTodo, AgentRun, AgentApprovalCheckpoint,
    /// AgentActionLog and AgentCheckpoint) (ID: a session id, or
    /// a stream key such as `task:t1`), `thread`, `task`, `run` (ID: that entity's id), or
    /// `state` / `activity` (the raw projections of a stream). `model` is `None` when nothing
    /// is recorded about the id.
    ///
    /// # Errors
    /// [`ReadError`]; an unknown kind is [`ReadError::UnknownProjection`].
    pub fn view(&self, kind: &str, id: &str) -> Result<Answer<serde_json::Value>, ReadError> {
        let stream = match kind {
            "task" | "run" | "thread" => self.stream_of(kind, id)?,
            "session" | "checklist" | "queue" | "evidence" | "ecosystem" | "resume" | "state"
            | "activity" => Some(stream_key_of(id)),
            other => return Err(ReadError::UnknownModel(other.to_string())),
        };
        let freshness = self.combined_freshness()?;
        let Some((stream, state, activity)) = self.stream_models(stream)? else {
            return Ok(Answer {
                model: None,
                freshness,
            });
        };
        let json = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| ReadError::Decode {
                projection: kind.to_string(),
                key: stream.clone(),
                message: e.to_string(),
            })
        };
        let model = match kind {
            "session" => Some(json(serde_json::to_value(views::session(
                &stream, &state, &activity,
            )))?),
            "checklist" => Some(json(serde_json::to_value(views::checklist(&state)))?),
            "queue" => Some(json(serde_json::to_value(views::queue(&state, &activity)))?),
            "evidence" => Some(json(serde_json::to_value(views::evidence(
                &state, &activity,
            )))?),
            "ecosystem" => Some(json(serde_json::to_value(crate::ecosystem::views(
                &state, &activity,
            )))?),
            "resume" => {
                let journal = &self.journal;
                let payload = |id: &str| {
                    journal
                        .get(id)
                        .ok()
                        .flatten()
                        .and_then(|e| e.envelope.payload)
                };
                Some(json(serde_json::to_value(views::resume(
                    &stream, &state, &activity, &payload,
                )))?)
            }
            "state" => Some(json(serde_json::to_value(&state))?),
            "activity" => Some(json(serde_json::to_value(&activity))?),
            "task" => state
                .tasks
                .get(id)
                .map(|t| json(serde_json::to_value(views::TaskSnapshot::of(&stream, t))))
                .transpose()?,
            "thread" => views::thread(&stream, id, &state, &activity)
                .map(|t| json(serde_json::to_value(t)))
                .transpose()?,
            _ => views::run(&stream, id, &activity)
                .map(|r| json(serde_json::to_value(r)))
                .transpose()?,
        };
        Ok(Answer { model, freshness })
    }

    /// A window of a session's history (docs/MODEL.md §5, the Agent Runtime spec's `history.window.loaded`): at
    /// most `limit` of its events from position `cursor` on, as stored, with the cursor of the
    /// next window (`None` at the end), so that a long session is read page by page.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn history(
        &self,
        session: &str,
        cursor: u64,
        limit: usize,
    ) -> Result<HistoryWindow, ReadError> {
        history(&self.journal, session, cursor, limit)
    }

    /// The session snapshot (`kind` `session`, ID a session id or stream key) or a thread read
    /// model (`thread`) in Agent Runtime form, validating against
    /// `agentruntime-snapshot.schema.json`.
    ///
    /// # Errors
    /// [`ReadError`]; another kind is [`ReadError::UnknownModel`].
    pub fn view_agentruntime(
        &self,
        kind: &str,
        id: &str,
    ) -> Result<Answer<serde_json::Value>, ReadError> {
        let stream = match kind {
            "session" => Some(stream_key_of(id)),
            "thread" => self.stream_of("thread", id)?,
            other => {
                return Err(ReadError::UnknownModel(format!(
                    "{other} (in Agent Runtime form: session, thread)"
                )))
            }
        };
        let freshness = self.combined_freshness()?;
        let model = match self.stream_models(stream)? {
            None => None,
            Some((_, state, activity)) if kind == "session" => {
                Some(crate::agentruntime::snapshot(&state, &activity))
            }
            Some((_, state, activity)) => activity
                .threads
                .get(id)
                .map(|t| crate::agentruntime::thread(id, t, &state, &activity)),
        };
        Ok(Answer { model, freshness })
    }

    /// A BLAKE3 digest of projection `name`'s serving generation over a canonical encoding
    /// (each key, then its state as JSON with map keys in order; then each alias: kind, id and
    /// key), with the number of keys.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn digest(&self, name: &str) -> Result<(blake3::Hash, u64), ReadError> {
        let meta = self.store.meta(name)?;
        let mut hasher = blake3::Hasher::new();
        let mut keys = 0u64;
        let Some(serving) = meta.serving else {
            return Ok((hasher.finalize(), 0));
        };
        let mut failure = None;
        self.store
            .for_each(name, serving.version, &mut |key, bytes| {
                let canonical = match name {
                    "state" => decode::<StreamState>(bytes).and_then(|s| canonical(&s)),
                    _ => decode::<Activity>(bytes).and_then(|s| canonical(&s)),
                };
                match canonical {
                    Ok(json) => {
                        hasher.update(&(key.len() as u64).to_le_bytes());
                        hasher.update(key.as_bytes());
                        hasher.update(&(json.len() as u64).to_le_bytes());
                        hasher.update(&json);
                        keys += 1;
                    }
                    Err(message) => {
                        failure.get_or_insert(ReadError::Decode {
                            projection: name.to_string(),
                            key: key.to_string(),
                            message,
                        });
                    }
                }
                Ok(())
            })?;
        if let Some(e) = failure {
            return Err(e);
        }
        // The aliases are how a state is found by a task, run or thread id: part of the model.
        hasher.update(b"aliases");
        self.store
            .for_each_alias(name, serving.version, &mut |kind, id, key| {
                for part in [kind, id, key] {
                    hasher.update(&(part.len() as u64).to_le_bytes());
                    hasher.update(part.as_bytes());
                }
                Ok(())
            })?;
        Ok((hasher.finalize(), keys))
    }

    /// Forgets projection `name` (or all), so that the next catch-up rebuilds it from the
    /// start.
    ///
    /// # Errors
    /// [`ReadError`].
    pub fn reset(&self, name: Option<&str>) -> Result<(), ReadError> {
        for n in PROJECTIONS {
            if name.is_none_or(|x| x == n) {
                self.store.reset(n)?;
            }
        }
        if let Some(n) = name.filter(|n| !PROJECTIONS.contains(n)) {
            return Err(ReadError::UnknownProjection(n.to_string()));
        }
        Ok(())
    }
}

/// A window of a session's history, read from the log (no read model is needed): see
/// [`ReadModels::history`].
///
/// # Errors
/// [`ReadError`] when the journal cannot be read.
pub fn history(
    journal: &Journal,
    session: &str,
    cursor: u64,
    limit: usize,
) -> Result<HistoryWindow, ReadError> {
    let limit = limit.max(1);
    let mut events = Vec::with_capacity(limit);
    let mut next_cursor = None;
    for event in journal.query(journal_engine::Filter {
        session: Some(session.to_string()),
        from: Some(Position(cursor.max(1))),
        limit: Some(limit + 1),
        ..journal_engine::Filter::default()
    })? {
        let event = event?;
        if events.len() == limit {
            next_cursor = Some(event.position.0);
            break;
        }
        events.push(event.to_json_value());
    }
    Ok(HistoryWindow {
        session: session.to_string(),
        cursor: cursor.max(1),
        events,
        next_cursor,
        head: journal.head().position.0,
    })
}

/// The freshness of projection `name` in `store` against `journal`'s head: the position its
/// serving generation reflects, the lag in events and in milliseconds (how long the oldest
/// event not reflected has been in the log, by the journal's clock), and the state.
///
/// # Errors
/// [`ReadError`].
pub fn freshness(store: &Store, journal: &Journal, name: &str) -> Result<Freshness, ReadError> {
    freshness_of(&store.meta(name)?, journal, name)
}

/// The freshness a checkpoint gives against `journal`'s head (`Meta::default()`: a projection
/// never built, `unknown`).
///
/// # Errors
/// [`ReadError`] when the journal cannot be read.
pub fn freshness_of(meta: &Meta, journal: &Journal, name: &str) -> Result<Freshness, ReadError> {
    let head = journal.head().position.0;
    let position = meta.serving.map_or(0, |g| g.position);
    let state = if meta.fault.is_some() {
        FreshnessState::Faulted
    } else if meta.building.is_some() {
        FreshnessState::Rebuilding
    } else if meta.serving.is_none() {
        FreshnessState::Unknown
    } else if position >= head {
        FreshnessState::Fresh
    } else {
        FreshnessState::Stale
    };
    let lag_events = head.saturating_sub(position);
    let lag_ms = if lag_events == 0 {
        0
    } else {
        let oldest = match journal.get_position(Position(position + 1)) {
            // Archived and detached: the lag is at least the first live event's.
            Err(journal_engine::Error::Archived { last_archived, .. }) => {
                journal.get_position(last_archived.next())?
            }
            other => other?,
        };
        let now = journal.clock().now_unix_ns();
        u64::try_from(now.saturating_sub(oldest.recorded_at_ns) / 1_000_000).unwrap_or(0)
    };
    Ok(Freshness {
        projection: name.to_string(),
        position,
        head,
        lag_events,
        lag_ms,
        state,
        progress: meta.building.map(|(g, target)| Progress {
            position: g.position,
            target,
        }),
        fault: meta.fault.clone(),
        min_position: None,
    })
}

/// The stream key an id names: itself when it is one (`session:…`, `task:…`, `runtime:…`),
/// else the session with that id.
fn stream_key_of(id: &str) -> String {
    if ["session:", "task:", "runtime:"]
        .iter()
        .any(|p| id.starts_with(p))
    {
        id.to_string()
    } else {
        format!("session:{id}")
    }
}

/// The canonical encoding of a state: JSON of its value form, whose maps keep key order
/// (every map in a state is a `BTreeMap`).
fn canonical<S: Serialize>(state: &S) -> Result<Vec<u8>, String> {
    let value = serde_json::to_value(state).map_err(|e| e.to_string())?;
    serde_json::to_vec(&sorted(value)).map_err(|e| e.to_string())
}

fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
