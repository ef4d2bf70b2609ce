//! Subscriptions: an async stream over the log that catches up from history and then follows
//! live appends. It always reads from the log itself (never from a side channel of new
//! events), tracking the next position it owes, so the switch from history to live has no gap
//! and no duplicate, and a subscription resumes from any position.

use std::collections::VecDeque;
use std::sync::Arc;

use journal_format::{Position, StoredEvent};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::log::Head;

/// What a subscription reads from: the journal, seen only as far as a subscription needs it.
pub(crate) trait Source: std::fmt::Debug + Send + Sync + 'static {
    /// Events `from..=to`, their chain checked.
    fn read_chunk(&self, from: Position, to: Position) -> Result<Vec<StoredEvent>>;
    /// Whether another process writes the journal (then the source must be refreshed).
    fn is_read_only(&self) -> bool;
    /// Picks up what the writing process appended (read-only).
    fn refresh(&self) -> Result<Head>;
}

/// How often a read-only subscription looks for what the writing process appended.
const READ_ONLY_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How many events one read of the log fetches.
const SUBSCRIBE_CHUNK_EVENTS: u64 = 1024;

/// A live view of the log from a position on. See [`crate::Journal::subscribe`].
#[derive(Debug)]
pub struct Subscription {
    journal: Arc<dyn Source>,
    head: watch::Receiver<Head>,
    next: Position,
    buffer: VecDeque<StoredEvent>,
}

impl Subscription {
    pub(crate) fn new(
        journal: Arc<dyn Source>,
        head: watch::Receiver<Head>,
        from: Position,
    ) -> Subscription {
        Subscription {
            journal,
            head,
            next: from,
            buffer: VecDeque::new(),
        }
    }

    /// The position of the next event this subscription will yield: the cursor to resume from.
    #[must_use]
    pub fn cursor(&self) -> Position {
        self.buffer.front().map_or(self.next, |e| e.position)
    }

    /// The next event, waiting for one to be appended when the subscription has caught up.
    /// `None` once the journal is closed.
    ///
    /// # Errors
    /// A read error (for example corruption), after which the subscription can be resumed from
    /// [`Subscription::cursor`].
    pub async fn next(&mut self) -> Option<Result<StoredEvent>> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                return Some(Ok(event));
            }
            let head = *self.head.borrow_and_update();
            if self.next <= head.position {
                let from = self.next;
                let to = Position(
                    head.position
                        .0
                        .min(from.0.saturating_add(SUBSCRIBE_CHUNK_EVENTS - 1)),
                );
                let journal = Arc::clone(&self.journal);
                let chunk = tokio::task::spawn_blocking(move || journal.read_chunk(from, to))
                    .await
                    .map_err(|e| Error::Internal(format!("subscription reader failed: {e}")));
                match chunk.and_then(|c| c) {
                    Ok(events) => {
                        if let Some(last) = events.last() {
                            self.next = last.position.next();
                        }
                        assert!(
                            events
                                .windows(2)
                                .all(|w| matches!(w, [a, b] if a.position.next() == b.position)),
                            "a subscription chunk must be gapless"
                        );
                        self.buffer.extend(events);
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            }
            if self.journal.is_read_only() {
                // Another process writes: look at the files again after a while.
                tokio::time::sleep(READ_ONLY_POLL).await;
                let journal = Arc::clone(&self.journal);
                match tokio::task::spawn_blocking(move || journal.refresh()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Some(Err(e)),
                    Err(e) => return Some(Err(Error::Internal(format!("refresh failed: {e}")))),
                }
                continue;
            }
            if self.head.changed().await.is_err() {
                return None;
            }
        }
    }

    /// This subscription as a `futures_core::Stream`.
    pub fn into_stream(self) -> impl futures_core::Stream<Item = Result<StoredEvent>> {
        futures_util::stream::unfold(self, |mut sub| async move {
            sub.next().await.map(|item| (item, sub))
        })
    }
}
