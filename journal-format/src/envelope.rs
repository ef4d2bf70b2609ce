//! The envelope of docs/MODEL.md §1 (an event plus its metadata), its JSON form, and its stored
//! MessagePack body.
//!
//! The stored body is the envelope encoded as a MessagePack map of its present fields under their
//! camelCase names, in declaration order, then its unknown fields (written by
//! `envelope/encode.rs`, the bytes the serde implementation of `envelope/codec.rs` writes
//! through `rmp_serde`; pinned by golden-bytes tests, so bytes stay stable). Checksums and
//! the chain are computed over those stored bytes; nothing is ever re-serialized to be checked.
//!
//! Fields the journal assigns (`position`, `recordedAt`, `hash`, `streamVersion`) are not part of
//! the body: they live in the frame header, and [`StoredEvent`] joins the two.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EnvelopeError;
use crate::strict_json;
use crate::time_fmt;
use crate::types::{ChainHash, Position};

#[macro_use]
mod fields;
mod body;
mod codec;
mod encode;
mod event_ids;
mod msgpack;
pub(crate) mod parts;
mod stored_payload;
mod value_de;

/// How deeply arrays and maps may nest in an event written, its own object (the envelope's
/// map) counting as the first level: a payload or unknown field holds at most 126 nested
/// arrays and maps. JSON input deeper than this is refused ([`crate::strict_json`]), and so is
/// an event given to the encoder. It is what `serde_json` reads by default (127 levels), so that
/// every event the journal prints can be read back by it, and it keeps the stack an event needs
/// on its way in and out small: at 1,023 levels, parsing JSON and building the envelope took up
/// to 1.5 MiB of a thread's stack, three quarters of a tokio worker's.
///
/// Stored bodies are read up to 1,023 levels (the limit of the `rmp_serde` decoder the journal
/// once used), so that a body written before this limit is read as it was.
pub const NEST_LEVELS_MAX: usize = 127;

const _: () = assert!(NEST_LEVELS_MAX <= msgpack::MAX_DEPTH);

pub use event_ids::EventIds;
pub use stored_payload::StoredPayload;

/// Where an imported fact comes from (docs/MODEL.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// A fact as the source recorded it.
    Observed,
    /// Mapped from a native status.
    Projected,
    /// Reconstructed, e.g. from a checkpoint or final state.
    Inferred,
}

/// A JSON object field of an [`Envelope`] (`refs` and the spec's typed objects), boxed: an
/// envelope has thirty of them, mostly absent, and a boxed one takes 8 bytes in place of 72
/// (an ordered map). The envelope is moved by value through decoding and reading, so its size
/// is copied for every event read (1.3 KB boxed, 3.3 KB unboxed). The stored and JSON
/// forms are the map's; the box does not show in them.
pub type Object = Box<Map<String, Value>>;

/// An event with its metadata: the Agent Runtime event object plus the fields the runtime designs of docs/MODEL.md need
/// beyond the spec (docs/MODEL.md §1). Unknown fields are kept in [`Envelope::extra`] and round-trip.
///
/// A new field is declared here (its `#[serde]` attributes feed the JSON Schema) and listed in
/// `optional_fields!` in `envelope/fields.rs`, which the encoders and decoders of
/// `envelope/codec.rs`, `envelope/encode.rs` and `envelope/body.rs` read; a test fails until
/// the list and the struct agree.
///
/// # Invariants
/// After [`Envelope::validate`] succeeds: `type`, `eventId` and every id field are non-empty,
/// `timestamp` is RFC 3339, and no journal-assigned field name appears in `extra`.
#[derive(Debug, Clone, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)] // The fields are the Agent Runtime fields, documented in docs/MODEL.md §1.
pub struct Envelope {
    /// The event type, e.g. `tool.started` or `vendor.acme.thing`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The producer's id for this event; the journal assigns a UUID v7 when it is empty.
    #[serde(default)]
    pub event_id: String,
    /// The producer's clock, RFC 3339, kept as given.
    pub timestamp: String,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_item_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    /// A reference to a large output, e.g. `blake3:<hex>` for the journal's blob store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// The producer's own counter; never the journal's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,

    // Causality and ownership (the ecosystem contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,

