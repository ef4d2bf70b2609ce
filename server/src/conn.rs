//! The accept loop and each connection: HTTP/1.1 through hyper, over TCP or TLS. A client
//! cannot hold the server with slow or idle connections: at most `Config::max_connections` are
//! open at once (one more is answered `503 too_many_connections` and closed), a request's head
//! must arrive within `Config::read_timeout` of the connection's start or the previous
//! response (else the connection is closed, which also ends idle and half-open ones), and so
//! must a TLS handshake. A head over `guard::HEAD_BYTES_MAX` is refused by hyper (`431`).
//!
//! On stop the loop stops accepting, asks every connection to finish its request in flight
//! and close, and returns once all are closed, or after [`DRAIN_TIME_MAX`] (a client that does
//! not read its answer cannot keep the server from stopping).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower_service::Service;

use crate::guard::HEAD_BYTES_MAX;
use crate::AppState;

/// The client's address, in each request's extensions (for the request log).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Peer(pub SocketAddr);

/// How long the loop waits after an accept fails (too many open files, say) before it tries
/// again, so that it does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// How long a stopping server waits for its connections to finish: longer than the longest
/// read-model wait (60 s).
pub const DRAIN_TIME_MAX: Duration = Duration::from_secs(90);

/// How long a refused connection is given to take its `503`.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `stop` completes, then until every connection is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    state: Arc<AppState>,
    stop: impl Future<Output = ()>,
) {
    let max = state
        .config
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max));
    let (closing, closed) = watch::channel(false);
    let connection = Connection {
        app,
        http: Arc::new(http(state.config.read_timeout)),
        state: Arc::clone(&state),
        closing: closed,
    };
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(target: "journal::connection", "accepting a connection failed: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(connection.clone().run(stream, Peer(peer), slot));
            }
            Err(_) => {
                tokio::spawn(refuse(stream, Peer(peer), Arc::clone(&state), max));
            }
        }
    }
    drop(listener);
    let _ = closing.send(true);
    // Every connection holds a slot until it is closed.
    let all = slots.acquire_many(u32::try_from(max).unwrap_or(u32::MAX));
    if tokio::time::timeout(DRAIN_TIME_MAX, all).await.is_err() {
        let open = max.saturating_sub(slots.available_permits());
        tracing::warn!(
            target: "journal::connection",
            "stopping with {open} connection(s) still open after {} s",
            DRAIN_TIME_MAX.as_secs()
        );
    }
}

/// hyper's settings for every connection.
fn http(read_timeout: Duration) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_header_size(HEAD_BYTES_MAX)
        .keep_alive(true);
    http
}

/// What each connection needs.
#[derive(Clone)]
struct Connection {
    app: Router,
    http: Arc<http1::Builder>,
    state: Arc<AppState>,
    /// Turns `true` when the server stops.
    closing: watch::Receiver<bool>,
}

impl Connection {
    /// Serves one connection (after its TLS handshake, with TLS) until it closes.
    async fn run(self, stream: TcpStream, peer: Peer, slot: OwnedSemaphorePermit) {
        let _slot = slot;
        let _open = self.state.metrics.connection();
        // Responses are written whole; a small one should not wait for more.
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.state.config.tls else {
            return self.drive(TokioIo::new(stream), peer).await;
        };
        let limit = self.state.config.read_timeout;
        match tokio::time::timeout(limit, tls.acceptor().accept(stream)).await {
            Ok(Ok(stream)) => self.drive(TokioIo::new(stream), peer).await,
            Ok(Err(e)) => {
                tracing::info!(target: "journal::connection", peer = %peer.0, "TLS handshake failed: {e}");
            }
            Err(_) => {
                tracing::info!(target: "journal::connection", peer = %peer.0, "TLS handshake not done within {} ms; closed", limit.as_millis());
            }
        }
    }

    /// Runs HTTP/1.1 on `io` until the client closes, the server stops, or hyper ends the
    /// connection (a head too slow or too large).
    async fn drive<I>(&self, io: I, peer: Peer)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let app = self.app.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(peer);
            let mut app = app.clone();
            async move {
                let response: Result<Response, Infallible> = app.call(request.map(Body::new)).await;
                response
            }
        });
        let conn = self.http.serve_connection(io, service);
        tokio::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => ended,
            () = stopping(self.closing.clone()) => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        match ended {
            Ok(()) => {}
            // What a limit cut: worth a line.
            Err(e) if e.is_timeout() || e.is_parse() => {
                tracing::info!(target: "journal::connection", peer = %peer.0, "connection closed: {e}");
            }
            // A client that went away mid-answer (an event stream it stopped following, say).
            Err(e) => {
                tracing::debug!(target: "journal::connection", peer = %peer.0, "connection closed: {e}");
            }
        }
    }
}

/// Completes once the server stops.
async fn stopping(mut closing: watch::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}

/// Answers a connection over the cap `503` (on plain HTTP; a TLS one is only closed) and
/// closes it.
async fn refuse(mut stream: TcpStream, peer: Peer, state: Arc<AppState>, max: usize) {
    state.metrics.refused("too_many_connections");
    tracing::warn!(target: "journal::connection", peer = %peer.0, refused = "too_many_connections", "connection refused: {max} are open, the cap (--max-connections)");
    if state.config.tls.is_some() {
        return;
    }
    let body = serde_json::json!({"error": {
        "kind": "too_many_connections",
        "message": format!("the server already holds {max} connections, its cap (--max-connections); retry later"),
    }})
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await?;
        // Whatever the client sent is read (and dropped) until it closes, so that closing
        // with unread bytes does not reset the connection before the answer is read.
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
