//! Building the events of one imported file: deterministic ids, the native type and namespace
//! and provenance on every event, large text moved to blobs, and the summary's event counts.

use std::collections::{BTreeSet, HashSet};

use journal_format::{Envelope, Provenance};
use serde_json::{Map, Value};

use super::{Blob, Parsed, Source, Summary};

/// Text longer than this (in bytes) goes to a blob; the event keeps the reference and a
/// preview.
pub(super) const INLINE_TEXT_MAX: usize = 16 * 1024;

/// The preview kept inline when text goes to a blob, in bytes.
const PREVIEW_MAX: usize = 512;

/// The events of one file being built.
pub(super) struct Emitter {
    source: Source,
    pub events: Vec<Envelope>,
    blobs: Vec<Blob>,
    blob_refs: HashSet<String>,
    ids: HashSet<String>,
    sessions: BTreeSet<String>,
    pub summary: Summary,
}

impl Emitter {
    pub fn new(source: Source) -> Emitter {
        Emitter {
            source,
            events: Vec::new(),
            blobs: Vec::new(),
            blob_refs: HashSet::new(),
            ids: HashSet::new(),
            sessions: BTreeSet::new(),
            summary: Summary::default(),
        }
    }

    /// A new event of `event_type` for `session`, with the id `<source>:<session>:<key>`,
    /// observed, carrying `native_type`. Returns `None` when an event with that id was made
    /// already (a record repeated in the source).
    pub fn emit(
        &mut self,
        event_type: &str,
        session: &str,
        key: &str,
        timestamp: &str,
        native_type: &str,
    ) -> Option<&mut Envelope> {
        let id = format!("{}:{session}:{key}", self.source.name());
        if !self.ids.insert(id.clone()) {
            return None;
        }
        let mut e = Envelope::new(event_type, id, timestamp);
        e.session_id = Some(session.to_string());
        e.native_ns = Some(self.source.namespace().to_string());
        e.native_type = Some(native_type.to_string());
        e.provenance = Some(Provenance::Observed);
        self.sessions.insert(session.to_string());
        self.events.push(e);
        self.events.last_mut()
    }

    /// A vendor event carrying a record the mapping keeps but does not map.
    pub fn vendor(
        &mut self,
        kind: &str,
        session: &str,
        key: &str,
        timestamp: &str,
        record: &Map<String, Value>,
    ) -> Option<&mut Envelope> {
        let name: String = kind
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let event_type = format!("vendor.{}.{name}", self.source.namespace());
        let payload = self.value(&Value::Object(record.clone()));
        let e = self.emit(&event_type, session, key, timestamp, kind)?;
        e.payload = Some(payload);
        Some(e)
    }

    /// Stores `bytes` as a blob and returns its reference.
    pub fn blob(&mut self, bytes: Vec<u8>) -> String {
        let reference = format!(
            "{}{}",
            journal_format::envelope::BLOB_REF_PREFIX,
            blake3::hash(&bytes).to_hex()
        );
        if self.blob_refs.insert(reference.clone()) {
            self.blobs.push(Blob {
                reference: reference.clone(),
                bytes,
            });
        }
        reference
    }

    /// Text to put in a payload: inline when short; otherwise a blob, with a preview and the
    /// length kept inline. Returns `(inline text, blob reference)`.
    pub fn text(&mut self, text: &str) -> (String, Option<String>) {
        if text.len() <= INLINE_TEXT_MAX {
            return (text.to_string(), None);
        }
        let mut cut = PREVIEW_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let preview = format!(
            "{}… ({} bytes, stored as a blob)",
            text.get(..cut).unwrap_or(""),
            text.len()
        );
        let reference = self.blob(text.as_bytes().to_vec());
        (preview, Some(reference))
    }

    /// A JSON value to put in a payload: as is when small; otherwise a blob, with
    /// `{"ref": ..., "bytes": n}` in its place.
    pub fn value(&mut self, value: &Value) -> Value {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        if bytes.len() <= INLINE_TEXT_MAX {
            return value.clone();
        }
        let len = bytes.len();
        let reference = self.blob(bytes);
        serde_json::json!({"ref": reference, "bytes": len, "contentType": "application/json"})
    }

    /// The parsed file, with the summary's event counts and sessions filled in, and null payload
    /// fields left out.
    pub fn finish(mut self) -> Parsed {
        for e in &mut self.events {
            // Absent facts are left out, not written as nulls.
            if let Some(Value::Object(payload)) = &mut e.payload {
                payload.retain(|_, v| !v.is_null());
            }
        }
        for e in &self.events {
            *self
                .summary
                .events_by_type
                .entry(e.event_type.clone())
                .or_default() += 1;
        }
        self.summary.events = self.events.len() as u64;
        self.summary.sessions = self.sessions.into_iter().collect();
        Parsed {
            events: self.events,
            blobs: self.blobs,
            summary: self.summary,
        }
    }
}

/// The text of a content value: a string, or the `text` of each block of an array, joined.
pub(super) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
