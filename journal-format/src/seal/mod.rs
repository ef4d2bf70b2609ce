//! Sealing an event's content: which fields are content and which are audit metadata, and the
//! content encrypted under the event's key (AES-256-GCM-SIV, `cipher`) into the `encrypted`
//! field that takes its place in the stored body (docs/REDACTION.md, docs/FORMAT.md "Encrypted
//! content"). `content` writes, removes and puts back the content fields.
//!
//! The split: **metadata** stays readable in the stored body (the type, every id, the times,
//! `status` and `phase`, the typed control-plane objects, and in `payload` the keys named in
//! [`PAYLOAD_METADATA_KEYS`] or ending in `Id`, `Ids`, `At`, `Ref` or `Refs`); **content** is
//! sealed (every other payload key, or the whole payload when it is not an object,
//! `statusReason`, the `output`, `trajectory` and `historyBoundary` objects, and every unknown
//! field but `supersedes`). Unknown payload keys are content: what is not known to be metadata
//! is kept secret.
//!
//! The key of an event is derived from its subject's data key and its id ([`event_key`]), and
//! the cipher is deterministic, so sealing the same event twice gives the same bytes (an event
//! sent again is recognised as a duplicate by its bytes).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::envelope::{self, Envelope};

mod cipher;
mod content;

pub use cipher::Form;

/// The field of a stored body holding the sealed content.
pub const SEALED_FIELD: &str = "encrypted";
/// The field a read adds to an event whose content was redacted (its key destroyed).
pub const REDACTED_FIELD: &str = "redacted";
/// The field a read adds, in an encrypted journal, to an event stored in plaintext (written
/// before the journal was encrypted): `"unencrypted": true`.
pub const UNENCRYPTED_FIELD: &str = "unencrypted";
/// What a redacted content field reads as.
pub const REDACTED_TEXT: &str = "[redacted]";
/// The event type of a redaction fact; never sealed.
pub const REDACTED_EVENT_TYPE: &str = "journal.redacted";

/// Defines [`PAYLOAD_METADATA_KEYS`] and the match that tests a key against it, from one list.
macro_rules! payload_metadata_keys {
    ($($key:literal,)*) => {
        /// Payload keys that are audit metadata, kept readable (besides keys ending in `Id`,
        /// `Ids`, `At`, `Ref` or `Refs`): statuses, outcomes and decisions, tool names, kinds and
        /// counts, and the fields the read models' folds require.
        pub const PAYLOAD_METADATA_KEYS: &[&str] = &[$($key),*];

        /// Whether `key` is one of [`PAYLOAD_METADATA_KEYS`]: a `match`, which the compiler
        /// turns into a dispatch on the length and the bytes, cheaper than a search per key.
        fn is_listed_metadata(key: &str) -> bool {
            matches!(key, $($key)|*)
        }
    };
}

payload_metadata_keys! {
    "accepted",
    "actionType",
    "adapterKind",
    "attemptNumber",
    "cacheReadTokens",
    "cacheWriteTokens",
    "change",
    "contentType",
    "costUsd",
    "decidedBy",
    "decision",
    "decisionKind",
    "dedupeKey",
    "dispatchContext",
    "enabled",
    "errorType",
    "evidenceRequirements",
    "exists",
    "exitCode",
    "exitStatus",
    "failureCategory",
    "fromAgent",
    "fromState",
    "inputTokens",
    "intervalSeconds",
    "items",
    "kind",
    "machineStatus",
    "maxAttempts",
    "missedRuns",
    "model",
    "name",
    "nextAttemptPolicy",
    "outcome",
    "outputTokens",
    "priority",
    "reasoningTokens",
    "reasons",
    "requestedBy",
    "retryClass",
    "retryable",
    "role",
    "schema",
    "scope",
    "signal",
    "status",
    "statusAtCapture",
    "task",
    "taskType",
    "toAgent",
    "toState",
    "tokensAfter",
    "tokensBefore",
    "toolName",
    "totalTokens",
    "trigger",
    "verification",
    "verificationNudgeNeeded",
    "verificationOutcomes",
    "version",
    "workflowSignal",
}

const PAYLOAD_METADATA_SUFFIXES: &[&str] = &["Id", "Ids", "At", "Ref", "Refs"];

/// Whether a top-level payload key is audit metadata (kept readable) rather than content.
#[must_use]
pub fn is_payload_metadata(key: &str) -> bool {
    is_listed_metadata(key)
        || PAYLOAD_METADATA_SUFFIXES
            .iter()
            .any(|s| key.len() > s.len() && key.ends_with(s))
}

