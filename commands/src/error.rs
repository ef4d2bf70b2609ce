//! Why a command did not run: [`CommandError`], a broken rule (nothing written), a failure of
//! the journal, or a stream other writers kept changing.

use journal_engine::Error as EngineError;
use journal_projections::rules::{Rule, Violation};

/// Why a command did not run.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command breaks a rule; nothing was written.
    #[error("refused by rule {}: {}", .0.rule.name(), .0.message)]
    Refused(Violation),
    /// The journal failed (I/O, closed, read-only); nothing of this command was written.
    #[error(transparent)]
    Journal(#[from] EngineError),
    /// Other writers kept changing the stream; nothing was written.
    #[error("stream {stream} kept changing under the command ({attempts} attempts); try again")]
    Contended {
        /// The stream.
        stream: String,
        /// How many decisions were made.
        attempts: usize,
    },
}

impl CommandError {
    /// The rule this error refuses the command by: a broken rule, or an event the journal
    /// refused (the events a command builds come from its arguments, so that is a refusal of
    /// the arguments, [`Rule::InvalidArguments`]). `None` for a failure of the journal or
    /// contention, which are not the command's fault.
    #[must_use]
    pub fn violation(&self) -> Option<Violation> {
        match self {
            CommandError::Refused(v) => Some(v.clone()),
            CommandError::Journal(
                e @ (EngineError::InvalidEvent { .. }
                | EngineError::EventTooLarge { .. }
                | EngineError::InvalidInput(_)),
            ) => Some(Violation::new(Rule::InvalidArguments, e.to_string())),
            _ => None,
        }
    }
}

impl From<Violation> for CommandError {
    fn from(v: Violation) -> CommandError {
        CommandError::Refused(v)
    }
}
