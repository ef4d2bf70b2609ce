//! The derived index in redb: event id → (position, location), the ids that grow in id blocks
//! ([`crate::index::id_blocks`]); stream, task and run → the locations of their events, in blocks; and
//! a sparse position → location map.
//!
//! The log is the truth. The index follows it: the writer acknowledges an append once the log
//! is durable and hands the new entries to the indexer thread afterwards, so the index is never
//! on the durable commit path. It may lag after a crash; on open it is checked against the log
//! (its recorded head must be a position the log has, with the same chain link) and caught up,
//! or rebuilt from the log when missing, damaged or ahead of the log. Its recorded head doubles
//! as a recovery checkpoint: recovery scans the tail segment only after it.
//!
//! A stream's, task's or run's events are kept in **blocks**: one redb value holds the locations
//! of up to [`BLOCK_EVENTS`] of its events in position order, keyed by the key and the first
//! event's number (its stream version for a stream, its position for a task or run). An apply
//! fills the key's last block before it starts another, so a transaction writes one value per
//! key and block instead of one per event: the indexer's cost per event no longer grows with
//! the number of secondary tables. Events of a session are found through their stream (an
//! event with a `sessionId` always belongs to the stream `session:<id>`), so there is no
//! separate session table.
//!
//! Invariants (checked on every apply, an [`Error::Index`] otherwise): a block holds 1 to
//! [`BLOCK_EVENTS`] entries in strictly increasing position order; a stream's blocks hold its
//! versions from 1 on without a gap, each block's first version its key's number. Entries at or
//! before the index's head, or a key's last indexed position, are already there and are
//! skipped, so applying entries twice changes nothing, the head included.

pub(crate) mod id_blocks;
pub(crate) mod indexer;
mod lookup;

use std::cell::{OnceCell, RefCell};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use journal_format::{ChainHash, Located, Position, SegmentId};
use redb::{
    Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable,
    ReadableTableMetadata, Table, TableDefinition,
};

use crate::error::{Error, Result};
use crate::log::entries::IndexEntry;
use crate::log::SPARSE_INTERVAL_BYTES;

/// A [`Located`] as the index's tables store it: (position, segment, offset).
pub(crate) type Row = (u64, u64, u64);

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Event ids with a fixed-width key (see [`id_key`]) of applies whose ids did not grow →
/// location.
const EVENT_ID_KEYS: TableDefinition<&IdKey, Row> = TableDefinition::new("event_id_keys");
/// Event ids with a fixed-width key of applies whose ids grew from after every id indexed, in
/// blocks ([`crate::index::id_blocks`]): first key → block.
const EVENT_ID_BLOCKS: TableDefinition<&IdKey, &[u8]> = TableDefinition::new("event_id_blocks");
/// Every other event id → location.
const OTHER_EVENT_IDS: TableDefinition<&str, Row> = TableDefinition::new("other_event_ids");
/// (stream key, first stream version) → block.
const STREAMS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("streams");
/// (task id, first position) → block.
const BY_TASK: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("by_task");
/// (run id, first position) → block.
const BY_RUN: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("by_run");
const SPARSE: TableDefinition<u64, (u64, u64)> = TableDefinition::new("sparse");

/// The key of the index's head in `META` (see [`Checkpoint`]).
const INDEXED_KEY: &str = "indexed";
/// The version of the index layout; a different stored version means rebuild.
const LAYOUT_KEY: &str = "layout";
const LAYOUT_VERSION: u64 = 5;

/// The most events one block holds.
pub(crate) const BLOCK_EVENTS: usize = 64;
/// Bytes per block entry: position, segment and offset, each a little-endian `u64`.
const BLOCK_ENTRY_LEN: usize = 24;

/// The number of entries of a block of 1 to `max` entries of `entry_len` bytes, checked for
/// length; `what` names the kind of block in the error.
pub(crate) fn entry_count(bytes: &[u8], entry_len: usize, max: usize, what: &str) -> Result<usize> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(entry_len) || bytes.len() > max * entry_len {
        return Err(Error::Index(format!(
            "an {what} of {} bytes is malformed",
            bytes.len()
        )));
    }
    Ok(bytes.len() / entry_len)
}

/// The entries of a block, checked for length.
fn block_entries(bytes: &[u8]) -> Result<impl Iterator<Item = Row> + '_> {
    entry_count(bytes, BLOCK_ENTRY_LEN, BLOCK_EVENTS, "index block")?;
    Ok(bytes.chunks_exact(BLOCK_ENTRY_LEN).map(|e| {
        let word = |at: usize| {
            e.get(at..at + 8)
                .and_then(|w| <[u8; 8]>::try_from(w).ok())
                .map_or(0, u64::from_le_bytes)
        };
        (word(0), word(8), word(16))
    }))
}

