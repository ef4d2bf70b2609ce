//! Queries: the events of a session, task or run (through the index), or any filter (a scan).

use journal_format::{Located, Position, StoredEvent};

use crate::error::{Error, Result};
use crate::index::By;
use crate::log::read::{self, Chain, EventIter};

use crate::journal::Journal;

/// Which events a query returns. Every set field must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The first position (inclusive).
    pub from: Option<Position>,
    /// The last position (inclusive).
    pub to: Option<Position>,
    /// Events with this `sessionId`.
    pub session: Option<String>,
    /// Events with this `taskId`.
    pub task: Option<String>,
    /// Events with this `runId`.
    pub run: Option<String>,
    /// Events whose `type` starts with this.
    pub type_prefix: Option<String>,
    /// At most this many events.
    pub limit: Option<usize>,
}

impl Filter {
    /// Whether `event` matches every set field but `from` and `limit` (which say where a
    /// read starts and how much it returns): what a follower of the log keeps.
    #[must_use]
    pub fn matches(&self, event: &StoredEvent) -> bool {
        let e = &event.envelope;
        let eq = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        eq(&self.session, &e.session_id)
            && eq(&self.task, &e.task_id)
            && eq(&self.run, &e.run_id)
            && self
                .type_prefix
                .as_ref()
                .is_none_or(|p| e.event_type.starts_with(p.as_str()))
            && self.to.is_none_or(|to| event.position <= to)
    }
}

impl Journal {
    /// Events matching `filter`, in position order, streamed in bounded memory. Filters by
    /// session, task or run use the index; a type prefix alone scans the log.
    ///
    /// # Errors
    /// [`Error::Index`] when the index is needed and fails.
    pub fn query(&self, filter: Filter) -> Result<Query> {
        let by = [
            (By::Session, &filter.session),
            (By::Task, &filter.task),
            (By::Run, &filter.run),
        ]
        .into_iter()
        .find_map(|(by, id)| id.clone().map(|id| (by, id)));
        let head = self.head().position;
        let by = by.filter(|_| !self.is_read_only());
        let source = match by {
            Some((by, id)) => {
                self.wait_for_index()?;
                Candidates::Index {
                    by,
                    id,
                    next: filter.from.unwrap_or(Position::FIRST),
                    head,
                    page: std::collections::VecDeque::new(),
                }
            }
            None => Candidates::Scan(self.read(
                filter.from.unwrap_or(Position::FIRST),
                filter.to,
                Chain::Unverified,
            )),
        };
        Ok(Query {
            journal: self.clone(),
            remaining: filter.limit.unwrap_or(usize::MAX),
            filter,
            source,
        })
    }
}

/// Where a [`Query`] gets its positions.
#[derive(Debug)]
enum Candidates {
    Scan(EventIter),
    Index {
        by: By,
        id: String,
        next: Position,
        head: Position,
        page: std::collections::VecDeque<Located>,
    },
}

/// The events of a [`Filter`], in position order.
#[derive(Debug)]
pub struct Query {
    journal: Journal,
    filter: Filter,
    source: Candidates,
    remaining: usize,
}

impl Query {
    fn next_candidate(&mut self) -> Option<Result<StoredEvent>> {
        match &mut self.source {
            Candidates::Scan(iter) => iter.next(),
            Candidates::Index {
                by,
                id,
                next,
                head,
                page,
            } => {
                if page.is_empty() {
                    if *next > *head {
                        return None;
                    }
                    let Some(index) = &self.journal.inner.index else {
                        return Some(Err(Error::ReadOnly));
                    };
                    match index.positions_by(*by, id, *next, 512) {
                        Ok(found) => {
                            page.extend(found.into_iter().filter(|at| at.position <= *head))
                        }
                        Err(e) => return Some(Err(e)),
                    }
                }
                let at = page.pop_front()?;
                *next = at.position.next();
                Some(
                    read::read_at(&self.journal.inner.log, at).and_then(|e| self.journal.opened(e)),
                )
            }
        }
    }
}

impl Iterator for Query {
    type Item = Result<StoredEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.remaining > 0 {
            match self.next_candidate()? {
                Ok(event) if self.filter.matches(&event) => {
                    self.remaining -= 1;
                    return Some(Ok(event));
                }
                Ok(event) => {
                    if self.filter.to.is_some_and(|to| event.position > to) {
                        return None;
                    }
                }
                Err(e) => {
                    self.remaining = 0;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
