//! The event stream's shared feed: one task follows the journal's head, reads each new event
//! once and serialises it once into its Server-Sent Events frame, and keeps the frames of the
//! latest events in a window of chunks that every subscriber reads, only filtering and
//! writing. While no one listens it reads nothing. Once it has caught up with the head it waits
//! [`FEED_INTERVAL`] before reading again, so that under a steady flow of appends a chunk, and a
//! subscriber's write, holds several commits' events.
//!
//! The window holds every event of its positions, `start..end`, and at most about
//! [`WINDOW_BYTES_MAX`] of frames. A subscriber owing an event before `start` (history, or
//! events dropped from the window while it was behind) reads it from the journal itself,
//! through [`read_frames`]; so no subscriber ever skips an event.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use journal_engine::{Chain, Filter, Journal};
use journal_format::{Position, StoredEvent};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The most bytes of frames the window keeps; older chunks are dropped, and a subscriber
/// behind them reads from the journal.
pub(crate) const WINDOW_BYTES_MAX: usize = 16 << 20;

/// How long the feed, once caught up with the head, waits before reading again: under a steady
/// flow of appends one chunk then holds every commit of that time.
pub(crate) const FEED_INTERVAL: Duration = Duration::from_millis(5);

/// The most events one read of the journal takes (a chunk of the feed, a step of a
/// subscriber's catch-up).
pub(crate) const CHUNK_EVENTS: u64 = 1024;

/// A chunk ends at the event that takes its frames past this many bytes.
pub(crate) const CHUNK_BYTES: usize = 256 << 10;

/// One event as a Server-Sent Events frame (`id: POSITION`, `data: EVENT`, a blank line), with
/// the fields a subscriber's filter reads.
#[derive(Debug)]
pub(crate) struct Frame {
    pub position: Position,
    session: Option<String>,
    task: Option<String>,
    run: Option<String>,
    event_type: String,
    /// The frame's bytes, ready to write.
    pub bytes: Bytes,
}

impl Frame {
    /// A frame of the event at `position` whose data is `data`, with no session, task, run
    /// or type: for tests that tell the feed's frames from the journal's.
    #[cfg(test)]
    pub(crate) fn for_test(position: Position, data: &str) -> Frame {
        Frame {
            position,
            session: None,
            task: None,
            run: None,
            event_type: String::new(),
            bytes: Bytes::from(format!("id: {}\ndata: {data}\n\n", position.0)),
        }
    }

    /// Whether `filter` selects the event, as [`Filter::matches`] says, but for its `to`
    /// (where a stream ends, which the subscriber checks itself).
    pub(crate) fn selected_by(&self, filter: &Filter) -> bool {
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        eq(&filter.session, &self.session)
            && eq(&filter.task, &self.task)
            && eq(&filter.run, &self.run)
            && filter
                .type_prefix
                .as_ref()
                .is_none_or(|p| self.event_type.starts_with(p.as_str()))
    }
}

/// Frames read from the journal, and the last position read (selected or not).
#[derive(Debug)]
pub(crate) struct Frames {
    /// The frames of the events selected, in position order.
    pub frames: Vec<Frame>,
    /// The last position read; the next read starts after it.
    pub last: Position,
}

/// Reads events `from..=to` (at most [`CHUNK_EVENTS`], ending early past [`CHUNK_BYTES`] of
/// frames), their chain checked, and serialises those `select` keeps into frames. Blocking.
///
/// # Errors
/// The journal's read error, or a read that does not bring the events asked for in order.
pub(crate) fn read_frames(
    journal: &Journal,
    from: Position,
    to: Position,
    select: impl Fn(&StoredEvent) -> bool,
) -> Result<Frames, String> {
    let to = Position(to.0.min(from.0.saturating_add(CHUNK_EVENTS - 1)));
    let mut text = Vec::new();
    let mut spans = Vec::new();
    let mut last = None;
    let mut due = from;
    for event in journal.read(from, Some(to), Chain::Verified) {
        let event = event.map_err(|e| e.to_string())?;
        if event.position != due {
            return Err(format!(
                "reading the log from position {}: position {} came where {} was due",
                from.0, event.position.0, due.0
            ));
        }
        due = event.position.next();
        last = Some(event.position);
        if select(&event) {
            let start = text.len();
            write_frame(&mut text, &event);
            spans.push((start..text.len(), event));
        }
        if text.len() >= CHUNK_BYTES {
            break;
        }
    }
    let last = last.ok_or_else(|| {
        format!(
            "reading the log: no event at position {} (the head is {})",
            from.0,
            journal.head().position.0
        )
    })?;
    let text = Bytes::from(text);
    let frames = spans
        .into_iter()
        .map(|(span, event)| {
            let e = event.envelope;
            Frame {
                position: event.position,
                session: e.session_id,
                task: e.task_id,
                run: e.run_id,
                event_type: e.event_type,
                bytes: text.slice(span),
            }
        })
        .collect();
    Ok(Frames { frames, last })
}