fn push_entry(block: &mut Vec<u8>, (position, segment, offset): Row) {
    block.extend_from_slice(&position.to_le_bytes());
    block.extend_from_slice(&segment.to_le_bytes());
    block.extend_from_slice(&offset.to_le_bytes());
}

/// What a block's key number is: a stream's version, or a task's or run's position.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Numbered {
    Version,
    Position,
}

/// One entry for a blocked table: key, number (see [`Numbered`]), location.
type Keyed<'a> = (&'a str, u64, Row);

/// Adds `items` to the blocks of `table`, filling each key's last block first.
fn append_blocks<'a>(
    table: &mut Table<(&str, u64), &[u8]>,
    items: impl Iterator<Item = Keyed<'a>>,
    numbered: Numbered,
) -> Result<()> {
    // Each item tagged with its key's slot (keys numbered as they first appear), then the
    // items put in slot order by a counting sort: keys are grouped without comparing their
    // strings item by item, in two passes over the items (a stable sort by slot cost about 700
    // instructions per event, an unstable sort by slot and position 20 times that). The sort is
    // stable and the items come in position order (`Index::apply` asserts it in debug builds),
    // so each key's items do too, which is their number order as well (a stream's versions
    // grow with position); each group is checked for it below. Buffers sized up front: each
    // doubling of one made glibc consolidate the fast bins redb's small allocations fill.
    let most = items.size_hint().1.unwrap_or(0);
    let mut slot_of: HashMap<&'a str, usize> = HashMap::with_capacity(most);
    let mut keys: Vec<&'a str> = Vec::with_capacity(most);
    // Each slot's count of items, then where its group ends.
    let mut ends: Vec<usize> = Vec::with_capacity(most);
    let mut tagged: Vec<(usize, u64, Row)> = Vec::with_capacity(most);
    for (key, number, located) in items {
        let slot = *slot_of.entry(key).or_insert_with(|| {
            keys.push(key);
            ends.push(0);
            keys.len() - 1
        });
        if let Some(count) = ends.get_mut(slot) {
            *count += 1;
        }
        tagged.push((slot, number, located));
    }
    let mut end = 0;
    for count_then_end in &mut ends {
        end += *count_then_end;
        *count_then_end = end;
    }
    // Filled from each group's end backwards, the items taken last first: each group keeps
    // its items' order.
    let mut sorted: Vec<(u64, Row)> = vec![(0, (0, 0, 0)); tagged.len()];
    let mut next = ends.clone();
    for &(slot, number, located) in tagged.iter().rev() {
        let place = next.get_mut(slot).and_then(|end| {
            *end = end.checked_sub(1)?;
            sorted.get_mut(*end)
        });
        let Some(place) = place else {
            return Err(Error::Index(format!(
                "the entries of {} overflow their group",
                keys.get(slot).copied().unwrap_or_default()
            )));
        };
        *place = (number, located);
    }
    let mut groups = Vec::with_capacity(keys.len());
    let mut start = 0;
    for (key, &end) in keys.iter().zip(&ends) {
        let group = sorted.get(start..end).ok_or_else(|| {
            Error::Index(format!(
                "the entries of {key} fall outside the grouped items"
            ))
        })?;
        start = end;
        if let Some(w) = group
            .windows(2)
            .find(|w| !matches!(w, [a, b] if a.1 .0 < b.1 .0))
        {
            return Err(Error::Index(format!(
                "the entries of {key} are not in position order: {:?}",
                w.iter().map(|t| t.1 .0).collect::<Vec<_>>()
            )));
        }
        groups.push((*key, group));
    }
    // Key order: neighbouring keys' blocks sit on the same B-tree pages.
    groups.sort_unstable_by_key(|g| g.0);
    let mut scratch = Vec::with_capacity(BLOCK_EVENTS * BLOCK_ENTRY_LEN);
    for (key, group) in groups {
        append_key(table, key, group.iter().copied(), numbered, &mut scratch)?;
    }
    Ok(())
}

