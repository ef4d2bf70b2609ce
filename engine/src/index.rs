//! The derived index in redb: event id → position, position → location, stream and version →
//! position, stream heads, and session / task / run → positions.
//!
//! The log is the truth. The index follows it: the writer acknowledges an append once the log
//! is durable and hands the new entries to the indexer thread afterwards, so the index is never
//! on the durable commit path. It may lag after a crash; on open it is checked against the log
//! (its recorded head must be a position the log has, with the same chain link) and caught up,
//! or rebuilt from the log when missing, damaged or ahead of the log.

use std::path::Path;

use journal_format::{ChainHash, Position, SegmentId};
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTableMetadata, TableDefinition,
};

use crate::error::{Error, Result};

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const EVENT_IDS: TableDefinition<&str, u64> = TableDefinition::new("event_ids");
const LOCATIONS: TableDefinition<u64, (u64, u64)> = TableDefinition::new("locations");
const STREAMS: TableDefinition<(&str, u64), u64> = TableDefinition::new("streams");
const STREAM_HEADS: TableDefinition<&str, u64> = TableDefinition::new("stream_heads");
const BY_SESSION: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_session");
const BY_TASK: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_task");
const BY_RUN: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_run");

/// The key of the index's own head in `META`: position (u64 LE) and chain link (32 bytes).
const INDEXED_KEY: &str = "indexed";
/// The version of the index layout; a different stored version means rebuild.
const LAYOUT_KEY: &str = "layout";
const LAYOUT_VERSION: u64 = 1;

/// Which secondary id to look positions up by.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum By {
    /// `sessionId`.
    Session,
    /// `taskId`.
    Task,
    /// `runId`.
    Run,
}

impl By {
    fn table(self) -> TableDefinition<'static, (&'static str, u64), ()> {
        match self {
            By::Session => BY_SESSION,
            By::Task => BY_TASK,
            By::Run => BY_RUN,
        }
    }
}

/// What the index records about one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub position: Position,
    pub event_id: String,
    pub stream_key: String,
    pub stream_version: u64,
    pub session: Option<String>,
    pub task: Option<String>,
    pub run: Option<String>,
    pub segment: SegmentId,
    pub offset: u64,
}

/// Entry counts per table, for `verify`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexCounts {
    pub event_ids: u64,
    pub locations: u64,
    pub streams: u64,
    pub by_session: u64,
    pub by_task: u64,
    pub by_run: u64,
}

