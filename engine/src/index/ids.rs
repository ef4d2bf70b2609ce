//! Event ids: the fixed-width key of an id, where an apply places each id (the per-id table,
//! id blocks, or by its string), and the id tables of one read transaction.

use std::ops::Bound;

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table};

use crate::error::Result;
use crate::index::id_blocks;
use crate::index::tables::{IdKey, ID_KEY_LEN};
use crate::index::tables::{Row, EVENT_ID_BLOCKS, EVENT_ID_KEYS, OTHER_EVENT_IDS};

/// The greatest fixed-width key indexed: the per-id table's or the last id block's
/// (`last_block`), whichever is greater.
pub(crate) fn greatest_keyed<T: ReadableTable<&'static IdKey, Row>>(
    per_id: &T,
    last_block: Option<&[u8]>,
) -> Result<Option<IdKey>> {
    let per_id = per_id.last()?.map(|(k, _)| *k.value());
    let blocks = last_block.map(id_blocks::last_key).transpose()?;
    Ok(per_id.max(blocks))
}

/// Appends `stretch` (keys strictly increasing, all between the blocks `before` and the next one)
/// to the id blocks: `before` (its key and bytes) filled first when it is not full, then new
/// blocks keyed by their first key.
pub(crate) fn append_id_blocks(
    table: &mut Table<&IdKey, &[u8]>,
    before: Option<(IdKey, Vec<u8>)>,
    stretch: &[(IdKey, Row)],
) -> Result<()> {
    // The block being filled: its first key and whether it changed, its bytes in `block` (one
    // buffer for all: see `append_key`).
    let (mut open, mut block) = match before {
        Some((first, block)) if !id_blocks::is_full(&block) => (Some((first, false)), block),
        _ => (None, Vec::new()),
    };
    for (key, located) in stretch {
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
/// key (stably: a repeated id's later event last). Each **stretch** of them, keys that fall between
/// the same two neighbouring blocks and whose positions increase with their keys (one
/// producer's ids among several producers' whose ids each grow), goes to the blocks when it is
/// [`id_blocks::STRETCH_MIN`] long (in blocks of its own, unless it continues the block before it)
/// or continues the block before it (which has room, and whose last id comes before the stretch
/// in the log), and the per-id table holds none of its keys; every other id goes to the per-id table. `blocks_empty`: the block table
/// holds nothing (then, until a stretch goes there, only long stretches can, found without a lookup).
pub(crate) fn place_ids(
    blocks: &mut Table<&IdKey, &[u8]>,
    per_id: &mut Table<&IdKey, Row>,
    sorted: &[(IdKey, Row)],
    mut blocks_empty: bool,
) -> Result<()> {
    let mut rest = sorted;
    while let Some(((first, _), _)) = rest.split_first() {
        // The block at or before the stretch's first key, and where the block after it starts.
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
            // Inside a block's keys: these ids (a repeat, or ids of no stretch) keep an entry each.
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
        let (stretch, after) = rest.split_at(len);
        // A stretch continues the block before it when that block has room and the stretch comes
        // after its last id in the log too (the same producer's next ids, most likely);
        // otherwise it starts blocks of its own.
        let continues = match (&before, before_last, stretch.first()) {
            (Some((_, block)), Some((_, (last_position, _, _))), Some((_, (position, _, _)))) => {
                !id_blocks::is_full(block) && last_position < *position
            }
            _ => false,
        };
        let to_blocks = (len >= id_blocks::STRETCH_MIN || continues)
            && match (stretch.first(), stretch.last()) {
                (Some((low, _)), Some((high, _))) => {
                    per_id.range::<&IdKey>(low..=high)?.next().is_none()
                }
                _ => false,
            };
        if to_blocks {
            append_id_blocks(blocks, before.filter(|_| continues), stretch)?;
            blocks_empty = false;
        } else {
            for (key, located) in stretch {
                per_id.insert(key, located)?;
            }
        }
        rest = after;
    }
    Ok(())
}

/// The tag of an id of at most 16 bytes, kept as it is, zero-padded.
pub(crate) const SHORT_ID: u8 = 0;
/// The tag of a canonical UUID, kept as its 16 bytes.
pub(crate) const UUID_ID: u8 = 1;

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
pub(crate) fn id_key(id: &str) -> Option<IdKey> {
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
pub(crate) struct IdTables {
    pub(crate) keyed: ReadOnlyTable<&'static IdKey, Row>,
    pub(crate) blocks: ReadOnlyTable<&'static IdKey, &'static [u8]>,
    pub(crate) other: ReadOnlyTable<&'static str, Row>,
}

impl IdTables {
    pub(crate) fn open(txn: &ReadTransaction) -> Result<IdTables> {
        Ok(IdTables {
            keyed: txn.open_table(EVENT_ID_KEYS)?,
            blocks: txn.open_table(EVENT_ID_BLOCKS)?,
            other: txn.open_table(OTHER_EVENT_IDS)?,
        })
    }

    /// Where the event with `id` is, looked up in the tables its id belongs to.
    pub(crate) fn get(&self, id: &str) -> Result<Option<Row>> {
        match id_key(id) {
            Some(key) => self.get_keyed(&key, |_, _| Ok(())),
            None => Ok(self.other.get(id)?.map(|v| v.value())),
        }
    }

    /// Where the event with a fixed-width `key` is: in the per-id table (which has the later
    /// location, should a damaged log hold an id twice: a repeat never enters the blocks, see
    /// [`crate::index::id_blocks`]), else in the block whose first key is the greatest at or before
    /// it. When that block does not hold `key`, `missed` is given the block's key and bytes.
    pub(crate) fn get_keyed(
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
    pub(crate) fn greatest_keyed(&self) -> Result<Option<IdKey>> {
        let last = self.blocks.last()?;
        greatest_keyed(&self.keyed, last.as_ref().map(|(_, v)| v.value()))
    }

    /// The ids held.
    pub(crate) fn len(&self) -> Result<u64> {
        let mut n = self.keyed.len()? + self.other.len()?;
        for item in self.blocks.iter()? {
            n += id_blocks::count(item?.1.value())? as u64;
        }
        Ok(n)
    }
}
