//! `journal import claude-code|codex|openhands PATH...`: every file is parsed before the journal
//! is opened, so a damaged file (refused with its line) writes nothing of the whole command;
//! then each file's events are appended and its summary printed.

use std::io::{self, IsTerminal as _};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use journal_replay::import::{self, Options, Parsed, Source};
use serde_json::json;

use crate::{out, Failure};

/// The source formats, as named on the command line.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    /// Claude Code session transcripts (`~/.claude/projects/<slug>/<session>.jsonl`).
    ClaudeCode,
    /// Codex rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
    Codex,
    /// OpenHands trajectories (JSON arrays) or evaluation output (`output.jsonl`).
    Openhands,
}

impl Format {
    fn source(self) -> Source {
        match self {
            Format::ClaudeCode => Source::ClaudeCode,
            Format::Codex => Source::Codex,
            Format::Openhands => Source::OpenHands,
        }
    }
}

/// `journal import`'s arguments.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The source format.
    #[arg(value_enum)]
    pub format: Format,
    /// The files to import.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Claude Code's file-history directory for these sessions
    /// (`~/.claude/file-history/<session>`): referenced backups found there are stored as blobs,
    /// the others are marked unavailable.
    #[arg(long)]
    pub blobs: Option<PathBuf>,
    /// Import what can be read and report the damaged records skipped, instead of refusing a
    /// damaged file.
    #[arg(long)]
    pub skip_bad: bool,
    /// The session id for OpenHands trajectories (default: the file name without extension).
    #[arg(long)]
    pub session: Option<String>,
    /// Print each file's summary as one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses every file; refuses the command, naming each damaged file and line, if any is.
pub fn parse(args: &ImportArgs) -> Result<Vec<Parsed>, Failure> {
    let options = Options {
        skip_bad: args.skip_bad,
        blobs_dir: args.blobs.clone(),
        session_id: args.session.clone(),
    };
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for path in &args.paths {
        match import::parse_file(args.format.source(), path, &options) {
            Ok(p) => parsed.push(p),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !errors.is_empty() {
        return Err(Failure {
            code: 1,
            message: format!(
                "{}\nnothing was imported (--skip-bad imports the readable records and reports the rest)",
                errors.join("\n")
            ),
        });
    }
    Ok(parsed)
}

/// How each file's summary is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Summaries {
    /// Readable text.
    Text,
    /// One JSON object per line.
    Json,
}

/// Writes the parsed files and prints their summaries in `form`.
pub fn write(
    journal: &journal_engine::Journal,
    parsed: Vec<Parsed>,
    form: Summaries,
) -> Result<u8, Failure> {
    let total: u64 = parsed.iter().map(|p| p.events.len() as u64).sum();
    let bar = if io::stderr().is_terminal() && total >= 10_000 {
        let bar = ProgressBar::new(total);
        if let Ok(style) =
            ProgressStyle::with_template("importing {bar:40} {pos}/{len} events ({per_sec})")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut before = 0;
    for mut file in parsed {
        let written = import::write(journal, &file, &mut |done| bar.set_position(before + done))?;
        before += file.events.len() as u64;
        file.summary.events_written = Some(written.events_written);
        match form {
            Summaries::Json => out::line(json!(file.summary))?,
            Summaries::Text => out::text(text(&file, written))?,
        }
    }
    bar.finish_and_clear();
    Ok(0)
}

fn text(file: &Parsed, written: import::Written) -> String {
    let s = &file.summary;
    let mut out = format!(
        "{} ({}): session {}\n  records {} → events {} ({} written, {} revised, {} already present, {} blobs)\n",
        s.file,
        s.source,
        s.sessions.join(", "),
        s.records,
        s.events,
        written.events_written,
        written.revised,
        written.already_present,
        written.blobs,
    );
    out.push_str(&format!(
        "  turns {}, model calls {}, tool calls {}, results {}, open calls {}, subagents {}, compactions {}\n",
        s.turns, s.model_calls, s.tool_calls, s.tool_results, s.open_calls, s.subagents, s.compactions
    ));
    out.push_str(&format!(
        "  artifact refs {} resolved, {} dangling (unavailable); duplicate records {}; timestamps read as UTC {}\n",
        s.artifact_refs_resolved, s.artifact_refs_dangling, s.duplicate_records, s.timestamps_assumed_utc
    ));
    let by_type: Vec<String> = s
        .events_by_type
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    out.push_str(&format!("  by type: {}\n", by_type.join(", ")));
    if !s.unknown_kinds.is_empty() {
        let kinds: Vec<String> = s
            .unknown_kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        out.push_str(&format!(
            "  unknown record kinds (kept as vendor events): {}\n",
            kinds.join(", ")
        ));
    }
    for skipped in &s.skipped {
        out.push_str(&format!(
            "  skipped line {}: {}\n",
            skipped.line, skipped.error
        ));
    }
    out
}
