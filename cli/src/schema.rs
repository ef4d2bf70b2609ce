//! `journal schema [NAME]`: the JSON Schemas of our event form, the typed payloads, the
//! commands' arguments and the state they decide on, so products in other languages can
//! generate their types.

use clap::Args;
use journal_commands::Command;
use journal_format::conformance::Schema;
use journal_format::{payload, Envelope};
use journal_projections::StreamState;
use serde_json::{Map, Value};

use crate::{fail, out, Failure};

/// `journal schema`'s arguments.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// One schema: `event`, `payload.<Shape>`, `command.<name>`, `state.stream`,
    /// `agentruntime.<file>`; `--list` lists the names.
    name: Option<String>,
    /// List the schema names.
    #[arg(long)]
    list: bool,
}

/// Prints the schema names, one schema, or all of them.
pub fn run(args: &SchemaArgs) -> Result<u8, Failure> {
    let all = all();
    let text = if args.list {
        all.keys().cloned().collect::<Vec<_>>().join("\n")
    } else if let Some(name) = &args.name {
        let one = all.get(name).ok_or_else(|| Failure {
            code: 2,
            message: format!("no schema named {name:?}; `journal schema --list` lists them"),
        })?;
        serde_json::to_string_pretty(one).map_err(|e| fail(e.to_string()))?
    } else {
        serde_json::to_string_pretty(&all).map_err(|e| fail(e.to_string()))?
    };
    out::line(&text)?;
    Ok(0)
}

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