/// Adds one key's entries (in number order) after its last block's.
fn append_key(
    table: &mut Table<(&str, u64), &[u8]>,
    key: &str,
    group: impl Iterator<Item = (u64, Row)>,
    numbered: Numbered,
    block: &mut Vec<u8>,
) -> Result<()> {
    // The block being filled is built in `block`, one buffer for every block of an apply
    // instead of one allocated and freed per block: the indexer's allocations sit between
    // redb's own, whose growth makes glibc consolidate what was freed (`docs/PERFORMANCE.md`).
    // `open`: the block's first number and whether it changed.
    block.clear();
    let mut open: Option<(u64, bool)> = None;
    let mut last: Option<(u64, u64)> = None; // (position, number) of the key's last entry
    if let Some(item) = table.range((key, 0)..=(key, u64::MAX))?.next_back() {
        let (k, v) = item?;
        let first = k.value().1;
        let bytes = v.value();
        let (count, last_position) =
            block_entries(bytes)?.fold((0u64, 0), |(n, _), e| (n + 1, e.0));
        let last_number = match numbered {
            Numbered::Version => first + count - 1,
            Numbered::Position => last_position,
        };
        last = Some((last_position, last_number));
        if count < BLOCK_EVENTS as u64 {
            block.extend_from_slice(bytes);
            open = Some((first, false));
        }
    }
    for (number, located) in group {
        if let Some((last_position, _)) = last {
            if located.0 <= last_position {
                continue; // Applied before.
            }
        }
        if numbered == Numbered::Version {
            let expected = last.map_or(1, |(_, last_number)| last_number + 1);
            if number != expected {
                // The writer gives each event its stream's next version: a frame that says
                // otherwise is damage in the log (history rewritten with a consistent chain).
                return Err(Error::Corruption {
                    segment: SegmentId(located.1),
                    offset: located.2,
                    position: Some(Position(located.0)),
                    detail: format!(
                        "stream {key}: the frame records version {number} where version {expected} comes next"
                    ),
                });
            }
        }
        last = Some((located.0, number));
        match &mut open {
            Some((_, changed)) if block.len() < BLOCK_EVENTS * BLOCK_ENTRY_LEN => {
                push_entry(block, located);
                *changed = true;
            }
            _ => {
                if let Some((first, true)) = open.take() {
                    table.insert((key, first), block.as_slice())?;
                }
                block.clear();
                push_entry(block, located);
                open = Some((number, true));
            }
        }
    }
    if let Some((first, true)) = open {
        table.insert((key, first), block.as_slice())?;
    }
    Ok(())
}