/// Appends `event`'s frame to `out`: `id: POSITION`, `data: ` and the stored event's JSON (one
/// line: serde_json writes no newline), then a blank line.
fn write_frame(out: &mut Vec<u8>, event: &StoredEvent) {
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(event.position.0.to_string().as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // A `Value` always serialises (its map keys are strings).
    let _ = serde_json::to_writer(&mut *out, &event.to_json_value());
    out.extend_from_slice(b"\n\n");
}

/// Consecutive frames the feed read, every event of their positions (none filtered out).
#[derive(Debug)]
pub(crate) struct Chunk {
    frames: Vec<Frame>,
    bytes: usize,
}

impl Chunk {
    fn new(frames: Vec<Frame>) -> Chunk {
        let bytes = frames.iter().map(|f| f.bytes.len()).sum();
        Chunk { frames, bytes }
    }

    /// The chunk's frames, in position order, without a gap.
    pub(crate) fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The position after the chunk's last event.
    fn end(&self) -> Position {
        self.frames
            .last()
            .map_or(Position(0), |f| f.position.next())
    }
}

/// The frames of the latest events. **Invariant:** `chunks` hold every event of
/// `start..end`, in order, each chunk non-empty.
#[derive(Debug)]
struct Window {
    chunks: VecDeque<Arc<Chunk>>,
    start: Position,
    end: Position,
    bytes: usize,
}

/// Where the feed is, as subscribers wait on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tail {
    /// The position after the window's last event.
    pub end: Position,
    /// The feed has stopped (the journal is closed).
    pub ended: bool,
}

/// What the window holds from a position on.
#[derive(Debug)]
pub(crate) enum Since {
    /// The chunks holding that position and every later one (none when it is past the
    /// window's end: not read yet).
    Chunks(Vec<Arc<Chunk>>),
    /// The window starts later: the events up to this position are to be read from the
    /// journal.
    Before(Position),
}

/// The feed: its window, where it ends, and how many listen.
#[derive(Debug)]
pub(crate) struct Feed {
    window: Mutex<Window>,
    tail: watch::Sender<Tail>,
    listeners: AtomicUsize,
    window_bytes_max: usize,
}

