//! The derived index in redb: event id → (position, location), stream and version → (position,
//! location), task and run → locations, and a sparse position → location map.
//!
//! The log is the truth. The index follows it: the writer acknowledges an append once the log
//! is durable and hands the new entries to the indexer thread afterwards, so the index is never
//! on the durable commit path. It may lag after a crash; on open it is checked against the log
//! (its recorded head must be a position the log has, with the same chain link) and caught up,
//! or rebuilt from the log when missing, damaged or ahead of the log. Its recorded head doubles
//! as a recovery checkpoint: recovery scans the tail segment only after it.
//!
//! Events of a session are found through their stream (an event with a `sessionId` always
//! belongs to the stream `session:<id>`), so there is no separate session table.

use std::path::Path;

use journal_format::{ByteOffset, ChainHash, FooterEntry, Position, SegmentId};
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition,
};

use crate::error::{Error, Result};
use crate::log::SPARSE_INTERVAL_BYTES;

/// (position, segment, offset).
type Located = (u64, u64, u64);

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const EVENT_IDS: TableDefinition<&str, Located> = TableDefinition::new("event_ids");
const STREAMS: TableDefinition<(&str, u64), Located> = TableDefinition::new("streams");
const BY_TASK: TableDefinition<(&str, u64), (u64, u64)> = TableDefinition::new("by_task");
const BY_RUN: TableDefinition<(&str, u64), (u64, u64)> = TableDefinition::new("by_run");
const SPARSE: TableDefinition<u64, (u64, u64)> = TableDefinition::new("sparse");

/// The key of the index's head in `META` (see [`Checkpoint`]).
const INDEXED_KEY: &str = "indexed";
/// The version of the index layout; a different stored version means rebuild.
const LAYOUT_KEY: &str = "layout";
const LAYOUT_VERSION: u64 = 2;

/// Which secondary id to look events up by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum By {
    /// `sessionId` (through the session's stream).
    Session,
    /// `taskId`.
    Task,
    /// `runId`.
    Run,
}

/// What the index records about one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub position: Position,
    pub event_id: String,
    pub stream_key: String,
    pub stream_version: u64,
    pub task: Option<String>,
    pub run: Option<String>,
    pub segment: SegmentId,
    pub offset: u64,
    /// Where the frame ends.
    pub end_offset: u64,
}

/// The last event the index reflects, and where it is: also the point after which recovery
/// scans the tail.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub position: Position,
    pub hash: ChainHash,
    pub segment: SegmentId,
    pub offset: u64,
    pub end_offset: u64,
}

impl Checkpoint {
    const LEN: usize = 8 + 32 + 8 + 8 + 8;