/// The block of `key` that holds `number` (or would: the last one starting at or before it).
fn block_at<T: ReadableTable<(&'static str, u64), &'static [u8]>>(
    table: &T,
    key: &str,
    number: u64,
) -> Result<Option<(u64, Vec<u8>)>> {
    match table.range((key, 0)..=(key, number))?.next_back() {
        Some(item) => {
            let (k, v) = item?;
            Ok(Some((k.value().1, v.value().to_vec())))
        }
        None => Ok(None),
    }
}

/// Every entry of a blocked table, counted.
fn count_entries<T: ReadableTable<(&'static str, u64), &'static [u8]>>(table: &T) -> Result<u64> {
    let mut n = 0;
    for item in table.iter()? {
        let (_, v) = item?;
        n += block_entries(v.value())?.count() as u64;
    }
    Ok(n)
}

/// The greatest fixed-width key indexed: the per-id table's or the last id block's
/// (`last_block`), whichever is greater.
fn greatest_keyed<T: ReadableTable<&'static IdKey, Row>>(
    per_id: &T,
    last_block: Option<&[u8]>,
) -> Result<Option<IdKey>> {
    let per_id = per_id.last()?.map(|(k, _)| *k.value());
    let blocks = last_block.map(id_blocks::last_key).transpose()?;
    Ok(per_id.max(blocks))
}

/// Appends `run` (keys strictly increasing, all between the blocks `before` and the next one)
/// to the id blocks: `before` (its key and bytes) filled first when it is not full, then new
/// blocks keyed by their first key.
fn append_id_blocks(
    table: &mut Table<&IdKey, &[u8]>,
    before: Option<(IdKey, Vec<u8>)>,
    run: &[(IdKey, Row)],
) -> Result<()> {
    // The block being filled: its first key and whether it changed, its bytes in `block` (one
    // buffer for all: see `append_key`).
    let (mut open, mut block) = match before {
        Some((first, block)) if !id_blocks::is_full(&block) => (Some((first, false)), block),
        _ => (None, Vec::new()),
    };
    for (key, located) in run {
        match &mut open {
            Some((_, changed)) if !id_blocks::is_full(&block) => {
                id_blocks::push(&mut block, key, *located);
                *changed = true;
            }
            _ => {
                if let Some((first, true)) = open.take() {
                    table.insert(&first, block.as_slice())?;
                }
                block.clear();
                id_blocks::push(&mut block, key, *located);
                open = Some((*key, true));
            }
        }
    }
    if let Some((first, true)) = open {
        table.insert(&first, block.as_slice())?;
    }
    Ok(())
}

/// Places the ids of an apply that do not all grow from after every id indexed, `sorted` by
/// key (stably: a repeated id's later event last). Each **run** of them, keys that fall between
/// the same two neighbouring blocks and whose positions increase with their keys (one
/// producer's ids among several producers' whose ids each grow), goes to the blocks when it is
/// [`id_blocks::RUN_MIN`] long (in blocks of its own, unless it continues the block before it)
/// or continues the block before it (which has room, and whose last id comes before the run
/// in the log), and the per-id table holds none of its keys; every other id goes to the per-id table. `blocks_empty`: the block table
/// holds nothing (then, until a run goes there, only long runs can, found without a lookup).
fn place_ids(
    blocks: &mut Table<&IdKey, &[u8]>,
    per_id: &mut Table<&IdKey, Row>,
    sorted: &[(IdKey, Row)],
    mut blocks_empty: bool,
) -> Result<()> {
    let mut rest = sorted;
    while let Some(((first, _), _)) = rest.split_first() {
        // The block at or before the run's first key, and where the block after it starts.
        let (before, next) = if blocks_empty {
            (None, None)
        } else {
            let before = match blocks.range::<&IdKey>(..=first)?.next_back() {
                Some(item) => {
                    let (k, v) = item?;
                    Some((*k.value(), v.value().to_vec()))
                }
                None => None,
            };
            let next = match blocks
                .range::<&IdKey>((Bound::Excluded(first), Bound::Unbounded))?
                .next()
            {
                Some(item) => Some(*item?.0.value()),
                None => None,
            };
            (before, next)
        };
        let before_last = match &before {
            Some((_, block)) => Some(id_blocks::last(block)?),
            None => None,
        };
        if let Some((last, _)) = before_last.filter(|(last, _)| first <= last) {
            // Inside a block's keys: these ids (a repeat, or ids of no run) keep an entry each.
            let inside = rest.partition_point(|(key, _)| *key <= last);
            let (ids, after) = rest.split_at(inside.max(1));
            for (key, located) in ids {
                per_id.insert(key, located)?;
            }
            rest = after;
            continue;
        }
        let len = 1 + rest
            .windows(2)
            .take_while(|w| {
                matches!(w, [a, b] if a.0 < b.0 && a.1 .0 < b.1 .0
                    && next.is_none_or(|next| b.0 < next))
            })
            .count();
        let (run, after) = rest.split_at(len);
        // A run continues the block before it when that block has room and the run comes
        // after its last id in the log too (the same producer's next ids, most likely);
        // otherwise it starts blocks of its own.
        let continues = match (&before, before_last, run.first()) {
            (Some((_, block)), Some((_, (last_position, _, _))), Some((_, (position, _, _)))) => {
                !id_blocks::is_full(block) && last_position < *position
            }
            _ => false,
        };
        let to_blocks = (len >= id_blocks::RUN_MIN || continues)
            && match (run.first(), run.last()) {
                (Some((low, _)), Some((high, _))) => {
                    per_id.range::<&IdKey>(low..=high)?.next().is_none()
                }
                _ => false,
            };
        if to_blocks {
            append_id_blocks(blocks, before.filter(|_| continues), run)?;
            blocks_empty = false;
        } else {
            for (key, located) in run {
                per_id.insert(key, located)?;
            }
        }
        rest = after;
    }
    Ok(())
}

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

/// An event id's fixed-width key: a tag byte, then 16 bytes.
pub(crate) type IdKey = [u8; ID_KEY_LEN];
pub(crate) const ID_KEY_LEN: usize = 17;
/// The tag of an id of at most 16 bytes, kept as it is, zero-padded.
const SHORT_ID: u8 = 0;
/// The tag of a canonical UUID, kept as its 16 bytes.
const UUID_ID: u8 = 1;

/// The fixed-width key of an event id, when it has one.
///
/// Two kinds of ids have one: an id of at most 16 bytes with no NUL byte (counters, short
/// prefixed ids), zero-padded after the tag [`SHORT_ID`]; and a canonical UUID (36 bytes,
/// lowercase and hyphenated: the journal's own ids, and most runtimes'), as its 16 bytes after
/// the tag [`UUID_ID`]. Every other id is kept by its string, in `OTHER_EVENT_IDS`.
///
/// A redb insert of a variable-width key rewrites the offsets of every entry of its leaf; a
/// fixed-width key has none. Within each kind, keys order as their ids do (zero padding sorts
/// a prefix first, which ids without NUL keep unambiguous; a UUID's hex digits and hyphens sit
/// at fixed places), so ids that grow with time get keys that grow, and distinct ids get
/// distinct keys.
fn id_key(id: &str) -> Option<IdKey> {
    let bytes = id.as_bytes();
    let mut key = [0u8; ID_KEY_LEN];
    if bytes.len() < ID_KEY_LEN && !bytes.contains(&0) {
        key[0] = SHORT_ID;
        key.get_mut(1..=bytes.len())?.copy_from_slice(bytes);
        return Some(key);
    }
    if bytes.len() != uuid::fmt::Hyphenated::LENGTH {
        return None;
    }
    // `try_parse` takes 36 bytes in the hyphenated form only, in either case; an id with upper
    // case is another string than the canonical one, and keeps its string.
    if bytes.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    let uuid = uuid::Uuid::try_parse(id).ok()?;
    key[0] = UUID_ID;
    key.get_mut(1..)?.copy_from_slice(uuid.as_bytes());
    Some(key)
}

/// The event id tables of one read transaction.
struct IdTables {
    keyed: ReadOnlyTable<&'static IdKey, Row>,
    blocks: ReadOnlyTable<&'static IdKey, &'static [u8]>,
    other: ReadOnlyTable<&'static str, Row>,
}

impl IdTables {
    fn open(txn: &ReadTransaction) -> Result<IdTables> {
        Ok(IdTables {
            keyed: txn.open_table(EVENT_ID_KEYS)?,
            blocks: txn.open_table(EVENT_ID_BLOCKS)?,
            other: txn.open_table(OTHER_EVENT_IDS)?,
        })
    }

    /// Where the event with `id` is, looked up in the tables its id belongs to.
    fn get(&self, id: &str) -> Result<Option<Row>> {
        match id_key(id) {
            Some(key) => self.get_keyed(&key, |_, _| Ok(())),
            None => Ok(self.other.get(id)?.map(|v| v.value())),
        }
    }

    /// Where the event with a fixed-width `key` is: in the per-id table (which has the later
    /// location, should a damaged log hold an id twice: a repeat never enters the blocks, see
    /// [`crate::index::id_blocks`]), else in the block whose first key is the greatest at or before
    /// it. When that block does not hold `key`, `missed` is given the block's key and bytes.
    fn get_keyed(
        &self,
        key: &IdKey,
        missed: impl FnOnce(&IdKey, &[u8]) -> Result<()>,
    ) -> Result<Option<Row>> {
        if let Some(v) = self.keyed.get(key)? {
            return Ok(Some(v.value()));
        }
        let Some(item) = self.blocks.range::<&IdKey>(..=key)?.next_back() else {
            return Ok(None);
        };
        let (first, block) = item?;
        let found = id_blocks::find(block.value(), key)?;
        if found.is_none() {
            missed(first.value(), block.value())?;
        }
        Ok(found)
    }

    /// The greatest fixed-width key held, in either table.
    fn greatest_keyed(&self) -> Result<Option<IdKey>> {
        let last = self.blocks.last()?;
        greatest_keyed(&self.keyed, last.as_ref().map(|(_, v)| v.value()))
    }

    /// The ids held.
    fn len(&self) -> Result<u64> {
        let mut n = self.keyed.len()? + self.other.len()?;
        for item in self.blocks.iter()? {
            n += id_blocks::count(item?.1.value())? as u64;
        }
        Ok(n)
    }
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

/// The index file inside the journal directory.
pub(crate) const INDEX_FILE: &str = "index.redb";

/// The redb database holding the index.
#[derive(Debug)]
pub(crate) struct Index {
    db: Database,
    /// `index.damaged`: left when a damaged page made redb panic, so that the next open that may
    /// write rebuilds the index from the log.
    marker: Arc<Path>,
}

/// Runs `f` on the index, turning a panic inside redb (what some damaged pages cause) into
/// [`Error::Index`] naming the damage. It leaves `marker` behind, so that the next open that may
/// write deletes the index and rebuilds it from the log. The index is derived: its damage never
/// stops the log being read.
fn guard<T>(marker: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| String::from("a panic inside redb"));
            if let Err(e) = std::fs::write(marker, why.as_bytes()) {
                tracing::warn!(error = %e, "cannot leave the index's damage marker");
            }
            tracing::error!(%why, "the index is damaged");
            Err(Error::Index(format!(
                "{INDEX_FILE} is damaged ({why}); it is rebuilt from the log at the next open that may write"
            )))
        }
    }
}