impl Feed {
    /// A feed whose window starts, empty, at `first`: the feed reads from there on.
    pub(crate) fn new(first: Position, window_bytes_max: usize) -> Feed {
        Feed {
            window: Mutex::new(Window {
                chunks: VecDeque::new(),
                start: first,
                end: first,
                bytes: 0,
            }),
            tail: watch::Sender::new(Tail {
                end: first,
                ended: false,
            }),
            listeners: AtomicUsize::new(0),
            window_bytes_max,
        }
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Listens to the feed until the returned listener is dropped: the feed reads while
    /// anyone listens.
    pub(crate) fn listen(self: &Arc<Feed>) -> Listener {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        Listener {
            feed: Arc::clone(self),
            tail: self.tail.subscribe(),
        }
    }

    /// What the window holds from `next` on.
    pub(crate) fn since(&self, next: Position) -> Since {
        let window = self.window();
        if next < window.start {
            return Since::Before(Position(window.start.0 - 1));
        }
        let chunks = window
            .chunks
            .iter()
            .skip_while(|c| c.end() <= next)
            .cloned()
            .collect();
        Since::Chunks(chunks)
    }

    /// Adds the frames of the events from the window's end on, dropping the oldest chunks
    /// past [`Feed::window_bytes_max`], and wakes the listeners.
    fn push(&self, frames: Vec<Frame>) {
        let chunk = Chunk::new(frames);
        let Some(first) = chunk.frames.first().map(|f| f.position) else {
            return;
        };
        let mut window = self.window();
        if first != window.end {
            // Not reached: the feed reads from the window's end. Were it, the window would
            // restart at the chunk, keeping its invariant.
            debug_assert!(
                false,
                "a chunk at {} continues the window at {}",
                first.0, window.end.0
            );
            window.chunks.clear();
            window.bytes = 0;
            window.start = first;
        }
        window.end = chunk.end();
        window.bytes += chunk.bytes;
        window.chunks.push_back(Arc::new(chunk));
        while window.bytes > self.window_bytes_max && window.chunks.len() > 1 {
            if let Some(old) = window.chunks.pop_front() {
                window.bytes -= old.bytes;
                window.start = old.end();
            }
        }
        let end = window.end;
        drop(window);
        self.tail.send_modify(|t| t.end = end);
    }

    /// Empties the window and moves it to start at `first`: what comes before is read from
    /// the journal.
    fn skip_to(&self, first: Position) {
        let mut window = self.window();
        window.chunks.clear();
        window.bytes = 0;
        window.start = first;
        window.end = first;
        drop(window);
        self.tail.send_modify(|t| t.end = first);
    }

    /// Runs the feed of `journal` on the current runtime until the journal is closed (or the
    /// task is aborted); listeners are told when it stops.
    pub(crate) fn spawn(self: &Arc<Feed>, journal: Journal) -> JoinHandle<()> {
        let feed = Arc::clone(self);
        tokio::spawn(async move {
            feed.follow(&journal).await;
            feed.tail.send_modify(|t| t.ended = true);
        })
    }

    /// Reads the frames of every event from the window's end on as the head moves, until the
    /// journal is closed.
    async fn follow(&self, journal: &Journal) {
        let mut head = journal.watch_head();
        loop {
            let at = head.borrow_and_update().position;
            let next = self.window().end;
            if next <= at {
                if self.listeners.load(Ordering::SeqCst) == 0 {
                    // No one listens: one who comes reads up to the window's start from the
                    // journal itself, so nothing before it is owed.
                    self.skip_to(at.next());
                } else {
                    self.read(journal, next, at).await;
                    if self.window().end > at {
                        // Caught up: the next read waits a little, so that it takes in several
                        // commits. Behind (a read ends at a chunk's size), it reads on at once.
                        tokio::time::sleep(FEED_INTERVAL).await;
                    }
                    continue;
                }
            }
            if head.changed().await.is_err() {
                return;
            }
        }
    }

    /// Reads `from..=to` (a chunk's worth) into the window; on an error, moves the window past
    /// them (a subscriber then reads them from the journal, which tells it the error).
    async fn read(&self, journal: &Journal, from: Position, to: Position) {
        let reader = journal.clone();
        let read =
            tokio::task::spawn_blocking(move || read_frames(&reader, from, to, |_| true)).await;
        match read.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(read) => self.push(read.frames),
            Err(e) => {
                tracing::warn!(target: "journal::serve", "the event stream's feed could not read positions {}..={}: {e}", from.0, to.0);
                self.skip_to(to.next());
            }
        }
    }

    /// Adds `frames` to the window, as the feed's task does: for tests that play the feed.
    #[cfg(test)]
    pub(crate) fn push_for_test(&self, frames: Vec<Frame>) {
        self.push(frames);
    }

    /// Moves the window past what it holds, as the feed does when no one listens.
    #[cfg(test)]
    pub(crate) fn skip_for_test(&self, first: Position) {
        self.skip_to(first);
    }
}

/// A subscriber's hold on the feed: counted while it lives, and its view of the feed's tail.
#[derive(Debug)]
pub(crate) struct Listener {
    feed: Arc<Feed>,
    tail: watch::Receiver<Tail>,
}

