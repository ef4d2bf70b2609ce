//! One subscriber of the event stream: its task hands the frames its filter selects, in
//! position order from where it starts, to its response through a bounded channel.
//!
//! It owes the events from a position on and never skips one: it takes them from the feed's
//! window when the window holds them, and reads them from the journal itself when they come
//! before it (the history before it subscribed, or events the window dropped while it was
//! behind). The writer never waits for it: once its channel is full (the client reads too
//! slowly) it is closed with a comment saying so.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use journal_engine::Filter;
use journal_format::Position;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::watch;

use super::feed::{read_frames, Chunk, Since};
use crate::AppState;

/// Why a stream ends at its `to`.
const END: &str = "end: reached `to`";
/// Why a stream ends at shutdown.
const SHUTDOWN: &str = "closed: the server is shutting down; resume with Last-Event-ID";
/// Why a stream ends when the journal closes.
const CLOSED: &str = "closed: the journal is closed";

/// How a step of a subscriber ends: on to the next, or the stream's end with why (`None` when
/// the client is gone and there is no one to tell).
type Step = ControlFlow<Option<String>>;

/// One subscriber's task.
pub(crate) struct Subscriber {
    pub state: Arc<AppState>,
    pub filter: Filter,
    pub tx: mpsc::Sender<Bytes>,
    /// The channel's capacity: how far behind the subscriber may fall.
    pub buffer: usize,
    /// The next position owed: every event before it was handed on or filtered out.
    pub next: Position,
}

impl Subscriber {
    /// Hands on the frames from `self.next` until the stream ends; returns why it ended, when
    /// the subscriber is still there to be told. The sender stays open: the caller records why
    /// before dropping it, since the response reads the reason once the channel is closed.
    pub(crate) async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> Option<String> {
        if *shutdown.borrow_and_update() {
            return Some("closed: the server is shutting down".into());
        }
        // Starting past `to` (a client resuming after the last event it asked for): nothing
        // can come, so the stream ends now rather than waiting for a later event.
        if self.filter.to.is_some_and(|to| self.next > to) {
            return Some(END.into());
        }
        let mut listener = self.state.feed.listen();
        loop {
            // Shutdown and a client gone are seen between steps, each at most a chunk.
            if *shutdown.borrow() {
                return Some(SHUTDOWN.into());
            }
            if self.tx.is_closed() {
                return None;
            }
            let step = match self.state.feed.since(self.next) {
                Since::Before(last) => self.catch_up(last).await,
                Since::Chunks(chunks) if !chunks.is_empty() => {
                    chunks.iter().try_for_each(|c| self.take_chunk(c))
                }
                Since::Chunks(_) => {
                    let fed = tokio::select! {
                        _ = shutdown.changed() => return Some(SHUTDOWN.into()),
                        () = self.tx.closed() => return None,
                        fed = listener.wait_past(self.next) => fed,
                    };
                    if !fed {
                        return Some(CLOSED.into());
                    }
                    ControlFlow::Continue(())
                }
            };
            if let ControlFlow::Break(why) = step {
                return why;
            }
        }
    }

