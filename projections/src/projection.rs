//! What a projection is: a named, versioned, pure fold of events into per-key states, the event
//! as a fold sees it ([`Event`]), and the freshness every answer built from one carries.

use std::ops::Deref;

use journal_format::{StoredEvent, StoredPayload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An event as a fold sees it: the stored event, and its payload.
///
/// A rebuild leaves each payload in its stored form until a fold asks for it ([`StoredPayload`],
/// checked when the event was decoded), so that the events whose payloads no fold reads cost no
/// JSON value. **Invariant:** a fold reads the payload only through these methods, never through
/// `envelope.payload`, which such an event leaves `None`; the rebuild-equals-incremental tests,
/// whose incremental side decodes payloads in full, would tell.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    stored: &'a StoredEvent,
    payload: Payload<'a>,
}

#[derive(Clone, Copy, Debug)]
enum Payload<'a> {
    /// The envelope's own (`envelope.payload`).
    Held,
    /// Deferred: the envelope's is `None`.
    Stored(Option<StoredPayload<'a>>),
}

impl<'a> Event<'a> {
    /// An event decoded in full: its payload is the envelope's.
    #[must_use]
    pub fn new(stored: &'a StoredEvent) -> Event<'a> {
        Event {
            stored,
            payload: Payload::Held,
        }
    }

    /// An event decoded with its payload deferred
    /// ([`journal_engine::Record::decode_into_deferring_payload`]).
    #[must_use]
    pub fn deferred(stored: &'a StoredEvent, payload: Option<StoredPayload<'a>>) -> Event<'a> {
        debug_assert!(
            stored.envelope.payload.is_none(),
            "a deferred payload is not held by the envelope"
        );
        Event {
            stored,
            payload: Payload::Stored(payload),
        }
    }

    /// The payload as a JSON value.
    #[must_use]
    pub fn payload_value(&self) -> Option<Value> {
        match self.payload {
            Payload::Held => self.held().cloned(),
            Payload::Stored(stored) => stored.and_then(|p| self.checked(p.to_value())),
        }
    }

    /// The payload deserialized as `T`; `None` when absent or of another shape (the append
    /// check makes the latter impossible for events appended by this version).
    #[must_use]
    pub fn payload_as<T: DeserializeOwned>(&self) -> Option<T> {
        match self.payload {
            Payload::Held => self.held().and_then(|p| T::deserialize(p).ok()),
            Payload::Stored(stored) => stored.and_then(|p| p.deserialize().ok()),
        }
    }

    /// The string the payload holds at key `field`; `None` when it holds none there.
    #[must_use]
    pub fn payload_str(&self, field: &str) -> Option<String> {
        match self.payload {
            Payload::Held => self
                .held()
                .and_then(|p| p.get(field))
                .and_then(Value::as_str)
                .map(str::to_owned),
            Payload::Stored(stored) => stored
                .and_then(|p| self.checked(p.str_field(field)))
                .flatten()
                .map(str::to_owned),
        }
    }

    /// The value the payload holds at key `field`. A deferred payload builds that value alone.
    #[must_use]
    pub fn payload_field(&self, field: &str) -> Option<Value> {
        match self.payload {
            Payload::Held => self.held().and_then(|p| p.get(field)).cloned(),
            Payload::Stored(stored) => stored.and_then(|p| self.checked(p.field(field))).flatten(),
        }
    }

    /// The envelope's own payload, for an event decoded in full.
    fn held(&self) -> Option<&'a Value> {
        self.stored.envelope.payload.as_ref()
    }

    /// A deferred payload's decoding, which its check at decode makes infallible: a failure is
    /// a bug, reported and asserted, and the payload then reads as absent.
    fn checked<T>(&self, decoded: Result<T, journal_format::EnvelopeError>) -> Option<T> {
        match decoded {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::error!(
                    position = self.stored.position.0,
                    %error,
                    "a payload checked at decode failed to decode"
                );
                debug_assert!(false, "a checked payload failed to decode: {error}");
                None
            }
        }
    }
}

