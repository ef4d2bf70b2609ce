//! `journal command NAME [JSON|-]`: runs one command of the control plane. The answer is the
//! appended events as JSON Lines; every refusal exits 1 with
//! `{"error":{"rule":"...","message":"..."}}` on standard output, arguments that are not a
//! JSON object included (rule `invalid_arguments`).

use std::io::{self, Write};

use journal_engine::{Error, Journal, Limits};
use journal_projections::{Command, CommandError, Commands, Rule, Violation};
use serde_json::{json, Value};

use crate::{fail, lines, out, Failure};

/// The command `name` with its arguments (the JSON given, `-` or nothing for standard input),
/// or the refusal to print when they are not the command's: checked before the journal is
/// opened, so a refused command leaves nothing behind.
pub fn parse(name: &str, text: Option<&str>) -> Result<Result<Command, Violation>, Failure> {
    let text = match text {
        Some(t) if t != "-" => t.to_string(),
        _ => match lines::read_bounded(io::stdin().lock(), &Limits::default())? {
            Ok(text) => text,
            Err(message) => return Ok(Err(invalid(message))),
        },
    };
    Ok(arguments(&text).and_then(|value| Command::parse(name, value)))
}

fn invalid(message: impl Into<String>) -> Violation {
    Violation::new(Rule::InvalidArguments, message)
}

/// The arguments as a JSON object.
fn arguments(text: &str) -> Result<Value, Violation> {
    let bytes = text.trim().as_bytes();
    if bytes.is_empty() {
        return Err(invalid(
            "no arguments: give them as a JSON object, on the command line or on standard input",
        ));
    }
    let value = journal_format::strict_json::parse(bytes)
        .map_err(|e| invalid(format!("the command's arguments are not JSON: {e}")))?;
    let kind = match &value {
        Value::Object(_) => return Ok(value),
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
    };
    Err(invalid(format!(
        "the command's arguments must be a JSON object, not {kind}"
    )))
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
        // The events a command builds come from its arguments: an event the journal refuses
        // is a refusal of the arguments.
        Err(CommandError::Journal(
            e @ (Error::InvalidEvent { .. } | Error::EventTooLarge { .. } | Error::InvalidInput(_)),
        )) => refuse(&invalid(e.to_string())),
        Err(CommandError::Journal(e)) => Err(Failure::from(e)),
        Err(e) => Err(fail(e.to_string())),
    }
}
