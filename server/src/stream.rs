//! `GET /v1/events/stream`: Server-Sent Events over the log, history and then live appends,
//! with no gap and no duplicate at the switch. Each event's `id:` is its position; a client
//! resumes with `Last-Event-ID`.
//!
//! Each live event is read and serialised into its frame once for every subscriber, by the
//! shared [`feed`]; a task per subscriber ([`subscriber`]) filters the frames and hands them to
//! the response through a bounded channel, reading from the journal itself what the feed's
//! window does not hold. The writer never waits for a subscriber: a subscriber that falls
//! `subscriber_buffer_events` behind (its client reads too slowly) is closed with a final
//! comment saying so (it resumes from the last id it got), and shutdown closes every stream
//! with a comment too. The response writes the frames queued at once in one piece.
//!
//! At most `Config::max_subscribers` clients follow at once: one more is refused `503
//! too_many_subscribers` before anything is read for it.

pub(crate) mod feed;
mod subscriber;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use journal_format::Position;
use tokio::sync::mpsc;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::auth::{authorize, check_session};
use crate::error::ApiError;
use crate::read_query::ReadQuery;
use crate::tokens::Scope;
use crate::AppState;
use subscriber::Subscriber;

/// Why a stream ended, said in its last comment.
type Reason = Arc<Mutex<Option<String>>>;

fn set(reason: &Reason, text: String) {
    // A comment is one line.
    let text = text.replace(['\r', '\n'], " ");
    *reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
}

/// The position to start from: after `Last-Event-ID`, else `from`, else after the head (only
/// new events).
fn start(state: &AppState, q: &ReadQuery, headers: &HeaderMap) -> Result<Position, ApiError> {
    if let Some(v) = headers.get("last-event-id") {
        let text = v.to_str().unwrap_or_default().trim();
        let last = text.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "Last-Event-ID must be an event's position (a number), not {text:?}"
            ))
        })?;
        return Ok(Position(last.saturating_add(1)));
    }
    Ok(Position(q.from.unwrap_or_else(|| {
        state.journal.head().position.0.saturating_add(1)
    })))
}

/// `GET /v1/events/stream`.
pub(crate) async fn follow(
    State(state): State<Arc<AppState>>,
    q: Result<Query<ReadQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let q = q
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("query string: {}", e.body_text())))?;
    if grant.sessions().is_some() {
        check_session(&grant, q.session.as_deref())?;
    }
    let from = start(&state, &q, &headers)?;
    let place = Place::take(&state)?;
    let buffer = state.config.subscriber_buffer_events.max(1);
    let (tx, rx) = mpsc::channel::<Bytes>(buffer);
    let reason: Reason = Arc::new(Mutex::new(None));
    let mut shutdown = state.shutdown.clone();
    let heartbeat = state.config.heartbeat;
    let subscriber = Subscriber {
        state: Arc::clone(&state),
        filter: q.filter(),
        tx,
        buffer,
        next: from.max(Position::FIRST),
    };
    let task_reason = Arc::clone(&reason);
    tokio::spawn(async move {
        let _place = place;
        let mut subscriber = subscriber;
        let ended = subscriber.run(&mut shutdown).await;
        // Said before the sender is dropped: the response reads it once the channel is closed.
        if let Some(why) = ended {
            set(&task_reason, why);
        }
        drop(subscriber);
    });
    let mut response = Body::from_stream(frames(rx, reason, heartbeat)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// A subscriber's place, held while its task feeds the stream: its permit under the cap and its
/// count in the `journal_subscribers` gauge, both given back when dropped.
struct Place {
    _slot: OwnedSemaphorePermit,
    state: Arc<AppState>,
}

impl Place {
    /// A place, or `503` when every one is taken.
    fn take(state: &Arc<AppState>) -> Result<Place, ApiError> {
        let slot = Arc::clone(&state.subscriber_slots)
            .try_acquire_owned()
            .map_err(|_| too_many(state))?;
        state.metrics.subscribers.fetch_add(1, Ordering::Relaxed);
        Ok(Place {
            _slot: slot,
            state: Arc::clone(state),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.state
            .metrics
            .subscribers
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The refusal of a subscriber over the cap.
fn too_many(state: &AppState) -> ApiError {
    let max = state.config.max_subscribers;
    ApiError::kind(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_subscribers",
        format!(
            "the server already has {max} subscribers following the event stream, its cap (--max-subscribers); retry later, or page with GET /v1/events"
        ),
    )
    .with("maxSubscribers", max)
}

/// The most frames the response writes in one piece.
const WRITE_FRAMES_MAX: usize = 256;

/// The comment an idle stream sends every `Config::heartbeat`.
const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// The response's body: the frames the subscriber's task queues, those queued together
/// written in one piece; a heartbeat comment whenever nothing was written for `heartbeat`;
/// once the task has ended, a comment saying why.
fn frames(
    rx: mpsc::Receiver<Bytes>,
    reason: Reason,
    heartbeat: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> {
    let body = Outgoing {
        rx,
        reason,
        heartbeat,
        idle: Box::pin(tokio::time::sleep(heartbeat)),
        written: Instant::now(),
        held: Vec::new(),
    };
    futures_util::stream::unfold(Some(body), |body| async move {
        let mut body = body?;
        match body.next().await {
            Some(bytes) => Some((Ok(bytes), Some(body))),
            None => {
                let why = body
                    .reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()?;
                Some((Ok(Bytes::from(format!(": {why}\n\n"))), None))
            }
        }
    })
}

/// The state of a response's body between writes.
struct Outgoing {
    rx: mpsc::Receiver<Bytes>,
    reason: Reason,
    heartbeat: Duration,
    /// Fires `heartbeat` after the last write (or later: it is moved on lazily).
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When the last write was handed over.
    written: Instant,
    /// Frames received, not yet written.
    held: Vec<Bytes>,
}

impl Outgoing {
    /// The next piece to write: the frames queued (waiting for one), or a heartbeat; `None`
    /// once the task has ended and every frame is written.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            tokio::select! {
                biased;
                n = self.rx.recv_many(&mut self.held, WRITE_FRAMES_MAX) => {
                    if n == 0 {
                        return None;
                    }
                    self.written = Instant::now();
                    return Some(concat(&mut self.held));
                }
                () = self.idle.as_mut() => {
                    let due = self.written + self.heartbeat;
                    let now = Instant::now();
                    if now >= due {
                        self.written = now;
                        self.idle.as_mut().reset(now + self.heartbeat);
                        return Some(Bytes::from_static(HEARTBEAT));
                    }
                    self.idle.as_mut().reset(due);
                }
            }
        }
    }
}

/// The frames of `held` as one piece (without a copy when there is one), leaving it empty.
fn concat(held: &mut Vec<Bytes>) -> Bytes {
    if held.len() == 1 {
        return held.pop().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(held.iter().map(Bytes::len).sum());
    for frame in held.drain(..) {
        out.extend_from_slice(&frame);
    }
    out.freeze()
}
