//! Conformance with the Agent Runtime JSON Schemas (v0.4, Apache-2.0, vendored in
//! `journal-format/schemas/agentruntime/` from the Agent Runtime repository, unmodified: `SOURCE.txt`).
//!
//! The Lime profile schemas refer to the core schemas by a relative `$ref` that resolves under
//! `https://limecloud.github.io/agentruntime/schemas/`, while the core schemas declare their
//! `$id` under `https://agentruntime.example/schemas/`; each core schema is registered under both
//! URIs so that resolution works offline (see the vendored `SOURCE.txt`). Formats
//! (`date-time`) are asserted, as the spec's own verification did.

use std::sync::OnceLock;

use jsonschema::{Registry, Validator};
use serde_json::Value;

use crate::error::EnvelopeError;

/// One of the four Agent Runtime schemas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schema {
    /// `agentruntime-event.schema.json`: the public-core event.
    Event,
    /// `agentruntime-lime-profile-event.schema.json`: the stricter Lime profile event.
    LimeEvent,
    /// `agentruntime-snapshot.schema.json`: the public-core session snapshot / read model.
    Snapshot,
    /// `agentruntime-lime-profile-snapshot.schema.json`: the Lime profile snapshot.
    LimeSnapshot,
}

const EVENT: &str = include_str!("../schemas/agentruntime/agentruntime-event.schema.json");
const LIME_EVENT: &str =
    include_str!("../schemas/agentruntime/agentruntime-lime-profile-event.schema.json");
const SNAPSHOT: &str = include_str!("../schemas/agentruntime/agentruntime-snapshot.schema.json");
const LIME_SNAPSHOT: &str =
    include_str!("../schemas/agentruntime/agentruntime-lime-profile-snapshot.schema.json");

const CORE_BASE: &str = "https://agentruntime.example/schemas/";
const PROFILE_BASE: &str = "https://limecloud.github.io/agentruntime/schemas/";

impl Schema {
    /// The schema's file name.
    #[must_use]
    pub fn file_name(self) -> &'static str {
        match self {
            Schema::Event => "agentruntime-event.schema.json",
            Schema::LimeEvent => "agentruntime-lime-profile-event.schema.json",
            Schema::Snapshot => "agentruntime-snapshot.schema.json",
            Schema::LimeSnapshot => "agentruntime-lime-profile-snapshot.schema.json",
        }
    }

    /// The vendored schema text.
    #[must_use]
    pub fn text(self) -> &'static str {
        match self {
            Schema::Event => EVENT,
            Schema::LimeEvent => LIME_EVENT,
            Schema::Snapshot => SNAPSHOT,
            Schema::LimeSnapshot => LIME_SNAPSHOT,
        }
    }

    fn validator(self) -> Result<&'static Validator, String> {
        static VALIDATORS: [OnceLock<Result<Validator, String>>; 4] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let slot = match self {
            Schema::Event => &VALIDATORS[0],
            Schema::LimeEvent => &VALIDATORS[1],
            Schema::Snapshot => &VALIDATORS[2],
            Schema::LimeSnapshot => &VALIDATORS[3],
        };
        slot.get_or_init(|| build(self))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Checks `value` against this schema.
    ///
    /// # Errors
    /// [`EnvelopeError::Nonconforming`] with the first violation and where it is.
    pub fn check(self, value: &Value) -> Result<(), EnvelopeError> {
        let nonconforming = |message| EnvelopeError::Nonconforming {
            schema: self.file_name(),
            message,
        };
        let validator = self.validator().map_err(nonconforming)?;
        match validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => {
                let at = error.instance_path().to_string();
                let at = if at.is_empty() { "/".into() } else { at };
                Err(nonconforming(format!("at {at}: {error}")))
            }
        }
    }
}