/// A sealing or opening that failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// The `encrypted` field is not of the form docs/FORMAT.md gives.
    #[error("the sealed content is malformed: {0}")]
    Malformed(String),
    /// The ciphertext does not open with the key: another key, or altered bytes.
    #[error("the sealed content does not open with its key (another key, or altered bytes)")]
    NotOpened,
}

/// The sealed content as stored: the key it is sealed under, its form, its ciphertext, and the
/// names of the fields it holds (`payload.<key>`, `payload` or a top-level name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The key reference: the subject and its key's generation, `<subject>/<generation>`.
    pub key: String,
    /// How it was encrypted: a stored `nonce` marks the first form.
    pub form: Form,
    /// The ciphertext with its 16-byte tag.
    pub data: Vec<u8>,
    /// The sealed fields' names.
    pub fields: Vec<String>,
}

impl Sealed {
    /// The value stored in [`SEALED_FIELD`].
    #[must_use]
    pub fn into_value(self) -> Value {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut map = Map::with_capacity(4);
        map.insert("key".into(), Value::String(self.key));
        if let Form::XChaCha { nonce } = &self.form {
            map.insert("nonce".into(), Value::String(b64.encode(nonce)));
        }
        map.insert("data".into(), Value::String(b64.encode(&self.data)));
        map.insert(
            "fields".into(),
            Value::Array(self.fields.into_iter().map(Value::String).collect()),
        );
        Value::Object(map)
    }

    /// The sealed content of `envelope`, `None` when it has none (a plaintext event).
    ///
    /// # Errors
    /// [`SealError::Malformed`] when the field is not of the documented form.
    pub fn of(envelope: &Envelope) -> Result<Option<Sealed>, SealError> {
        let Some(value) = envelope.extra.get(SEALED_FIELD) else {
            return Ok(None);
        };
        let malformed = |what: &str| SealError::Malformed(what.to_string());
        let b64 = base64::engine::general_purpose::STANDARD;
        let text = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(&format!("no string `{name}`")))
        };
        let form = match value.get("nonce") {
            None => Form::Siv,
            Some(_) => {
                let bytes = b64
                    .decode(text("nonce")?)
                    .map_err(|e| malformed(&format!("nonce: {e}")))?;
                let nonce = bytes
                    .try_into()
                    .map_err(|_| malformed("the nonce is not 24 bytes"))?;
                Form::XChaCha { nonce }
            }
        };
        let data = b64
            .decode(text("data")?)
            .map_err(|e| malformed(&format!("data: {e}")))?;
        let fields = value
            .get("fields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(Sealed {
            key: text("key")?.to_string(),
            form,
            data,
            fields,
        }))
    }
}

/// The key of one event: BLAKE3 keyed by its subject's data key over a context and the event id,
/// so that keys of single events can be kept when their subject's data key is destroyed.
#[must_use]
pub fn event_key(data_key: &[u8; 32], event_id: &str) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_keyed(data_key);
    hasher.update(b"journal event key v1\0");
    hasher.update(event_id.as_bytes());
    *hasher.finalize().as_bytes()
}

/// Whether events of this type are sealed: everything but the journal's redaction facts,
/// which are audit metadata whole (the engine leaves only its own facts of that type
/// unencrypted, not a producer's).
#[must_use]
pub fn is_sealed_type(event_type: &str) -> bool {
    event_type != REDACTED_EVENT_TYPE
}

/// `envelope` with its content sealed under `key_ref`'s event key: its metadata, and the
/// [`SEALED_FIELD`] holding the content. The event id and key reference are bound to the
/// ciphertext as associated data, so content cannot be moved to another event.
///
/// # Errors
/// As [`seal_in_place`].
pub fn seal(
    envelope: &Envelope,
    key_ref: &str,
    event_key: &[u8; 32],
) -> Result<Envelope, SealError> {
    let mut sealed = envelope.clone();
    seal_in_place(&mut sealed, key_ref, event_key)?;
    Ok(sealed)
}

