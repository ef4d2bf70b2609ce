//! The server the http workload measures: `journal_server::Server` in this process, as
//! `journal serve` builds it (a durable journal, its read-model store beside it, a runtime of
//! two workers, no tokens file on loopback), listening on a port the system picks. Without a
//! `tracing` subscriber its request log costs next to nothing, where `journal serve` formats
//! a line per request on a thread of its own.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use journal_engine::{Journal, Options};
use journal_projections::store::{Store, FILE_NAME};
use journal_server::{Config, Server};
use tokio::sync::oneshot;

use crate::compare::Res;

/// The worker threads of the server's runtime: the CLI's.
const SERVER_WORKERS: usize = 2;

/// A server running on a thread of its own until [`Served::stop`].
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<Res<()>>,
}

impl Served {
    /// Opens a durable journal in `dir` and serves it on `127.0.0.1:0`.
    ///
    /// # Errors
    /// The journal's, the store's or the server's error at start.
    pub fn start(dir: &Path) -> Res<Served> {
        let journal = Journal::open(dir, Options::default())
            .map_err(|e| format!("opening the served journal in {}: {e}", dir.display()))?;
        let store = Arc::new(
            Store::open(dir.join(FILE_NAME))
                .map_err(|e| format!("opening the read-model store: {e}"))?,
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(SERVER_WORKERS)
            .thread_name("serve")
            .enable_all()
            .build()?;
        let listen: SocketAddr = "127.0.0.1:0".parse()?;
        let server = runtime
            .block_on(Server::bind(journal.clone(), store, Config::new(listen)))
            .map_err(|e| format!("starting the server: {e}"))?;
        let addr = server.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("serve-main".into())
            .spawn(move || -> Res<()> {
                let served = runtime.block_on(server.run(async {
                    let _ = stopped.await;
                }));
                drop(runtime);
                journal.close();
                served.map_err(|e| format!("serving: {e}").into())
            })?;
        Ok(Served { addr, stop, thread })
    }

    /// Stops the server (once its clients have closed their connections) and closes the
    /// journal.
    ///
    /// # Errors
    /// The server's error, or its thread's panic.
    pub fn stop(self) -> Res<()> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .map_err(|_| "the server's thread panicked")?
    }
}
