//! `journal replay run|task|session ID [--at P] [--format text|json|html] [--out FILE]`: the
//! narrative of a run, task or session (see `journal-replay`), as of any position.

use std::path::Path;

use journal_engine::Journal;
use journal_replay::text::Colour;
use journal_replay::Scope;

use crate::{fail, out, Failure};

/// The output form.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Readable in a terminal (colour only on a terminal).
    Text,
    /// Stable JSON; its schema is `journal schema replay.narrative`.
    Json,
    /// One self-contained HTML file (no script, nothing fetched).
    Html,
}

/// What a replay is of.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A run (`runId`).
    Run,
    /// A task (`taskId`) with its runs.
    Task,
    /// A session (`sessionId`).
    Session,
}

/// Writes the narrative; exit 1 when nothing is recorded for the id.
pub fn replay(
    journal: &Journal,
    kind: Kind,
    id: &str,
    at: Option<u64>,
    format: Format,
    out: Option<&Path>,
) -> Result<u8, Failure> {
    let scope = match kind {
        Kind::Run => Scope::Run(id.to_string()),
        Kind::Task => Scope::Task(id.to_string()),
        Kind::Session => Scope::Session(id.to_string()),
    };
    let narrative = journal_replay::load(journal, &scope, at)?;
    if narrative.counts.events == 0 {
        out::warn(format_args!(
            "journal: nothing is recorded for {id} (as of position {})",
            narrative.as_of
        ));
        return Ok(1);
    }
    let text = match format {
        Format::Json => serde_json::to_string(&narrative).map_err(|e| fail(e.to_string()))? + "\n",
        Format::Html => journal_replay::html::render(&narrative),
        Format::Text => {
            let colour = if out.is_none() {
                out::colour()
            } else {
                Colour::Plain
            };
            journal_replay::text::render(&narrative, colour)
        }
    };
    match out {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| fail(format!("{}: {e}", path.display())))?
        }
        None => out::bytes(text.as_bytes())?,
    }
    Ok(0)
}
