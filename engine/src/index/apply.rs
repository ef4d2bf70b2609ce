//! What one apply writes: the tables it opens in its write transaction, and how it places the
//! entries' event ids, their stream, task and run blocks, and the sparse map.

use redb::{ReadableTable, Table, WriteTransaction};

use crate::error::Result;
use crate::index::blocks::{append_blocks, Numbered};
use crate::index::ids::{append_id_blocks, greatest_keyed, id_key, place_ids};
use crate::index::tables::{
    IdKey, Row, BY_RUN, BY_TASK, EVENT_ID_BLOCKS, EVENT_ID_KEYS, OTHER_EVENT_IDS, SPARSE, STREAMS,
};
use crate::log::entries::IndexEntry;
use crate::log::SPARSE_INTERVAL_BYTES;

/// A blocked table: (key, first number) → block.
type BlockTable<'txn> = Table<'txn, (&'static str, u64), &'static [u8]>;

/// The tables an apply writes, open in its write transaction.
pub(super) struct ApplyTables<'txn> {
    keyed_ids: Table<'txn, &'static IdKey, Row>,
    block_table: Table<'txn, &'static IdKey, &'static [u8]>,
    other_ids: Table<'txn, &'static str, Row>,
    streams: BlockTable<'txn>,
    tasks: BlockTable<'txn>,
    runs: BlockTable<'txn>,
    sparse: Table<'txn, u64, (u64, u64)>,
    /// Where the sparse map's last entry points: (segment, offset).
    last_sparse: (u64, u64),
}

/// Where `e` is, as the tables store it.
fn here(e: &IndexEntry<'_>) -> Row {
    (e.position.0, e.location.segment.0, e.location.offset)
}

impl<'txn> ApplyTables<'txn> {
    /// Opens the tables an apply writes in `txn`.
    pub fn open(txn: &'txn WriteTransaction) -> Result<ApplyTables<'txn>> {
        let keyed_ids = txn.open_table(EVENT_ID_KEYS)?;
        let block_table = txn.open_table(EVENT_ID_BLOCKS)?;
        let other_ids = txn.open_table(OTHER_EVENT_IDS)?;
        let streams = txn.open_table(STREAMS)?;
        let tasks = txn.open_table(BY_TASK)?;
        let runs = txn.open_table(BY_RUN)?;
        let sparse = txn.open_table(SPARSE)?;
        let last_sparse = sparse.last()?.map(|(_, v)| v.value()).unwrap_or((0, 0));
        Ok(ApplyTables {
            keyed_ids,
            block_table,
            other_ids,
            streams,
            tasks,
            runs,
            sparse,
            last_sparse,
        })
    }

    /// Places the event ids of `entries`: the fixed-width ones in the id blocks or the per-id
    /// table, every other one in its own table.
    pub fn event_ids(&mut self, entries: &[IndexEntry<'_>]) -> Result<()> {
        // Each table's keys are inserted in key order: neighbouring inserts then touch the
        // same B-tree pages, which is several times faster than log order for random ids.
        // The sort is stable: the log holds each id once (the writer refuses to append an
        // id again), but should it hold one twice, the later event's location is kept, as
        // the insert of a later apply would keep it, every time.
        let mut keyed = Vec::with_capacity(entries.len());
        let mut other = Vec::new();
        for e in entries {
            match id_key(e.event_id) {
                Some(key) => keyed.push((key, here(e))),
                None => other.push((e.event_id, here(e))),
            }
        }
        self.keyed_ids(keyed)?;
        other.sort_by(|a, b| a.0.cmp(b.0));
        for (id, located) in &other {
            self.other_ids.insert(*id, located)?;
        }
        Ok(())
    }

    /// Places the fixed-width ids of an apply (`keyed`, in log order). They go to the id blocks
    /// when they grow, in log order, from after every fixed-width id indexed; otherwise each run
    /// of them that grows between two blocks does, and the others go one by one to the per-id
    /// table, sorted (see `id_blocks` for why, and the invariants).
    fn keyed_ids(&mut self, mut keyed: Vec<(IdKey, Row)>) -> Result<()> {
        let last_block = self
            .block_table
            .last()?
            .map(|(k, v)| (*k.value(), v.value().to_vec()));
        let greatest = greatest_keyed(
            &self.keyed_ids,
            last_block.as_ref().map(|(_, block)| block.as_slice()),
        )?;
        let grow = keyed
            .first()
            .is_some_and(|(first, _)| greatest.is_none_or(|g| *first > g))
            && keyed.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0));
        if grow {
            append_id_blocks(&mut self.block_table, last_block, &keyed)
        } else {
            keyed.sort_by_key(|(key, _)| *key);
            place_ids(
                &mut self.block_table,
                &mut self.keyed_ids,
                &keyed,
                last_block.is_none(),
            )
        }
    }

    /// Adds `entries` to the blocks of their streams, then of their tasks, then of their runs.
    pub fn blocks<'a>(&mut self, entries: &[IndexEntry<'a>]) -> Result<()> {
        append_blocks(
            &mut self.streams,
            entries
                .iter()
                .map(|e| (e.stream_key, e.stream_version, here(e))),
            Numbered::Version,
        )?;
        let by_task: fn(&IndexEntry<'a>) -> Option<&'a str> = |e| e.task;
        let by_run: fn(&IndexEntry<'a>) -> Option<&'a str> = |e| e.run;
        for (table, pick) in [(&mut self.tasks, by_task), (&mut self.runs, by_run)] {
            append_blocks(
                table,
                entries
                    .iter()
                    .filter_map(|e| pick(e).map(|k| (k, e.position.0, here(e)))),
                Numbered::Position,
            )?;
        }
        Ok(())
    }

    /// Adds to the sparse map each of `entries` that starts a segment or lies far enough past
    /// the last entry.
    pub fn sparse(&mut self, entries: &[IndexEntry<'_>]) -> Result<()> {
        for e in entries {
            if self.last_sparse.0 != e.location.segment.0
                || e.location.offset >= self.last_sparse.1 + SPARSE_INTERVAL_BYTES
            {
                self.sparse
                    .insert(e.position.0, (e.location.segment.0, e.location.offset))?;
                self.last_sparse = (e.location.segment.0, e.location.offset);
            }
        }
        Ok(())
    }
}