    /// Reads the next events up to `last` (and `to`; a chunk's worth) from the journal and
    /// hands on those the filter selects.
    async fn catch_up(&mut self, last: Position) -> Step {
        let to = self.filter.to.map_or(last, |to| to.min(last));
        let journal = self.state.journal.clone();
        let filter = self.filter.clone();
        let from = self.next;
        let read = tokio::task::spawn_blocking(move || {
            read_frames(&journal, from, to, |e| filter.matches(e))
        })
        .await;
        let read = match read.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(read) => read,
            Err(e) => {
                return ControlFlow::Break(Some(format!("closed: reading the log failed: {e}")))
            }
        };
        for frame in &read.frames {
            self.take(frame.position, Some(&frame.bytes))?;
        }
        self.next = read.last.next();
        if self.filter.to.is_some_and(|to| read.last >= to) {
            return ControlFlow::Break(Some(END.into()));
        }
        ControlFlow::Continue(())
    }

    /// Hands on what the feed's `chunk` holds from `self.next` on, filtered.
    fn take_chunk(&mut self, chunk: &Chunk) -> Step {
        for frame in chunk.frames() {
            if frame.position < self.next {
                continue;
            }
            let selected = frame.selected_by(&self.filter);
            self.take(frame.position, selected.then_some(&frame.bytes))?;
        }
        ControlFlow::Continue(())
    }

    /// Moves past the event at `position` (`self.next`), handing on its frame when selected;
    /// breaks at `to`.
    fn take(&mut self, position: Position, frame: Option<&Bytes>) -> Step {
        let to = self.filter.to;
        if to.is_some_and(|to| position > to) {
            return ControlFlow::Break(Some(END.into()));
        }
        if let Some(bytes) = frame {
            self.send(bytes.clone())?;
        }
        self.next = position.next();
        if to.is_some_and(|to| position >= to) {
            return ControlFlow::Break(Some(END.into()));
        }
        ControlFlow::Continue(())
    }

    /// Queues a frame for the response without waiting; breaks when the queue is full (the
    /// client reads too slowly) or the client is gone.
    fn send(&self, bytes: Bytes) -> Step {
        match self.tx.try_send(bytes) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::feed::Frame;
    use journal_engine::{AppendOptions, Journal, Options};
    use journal_format::Envelope;
    use serde_json::json;

    fn events(range: std::ops::Range<u64>) -> Vec<Envelope> {
        range
            .map(|n| {
                let value = json!({"type": "x.note", "eventId": format!("e{n}"),
                    "timestamp": "2026-05-11T10:00:00Z", "sessionId": format!("s{}", n % 2)});
                Envelope::from_json_value(value, &mut || unreachable!("ids given")).unwrap()
            })
            .collect()
    }

    /// Appends events `range` (an async append: the test runs on the runtime, and the
    /// subscriber, waiting for the feed, is not woken by it).
    async fn append(journal: &Journal, range: std::ops::Range<u64>) {
        journal
            .append_batch(events(range), AppendOptions::default())
            .await
            .unwrap();
    }

    /// The next `n` frames the subscriber queues: each one's position, and whether it came
    /// from the feed's window (the test's frames say `data: feed`) or from the journal.
    async fn received(rx: &mut mpsc::Receiver<Bytes>, n: usize) -> Vec<(u64, &'static str)> {
        let mut out = Vec::new();
        while out.len() < n {
            let frame = rx.recv().await.expect("a frame");
            let text = std::str::from_utf8(&frame).unwrap();
            let (id, rest) = text.strip_prefix("id: ").unwrap().split_once('\n').unwrap();
            let source = if rest == "data: feed\n\n" {
                "feed"
            } else {
                "journal"
            };
            out.push((id.parse().unwrap(), source));
        }
        out
    }

    fn from(
        source: &'static str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Vec<(u64, &'static str)> {
        range.map(|p| (p, source)).collect()
    }

    /// The feed's frames of positions `range`, one chunk each, as the test plays the feed.
    fn feed(state: &AppState, range: std::ops::RangeInclusive<u64>) {
        for p in range {
            state
                .feed
                .push_for_test(vec![Frame::for_test(Position(p), "feed")]);
        }
    }

    /// A subscriber owes every event from its start: it takes what the feed's window holds,
    /// and reads from the journal what comes before it (the history; events the window dropped
    /// while the subscriber was behind; events the feed skipped), handing nothing on twice.
    /// On a runtime of one thread, so that the test runs while the subscriber waits.
    #[tokio::test]
    async fn a_subscriber_reads_from_the_journal_what_the_feed_s_window_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), Options::default()).unwrap();
        append(&journal, 1..11).await;
        // A window of three of the test's frames (19 bytes each).
        let state = AppState::for_tests(&journal, 60);
        let (tx, mut rx) = mpsc::channel(10_000);
        let mut subscriber = Subscriber {
            state: Arc::clone(&state),
            filter: Filter::default(),
            tx,
            buffer: 10_000,
            next: Position(1),
        };
        let (stop, mut shutdown) = watch::channel(false);
        let task = tokio::spawn(async move { subscriber.run(&mut shutdown).await });
        // The history, before the window.
        assert_eq!(received(&mut rx, 10).await, from("journal", 1..=10));
        // Live events from the window.
        append(&journal, 11..14).await;
        feed(&state, 11..=13);
        assert_eq!(received(&mut rx, 3).await, from("feed", 11..=13));
        // More than the window keeps, fed while the subscriber did not run: what the window
        // dropped comes from the journal, the rest from the window.
        append(&journal, 14..34).await;
        feed(&state, 14..=33);
        let got = received(&mut rx, 20).await;
        assert_eq!(
            got.iter().map(|r| r.0).collect::<Vec<_>>(),
            (14..=33).collect::<Vec<_>>()
        );
        assert_eq!(got.first().map(|r| r.1), Some("journal"));
        assert_eq!(got.last().map(|r| r.1), Some("feed"));
        // Events the feed skipped (as when no one listened) come from the journal.
        append(&journal, 34..40).await;
        state.feed.skip_for_test(Position(40));
        append(&journal, 40..42).await;
        feed(&state, 40..=41);
        let mut expected = from("journal", 34..=39);
        expected.extend(from("feed", 40..=41));
        assert_eq!(received(&mut rx, 8).await, expected);
        assert!(rx.try_recv().is_err(), "nothing handed on twice");
        stop.send(true).unwrap();
        assert_eq!(task.await.unwrap().as_deref(), Some(SHUTDOWN));
        drop(state);
        journal.close();
    }

    #[tokio::test]
    async fn a_filtered_subscriber_ends_at_to_whether_the_feed_or_the_journal_brings_it() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), Options::default()).unwrap();
        append(&journal, 1..6).await;
        let state = AppState::for_tests(&journal, 1 << 20);
        let (tx, mut rx) = mpsc::channel(100);
        let mut subscriber = Subscriber {
            state: Arc::clone(&state),
            filter: Filter {
                session: Some("s1".into()),
                to: Some(Position(8)),
                ..Filter::default()
            },
            tx,
            buffer: 100,
            next: Position(2),
        };
        let (_stop, mut shutdown) = watch::channel(false);
        let task = tokio::spawn(async move { subscriber.run(&mut shutdown).await });
        // Session s1 holds the odd positions.
        assert_eq!(
            received(&mut rx, 2).await,
            vec![(3, "journal"), (5, "journal")]
        );
        append(&journal, 6..12).await;
        let frames = read_frames(&journal, Position(6), Position(11), |_| true).unwrap();
        state.feed.push_for_test(frames.frames);
        assert_eq!(received(&mut rx, 1).await, vec![(7, "journal")]);
        assert_eq!(task.await.unwrap().as_deref(), Some(END));
        assert!(rx.recv().await.is_none(), "nothing past `to`");
        drop(state);
        journal.close();
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_its_client_is_closed_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), Options::default()).unwrap();
        append(&journal, 1..6).await;
        let state = AppState::for_tests(&journal, 1 << 20);
        let (tx, rx) = mpsc::channel(3);
        let mut subscriber = Subscriber {
            state: Arc::clone(&state),
            filter: Filter::default(),
            tx,
            buffer: 3,
            next: Position(1),
        };
        let (_stop, mut shutdown) = watch::channel(false);
        let why = subscriber.run(&mut shutdown).await;
        assert_eq!(
            why.as_deref(),
            Some("closed: this subscriber fell 3 events behind the log; resume with Last-Event-ID")
        );
        assert_eq!(rx.len(), 3);
        assert_eq!(state.metrics.subscribers_dropped.load(Ordering::Relaxed), 1);
        drop(state);
        journal.close();
    }
}
