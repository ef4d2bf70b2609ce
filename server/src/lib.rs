//! `journal serve`: the journal over HTTP, one process holding its writer. Appends (one atomic
//! batch per request, acknowledged once durable), paged reads, a Server-Sent Events follower,
//! the control-plane commands, the read models, status, digest, verify and metrics, behind
//! bearer tokens with scopes and session prefixes (`docs/SERVER.md`).
//!
//! It guards itself against hostile or slow clients (`docs/SERVER.md`, Operations): a cap on
//! connections and on event-stream subscribers, a deadline for a request's head and body, limits
//! on a request's head, content types checked; it logs every request, serves HTTPS when given a
//! certificate, and reloads its tokens file when it changes.
//!
//! NOTE: this crate decides nothing about events. Input is checked by
//! [`journal_engine::input`] (the checks of `journal append`), commands decide in
//! `journal-commands`, and every answer comes from the engine's public API. It has no clients;
//! the CLI (`journal serve`, `journal token`) is its only user.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod access;
mod api;
mod app;
mod auth;
mod conn;
mod deadline;
mod error;
mod guard;
mod metrics;
mod read_query;
mod reload;
mod stream;
pub mod tls;
pub mod tokens;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use journal_commands::Commands;
use journal_engine::{Journal, Limits};
use journal_format::conformance::Schema;
use journal_projections::store::Store;
use journal_projections::ReadModels;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::metrics::Metrics;
use crate::tokens::{Tokens, TokensFile};

/// The address `journal serve` listens on by default.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7070";

/// How often an idle event stream sends a heartbeat (a comment line), so that proxies and
/// clients see the connection is alive.
pub const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(15);

/// How many events a subscriber may fall behind (held for it, unsent) before it is closed.
pub const SUBSCRIBER_BUFFER_EVENTS_DEFAULT: usize = 1024;

/// How long a client may take to send a request's head, and then its body, by default (and to
/// finish a TLS handshake); an idle connection is closed after it too.
pub const READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The longest read timeout taken: a longer one is lowered to it.
pub const READ_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3600);

/// How many clients may follow the event stream at once by default.
pub const MAX_SUBSCRIBERS_DEFAULT: usize = 256;

/// How many connections the server holds open at once by default.
pub const MAX_CONNECTIONS_DEFAULT: usize = 1024;

/// How a server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The tokens file; `None`: no authentication, allowed on a loopback address only.
    pub tokens: Option<PathBuf>,
    /// The heartbeat interval of event streams.
    pub heartbeat: Duration,
    /// How many events a subscriber may fall behind before it is closed.
    pub subscriber_buffer_events: usize,
    /// The journal's limits (those it was opened with).
    pub limits: Limits,
    /// Strict mode: the Agent Runtime schema every appended event must also validate against
    /// (the journal must be opened with the same `Options::conformance`).
    pub conformance: Option<Schema>,
    /// How long a client may take to send a request's head, and its body (taken between 1 ms
    /// and [`READ_TIMEOUT_MAX`]).
    pub read_timeout: Duration,
    /// How many clients may follow the event stream at once (at most
    /// [`Semaphore::MAX_PERMITS`]).
    pub max_subscribers: usize,
    /// How many connections may be open at once.
    pub max_connections: usize,
    /// The certificate and key to serve HTTPS with; `None`: plain HTTP.
    pub tls: Option<tls::Tls>,
}

impl Config {
    /// Checks the configuration before anything is opened.
    ///
    /// # Errors
    /// [`ServeError::Unprotected`] for a non-loopback address without a tokens file;
    /// [`ServeError::Tokens`] for a tokens file that does not exist (a mistyped path is not
    /// taken for a file without tokens).
    pub fn check(&self) -> Result<(), ServeError> {
        match &self.tokens {
            None if !self.listen.ip().is_loopback() => Err(ServeError::Unprotected(self.listen)),
            Some(path) if !path.exists() => Err(ServeError::Tokens(tokens::TokenError::Invalid(
                format!(
                    "tokens file {} does not exist; create a token with `journal token create --tokens {}`",
                    path.display(),
                    path.display()
                ),
            ))),
            _ => Ok(()),
        }
    }

    /// The defaults, listening on `listen`.
    #[must_use]
    pub fn new(listen: SocketAddr) -> Config {
        Config {
            listen,
            tokens: None,
            heartbeat: HEARTBEAT_DEFAULT,
            subscriber_buffer_events: SUBSCRIBER_BUFFER_EVENTS_DEFAULT,
            limits: Limits::default(),
            conformance: None,
            read_timeout: READ_TIMEOUT_DEFAULT,
            max_subscribers: MAX_SUBSCRIBERS_DEFAULT,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            tls: None,
        }
    }
}

