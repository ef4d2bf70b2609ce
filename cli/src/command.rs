//! `journal command NAME [JSON|-]`: runs one command of the control plane. The answer is the
//! appended events as JSON Lines; a refusal exits 1 with
//! `{"error":{"rule":"...","message":"..."}}` on standard output.

use std::io::{self, Read, Write};

use journal_engine::Journal;
use journal_projections::{CommandError, Commands};
use serde_json::{json, Value};

use crate::{fail, Failure};

/// The command's arguments: the JSON given, `-` or nothing for standard input.
pub fn arguments(text: Option<&str>) -> Result<Value, Failure> {
    let text = match text {
        Some(t) if t != "-" => t.to_string(),
        _ => {
            let mut buffer = String::new();
            io::stdin().read_to_string(&mut buffer)?;
            buffer
        }
    };
    let bytes = text.trim().as_bytes();
    let value = journal_format::strict_json::parse(bytes)
        .map_err(|e| fail(format!("the command's arguments are not JSON: {e}")))?;
    if !value.is_object() {
        return Err(fail("the command's arguments must be a JSON object"));
    }
    Ok(value)
}

/// Runs the command and prints its answer; returns the exit code.
pub async fn run(journal: &Journal, name: &str, args: Value) -> Result<u8, Failure> {
    let commands = Commands::new(journal.clone());
    let mut stdout = io::stdout().lock();
    match commands.run(name, args).await {
        Ok(accepted) => {
            for event in &accepted.events {
                serde_json::to_writer(&mut stdout, &event.to_json_value())
                    .map_err(|e| fail(e.to_string()))?;
                stdout.write_all(b"\n")?;
            }
            stdout.flush()?;
            if let Some(note) = accepted.note {
                eprintln!("journal: {note}");
            }
            Ok(0)
        }
        Err(CommandError::Refused(v)) => {
            let answer = json!({"error": {"rule": v.rule.name(), "message": v.message}});
            writeln!(stdout, "{answer}")?;
            Ok(1)
        }
        Err(CommandError::Journal(e)) => Err(Failure::from(e)),
        Err(e) => Err(fail(e.to_string())),
    }
}
