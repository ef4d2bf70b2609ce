//! Checks the index against entries built from the log, for `verify`.

use std::path::Path;
use std::sync::Arc;

use journal_format::{Located, Position, SegmentId};
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};

use crate::error::Result;
use crate::index::blocks::{block_at, block_entries};
use crate::index::ids::IdTables;
use crate::index::tables::{guard, BY_RUN, BY_TASK, SPARSE, STREAMS};
use crate::log::entries::IndexEntry;

/// Checks entries against one read transaction of the index.
pub(crate) struct IndexChecker {
    marker: Arc<Path>,
    ids: IdTables,
    streams: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    tasks: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    runs: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    sparse: ReadOnlyTable<u64, (u64, u64)>,
}

impl IndexChecker {
    /// A checker of the index as `txn` sees it.
    pub(crate) fn new(marker: Arc<Path>, txn: &ReadTransaction) -> Result<IndexChecker> {
        Ok(IndexChecker {
            marker,
            ids: IdTables::open(txn)?,
            streams: txn.open_table(STREAMS)?,
            tasks: txn.open_table(BY_TASK)?,
            runs: txn.open_table(BY_RUN)?,
            sparse: txn.open_table(SPARSE)?,
        })
    }

    /// The parts of `e` the index lacks or holds differently.
    pub(crate) fn missing(&self, e: &IndexEntry<'_>) -> Result<Vec<&'static str>> {
        guard(&self.marker, || {
            let mut missing = Vec::new();
            let here = (e.position.0, e.location.segment.0, e.location.offset);
            if self.ids.get(e.event_id)? != Some(here) {
                missing.push("event id");
            }
            let in_stream = match block_at(&self.streams, e.stream_key, e.stream_version)? {
                Some((first, bytes)) => {
                    let mut entries = block_entries(&bytes)?;
                    e.stream_version
                        .checked_sub(first)
                        .and_then(|i| usize::try_from(i).ok())
                        .and_then(|i| entries.nth(i))
                }
                None => None,
            };
            if in_stream != Some(here) {
                missing.push("stream version");
            }
            for (table, id, name) in [(&self.tasks, e.task, "task"), (&self.runs, e.run, "run")] {
                if let Some(id) = id {
                    let found = match block_at(table, id, e.position.0)? {
                        Some((_, bytes)) => block_entries(&bytes)?.find(|l| l.0 == e.position.0),
                        None => None,
                    };
                    if found != Some(here) {
                        missing.push(name);
                    }
                }
            }
            Ok(missing)
        })
    }

    /// Every sparse entry: position, segment, offset.
    pub(crate) fn sparse_entries(&self) -> Result<Vec<Located>> {
        guard(&self.marker, || {
            let mut out = Vec::new();
            for item in self.sparse.iter()? {
                let (k, v) = item?;
                let (s, o) = v.value();
                out.push(Located::new(Position(k.value()), SegmentId(s), o));
            }
            Ok(out)
        })
    }
}
