//! The `journal` command: a thin shell over `journal-engine`. Every subcommand opens the
//! journal in `--dir` (default `./journal-data`, or `JOURNAL_DIR`), does one thing, and exits
//! with 0 (ok), 1 (the request failed: bad input, conflict, I/O), 2 (usage) or 3 (corruption
//! found).

mod command;
mod demo;
mod export;
mod import;
mod models;
mod pack;
mod replay;
mod schema;

use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use journal_engine::seams::{uuid_v7, SystemClock, SystemEntropy};
use journal_engine::{AppendOptions, Error, Filter, Journal, Limits, Options, VerifyOptions};
use journal_format::{ChainHash, Envelope, Position, StoredEvent};
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
            eprintln!("journal: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(f) if f.message.contains("Broken pipe") => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("journal: {}", f.message);
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

fn open(cli: &Cli, access: Access) -> Result<Journal, Failure> {
    let conformance = match &cli.verb {
        Verb::Append(args) => args.strict.map(Profile::schema),
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
            eprintln!("journal: another process has the journal open; reading it read-only, without its index");
            Journal::open(&cli.dir, options(true))?
        }
        other => other?,
    };
    let report = journal.recovery_report();
    if !report.actions.is_empty() {
        let actions = serde_json::to_string(&report.actions).unwrap_or_default();
        eprintln!("journal: recovery: {actions}");
    }
    Ok(journal)
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
        println!("{text}");
        return Ok(0);
    }
    if let Verb::Append(args) = &cli.verb {
        if !args.stream {
            // Check the whole input before opening anything, so bad input leaves the journal
            // directory byte-for-byte unchanged.
            let (events, lines) = parse_input(args)?;
            let journal = open(&cli, Access::Write)?;
            let code = append_all(&journal, args, events, &lines).await?;
            journal.close();
            return Ok(code);
        }
    }
    let access = match &cli.verb {
        Verb::Append(_) | Verb::Blob(BlobCommand::Put { .. }) => Access::Write,
        Verb::Tail(args) if args.follow => Access::Follow,
        _ => Access::Read,
    };
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
    let journal = open(&cli, access)?;
    let code = match &cli.verb {
        // Answered above, before opening.
        Verb::Schema(_) | Verb::Command(_) | Verb::Demo(_) | Verb::Import(_) => 0,
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
                None => {
                    export::export(&journal, args.filter.filter(), schema, io::stdout().lock())?
                }
            };
            eprintln!("{}", summary.to_json());
            0
        }
        Verb::Append(args) => append_stream(&journal, args).await?,
        Verb::Read(args) => {
            read(&journal, args.filter.filter())?;
            0
        }
        Verb::Tail(args) => tail(&journal, args).await?,
        Verb::Verify(args) => verify(&journal, args)?,
        Verb::Digest => {
            let head = journal.head();
            println!(
                "{}",
                json!({"position": head.position.0, "hash": head.hash.to_hex()})
            );
            0
        }
        Verb::Status => {
            let mut status =
                serde_json::to_value(journal.status()?).map_err(|e| fail(e.to_string()))?;
            if let Value::Object(o) = &mut status {
                o.insert("projections".into(), models::status(&journal)?);
            }
            println!("{status}");
            0
        }
        Verb::Get(args) if args.kind == "history" => {
            models::history(&journal, &args.id, args.cursor, args.limit)?
        }
        Verb::Get(args) => models::get(
            &journal,
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
        Verb::Rebuild(args) if args.verify => models::verify(&journal, args.projection.as_deref())?,
        Verb::Rebuild(args) => models::rebuild(&journal, args.projection.as_deref())?,
        Verb::Blob(BlobCommand::Put { file }) => {
            let bytes =
                std::fs::read(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
            let reference = journal.blobs().put(&bytes)?;
            println!("{}", json!({"ref": reference, "bytes": bytes.len()}));
            0
        }
        Verb::Blob(BlobCommand::Get { reference }) => match journal.blobs().get(reference)? {
            Some(bytes) => {
                io::stdout().lock().write_all(&bytes)?;
                0
            }
            None => return Err(fail(format!("no blob {reference}"))),
        },
    };
    journal.close();
    Ok(code)
}

fn input(file: Option<&PathBuf>) -> Result<Box<dyn BufRead + Send>, Failure> {
    match file {
        None => Ok(Box::new(io::BufReader::new(io::stdin()))),
        Some(p) if p.as_os_str() == "-" => Ok(Box::new(io::BufReader::new(io::stdin()))),
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| fail(format!("{}: {e}", p.display())))?;
            Ok(Box::new(io::BufReader::with_capacity(1 << 20, f)))
        }
    }
}

/// Parses one input line; blank lines are skipped (`None`). A missing `eventId` gets a UUID v7.
fn parse_line(line: &[u8], number: usize) -> Result<Option<Envelope>, Failure> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Envelope::from_json_slice(line, &mut || uuid_v7(&SystemClock, &SystemEntropy))
        .map(Some)
        .map_err(|e| fail(format!("line {number}: {e}")))
}

