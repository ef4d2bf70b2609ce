//! The JSON Schemas of the journal's forms, by name: the event form, the typed payloads, the
//! commands' arguments and the state they decide on, the read models and the replay
//! narrative, and the vendored Agent Runtime schemas. `journal schema NAME` prints one,
//! `GET /v1/schema/{name}` answers one, and the server's OpenAPI document embeds them as its
//! components, so that every description of a form comes from the same types.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

use journal_commands::Command;
use journal_format::conformance::Schema;
use journal_format::{payload, Envelope};
use journal_projections::{activity, ecosystem, models, views, Freshness, StreamState};
use serde_json::{Map, Value};

/// Every schema by name: `event`, `payload.<Shape>`, `command.<name>`, `state.stream`,
/// `replay.narrative`, `model.<kind>` (one per read-model kind, and `model.freshness`), and
/// the vendored `agentruntime.<file>` schemas. Each is a whole JSON Schema (2020-12) with its
/// own `$defs`.
#[must_use]
pub fn all() -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("event".into(), Envelope::json_schema().to_value());
    for (name, schema) in payload::schemas() {
        out.insert(format!("payload.{name}"), schema.to_value());
    }
    for (name, schema) in Command::schemas() {
        out.insert(format!("command.{name}"), schema.to_value());
    }
    out.insert(
        "state.stream".into(),
        schemars::schema_for!(StreamState).to_value(),
    );
    out.insert(
        "replay.narrative".into(),
        schemars::schema_for!(journal_replay::Narrative).to_value(),
    );
    for (kind, schema) in model_schemas() {
        out.insert(format!("model.{kind}"), schema.to_value());
    }
    for s in [
        Schema::Event,
        Schema::LimeEvent,
        Schema::Snapshot,
        Schema::LimeSnapshot,
    ] {
        if let Ok(v) = serde_json::from_str(s.text()) {
            out.insert(format!("agentruntime.{}", s.file_name()), v);
        }
    }
    out
}

/// The names of [`all`], sorted.
#[must_use]
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = all().keys().cloned().collect();
    names.sort();
    names
}

/// The schema named `name`, if there is one.
#[must_use]
pub fn get(name: &str) -> Option<Value> {
    all().remove(name)
}

/// The schema of each read model's `model` by kind (`GET /v1/models/{kind}/{id}`,
/// `journal get KIND ID`), and of the freshness every answer carries.
fn model_schemas() -> Vec<(&'static str, schemars::Schema)> {
    use schemars::schema_for;
    vec![
        ("session", schema_for!(views::SessionSnapshot)),
        ("thread", schema_for!(views::ThreadView)),
        ("task", schema_for!(views::TaskSnapshot)),
        ("run", schema_for!(views::RunView)),
        ("checklist", schema_for!(views::Known<views::ChecklistView>)),
        ("queue", schema_for!(views::QueueView)),
        ("evidence", schema_for!(views::EvidenceView)),
        ("ecosystem", schema_for!(ecosystem::Ecosystem)),
        ("resume", schema_for!(views::ResumeState)),
        ("history", schema_for!(models::HistoryWindow)),
        ("state", schema_for!(StreamState)),
        ("activity", schema_for!(activity::Activity)),
        ("freshness", schema_for!(Freshness)),
    ]
}

/// The read-model kinds [`all`] has a `model.<kind>` schema for.
pub const MODEL_KINDS: [&str; 12] = [
    "session",
    "thread",
    "task",
    "run",
    "checklist",
    "queue",
    "evidence",
    "ecosystem",
    "resume",
    "history",
    "state",
    "activity",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_kind_has_a_schema_and_every_schema_is_an_object() {
        let all = all();
        for kind in MODEL_KINDS {
            assert!(all.contains_key(&format!("model.{kind}")), "{kind}");
        }
        for (name, schema) in &all {
            assert!(schema.is_object(), "{name}");
        }
        assert_eq!(names().len(), all.len());
        assert!(get("event").is_some());
        assert!(get("no.such").is_none());
    }
}
