//! The `journal` command: a thin shell over `journal-engine`. Every subcommand opens the
//! journal in `--dir` (default `./journal-data`, or `JOURNAL_DIR`), does one thing, and exits
//! with 0 (ok), 1 (the request failed: bad input, conflict, I/O), 2 (usage) or 3 (corruption
//! found).

mod append;
mod command;
mod demo;
mod export;
mod import;
mod lines;
mod models;
mod out;
mod pack;
mod replay;
mod schema;
mod serve;

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use journal_engine::{Error, Filter, Journal, Options, VerifyOptions};
use journal_format::{ChainHash, Position, StoredEvent};
use journal_projections::store::Store;
use serde_json::{json, Value};

/// The journal engine's command line.
#[derive(Parser, Debug)]
#[command(
    name = "journal",
    version,
    about = "An event-sourced, hash-chained journal for agent runtimes."
)]
struct Cli {
    /// The journal directory.
    #[arg(
        long,
        global = true,
        env = "JOURNAL_DIR",
        default_value = "./journal-data"
    )]
    dir: PathBuf,
    /// Open even if damage is found, moving the damaged part to quarantine/ (reported).
    #[arg(long, global = true)]
    salvage: bool,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand, Debug)]
enum Verb {
    /// Append JSON Lines events from FILE or standard input.
    Append(AppendArgs),
    /// Print stored events as JSON Lines.
    Read(ReadArgs),
    /// Print recent events, then (with -f) follow new ones.
    Tail(TailArgs),
    /// Check every frame, the chain, footers, the index and blobs; print a JSON report.
    Verify(VerifyArgs),
    /// Print the head's position and chain link, to keep outside the journal.
    Digest,
    /// Print the journal's state as JSON.
    Status,
    /// Store or fetch a blob (large output referenced as `blake3:<hex>`).
    #[command(subcommand)]
    Blob(BlobCommand),
    /// Export events as Agent Runtime JSON Lines that validate against its schema.
    Export(ExportArgs),
    /// Run a control-plane command (create_task, respond_action, ...) with JSON arguments.
    Command(CommandArgs),
    /// Print JSON Schemas: the event form, payloads, commands, state (all, or NAME).
    Schema(SchemaArgs),
    /// Print a read model with its freshness, after catching the projections up.
    Get(GetArgs),
    /// Rebuild the read models from the log and print each one's digest.
    Rebuild(RebuildArgs),
    /// Tell what happened in a run, task or session: steps, gaps, final state.
    Replay(ReplayArgs),
    /// Import sessions other runtimes wrote (Claude Code, Codex, OpenHands) as events; a
    /// second import of the same file adds nothing.
    Import(import::ImportArgs),
    /// The whole product in a few seconds: a workload, a killed writer, recovery, read
    /// models, a replay, verify (in ./journal-demo, replaced on each run).
    Demo(DemoArgs),
    /// Serve the journal over HTTP (append, read, follow, commands, read models), holding its
    /// writer; stops cleanly on SIGTERM or SIGINT (docs/SERVER.md).
    Serve(serve::ServeArgs),
    /// Create, list or revoke the bearer tokens `journal serve` accepts.
    #[command(subcommand)]
    Token(serve::TokenCommand),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Where to build the demo journal (replaced on each run; never a directory that holds
    /// something else).
    #[arg(long, default_value = "./journal-demo")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// What to replay.
    #[arg(value_enum)]
    kind: replay::Kind,
    /// Its id.
    id: String,
    /// The narrative as of this position (time travel).
    #[arg(long)]
    at: Option<u64>,
    /// `text` (colour on a terminal), `json`, or `html` (one self-contained file).
    #[arg(long, value_enum, default_value = "text")]
    format: replay::Format,
    /// Write to FILE instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct GetArgs {
    /// `session`, `thread`, `task`, `run`, `checklist`, `queue`, `evidence`, `ecosystem`
    /// (seed 000's Agent* views), `resume` (what a runtime restores from), `history` (a window
    /// of the session's events: --cursor, --limit), or the raw projections `state` and
    /// `activity`.
    kind: String,
    /// The id: a session id for session, checklist, queue, evidence, ecosystem, state and
    /// activity (or a stream key such as `task:t1`); else the thread's, task's or run's id.
    id: String,
    /// Wait until the read models reflect at least this position (read your own writes).
    #[arg(long)]
    min_position: Option<u64>,
    /// How long to wait for --min-position, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// With `history`: the position the window starts from.
    #[arg(long, default_value_t = 1)]
    cursor: u64,
    /// With `history`: the most events in the window.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// `journal` (the read model as the journal keeps it) or `agentruntime` (session and
    /// thread only: the Agent Runtime snapshot form, validating against its schema).
    #[arg(long, value_enum, default_value = "journal")]
    format: models::Form,
}

#[derive(Args, Debug)]
struct RebuildArgs {
    /// Rebuild only this projection (`state` or `activity`).
    #[arg(long)]
    projection: Option<String>,
    /// Keep the stored read models: catch them up, rebuild from scratch beside them, and
    /// compare digests (exit 3 when they differ).
    #[arg(long)]
    verify: bool,
}

/// Which Agent Runtime schema `--strict` and `export --profile` check against.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Profile {
    /// `agentruntime-event.schema.json`.
    Core,
    /// `agentruntime-lime-profile-event.schema.json` (stricter).
    Lime,
}

