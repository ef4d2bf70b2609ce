//! `GET /v1/events/stream`: Server-Sent Events over [`journal_engine::Journal::subscribe`],
//! which reads history and then live appends from the log itself, so the switch has no gap and
//! no duplicate. Each event's `id:` is its position; a client resumes with `Last-Event-ID`.
//!
//! A task per subscriber reads the log and hands events to the response through a bounded
//! channel. The writer never waits for a subscriber: a subscriber that falls
//! `subscriber_buffer_events` behind is closed with a final comment saying so (it resumes from
//! the last id it got), and shutdown closes every stream with a comment too.
//!
//! At most `Config::max_subscribers` clients follow at once: one more is refused `503
//! too_many_subscribers` before anything is read for it.

use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use journal_engine::{Filter, Subscription};
use journal_format::{Position, StoredEvent};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;
use tokio::sync::OwnedSemaphorePermit;

use crate::auth::{authorize, check_session};
use crate::error::ApiError;
use crate::read_query::ReadQuery;
use crate::tokens::Scope;
use crate::AppState;

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
    let (tx, rx) = mpsc::channel::<Event>(buffer);
    let reason: Reason = Arc::new(Mutex::new(None));
    let mut subscription = state.journal.subscribe(from);
    let mut shutdown = state.shutdown.clone();
    let subscriber = Subscriber {
        state: Arc::clone(&state),
        filter: q.filter(),
        tx,
        buffer,
    };
    let task_reason = Arc::clone(&reason);
    tokio::spawn(async move {
        let _place = place;
        let ended = subscriber
            .feed(from, &mut subscription, &mut shutdown)
            .await;
        // Said before the sender is dropped: the response reads it once the channel is closed.
        if let Some(why) = ended {
            set(&task_reason, why);
        }
    });
    let keep_alive = KeepAlive::new()
        .interval(state.config.heartbeat)
        .text("heartbeat");
    Ok(Sse::new(events(rx, reason))
        .keep_alive(keep_alive)
        .into_response())
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

/// The response's events: those the subscriber's task sends, then a comment saying why the
/// stream ended.
fn events(
    rx: mpsc::Receiver<Event>,
    reason: Reason,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((rx, reason, false), |(mut rx, reason, done)| async move {
        if done {
            return None;
        }
        match rx.recv().await {
            Some(event) => Some((Ok::<_, Infallible>(event), (rx, reason, false))),
            None => {
                let text = reason.lock().unwrap_or_else(|p| p.into_inner()).take()?;
                Some((Ok(Event::default().comment(text)), (rx, reason, true)))
            }
        }
    })
}

/// One subscriber's task: reads the log and hands the events its filter selects to the
/// response.
struct Subscriber {
    state: Arc<AppState>,
    filter: Filter,
    tx: mpsc::Sender<Event>,
    /// The channel's capacity: how far behind the subscriber may fall.
    buffer: usize,
}

impl Subscriber {
    /// Sends the events from `from` until the stream ends; returns why it ended, when the
    /// subscriber is still there to be told.
    async fn feed(
        &self,
        from: Position,
        subscription: &mut Subscription,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<String> {
        if *shutdown.borrow_and_update() {
            return Some("closed: the server is shutting down".into());
        }
        // Starting past `to` (a client resuming after the last event it asked for): nothing
        // can come, so the stream ends now rather than waiting for a later event.
        if self.filter.to.is_some_and(|to| from > to) {
            return Some("end: reached `to`".into());
        }
        loop {
            let next = tokio::select! {
                _ = shutdown.changed() => {
                    return Some("closed: the server is shutting down; resume with Last-Event-ID".into());
                }
                () = self.tx.closed() => return None,
                next = subscription.next() => next,
            };
            let event = match next {
                None => return Some("closed: the journal is closed".into()),
                Some(Err(e)) => return Some(format!("closed: reading the log failed: {e}")),
                Some(Ok(event)) => event,
            };
            if let ControlFlow::Break(ended) = self.send(&event) {
                return ended;
            }
        }
    }

    /// Sends `event` when the filter selects it, without waiting; breaks when the stream ends
    /// (with why, when the subscriber is still there to be told).
    fn send(&self, event: &StoredEvent) -> ControlFlow<Option<String>> {
        let last = self.filter.to.is_some_and(|to| event.position >= to);
        if self.filter.to.is_some_and(|to| event.position > to) {
            return ControlFlow::Break(Some("end: reached `to`".into()));
        }
        let sent = if self.filter.matches(event) {
            let data = serde_json::to_string(&event.to_json_value()).unwrap_or_default();
            self.tx
                .try_send(Event::default().id(event.position.0.to_string()).data(data))
        } else {
            Ok(())
        };
        match sent {
            Ok(()) if last => ControlFlow::Break(Some("end: reached `to`".into())),
            Ok(()) => ControlFlow::Continue(()),
            Err(TrySendError::Full(_)) => {
                self.state
                    .metrics
                    .subscribers_dropped
                    .fetch_add(1, Ordering::Relaxed);
                ControlFlow::Break(Some(format!(
                    "closed: this subscriber fell {} events behind the log; resume with Last-Event-ID",
                    self.buffer
                )))
            }
            Err(TrySendError::Closed(_)) => ControlFlow::Break(None),
        }
    }
}
