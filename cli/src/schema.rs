//! `journal schema [NAME]`: the JSON Schemas of our event form, the typed payloads, the
//! commands' arguments and the state they decide on, so products in other languages can
//! generate their types.

use journal_commands::Command;
use journal_format::conformance::Schema;
use journal_format::{payload, Envelope};
use journal_projections::StreamState;
use serde_json::{Map, Value};

fn value(schema: schemars::Schema) -> Value {
    schema.to_value()
}

/// Every schema by name: `event`, `payload.<Shape>`, `command.<name>`, `state.stream`, and
/// the vendored `agentruntime.<file>` schemas.
pub fn all() -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("event".into(), value(Envelope::json_schema()));
    for (name, schema) in payload::schemas() {
        out.insert(format!("payload.{name}"), value(schema));
    }
    for (name, schema) in Command::schemas() {
        out.insert(format!("command.{name}"), value(schema));
    }
    out.insert(
        "state.stream".into(),
        value(schemars::schema_for!(StreamState)),
    );
    out.insert(
        "replay.narrative".into(),
        value(schemars::schema_for!(journal_replay::Narrative)),
    );
    out.insert(
        "model.session".into(),
        value(schemars::schema_for!(
            journal_projections::views::SessionSnapshot
        )),
    );
    out.insert(
        "model.task".into(),
        value(schemars::schema_for!(
            journal_projections::views::TaskSnapshot
        )),
    );
    out.insert(
        "model.ecosystem".into(),
        value(schemars::schema_for!(
            journal_projections::ecosystem::Ecosystem
        )),
    );
    out.insert(
        "model.freshness".into(),
        value(schemars::schema_for!(journal_projections::Freshness)),
    );
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
