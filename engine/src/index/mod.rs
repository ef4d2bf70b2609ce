//! The derived index in redb: event id → (position, location), the ids that grow in id blocks
//! ([`crate::index::id_blocks`]); stream, task and run → the locations of their events, in blocks; and
//! a sparse position → location map.
//!
//! The log is the truth. The index follows it: the writer acknowledges an append once the log
//! is durable and hands the new entries to the indexer thread afterwards, so the index is never
//! on the durable commit path. It may lag after a crash; on open it is checked against the log
//! (its recorded head must be a position the log has, with the same chain link) and caught up,
//! or rebuilt from the log when missing, damaged or ahead of the log. Its recorded head (the
//! index head) is also evidence of how far the log was committed (`evidence`).
//!
//! A stream's, task's or run's events are kept in **blocks**: one redb value holds the locations
//! of up to [`BLOCK_EVENTS`] of its events in position order, keyed by the key and the first
//! event's number (its stream version for a stream, its position for a task or run). An apply
//! fills the key's last block before it starts another, so a transaction writes one value per
//! key and block instead of one per event: the indexer's cost per event does not grow with the
//! number of secondary tables. Events of a session are found through their stream (an
//! event with a `sessionId` always belongs to the stream `session:<id>`), so there is no
//! separate session table.
//!
//! Invariants (checked on every apply, an [`Error::Index`] otherwise): a block holds 1 to
//! [`BLOCK_EVENTS`] entries in strictly increasing position order; a stream's blocks hold its
//! versions from 1 on without a gap, each block's first version its key's number. Entries at or
//! before the index's head, or a key's last indexed position, are already there and are
//! skipped, so applying entries twice changes nothing, the head included.

mod apply;
mod blocks;
mod checker;
mod head;
pub(crate) mod id_blocks;
mod ids;
pub(crate) mod indexer;
mod lookup;
mod reader;
mod tables;

pub(crate) use checker::IndexChecker;
pub(crate) use head::IndexHead;
pub(crate) use reader::IndexReader;
pub(crate) use tables::INDEX_FILE;

use std::path::Path;
use std::sync::Arc;

use journal_format::{ChainHash, Located, Position, SegmentId};
use redb::{Database, Durability, ReadableDatabase};

use crate::error::{Error, Result};
use crate::log::entries::IndexEntry;
use apply::ApplyTables;
use blocks::{block_at, block_entries, count_entries};
use ids::IdTables;
use tables::{
    guard, located, BY_RUN, BY_TASK, EVENT_ID_BLOCKS, EVENT_ID_KEYS, INDEXED_KEY, LAYOUT_KEY,
    LAYOUT_VERSION, META, OTHER_EVENT_IDS, SPARSE, STREAMS,
};

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
    /// `index.damaged`: left when a damaged page made redb panic, so that the next open that may
    /// write rebuilds the index from the log.
    marker: Arc<Path>,
}

