//! `journal serve` and `journal token`: the thin shell over `journal-server`. Serve opens the
//! read-model store and the journal for writing, prints the bound address as its first line on
//! standard output (`{"listening":"127.0.0.1:7070"}`), logs on standard error, and on SIGTERM
//! or SIGINT stops accepting, lets requests in flight finish, closes event streams and closes
//! the journal (its lock released) before exiting 0. The TLS certificate and key are read before
//! the journal is opened, so that a bad one opens nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use journal_engine::seams::{Clock, SystemClock};
use journal_engine::CheckpointPolicy;
use journal_format::time_fmt::format_rfc3339_ns;
use journal_server::tls::{Tls, TlsError};
use journal_server::tokens::{Scope, TokensFile};
use journal_server::{Config, Server, LISTEN_DEFAULT};
use serde_json::json;

use crate::log::{self, LogFormat};
use crate::{fail, models, open, out, Access, Cli, Failure, Profile};

/// The tokens file's name in the journal directory, used when `--tokens` is not given.
const TOKENS_FILE: &str = "tokens.json";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on (`127.0.0.1:0` picks a free port). A non-loopback address
    /// needs a tokens file.
    #[arg(long, default_value = LISTEN_DEFAULT)]
    listen: SocketAddr,
    /// The tokens file (`journal token create`); default `DIR/tokens.json` when it exists.
    /// Without one, every request is allowed (loopback only).
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Strict mode for `POST /v1/events`, as `journal append --strict`: every event must also
    /// validate against the Agent Runtime JSON Schema (`core`, or the stricter `lime`).
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "core")]
    pub(crate) strict: Option<Profile>,
    /// How often an idle event stream sends a heartbeat comment, in milliseconds.
    #[arg(long, default_value_t = 15_000)]
    heartbeat_ms: u64,
    /// How many events a subscriber may fall behind before its stream is closed.
    #[arg(long, default_value_t = journal_server::SUBSCRIBER_BUFFER_EVENTS_DEFAULT)]
    subscriber_buffer_events: usize,
    /// How long a client may take to send a request's head, and then its body, in
    /// milliseconds (a TLS handshake too); an idle connection is closed after it.
    #[arg(long, default_value_t = 30_000)]
    read_timeout_ms: u64,
    /// How many clients may follow the event stream at once; one more is answered 503.
    #[arg(long, default_value_t = journal_server::MAX_SUBSCRIBERS_DEFAULT)]
    max_subscribers: usize,
    /// How many connections may be open at once; one more is answered 503 and closed.
    #[arg(long, default_value_t = journal_server::MAX_CONNECTIONS_DEFAULT)]
    max_connections: usize,
    /// Follow a runtime's sessions while serving and import what they gain, so that a running
    /// agent can be reviewed live: `codex`, `claude-code` or `openhands` (their usual
    /// locations, as `journal import` reads them), or FORMAT=PATH for a file or directory.
    /// Repeatable; each session imported is a line in the log.
    #[arg(long, value_name = "FORMAT[=PATH]")]
    follow_import: Vec<crate::import::FollowSpec>,
    /// The log's format on standard error: text, or json (one object per line).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate first); needs
    /// --tls-key.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Sign checkpoints of the tree head with this private key (`journal key create`): every
    /// --checkpoint-every-events events, every --checkpoint-every-secs seconds when events came,
    /// and at shutdown. `GET /v1/checkpoints/latest` serves the latest.
    #[arg(long, value_name = "KEY_FILE")]
    checkpoint_key: Option<PathBuf>,
    /// Events after which a checkpoint is signed (0: none by count).
    #[arg(long, default_value_t = 10_000)]
    checkpoint_every_events: u64,
    /// Seconds after which a checkpoint is signed when events came (0: none by time).
    #[arg(long, default_value_t = 60)]
    checkpoint_every_secs: u64,
    /// Replicate every committed event to this NATS JetStream server while serving, as
    /// `journal replicate --to URL` does (docs/REPLICATION.md).
    #[arg(long, value_name = "URL")]
    replicate_to: Option<String>,
    /// The stream --replicate-to publishes to (created when missing).
    #[arg(long, default_value = "JOURNAL", requires = "replicate_to")]
    replicate_stream: String,
    /// Copies JetStream keeps of each message when --replicate-to creates the stream.
    #[arg(long, default_value_t = 1, requires = "replicate_to")]
    replicate_replicas: usize,
}

