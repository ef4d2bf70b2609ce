//! The index against the log, as `verify` compares them: at each frame, the index's sparse map
//! and the event's entries; after the walk, what the index holds beyond the log. What keeps the
//! index from being checked (it failed, or is damaged) is reported as a problem, never a reason
//! for `verify` itself to fail; the log is checked all the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use journal_format::{Envelope, Location, Position, SegmentId, StoredEvent};

use crate::error::{Error, Result};
use crate::index::{Index, IndexChecker};
use crate::journal::Journal;
use crate::log::entries::index_entry;
use crate::log::scan::Scanned;
use crate::verify::report::Problems;

/// What the walk counted in the log, for comparing with the index's counts.
#[derive(Debug, Default)]
pub(super) struct Counts {
    /// Events read.
    pub events: u64,
    /// Events that name a task.
    pub with_task: u64,
    /// Events that name a run.
    pub with_run: u64,
}

/// The index being compared with the log.
pub(super) struct IndexCompare<'j> {
    /// The index, when it is to be checked. Read-only there is none: another process keeps it.
    index: Option<&'j Arc<Index>>,
    /// A read view of the index, once it caught up with the log.
    checker: Option<IndexChecker>,
    /// The index's sparse map: the entries no frame has matched yet.
    sparse: BTreeMap<Location, Position>,
    /// The first failure that keeps the index from being checked.
    failure: Option<String>,
}

impl<'j> IndexCompare<'j> {
    /// Readies the comparison with `journal`'s index once it has caught up with the log: none
    /// when `check_index` is off or there is no index.
    pub fn new(journal: &'j Journal, check_index: bool) -> IndexCompare<'j> {
        let index = journal.index().filter(|_| check_index);
        let mut compare = IndexCompare {
            index,
            checker: None,
            sparse: BTreeMap::new(),
            failure: None,
        };
        match index.map(|index| journal.wait_indexed().and_then(|()| index.checker())) {
            Some(Ok(checker)) => compare.checker = Some(checker),
            Some(Err(e)) => compare.note(e),
            None => {}
        }
        let sparse = compare.checker.as_ref().map(IndexChecker::sparse_entries);
        match sparse {
            Some(Ok(entries)) => {
                compare.sparse = entries
                    .into_iter()
                    .map(|at| (at.location, at.position))
                    .collect();
            }
            Some(Err(e)) => compare.note(e),
            None => {}
        }
        compare
    }

    /// Keeps `e` as what keeps the index from being checked, unless an earlier failure is kept.
    fn note(&mut self, e: Error) {
        self.failure.get_or_insert_with(|| e.to_string());
    }

    /// Checks the index's sparse map at the frame at `offset` of segment `id`, which holds
    /// `position`: an entry there must name that position.
    pub fn sparse_at(
        &mut self,
        problems: &mut Problems,
        id: SegmentId,
        offset: u64,
        position: Position,
    ) {
        if let Some(p) = self.sparse.remove(&Location::new(id, offset)) {
            if p != position {
                problems.problem(
                    "index_missing",
                    Some(id),
                    Some(offset),
                    Some(position),
                    format!("the index's sparse map says position {p} starts here"),
                );
            }
        }
    }

    /// Checks that the index holds every entry of the event `envelope` that `frame` of segment
    /// `id` holds, unless the index cannot be checked.
    pub fn event(
        &mut self,
        problems: &mut Problems,
        id: SegmentId,
        frame: &Scanned<'_>,
        envelope: Envelope,
    ) {
        let Some(checker) = self.checker.as_ref().filter(|_| self.failure.is_none()) else {
            return;
        };
        let position = frame.header.meta.position;
        let stored = StoredEvent {
            position,
            recorded_at_ns: frame.header.meta.recorded_at_ns,
            stream_version: frame.header.meta.stream_version,
            hash: frame.header.hash,
            envelope,
        };
        let end = frame.offset + frame.header.frame_len();
        let stream_key = stored.envelope.stream_key();
        let entry = index_entry(&stored, &stream_key, id, frame.offset, end);
        let missing = match checker.missing(&entry) {
            Ok(missing) => missing,
            Err(e) => {
                self.note(e);
                Vec::new()
            }
        };
        if !missing.is_empty() {
            problems.problem(
                "index_missing",
                Some(id),
                Some(frame.offset),
                Some(position),
                format!("the index lacks or differs in: {}", missing.join(", ")),
            );
        }
    }

    /// After the walk: reports what kept the index from being checked, else entries the index
    /// holds beyond what the log's `counts` make; then the sparse entries no frame matched.
    ///
    /// # Errors
    /// Failing to count the index's entries.
    pub fn finish(self, problems: &mut Problems, counts: &Counts) -> Result<()> {
        if let Some(detail) = &self.failure {
            problems.problem("index_damaged", None, None, None, detail.clone());
        }
        if let Some(index) = self.index.filter(|_| self.failure.is_none()) {
            let have = index.counts()?;
            let expectations = [
                ("event ids", have.event_ids, counts.events),
                ("stream versions", have.streams, counts.events),
                ("task entries", have.by_task, counts.with_task),
                ("run entries", have.by_run, counts.with_run),
            ];
            for (what, have, want) in expectations {
                if have > want {
                    problems.problem(
                        "index_extra",
                        None,
                        None,
                        None,
                        format!("the index holds {have} {what} for {want} in the log"),
                    );
                }
            }
        }
        for (Location { segment, offset }, position) in self.sparse {
            problems.problem(
                "index_extra",
                Some(segment),
                Some(offset),
                Some(position),
                String::from("the index's sparse map points at no frame of the log"),
            );
        }
        Ok(())
    }
}