fn located((position, segment, offset): Row) -> Located {
    Located::new(Position(position), SegmentId(segment), offset)
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
    pub(crate) fn checkpoint(&self) -> Result<Option<Checkpoint>> {
        guard(&self.marker, || {
            let txn = self.db.begin_read()?;
            let meta = txn.open_table(META)?;
            let Some(value) = meta.get(INDEXED_KEY)? else {
                return Ok(None);
            };
            Checkpoint::decode(value.value()).map(Some)
        })
    }

    /// The last position the index reflects and its chain link.
    pub(crate) fn indexed(&self) -> Result<(Position, ChainHash)> {
        Ok(self
            .checkpoint()?
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
    /// one as the head, in one transaction. Non-durable commits are fine: the index is caught up
    /// from the log after a crash.
    pub(crate) fn apply<'a>(
        &self,
        entries: &[IndexEntry<'a>],
        head_hash: ChainHash,
        durable: bool,
    ) -> Result<()> {
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
            txn.set_durability(if durable {
                Durability::Immediate
            } else {
                Durability::None
            })?;
            {
                let mut keyed_ids = txn.open_table(EVENT_ID_KEYS)?;
                let mut block_table = txn.open_table(EVENT_ID_BLOCKS)?;
                let mut other_ids = txn.open_table(OTHER_EVENT_IDS)?;
                let mut streams = txn.open_table(STREAMS)?;
                let mut tasks = txn.open_table(BY_TASK)?;
                let mut runs = txn.open_table(BY_RUN)?;
                let mut sparse = txn.open_table(SPARSE)?;
                let mut last_sparse = sparse.last()?.map(|(_, v)| v.value()).unwrap_or((0, 0));
                // Each table's keys are inserted in key order: neighbouring inserts then touch the
                // same B-tree pages, which is several times faster than log order for random ids.
                // The sort is stable: the log holds each id once (the writer refuses to append an
                // id again), but should it hold one twice, the later event's location is kept, as
                // the insert of a later apply would keep it, every time.
                let here = |e: &IndexEntry<'_>| (e.position.0, e.segment.0, e.offset);
                let mut keyed = Vec::with_capacity(entries.len());
                let mut other = Vec::new();
                for e in entries {
                    match id_key(e.event_id) {
                        Some(key) => keyed.push((key, here(e))),
                        None => other.push((e.event_id, here(e))),
                    }
                }
                // The apply's ids go to the id blocks when they grow, in log order, from after
                // every fixed-width id indexed; otherwise each run of them that grows between two
                // blocks does, and the others go one by one to the per-id table, sorted (see
                // `id_blocks` for why, and the invariants).
                let last_block = block_table
                    .last()?
                    .map(|(k, v)| (*k.value(), v.value().to_vec()));
                let greatest = greatest_keyed(
                    &keyed_ids,
                    last_block.as_ref().map(|(_, block)| block.as_slice()),
                )?;
                let grow = keyed
                    .first()
                    .is_some_and(|(first, _)| greatest.is_none_or(|g| *first > g))
                    && keyed.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0));
                if grow {
                    append_id_blocks(&mut block_table, last_block, &keyed)?;
                } else {
                    keyed.sort_by_key(|(key, _)| *key);
                    place_ids(
                        &mut block_table,
                        &mut keyed_ids,
                        &keyed,
                        last_block.is_none(),
                    )?;
                }
                other.sort_by(|a, b| a.0.cmp(b.0));
                for (id, located) in &other {
                    other_ids.insert(*id, located)?;
                }
                append_blocks(
                    &mut streams,
                    entries
                        .iter()
                        .map(|e| (e.stream_key, e.stream_version, here(e))),
                    Numbered::Version,
                )?;
                for (table, pick) in [
                    (
                        &mut tasks,
                        (|e: &IndexEntry<'a>| e.task) as fn(&IndexEntry<'a>) -> Option<&'a str>,
                    ),
                    (&mut runs, |e: &IndexEntry<'a>| e.run),
                ] {
                    append_blocks(
                        table,
                        entries
                            .iter()
                            .filter_map(|e| pick(e).map(|k| (k, e.position.0, here(e)))),
                        Numbered::Position,
                    )?;
                }
                for e in entries {
                    if last_sparse.0 != e.segment.0
                        || e.offset >= last_sparse.1 + SPARSE_INTERVAL_BYTES
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
                Some(v) => Checkpoint::decode(v.value())?.position,
                None => Position::ZERO,
            };
            Ok(IndexReader {
                marker: Arc::clone(&self.marker),
                ids: IdTables::open(&txn)?,
                streams: txn.open_table(STREAMS)?,
                indexed,
                greatest: OnceCell::new(),
                gaps: RefCell::new(Vec::new()),
            })
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
            Ok(IndexChecker {
                marker: Arc::clone(&self.marker),
                ids: IdTables::open(&txn)?,
                streams: txn.open_table(STREAMS)?,
                tasks: txn.open_table(BY_TASK)?,
                runs: txn.open_table(BY_RUN)?,
                sparse: txn.open_table(SPARSE)?,
            })
        })
    }
}