    // Provenance of imported facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_ns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// A sensor's dedupe key or a client's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,

    /// Any JSON value; an explicit `null` is kept as `Some(Value::Null)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<Object>,

    // The spec's typed objects; their inner shape is the event vocabulary's concern.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_attempt: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_relationship: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_graph: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_progress: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_acceptance: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_state: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_decision: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_profile: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_decision: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_model_set: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_profile: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_state: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_event: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_state: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_run: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_environment: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_item: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_boundary: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Object>,

    /// Fields this version does not know, kept and returned unchanged.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// The field names the journal assigns; a producer may not set them.
pub const JOURNAL_FIELDS: [&str; 4] = ["position", "recordedAt", "hash", "streamVersion"];

/// The field by which an event names the event it supersedes: it records a later state of the
/// same fact (the log is never rewritten), as an import does when a source record changed
/// after it was imported. It holds the id of the fact's first event; of several events that
/// supersede one, the last in log order holds. Read models and replay show the latest state in
/// place of the earlier ones. An unknown field of the Agent Runtime form, kept in `extra`.
pub const SUPERSEDES_FIELD: &str = "supersedes";

impl Envelope {
    /// The id of the event this one supersedes ([`SUPERSEDES_FIELD`]), when it names one.
    #[must_use]
    pub fn supersedes(&self) -> Option<&str> {
        self.extra.get(SUPERSEDES_FIELD).and_then(Value::as_str)
    }

    /// A new envelope with the three required fields. An empty `event_id` asks the journal to
    /// assign a UUID v7 on append.
    #[must_use]
    pub fn new(
        event_type: impl Into<String>,
        event_id: impl Into<String>,
        timestamp: impl Into<String>,
    ) -> Envelope {
        Envelope {
            event_type: event_type.into(),
            event_id: event_id.into(),
            timestamp: timestamp.into(),
            ..Envelope::default()
        }
    }

    /// Parses one event in its JSON form. Duplicate keys (at any depth) and journal-assigned
    /// fields are refused; a missing `eventId` is filled by `assign_id`.
    ///
    /// # Errors
    /// [`EnvelopeError`] naming the problem and, where there is one, the field.
    pub fn from_json_slice(
        bytes: &[u8],
        assign_id: &mut dyn FnMut() -> String,
    ) -> Result<Envelope, EnvelopeError> {
        if let Some(envelope) = Envelope::from_plain_json(bytes, assign_id) {
            return Ok(envelope);
        }
        let value = strict_json::parse(bytes).map_err(EnvelopeError::NotJson)?;
        Envelope::from_json_value(value, assign_id)
    }

    /// The envelope of `bytes` read straight into its fields, without a `Value` tree of the
    /// whole event, when that gives what the strict way gives: JSON that repeats no key
    /// ([`strict_json::is_plain`]) with numbers read exactly, no journal field, valid
    /// ([`Envelope::validate`]) once a missing `eventId` is assigned. `None` otherwise, and for
    /// any error, which the strict way then reports in its words.
    fn from_plain_json(bytes: &[u8], assign_id: &mut dyn FnMut() -> String) -> Option<Envelope> {
        if !strict_json::is_plain(bytes) || strict_json::check_numbers(bytes).is_err() {
            return None;
        }
        let mut envelope: Envelope = serde_json::from_slice(bytes).ok()?;
        if JOURNAL_FIELDS
            .iter()
            .any(|f| envelope.extra.contains_key(*f))
        {
            return None;
        }
        if envelope.event_id.is_empty() {
            // Absent, or given empty (refused): only where the name appears nowhere is it
            // certainly absent, and assigned as the strict way assigns it.
            if bytes.windows(9).any(|w| w == b"\"eventId\"") {
                return None;
            }
            envelope.event_id = assign_id();
        }
        envelope.validate().is_ok().then_some(envelope)
    }

