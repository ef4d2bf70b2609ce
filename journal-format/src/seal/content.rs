//! An event's content as the plaintext that is sealed: written from the envelope as one
//! MessagePack map of the content fields by stored name (a map payload's content keys under
//! `payload`), taken out of the envelope once sealed, and put back when opened.
//!
//! The map's entries, in this order: `payload` (a map of the payload's content keys in their
//! order, or the whole payload when it is neither a map nor null), `statusReason`, `output`,
//! `trajectory`, `historyBoundary`, then the unknown fields but `supersedes` in name order.
//! [`write`] and [`remove`] decide what is content the same way (the payload's keys by
//! [`is_content_key`], the unknown fields by [`is_content_extra`], the typed objects by
//! [`OBJECTS`]), so what is written is what is removed.

use serde_json::{Map, Value};

use super::is_payload_metadata;
use crate::envelope::{parts, Envelope, SUPERSEDES_FIELD};
use crate::error::EnvelopeError;

/// Whether a key of a map payload is content.
fn is_content_key(key: &str) -> bool {
    !is_payload_metadata(key)
}

/// Whether an unknown field is content: all of them but `supersedes`, which the read models
/// follow.
fn is_content_extra(name: &str) -> bool {
    name != SUPERSEDES_FIELD
}

/// The typed objects that are content whole, by stored name, in the order they are written.
pub(super) const OBJECTS: [&str; 3] = ["output", "trajectory", "historyBoundary"];

/// The envelope's typed objects, under the names of [`OBJECTS`].
fn objects(envelope: &Envelope) -> [(&'static str, Option<&Map<String, Value>>); 3] {
    [
        (OBJECTS[0], envelope.output.as_deref()),
        (OBJECTS[1], envelope.trajectory.as_deref()),
        (OBJECTS[2], envelope.history_boundary.as_deref()),
    ]
}

/// The envelope's typed object named `name` (one of [`OBJECTS`]), to set.
fn object_slot<'e>(
    envelope: &'e mut Envelope,
    name: &str,
) -> Option<&'e mut Option<Box<Map<String, Value>>>> {
    match name {
        "output" => Some(&mut envelope.output),
        "trajectory" => Some(&mut envelope.trajectory),
        "historyBoundary" => Some(&mut envelope.history_boundary),
        _ => None,
    }
}

/// The payload's part in the content.
enum PayloadPart<'a> {
    /// A map payload's content keys: the map, and how many of its keys are content (one or
    /// more).
    Keys(&'a Map<String, Value>, usize),
    /// A payload that is neither a map nor null, content whole.
    Whole(&'a Value),
}

/// The payload's part in the content of `envelope`: `None` for no payload, a null one, or a
/// map without content keys.
fn payload_part(envelope: &Envelope) -> Option<PayloadPart<'_>> {
    match envelope.payload.as_ref()? {
        Value::Object(map) => {
            let count = map.keys().filter(|k| is_content_key(k)).count();
            (count > 0).then_some(PayloadPart::Keys(map, count))
        }
        Value::Null => None,
        other => Some(PayloadPart::Whole(other)),
    }
}

/// Appends the content of `envelope` to `out` as the map the module's doc describes, and
/// returns the sealed fields' names (`payload.<key>`, `payload` or a top-level name). The
/// envelope is not changed.
///
/// # Errors
/// [`EnvelopeError::Encode`] for a value an event may not hold (the envelope's own checks
/// refuse it first).
pub(super) fn write(envelope: &Envelope, out: &mut Vec<u8>) -> Result<Vec<String>, EnvelopeError> {
    let payload = payload_part(envelope);
    let objects = objects(envelope);
    let entries = usize::from(payload.is_some())
        + usize::from(envelope.status_reason.is_some())
        + objects.iter().filter(|(_, o)| o.is_some()).count()
        + envelope
            .extra
            .keys()
            .filter(|n| is_content_extra(n))
            .count();
    parts::map_len(out, entries)?;
    let mut fields = Vec::with_capacity(entries + 8);
    match payload {
        Some(PayloadPart::Keys(map, count)) => {
            parts::str(out, "payload")?;
            parts::map_len(out, count)?;
            for (key, value) in map.iter().filter(|(k, _)| is_content_key(k)) {
                parts::str(out, key)?;
                parts::value(out, value, 2)?;
                let mut name = String::with_capacity("payload.".len() + key.len());
                name.push_str("payload.");
                name.push_str(key);
                fields.push(name);
            }
        }
        Some(PayloadPart::Whole(value)) => {
            parts::str(out, "payload")?;
            parts::value(out, value, 1)?;
            fields.push("payload".into());
        }
        None => {}
    }
    if let Some(reason) = &envelope.status_reason {
        parts::str(out, "statusReason")?;
        parts::str(out, reason)?;
        fields.push("statusReason".into());
    }
    for (name, object) in objects {
        if let Some(object) = object {
            parts::str(out, name)?;
            parts::object(out, object, 1)?;
            fields.push(name.into());
        }
    }
    for (name, value) in envelope.extra.iter().filter(|(n, _)| is_content_extra(n)) {
        parts::str(out, name)?;
        parts::value(out, value, 1)?;
        fields.push(name.clone());
    }
    debug_assert!(fields.len() >= entries, "each entry names a field or more");
    Ok(fields)
}

/// Drops the content [`write`] wrote from `envelope`, leaving its metadata (a map payload
/// keeps its metadata keys, possibly none).
pub(super) fn remove(envelope: &mut Envelope) {
    match &mut envelope.payload {
        Some(Value::Object(map)) => map.retain(|k, _| !is_content_key(k)),
        Some(Value::Null) | None => {}
        Some(_) => envelope.payload = None,
    }
    envelope.status_reason = None;
    for name in OBJECTS {
        if let Some(slot) = object_slot(envelope, name) {
            *slot = None;
        }
    }
    envelope.extra.retain(|name, _| !is_content_extra(name));
}

/// Puts content fields (by stored name, as [`write`] wrote them) back into `envelope`.
pub(super) fn put(envelope: &mut Envelope, content: Map<String, Value>) {
    for (name, value) in content {
        match (name.as_str(), value) {
            ("payload", Value::Object(fields)) => match &mut envelope.payload {
                Some(Value::Object(payload)) => payload.extend(fields),
                _ => envelope.payload = Some(Value::Object(fields)),
            },
            ("payload", other) => envelope.payload = Some(other),
            ("statusReason", Value::String(reason)) => envelope.status_reason = Some(reason),
            (object, Value::Object(o)) if OBJECTS.contains(&object) => {
                if let Some(slot) = object_slot(envelope, object) {
                    *slot = Some(Box::new(o));
                }
            }
            (_, value) => {
                envelope.extra.insert(name, value);
            }
        }
    }
}