/// Lookups against one read transaction of the index.
pub(crate) struct IndexReader {
    marker: Arc<Path>,
    ids: IdTables,
    streams: ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    indexed: Position,
    /// The greatest key of each id table (`None`: the table is empty), read at the first
    /// [`IndexReader::event`].
    /// An id whose key sorts after its table's greatest is not in the view, and is answered
    /// without a descent of the table's B-tree: on the append path, whose idempotency check
    /// looks up every new id, most ids grow with time (UUID v7, the journal's own; counters;
    /// ULIDs), and the descent was about 1,400 instructions per event.
    greatest: OnceCell<Greatest>,
    /// Spans of fixed-width keys after id blocks, found by lookups that missed there (see
    /// [`IdGap`]); at most [`ID_GAPS_MAX`].
    gaps: RefCell<Vec<IdGap>>,
}

/// The most [`IdGap`]s a view keeps: a few per producer whose ids grow on their own.
const ID_GAPS_MAX: usize = 32;

/// The span of fixed-width keys between an id block's last key and the next block's first
/// (both excluded; `before: None`, no block after), which a lookup that missed just past the
/// block found. `clean`: the per-id table holds no key in the span either, so the view holds
/// none of it. A view never changes, so what it found stays true for the view's life. With
/// producers whose ids each grow, interleaved, each producer's new ids fall in the span after
/// its last block: the first lookup there finds the span, the others are answered from it
/// without a descent (the writer's idempotency check looks up every new id). A span that holds
/// per-id keys (ids in no order among them) is kept as not clean, so that it is not looked for
/// again.
#[derive(Debug)]
struct IdGap {
    /// The first key of the block the span follows.
    block: IdKey,
    after: IdKey,
    before: Option<IdKey>,
    clean: bool,
}