impl Deref for Event<'_> {
    type Target = StoredEvent;

    fn deref(&self) -> &StoredEvent {
        self.stored
    }
}

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
    fn aliases<'e>(
        &self,
        _event: &'e StoredEvent,
    ) -> impl Iterator<Item = (&'static str, &'e str)> + 'e {
        std::iter::empty()
    }

    /// Applies `event` to `state`.
    ///
    /// # Errors
    /// A message saying why the event cannot be applied. The projection then becomes
    /// `faulted` at that event: it is never skipped silently.
    fn apply(&self, state: &mut Self::State, event: &Event<'_>) -> Result<(), String>;
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
    /// The answer does not reflect the position the reader asked for (`minPosition`, `journal
    /// get --min-position`) in the time it gave: the journal's head is short of it, or the
    /// projection did not catch up to it. `position` says what the answer reflects.
    Behind,
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
    /// The position the reader asked the answer to reflect, when it asked for one (see
    /// [`Freshness::require`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_position: Option<u64>,
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
            FreshnessState::Behind => 3,
            FreshnessState::Stale => 4,
            FreshnessState::Fresh => 5,
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
            min_position: parts.iter().filter_map(|f| f.min_position).max(),
        })
    }

    /// Marks the answer with the position the reader asked it to reflect: when it reflects
    /// less, a `fresh` or `stale` answer becomes `behind` (one `faulted`, `rebuilding` or
    /// `unknown` keeps that state, which says more). Returns whether the position is reached.
    pub fn require(&mut self, min_position: u64) -> bool {
        self.min_position = Some(min_position);
        let reached = self.position >= min_position;
        if !reached && matches!(self.state, FreshnessState::Fresh | FreshnessState::Stale) {
            self.state = FreshnessState::Behind;
        }
        reached
    }
}

#[cfg(test)]
mod tests {
    use journal_format::{ChainHash, Envelope, Position, StoredEvent};
    use serde_json::{json, Value};

    use super::Event;
    use super::{Freshness, FreshnessState};

    fn freshness(position: u64, head: u64, state: FreshnessState) -> Freshness {
        Freshness {
            projection: "state".into(),
            position,
            head,
            lag_events: head - position,
            lag_ms: 0,
            state,
            progress: None,
            fault: None,
            min_position: None,
        }
    }

    #[test]
    fn an_answer_short_of_the_position_asked_for_is_behind() {
        let mut f = freshness(3, 3, FreshnessState::Fresh);
        assert!(!f.require(999_999));
        assert_eq!(
            (f.state, f.min_position),
            (FreshnessState::Behind, Some(999_999))
        );
        let mut f = freshness(3, 10, FreshnessState::Stale);
        assert!(!f.require(5));
        assert_eq!(f.state, FreshnessState::Behind);
        let mut f = freshness(3, 3, FreshnessState::Faulted);
        assert!(!f.require(5));
        assert_eq!(f.state, FreshnessState::Faulted, "faulted says more");
        let mut f = freshness(5, 10, FreshnessState::Stale);
        assert!(f.require(5));
        assert_eq!(f.state, FreshnessState::Stale, "reached: unchanged");
    }

    fn stored(envelope: Envelope) -> StoredEvent {
        StoredEvent {
            position: Position(1),
            recorded_at_ns: 0,
            stream_version: 1,
            hash: ChainHash::default(),
            envelope,
        }
    }

    /// An event decoded in full and the same event with its payload deferred answer alike, for
    /// every key of the payload, a key it lacks, and a payload that is not a map.
    #[test]
    fn a_deferred_payload_reads_as_the_payload_held() {
        let payloads = [
            json!({"status": "success", "output": "x".repeat(300), "exitCode": 0,
                   "nested": {"a": [1, {"b": "c"}], "d": null}, "verificationOutcomes": ["ok"]}),
            json!(["not", "a", "map"]),
            json!("text"),
        ];
        for payload in payloads {
            let envelope = Envelope {
                payload: Some(payload.clone()),
                ..Envelope::new("tool.result", "e1", "2026-11-25T00:00:00Z")
            };
            let body = envelope.to_msgpack().expect("encode");
            let held = stored(envelope);
            let mut deferred = stored(Envelope::default());
            let payload_bytes = deferred
                .envelope
                .decode_msgpack_deferring_payload(&body)
                .expect("decode");
            let (held, deferred) = (Event::new(&held), Event::deferred(&deferred, payload_bytes));
            assert_eq!(deferred.payload_value(), held.payload_value());
            let keys: Vec<String> = match &payload {
                Value::Object(fields) => fields.keys().cloned().collect(),
                _ => Vec::new(),
            };
            for key in keys.iter().map(String::as_str).chain(["absent"]) {
                assert_eq!(
                    deferred.payload_field(key),
                    held.payload_field(key),
                    "{key}"
                );
                assert_eq!(deferred.payload_str(key), held.payload_str(key), "{key}");
            }
        }
    }
}