/// Why a server did not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A non-loopback address without a tokens file.
    #[error("refusing to listen on {0} without a tokens file: anyone who can reach that address could append to and read the journal. Create a token (`journal token create --scope append`) and pass --tokens FILE, or listen on a loopback address (127.0.0.1, ::1)")]
    Unprotected(SocketAddr),
    /// The tokens file could not be used.
    #[error(transparent)]
    Tokens(#[from] tokens::TokenError),
    /// The TLS certificate or key could not be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Binding or serving failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// What every handler shares.
pub(crate) struct AppState {
    pub journal: Journal,
    pub models: ReadModels,
    pub commands: Commands,
    pub tokens: Option<Tokens>,
    pub metrics: Metrics,
    pub config: Config,
    /// One permit per event-stream subscriber (`Config::max_subscribers`).
    pub subscriber_slots: Arc<Semaphore>,
    /// Turns `true` when the server is shutting down: event streams close.
    pub shutdown: watch::Receiver<bool>,
    /// The event stream's frames, serialised once for every subscriber.
    pub feed: Arc<stream::feed::Feed>,
    /// What the review app keeps between requests (the sessions list's rows, the chain's
    /// last verification).
    pub app: app::AppCache,
}

#[cfg(test)]
impl AppState {
    /// The state of a server over `journal` with the default configuration and a feed whose
    /// window keeps `window_bytes_max`, for tests of what the handlers share.
    pub(crate) fn for_tests(journal: &Journal, window_bytes_max: usize) -> Arc<AppState> {
        let store = Store::open(journal.dir().join(journal_projections::store::FILE_NAME))
            .expect("the read-model store opens");
        let config = Config::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        Arc::new(AppState {
            models: ReadModels::with_store(journal, Arc::new(store)),
            commands: Commands::new(journal.clone()),
            journal: journal.clone(),
            tokens: None,
            metrics: Metrics::default(),
            subscriber_slots: Arc::new(Semaphore::new(config.max_subscribers)),
            config,
            shutdown: watch::channel(false).1,
            feed: Arc::new(stream::feed::Feed::new(
                journal.head().position.next(),
                window_bytes_max,
            )),
            app: app::AppCache::default(),
        })
    }
}

/// A server bound to its address, not yet serving.
pub struct Server {
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
    notes: Vec<String>,
}

impl Server {
    /// Checks the configuration, loads the tokens and binds the address. The journal must be
    /// open for writing; `store` is its read-model store.
    ///
    /// # Errors
    /// [`ServeError::Unprotected`] for a non-loopback address without tokens, a tokens file
    /// that cannot be read, or an address that cannot be bound.
    pub async fn bind(
        journal: Journal,
        store: Arc<Store>,
        config: Config,
    ) -> Result<Server, ServeError> {
        config.check()?;
        let mut config = config;
        config.read_timeout = config
            .read_timeout
            .clamp(Duration::from_millis(1), READ_TIMEOUT_MAX);
        config.max_subscribers = config.max_subscribers.min(Semaphore::MAX_PERMITS);
        let mut notes = Vec::new();
        let tokens = match &config.tokens {
            Some(path) => {
                let file = TokensFile::read(path)?;
                notes.push(format!(
                    "authentication on: {} token(s) from {}",
                    file.tokens.len(),
                    path.display()
                ));
                Some(Tokens::new(&file, path)?)
            }
            None => {
                notes.push(
                    "no tokens file: every request is allowed without authentication (loopback only)"
                        .into(),
                );
                None
            }
        };
        if let Some(tls) = &config.tls {
            notes.push(format!(
                "TLS on: certificate {}",
                tls.certificate().display()
            ));
        }
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Io {
                context: format!("cannot listen on {}", config.listen),
                source,
            })?;
        let (shutdown, watching) = watch::channel(false);
        let feed = stream::feed::Feed::new(
            journal.head().position.next(),
            stream::feed::WINDOW_BYTES_MAX,
        );
        let state = Arc::new(AppState {
            models: ReadModels::with_store(&journal, store),
            commands: Commands::new(journal.clone()),
            journal,
            tokens,
            metrics: Metrics::default(),
            subscriber_slots: Arc::new(Semaphore::new(config.max_subscribers)),
            config,
            shutdown: watching,
            feed: Arc::new(feed),
            app: app::AppCache::default(),
        });
        Ok(Server {
            listener,
            state,
            shutdown,
            notes,
        })
    }

    /// The address bound (with the port the system chose for port 0).
    ///
    /// # Errors
    /// The socket's error.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// `https` when serving TLS, else `http`.
    #[must_use]
    pub fn scheme(&self) -> &'static str {
        if self.state.config.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// What the server wants said in its log at start (authentication on or off).
    #[must_use]
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Serves until `stop` completes; then stops accepting, closes the event streams, lets
    /// requests in flight finish (an append under way is answered), stops the read-model
    /// workers and returns, having dropped every handle it held to the journal. Connections
    /// still open 90 s after `stop` (a client that does not read its answer) are left to end
    /// with the process, holding theirs.
    ///
    /// # Errors
    /// None so far: a failed accept (too many open files, say) is logged and retried.
    pub async fn run(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let Server {
            listener,
            state,
            shutdown,
            ..
        } = self;
        let workers = state.models.spawn();
        let feed = state.feed.spawn(state.journal.clone());
        let watcher = reload::spawn(Arc::clone(&state));
        let app = access::layer(guard::layer(api::router(Arc::clone(&state)), &state));
        let stop = async move {
            stop.await;
            let _ = shutdown.send(true);
        };
        conn::serve(listener, app, Arc::clone(&state), stop).await;
        watcher.abort();
        feed.abort();
        let _ = feed.await;
        workers.abort();
        let _ = workers.await;
        // The workers' last commits did not wait for the disk.
        let models = state.models.clone();
        match tokio::task::spawn_blocking(move || models.sync()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(target: "journal::serve", "read models: {e}"),
            Err(e) => tracing::error!(target: "journal::serve", "read models: {e}"),
        }
        drop(state);
        Ok(())
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
///
/// # Errors
/// When the signal handlers cannot be installed.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
