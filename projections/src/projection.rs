//! What a projection is: a named, versioned, pure fold of events into per-key states, and the
//! freshness every answer built from one carries.

use journal_format::StoredEvent;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A pure fold over the log, keyed by entity.
///
/// The worker ([`crate::worker`]) feeds it every event in position order; for each event with a
/// [`Projection::key`], it loads that key's state (the default when new), calls
/// [`Projection::apply`], and stores the state back together with the position reached.
///
/// Determinism: `apply` may depend only on the state and the event (no clock, no randomness, no
/// I/O), so that a state maintained incrementally equals a state rebuilt from scratch.
pub trait Projection: Send + Sync + 'static {
    /// The state of one key.
    type State: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;

    /// The projection's name, stable: the store keys its tables by it.
    fn name(&self) -> &'static str;

    /// The fold's version. Raise it whenever `apply` or `State` changes meaning: a projection
    /// whose stored version differs is rebuilt from the start, serving its old answers marked
    /// `rebuilding` meanwhile.
    fn version(&self) -> u32;

    /// The key of the state `event` changes, if any.
    fn key(&self, event: &StoredEvent) -> Option<String>;

    /// Whether [`Projection::key`] is always the event's stream key
    /// ([`Envelope::stream_key`](journal_format::Envelope::stream_key)), and `None` for an event
    /// of no stream (`none:`). A rebuild of such a projection can split the log by stream and
    /// read each event's key without decoding it ([`crate::partition`]).
    fn keyed_by_stream(&self) -> bool {
        false
    }

    /// Whether [`Projection::key`] of `event` is `key`. A build by partition asks it of every
    /// event it applies; a projection can answer without building the key.
    fn has_key(&self, event: &StoredEvent, key: &str) -> bool {
        self.key(event).as_deref() == Some(key)
    }

    /// Secondary names for the key (for example `("task", "t1")` for the stream that holds task
    /// `t1`), so that a reader can find a state by another id.
    fn aliases<'e>(&self, _event: &'e StoredEvent) -> Vec<(&'static str, &'e str)> {
        Vec::new()
    }

    /// Applies `event` to `state`.
    ///
    /// # Errors
    /// A message saying why the event cannot be applied. The projection then becomes
    /// `faulted` at that event: it is never skipped silently.
    fn apply(&self, state: &mut Self::State, event: &StoredEvent) -> Result<(), String>;
}

/// How current an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FreshnessState {
    /// The answer reflects the journal's head.
    Fresh,
    /// The answer is behind the head (`lagEvents` behind).
    Stale,
    /// The projection is being rebuilt (its version changed); the answer is the last one built
    /// by the previous version, and `progress` says how far the rebuild is.
    Rebuilding,
    /// An event could not be applied; the answer is the last good state, and `fault` names the
    /// event and the error.
    Faulted,
    /// The projection has never been built: there is no answer to give.
    Unknown,
}

/// The progress of a rebuild.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The position the rebuild has reached.
    pub position: u64,
    /// The position it is rebuilding to.
    pub target: u64,
}

/// An event a projection could not apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// The event's position.
    pub position: u64,
    /// The event's id.
    pub event_id: String,
    /// Why it could not be applied.
    pub error: String,
}

/// The freshness of an answer: carried by every read model answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Freshness {
    /// The projection(s) the answer comes from.
    pub projection: String,
    /// The position the answer reflects.
    pub position: u64,
    /// The journal's head when the answer was given.
    pub head: u64,
    /// Events in the log that the answer does not reflect.
    pub lag_events: u64,
    /// How long the oldest event not reflected has been in the log, in milliseconds (0 when
    /// fresh).
    pub lag_ms: u64,
    /// The state.
    pub state: FreshnessState,
    /// With `rebuilding`: how far the rebuild is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// With `faulted`: the event that could not be applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
}

impl Freshness {
    /// The freshness of an answer drawn from several projections: the least fresh of them
    /// (faulted before rebuilding before unknown before stale before fresh), with the smallest
    /// position and the largest lag.
    #[must_use]
    pub fn combine(parts: &[Freshness]) -> Option<Freshness> {
        let rank = |s: FreshnessState| match s {
            FreshnessState::Faulted => 0,
            FreshnessState::Rebuilding => 1,
            FreshnessState::Unknown => 2,
            FreshnessState::Stale => 3,
            FreshnessState::Fresh => 4,
        };
        let worst = parts.iter().min_by_key(|f| rank(f.state))?;
        Some(Freshness {
            projection: parts
                .iter()
                .map(|f| f.projection.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            position: parts.iter().map(|f| f.position).min().unwrap_or(0),
            head: parts.iter().map(|f| f.head).max().unwrap_or(0),
            lag_events: parts.iter().map(|f| f.lag_events).max().unwrap_or(0),
            lag_ms: parts.iter().map(|f| f.lag_ms).max().unwrap_or(0),
            state: worst.state,
            progress: worst.progress,
            fault: worst.fault.clone(),
        })
    }
}
