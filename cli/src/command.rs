//! `journal command NAME [JSON|-]`: runs one command of the control plane. The answer is the
//! appended events as JSON Lines; a refusal exits 1 with
//! `{"error":{"rule":"...","message":"..."}}` on standard output.

use std::io::{self, Read, Write};

use journal_engine::Journal;
use journal_projections::{Command, CommandError, Commands, Violation};
use serde_json::json;

use crate::{fail, out, Failure};

/// The command `name` with its arguments (the JSON given, `-` or nothing for standard input),
/// or the refusal to print when they are not the command's: checked before the journal is
/// opened, so a refused command leaves nothing behind.
pub fn parse(name: &str, text: Option<&str>) -> Result<Result<Command, Violation>, Failure> {
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
    Ok(Command::parse(name, value))
}

/// Prints a refusal; returns the exit code.
pub fn refuse(violation: &Violation) -> Result<u8, Failure> {
    let answer = json!({"error": {"rule": violation.rule.name(), "message": violation.message}});
    out::line(answer)?;
    Ok(1)
}

/// Runs the command and prints its answer; returns the exit code.
pub async fn run(journal: &Journal, command: &Command) -> Result<u8, Failure> {
    let commands = Commands::new(journal.clone());
    match commands.execute(command).await {
        Ok(accepted) => {
            let mut stdout = out::stdout();
            for event in &accepted.events {
                serde_json::to_writer(&mut stdout, &event.to_json_value())
                    .map_err(|e| fail(e.to_string()))?;
                stdout.write_all(b"\n")?;
            }
            stdout.flush()?;
            if let Some(note) = accepted.note {
                out::warn(format_args!("journal: {note}"));
            }
            Ok(0)
        }
        Err(CommandError::Refused(v)) => refuse(&v),
        Err(CommandError::Journal(e)) => Err(Failure::from(e)),
        Err(e) => Err(fail(e.to_string())),
    }
}