impl Index {
    /// Opens the index at `path`, creating it when missing. A database that cannot be opened,
    /// has another layout, or was found damaged (its marker, `index.damaged`, is there) is
    /// deleted and created empty (the caller then rebuilds it from the log); the returned reason
    /// says why.
    pub(crate) fn open(path: &Path) -> Result<(Index, Option<String>)> {
        let marker: Arc<Path> = Arc::from(path.with_extension("damaged"));
        let found_damaged = std::fs::read(&marker)
            .ok()
            .map(|why| String::from_utf8_lossy(&why).into_owned());
        let first = match &found_damaged {
            Some(why) => Err(Error::Index(format!("it was found damaged: {why}"))),
            None => guard(&marker, || Index::try_open(path, &marker)),
        };
        match first {
            Ok(index) => Ok((index, None)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "index unusable; rebuilding it from the log");
                for file in [path, &*marker] {
                    match std::fs::remove_file(file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(Error::io_with(|| format!("removing {}", file.display()))(
                                e,
                            ))
                        }
                    }
                }
                Ok((Index::try_open(path, &marker)?, Some(e.to_string())))
            }
        }
    }

    fn try_open(path: &Path, marker: &Arc<Path>) -> Result<Index> {
        let db = Database::builder().create(path)?;
        let index = Index {
            db,
            marker: Arc::clone(marker),
        };
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
            Some(bytes) => {
                let found = <[u8; 8]>::try_from(bytes.as_slice()).map_or_else(
                    |_| format!("{bytes:?}"),
                    |b| u64::from_le_bytes(b).to_string(),
                );
                Err(Error::Index(format!(
                    "its layout is version {found}, this build's is {LAYOUT_VERSION}"
                )))
            }
            None => {
                let txn = index.db.begin_write()?;
                txn.open_table(META)?
                    .insert(LAYOUT_KEY, LAYOUT_VERSION.to_le_bytes().as_slice())?;
                txn.open_table(EVENT_ID_KEYS)?;
                txn.open_table(EVENT_ID_BLOCKS)?;
                txn.open_table(OTHER_EVENT_IDS)?;
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
    pub(crate) fn head(&self) -> Result<Option<IndexHead>> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            let meta = txn.open_table(META)?;
            let Some(value) = meta.get(INDEXED_KEY)? else {
                return Ok(None);
            };
            IndexHead::decode(value.value()).map(Some)
        })
    }

    /// The last position the index reflects and its chain link.
    pub(crate) fn indexed(&self) -> Result<(Position, ChainHash)> {
        Ok(self
            .head()?
            .map_or((Position::ZERO, ChainHash::GENESIS), |c| {
                (c.position, c.hash)
            }))
    }

    /// Removes every entry (before a rebuild from the log).
    pub(crate) fn clear(&self) -> Result<()> {
        guard(&self.marker, || {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            txn.delete_table(EVENT_ID_KEYS)?;
            txn.delete_table(EVENT_ID_BLOCKS)?;
            txn.delete_table(OTHER_EVENT_IDS)?;
            txn.delete_table(STREAMS)?;
            txn.delete_table(BY_TASK)?;
            txn.delete_table(BY_RUN)?;
            txn.delete_table(SPARSE)?;
            // Recreate the tables empty: a rebuild from an empty log applies nothing, and readers
            // (the writer's id lookups) must then find empty tables, not missing ones.
            txn.open_table(EVENT_ID_KEYS)?;
            txn.open_table(EVENT_ID_BLOCKS)?;
            txn.open_table(OTHER_EVENT_IDS)?;
            txn.open_table(STREAMS)?;
            txn.open_table(BY_TASK)?;
            txn.open_table(BY_RUN)?;
            txn.open_table(SPARSE)?;
            txn.open_table(META)?.remove(INDEXED_KEY)?;
            txn.commit()?;
            Ok(())
        })
    }

    /// Adds `entries` (in position order, continuing from the indexed head) and records the last
    /// one as the head, in one transaction, which is not made durable ([`Index::persist`] does
    /// that): the index is caught up from the log after a crash.
    pub(crate) fn apply<'a>(&self, entries: &[IndexEntry<'a>], head_hash: ChainHash) -> Result<()> {
        guard(&self.marker, || {
            debug_assert!(entries
                .windows(2)
                .all(|w| matches!(w, [a, b] if a.position < b.position)));
            let Some(last) = entries.last() else {
                return Ok(());
            };
            let indexed = self.indexed()?.0;
            // Entries at or before the head are in already: applying them again changes nothing
            // (not the head either).
            let entries = entries
                .get(entries.partition_point(|e| e.position <= indexed)..)
                .unwrap_or_default();
            if entries.is_empty() {
                return Ok(());
            }
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::None)?;
            {
                let mut tables = ApplyTables::open(&txn)?;
                tables.event_ids(entries)?;
                tables.blocks(entries)?;
                tables.sparse(entries)?;
                let head = IndexHead {
                    position: last.position,
                    hash: head_hash,
                    location: last.location,
                    end_offset: last.end_offset,
                };
                txn.open_table(META)?
                    .insert(INDEXED_KEY, head.encode().as_slice())?;
            }
            txn.commit()?;
            Ok(())
        })
    }

    /// Makes everything applied so far durable.
    pub(crate) fn persist(&self) -> Result<()> {
        guard(&self.marker, || {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            txn.commit()?;
            Ok(())
        })
    }

    /// The position and location of an event id.
    pub(crate) fn event(&self, event_id: &str) -> Result<Option<Located>> {
        guard(&self.marker, || {
            // One lookup: straight down the ids' B-tree (a view's shortcut costs a descent first).
            let txn = self.db.begin_read()?;
            Ok(IdTables::open(&txn)?.get(event_id)?.map(located))
        })
    }

    /// A read view for many lookups in a row, and the position it reflects.
    pub(crate) fn reader(&self) -> Result<IndexReader> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            let indexed = match txn.open_table(META)?.get(INDEXED_KEY)? {
                Some(v) => IndexHead::decode(v.value())?.position,
                None => Position::ZERO,
            };
            IndexReader::new(Arc::clone(&self.marker), &txn, indexed)
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
    ) -> Result<Vec<Located>> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let (table, key) = match by {
                By::Session => (txn.open_table(STREAMS)?, format!("session:{id}")),
                By::Task => (txn.open_table(BY_TASK)?, id.to_string()),
                By::Run => (txn.open_table(BY_RUN)?, id.to_string()),
            };
            // A task's or run's blocks are numbered by position: start at the one holding `from`.
            // A stream's are numbered by version: walk them, skipping whole blocks before `from`.
            let start = match by {
                By::Session => 0,
                By::Task | By::Run => {
                    block_at(&table, &key, from.0)?.map_or(from.0, |(first, _)| first)
                }
            };
            'blocks: for item in table.range((key.as_str(), start)..=(key.as_str(), u64::MAX))? {
                let (_, v) = item?;
                for (p, s, o) in block_entries(v.value())? {
                    if p >= from.0 {
                        out.push(Located::new(Position(p), SegmentId(s), o));
                        if out.len() >= limit {
                            break 'blocks;
                        }
                    }
                }
            }
            Ok(out)
        })
    }

    /// Up to `limit` events of a stream, from stream version `from_version` on.
    pub(crate) fn stream_positions(
        &self,
        stream_key: &str,
        from_version: u64,
        limit: usize,
    ) -> Result<Vec<Located>> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            let table = txn.open_table(STREAMS)?;
            let mut out = Vec::new();
            if limit == 0 {
                return Ok(out);
            }
            let start = block_at(&table, stream_key, from_version)?
                .map_or(from_version, |(first, _)| first);
            'blocks: for item in table.range((stream_key, start)..=(stream_key, u64::MAX))? {
                let (k, v) = item?;
                let first = k.value().1;
                for (version, entry) in (first..).zip(block_entries(v.value())?) {
                    if version >= from_version {
                        out.push(located(entry));
                        if out.len() >= limit {
                            break 'blocks;
                        }
                    }
                }
            }
            Ok(out)
        })
    }

    pub(crate) fn counts(&self) -> Result<IndexCounts> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            Ok(IndexCounts {
                event_ids: IdTables::open(&txn)?.len()?,
                streams: count_entries(&txn.open_table(STREAMS)?)?,
                by_task: count_entries(&txn.open_table(BY_TASK)?)?,
                by_run: count_entries(&txn.open_table(BY_RUN)?)?,
            })
        })
    }

    /// A consistent view for checking many entries (for `verify`).
    pub(crate) fn checker(&self) -> Result<IndexChecker> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            IndexChecker::new(Arc::clone(&self.marker), &txn)
        })
    }
}

#[cfg(test)]
mod tests {
    use journal_format::Location;