/// The Agent Runtime type a journal type is exported as, when the spec has one that means the
/// same thing; the original type goes into `nativeType` (unless the event already has one).
#[must_use]
pub fn export_type(event_type: &str) -> Option<&'static str> {
    Some(match event_type {
        // A runtime snapshot or a checkpoint is a durable snapshot that changed.
        "snapshot.written" | "checkpoint.captured" => "snapshot.updated",
        // Handing work to another agent is the spec's delegation edge.
        "handoff.requested" => "task.delegated",
        _ => return None,
    })
}

/// The outcome of exporting one event in Agent Runtime form.
#[derive(Debug, Clone, PartialEq)]
pub enum Exported {
    /// The event in Agent Runtime form; it conforms to the schema it was exported for.
    Event(Value),
    /// The event was left out: the reason (its type outside the spec's enum with no mapping, or
    /// the first schema violation).
    LeftOut(String),
}

/// Exports one event in Agent Runtime form for `schema` (`Event` or `LimeEvent`): types of the
/// spec's enum as they are, journal types that have an equivalent mapped ([`export_type`]),
/// anything else left out. The journal-assigned fields are not part of the form. An event that
/// does not conform to `schema` is left out, never written half-valid.
#[must_use]
pub fn export(envelope: &crate::Envelope, schema: Schema) -> Exported {
    let mut value = envelope.to_json_value();
    if !crate::vocabulary::is_agent_runtime_type(&envelope.event_type) {
        let Some(mapped) = export_type(&envelope.event_type) else {
            return Exported::LeftOut(format!(
                "type `{}` is outside the Agent Runtime enum",
                envelope.event_type
            ));
        };
        if let Value::Object(object) = &mut value {
            object.insert("type".into(), Value::String(mapped.into()));
            if !object.contains_key("nativeType") {
                object.insert(
                    "nativeType".into(),
                    Value::String(envelope.event_type.clone()),
                );
            }
        }
    }
    match schema.check(&value) {
        Ok(()) => Exported::Event(value),
        Err(e) => Exported::LeftOut(e.to_string()),
    }
}

fn parse(text: &str, name: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("vendored schema {name} is not JSON: {e}"))
}

fn build(schema: Schema) -> Result<Validator, String> {
    let root = parse(schema.text(), schema.file_name())?;
    let mut registry = Registry::new();
    for core in [Schema::Event, Schema::Snapshot] {
        let contents = parse(core.text(), core.file_name())?;
        for base in [CORE_BASE, PROFILE_BASE] {
            registry = registry
                .add(format!("{base}{}", core.file_name()), contents.clone())
                .map_err(|e| format!("cannot register {}: {e}", core.file_name()))?;
        }
    }
    let registry = registry
        .prepare()
        .map_err(|e| format!("cannot prepare the schema registry: {e}"))?;
    jsonschema::options()
        .should_validate_formats(true)
        .with_registry(&registry)
        .build(&root)
        .map_err(|e| format!("cannot compile {}: {e}", schema.file_name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_schema_compiles() {
        for s in [
            Schema::Event,
            Schema::LimeEvent,
            Schema::Snapshot,
            Schema::LimeSnapshot,
        ] {
            s.validator().unwrap();
        }
    }

    #[test]
    fn core_and_profile_tell_events_apart() {
        let minimal =
            json!({"type": "tool.started", "eventId": "e1", "timestamp": "2026-05-11T10:00:03Z"});
        Schema::Event.check(&minimal).unwrap();
        let err = Schema::LimeEvent.check(&minimal).unwrap_err().to_string();
        assert!(
            err.contains("lime-profile") && err.contains("required"),
            "{err}"
        );
        let err = Schema::Event
            .check(&json!({"type": "vendor.x.y", "eventId": "e1", "timestamp": "2026-05-11T10:00:03Z"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/type"), "{err}");
        let err = Schema::Event
            .check(&json!({"type": "tool.started", "eventId": "e1", "timestamp": "yesterday"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/timestamp"), "{err}");
    }
}