impl Listener {
    /// Waits until the window holds events from `next` on; `false` when the feed has stopped
    /// (the journal is closed).
    pub(crate) async fn wait_past(&mut self, next: Position) -> bool {
        match self.tail.wait_for(|t| t.end > next || t.ended).await {
            Ok(tail) => !tail.ended,
            Err(_) => false,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.feed.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use journal_format::Envelope;
    use serde_json::json;

    fn event(n: u64, session: &str, task: Option<&str>, event_type: &str) -> Envelope {
        let mut value = json!({"type": event_type, "eventId": format!("e{n}"),
            "timestamp": "2026-05-11T10:00:00Z", "sessionId": session});
        if let Some(t) = task {
            value["taskId"] = json!(t);
        }
        Envelope::from_json_value(value, &mut || unreachable!("ids given")).unwrap()
    }

    fn journal(dir: &std::path::Path, events: Vec<Envelope>) -> Journal {
        let journal = Journal::open(dir, journal_engine::Options::default()).unwrap();
        journal
            .append_batch_blocking(events, journal_engine::AppendOptions::default())
            .unwrap();
        journal
    }

    #[test]
    fn a_frame_is_the_stored_event_s_json_under_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path(), vec![event(1, "s1", None, "session.created")]);
        let read = read_frames(&journal, Position(1), Position(1), |_| true).unwrap();
        let [frame] = read.frames.as_slice() else {
            panic!("one frame: {:?}", read.frames)
        };
        let text = std::str::from_utf8(&frame.bytes).unwrap();
        let stored = journal.get_position(Position(1)).unwrap();
        let data = serde_json::to_string(&stored.to_json_value()).unwrap();
        assert_eq!(text, format!("id: 1\ndata: {data}\n\n"));
        assert_eq!(read.last, Position(1));
        journal.close();
    }

    #[test]
    fn a_frame_is_selected_as_the_engine_s_filter_selects_its_event() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(
            dir.path(),
            vec![
                event(1, "s1", Some("t1"), "task.created"),
                event(2, "s2", None, "session.created"),
                event(3, "s1", None, "tool.call.started"),
            ],
        );
        let read = read_frames(&journal, Position(1), Position(3), |_| true).unwrap();
        let filters = [
            Filter::default(),
            Filter {
                session: Some("s1".into()),
                ..Filter::default()
            },
            Filter {
                task: Some("t1".into()),
                ..Filter::default()
            },
            Filter {
                run: Some("r1".into()),
                ..Filter::default()
            },
            Filter {
                type_prefix: Some("task.".into()),
                session: Some("s1".into()),
                ..Filter::default()
            },
        ];
        for filter in &filters {
            for frame in &read.frames {
                let stored = journal.get_position(frame.position).unwrap();
                assert_eq!(
                    frame.selected_by(filter),
                    filter.matches(&stored),
                    "{filter:?} at {}",
                    frame.position.0
                );
            }
        }
        journal.close();
    }

    /// The feed's task follows the journal while someone listens: a batch of three chunks'
    /// worth reaches the window whole and in order, a chunk at a time.
    #[tokio::test]
    async fn the_feed_brings_every_appended_event_into_its_window_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), journal_engine::Options::default()).unwrap();
        let feed = Arc::new(Feed::new(Position(1), WINDOW_BYTES_MAX));
        let mut listener = feed.listen();
        let task = feed.spawn(journal.clone());
        let n = 3 * CHUNK_EVENTS;
        let events: Vec<Envelope> = (1..=n).map(|i| event(i, "s1", None, "x.y")).collect();
        journal
            .append_batch(events, journal_engine::AppendOptions::default())
            .await
            .unwrap();
        let fed = tokio::time::timeout(Duration::from_secs(30), listener.wait_past(Position(n)));
        assert!(fed.await.unwrap(), "the feed stopped");
        let Since::Chunks(chunks) = feed.since(Position(1)) else {
            panic!("the window starts at 1")
        };
        let positions: Vec<u64> = chunks
            .iter()
            .flat_map(|c| c.frames().iter().map(|f| f.position.0))
            .collect();
        assert_eq!(positions, (1..=n).collect::<Vec<_>>());
        assert!(
            chunks.len() >= 3,
            "a chunk holds at most {CHUNK_EVENTS} events"
        );
        task.abort();
        drop(listener);
        journal.close();
    }

    #[test]
    fn a_read_keeps_what_it_selects_and_says_how_far_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(
            dir.path(),
            (1..=5).map(|n| event(n, "s1", None, "x.y")).collect(),
        );
        let read = read_frames(&journal, Position(2), Position(4), |e| e.position.0 != 3).unwrap();
        let positions: Vec<u64> = read.frames.iter().map(|f| f.position.0).collect();
        assert_eq!(positions, vec![2, 4]);
        assert_eq!(read.last, Position(4));
        assert!(read_frames(&journal, Position(6), Position(6), |_| true).is_err());
        journal.close();
    }
}