    use super::*;
    use crate::index::blocks::{append_blocks, Numbered, BLOCK_ENTRY_LEN, BLOCK_EVENTS};
    use crate::index::ids::{id_key, SHORT_ID, UUID_ID};
    use crate::log::entries::{Entry, IndexBatch};
    use redb::ReadableTableMetadata;

    /// An index entry that owns its ids, for a test to build and alter.
    type Owned = Entry<String>;

    impl Owned {
        fn entry(&self) -> IndexEntry<'_> {
            self.map_ids(String::as_str)
        }
    }

    /// The entries of `all`, as `Index::apply` takes them.
    fn borrow(all: &[Owned]) -> Vec<IndexEntry<'_>> {
        all.iter().map(Owned::entry).collect()
    }

    /// Events 1..=n over three streams, tasks on every other event, one run on every third.
    fn entries(from: u64, to: u64) -> Vec<Owned> {
        (from..=to)
            .map(|p| Owned {
                position: Position(p),
                event_id: format!("evt-{p:06}"),
                stream_key: format!("session:s{}", p % 3),
                stream_version: p.div_ceil(3),
                task: (p % 2 == 0).then(|| format!("task-{}", p % 4)),
                run: (p % 3 == 0).then(|| "run-a".to_string()),
                location: Location::new(SegmentId(p / 100), p * 10),
                end_offset: p * 10 + 9,
            })
            .collect()
    }

    fn open() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (index, _) = Index::open(&dir.path().join("index.redb")).expect("open");
        (dir, index)
    }

    fn at(p: u64) -> Located {
        Located::new(Position(p), SegmentId(p / 100), p * 10)
    }

    #[test]
    fn a_view_finds_every_id_before_at_or_after_its_greatest_as_a_lookup_does() {
        let (_dir, index) = open();
        let empty = index.reader().expect("reader");
        assert_eq!(empty.event("evt-000001").expect("lookup"), None);
        // Ids out of position order: the greatest id is not the last event's.
        let mut batch = entries(1, 50);
        batch[10].event_id = "zzz-greatest".into();
        batch[20].event_id = "aaa-least".into();
        index
            .apply(&borrow(&batch), ChainHash::GENESIS)
            .expect("apply");
        let view = index.reader().expect("reader");
        for e in &batch {
            let expected = Some(at(e.position.0));
            assert_eq!(
                view.event(&e.event_id).expect("lookup"),
                expected,
                "{}",
                e.event_id
            );
            assert_eq!(index.event(&e.event_id).expect("lookup"), expected);
        }
        assert_absent(
            &index,
            &view,
            &[
                "",
                "a",
                "evt-000000",
                "evt-000051",
                "zzz",
                "zzz-greatest0",
                "zzzz",
            ],
        );
        // A view is one snapshot, its greatest id too: ids applied after it, below and above its
        // greatest (a non-ASCII one sorts after every ASCII id), are in a new view, not in it.
        let mut later = entries(51, 53);
        later[1].event_id = "zzzz-new".into();
        later[2].event_id = "é-new".into();
        index
            .apply(&borrow(&later), ChainHash::GENESIS)
            .expect("apply");
        let renewed = index.reader().expect("reader");
        for e in &later {
            assert_eq!(
                view.event(&e.event_id).expect("lookup"),
                None,
                "{}",
                e.event_id
            );
            let expected = Some(at(e.position.0));
            assert_eq!(
                renewed.event(&e.event_id).expect("lookup"),
                expected,
                "{}",
                e.event_id
            );
        }
        assert_eq!(renewed.event("ê").expect("lookup"), None);
    }

    #[test]
    fn blocks_fill_across_applies_and_answer_from_any_point() {
        let (_dir, index) = open();
        // Applies of 1, 7 and 500 entries: blocks are filled up, then new ones started.
        let all = entries(1, 508);
        for chunk in [&all[..1], &all[1..8], &all[8..]] {
            index
                .apply(&borrow(chunk), ChainHash::GENESIS)
                .expect("apply");
        }
        // Stream s1 holds positions 1, 4, 7, ... (versions 1, 2, 3, ...): 170 events.
        assert_eq!(index.stream_head("session:s1").expect("head"), 170);
        assert_eq!(index.stream_head("session:none").expect("head"), 0);
        let from_65 = index.stream_positions("session:s1", 65, 3).expect("stream");
        assert_eq!(from_65, vec![at(193), at(196), at(199)]);
        let whole = index
            .stream_positions("session:s1", 1, usize::MAX)
            .expect("stream");
        assert_eq!(whole.len(), 170);
        assert!(whole
            .iter()
            .zip(1u64..)
            .all(|(l, v)| l.position.0 == 3 * v - 2));
        // Task task-2 holds positions 2, 6, 10, ...; from position 300 on.
        let task = index
            .positions_by(By::Task, "task-2", Position(300), 4)
            .expect("task");
        assert_eq!(task, vec![at(302), at(306), at(310), at(314)]);
        let session = index
            .positions_by(By::Session, "s0", Position(400), 2)
            .expect("session");
        assert_eq!(session, vec![at(402), at(405)]);
        let run = index
            .positions_by(By::Run, "run-a", Position::FIRST, usize::MAX)
            .expect("run");
        assert_eq!(run.len(), 169);
        let counts = index.counts().expect("counts");
        assert_eq!(
            counts,
            IndexCounts {
                event_ids: 508,
                streams: 508,
                by_task: 254,
                by_run: 169
            }
        );
        let checker = index.checker().expect("checker");
        for e in &all {
            assert!(
                checker.missing(&e.entry()).expect("check").is_empty(),
                "{e:?}"
            );
        }
        let mut moved = all[299].clone(); // position 300: a task and the run
        moved.location.offset += 1;
        assert_eq!(
            checker.missing(&moved.entry()).expect("check"),
            vec!["event id", "stream version", "task", "run"]
        );
    }

    #[test]
    fn applying_entries_again_changes_nothing() {
        let (_dir, index) = open();
        let all = entries(1, 200);
        index
            .apply(&borrow(&all), ChainHash::GENESIS)
            .expect("apply");
        index
            .apply(&borrow(&all[150..]), ChainHash::GENESIS)
            .expect("again");
        index
            .apply(&borrow(&all), ChainHash::GENESIS)
            .expect("again");
        let counts = index.counts().expect("counts");
        assert_eq!(
            (counts.streams, counts.by_task, counts.by_run),
            (200, 100, 66)
        );
        assert_eq!(index.stream_head("session:s2").expect("head"), 67); // An older range applied again leaves the head where it was.
        index
            .apply(&borrow(&all[..100]), ChainHash::GENESIS)
            .expect("older");
        assert_eq!(index.indexed().expect("head").0, Position(200));
    }

    #[test]
    fn a_new_stream_starts_at_version_one_and_a_limit_of_zero_gives_nothing() {
        let (_dir, index) = open();
        let mut first = entries(1, 1);
        first[0].stream_version = 5;
        let err = index
            .apply(&borrow(&first), ChainHash::GENESIS)
            .expect_err("version 5 first");
        assert!(
            err.to_string().contains("where version 1 comes next"),
            "{err}"
        );
        index
            .apply(&borrow(&entries(1, 10)), ChainHash::GENESIS)
            .expect("apply");
        assert!(index
            .stream_positions("session:s1", 1, 0)
            .expect("stream")
            .is_empty());
        assert!(index
            .positions_by(By::Task, "task-2", Position::FIRST, 0)
            .expect("task")
            .is_empty());
    }

    #[test]
    fn a_gap_in_a_streams_versions_is_refused() {
        let (_dir, index) = open();
        index
            .apply(&borrow(&entries(1, 3)), ChainHash::GENESIS)
            .expect("apply");
        let mut next = entries(4, 4);
        next[0].stream_version = 5; // s1 is at version 2: 3 comes next.
        let err = index
            .apply(&borrow(&next), ChainHash::GENESIS)
            .expect_err("a gap");
        assert!(
            err.is_corruption() && err.to_string().contains("records version 5 where"),
            "{err}"
        );
    }

    /// Event ids of every kind `id_key` tells apart: short ones (some with a NUL byte), ids of
    /// 16 to 18 bytes (around the short ones' limit), canonical UUIDs, UUIDs with upper case or
    /// with hex digits where hyphens belong, longer ids.
    const ID_PATTERN: &str = "[a-f0-9]{1,3}|evt-[0-9]{1,4}|[é0z]{1,3}|a\\x00[a-c]{1,2}\
        |evt-[0-9]{12,14}|[a-c]{17,20}\
        |[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\
        |[0-9a-fA-F]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\
        |[0-9a-f]{8}-[0-9a-f]{4}[0-9a-f-][0-9a-f]{4}[0-9a-f-][0-9a-f]{4}[0-9a-f-][0-9a-f]{12}";

    proptest::proptest! {
        /// Two ids have the same key only if they are the same id, and ids with keys of one
        /// kind order as their keys do, so that a table's greatest key is its greatest id and
        /// ids that grow with time are appended at the end of their table.
        #[test]
        fn id_keys_tell_ids_apart_and_keep_their_order(a in ID_PATTERN, b in ID_PATTERN) {
            let (ka, kb) = (id_key(&a), id_key(&b));
            if let (Some(ka), Some(kb)) = (ka, kb) {
                proptest::prop_assert_eq!(ka == kb, a == b);
                if ka[0] == kb[0] {
                    proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b), "{:?} {:?}", a, b);
                }
            }
            // Ids one character apart, at every place of the id: the keys differ, in the same
            // order as the ids.
            for i in 0..a.len() {
                let mut near = a.clone().into_bytes();
                let Some(c) = near.get_mut(i).filter(|c| c.is_ascii_hexdigit()) else {
                    continue;
                };
                *c = if *c == b'0' { b'1' } else { b'0' };
                let Ok(near) = String::from_utf8(near) else {
                    continue;
                };
                if let (Some(ka), Some(kn)) = (id_key(&a), id_key(&near)) {
                    if ka[0] == kn[0] {
                        proptest::prop_assert_eq!(ka.cmp(&kn), a.cmp(&near), "{:?} {:?}", a, near);
                    }
                }
            }
            for id in [&a, &b] {
                // Which kind of key each id gets, and a UUID's bytes, as the `uuid` crate reads
                // them.
                let short = id.len() <= 16 && !id.contains('\0');
                let canonical = uuid::Uuid::try_parse(id)
                    .ok()
                    .filter(|u| u.hyphenated().to_string() == **id);
                let key = id_key(id);
                let expected = match key.map(|k| k[0]) {
                    Some(SHORT_ID) => short,
                    Some(UUID_ID) => canonical.is_some_and(|u| key.and_then(|k| k.get(1..).map(|b| b == u.as_bytes())) == Some(true)),
                    _ => !short && canonical.is_none(),
                };
                proptest::prop_assert!(expected, "{:?} has key {:?}", id, id_key(id));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Ids in any order, applied in batches of any size, are each found where their event
        /// is, by a view and by a single lookup; ids never applied are not; the table holds
        /// each id once.
        #[test]
        fn every_id_is_found_whatever_its_order_and_the_batches(
            ids in proptest::collection::hash_set(ID_PATTERN, 1..400),
            cuts in proptest::collection::vec(1usize..150, 1..8),
        ) {
            let (_dir, index) = open();
            let ids: Vec<String> = ids.into_iter().collect(); // the hash set's order: random
            let mut all = entries(1, ids.len() as u64);
            for (e, id) in all.iter_mut().zip(&ids) {
                e.event_id = id.as_str().into();
            }
            let mut applied = 0;
            for cut in cuts.iter().cycle() {
                let end = (applied + cut).min(all.len());
                index.apply(&borrow(&all[applied..end]), ChainHash::GENESIS).expect("apply");
                applied = end;
                let view = index.reader().expect("reader");
                for (i, e) in all.iter().enumerate() {
                    let expected = (i < applied).then(|| at(e.position.0));
                    proptest::prop_assert_eq!(view.event(&e.event_id).expect("lookup"), expected);
                    proptest::prop_assert_eq!(index.event(&e.event_id).expect("lookup"), expected);
                }
                for absent in [
                    "g",
                    "evt-",
                    "evt-99999",
                    "zzzz",
                    "é0é0",
                    "",
                    "a\0d",
                    "dddddddddddddddddd",
                    "evt-x0000000000000",
                    "0192f1c4-0000-7000-8000-000000000000",
                    "0192F1C4-0000-7000-8000-000000000000",
                    "ffffffff-ffff-ffff-ffff-ffffffffffff",
                ] {
                    proptest::prop_assert_eq!(view.event(absent).expect("lookup"), None);
                }
                let counted = index.counts().expect("counts").event_ids;
                proptest::prop_assert_eq!(counted, applied as u64);
                if applied == all.len() {
                    break;
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Events spread over streams, tasks and runs in any mix (keys first seen out of their
        /// string order), applied in batches of any size: each key's events are all found, in
        /// position order.
        #[test]
        fn every_keys_events_are_found_in_order_whatever_the_mix_and_the_batches(
            picks in proptest::collection::vec(
                (0usize..6, proptest::option::of(0usize..5), proptest::option::of(0usize..3)),
                1..500,
            ),
            cuts in proptest::collection::vec(1usize..200, 1..6),
        ) {
            const NAMES: [&str; 6] = ["s-b", "s-a", "z", "s-ab", "a", "s-"];
            let (_dir, index) = open();
            let mut versions = std::collections::HashMap::new();
            let mut all = Vec::new();
            for (p, &(stream, task, run)) in (1u64..).zip(&picks) {
                let stream_key = format!("session:{}", NAMES[stream]);
                let version = versions.entry(stream_key.clone()).or_insert(0u64);
                *version += 1;
                all.push(Owned {
                    position: Position(p),
                    event_id: format!("evt-{p:06}"),
                    stream_key,
                    stream_version: *version,
                    task: task.map(|t| format!("task-{t}")),
                    run: run.map(|r| format!("run-{r}")),
                    location: Location::new(SegmentId(p / 100), p * 10),
                    end_offset: p * 10 + 9,
                });
            }
            let mut applied = 0;
            for cut in cuts.iter().cycle() {
                let end = (applied + cut).min(all.len());
                index.apply(&borrow(&all[applied..end]), ChainHash::GENESIS).expect("apply");
                applied = end;
                if applied == all.len() {
                    break;
                }
            }
            let of = |pick: &dyn Fn(&Owned) -> bool| -> Vec<_> {
                all.iter().filter(|e| pick(e)).map(|e| at(e.position.0)).collect()
            };
            for name in NAMES {
                let key = format!("session:{name}");
                let expected = of(&|e| e.stream_key == key);
                let head = index.stream_head(&key).expect("head");
                proptest::prop_assert_eq!(head, expected.len() as u64);
                proptest::prop_assert_eq!(
                    index.stream_positions(&key, 1, usize::MAX).expect("stream"),
                    expected
                );
            }
            for (by, prefix, n) in [(By::Task, "task-", 5), (By::Run, "run-", 3)] {
                for i in 0..n {
                    let id = format!("{prefix}{i}");
                    let expected = of(&|e| {
                        let key = if by == By::Task { &e.task } else { &e.run };
                        key.as_deref() == Some(id.as_str())
                    });
                    proptest::prop_assert_eq!(
                        index.positions_by(by, &id, Position::FIRST, usize::MAX).expect("by"),
                        expected
                    );
                }
            }
        }
    }

    #[test]
    fn a_keys_entries_out_of_position_order_are_an_error_not_skipped() {
        let (_dir, index) = open();
        let txn = index.db.begin_write().expect("begin");
        {
            let mut tasks = txn.open_table(BY_TASK).expect("table");
            let items = [
                ("task-a", 5, (5, 0, 50)),
                ("task-b", 6, (6, 0, 60)),
                ("task-a", 4, (4, 0, 40)),
            ];
            let err = append_blocks(&mut tasks, items.into_iter(), Numbered::Position)
                .expect_err("task-a's 4 after its 5");
            assert!(
                err.to_string()
                    .contains("the entries of task-a are not in position order: [5, 4]"),
                "{err}"
            );
        }
        txn.abort().expect("abort");
    }

    /// Every stream's and task's events of `all` are found, in order, and `checker` finds
    /// nothing of any event missing (its id, stream version, task and run).
    fn assert_all_found(index: &Index, all: &[Owned]) {
        let mut streams: std::collections::BTreeMap<&str, Vec<_>> = Default::default();
        let mut tasks: std::collections::BTreeMap<&str, Vec<_>> = Default::default();
        for e in all {
            streams
                .entry(&e.stream_key)
                .or_default()
                .push(at(e.position.0));
            if let Some(task) = &e.task {
                tasks.entry(task).or_default().push(at(e.position.0));
            }
        }
        for (key, expected) in streams {
            let found = index.stream_positions(key, 1, usize::MAX).expect("stream");
            assert_eq!(found, expected, "{key}");
        }
        for (task, expected) in tasks {
            let found = index
                .positions_by(By::Task, task, Position::FIRST, usize::MAX)
                .expect("task");
            assert_eq!(found, expected, "{task}");
        }
        let checker = index.checker().expect("checker");
        for e in all {
            assert!(
                checker.missing(&e.entry()).expect("check").is_empty(),
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_failed_apply_leaves_nothing_behind_for_the_next_one() {
        let (_dir, index) = open();
        let all = entries(1, 400);
        index
            .apply(&borrow(&all[..150]), ChainHash::GENESIS)
            .expect("apply");
        // Streams are written in key order, before tasks and runs: this apply fills s0's first
        // block (50 → 64 events) and starts its second, does as much for s1, then fails at
        // s2, and its transaction is aborted.
        let mut broken = all[150..250].to_vec();
        assert_eq!(broken[97].stream_key, "session:s2");
        broken[97].stream_version += 1; // a gap in s2
        index
            .apply(&borrow(&broken), ChainHash::GENESIS)
            .expect_err("a gap");
        index
            .apply(&borrow(&all[150..]), ChainHash::GENESIS)
            .expect("apply");
        assert_all_found(&index, &all);
    }

    #[test]
    fn a_cleared_index_is_filled_again_from_nothing() {
        let (_dir, index) = open();
        let all = entries(1, 200);
        index
            .apply(&borrow(&all), ChainHash::GENESIS)
            .expect("apply");
        index.clear().expect("clear");
        index
            .apply(&borrow(&all[..120]), ChainHash::GENESIS)
            .expect("again");
        assert_all_found(&index, &all[..120]);
        assert_eq!(index.counts().expect("counts").streams, 120);
    }

    #[test]
    fn a_batch_gives_back_the_entries_pushed_and_truncates_with_their_ids() {
        let mut all = entries(1, 9);
        all[4].event_id = "é-évènement".into(); // ids need not be ASCII
        all[5].task = Some(String::new()); // nor long
        let mut batch = IndexBatch::default();
        assert_eq!(batch.len(), 0);
        batch.reserve(all.len(), 16);
        for e in &all {
            batch.push(&e.entry());
        }
        assert_eq!(batch.len(), 9);
        assert_eq!(batch.iter().collect::<Vec<_>>(), borrow(&all));
        assert_eq!(batch.get(4), Some(all[4].entry()));
        assert_eq!(batch.get(9), None);
        // What `unstage` does: the entries after a mark go, with their ids; later pushes
        // start where they started.
        batch.truncate(3);
        assert_eq!(batch.iter().collect::<Vec<_>>(), borrow(&all[..3]));
        let ids_at_mark = batch.id_bytes();
        batch.push(&all[8].entry());
        assert_eq!(batch.get(3), Some(all[8].entry()));
        batch.truncate(3);
        assert_eq!(batch.id_bytes(), ids_at_mark);
        batch.truncate(7); // longer than it is: nothing changes
        assert_eq!(batch.len(), 3);
        batch.clear();
        assert_eq!((batch.len(), batch.id_bytes()), (0, 0));
    }

    #[test]
    fn a_repeated_id_is_found_at_its_last_event() {
        // The writer never appends an id twice; a log that holds one twice (written by other
        // means) is indexed the same way every time: at the id's last event.
        let (_dir, index) = open();
        let mut batch = entries(1, 400);
        for e in &mut batch {
            e.event_id = format!("evt-{:03}", e.position.0 % 40);
        }
        index
            .apply(&borrow(&batch), ChainHash::GENESIS)
            .expect("apply");
        for id in 0..40u64 {
            let last = 360 + if id == 0 { 40 } else { id };
            assert_eq!(
                index.event(&format!("evt-{id:03}")).expect("lookup"),
                Some(at(last)),
                "evt-{id:03}"
            );
        }
        assert_eq!(index.counts().expect("counts").event_ids, 40);
    }

    #[test]
    fn growing_ids_fill_id_blocks_across_applies_and_a_repeat_is_found_at_its_last_event() {
        let (_dir, index) = open();
        let mut all = entries(1, 300);
        for e in &mut all {
            e.event_id = format!("evt-{:06}", e.position.0 * 2);
        }
        // Cuts that end inside blocks and across them.
        for range in [0..7, 7..45, 45..46, 46..200, 200..300] {
            index
                .apply(&borrow(&all[range]), ChainHash::GENESIS)
                .expect("apply");
        }
        assert_eq!(id_tables_len(&index), (8, 0), "300 ids in blocks of 40");
        let view = index.reader().expect("reader");
        for e in &all {
            assert_eq!(
                view.event(&e.event_id).expect("lookup"),
                Some(at(e.position.0))
            );
        }
        let absent: Vec<String> = [0, 1, 81, 599, 601]
            .iter()
            .map(|p| format!("evt-{p:06}"))
            .collect();
        assert_absent(
            &index,
            &view,
            &absent.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        // A damaged log that holds ids again: they precede the blocks' greatest, go to the
        // per-id table, and are found at their later events.
        let mut again = entries(301, 310);
        for (e, id) in again.iter_mut().zip([2, 80, 82, 598, 400, 4, 6, 8, 10, 12]) {
            e.event_id = format!("evt-{id:06}");
        }
        index
            .apply(&borrow(&again), ChainHash::GENESIS)
            .expect("apply");
        let view = index.reader().expect("reader");
        for e in &again {
            assert_eq!(
                view.event(&e.event_id).expect("lookup"),
                Some(at(e.position.0))
            );
            assert_eq!(
                index.event(&e.event_id).expect("lookup"),
                Some(at(e.position.0))
            );
        }
        assert_eq!(
            view.event("evt-000014").expect("lookup"),
            Some(at(7)),
            "the others stay where they were"
        );
    }

    /// Neither `view` nor a single lookup in `index` finds any of `ids`.
    fn assert_absent(index: &Index, view: &IndexReader, ids: &[&str]) {
        for id in ids {
            assert_eq!(view.event(id).expect("lookup"), None, "{id}");
            assert_eq!(index.event(id).expect("lookup"), None, "{id}");
        }
    }

    /// (id blocks, per-id entries) held.
    fn id_tables_len(index: &Index) -> (u64, u64) {
        let txn = index.db.begin_read().expect("read");
        let blocks = txn.open_table(EVENT_ID_BLOCKS).expect("blocks").len();
        let keyed = txn.open_table(EVENT_ID_KEYS).expect("keyed").len();
        (blocks.expect("blocks"), keyed.expect("keyed"))
    }

    /// Event `n` of `producer`, as a producer's counter names it.
    fn producer_id(producer: u64, n: u64) -> String {
        format!("evt-{producer}-{n:06}")
    }

    /// `count` ids of `producers` producers, interleaved in the log: the `p`th (from 1) is
    /// producer `p % producers`'s event `p / producers`.
    fn interleaved_ids(producers: u64, count: u64) -> Vec<String> {
        (1..=count)
            .map(|p| producer_id(p % producers, p / producers))
            .collect()
    }

    /// Applies `ids` as the events at positions `from..`, and records where each id is now.
    fn apply_ids(
        index: &Index,
        from: u64,
        ids: &[String],
        expected: &mut std::collections::HashMap<String, u64>,
    ) {
        let mut batch = entries(from, from + ids.len() as u64 - 1);
        for (e, id) in batch.iter_mut().zip(ids) {
            e.event_id.clone_from(id);
            expected.insert(id.clone(), e.position.0);
        }
        index
            .apply(&borrow(&batch), ChainHash::GENESIS)
            .expect("apply");
    }

    /// Both a view and single lookups find each id of `expected` at its position.
    fn assert_found(index: &Index, expected: &std::collections::HashMap<String, u64>) {
        let view = index.reader().expect("reader");
        for (id, &position) in expected {
            assert_eq!(view.event(id).expect("lookup"), Some(at(position)), "{id}");
            assert_eq!(index.event(id).expect("lookup"), Some(at(position)), "{id}");
        }
    }

    #[test]
    fn interleaved_producers_ids_fill_blocks_a_run_each() {
        // Two producers' counters interleaved: each grows, the log's order does not.
        let (_dir, index) = open();
        let id = producer_id;
        let mut expected = std::collections::HashMap::new();
        let interleaved = interleaved_ids(2, 100);
        apply_ids(&index, 1, &interleaved, &mut expected);
        assert_eq!(
            id_tables_len(&index),
            (4, 0),
            "50 ids a producer: a block of 40 and one of 10 each"
        );
        // Runs too short for a block of their own continue each producer's last block.
        let short: Vec<String> = (101..=106).map(|p| id(p % 2, p / 2)).collect();
        apply_ids(&index, 101, &short, &mut expected);
        assert_eq!(id_tables_len(&index), (4, 0), "13 ids in each last block");
        // A run stops where the next block starts, though the positions go on growing past
        // it: producer 0's five, then producer 1's three, each after its own block.
        let mut crossing: Vec<String> = (54..=58).map(|n| id(0, n)).collect();
        crossing.extend((53..=55).map(|n| id(1, n)));
        apply_ids(&index, 107, &crossing, &mut expected);
        assert_eq!(id_tables_len(&index), (4, 0));
        assert_found(&index, &expected);
        // Producer 0's last block filled; then a short run after a full block keeps an entry
        // each, and so does a long run that holds an id the per-id table has (a damaged log's
        // repeat): it is found at its later event.
        let fill: Vec<String> = (59..=80).map(|n| id(0, n)).collect();
        apply_ids(&index, 115, &fill, &mut expected);
        assert_eq!(id_tables_len(&index), (4, 0));
        let after_full: Vec<String> = (81..=83).map(|n| id(0, n)).collect();
        apply_ids(&index, 137, &after_full, &mut expected);
        assert_eq!(id_tables_len(&index), (4, 3));
        let with_repeat: Vec<String> = std::iter::once(81)
            .chain(84..=102)
            .map(|n| id(0, n))
            .collect();
        apply_ids(&index, 140, &with_repeat, &mut expected);
        assert_eq!(id_tables_len(&index), (4, 22));
        assert_eq!(expected.get(&id(0, 81)), Some(&140));
        // A long run after a full block starts a block of its own; ids inside a block's span
        // (a repeat, and one between two of its ids) keep an entry each.
        let long: Vec<String> = (103..=118).map(|n| id(0, n)).collect();
        apply_ids(&index, 160, &long, &mut expected);
        assert_eq!(id_tables_len(&index), (5, 22));
        let inside = vec![id(0, 110), format!("{}5", id(0, 111)), id(1, 20)];
        apply_ids(&index, 176, &inside, &mut expected);
        assert_eq!(id_tables_len(&index), (5, 25));
        assert_found(&index, &expected);
        let view = index.reader().expect("reader");
        assert_absent(
            &index,
            &view,
            &[
                "evt-0-000000",
                "evt-0-000119",
                "evt-0-0000415",
                "evt-1-000056",
                "evt-2-000000",
            ],
        );
    }

    #[test]
    fn a_view_answers_producers_next_ids_from_the_gaps_its_misses_found() {
        // Three producers, 80 ids each: two full blocks each.
        let (_dir, index) = open();
        let id = producer_id;
        let mut expected = std::collections::HashMap::new();
        let interleaved = interleaved_ids(3, 240);
        apply_ids(&index, 1, &interleaved, &mut expected);
        assert_eq!(id_tables_len(&index), (6, 0));
        // A per-id entry after producer 0's blocks, before producer 1's: that gap is not clean.
        let stray = format!("{}5", id(0, 80));
        apply_ids(&index, 241, std::slice::from_ref(&stray), &mut expected);
        assert_eq!(id_tables_len(&index), (6, 1));
        let view = index.reader().expect("reader");
        for n in 81..90 {
            for producer in 0..3 {
                assert_eq!(view.event(&id(producer, n)).expect("lookup"), None);
            }
        }
        assert_eq!(view.event(&stray).expect("lookup"), Some(at(241)));
        // Producer 2's ids come after every id: answered without a lookup, no gap.
        let gaps = view.gaps();
        assert_eq!(
            gaps,
            vec![(false, id_key(&id(1, 0))), (true, id_key(&id(2, 0)))],
            "one gap a producer, found once"
        );
        assert_found(&index, &expected);
    }

    #[test]
    fn a_repeat_inside_one_apply_keeps_an_entry_of_its_own() {
        // A damaged log's apply: twenty ids, the last again, twenty more. The first run
        // starts the blocks; the repeat lies inside their span and takes an entry of its own;
        // the rest continue the block.
        let (_dir, index) = open();
        let mut expected = std::collections::HashMap::new();
        let mut ids: Vec<String> = (1..=20).map(|n| format!("evt-{n:06}")).collect();
        ids.push(format!("evt-{:06}", 20));
        ids.extend((21..=40).map(|n| format!("evt-{n:06}")));
        let mut batch = entries(1, ids.len() as u64);
        for (e, id) in batch.iter_mut().zip(&ids) {
            e.event_id.clone_from(id);
            expected.insert(id.clone(), e.position.0);
        }
        index
            .apply(&borrow(&batch), ChainHash::GENESIS)
            .expect("apply");
        assert_eq!(id_tables_len(&index), (1, 1));
        assert_eq!(expected.get("evt-000020"), Some(&21));
        assert_found(&index, &expected);
    }

    #[test]
    fn ids_in_no_order_keep_an_entry_each_until_an_apply_grows() {
        // Ids whose sorted order is no order of the log (as random ids are): no run is long
        // enough for a block.
        let (_dir, index) = open();
        let mut expected = std::collections::HashMap::new();
        let shuffled: Vec<String> = (0..200)
            .map(|p: u64| format!("evt-{:06}", (p * 73) % 200))
            .collect();
        apply_ids(&index, 1, &shuffled, &mut expected);
        assert_eq!(
            id_tables_len(&index),
            (0, 200),
            "no blocks for ids in no order"
        );
        // An apply that grows from after every id: blocks, and both tables answer.
        let growing: Vec<String> = (1000..1120).map(|n| format!("evt-{n:06}")).collect();
        apply_ids(&index, 201, &growing, &mut expected);
        assert_eq!(id_tables_len(&index), (3, 200), "three full blocks");
        // Ids after every id, but out of log order, after a full block: runs too short for a
        // block of their own, and a repeat, keep an entry each.
        let next: Vec<String> = [1122, 1120, 1121, 1123, 1090]
            .iter()
            .map(|n| format!("evt-{n:06}"))
            .collect();
        apply_ids(&index, 321, &next, &mut expected);
        assert_eq!(id_tables_len(&index), (3, 205));
        assert_found(&index, &expected);
        let view = index.reader().expect("reader");
        assert_absent(&index, &view, &["evt-000200", "evt-001124", "evt-0010995"]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Applies of ids from several producers whose counters each grow, interleaved in
        /// stretches of one to twenty, with repeats of earlier ids (as a damaged log holds
        /// them) and ids in no order among them: wherever each goes (blocks or per-id table),
        /// every id is found at its last event, and the counters' skipped values are not found.
        #[test]
        fn every_id_is_found_at_its_last_event_however_producers_interleave(
            applies in proptest::collection::vec(
                proptest::collection::vec((0u8..7, 1u64..4, 1usize..20), 1..12),
                1..8,
            )
        ) {
            let (_dir, index) = open();
            let mut expected = std::collections::HashMap::new();
            let mut drawn: Vec<String> = Vec::new();
            let mut counters = [0u64; 4];
            let mut skipped = Vec::new();
            let mut next_position = 1;
            for apply in &applies {
                let mut ids = Vec::new();
                let stretches = apply.iter().flat_map(|&(kind, step, n)| {
                    (0..n as u64).map(move |i| (kind, 1 + (step + i) % 3))
                });
                for (kind, step) in stretches {
                    let id = match kind {
                        0..=3 => {
                            let counter = &mut counters[usize::from(kind)];
                            if step > 1 {
                                skipped.push(format!("p{kind}-{:06}", *counter + 1));
                            }
                            *counter += step;
                            format!("p{kind}-{:06}", *counter)
                        }
                        4 | 5 if !drawn.is_empty() => {
                            let at = (step as usize * 7919 + drawn.len()) % drawn.len();
                            drawn[at].clone()
                        }
                        _ => format!("r{:05}", (next_position * 7919 + step) % 100_000),
                    };
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                apply_ids(&index, next_position, &ids, &mut expected);
                next_position += ids.len() as u64;
                drawn.extend(ids);
            }
            assert_found(&index, &expected);
            let view = index.reader().expect("reader");
            let absent: Vec<&str> = skipped
                .iter()
                .map(String::as_str)
                .filter(|id| !expected.contains_key(*id))
                .collect();
            assert_absent(&index, &view, &absent);
            // One view answers as single lookups do, whatever gaps its misses taught it: each
            // producer's next ids, ids held and ids skipped, twice over in two orders.
            let view = index.reader().expect("reader");
            let mut probes: Vec<String> = Vec::new();
            for (producer, counter) in counters.iter().enumerate() {
                probes.extend((1..4).map(|n| format!("p{producer}-{:06}", counter + n)));
            }
            probes.extend(drawn.iter().step_by(3).cloned());
            probes.extend(skipped.iter().cloned());
            for pass in 0..2 {
                for i in 0..probes.len() {
                    let id = if pass == 0 { &probes[i] } else { &probes[probes.len() - 1 - i] };
                    proptest::prop_assert_eq!(
                        view.event(id).expect("lookup"),
                        index.event(id).expect("lookup"),
                        "{}", id
                    );
                }
            }
        }
    }

    #[test]
    fn a_malformed_block_is_an_error_not_a_panic() {
        assert!(block_entries(&[0u8; 25]).is_err());
        assert!(block_entries(&[]).is_err());
        assert!(block_entries(&vec![0u8; (BLOCK_EVENTS + 1) * BLOCK_ENTRY_LEN]).is_err());
        assert_eq!(block_entries(&[0u8; 48]).map(Iterator::count).ok(), Some(2));
    }
}
