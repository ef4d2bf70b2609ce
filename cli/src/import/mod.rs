//! `journal import claude-code|codex|openhands [PATH...]`: the sessions named, found in the
//! directories named, or found in the runtime's usual location ([`find`]). Every session is
//! parsed before the journal is opened, so a damaged file (refused with its line) writes
//! nothing of the whole command; then each session's events are appended and its summary
//! printed. `--follow` keeps importing as the files grow ([`follow()`]).

mod find;
mod follow;

use std::io::{self, IsTerminal as _};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use journal_replay::import::{self, Options, Parsed, Source};
use serde_json::json;

use crate::{out, Failure};

pub use find::Unit;
pub use follow::follow;

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
#[derive(Args, Debug, Clone)]
pub struct ImportArgs {
    /// The source format.
    #[arg(value_enum)]
    pub format: Format,
    /// Session files, or directories to search recursively for them (a file of another
    /// format is skipped and counted). With none, the runtime's usual location:
    /// `$CODEX_HOME/sessions` (`~/.codex/sessions`), `$CLAUDE_CONFIG_DIR/projects`
    /// (`~/.claude/projects`), or OpenHands' `~/.openhands/sessions`.
    pub paths: Vec<PathBuf>,
    /// Codex's home directory, whose `sessions/` is read when no path is given.
    #[arg(long, env = "CODEX_HOME", value_name = "DIR")]
    pub codex_home: Option<PathBuf>,
    /// Claude Code's configuration directory, whose `projects/` is read when no path is given.
    #[arg(long, env = "CLAUDE_CONFIG_DIR", value_name = "DIR")]
    pub claude_dir: Option<PathBuf>,
    /// OpenHands' file store, whose `sessions/` is read when no path is given.
    #[arg(long, value_name = "DIR")]
    pub openhands_dir: Option<PathBuf>,
    /// Keep importing what the sessions' files gain, and sessions that appear, until
    /// interrupted (Ctrl-C): a live session can be reviewed while it runs.
    #[arg(long)]
    pub follow: bool,
    /// How often `--follow` looks at the files, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = FOLLOW_POLL_MS, requires = "follow")]
    pub poll_ms: u64,
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

impl ImportArgs {
    /// The source format's name.
    pub fn format_name(&self) -> &'static str {
        self.format.source().name()
    }

    /// The paths named, or the usual location's, for messages.
    pub fn paths_or_usual(&self) -> String {
        if self.paths.is_empty() {
            return find::default_location(self)
                .map_or_else(|_| "its usual location".into(), |p| p.display().to_string());
        }
        let paths: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        paths.join(", ")
    }

    /// The parse options the flags give.
    fn options(&self) -> Options {
        Options {
            skip_bad: self.skip_bad,
            blobs_dir: self.blobs.clone(),
            session_id: self.session.clone(),
            live: self.follow,
        }
    }
}

/// Parses one session.
fn parse_unit(
    format: Format,
    unit: &Unit,
    options: &Options,
) -> Result<Parsed, import::ImportError> {
    match unit {
        Unit::File(path) => import::parse_file(format.source(), path, options),
        Unit::OpenHandsEvents(dir) => import::parse_openhands_events(dir, options),
    }
}

/// The sessions to import, parsed; refuses the command, naming each damaged file and line, if
/// any is.
pub fn parse(args: &ImportArgs) -> Result<(Vec<Parsed>, find::Found), Failure> {
    let found = find::find(args)?;
    let options = args.options();
    let bar = bar(
        found.units.len() as u64,
        "reading {bar:40} {pos}/{len} files",
    );
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for unit in &found.units {
        match parse_unit(args.format, unit, &options) {
            Ok(p) => parsed.push(p),
            Err(e) => errors.push(e.to_string()),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !errors.is_empty() {
        return Err(Failure {
            code: 1,
            message: format!(
                "{}\nnothing was imported (--skip-bad imports the readable records and reports the rest)",
                errors.join("\n")
            ),
        });
    }
    Ok((parsed, found))
}

/// A progress bar of `len` steps drawn with `template`, when standard error is a terminal;
/// hidden otherwise.
fn bar(len: u64, template: &str) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// How each file's summary is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Summaries {
    /// Readable text.
    Text,
    /// One JSON object per line.
    Json,
    /// One line per session in the log (`journal serve --follow-import`), not on standard
    /// output.
    Log,
}

/// `journal serve --follow-import FORMAT[=PATH]`: a runtime's sessions to follow while
/// serving, in its usual location or under PATH.
#[derive(Clone, Debug)]
pub struct FollowSpec {
    format: Format,
    path: Option<PathBuf>,
}

impl std::str::FromStr for FollowSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<FollowSpec, String> {
        let (format, path) = match s.split_once('=') {
            Some((format, path)) => (format, Some(PathBuf::from(path))),
            None => (s, None),
        };
        let format = Format::from_str(format, false)
            .map_err(|_| format!("{format:?} is not codex, claude-code or openhands"))?;
        Ok(FollowSpec { format, path })
    }
}

impl FollowSpec {
    /// The import arguments of following it (the usual locations' environment variables
    /// apply), checked: the paths exist.
    ///
    /// # Errors
    /// A path, or a usual location, that does not exist.
    pub fn args(&self) -> Result<ImportArgs, Failure> {
        let env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let args = ImportArgs {
            format: self.format,
            paths: self.path.iter().cloned().collect(),
            codex_home: env("CODEX_HOME"),
            claude_dir: env("CLAUDE_CONFIG_DIR"),
            openhands_dir: None,
            follow: true,
            poll_ms: FOLLOW_POLL_MS,
            blobs: None,
            skip_bad: false,
            session: None,
            json: false,
        };
        find::find(&args)?;
        Ok(args)
    }
}

/// How often a followed session is looked at by default, in milliseconds.
const FOLLOW_POLL_MS: u64 = 500;

/// Writes the parsed files and prints their summaries in `form`; then, on standard error, how
/// many sessions were imported and how many files were skipped.
pub fn write(
    journal: &journal_engine::Journal,
    parsed: Vec<Parsed>,
    found: &find::Found,
    form: Summaries,
) -> Result<u8, Failure> {
    let total: u64 = parsed.iter().map(|p| p.events.len() as u64).sum();
    let bar = bar(total, "importing {bar:40} {pos}/{len} events ({per_sec})");
    let sessions = parsed.len();
    let mut before = 0;
    let mut all = import::Written::default();
    for mut file in parsed {
        let written = import::write(journal, &file, &mut |done| bar.set_position(before + done))?;
        before += file.events.len() as u64;
        all.events_written += written.events_written;
        all.revised += written.revised;
        all.already_present += written.already_present;
        file.summary.events_written = Some(written.events_written);
        bar.suspend(|| match form {
            Summaries::Json => out::line(json!(file.summary)),
            Summaries::Text | Summaries::Log => out::text(text(&file, written)),
        })?;
    }
    bar.finish_and_clear();
    if found.searched || sessions > 1 {
        let skipped = if found.searched {
            format!(
                "; {} other files skipped (not {} sessions)",
                found.skipped, found.format
            )
        } else {
            String::new()
        };
        out::warn(format_args!(
            "imported {sessions} sessions: {} events written, {} revised, {} already present{skipped}",
            all.events_written, all.revised, all.already_present
        ));
    }
    Ok(0)
}

fn text(file: &Parsed, written: import::Written) -> String {
    let s = &file.summary;
    let requests = format!(
        "  requests {}, context messages {}\n",
        s.requests, s.context_messages
    );
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
    out.push_str(&requests);
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
