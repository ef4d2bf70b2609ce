//! `journal replicate`, `journal follow` and `journal ingest`: the shell over
//! `journal-replicate` (docs/REPLICATION.md). Each runs until SIGINT or SIGTERM (or `--until`),
//! logging on standard error and printing one JSON line when it stops; a frame the follower
//! refuses ends it with exit code 3, naming the position.

use std::time::Duration;

use clap::Args;
use journal_engine::Journal;
use journal_replicate::{FollowOptions, IngestOptions, ReplicateOptions, StreamLimits};
use serde_json::json;
use tokio::sync::watch;

use crate::{fail, out, Failure};

#[derive(Args, Debug)]
pub struct ReplicateArgs {
    /// The NATS server(s): nats://HOST:PORT, several separated by commas.
    #[arg(long, value_name = "URL")]
    to: String,
    /// The JetStream stream (created when missing).
    #[arg(long, default_value = "JOURNAL")]
    stream: String,
    /// Copies JetStream keeps of each message, when it creates the stream (1, 3 or 5).
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// The most bytes the stream may hold, when it creates it (0: no limit); past it
    /// publishes are refused and retried, nothing old is dropped.
    #[arg(long, default_value_t = 0)]
    max_bytes: i64,
    /// How long JetStream keeps a message, in seconds, when it creates the stream (0: for ever).
    #[arg(long, default_value_t = 0)]
    max_age_secs: u64,
    /// The most publishes awaiting JetStream's acknowledgement.
    #[arg(long, default_value_t = 512)]
    in_flight: usize,
    /// Stop once this position is acknowledged.
    #[arg(long)]
    until: Option<u64>,
}

#[derive(Args, Debug)]
pub struct FollowArgs {
    /// The NATS server(s).
    #[arg(long, value_name = "URL")]
    from: String,
    /// The stream to follow; several make a fleet journal, each event with its origin.
    #[arg(long, required = true)]
    stream: Vec<String>,
    /// The durable consumer's name.
    #[arg(long, default_value = "journal-follow")]
    consumer: String,
    /// Stop once the journal's head (or, for a fleet, each source) reaches this position.
    #[arg(long)]
    until: Option<u64>,
}

#[derive(Args, Debug)]
pub struct IngestArgs {
    /// The NATS server(s).
    #[arg(long, value_name = "URL")]
    from: String,
    /// The subjects producers publish events to.
    #[arg(long, default_value = "agents.>")]
    subject: String,
    /// The stream that takes the subjects (created when missing).
    #[arg(long, default_value = "AGENTS")]
    stream: String,
    /// The durable consumer's name.
    #[arg(long, default_value = "journal-ingest")]
    consumer: String,
    /// Where refused events go, their reason in the Journal-Refused header.
    #[arg(long, default_value = "journal.dead")]
    dead_letter: String,
    /// Copies JetStream keeps of each message, when it creates the stream.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Stop once this many new events were stored.
    #[arg(long)]
    until: Option<u64>,
}

/// Runs `task` until it ends or a signal comes.
async fn until_signal<T>(
    task: impl std::future::Future<Output = journal_replicate::Result<T>>,
) -> Result<Option<T>, Failure> {
    let stop = journal_server::shutdown_signal()
        .map_err(|e| fail(format!("cannot install the signal handler: {e}")))?;
    // Interruptions and retries are logged (warnings), as the task goes on.
    let _log = crate::log::start(crate::log::LogFormat::Text)?;
    tokio::select! {
        done = task => done.map(Some).map_err(failure),
        () = stop => Ok(None),
    }
}

/// A refusal of the replica's is corruption-like (exit 3); the rest exit 1.
fn failure(e: journal_replicate::Error) -> Failure {
    let code = match &e {
        journal_replicate::Error::Journal(journal_engine::Error::FrameRefused { .. })
        | journal_replicate::Error::BadMessage { .. } => 3,
        journal_replicate::Error::Journal(j) if j.is_corruption() => 3,
        _ => 1,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

/// `journal replicate`.
pub async fn replicate(journal: &Journal, args: &ReplicateArgs) -> Result<u8, Failure> {
    let mut options = ReplicateOptions::new(&args.to, &args.stream);
    options.limits = StreamLimits {
        replicas: args.replicas,
        max_bytes: args.max_bytes,
        max_age: Duration::from_secs(args.max_age_secs),
        ..StreamLimits::default()
    };
    options.in_flight = args.in_flight;
    options.until = args.until;
    let (tx, rx) = watch::channel(Default::default());
    until_signal(journal_replicate::replicate(journal.clone(), options, tx)).await?;
    let progress = rx.borrow().clone();
    out::line(json!({"acked": progress.acked, "head": progress.head}))?;
    Ok(0)
}

/// `journal follow`.
pub async fn follow(journal: &Journal, args: &FollowArgs) -> Result<u8, Failure> {
    let mut options = FollowOptions::new(&args.from, args.stream.clone());
    options.consumer = args.consumer.clone();
    options.until = args.until;
    let (tx, rx) = watch::channel(Default::default());
    type Task =
        std::pin::Pin<Box<dyn std::future::Future<Output = journal_replicate::Result<()>> + Send>>;
    let task: Task = if args.stream.len() > 1 {
        Box::pin(journal_replicate::follow_fleet(
            journal.clone(),
            options,
            tx,
        ))
    } else {
        Box::pin(journal_replicate::follow(journal.clone(), options, tx))
    };
    until_signal(task).await?;
    let progress = rx.borrow().clone();
    out::line(json!({"head": journal.head().position.0, "lagMs": progress.lag_ns / 1_000_000}))?;
    Ok(0)
}

/// `journal ingest`.
pub async fn ingest(journal: &Journal, args: &IngestArgs) -> Result<u8, Failure> {
    let mut options = IngestOptions::new(&args.from, &args.subject);
    options.stream = args.stream.clone();
    options.consumer = args.consumer.clone();
    options.dead_letter = args.dead_letter.clone();
    options.replicas = args.replicas;
    options.until = args.until;
    let (tx, rx) = watch::channel(0);
    until_signal(journal_replicate::ingest(journal.clone(), options, tx)).await?;
    let stored = *rx.borrow();
    out::line(json!({"stored": stored, "head": journal.head().position.0}))?;
    Ok(0)
}