/// Reads and checks the whole input: every line parses, and the batch fits the limits. Returns
/// the events and the line number of each.
fn parse_input(args: &AppendArgs) -> Result<(Vec<Envelope>, Vec<usize>), Failure> {
    let mut reader = input(args.file.as_ref())?;
    let mut events = Vec::new();
    let mut numbers = Vec::new();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if let Some(event) = parse_line(&line, number)? {
            events.push(event);
            numbers.push(number);
        }
    }
    Limits::default().check_batch(&events, args.strict.map(Profile::schema)).map_err(|e| match e {
        Error::EventTooLarge { index, event_id, size, limit } => fail(format!(
            "event #{} ({event_id}) is {size} bytes stored, over the event size limit of {limit}",
            index + 1
        )),
        Error::LimitExceeded { what, actual, limit } => fail(format!(
            "the input's {what} is {actual}, over the limit of {limit}; use --stream to append it in several batches"
        )),
        Error::InvalidEvent { index: Some(i), source } => fail(format!(
            "line {}: {source}",
            numbers.get(i).copied().unwrap_or(i + 1)
        )),
        other => Failure::from(other),
    })?;
    Ok((events, numbers))
}

/// An append's error, naming the input line of the event it is about, when it is about one.
fn append_failure(e: Error, lines: &[usize]) -> Failure {
    let line = |i: usize| lines.get(i).copied().unwrap_or(i + 1);
    match e {
        Error::InvalidEvent {
            index: Some(i),
            source,
        } => fail(format!("line {}: {source}", line(i))),
        Error::IdReused { index, .. } => fail(format!("line {}: {e}", line(index))),
        other => Failure::from(other),
    }
}

fn ack_line(a: &journal_engine::Appended) -> String {
    let mut v = json!({
        "position": a.position.0,
        "eventId": a.event_id,
        "hash": a.hash.to_hex(),
        "streamVersion": a.stream_version,
    });
    if a.duplicate {
        v["duplicate"] = json!(true);
    }
    v.to_string()
}

/// Appends the checked input as one atomic batch.
async fn append_all(
    journal: &Journal,
    args: &AppendArgs,
    events: Vec<Envelope>,
    lines: &[usize],
) -> Result<u8, Failure> {
    let options = AppendOptions {
        expected_stream_version: args.expected_version,
    };
    let appended = journal
        .append_batch(events, options)
        .await
        .map_err(|e| append_failure(e, lines))?;
    let mut out = BufWriter::new(io::stdout().lock());
    for a in &appended {
        writeln!(out, "{}", ack_line(a))?;
    }
    out.flush()?;
    Ok(0)
}

/// Appends lines as they arrive, one group-committed batch per burst of input, acknowledging
/// each event once it is durable.
async fn append_stream(journal: &Journal, args: &AppendArgs) -> Result<u8, Failure> {
    let reader = input(args.file.as_ref())?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<io::Result<Vec<u8>>>(4096);
    std::thread::spawn(move || {
        let mut reader = reader;
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if tx.blocking_send(Ok(line)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let mut number = 0usize;
    let mut stdout = io::stdout().lock();
    while let Some(first) = rx.recv().await {
        let mut lines = vec![first];
        while lines.len() < 1000 {
            match rx.try_recv() {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        let mut batch = Vec::new();
        let mut numbers = Vec::new();
        let mut bad = None;
        for line in lines {
            number += 1;
            match line
                .map_err(Failure::from)
                .and_then(|l| parse_line(&l, number))
            {
                Ok(Some(event)) => {
                    batch.push(event);
                    numbers.push(number);
                }
                Ok(None) => {}
                Err(f) => {
                    bad = Some(f);
                    break;
                }
            }
        }
        let appended = journal
            .append_batch(batch, AppendOptions::default())
            .await
            .map_err(|e| append_failure(e, &numbers))?;
        let mut text = String::new();
        for a in &appended {
            text.push_str(&ack_line(a));
            text.push('\n');
        }
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        if let Some(f) = bad {
            return Err(f);
        }
    }
    Ok(0)
}

fn print_event(out: &mut impl Write, event: &StoredEvent) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &event.to_json_value())?;
    out.write_all(b"\n")
}

fn read(journal: &Journal, filter: Filter) -> Result<(), Failure> {
    let mut out = BufWriter::new(io::stdout().lock());
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
    let mut stdout = io::stdout().lock();
    while remaining > 0 {
        let Some(event) = subscription.next().await else {
            break;
        };
        let event = event?;
        let e = &event.envelope;
        let keep = filter
            .session
            .as_ref()
            .is_none_or(|s| e.session_id.as_ref() == Some(s))
            && filter
                .task
                .as_ref()
                .is_none_or(|t| e.task_id.as_ref() == Some(t))
            && filter
                .run
                .as_ref()
                .is_none_or(|r| e.run_id.as_ref() == Some(r))
            && filter
                .type_prefix
                .as_ref()
                .is_none_or(|p| e.event_type.starts_with(p.as_str()));
        if filter.to.is_some_and(|to| event.position > to) {
            break;
        }
        if keep {
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
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| fail(e.to_string()))?
    );
    Ok(if report.ok { 0 } else { 3 })
}
