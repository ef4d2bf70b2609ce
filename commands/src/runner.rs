//! [`Commands`], which runs a command against a journal: read its stream, fold it, decide,
//! append with the stream's version as the expected version, and decide again when another
//! writer got there first; and [`Accepted`], what an accepted command did.

use std::sync::Arc;

use journal_engine::seams::{Clock, SystemClock};
use journal_engine::{AppendOptions, Appended, Error as EngineError, Journal};
use journal_format::{Envelope, StoredEvent};
use journal_projections::StreamState;
use serde_json::Value;

use crate::command::Command;
use crate::context::Context;
use crate::decision::decide;
use crate::error::CommandError;

/// How many times a command is decided again after losing a race for its stream.
const CONFLICT_RETRIES: usize = 8;

/// What an accepted command did.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The appended events, in order (empty for a no-op).
    pub events: Vec<StoredEvent>,
    /// Why nothing or less than asked was written (a no-op, a dedupe), when so.
    pub note: Option<String>,
}

/// Runs commands against a journal.
#[derive(Clone)]
pub struct Commands {
    journal: Journal,
    clock: Arc<dyn Clock>,
}

impl Commands {
    /// Commands on `journal`, stamping events with the system clock.
    #[must_use]
    pub fn new(journal: Journal) -> Commands {
        Commands {
            journal,
            clock: Arc::new(SystemClock),
        }
    }

    /// Stamps events with `clock` instead (tests, simulations).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Commands {
        self.clock = clock;
        self
    }

    /// Parses and runs one command.
    ///
    /// # Errors
    /// As [`Commands::execute`]; bad arguments are refused with
    /// [`Rule::InvalidArguments`](journal_projections::Rule::InvalidArguments).
    pub async fn run(&self, name: &str, args: Value) -> Result<Accepted, CommandError> {
        let command = Command::parse(name, args)?;
        self.execute(&command).await
    }

    /// Runs one command: read the stream, decide, append with the expected stream version;
    /// on a conflict, decide again on the new state.
    ///
    /// # Errors
    /// [`CommandError::Refused`] naming the broken rule (nothing written), a journal error, or
    /// [`CommandError::Contended`].
    pub async fn execute(&self, command: &Command) -> Result<Accepted, CommandError> {
        let stream = command.stream_key()?;
        for _ in 0..CONFLICT_RETRIES {
            let history = self.journal.read_stream(&stream, 1)?;
            let state = StreamState::fold(&history);
            let decided = decide(command, &state, &Context::at(self.clock.now_unix_ns()))?;
            if decided.events.is_empty() {
                return Ok(Accepted {
                    events: Vec::new(),
                    note: decided.note,
                });
            }
            let options = AppendOptions {
                expected_stream_version: Some(state.version),
            };
            // Lent: the decided events become the answer's.
            match self.journal.append_batch(&decided.events, options).await {
                Ok(appended) => {
                    return Ok(Accepted {
                        events: stored(decided.events, appended),
                        note: decided.note,
                    });
                }
                Err(EngineError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CommandError::Contended {
            stream,
            attempts: CONFLICT_RETRIES,
        })
    }
}

/// The decided events as the journal stored them: each with the id, position, time, stream
/// version and hash its append gave it.
fn stored(events: Vec<Envelope>, appended: Vec<Appended>) -> Vec<StoredEvent> {
    events
        .into_iter()
        .zip(appended)
        .map(|(mut envelope, a)| {
            envelope.event_id = a.event_id.to_string();
            StoredEvent {
                position: a.position,
                recorded_at_ns: a.recorded_at_ns,
                stream_version: a.stream_version,
                hash: a.hash,
                envelope,
            }
        })
        .collect()
}
