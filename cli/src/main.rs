//! The `journal` command: a thin shell over `journal-engine`. Every subcommand but those an
//! auditor runs offline (`key`, `check-proof`, `checkpoint`) opens the journal in `--dir`
//! (default `./journal-data`, or `JOURNAL_DIR`), does one thing, and exits
//! with 0 (ok), 1 (the request failed: bad input, conflict, I/O), 2 (usage) or 3 (corruption
//! found).

mod append;
mod archive;
mod blob;
mod command;
mod demo;
mod export;
mod import;
mod key;
mod lines;
mod log;
mod models;
mod out;
mod pack;
mod proof;
mod prove;
mod read;
mod redact;
mod replay;
mod replicate;
mod schema;
mod serve;
mod verify;

use std::io;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use blob::BlobCommand;
use clap::{Args, Parser, Subcommand};
use journal_engine::{Error, Filter, Journal, Options};
use journal_format::Position;
use journal_projections::store::Store;
use serde_json::Value;

/// The journal engine's command line.
#[derive(Parser, Debug)]
#[command(
    name = "journal",
    version,
    about = "An event-sourced, hash-chained journal for agent runtimes."
)]
pub(crate) struct Cli {
    /// The journal directory.
    #[arg(
        long,
        global = true,
        env = "JOURNAL_DIR",
        default_value = "./journal-data"
    )]
    pub(crate) dir: PathBuf,
    /// Open even if damage is found, moving the damaged part to quarantine/ (reported).
    #[arg(long, global = true)]
    pub(crate) salvage: bool,
    /// The master key of an encrypted journal: a file of 64 hex digits (`journal key master`
    /// makes one). The key itself may be given in `JOURNAL_MASTER_KEY` instead.
    #[arg(long, global = true, env = "JOURNAL_MASTER_KEY_FILE")]
    pub(crate) master_key: Option<PathBuf>,
    /// The archive directory this journal's old segments were moved to (`journal archive`):
    /// attached, reads, replay, proofs and rebuilds reach the archived positions and `verify`
    /// checks them.
    #[arg(long, global = true, env = "JOURNAL_ARCHIVE", value_name = "DIR")]
    pub(crate) archive: Option<PathBuf>,
    /// Seal segments at this size (`64MiB` by default; `256KiB`, `1MiB`, ...): smaller
    /// segments can be archived sooner. Applies to what is written from now on.
    #[arg(long, global = true, env = "JOURNAL_SEGMENT_SIZE", value_name = "SIZE")]
    pub(crate) segment_size: Option<String>,
    #[command(subcommand)]
    pub(crate) verb: Verb,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Verb {
    /// Append JSON Lines events from FILE or standard input.
    Append(AppendArgs),
    /// Print stored events as JSON Lines.
    Read(read::ReadArgs),
    /// Print recent events, then (with -f) follow new ones.
    Tail(read::TailArgs),
    /// Check every frame, the chain, footers, the index and blobs; print a JSON report.
    Verify(verify::VerifyArgs),
    /// Print the head's position and chain link, to keep outside the journal.
    Digest,
    /// Print the journal's state as JSON.
    Status,
    /// Store or fetch a blob (large output referenced as `blake3:<hex>`).
    #[command(subcommand)]
    Blob(blob::BlobCommand),
    /// Export events as Agent Runtime JSON Lines that validate against its schema.
    Export(export::ExportArgs),
    /// Run a control-plane command (create_task, respond_action, ...) with JSON arguments.
    Command(CommandArgs),
    /// Print JSON Schemas: the event form, payloads, commands, state (all, or NAME).
    Schema(schema::SchemaArgs),
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
    /// models, a replay, verify (in ./journal-demo, replaced by each demo).
    Demo(DemoArgs),
    /// Serve the journal over HTTP (append, read, follow, commands, read models), holding its
    /// writer; stops cleanly on SIGTERM or SIGINT (docs/SERVER.md).
    Serve(serve::ServeArgs),
    /// Publish every committed event, in position order, to a NATS JetStream stream, resuming
    /// after the last acknowledged one; runs beside the journal's writer (docs/REPLICATION.md).
    Replicate(replicate::ReplicateArgs),
    /// Build a replica (same positions and chain) from a stream `replicate` fills, or, with
    /// several --stream, one fleet journal keeping each event's origin.
    Follow(replicate::FollowArgs),
    /// Append the Agent Runtime events producers publish to NATS subjects, each acknowledged
    /// once durable; refused ones go to a dead-letter subject.
    Ingest(replicate::IngestArgs),
    /// Create, list or revoke the bearer tokens `journal serve` accepts.
    #[command(subcommand)]
    Token(serve::TokenCommand),
    /// Create an Ed25519 key for signing checkpoints (NAME.key and NAME.pub); make, install,
    /// rotate or show the master key that encrypts the journal's content.
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Make a session's, a run's or an event's content unreadable for good (its keys
    /// destroyed), recording a `journal.redacted` fact; `verify` and proofs still pass.
    Redact(redact::RedactArgs),
    /// Move sealed segments to an archive directory (by position, age or size), keeping the
    /// chain and the Merkle tree continuous; the manifest `ARCHIVE` lists them (docs/ARCHIVE.md).
    Archive(archive::ArchiveArgs),
    /// Bring archived segments back into the live log, checking their hashes first.
    Restore(archive::RestoreArgs),
    /// Check a proof document offline, with nothing but the file and the verifier keys; exit 3
    /// when it does not hold.
    CheckProof(proof::CheckProofArgs),
    /// Sign, list, show or keep the journal's checkpoints; verify or cosign one offline.
    #[command(subcommand)]
    Checkpoint(proof::CheckpointCommand),
    /// Prove an event is in the journal, or that it only grew: a proof document for
    /// `journal check-proof`.
    #[command(subcommand)]
    Prove(prove::ProveCommand),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Where to build the demo journal (replaced by each demo; never a directory that holds
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
    /// (the ecosystem contract's Agent* views), `resume` (what a runtime restores from), `history` (a window
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

#[derive(Args, Debug)]
struct CommandArgs {
    /// The command's name, e.g. `create_task`.
    name: String,
    /// Its arguments as a JSON object; `-` or nothing reads standard input.
    args: Option<String>,
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
pub(crate) enum Access {
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
pub(crate) fn check_exists(dir: &std::path::Path) -> Result<(), Failure> {
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

pub(crate) fn open(cli: &Cli, access: Access) -> Result<Journal, Failure> {
    if access != Access::Write {
        check_exists(&cli.dir)?;
    }
    let conformance = match &cli.verb {
        Verb::Append(args) => args.strict.map(Profile::schema),
        Verb::Serve(args) => args.strict.map(Profile::schema),
        _ => None,
    };
    let checkpoints = match &cli.verb {
        Verb::Serve(args) => serve::checkpoint_policy(args)?,
        _ => None,
    };
    let encryption = key::encryption(cli)?;
    let limits = limits(cli)?;
    let options = |read_only| Options {
        limits,
        archive: cli.archive.clone(),
        salvage: cli.salvage,
        read_only,
        conformance,
        checkpoints: checkpoints.clone(),
        encryption: encryption.clone(),
        // A replica takes its source's key store; it needs no master key to follow.
        replica: matches!(cli.verb, Verb::Follow(_)),
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

/// The limits `--segment-size` asks for: segments sealed at that size, batches and events
/// bounded to fit in one.
fn limits(cli: &Cli) -> Result<journal_engine::Limits, Failure> {
    let mut limits = journal_engine::Limits::default();
    let Some(text) = &cli.segment_size else {
        return Ok(limits);
    };
    let size = journal_engine::archive::parse_size(text)?;
    if size < 16 * 1024 {
        return Err(fail(format!(
            "--segment-size {text} is too small: at least 16KiB"
        )));
    }
    limits.segment_bytes_max = size;
    limits.batch_bytes_max = limits.batch_bytes_max.min(size / 2);
    let event_max = u64::from(limits.event_bytes_max).min(limits.batch_bytes_max / 2);
    limits.event_bytes_max = u32::try_from(event_max).unwrap_or(limits.event_bytes_max);
    Ok(limits)
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

/// Runs the command: first those that check their input before opening anything or open no
/// journal of their own, then those that use the journal opened here.
async fn run(cli: Cli) -> Result<u8, Failure> {
    match &cli.verb {
        Verb::Schema(args) => schema::run(args),
        Verb::Append(args) if !args.stream => append_checked(&cli, args).await,
        Verb::Token(command) => serve::token(&cli.dir, command),
        Verb::Key(command) if command.offline() => key::run(command),
        Verb::Key(command) => key::on_journal(&cli, command),
        Verb::Redact(args) => redact::run(&cli, args),
        Verb::Archive(args) => archive::archive(&cli, args),
        Verb::Restore(args) => archive::restore(&cli, args),
        Verb::CheckProof(args) => proof::check_proof(args),
        Verb::Checkpoint(command) if command.offline() => proof::checkpoint(command),
        Verb::Serve(args) => serve::serve(&cli, args).await,
        Verb::Demo(args) => demo::run(&args.out).await,
        Verb::Import(args) => import(&cli, args).await,
        Verb::Command(args) => command(&cli, args).await,
        _ => with_journal(&cli).await,
    }
}

/// `append` of a whole input: checked before opening anything, so bad input leaves the
/// journal directory byte-for-byte unchanged, then appended as one batch.
async fn append_checked(cli: &Cli, args: &AppendArgs) -> Result<u8, Failure> {
    let batch = append::parse_input(args, limits(cli)?)?;
    let journal = open(cli, Access::Write)?;
    let code = append::append_all(&journal, args, batch).await?;
    journal.close();
    Ok(code)
}

/// `import`: every file is parsed before the journal is opened, so a damaged one writes
/// nothing; `--follow` imports what the files gain until SIGINT or SIGTERM.
async fn import(cli: &Cli, args: &import::ImportArgs) -> Result<u8, Failure> {
    let form = if args.json {
        import::Summaries::Json
    } else {
        import::Summaries::Text
    };
    if args.follow {
        let journal = open(cli, Access::Write)?;
        let stop = journal_server::shutdown_signal()
            .map_err(|e| fail(format!("cannot install the Ctrl-C handler: {e}")))?;
        let code = import::follow(&journal, args, form, stop).await?;
        journal.close();
        return Ok(code);
    }
    let (parsed, found) = import::parse(args)?;
    let journal = open(cli, Access::Write)?;
    let code = tokio::task::block_in_place(|| import::write(&journal, parsed, &found, form))?;
    journal.close();
    Ok(code)
}

/// `command`: its arguments are checked before the journal is opened, so a refused command
/// leaves nothing behind.
async fn command(cli: &Cli, args: &CommandArgs) -> Result<u8, Failure> {
    let parsed = match command::parse(&args.name, args.args.as_deref())? {
        Ok(parsed) => parsed,
        Err(violation) => return command::refuse(&violation),
    };
    let journal = open(cli, Access::Write)?;
    let code = command::run(&journal, &parsed).await?;
    journal.close();
    Ok(code)
}

/// The commands that use the journal opened here (and the read-model store, those that use
/// it).
async fn with_journal(cli: &Cli) -> Result<u8, Failure> {
    let access = match &cli.verb {
        Verb::Append(_) | Verb::Blob(BlobCommand::Put { .. }) => Access::Write,
        Verb::Checkpoint(command) if command.writes() => Access::Write,
        Verb::Tail(args) if args.follow => Access::Follow,
        Verb::Replicate(_) => Access::Follow,
        Verb::Follow(_) | Verb::Ingest(_) => Access::Write,
        _ => Access::Read,
    };
    let store = open_store_first(cli)?;
    let journal = open(cli, access)?;
    let code = on_journal(&cli.verb, &journal, store).await?;
    journal.close();
    Ok(code)
}

/// Runs `verb` on the open `journal`.
async fn on_journal(
    verb: &Verb,
    journal: &Journal,
    store: Option<Arc<Store>>,
) -> Result<u8, Failure> {
    match verb {
        // Answered by `run`, before a journal is opened.
        Verb::Schema(_)
        | Verb::Command(_)
        | Verb::Demo(_)
        | Verb::Import(_)
        | Verb::Serve(_)
        | Verb::Token(_)
        | Verb::Key(_)
        | Verb::Redact(_)
        | Verb::Archive(_)
        | Verb::Restore(_)
        | Verb::CheckProof(_) => Ok(0),
        Verb::Checkpoint(command) => prove::checkpoint(journal, command),
        Verb::Prove(command) => prove::prove(journal, command),
        Verb::Export(args) => export::run(journal, args),
        Verb::Append(args) => append::append_stream(journal, args).await,
        Verb::Read(args) => {
            read::read(journal, args.filter.filter())?;
            Ok(0)
        }
        Verb::Tail(args) => read::tail(journal, args).await,
        Verb::Verify(args) => verify::verify(journal, args),
        Verb::Digest => verify::digest(journal),
        Verb::Status => status(journal, store),
        Verb::Get(args) if args.kind == "history" => {
            models::history(journal, &args.id, args.cursor, args.limit)
        }
        Verb::Get(args) => models::get(
            journal,
            store,
            args.format,
            &args.kind,
            &args.id,
            args.min_position,
            std::time::Duration::from_millis(args.timeout_ms),
        ),
        Verb::Replay(args) => replay::replay(
            journal,
            args.kind,
            &args.id,
            args.at,
            args.format,
            args.out.as_deref(),
        ),
        Verb::Rebuild(args) if args.verify => {
            models::verify(journal, store, args.projection.as_deref())
        }
        Verb::Rebuild(args) => models::rebuild(journal, store, args.projection.as_deref()),
        Verb::Blob(command) => blob::run(journal, command),
        Verb::Replicate(args) => replicate::replicate(journal, args).await,
        Verb::Follow(args) => replicate::follow(journal, args).await,
        Verb::Ingest(args) => replicate::ingest(journal, args).await,
    }
}

/// `status`: the journal's state, with the read models' when a store exists.
fn status(journal: &Journal, store: Option<Arc<Store>>) -> Result<u8, Failure> {
    let mut status = serde_json::to_value(journal.status()?).map_err(|e| fail(e.to_string()))?;
    if let Value::Object(o) = &mut status {
        o.insert("projections".into(), models::status(journal, store)?);
    }
    out::line(&status)?;
    Ok(0)
}