/// [`seal`] in place, for an envelope that is not needed in plaintext afterwards: its content
/// is written as the plaintext ([`Form::Siv`]), sealed, then dropped from the envelope, and the
/// sealed content stored in [`SEALED_FIELD`].
///
/// # Errors
/// [`SealError::Malformed`] when the content does not encode (it always does for an envelope
/// that passed its checks); the envelope is then as it was.
pub fn seal_in_place(
    envelope: &mut Envelope,
    key_ref: &str,
    event_key: &[u8; 32],
) -> Result<(), SealError> {
    let mut data = Vec::with_capacity(512);
    let fields = content::write(envelope, &mut data)
        .map_err(|e| SealError::Malformed(format!("the content: {e}")))?;
    cipher::seal(&envelope.event_id, key_ref, event_key, &mut data)?;
    content::remove(envelope);
    let sealed = Sealed {
        key: key_ref.to_string(),
        form: Form::Siv,
        data,
        fields,
    };
    envelope
        .extra
        .insert(SEALED_FIELD.to_string(), sealed.into_value());
    Ok(())
}

/// Opens `envelope`'s sealed content with its event key, putting the content fields back in
/// place and removing [`SEALED_FIELD`].
///
/// # Errors
/// [`SealError::NotOpened`] when the key is not the one it was sealed under or the bytes were
/// altered; [`SealError::Malformed`] for a malformed field. `envelope` is unchanged on error.
pub fn open(
    envelope: &mut Envelope,
    sealed: Sealed,
    event_key: &[u8; 32],
) -> Result<(), SealError> {
    let Sealed {
        key,
        form,
        mut data,
        ..
    } = sealed;
    cipher::open(form, &envelope.event_id, &key, event_key, &mut data)?;
    let content = match form {
        Form::Siv => envelope::parts::read_map(&data, "the sealed content")
            .map_err(|e| SealError::Malformed(format!("the opened content: {e}")))?,
        Form::XChaCha { .. } => serde_json::from_slice(&data)
            .map_err(|e| SealError::Malformed(format!("the opened content: {e}")))?,
    };
    envelope.extra.remove(SEALED_FIELD);
    content::put(envelope, content);
    Ok(())
}

/// Marks `envelope`, whose key was destroyed, as redacted: each sealed field reads
/// [`REDACTED_TEXT`], [`SEALED_FIELD`] is removed, and [`REDACTED_FIELD`] says why (`why`: the
/// redaction fact's id, who and why, as the key store recorded them).
pub fn mark_redacted(envelope: &mut Envelope, sealed: &Sealed, why: Map<String, Value>) {
    envelope.extra.remove(SEALED_FIELD);
    let mut content = Map::new();
    let mut payload = Map::new();
    for name in &sealed.fields {
        let redacted = Value::String(REDACTED_TEXT.into());
        match name.strip_prefix("payload.") {
            Some(key) => {
                payload.insert(key.to_string(), redacted);
            }
            None => {
                content.insert(name.clone(), redacted);
            }
        }
    }
    if !payload.is_empty() {
        content.insert("payload".into(), Value::Object(payload));
    }
    // Typed objects hold objects; a redacted one reads as an object saying so.
    for name in content::OBJECTS {
        if let Some(v) = content.get_mut(name) {
            let mut o = Map::new();
            o.insert("content".into(), v.take());
            *v = Value::Object(o);
        }
    }
    content::put(envelope, content);
    envelope
        .extra
        .insert(REDACTED_FIELD.to_string(), Value::Object(why));
}

/// The stored names of an envelope's unknown fields the journal reserves on reads: a producer
/// may not append them.
pub const RESERVED_FIELDS: [&str; 3] = [SEALED_FIELD, REDACTED_FIELD, UNENCRYPTED_FIELD];