impl IdGap {
    fn holds(&self, key: &IdKey) -> bool {
        self.after < *key && self.before.is_none_or(|before| *key < before)
    }
}

impl IndexReader {
    /// The last position this view reflects.
    pub(crate) fn indexed(&self) -> Position {
        self.indexed
    }

    pub(crate) fn event(&self, event_id: &str) -> Result<Option<Located>> {
        guard(&self.marker, || {
            let greatest = match self.greatest.get() {
                Some(greatest) => greatest,
                None => {
                    let keyed = self.ids.greatest_keyed()?;
                    let other = self.ids.other.last()?.map(|(k, _)| k.value().to_owned());
                    self.greatest.get_or_init(|| Greatest { keyed, other })
                }
            };
            // Each table's keys are ordered byte by byte, so nothing after its greatest key is in
            // it.
            let found = match id_key(event_id) {
                Some(key) if greatest.keyed.is_some_and(|greatest| key <= greatest) => {
                    self.get_keyed(&key)?
                }
                None if greatest
                    .other
                    .as_deref()
                    .is_some_and(|greatest| event_id <= greatest) =>
                {
                    self.ids.other.get(event_id)?.map(|v| v.value())
                }
                _ => None,
            };
            Ok(found.map(located))
        })
    }

    /// Where the event with a fixed-width `key` is: as [`IdTables::get_keyed`] finds it, unless
    /// a clean [`IdGap`] already holds the key; a miss just past a block records that block's
    /// gap.
    fn get_keyed(&self, key: &IdKey) -> Result<Option<Row>> {
        if self
            .gaps
            .borrow()
            .iter()
            .any(|gap| gap.clean && gap.holds(key))
        {
            return Ok(None);
        }
        self.ids
            .get_keyed(key, |first, block| self.learn_gap(first, block, key))
    }

    /// Records the gap after the id block keyed `first` (`block`), in which a lookup of `key`
    /// missed, unless `key` lies inside the block's span, the block's gap is known, or the
    /// view keeps [`ID_GAPS_MAX`] gaps already.
    fn learn_gap(&self, first: &IdKey, block: &[u8], key: &IdKey) -> Result<()> {
        let mut gaps = self.gaps.borrow_mut();
        if gaps.len() >= ID_GAPS_MAX || gaps.iter().any(|gap| gap.block == *first) {
            return Ok(());
        }
        let after = id_blocks::last_key(block)?;
        if *key <= after {
            return Ok(());
        }
        // The block at or before `key` is `first`'s, so the next block is the first after it.
        let before = match self
            .ids
            .blocks
            .range::<&IdKey>((Bound::Excluded(key), Bound::Unbounded))?
            .next()
        {
            Some(item) => Some(*item?.0.value()),
            None => None,
        };
        let upper = match &before {
            Some(before) => Bound::Excluded(before),
            None => Bound::Unbounded,
        };
        let clean = self
            .ids
            .keyed
            .range::<&IdKey>((Bound::Excluded(&after), upper))?
            .next()
            .is_none();
        gaps.push(IdGap {
            block: *first,
            after,
            before,
            clean,
        });
        Ok(())
    }

    pub(crate) fn stream_head(&self, stream_key: &str) -> Result<u64> {
        guard(&self.marker, || {
            match block_at(&self.streams, stream_key, u64::MAX)? {
                Some((first, bytes)) => Ok(first + block_entries(&bytes)?.count() as u64 - 1),
                None => Ok(0),
            }
        })
    }
}