    fn encode(&self) -> [u8; Checkpoint::LEN] {
        let mut out = [0u8; Checkpoint::LEN];
        let fields: [&[u8]; 5] = [
            &self.position.0.to_le_bytes(),
            &self.hash.0,
            &self.segment.0.to_le_bytes(),
            &self.offset.to_le_bytes(),
            &self.end_offset.to_le_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            if let Some(slot) = out.get_mut(at..at + f.len()) {
                slot.copy_from_slice(f);
            }
            at += f.len();
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Checkpoint> {
        let bad = || Error::Index("the index head record is malformed".into());
        let (position, rest) = bytes.split_first_chunk::<8>().ok_or_else(bad)?;
        let (hash, rest) = rest.split_first_chunk::<32>().ok_or_else(bad)?;
        let (segment, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let (offset, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let (end, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        if !rest.is_empty() {
            return Err(bad());
        }
        Ok(Checkpoint {
            position: Position(u64::from_le_bytes(*position)),
            hash: ChainHash(*hash),
            segment: SegmentId(u64::from_le_bytes(*segment)),
            offset: u64::from_le_bytes(*offset),
            end_offset: u64::from_le_bytes(*end),
        })
    }
}

/// Entry counts per table, for `verify`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexCounts {
    pub event_ids: u64,
    pub streams: u64,
    pub by_task: u64,
    pub by_run: u64,
}

/// The redb database holding the index.
#[derive(Debug)]
pub(crate) struct Index {
    db: Database,
}

fn located(v: Located) -> (Position, SegmentId, u64) {
    (Position(v.0), SegmentId(v.1), v.2)
}

impl Index {
    /// Opens the index at `path`, creating it when missing. A database that cannot be opened or
    /// has another layout is deleted and created empty (the caller then rebuilds it from the
    /// log); the returned flag says so.
    pub(crate) fn open(path: &Path) -> Result<(Index, bool)> {
        match Index::try_open(path) {
            Ok(index) => Ok((index, false)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "index unusable; rebuilding it from the log");
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(format!("removing {}", path.display()))(e)),
                }
                Ok((Index::try_open(path)?, true))
            }
        }
    }

    fn try_open(path: &Path) -> Result<Index> {
        let db = Database::builder().create(path)?;
        let index = Index { db };
        // Opening an index that is already set up writes nothing, so a read-only command
        // leaves the journal directory byte-for-byte unchanged.
        let layout = {
            let txn = index.db.begin_read()?;
            match txn.open_table(META) {
                Ok(meta) => meta.get(LAYOUT_KEY)?.map(|v| v.value().to_vec()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(e.into()),
            }
        };
        match layout {
            Some(bytes) if bytes == LAYOUT_VERSION.to_le_bytes() => Ok(index),
            Some(_) => Err(Error::Index("index layout version differs".into())),
            None => {
                let txn = index.db.begin_write()?;
                txn.open_table(META)?
                    .insert(LAYOUT_KEY, LAYOUT_VERSION.to_le_bytes().as_slice())?;
                txn.open_table(EVENT_IDS)?;
                txn.open_table(STREAMS)?;
                txn.open_table(BY_TASK)?;
                txn.open_table(BY_RUN)?;
                txn.open_table(SPARSE)?;
                txn.commit()?;
                Ok(index)
            }
        }
    }

    /// The index's head, or `None` for an empty index.
    pub(crate) fn checkpoint(&self) -> Result<Option<Checkpoint>> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let Some(value) = meta.get(INDEXED_KEY)? else {
            return Ok(None);
        };
        Checkpoint::decode(value.value()).map(Some)
    }

    /// The last position the index reflects and its chain link.
    pub(crate) fn indexed(&self) -> Result<(Position, ChainHash)> {
        Ok(self
            .checkpoint()?
            .map_or((Position::ZERO, ChainHash::GENESIS), |c| {
                (c.position, c.hash)
            }))
    }

    /// The sparse index entries of one segment, up to `last`, for recovery.
    pub(crate) fn sparse_of(
        &self,
        segment: SegmentId,
        first: Position,
        last: Position,
    ) -> Result<Vec<FooterEntry>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SPARSE)?;
        let mut out = Vec::new();
        for item in table.range(first.0..=last.0)? {
            let (k, v) = item?;
            let (seg, offset) = v.value();
            if seg == segment.0 {
                out.push(FooterEntry {
                    position: Position(k.value()),
                    offset: ByteOffset(offset),
                });
            }
        }
        Ok(out)
    }

    /// Removes every entry (before a rebuild from the log).
    pub(crate) fn clear(&self) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.delete_table(EVENT_IDS)?;
        txn.delete_table(STREAMS)?;
        txn.delete_table(BY_TASK)?;
        txn.delete_table(BY_RUN)?;
        txn.delete_table(SPARSE)?;
        // Recreate the tables empty: a rebuild from an empty log applies nothing, and readers
        // (the writer's id lookups) must then find empty tables, not missing ones.
        txn.open_table(EVENT_IDS)?;
        txn.open_table(STREAMS)?;
        txn.open_table(BY_TASK)?;
        txn.open_table(BY_RUN)?;
        txn.open_table(SPARSE)?;
        txn.open_table(META)?.remove(INDEXED_KEY)?;
        txn.commit()?;
        Ok(())
    }

    /// Adds `entries` (in position order, continuing from the indexed head) and records the last
    /// one as the head, in one transaction. Non-durable commits are fine: the index is caught up
    /// from the log after a crash.
    pub(crate) fn apply(
        &self,
        entries: &[IndexEntry],
        head_hash: ChainHash,
        durable: bool,
    ) -> Result<()> {
        debug_assert!(entries
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.position < b.position)));
        let Some(last) = entries.last() else {
            return Ok(());
        };
        let mut txn = self.db.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut ids = txn.open_table(EVENT_IDS)?;
            let mut streams = txn.open_table(STREAMS)?;
            let mut tasks = txn.open_table(BY_TASK)?;
            let mut runs = txn.open_table(BY_RUN)?;
            let mut sparse = txn.open_table(SPARSE)?;
            let mut last_sparse = sparse.last()?.map(|(_, v)| v.value()).unwrap_or((0, 0));
            // Each table's keys are inserted in key order: neighbouring inserts then touch the
            // same B-tree pages, which is several times faster than log order for random ids.
            let mut by_id: Vec<&IndexEntry> = entries.iter().collect();
            by_id.sort_unstable_by(|a, b| a.event_id.cmp(&b.event_id));
            for e in by_id {
                ids.insert(e.event_id.as_str(), (e.position.0, e.segment.0, e.offset))?;
            }
            let mut by_stream: Vec<&IndexEntry> = entries.iter().collect();
            by_stream.sort_unstable_by(|a, b| {
                (&a.stream_key, a.stream_version).cmp(&(&b.stream_key, b.stream_version))
            });
            for e in by_stream {
                streams.insert(
                    (e.stream_key.as_str(), e.stream_version),
                    (e.position.0, e.segment.0, e.offset),
                )?;
            }
            for (table, pick) in [
                (
                    &mut tasks,
                    (|e: &IndexEntry| e.task.as_deref()) as fn(&IndexEntry) -> Option<&str>,
                ),
                (&mut runs, |e: &IndexEntry| e.run.as_deref()),
            ] {
                let mut keyed: Vec<(&str, &IndexEntry)> = entries
                    .iter()
                    .filter_map(|e| pick(e).map(|k| (k, e)))
                    .collect();
                keyed.sort_unstable_by(|a, b| (a.0, a.1.position).cmp(&(b.0, b.1.position)));
                for (k, e) in keyed {
                    table.insert((k, e.position.0), (e.segment.0, e.offset))?;
                }
            }
            for e in entries {
                if last_sparse.0 != e.segment.0 || e.offset >= last_sparse.1 + SPARSE_INTERVAL_BYTES
                {
                    sparse.insert(e.position.0, (e.segment.0, e.offset))?;
                    last_sparse = (e.segment.0, e.offset);
                }
            }
            let checkpoint = Checkpoint {
                position: last.position,
                hash: head_hash,
                segment: last.segment,
                offset: last.offset,
                end_offset: last.end_offset,
            };
            txn.open_table(META)?
                .insert(INDEXED_KEY, checkpoint.encode().as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Makes everything applied so far durable.
    pub(crate) fn persist(&self) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        Ok(())
    }

    /// The position and location of an event id.
    pub(crate) fn event(&self, event_id: &str) -> Result<Option<(Position, SegmentId, u64)>> {
        self.reader()?.event(event_id)
    }

    /// A read view for many lookups in a row, and the position it reflects.
    pub(crate) fn reader(&self) -> Result<IndexReader> {
        let txn = self.db.begin_read()?;
        let indexed = match txn.open_table(META)?.get(INDEXED_KEY)? {
            Some(v) => Checkpoint::decode(v.value())?.position,
            None => Position::ZERO,
        };
        Ok(IndexReader {
            ids: txn.open_table(EVENT_IDS)?,
            streams: txn.open_table(STREAMS)?,
            indexed,
        })
    }

    /// The version of a stream: the number of its events.
    pub(crate) fn stream_head(&self, stream_key: &str) -> Result<u64> {
        self.reader()?.stream_head(stream_key)
    }

    /// Up to `limit` events with the given secondary id, from position `from` on, with their
    /// locations.
    pub(crate) fn positions_by(
        &self,
        by: By,
        id: &str,
        from: Position,
        limit: usize,
    ) -> Result<Vec<(Position, SegmentId, u64)>> {
        let txn = self.db.begin_read()?;
        let mut out = Vec::new();
        match by {
            By::Session => {
                let key = format!("session:{id}");
                let table = txn.open_table(STREAMS)?;
                for item in table.range((key.as_str(), 0)..=(key.as_str(), u64::MAX))? {
                    let (_, v) = item?;
                    let (p, s, o) = located(v.value());
                    if p >= from {
                        out.push((p, s, o));
                        if out.len() >= limit {
                            break;
                        }
                    }
                }
            }
            By::Task | By::Run => {
                let table = txn.open_table(if by == By::Task { BY_TASK } else { BY_RUN })?;
                for item in table.range((id, from.0)..=(id, u64::MAX))?.take(limit) {
                    let (k, v) = item?;
                    let (s, o) = v.value();
                    out.push((Position(k.value().1), SegmentId(s), o));
                }
            }
        }
        Ok(out)
    }

    /// Up to `limit` events of a stream, from stream version `from_version` on.
    pub(crate) fn stream_positions(
        &self,
        stream_key: &str,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<(Position, SegmentId, u64)>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(STREAMS)?;
        let mut out = Vec::new();
        for item in table
            .range((stream_key, from_version)..=(stream_key, u64::MAX))?
            .take(limit)
        {
            let (_, v) = item?;
            out.push(located(v.value()));
        }
        Ok(out)
    }

    pub(crate) fn counts(&self) -> Result<IndexCounts> {
        let txn = self.db.begin_read()?;
        Ok(IndexCounts {
            event_ids: txn.open_table(EVENT_IDS)?.len()?,
            streams: txn.open_table(STREAMS)?.len()?,
            by_task: txn.open_table(BY_TASK)?.len()?,
            by_run: txn.open_table(BY_RUN)?.len()?,
        })
    }

    /// A consistent view for checking many entries (for `verify`).
    pub(crate) fn checker(&self) -> Result<IndexChecker> {
        let txn = self.db.begin_read()?;
        Ok(IndexChecker {
            ids: txn.open_table(EVENT_IDS)?,
            streams: txn.open_table(STREAMS)?,
            tasks: txn.open_table(BY_TASK)?,
            runs: txn.open_table(BY_RUN)?,
            sparse: txn.open_table(SPARSE)?,
        })
    }
}