/// The checkpoint policy `journal serve`'s flags give: none without --checkpoint-key.
pub(crate) fn checkpoint_policy(args: &ServeArgs) -> Result<Option<CheckpointPolicy>, Failure> {
    let Some(path) = &args.checkpoint_key else {
        return Ok(None);
    };
    Ok(Some(CheckpointPolicy {
        key: Arc::new(crate::proof::read_signing_key(path)?),
        every_events: args.checkpoint_every_events,
        every: Duration::from_secs(args.checkpoint_every_secs),
    }))
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a token; prints it once (only its BLAKE3 hash is stored).
    Create {
        /// What it may do: append, command, read, admin (repeat or separate with commas).
        #[arg(long = "scope", required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        /// Limit it to sessions whose id starts with one of these prefixes (comma-separated).
        #[arg(long, value_delimiter = ',')]
        sessions: Option<Vec<String>>,
        /// The tokens file (default `DIR/tokens.json`).
        #[arg(long)]
        tokens: Option<PathBuf>,
    },
    /// List the tokens (id, scopes, sessions, created; never the token).
    List {
        /// The tokens file (default `DIR/tokens.json`).
        #[arg(long)]
        tokens: Option<PathBuf>,
    },
    /// Revoke a token by its id (a running server refuses it within about a second).
    Revoke {
        /// The token's id (`tok_…`, from `journal token list`).
        id: String,
        /// The tokens file (default `DIR/tokens.json`).
        #[arg(long)]
        tokens: Option<PathBuf>,
    },
}

fn tokens_path(dir: &Path, given: Option<&PathBuf>) -> PathBuf {
    given.cloned().unwrap_or_else(|| dir.join(TOKENS_FILE))
}

fn token_failure(e: journal_server::tokens::TokenError) -> Failure {
    fail(e.to_string())
}

/// `journal token create|list|revoke`.
pub fn token(dir: &Path, command: &TokenCommand) -> Result<u8, Failure> {
    match command {
        TokenCommand::Create {
            scopes,
            sessions,
            tokens,
        } => {
            let path = tokens_path(dir, tokens.as_ref());
            let scopes = scopes
                .iter()
                .map(|s| Scope::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Failure {
                    code: 2,
                    message: e.to_string(),
                })?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|e| fail(format!("{}: {e}", parent.display())))?;
            }
            let mut file = TokensFile::read(&path).map_err(token_failure)?;
            let created = format_rfc3339_ns(SystemClock.now_unix_ns());
            let (token, record) = file
                .create(scopes, sessions.clone(), created)
                .map_err(token_failure)?;
            file.write(&path).map_err(token_failure)?;
            out::line(json!({
                "token": token,
                "id": record.id,
                "scopes": record.scopes,
                "sessions": record.sessions,
                "file": path.display().to_string(),
            }))?;
            out::warn(
                "journal: keep the token now: it is shown only this once (the file keeps its hash)",
            );
            Ok(0)
        }
        TokenCommand::List { tokens } => {
            let file =
                TokensFile::read(&tokens_path(dir, tokens.as_ref())).map_err(token_failure)?;
            for t in &file.tokens {
                out::line(json!({
                    "id": t.id,
                    "scopes": t.scopes,
                    "sessions": t.sessions,
                    "created": t.created,
                }))?;
            }
            Ok(0)
        }
        TokenCommand::Revoke { id, tokens } => {
            let path = tokens_path(dir, tokens.as_ref());
            let mut file = TokensFile::read(&path).map_err(token_failure)?;
            if !file.revoke(id) {
                return Err(fail(format!("no token {id} in {}", path.display())));
            }
            file.write(&path).map_err(token_failure)?;
            out::line(json!({"revoked": id}))?;
            Ok(0)
        }
    }
}