/// The greatest key of each id table of a view.
struct Greatest {
    keyed: Option<IdKey>,
    other: Option<String>,
}

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
    /// The parts of `e` the index lacks or holds differently.
    pub(crate) fn missing(&self, e: &IndexEntry<'_>) -> Result<Vec<&'static str>> {
        guard(&self.marker, || {
            let mut missing = Vec::new();
            let here = (e.position.0, e.segment.0, e.offset);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::entries::{Entry, IndexBatch};

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
                segment: SegmentId(p / 100),
                offset: p * 10,
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
            .apply(&borrow(&batch), ChainHash::GENESIS, false)
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
            .apply(&borrow(&later), ChainHash::GENESIS, false)
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
                .apply(&borrow(chunk), ChainHash::GENESIS, false)
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
        moved.offset += 1;
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
            .apply(&borrow(&all), ChainHash::GENESIS, false)
            .expect("apply");
        index
            .apply(&borrow(&all[150..]), ChainHash::GENESIS, false)
            .expect("again");
        index
            .apply(&borrow(&all), ChainHash::GENESIS, false)
            .expect("again");
        let counts = index.counts().expect("counts");
        assert_eq!(
            (counts.streams, counts.by_task, counts.by_run),
            (200, 100, 66)
        );
        assert_eq!(index.stream_head("session:s2").expect("head"), 67); // An older range applied again leaves the head where it was.
        index
            .apply(&borrow(&all[..100]), ChainHash::GENESIS, false)
            .expect("older");
        assert_eq!(index.indexed().expect("head").0, Position(200));
    }

    #[test]
    fn a_new_stream_starts_at_version_one_and_a_limit_of_zero_gives_nothing() {
        let (_dir, index) = open();
        let mut first = entries(1, 1);
        first[0].stream_version = 5;
        let err = index
            .apply(&borrow(&first), ChainHash::GENESIS, false)
            .expect_err("version 5 first");
        assert!(
            err.to_string().contains("where version 1 comes next"),
            "{err}"
        );
        index
            .apply(&borrow(&entries(1, 10)), ChainHash::GENESIS, false)
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
            .apply(&borrow(&entries(1, 3)), ChainHash::GENESIS, false)
            .expect("apply");
        let mut next = entries(4, 4);
        next[0].stream_version = 5; // s1 is at version 2: 3 comes next.
        let err = index
            .apply(&borrow(&next), ChainHash::GENESIS, false)
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
                index.apply(&borrow(&all[applied..end]), ChainHash::GENESIS, false).expect("apply");
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
                    segment: SegmentId(p / 100),
                    offset: p * 10,
                    end_offset: p * 10 + 9,
                });
            }
            let mut applied = 0;
            for cut in cuts.iter().cycle() {
                let end = (applied + cut).min(all.len());
                index.apply(&borrow(&all[applied..end]), ChainHash::GENESIS, false).expect("apply");
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
            .apply(&borrow(&all[..150]), ChainHash::GENESIS, false)
            .expect("apply");
        // Streams are written in key order, before tasks and runs: this apply fills s0's first
        // block (50 → 64 events) and starts its second, does as much for s1, then fails at
        // s2, and its transaction is aborted.
        let mut broken = all[150..250].to_vec();
        assert_eq!(broken[97].stream_key, "session:s2");
        broken[97].stream_version += 1; // a gap in s2
        index
            .apply(&borrow(&broken), ChainHash::GENESIS, false)
            .expect_err("a gap");
        index
            .apply(&borrow(&all[150..]), ChainHash::GENESIS, false)
            .expect("apply");
        assert_all_found(&index, &all);
    }

    #[test]
    fn a_cleared_index_is_filled_again_from_nothing() {
        let (_dir, index) = open();
        let all = entries(1, 200);
        index
            .apply(&borrow(&all), ChainHash::GENESIS, false)
            .expect("apply");
        index.clear().expect("clear");
        index
            .apply(&borrow(&all[..120]), ChainHash::GENESIS, false)
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
            .apply(&borrow(&batch), ChainHash::GENESIS, false)
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
                .apply(&borrow(&all[range]), ChainHash::GENESIS, false)
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
            .apply(&borrow(&again), ChainHash::GENESIS, false)
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
            .apply(&borrow(&batch), ChainHash::GENESIS, false)
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
        let gaps: Vec<(bool, Option<IdKey>)> = view
            .gaps
            .borrow()
            .iter()
            .map(|gap| (gap.clean, gap.before))
            .collect();
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
            .apply(&borrow(&batch), ChainHash::GENESIS, false)
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