/// Lookups against one read transaction of the index.
pub(crate) struct IndexReader {
    ids: ReadOnlyTable<&'static str, Located>,
    streams: ReadOnlyTable<(&'static str, u64), Located>,
    indexed: Position,
}

impl IndexReader {
    /// The last position this view reflects.
    pub(crate) fn indexed(&self) -> Position {
        self.indexed
    }

    pub(crate) fn event(&self, event_id: &str) -> Result<Option<(Position, SegmentId, u64)>> {
        Ok(self.ids.get(event_id)?.map(|v| located(v.value())))
    }

    pub(crate) fn stream_head(&self, stream_key: &str) -> Result<u64> {
        let last = self
            .streams
            .range((stream_key, 0)..=(stream_key, u64::MAX))?
            .next_back()
            .transpose()?;
        Ok(last.map_or(0, |(k, _)| k.value().1))
    }
}

/// Checks entries against one read transaction of the index.
pub(crate) struct IndexChecker {
    ids: ReadOnlyTable<&'static str, Located>,
    streams: ReadOnlyTable<(&'static str, u64), Located>,
    tasks: ReadOnlyTable<(&'static str, u64), (u64, u64)>,
    runs: ReadOnlyTable<(&'static str, u64), (u64, u64)>,
    sparse: ReadOnlyTable<u64, (u64, u64)>,
}

impl IndexChecker {
    /// The parts of `e` the index lacks or holds differently.
    pub(crate) fn missing(&self, e: &IndexEntry) -> Result<Vec<&'static str>> {
        let mut missing = Vec::new();
        let here = (e.position.0, e.segment.0, e.offset);
        if self.ids.get(e.event_id.as_str())?.map(|v| v.value()) != Some(here) {
            missing.push("event id");
        }
        if self
            .streams
            .get((e.stream_key.as_str(), e.stream_version))?
            .map(|v| v.value())
            != Some(here)
        {
            missing.push("stream version");
        }
        for (table, id, name) in [(&self.tasks, &e.task, "task"), (&self.runs, &e.run, "run")] {
            if let Some(id) = id {
                if table.get((id.as_str(), e.position.0))?.map(|v| v.value())
                    != Some((e.segment.0, e.offset))
                {
                    missing.push(name);
                }
            }
        }
        Ok(missing)
    }

    /// Every sparse entry: position, segment, offset.
    pub(crate) fn sparse_entries(&self) -> Result<Vec<(Position, SegmentId, u64)>> {
        let mut out = Vec::new();
        for item in self.sparse.iter()? {
            let (k, v) = item?;
            let (s, o) = v.value();
            out.push((Position(k.value()), SegmentId(s), o));
        }
        Ok(out)
    }
}