/// The server's configuration from the flags; the TLS files are read and checked here.
fn config(cli: &Cli, args: &ServeArgs) -> Result<Config, Failure> {
    let default_tokens = cli.dir.join(TOKENS_FILE);
    let tokens = args
        .tokens
        .clone()
        .or_else(|| default_tokens.exists().then_some(default_tokens));
    let mut config = Config::new(args.listen);
    config.tokens = tokens;
    config.conformance = args.strict.map(Profile::schema);
    config.heartbeat = Duration::from_millis(args.heartbeat_ms.max(1));
    config.subscriber_buffer_events = args.subscriber_buffer_events;
    config.read_timeout = Duration::from_millis(args.read_timeout_ms.max(1));
    config.max_subscribers = args.max_subscribers;
    config.max_connections = args.max_connections.max(1);
    // Refused before anything is opened: an unprotected address creates no journal.
    config.check().map_err(|e| fail(e.to_string()))?;
    config.tls =
        Tls::from_flags(args.tls_cert.as_deref(), args.tls_key.as_deref()).map_err(|e| {
            Failure {
                code: if matches!(e, TlsError::Incomplete) {
                    2
                } else {
                    1
                },
                message: e.to_string(),
            }
        })?;
    Ok(config)
}

/// A task per `--follow-import`, importing what the sessions gain into `journal` until it is
/// aborted; one that fails says why in the log.
fn follow_imports(
    journal: &journal_engine::Journal,
    follow: &[crate::import::ImportArgs],
    log: &log::Log,
) -> Vec<tokio::task::JoinHandle<()>> {
    for args in follow {
        log.note(format_args!(
            "following {} sessions ({})",
            args.format_name(),
            args.paths_or_usual()
        ));
    }
    follow
        .iter()
        .cloned()
        .map(|args| {
            let journal = journal.clone();
            tokio::spawn(async move {
                let forever = std::future::pending::<()>();
                let form = crate::import::Summaries::Log;
                if let Err(e) = crate::import::follow(&journal, &args, form, forever).await {
                    tracing::error!(target: "journal::import", "following stopped: {}", e.message);
                }
            })
        })
        .collect()
}

/// `journal serve`.
/// The replicate task `--replicate-to` asks for, started beside the server; its failures are
/// logged (NATS being unavailable is retried inside it).
fn replicate(
    journal: &journal_engine::Journal,
    args: &ServeArgs,
    log: &log::Log,
) -> Option<tokio::task::JoinHandle<()>> {
    let url = args.replicate_to.clone()?;
    let mut options = journal_replicate::ReplicateOptions::new(&url, &args.replicate_stream);
    options.limits.replicas = args.replicate_replicas;
    log.note(format_args!(
        "replicating to {url}, stream {}",
        args.replicate_stream
    ));
    let journal = journal.clone();
    Some(tokio::spawn(async move {
        let (tx, _rx) = tokio::sync::watch::channel(Default::default());
        if let Err(e) = journal_replicate::replicate(journal, options, tx).await {
            tracing::error!(error = %e, "replication stopped");
        }
    }))
}

pub async fn serve(cli: &Cli, args: &ServeArgs) -> Result<u8, Failure> {
    let config = config(cli, args)?;
    let follow = args
        .follow_import
        .iter()
        .map(crate::import::FollowSpec::args)
        .collect::<Result<Vec<_>, _>>()?;
    let log = log::start(args.log_format)?;
    let stop = journal_server::shutdown_signal()?;
    std::fs::create_dir_all(&cli.dir).map_err(|e| fail(format!("{}: {e}", cli.dir.display())))?;
    let store = models::open_store(&cli.dir)?;
    let journal = open(cli, Access::Write)?;
    let server = Server::bind(journal.clone(), store, config)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let addr = server.local_addr()?;
    out::line(json!({ "listening": addr.to_string() }))?;
    for note in server.notes() {
        log.note(note);
    }
    log.note(format_args!(
        "listening on {}://{addr} (journal {})",
        server.scheme(),
        cli.dir.display()
    ));
    let followers = follow_imports(&journal, &follow, &log);
    let replication = replicate(&journal, args, &log);
    let served = server.run(stop).await;
    if let Some(task) = replication {
        // Only reads the journal: stopped at any point, it resumes from its cursor.
        task.abort();
        let _ = task.await;
    }
    for follower in followers {
        // Stopped between passes: each pass's appends are whole.
        follower.abort();
        let _ = follower.await;
    }
    journal.close();
    served.map_err(|e| fail(e.to_string()))?;
    log.note("stopped; the journal is closed");
    Ok(0)
}
