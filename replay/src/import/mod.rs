//! Import of agent sessions that other runtimes wrote: Claude Code transcripts, Codex rollouts
//! and OpenHands trajectories (`testdata/agent-logs/FORMATS.md`), turned into
//! normalized events (docs/MODEL.md §2) and appended to a journal, so that the read models and
//! [`crate::narrative`] tell what happened in the source session.
//!
//! - [`parse`]: a source file's bytes into events, blobs and a [`Summary`]; pure, nothing is
//!   written. A damaged record (a line that is not JSON, a record without the fields its kind
//!   needs) refuses the whole file with its line number, unless [`Options::skip_bad`] is set,
//!   in which case it is skipped and listed in the summary.
//! - [`write()`]: the parsed file into a journal: blobs first, then the events in batches.
//!
//! # Invariants
//! - Event ids are derived from the source's own ids (`<source>:<session>:<source id>:<part>`),
//!   never from the clock or a counter over the journal: importing a file twice adds nothing.
//! - Every record becomes at least one event; a record the mapping does not know becomes a
//!   `vendor.<source>.<kind>` event carrying the record, and is counted in
//!   [`Summary::unknown_kinds`].
//! - Structure never depends on free text: turns, calls, results and approvals are found by
//!   record kinds and ids, so redacted text imports like any other. (Claude Code's fixed
//!   markers of command output and interruptions are read to tell them from prompts; a
//!   redacted one stays a prompt.)
//! - A request (`turn.submitted`) is what a person or a parent agent asked; what the runtime
//!   put in front of the model itself (instructions, the environment, command output) is
//!   context (`context.resolved`), each source telling them apart by its own structure.
//! - Every event carries `nativeNs` (the source), `nativeType` (the record kind) and
//!   `provenance` (`observed`, or `inferred` where the source does not say it directly).

mod claude_code;
mod codex;
mod detect;
mod emit;
mod openhands;
mod records;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use journal_format::Envelope;
use serde::Serialize;

pub use detect::{detect, Detected};
pub use write::{write, Written};

/// The runtimes whose sessions can be imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Claude Code session transcripts (`~/.claude/projects/<slug>/<session>.jsonl`).
    ClaudeCode,
    /// Codex rollout files (`~/.codex/sessions/.../rollout-*.jsonl`).
    Codex,
    /// OpenHands trajectories (a JSON array of events) or evaluation output (JSON lines, one
    /// run each with its `history`).
    OpenHands,
}

impl Source {
    /// The name used on the command line and in event ids: `claude-code`, `codex`, `openhands`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Source::ClaudeCode => "claude-code",
            Source::Codex => "codex",
            Source::OpenHands => "openhands",
        }
    }

    /// The namespace of vendor events and of `nativeNs`: `claude_code`, `codex`, `openhands`.
    #[must_use]
    pub fn namespace(self) -> &'static str {
        match self {
            Source::ClaudeCode => "claude_code",
            Source::Codex => "codex",
            Source::OpenHands => "openhands",
        }
    }
}

/// What an import may do beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Skip damaged records (listed in [`Summary::skipped`]) instead of refusing the file.
    pub skip_bad: bool,
    /// Where Claude Code's file-history backups are (`~/.claude/file-history/<session>`):
    /// referenced backups found there are stored as blobs; the others are marked unavailable.
    pub blobs_dir: Option<PathBuf>,
    /// The session id for formats that do not record one (OpenHands trajectories); by default
    /// the file name without its extension.
    pub session_id: Option<String>,
    /// The file is still being written: a last line without its line end is not read yet (it
    /// is read once the runtime has finished writing it).
    pub live: bool,
}

/// Why a file cannot be imported. Nothing of the file is written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A record is damaged: not JSON, truncated, or without a field its kind needs.
    #[error("{file}:{line}: {message}")]
    Damaged {
        /// The file.
        file: String,
        /// The line (1-based) where the damaged record starts, or where JSON parsing failed.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// The file as a whole is not in the source's format (for example empty).
    #[error("{file}: {message}")]
    NotImportable {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// A record skipped under [`Options::skip_bad`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// The line (1-based) where the record starts.
    pub line: u64,
    /// What is wrong with it.
    pub error: String,
}

/// What one file held and what it became. Counts are of the source's own structure, taken
/// while mapping; `events*` count the events made from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The file.
    pub file: String,
    /// The source format's name.
    pub source: String,
    /// The session ids the events carry.
    pub sessions: Vec<String>,
    /// Records read (lines of a JSON-lines file, elements of a JSON array), skipped ones
    /// included.
    pub records: u64,
    /// Records that repeat an earlier record's id and add nothing.
    pub duplicate_records: u64,
    /// Events made, by type.
    pub events_by_type: BTreeMap<String, u64>,
    /// Events made in all.
    pub events: u64,
    /// Events appended by [`write()`]; the rest were already in the journal.
    pub events_written: Option<u64>,
    /// Turns started.
    pub turns: u64,
    /// Requests: what a person (or a parent agent) asked, as `turn.submitted` events.
    pub requests: u64,
    /// Context the runtime put in front of the model that nobody asked for here (instructions,
    /// the environment, command output, meta messages), as `context.resolved` events.
    pub context_messages: u64,
    /// Model calls.
    pub model_calls: u64,
    /// Tool calls (a result whose call the file does not hold counts as one, as in replay).
    pub tool_calls: u64,
    /// Tool results (failed ones included).
    pub tool_results: u64,
    /// Tool calls without a result: still open when the source ends.
    pub open_calls: u64,
    /// Subagents spawned.
    pub subagents: u64,
    /// Context compactions.
    pub compactions: u64,
    /// Artifact references whose content was found and stored.
    pub artifact_refs_resolved: u64,
    /// Artifact references whose content was not found: shown as unavailable.
    pub artifact_refs_dangling: u64,
    /// Record kinds the mapping does not know, kept as vendor events.
    pub unknown_kinds: BTreeMap<String, u64>,
    /// Timestamps without a zone, read as UTC (and flagged on their events).
    pub timestamps_assumed_utc: u64,
    /// Records skipped under `--skip-bad`.
    pub skipped: Vec<Skipped>,
}