    /// Like [`Envelope::from_json_slice`], for an already parsed value.
    ///
    /// # Errors
    /// [`EnvelopeError`] naming the problem and, where there is one, the field.
    pub fn from_json_value(
        value: Value,
        assign_id: &mut dyn FnMut() -> String,
    ) -> Result<Envelope, EnvelopeError> {
        let Value::Object(mut object) = value else {
            return Err(EnvelopeError::NotJson(format!(
                "expected a JSON object, found {}",
                json_kind(&value)
            )));
        };
        for field in JOURNAL_FIELDS {
            if object.contains_key(field) {
                return Err(EnvelopeError::JournalField(field));
            }
        }
        for (field, name) in [("type", "type"), ("timestamp", "timestamp")] {
            if !object.contains_key(field) {
                return Err(EnvelopeError::MissingField(name));
            }
        }
        if !object.contains_key("eventId") {
            object.insert("eventId".into(), Value::String(assign_id()));
        }
        let envelope: Envelope =
            serde_path_to_error::deserialize(Value::Object(object)).map_err(|e| {
                EnvelopeError::InvalidField {
                    field: e.path().to_string(),
                    message: e.inner().to_string(),
                }
            })?;
        envelope.validate()?;
        Ok(envelope)
    }

    /// Checks the invariants stated on the type.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        if self.event_type.is_empty() {
            return Err(EnvelopeError::EmptyField("type"));
        }
        if self.event_id.is_empty() {
            return Err(EnvelopeError::EmptyField("eventId"));
        }
        time_fmt::parse_rfc3339_ns(&self.timestamp).map_err(|message| {
            EnvelopeError::InvalidField {
                field: "timestamp".into(),
                message,
            }
        })?;
        if let Some(name) = self.empty_id() {
            return Err(EnvelopeError::EmptyField(name));
        }
        // `extra` (empty in most events) is looked at only when it holds something.
        if !self.extra.is_empty() {
            for field in JOURNAL_FIELDS {
                if self.extra.contains_key(field) {
                    return Err(EnvelopeError::JournalField(field));
                }
            }
        }
        Ok(())
    }

    /// Checks a new fact before it is appended: [`Envelope::validate`], plus the typed shape of
    /// the payload ([`crate::payload::check`]). Stored events are decoded with
    /// [`Envelope::validate`] only, so a payload shape added later never makes old data
    /// unreadable.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate_fact(&self) -> Result<(), EnvelopeError> {
        self.validate()?;
        crate::payload::check(&self.event_type, self.payload.as_ref())
    }

    /// The stored name of the first id field that is present and empty: the ids must not be
    /// empty when present (the spec's `minLength: 1`).
    fn empty_id(&self) -> Option<&'static str> {
        macro_rules! first_empty {
            ($($name:literal => $field:ident),* $(,)?) => {
                // Every event is checked on every read: a comparison per field, and the name
                // only for the one found.
                $(if self.$field.as_deref() == Some("") {
                    return Some($name);
                })*
            };
        }
        first_empty! {
            "sessionId" => session_id,
            "threadId" => thread_id,
            "turnId" => turn_id,
            "taskId" => task_id,
            "runId" => run_id,
            "attemptId" => attempt_id,
            "parentTaskId" => parent_task_id,
            "rootTaskId" => root_task_id,
            "stepId" => step_id,
            "toolCallId" => tool_call_id,
            "actionId" => action_id,
            "subagentId" => subagent_id,
            "artifactId" => artifact_id,
            "evidenceId" => evidence_id,
            "requestId" => request_id,
            "processId" => process_id,
            "channelId" => channel_id,
            "jobId" => job_id,
            "jobItemId" => job_item_id,
            "outputRef" => output_ref,
            "modelRequestId" => model_request_id,
            "queueId" => queue_id,
        }
        None
    }

    /// The stream this event belongs to (docs/MODEL.md §1): its `sessionId`, else its `taskId`, else
    /// its `runtimeId`; `None` when it has none of them (such events share the empty stream `""`
    /// for version numbering, see [`Envelope::stream_key`]).
    #[must_use]
    pub fn stream(&self) -> Option<&str> {
        self.session_id
            .as_deref()
            .or(self.task_id.as_deref())
            .or(self.runtime_id.as_deref())
    }

    /// The key under which stream versions are counted: the kind of id and the id, so that a
    /// session and a task with the same id are different streams.
    #[must_use]
    pub fn stream_key(&self) -> String {
        self.ids().stream_key()
    }

    /// The ids the event is found by, borrowed: what [`EventIds::from_msgpack`] reads from its
    /// stored body.
    #[must_use]
    pub fn ids(&self) -> EventIds<'_> {
        EventIds {
            event_id: Some(self.event_id.as_str()),
            run_id: self.run_id.as_deref(),
            session_id: self.session_id.as_deref(),
            task_id: self.task_id.as_deref(),
            runtime_id: self.runtime_id.as_deref(),
        }
    }

    /// Encodes the envelope as the stored MessagePack body.
    ///
    /// # Errors
    /// [`EnvelopeError::Encode`] if a value cannot be stored: nested deeper than a body may
    /// hold (about a thousand levels), or longer than MessagePack can say.
    pub fn to_msgpack(&self) -> Result<Vec<u8>, EnvelopeError> {
        let mut out = Vec::with_capacity(512);
        self.write_msgpack(&mut out)?;
        Ok(out)
    }

    /// Appends the stored MessagePack body to `out`; on an error, `out` is left as it was.
    ///
    /// # Errors
    /// As [`Envelope::to_msgpack`].
    pub fn write_msgpack(&self, out: &mut Vec<u8>) -> Result<(), EnvelopeError> {
        let start = out.len();
        encode::write(self, out).inspect_err(|_| out.truncate(start))
    }

    /// Decodes a stored MessagePack body and checks the invariants.
    ///
    /// # Errors
    /// [`EnvelopeError::Decode`] when the bytes are not a valid stored envelope.
    pub fn from_msgpack(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let envelope = body::decode(bytes)?;
        envelope
            .validate()
            .map_err(|e| EnvelopeError::Decode(e.to_string()))?;
        Ok(envelope)
    }

    /// [`Envelope::from_msgpack`] into this envelope, which it replaces entirely: the strings
    /// of the event decoded before lend their buffers to the same fields of the new one, so
    /// that a reader of many events allocates less. On an error, the envelope is the default
    /// one: never a mix of the event before and the one refused, nor an event that failed its
    /// checks.
    ///
    /// # Errors
    /// As [`Envelope::from_msgpack`].
    pub fn decode_msgpack(&mut self, bytes: &[u8]) -> Result<(), EnvelopeError> {
        body::decode_into(bytes, self)?;
        self.validate().map_err(|e| {
            *self = Envelope::default();
            EnvelopeError::Decode(e.to_string())
        })
    }

    /// [`Envelope::decode_msgpack`], except for the payload: `payload` is left `None`, and the
    /// payload's value is returned in its stored form, checked as `decode_msgpack` checks it,
    /// to be decoded only if asked for ([`StoredPayload`]); `None` when the body has no
    /// payload. For a reader of many events that needs few of their payloads.
    ///
    /// # Errors
    /// As [`Envelope::decode_msgpack`], for the payload too (and leaving the default envelope
    /// as it does).
    pub fn decode_msgpack_deferring_payload<'b>(
        &mut self,
        bytes: &'b [u8],
    ) -> Result<Option<StoredPayload<'b>>, EnvelopeError> {
        let range = body::decode_into_deferring_payload(bytes, self)?;
        self.validate().map_err(|e| {
            *self = Envelope::default();
            EnvelopeError::Decode(e.to_string())
        })?;
        range
            .map(|(range, repeats)| {
                bytes
                    .get(range)
                    .map(|payload| StoredPayload::checked(payload, repeats))
                    .ok_or_else(|| {
                        EnvelopeError::Decode("the payload's bytes are outside the body".into())
                    })
            })
            .transpose()
    }

    /// The JSON form of the envelope (without the journal-assigned fields).
    #[must_use]
    pub fn to_json_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The JSON Schema of the event's JSON form (what [`Envelope::from_json_slice`] accepts).
    #[must_use]
    pub fn json_schema() -> schemars::Schema {
        schemars::schema_for!(Envelope)
    }

    /// Every blob reference in the event: `outputRef` and string values of `refs` of the form
    /// `blake3:<64 hex digits>`.
    pub fn blob_refs(&self) -> impl Iterator<Item = &str> {
        let refs = self
            .refs
            .iter()
            .flat_map(|m| m.values())
            .filter_map(Value::as_str);
        self.output_ref
            .as_deref()
            .into_iter()
            .chain(refs)
            .filter_map(|r| r.strip_prefix(BLOB_REF_PREFIX))
            .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    }
}

