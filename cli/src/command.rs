//! `journal command NAME [JSON|-]`: runs one command of the control plane. The answer is the
//! appended events as JSON Lines; every refusal exits 1 with
//! `{"error":{"rule":"...","message":"..."}}` on standard output, arguments that are not a
//! JSON object included (rule `invalid_arguments`).

use std::io::{self, Write};

use journal_commands::{Command, CommandError, Commands};
use journal_engine::{Journal, Limits};
use journal_projections::{Rule, Violation};
use serde_json::json;

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
    Ok(Command::parse_text(name, &text))
}

fn invalid(message: impl Into<String>) -> Violation {
    Violation::new(Rule::InvalidArguments, message)
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
        Err(e) => match e.violation() {
            Some(v) => refuse(&v),
            None => match e {
                CommandError::Journal(e) => Err(Failure::from(e)),
                e => Err(fail(e.to_string())),
            },
        },
    }
}
