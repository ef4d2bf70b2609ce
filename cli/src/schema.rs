//! `journal schema [NAME]`: the JSON Schemas of our event form, the typed payloads, the
//! commands' arguments, the state they decide on, the read models and the replay narrative
//! (the catalog is `journal-schemas`, which the server answers too), so products in other
//! languages can generate their types.

use clap::Args;

use crate::{fail, out, Failure};

/// `journal schema`'s arguments.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// One schema: `event`, `payload.<Shape>`, `command.<name>`, `state.stream`,
    /// `model.<kind>`, `replay.narrative`, `agentruntime.<file>`; `--list` lists the names.
    name: Option<String>,
    /// List the schema names.
    #[arg(long)]
    list: bool,
}

/// Prints the schema names, one schema, or all of them.
pub fn run(args: &SchemaArgs) -> Result<u8, Failure> {
    let text = if args.list {
        journal_schemas::names().join("\n")
    } else if let Some(name) = &args.name {
        let one = journal_schemas::get(name).ok_or_else(|| Failure {
            code: 2,
            message: format!("no schema named {name:?}; `journal schema --list` lists them"),
        })?;
        serde_json::to_string_pretty(&one).map_err(|e| fail(e.to_string()))?
    } else {
        serde_json::to_string_pretty(&journal_schemas::all()).map_err(|e| fail(e.to_string()))?
    };
    out::line(&text)?;
    Ok(0)
}