impl Profile {
    fn schema(self) -> journal_format::conformance::Schema {
        match self {
            Profile::Core => journal_format::conformance::Schema::Event,
            Profile::Lime => journal_format::conformance::Schema::LimeEvent,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ExportFormat {
    /// Agent Runtime event objects, one per line.
    Agentruntime,
}

#[derive(Args, Debug)]
struct ExportArgs {
    /// `replay` or `evidence`: a pack of files for a session (`--session ID --out DIR`);
    /// without it, the events as Agent Runtime JSON Lines.
    #[arg(value_enum)]
    pack: Option<pack::Pack>,
    /// The output form.
    #[arg(long, value_enum, default_value = "agentruntime")]
    format: ExportFormat,
    /// The schema every written event must validate against.
    #[arg(long, value_enum, default_value = "core")]
    profile: Profile,
    /// Write to FILE instead of standard output (for `replay` and `evidence`: the directory,
    /// new or empty).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    filter: FilterArgs,
}

#[derive(Args, Debug)]
struct CommandArgs {
    /// The command's name, e.g. `create_task`.
    name: String,
    /// Its arguments as a JSON object; `-` or nothing reads standard input.
    args: Option<String>,
}

#[derive(Args, Debug)]
struct SchemaArgs {
    /// One schema: `event`, `payload.<Shape>`, `command.<name>`, `state.stream`,
    /// `agentruntime.<file>`; `--list` lists the names.
    name: Option<String>,
    /// List the schema names.
    #[arg(long)]
    list: bool,
}

#[derive(Args, Debug)]
struct AppendArgs {
    /// The input file; `-` or nothing for standard input.
    file: Option<PathBuf>,
    /// Append lines as they arrive, in group-committed batches, printing each acknowledgement
    /// once it is durable (instead of checking the whole input and appending it as one batch).
    #[arg(long)]
    stream: bool,
    /// Refuse the append unless the events' stream has exactly this many events.
    #[arg(long, conflicts_with = "stream")]
    expected_version: Option<u64>,
    /// Strict mode: every event must also validate against the Agent Runtime JSON Schema
    /// (`core`, or the stricter `lime` profile).
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "core")]
    strict: Option<Profile>,
}

#[derive(Args, Debug, Clone)]
struct FilterArgs {
    /// First position (inclusive).
    #[arg(long)]
    from: Option<u64>,
    /// Last position (inclusive).
    #[arg(long)]
    to: Option<u64>,
    /// Only events of this session.
    #[arg(long)]
    session: Option<String>,
    /// Only events of this task.
    #[arg(long)]
    task: Option<String>,
    /// Only events of this run.
    #[arg(long)]
    run: Option<String>,
    /// Only events whose type starts with this.
    #[arg(long = "type")]
    type_prefix: Option<String>,
    /// At most this many events.
    #[arg(long)]
    limit: Option<usize>,
}

impl FilterArgs {
    fn filter(&self) -> Filter {
        Filter {
            from: self.from.map(Position),
            to: self.to.map(Position),
            session: self.session.clone(),
            task: self.task.clone(),
            run: self.run.clone(),
            type_prefix: self.type_prefix.clone(),
            limit: self.limit,
        }
    }
}

#[derive(Args, Debug)]
struct ReadArgs {
    #[command(flatten)]
    filter: FilterArgs,
}

#[derive(Args, Debug)]
struct TailArgs {
    /// Keep following new events.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Without --from, start this many events before the head.
    #[arg(short = 'n', long, default_value_t = 10)]
    lines: u64,
    #[command(flatten)]
    filter: FilterArgs,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    /// A digest kept outside the journal, as POSITION:HASH (from `journal digest`).
    #[arg(long)]
    digest: Option<String>,
}

#[derive(Subcommand, Debug)]
enum BlobCommand {
    /// Store a file; prints its reference.
    Put {
        /// The file to store.
        file: PathBuf,
    },
    /// Write a blob's bytes to standard output.
    Get {
        /// The reference (`blake3:<hex>`) or hex.
        reference: String,
    },
}

/// A failure with its exit code.
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            code: if e.is_corruption() { 3 } else { 1 },
            message: e.to_string(),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure {
            code: 1,
            message: e.to_string(),
        }
    }
}