/// Content to store in the journal's blob store before the events that reference it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// `blake3:<hex>`, as the blob store names it.
    pub reference: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A parsed file: its events in source order, the blobs they reference, and its summary.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The events, each valid on its own.
    pub events: Vec<Envelope>,
    /// The blobs the events reference.
    pub blobs: Vec<Blob>,
    /// What the file held.
    pub summary: Summary,
}

/// Reads and parses one file.
///
/// # Errors
/// [`ImportError`] naming the file (and the line for a damaged record); nothing is returned
/// for a file that is refused.
pub fn parse_file(source: Source, path: &Path, options: &Options) -> Result<Parsed, ImportError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| ImportError::Io {
        file: file.clone(),
        source: e,
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "session".into());
    let blobs_dir = options.blobs_dir.clone();
    let resolve = move |name: &str| -> Option<Vec<u8>> {
        let dir = blobs_dir.as_ref()?;
        // A backup name is one path component; anything else is not looked up.
        if name.contains(['/', '\\']) || name == ".." || name == "." {
            return None;
        }
        std::fs::read(dir.join(name)).ok()
    };
    parse(source, &file, &stem, &bytes, options, &resolve)
}

/// Parses a source file's bytes. `name` names the file in errors and in the summary; `stem` is
/// the default session id where the format records none; `resolve` returns the content of a
/// referenced artifact (a Claude Code file-history backup) by name, or `None` when it is
/// unavailable.
///
/// # Errors
/// As [`parse_file`].
pub fn parse(
    source: Source,
    name: &str,
    stem: &str,
    bytes: &[u8],
    options: &Options,
    resolve: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Parsed, ImportError> {
    let bytes = if options.live {
        written_lines(bytes)
    } else {
        bytes
    };
    let mut parsed = match source {
        Source::ClaudeCode => claude_code::parse(name, bytes, options, resolve),
        Source::Codex => codex::parse(name, bytes, options),
        Source::OpenHands => openhands::parse(name, stem, bytes, options),
    }?;
    parsed.summary.file = name.to_string();
    parsed.summary.source = source.name().to_string();
    Ok(parsed)
}

/// The lines of a JSON-lines file that are written whole (up to the last line end); a JSON
/// array is read whole, as its runtime writes it at once.
fn written_lines(bytes: &[u8]) -> &[u8] {
    let json_array = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if json_array {
        return bytes;
    }
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes.get(..end).unwrap_or_default()
}

/// Reads an OpenHands session folder's events (`sessions/<id>/events/<n>.json`, one event a
/// file) as one trajectory, in the order of their numbers; the session id is the folder's
/// name (`<id>`) unless [`Options::session_id`] gives one. A damaged event is named by its
/// file.
///
/// # Errors
/// [`ImportError`] naming the folder or the damaged event's file.
pub fn parse_openhands_events(events_dir: &Path, options: &Options) -> Result<Parsed, ImportError> {
    let name = events_dir.display().to_string();
    let io = |source| ImportError::Io {
        file: name.clone(),
        source,
    };
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(events_dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            files.push((number, path));
        }
    }
    files.sort();
    // One event a line, so that a line of the trajectory names its event's file.
    let mut lines = Vec::with_capacity(files.len());
    for (_, path) in &files {
        let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
            file: path.display().to_string(),
            source,
        })?;
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(event) => lines.push(event.to_string()),
            // An event being written is read on a later pass.
            Err(_) if options.live => break,
            Err(e) => {
                return Err(ImportError::Damaged {
                    file: path.display().to_string(),
                    line: e.line() as u64,
                    message: format!("not a JSON event ({e})"),
                })
            }
        }
    }
    let trajectory = format!("[\n{}\n]\n", lines.join(",\n"));
    let session = events_dir.parent().and_then(Path::file_name).map_or_else(
        || "session".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let at_file = |e: ImportError| match e {
        ImportError::Damaged { line, message, .. } => {
            let file = usize::try_from(line.saturating_sub(2))
                .ok()
                .and_then(|i| files.get(i))
                .map_or_else(|| name.clone(), |(_, p)| p.display().to_string());
            ImportError::Damaged {
                file,
                line: 1,
                message,
            }
        }
        other => other,
    };
    parse(
        Source::OpenHands,
        &name,
        &session,
        trajectory.as_bytes(),
        options,
        &|_| None,
    )
    .map_err(at_file)
}