/// The redb database holding the index.
#[derive(Debug)]
pub(crate) struct Index {
    db: Database,
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
                txn.open_table(LOCATIONS)?;
                txn.open_table(STREAMS)?;
                txn.open_table(STREAM_HEADS)?;
                txn.open_table(BY_SESSION)?;
                txn.open_table(BY_TASK)?;
                txn.open_table(BY_RUN)?;
                txn.commit()?;
                Ok(index)
            }
        }
    }

    /// The last position the index reflects and its chain link.
    pub(crate) fn indexed(&self) -> Result<(Position, ChainHash)> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let Some(value) = meta.get(INDEXED_KEY)? else {
            return Ok((Position::ZERO, ChainHash::GENESIS));
        };
        let bytes = value.value();
        let (pos, hash) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| Error::Index("indexed head record too short".into()))?;
        let hash: [u8; 32] = hash
            .try_into()
            .map_err(|_| Error::Index("indexed head record has a bad hash".into()))?;
        Ok((Position(u64::from_le_bytes(*pos)), ChainHash(hash)))
    }

    /// Removes every entry (before a rebuild from the log).
    pub(crate) fn clear(&self) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.delete_table(EVENT_IDS)?;
        txn.delete_table(LOCATIONS)?;
        txn.delete_table(STREAMS)?;
        txn.delete_table(STREAM_HEADS)?;
        txn.delete_table(BY_SESSION)?;
        txn.delete_table(BY_TASK)?;
        txn.delete_table(BY_RUN)?;
        txn.open_table(META)?.remove(INDEXED_KEY)?;
        txn.commit()?;
        Ok(())
    }

    /// Adds `entries` (in position order, continuing from the indexed head) and records `head`
    /// as the indexed head, in one transaction. Non-durable commits are fine: the index is
    /// caught up from the log after a crash.
    pub(crate) fn apply(
        &self,
        entries: &[IndexEntry],
        head: (Position, ChainHash),
        durable: bool,
    ) -> Result<()> {
        debug_assert!(entries
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.position < b.position)));
        let mut txn = self.db.begin_write()?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut ids = txn.open_table(EVENT_IDS)?;
            let mut locations = txn.open_table(LOCATIONS)?;
            let mut streams = txn.open_table(STREAMS)?;
            let mut heads = txn.open_table(STREAM_HEADS)?;
            let mut sessions = txn.open_table(BY_SESSION)?;
            let mut tasks = txn.open_table(BY_TASK)?;
            let mut runs = txn.open_table(BY_RUN)?;
            for e in entries {
                let p = e.position.0;
                ids.insert(e.event_id.as_str(), p)?;
                locations.insert(p, (e.segment.0, e.offset))?;
                streams.insert((e.stream_key.as_str(), e.stream_version), p)?;
                heads.insert(e.stream_key.as_str(), e.stream_version)?;
                if let Some(s) = &e.session {
                    sessions.insert((s.as_str(), p), ())?;
                }
                if let Some(t) = &e.task {
                    tasks.insert((t.as_str(), p), ())?;
                }
                if let Some(r) = &e.run {
                    runs.insert((r.as_str(), p), ())?;
                }
            }
            let mut record = Vec::with_capacity(40);
            record.extend_from_slice(&head.0 .0.to_le_bytes());
            record.extend_from_slice(&head.1 .0);
            txn.open_table(META)?
                .insert(INDEXED_KEY, record.as_slice())?;
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

    pub(crate) fn event_position(&self, event_id: &str) -> Result<Option<Position>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(EVENT_IDS)?;
        Ok(table.get(event_id)?.map(|v| Position(v.value())))
    }

    pub(crate) fn location(&self, position: Position) -> Result<Option<(SegmentId, u64)>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(LOCATIONS)?;
        Ok(table.get(position.0)?.map(|v| {
            let (segment, offset) = v.value();
            (SegmentId(segment), offset)
        }))
    }

    pub(crate) fn stream_head(&self, stream_key: &str) -> Result<u64> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(STREAM_HEADS)?;
        Ok(table.get(stream_key)?.map_or(0, |v| v.value()))
    }

    /// Up to `limit` positions of events with the given secondary id, from `from` on.
    pub(crate) fn positions_by(
        &self,
        by: By,
        id: &str,
        from: Position,
        limit: usize,
    ) -> Result<Vec<Position>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(by.table())?;
        let mut out = Vec::new();
        for item in table.range((id, from.0)..=(id, u64::MAX))?.take(limit) {
            let (key, _) = item?;
            out.push(Position(key.value().1));
        }
        Ok(out)
    }

    /// Up to `limit` positions of a stream's events, from stream version `from_version` on.
    pub(crate) fn stream_positions(
        &self,
        stream_key: &str,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<Position>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(STREAMS)?;
        let mut out = Vec::new();
        for item in table
            .range((stream_key, from_version)..=(stream_key, u64::MAX))?
            .take(limit)
        {
            let (_, value) = item?;
            out.push(Position(value.value()));
        }
        Ok(out)
    }

    pub(crate) fn counts(&self) -> Result<IndexCounts> {
        let txn = self.db.begin_read()?;
        Ok(IndexCounts {
            event_ids: txn.open_table(EVENT_IDS)?.len()?,
            locations: txn.open_table(LOCATIONS)?.len()?,
            streams: txn.open_table(STREAMS)?.len()?,
            by_session: txn.open_table(BY_SESSION)?.len()?,
            by_task: txn.open_table(BY_TASK)?.len()?,
            by_run: txn.open_table(BY_RUN)?.len()?,
        })
    }

    /// A consistent view for checking many entries (for `verify`).
    pub(crate) fn checker(&self) -> Result<IndexChecker> {
        let txn = self.db.begin_read()?;
        Ok(IndexChecker {
            ids: txn.open_table(EVENT_IDS)?,
            locations: txn.open_table(LOCATIONS)?,
            streams: txn.open_table(STREAMS)?,
            sessions: txn.open_table(BY_SESSION)?,
            tasks: txn.open_table(BY_TASK)?,
            runs: txn.open_table(BY_RUN)?,
        })
    }
}

/// Checks entries against one read transaction of the index.
pub(crate) struct IndexChecker {
    ids: ReadOnlyTable<&'static str, u64>,
    locations: ReadOnlyTable<u64, (u64, u64)>,
    streams: ReadOnlyTable<(&'static str, u64), u64>,
    sessions: ReadOnlyTable<(&'static str, u64), ()>,
    tasks: ReadOnlyTable<(&'static str, u64), ()>,
    runs: ReadOnlyTable<(&'static str, u64), ()>,
}

impl IndexChecker {
    /// The parts of `e` the index lacks or holds differently.
    pub(crate) fn missing(&self, e: &IndexEntry) -> Result<Vec<&'static str>> {
        let mut missing = Vec::new();
        if self.ids.get(e.event_id.as_str())?.map(|v| v.value()) != Some(e.position.0) {
            missing.push("event id");
        }
        if self.locations.get(e.position.0)?.map(|v| v.value()) != Some((e.segment.0, e.offset)) {
            missing.push("location");
        }
        if self
            .streams
            .get((e.stream_key.as_str(), e.stream_version))?
            .map(|v| v.value())
            != Some(e.position.0)
        {
            missing.push("stream version");
        }
        for (table, id, name) in [
            (&self.sessions, &e.session, "session"),
            (&self.tasks, &e.task, "task"),
            (&self.runs, &e.run, "run"),
        ] {
            if let Some(id) = id {
                if table.get((id.as_str(), e.position.0))?.is_none() {
                    missing.push(name);
                }
            }
        }
        Ok(missing)
    }
}