/// The first reserved field `extra` holds, if any.
#[must_use]
pub fn reserved_field(extra: &BTreeMap<String, Value>) -> Option<&'static str> {
    RESERVED_FIELDS
        .into_iter()
        .find(|name| extra.contains_key(*name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::SUPERSEDES_FIELD;
    use serde_json::json;

    /// The text between `<!-- golden:NAME -->` ```text and ``` in FORMAT.md.
    fn golden_block(name: &str) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
        let doc = std::fs::read_to_string(path).expect("docs/FORMAT.md is readable");
        let marker = format!("<!-- golden:{name} -->");
        let start = doc.find(&marker).expect("the marker");
        let rest = &doc[start + marker.len()..];
        let open = rest.find("```text\n").expect("code block after marker") + "```text\n".len();
        let close = rest[open..].find("```").expect("closed code block");
        rest[open..open + close].trim().to_string()
    }

    /// The encrypted event of docs/FORMAT.md: `tool.completed` `evt_1` of session `s1`, payload
    /// `{"toolName":"bash","output":"hello"}`, sealed under data key `42 × 32` as
    /// `session:s1/1`.
    #[test]
    fn golden_encrypted_event_matches_format_md() {
        let mut e = Envelope::new("tool.completed", "evt_1", "2026-05-11T10:00:00Z");
        e.session_id = Some("s1".into());
        e.payload = Some(json!({"toolName": "bash", "output": "hello"}));
        let key = event_key(&[0x42; 32], "evt_1");
        let sealed = seal(&e, "session:s1/1", &key).expect("seals");
        let text = serde_json::to_string_pretty(&sealed).expect("json");
        assert_eq!(
            golden_block("encrypted"),
            text,
            "docs/FORMAT.md's encrypted event differs; new text:\n{text}"
        );
    }

    /// Content in the XChaCha form (XChaCha20-Poly1305 over JSON) opens: the FORMAT.md event
    /// of that form, and a sealing of every kind of content field.
    #[test]
    fn the_xchacha_form_opens() {
        let golden = golden_block("encrypted-xchacha");
        let mut stored = Envelope::from_json_slice(golden.as_bytes(), &mut String::new)
            .expect("the golden event parses");
        let sealed = Sealed::of(&stored).expect("form").expect("sealed");
        assert!(matches!(sealed.form, Form::XChaCha { .. }));
        open(&mut stored, sealed, &event_key(&[0x42; 32], "evt_1")).expect("opens");
        assert_eq!(
            stored.payload,
            Some(json!({"toolName": "bash", "output": "hello"}))
        );

        let event = tool_result();
        let key = event_key(&[7; 32], "evt_1");
        let mut first = event.clone();
        let plaintext = serde_json::to_vec(&json!({
            "payload": {"output": "AKIA-SECRET"},
            "statusReason": "printed AKIA-SECRET",
            "vendorNote": "private note",
        }))
        .expect("json");
        let (nonce, data) = cipher::seal_xchacha("evt_1", "session:s1/1", &key, &plaintext);
        content::remove(&mut first);
        let sealed = Sealed {
            key: "session:s1/1".into(),
            form: Form::XChaCha { nonce },
            data,
            fields: vec![
                "payload.output".into(),
                "statusReason".into(),
                "vendorNote".into(),
            ],
        };
        first.extra.insert(SEALED_FIELD.into(), sealed.into_value());
        let sealed = Sealed::of(&first).expect("form").expect("sealed");
        open(&mut first, sealed, &key).expect("opens");
        assert_eq!(first, event);
    }

    /// A JSON object as a typed object's value.
    fn object(value: Value) -> Option<Box<Map<String, Value>>> {
        match value {
            Value::Object(map) => Some(Box::new(map)),
            _ => None,
        }
    }

    /// Every kind of content survives sealing and is hidden: a payload that is not a map, the
    /// typed objects, an empty map payload and one with only metadata (sealed as the empty
    /// map), a null payload.
    #[test]
    fn every_kind_of_content_round_trips() {
        let key = event_key(&[9; 32], "evt_1");
        let mut whole = Envelope::new("note.added", "evt_1", "2026-05-11T10:00:00Z");
        whole.payload = Some(json!(["alpha-secret", 1, {"b": null}]));
        whole.output = object(json!({"text": "out-secret"}));
        whole.trajectory = object(json!({"steps": ["steps-secret"]}));
        whole.history_boundary = object(json!({"kind": "compaction-secret"}));
        let mut empty = Envelope::new("tool.started", "evt_1", "2026-05-11T10:00:00Z");
        empty.payload = Some(json!({}));
        let mut only_metadata = Envelope::new("tool.started", "evt_1", "2026-05-11T10:00:00Z");
        only_metadata.payload = Some(json!({"toolName": "bash", "callId": "c1"}));
        let mut null = Envelope::new("tool.started", "evt_1", "2026-05-11T10:00:00Z");
        null.payload = Some(Value::Null);
        let cases = [whole, empty, only_metadata, null, tool_result()];
        let fields: [&[&str]; 5] = [
            &["payload", "output", "trajectory", "historyBoundary"],
            &[],
            &[],
            &[],
            &["payload.output", "statusReason", "vendorNote"],
        ];
        for (event, fields) in cases.into_iter().zip(fields) {
            let mut sealed = seal(&event, "session:s1/1", &key).expect("seals");
            let text = serde_json::to_string(&sealed).expect("json");
            let hidden = ["secret", "SECRET", "private note"];
            assert!(hidden.iter().all(|h| !text.contains(h)), "{text}");
            let s = Sealed::of(&sealed).expect("form").expect("sealed");
            assert_eq!(s.form, Form::Siv);
            assert_eq!(s.fields, fields, "{text}");
            open(&mut sealed, s, &key).expect("opens");
            assert_eq!(sealed, event);
        }
    }

    #[test]
    fn metadata_keys_are_sorted_and_each_is_metadata() {
        let mut sorted = PAYLOAD_METADATA_KEYS.to_vec();
        sorted.sort_unstable();
        assert_eq!(
            sorted, PAYLOAD_METADATA_KEYS,
            "kept sorted, for the reader of the docs"
        );
        assert!(PAYLOAD_METADATA_KEYS.iter().all(|k| is_payload_metadata(k)));
        for content in [
            "output",
            "arguments",
            "prompt",
            "text",
            "Id",
            "toolNames",
            "",
        ] {
            assert!(!is_payload_metadata(content), "{content} is content");
        }
        assert!(is_payload_metadata("callId") && is_payload_metadata("blobRefs"));
    }

    fn tool_result() -> Envelope {
        let mut e = Envelope::new("tool.completed", "evt_1", "2026-05-11T10:00:00Z");
        e.session_id = Some("s1".into());
        e.tool_call_id = Some("call_1".into());
        e.status = Some("succeeded".into());
        e.status_reason = Some("printed AKIA-SECRET".into());
        e.payload = Some(json!({"toolName": "bash", "output": "AKIA-SECRET", "exitCode": 0}));
        e.extra.insert("vendorNote".into(), json!("private note"));
        e.extra.insert(SUPERSEDES_FIELD.into(), json!("evt_0"));
        e
    }

    #[test]
    fn sealing_keeps_metadata_and_hides_content_then_opens_to_the_same_event() {
        let key = event_key(&[7; 32], "evt_1");
        let event = tool_result();
        let sealed = seal(&event, "session:s1/1", &key).expect("seals");
        let text = serde_json::to_string(&sealed).expect("json");
        assert!(!text.contains("AKIA-SECRET") && !text.contains("private note"));
        assert!(text.contains("\"toolName\":\"bash\"") && text.contains("call_1"));
        assert!(text.contains("evt_0"), "supersedes stays readable");
        let mut opened = sealed.clone();
        let s = Sealed::of(&opened).expect("form").expect("sealed");
        assert_eq!(
            s.fields,
            ["payload.output", "statusReason", "vendorNote"].map(String::from)
        );
        open(&mut opened, s, &key).expect("opens");
        assert_eq!(opened, event);
        // Deterministic: the same event seals to the same bytes, in place or from a copy.
        assert_eq!(seal(&event, "session:s1/1", &key).expect("seals"), sealed);
        let mut in_place = event.clone();
        seal_in_place(&mut in_place, "session:s1/1", &key).expect("seals");
        assert_eq!(in_place, sealed);
    }

    #[test]
    fn another_key_or_another_event_id_does_not_open() {
        let key = event_key(&[7; 32], "evt_1");
        let sealed = seal(&tool_result(), "session:s1/1", &key).expect("seals");
        let s = Sealed::of(&sealed).expect("form").expect("sealed");
        let mut other = sealed.clone();
        assert_eq!(
            open(&mut other, s.clone(), &event_key(&[8; 32], "evt_1")),
            Err(SealError::NotOpened)
        );
        other.event_id = "evt_2".into();
        assert_eq!(open(&mut other, s, &key), Err(SealError::NotOpened));
    }

    #[test]
    fn a_redacted_event_reads_redacted_in_each_sealed_field() {
        let key = event_key(&[7; 32], "evt_1");
        let mut sealed = seal(&tool_result(), "session:s1/1", &key).expect("seals");
        let s = Sealed::of(&sealed).expect("form").expect("sealed");
        let mut why = Map::new();
        why.insert("factEventId".into(), json!("red_1"));
        mark_redacted(&mut sealed, &s, why);
        assert_eq!(
            sealed.payload,
            Some(json!({"toolName": "bash", "exitCode": 0, "output": "[redacted]"}))
        );
        assert_eq!(sealed.status_reason.as_deref(), Some(REDACTED_TEXT));
        assert_eq!(sealed.extra.get("vendorNote"), Some(&json!(REDACTED_TEXT)));
        assert!(sealed.extra.contains_key(REDACTED_FIELD));
        assert!(!sealed.extra.contains_key(SEALED_FIELD));
    }
}