pub(crate) fn fail(message: impl Into<String>) -> Failure {
    Failure {
        code: 1,
        message: message.into(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out::warn(format_args!("journal: cannot start the runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        // The reader of standard output went away: end quietly, as `cat` does.
        Err(_) if out::closed() => ExitCode::SUCCESS,
        Err(f) => {
            out::warn(format_args!("journal: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}

/// How a command uses the journal.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Access {
    /// Appends: needs the lock.
    Write,
    /// Reads: takes the lock when it can (full recovery and index); read-only beside a process
    /// that has the journal open.
    Read,
    /// Follows: always read-only, so that it never keeps a writer out.
    Follow,
}

/// The directory every journal holds its segments in (`docs/FORMAT.md`, file naming): what tells
/// a journal from any other directory.
const SEGMENTS_DIR: &str = "segments";

/// Refuses a directory that holds no journal: only the commands that write create one, so that
/// a mistyped `--dir` is not answered with an empty journal made on the spot.
fn check_exists(dir: &std::path::Path) -> Result<(), Failure> {
    if dir.join(SEGMENTS_DIR).is_dir() {
        return Ok(());
    }
    Err(fail(format!(
        "no journal in {}: it has no {SEGMENTS_DIR}/ directory (only commands that write, such as append, create a journal)",
        dir.display()
    )))
}

/// Whether `e` says the disk (or a quota) is full.
fn is_disk_full(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => {
            source.kind() == std::io::ErrorKind::StorageFull
                || source.kind() == std::io::ErrorKind::QuotaExceeded
                || source.to_string().contains("No space left on device")
        }
        Error::Index(message) => message.contains("No space left on device"),
        _ => false,
    }
}

fn open(cli: &Cli, access: Access) -> Result<Journal, Failure> {
    if access != Access::Write {
        check_exists(&cli.dir)?;
    }
    let conformance = match &cli.verb {
        Verb::Append(args) => args.strict.map(Profile::schema),
        Verb::Serve(args) => args.strict.map(Profile::schema),
        _ => None,
    };
    let options = |read_only| Options {
        salvage: cli.salvage,
        read_only,
        conformance,
        ..Options::default()
    };
    if cli.salvage && access == Access::Follow {
        return Err(Failure {
            code: 2,
            message: "--salvage cannot be used with tail -f".into(),
        });
    }
    let journal = match Journal::open(&cli.dir, options(access == Access::Follow)) {
        Err(Error::Locked(_)) if access == Access::Read && !cli.salvage => {
            out::warn(format_args!("journal: another process has the journal open; reading it read-only, without its index"));
            Journal::open(&cli.dir, options(true))?
        }
        // Opening for writing may write (a new tail segment, the head record, a torn tail kept
        // in quarantine); a reading command needs none of it.
        Err(e) if access == Access::Read && !cli.salvage && is_disk_full(&e) => {
            out::warn(format_args!(
                "journal: the disk is full; reading the journal read-only, without its index"
            ));
            Journal::open(&cli.dir, options(true))?
        }
        other => other?,
    };
    let report = journal.recovery_report();
    if !report.actions.is_empty() {
        let actions = serde_json::to_string(&report.actions).unwrap_or_default();
        out::warn(format_args!("journal: recovery: {actions}"));
    }
    Ok(journal)
}

/// The read-model store, for the commands that use it (`get`, `rebuild`, and `status` once a
/// store exists), opened before the journal: a command waiting for another process to be done
/// with the store holds no lock on the journal, so it keeps no writer out.
fn open_store_first(cli: &Cli) -> Result<Option<Arc<Store>>, Failure> {
    let uses_store = match &cli.verb {
        Verb::Get(args) => args.kind != "history",
        Verb::Rebuild(_) => true,
        Verb::Status => models::has_store(&cli.dir),
        _ => false,
    };
    if !uses_store {
        return Ok(None);
    }
    check_exists(&cli.dir)?;
    models::open_store(&cli.dir).map(Some)
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    if let Verb::Schema(args) = &cli.verb {
        let all = schema::all();
        let text = if args.list {
            all.keys().cloned().collect::<Vec<_>>().join("\n")
        } else if let Some(name) = &args.name {
            let one = all.get(name).ok_or_else(|| Failure {
                code: 2,
                message: format!("no schema named {name:?}; `journal schema --list` lists them"),
            })?;
            serde_json::to_string_pretty(one).map_err(|e| fail(e.to_string()))?
        } else {
            serde_json::to_string_pretty(&all).map_err(|e| fail(e.to_string()))?
        };
        out::line(&text)?;
        return Ok(0);
    }
    if let Verb::Append(args) = &cli.verb {
        if !args.stream {
            // Check the whole input before opening anything, so bad input leaves the journal
            // directory byte-for-byte unchanged.
            let batch = append::parse_input(args)?;
            let journal = open(&cli, Access::Write)?;
            let code = append::append_all(&journal, args, batch).await?;
            journal.close();
            return Ok(code);
        }
    }
    let access = match &cli.verb {
        Verb::Append(_) | Verb::Blob(BlobCommand::Put { .. }) | Verb::Serve(_) => Access::Write,
        Verb::Tail(args) if args.follow => Access::Follow,
        _ => Access::Read,
    };
    if let Verb::Token(command) = &cli.verb {
        return serve::token(&cli.dir, command);
    }
    if let Verb::Serve(args) = &cli.verb {
        return serve::serve(&cli, args).await;
    }
    if let Verb::Demo(args) = &cli.verb {
        return demo::run(&args.out).await;
    }
    if let Verb::Import(args) = &cli.verb {
        // Every file is parsed before the journal is opened: a damaged one writes nothing.
        let parsed = import::parse(args)?;
        let journal = open(&cli, Access::Write)?;
        let code = tokio::task::block_in_place(|| import::write(&journal, parsed, args.json))?;
        journal.close();
        return Ok(code);
    }
    if let Verb::Command(args) = &cli.verb {
        // Arguments are checked before the journal is opened: a refused command leaves
        // nothing behind.
        let parsed = match command::parse(&args.name, args.args.as_deref())? {
            Ok(parsed) => parsed,
            Err(violation) => return command::refuse(&violation),
        };
        let journal = open(&cli, Access::Write)?;
        let code = command::run(&journal, &parsed).await?;
        journal.close();
        return Ok(code);
    }
    let store = open_store_first(&cli)?;
    let journal = open(&cli, access)?;
    let code = match &cli.verb {
        // Answered above, before opening.
        Verb::Schema(_)
        | Verb::Command(_)
        | Verb::Demo(_)
        | Verb::Import(_)
        | Verb::Serve(_)
        | Verb::Token(_) => 0,
        Verb::Export(ExportArgs {
            pack: Some(what),
            out,
            filter,
            ..
        }) => {
            let (Some(session), Some(out)) = (&filter.session, out) else {
                return Err(Failure {
                    code: 2,
                    message: "export replay|evidence needs --session ID and --out DIR".into(),
                });
            };
            pack::export(&journal, *what, session, out)?
        }
        Verb::Export(args) => {
            let ExportFormat::Agentruntime = args.format;
            let schema = args.profile.schema();
            let summary = match &args.out {
                Some(path) => {
                    let file = std::fs::File::create(path)
                        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
                    export::export(&journal, args.filter.filter(), schema, file)?
                }
                None => export::export(&journal, args.filter.filter(), schema, out::stdout())?,
            };
            out::warn(summary.to_json());
            0
        }
        Verb::Append(args) => append::append_stream(&journal, args).await?,
        Verb::Read(args) => {
            read(&journal, args.filter.filter())?;
            0
        }
        Verb::Tail(args) => tail(&journal, args).await?,
        Verb::Verify(args) => verify(&journal, args)?,
        Verb::Digest => {
            let head = journal.head();
            out::line(format_args!(
                "{}",
                json!({"position": head.position.0, "hash": head.hash.to_hex()})
            ))?;
            0
        }
        Verb::Status => {
            let mut status =
                serde_json::to_value(journal.status()?).map_err(|e| fail(e.to_string()))?;
            if let Value::Object(o) = &mut status {
                o.insert("projections".into(), models::status(&journal, store)?);
            }
            out::line(&status)?;
            0
        }
        Verb::Get(args) if args.kind == "history" => {
            models::history(&journal, &args.id, args.cursor, args.limit)?
        }
        Verb::Get(args) => models::get(
            &journal,
            store,
            args.format,
            &args.kind,
            &args.id,
            args.min_position,
            std::time::Duration::from_millis(args.timeout_ms),
        )?,
        Verb::Replay(args) => replay::replay(
            &journal,
            args.kind,
            &args.id,
            args.at,
            args.format,
            args.out.as_deref(),
        )?,
        Verb::Rebuild(args) if args.verify => {
            models::verify(&journal, store, args.projection.as_deref())?
        }
        Verb::Rebuild(args) => models::rebuild(&journal, store, args.projection.as_deref())?,
        Verb::Blob(BlobCommand::Put { file }) => {
            let bytes =
                std::fs::read(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
            let reference = journal.blobs().put(&bytes)?;
            out::line(json!({"ref": reference, "bytes": bytes.len()}))?;
            0
        }
        Verb::Blob(BlobCommand::Get { reference }) => match journal.blobs().get(reference)? {
            Some(bytes) => {
                out::bytes(&bytes)?;
                0
            }
            None => return Err(fail(format!("no blob {reference}"))),
        },
    };
    journal.close();
    Ok(code)
}

fn print_event(out: &mut impl Write, event: &StoredEvent) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &event.to_json_value())?;
    out.write_all(b"\n")
}

fn read(journal: &Journal, filter: Filter) -> Result<(), Failure> {
    let mut out = BufWriter::new(out::stdout());
    for event in journal.query(filter)? {
        print_event(&mut out, &event?)?;
    }
    out.flush()?;
    Ok(())
}

async fn tail(journal: &Journal, args: &TailArgs) -> Result<u8, Failure> {
    let mut filter = args.filter.filter();
    let head = journal.head().position;
    if filter.from.is_none() {
        filter.from = Some(Position(
            head.0.saturating_sub(args.lines.saturating_sub(1)).max(1),
        ));
    }
    let from = filter.from.unwrap_or(Position(1));
    if !args.follow {
        read(journal, filter)?;
        return Ok(0);
    }
    let mut subscription = journal.subscribe(from);
    let mut remaining = filter.limit.unwrap_or(usize::MAX);
    filter.limit = None;
    let mut stdout = out::stdout();
    while remaining > 0 {
        let Some(event) = subscription.next().await else {
            break;
        };
        let event = event?;
        if filter.to.is_some_and(|to| event.position > to) {
            break;
        }
        if filter.matches(&event) {
            print_event(&mut stdout, &event)?;
            stdout.flush()?;
            remaining -= 1;
        }
    }
    Ok(0)
}

fn parse_digest(text: &str) -> Result<(Position, ChainHash), Failure> {
    let (position, hash) = text.split_once(':').ok_or_else(|| Failure {
        code: 2,
        message: format!("--digest takes POSITION:HASH, got {text:?}"),
    })?;
    let position = position.parse::<u64>().map_err(|e| Failure {
        code: 2,
        message: format!("--digest position {position:?}: {e}"),
    })?;
    let hash = ChainHash::from_hex(hash).map_err(|e| Failure {
        code: 2,
        message: format!("--digest hash: {e}"),
    })?;
    Ok((Position(position), hash))
}

fn verify(journal: &Journal, args: &VerifyArgs) -> Result<u8, Failure> {
    let digest = args.digest.as_deref().map(parse_digest).transpose()?;
    let bar = if io::stderr().is_terminal() {
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("verify {bar:40} {bytes}/{total_bytes} {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let options = VerifyOptions {
        digest,
        ..VerifyOptions::default()
    };
    let report = journal.verify(&options, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    out::line(format_args!(
        "{}",
        serde_json::to_string(&report).map_err(|e| fail(e.to_string()))?
    ))?;
    Ok(if report.ok { 0 } else { 3 })
}
