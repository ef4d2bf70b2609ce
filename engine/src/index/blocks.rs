//! Blocks: one redb value holding the locations of up to [`BLOCK_EVENTS`] events of one key
//! (a stream, task or run) in position order, keyed by the key and its first event's number.

use foldhash::{HashMap, HashMapExt};
use journal_format::{Position, SegmentId};
use redb::{ReadableTable, Table};

use crate::error::{Error, Result};
use crate::index::tables::Row;

/// The most events one block holds.
pub(crate) const BLOCK_EVENTS: usize = 64;
/// Bytes per block entry: position, segment and offset, each a little-endian `u64`.
pub(crate) const BLOCK_ENTRY_LEN: usize = 24;

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
pub(crate) fn block_entries(bytes: &[u8]) -> Result<impl Iterator<Item = Row> + '_> {
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

pub(crate) fn push_entry(block: &mut Vec<u8>, (position, segment, offset): Row) {
    block.extend_from_slice(&position.to_le_bytes());
    block.extend_from_slice(&segment.to_le_bytes());
    block.extend_from_slice(&offset.to_le_bytes());
}

/// What a block's key number is: a stream's version, or a task's or run's position.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Numbered {
    Version,
    Position,
}

/// One entry for a blocked table: key, number (see [`Numbered`]), location.
pub(crate) type Keyed<'a> = (&'a str, u64, Row);

/// Adds `items` to the blocks of `table`, filling each key's last block first.
pub(crate) fn append_blocks<'a>(
    table: &mut Table<(&str, u64), &[u8]>,
    items: impl Iterator<Item = Keyed<'a>>,
    numbered: Numbered,
) -> Result<()> {
    // Each item tagged with its key's slot (keys numbered as they first appear), then the
    // items put in slot order by a counting sort: keys are grouped without comparing their
    // strings item by item, in two passes over the items (a comparison sort by slot, or by
    // slot and position, costs many times more per event). The sort is
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
pub(crate) fn append_key(
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
pub(crate) fn block_at<T: ReadableTable<(&'static str, u64), &'static [u8]>>(
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
pub(crate) fn count_entries<T: ReadableTable<(&'static str, u64), &'static [u8]>>(
    table: &T,
) -> Result<u64> {
    let mut n = 0;
    for item in table.iter()? {
        let (_, v) = item?;
        n += block_entries(v.value())?.count() as u64;
    }
    Ok(n)
}
