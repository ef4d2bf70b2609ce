//! The log of `journal serve` on standard error, through `tracing-subscriber`: `text` (the
//! default: a line per event, for people) or `json` (one JSON object per line, its fields at the
//! top level, for a log collector). Lines pass through a non-blocking writer that drops them
//! when standard error cannot keep up (a full pipe nobody reads), so that logging never stalls
//! the server.

use std::fmt::Display;

use tracing::Level;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};

use crate::{fail, out, Failure};

/// The log's format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// A line of text per event.
    Text,
    /// A JSON object per line.
    Json,
}

/// The running log; written out when dropped.
pub struct Log {
    format: LogFormat,
    _writer: WorkerGuard,
}

/// Starts the log in `format` (events at level INFO and above).
///
/// # Errors
/// When a log was already started in this process.
pub fn start(format: LogFormat) -> Result<Log, Failure> {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_max_level(Level::INFO);
    let started = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    started.map_err(|e| fail(format!("cannot start the log: {e}")))?;
    Ok(Log {
        format,
        _writer: guard,
    })
}

impl Log {
    /// Says `text`, a note of the server's start or stop: `journal: serve: TEXT` in text, an
    /// event of target `journal::serve` in JSON.
    pub fn note(&self, text: impl Display) {
        match self.format {
            LogFormat::Text => out::warn(format_args!("journal: serve: {text}")),
            LogFormat::Json => tracing::info!(target: "journal::serve", "{text}"),
        }
    }
}