/// The prefix of a reference to the journal's blob store: `blake3:<64 hex digits>`.
pub const BLOB_REF_PREFIX: &str = "blake3:";

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An event as the journal stores and returns it: the envelope and the fields the journal
/// assigned when it was appended.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// The global, gapless position.
    pub position: Position,
    /// The journal's clock at append, nanoseconds since the Unix epoch (UTC).
    pub recorded_at_ns: i64,
    /// The 1-based index of the event within its stream.
    pub stream_version: u64,
    /// The event's link in the hash chain.
    pub hash: ChainHash,
    /// The event itself.
    pub envelope: Envelope,
}

impl StoredEvent {
    /// The JSON form: the journal-assigned fields first, then the envelope's fields.
    #[must_use]
    pub fn to_json_value(&self) -> Value {
        let mut object = Map::new();
        object.insert("position".into(), Value::from(self.position.0));
        object.insert(
            "recordedAt".into(),
            Value::String(time_fmt::format_rfc3339_ns(self.recorded_at_ns)),
        );
        object.insert("hash".into(), Value::String(self.hash.to_hex()));
        object.insert("streamVersion".into(), Value::from(self.stream_version));
        if let Value::Object(fields) = self.envelope.to_json_value() {
            object.extend(fields);
        }
        Value::Object(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn no_id() -> String {
        panic!("test events carry their ids")
    }

    #[test]
    fn unknown_fields_round_trip_through_msgpack_and_json() {
        let json =
            br#"{"type":"vendor.acme.thing","eventId":"e1","timestamp":"2026-05-11T10:00:00Z",
            "sessionId":"s1","custom":{"nested":[1,2.5,"x",null,true]},"another":-7}"#;
        let envelope = Envelope::from_json_slice(json, &mut no_id).unwrap();
        assert_eq!(envelope.extra.len(), 2);
        let body = envelope.to_msgpack().unwrap();
        let back = Envelope::from_msgpack(&body).unwrap();
        assert_eq!(back, envelope);
        let expected: Value = serde_json::from_slice(json).unwrap();
        assert_eq!(back.to_json_value(), expected);
    }

    #[test]
    fn missing_event_id_is_assigned() {
        let json = br#"{"type":"session.created","timestamp":"2026-05-11T10:00:00Z"}"#;
        let envelope = Envelope::from_json_slice(json, &mut || "generated".into()).unwrap();
        assert_eq!(envelope.event_id, "generated");
    }

    #[test]
    fn bad_events_are_refused_with_the_field_named() {
        let cases: &[(&[u8], &str)] = &[
            (br#"{"type":"a","eventId":"e","timestamp":"nope"}"#, "timestamp"),
            (br#"{"eventId":"e","timestamp":"2026-05-11T10:00:00Z"}"#, "type"),
            (br#"{"type":"a","timestamp":"2026-05-11T10:00:00Z","eventId":""}"#, "eventId"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sessionId":5}"#, "sessionId"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sessionId":null}"#, "sessionId"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","taskId":""}"#, "taskId"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sequence":-1}"#, "sequence"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","position":3}"#, "position"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","provenance":"guessed"}"#, "provenance"),
            (br#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","x":1,"x":2}"#, "duplicate key `x`"),
            (br#"[1,2]"#, "JSON object"),
            (b"{\"type\":\"a\xff\"}", "JSON"),
        ];
        for (input, needle) in cases {
            let err = Envelope::from_json_slice(input, &mut || "id".into()).unwrap_err();
            assert!(
                err.to_string().contains(needle),
                "input {:?}: error {err:?} does not name {needle}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn every_id_field_is_refused_empty_naming_it_and_accepted_otherwise() {
        // The ids are the event schema's strings with `minLength: 1`: taken from the schema, so
        // that an id it adds and `Envelope::empty_id` misses fails here.
        let schema: Value = serde_json::from_str(include_str!(
            "../schemas/agentruntime/agentruntime-event.schema.json"
        ))
        .expect("the vendored schema is JSON");
        let ids: Vec<&str> = schema["properties"]
            .as_object()
            .expect("the schema's properties")
            .iter()
            .filter(|(_, property)| property["minLength"] == 1)
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(ids.len(), 23, "eventId and 22 ids: {ids:?}");
        let with = |name: &str, value: &str| {
            let mut json = serde_json::json!({
                "type": "a.b", "eventId": "e", "timestamp": "2026-05-11T10:00:00Z",
            });
            json[name] = Value::String(value.into());
            Envelope::from_json_value(json, &mut || "id".into())
        };
        for name in ids {
            let error = with(name, "").expect_err("an empty id").to_string();
            assert_eq!(error, format!("field `{name}` must not be empty"));
            let envelope = with(name, "x1").expect("a present id");
            assert_eq!(envelope.validate(), Ok(()));
        }
    }

    #[test]
    fn stream_key_prefers_session_then_task_then_runtime() {
        let mut e = Envelope::new("a", "e", "2026-05-11T10:00:00Z");
        assert_eq!(e.stream_key(), "none:");
        e.runtime_id = Some("r".into());
        assert_eq!(e.stream_key(), "runtime:r");
        e.task_id = Some("t".into());
        assert_eq!(e.stream_key(), "task:t");
        e.session_id = Some("s".into());
        assert_eq!(e.stream_key(), "session:s");
    }

    #[test]
    fn an_envelope_stays_small_to_move() {
        // Every event read is moved by value several times on its way out; an unboxed map
        // field (72 bytes each) would bring back the copies `Object` removed.
        let size = std::mem::size_of::<Envelope>();
        assert!(
            size <= 1_400,
            "Envelope is {size} bytes; box its large fields"
        );
    }

    #[test]
    fn blob_refs_come_from_output_ref_and_refs() {
        let hex = "ab".repeat(32);
        let mut e = Envelope::new("tool.result", "e", "2026-05-11T10:00:00Z");
        e.output_ref = Some(format!("blake3:{hex}"));
        let mut refs = Map::new();
        refs.insert("log".into(), Value::String(format!("blake3:{hex}")));
        refs.insert("other".into(), Value::String("input://x".into()));
        e.refs = Some(Box::new(refs));
        assert_eq!(e.blob_refs().count(), 2);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            ".{0,20}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The strict way alone: the whole event parsed into a `Value`, then into its fields.
    fn strictly(bytes: &[u8]) -> Result<Envelope, String> {
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("assigned-{n}")
        };
        strict_json::parse(bytes)
            .map_err(EnvelopeError::NotJson)
            .and_then(|v| Envelope::from_json_value(v, &mut id))
            .map_err(|e| e.to_string())
    }

    /// `from_json_slice`, with the same ids assigned.
    fn read(bytes: &[u8]) -> Result<Envelope, String> {
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("assigned-{n}")
        };
        Envelope::from_json_slice(bytes, &mut id).map_err(|e| e.to_string())
    }

    #[test]
    fn plain_json_is_read_straight_and_the_rest_strictly() {
        let mut id = || "assigned".to_string();
        let plain = br#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":{"a":{"b":[1]}}}"#;
        assert!(Envelope::from_plain_json(plain, &mut id).is_some());
        let no_id = br#"{"type":"t","timestamp":"2026-05-11T10:00:00Z"}"#;
        let read = Envelope::from_plain_json(no_id, &mut id).map(|e| e.event_id);
        assert_eq!(read.as_deref(), Some("assigned"));
        for strict in [
            &br#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":{"a":1,"a":1}}"#[..],
            br#"{"type":"t","eventId":"","timestamp":"2026-05-11T10:00:00Z"}"#,
            br#"{"type":"t","timestamp":"2026-05-11T10:00:00Z","payload":"eventId"}"#,
            br#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","hash":"h"}"#,
        ] {
            assert!(
                Envelope::from_plain_json(strict, &mut id).is_none(),
                "{}",
                String::from_utf8_lossy(strict)
            );
        }
    }

    #[test]
    fn json_read_straight_or_strictly_gives_the_same_event_or_error() {
        let lines: &[&str] = &[
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sessionId":"s","payload":{"a":[1,2.5,"x",null,true],"b":{"a":1}},"xCustom":{"k":"v"}}"#,
            r#"{"type":"t","timestamp":"2026-05-11T10:00:00Z"}"#,
            r#"{"type":"t","eventId":"","timestamp":"2026-05-11T10:00:00Z"}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","position":3}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":{"a":1,"a":2}}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","x":{"\u0061":1,"a":2}}"#,
            r#"{"type":"t","eventId":"e","type":"u","timestamp":"2026-05-11T10:00:00Z"}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":{"n":123456789012345678901234567890}}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sessionId":null}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sessionId":5}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":null}"#,
            r#"{"eventId":"e","timestamp":"2026-05-11T10:00:00Z"}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z"} {}"#,
            r#"["type"]"#,
            r#"{"type":"a","eventId":"e","timestamp":"nope"}"#,
            r#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","taskId":""}"#,
            r#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","sequence":-1}"#,
            r#"{"type":"a","eventId":"e","timestamp":"2026-05-11T10:00:00Z","provenance":"guessed"}"#,
            r#"{"type":"","eventId":"e","timestamp":"2026-05-11T10:00:00Z"}"#,
            r#"{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","s":"\ud800"}"#,
            r#"{"type":"tool.started","eventId":"é\"\\","timestamp":"2026-05-11T10:00:00Z","payload":{"text":"line\nnext \u00e9"}}"#,
        ];
        for line in lines {
            assert_eq!(read(line.as_bytes()), strictly(line.as_bytes()), "{line}");
        }
        let deep = |n: usize| {
            format!(
                r#"{{"type":"t","eventId":"e","timestamp":"2026-05-11T10:00:00Z","payload":{}1{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        for n in [
            NEST_LEVELS_MAX - 2,
            NEST_LEVELS_MAX - 1,
            NEST_LEVELS_MAX,
            200,
        ] {
            assert_eq!(
                read(deep(n).as_bytes()),
                strictly(deep(n).as_bytes()),
                "{n} levels"
            );
        }
    }

    proptest! {
        #[test]
        fn json_read_straight_equals_the_strict_way(
            session in proptest::option::of("[a-z0-9]{1,12}"),
            payload in proptest::option::of(arb_json()),
            extra in prop::collection::btree_map("x[a-z]{1,6}", arb_json(), 0..4),
        ) {
            let mut e = Envelope::new("tool.started", "evt", "2026-05-11T10:00:00.5+02:00");
            e.session_id = session;
            e.payload = payload;
            e.extra = extra;
            let json = serde_json::to_vec(&e.to_json_value()).unwrap();
            prop_assert_eq!(read(&json), strictly(&json));
            prop_assert_eq!(read(&json).unwrap(), e);
        }

        #[test]
        fn msgpack_round_trip(
            session in proptest::option::of("[a-z0-9]{1,12}"),
            task in proptest::option::of("[a-z0-9]{1,12}"),
            runtime in proptest::option::of(".{1,12}"),
            sequence in proptest::option::of(any::<u64>()),
            payload in proptest::option::of(arb_json()),
            extra in prop::collection::btree_map("x[a-z]{1,6}", arb_json(), 0..4),
        ) {
            let mut e = Envelope::new("tool.started", "evt", "2026-05-11T10:00:00.5+02:00");
            e.session_id = session;
            e.task_id = task;
            e.runtime_id = runtime;
            e.sequence = sequence;
            e.payload = payload;
            e.extra = extra;
            let body = e.to_msgpack().unwrap();
            prop_assert_eq!(Envelope::from_msgpack(&body).unwrap(), e.clone());
            prop_assert_eq!(EventIds::from_msgpack(&body).unwrap(), e.ids());
            let json = serde_json::to_vec(&e.to_json_value()).unwrap();
            prop_assert_eq!(Envelope::from_json_slice(&json, &mut no_id).unwrap(), e);
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_body_decoder(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let decoded = Envelope::from_msgpack(&bytes);
            let ids = EventIds::from_msgpack(&bytes);
            if let Ok(e) = decoded {
                // What the full decoder accepts, the id reader reads alike.
                prop_assert_eq!(ids.unwrap(), e.ids());
            }
            let _ = Envelope::from_json_slice(&bytes, &mut || "id".into());
        }
    }
}
