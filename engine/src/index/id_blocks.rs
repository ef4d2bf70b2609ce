//! Id blocks: the event ids that grow, kept in blocks of up to [`ID_BLOCK_EVENTS`] entries
//! instead of one index entry each.
//!
//! Most event ids grow with time (UUID v7, the journal's own; ULIDs; counters), so an apply's
//! ids, in log order, often increase from after every id the index holds. Such an apply's ids
//! are appended to the index's id blocks: the last block filled, then new ones, each keyed by
//! its first id. One redb insert per block instead of one per id: the per-id inserts were the
//! larger part of the indexer's work (`docs/PERFORMANCE.md`, "Where the time goes").
//!
//! Producers whose ids each grow on their own (a counter or a clock each) interleave in the
//! log, so their apply's ids do not grow as a whole; sorted, they fall into **stretches**: ids
//! between the same two neighbouring blocks whose positions increase with their keys (one
//! producer's). A stretch goes to the blocks when it is [`STRETCH_MIN`] long or continues a block not
//! yet full: comes after it in the log too (the producer's block from the apply before).
//! Another stretch starts blocks of its own, so that producers do not share a block. Every other id goes to the per-id
//! table: random ids (UUID v4), whose sorted order is no order of the log, make stretches of one or
//! two and never reach [`STRETCH_MIN`], so the blocks of a journal whose ids never grow stay empty
//! and its lookups pay for the per-id table alone (a lookup there is one descent, where a block
//! costs a range and a search).
//!
//! A block's value is its entries in strictly increasing key order, each [`ID_ENTRY_LEN`] bytes:
//! the id's fixed-width key, then its position, segment and offset as little-endian `u64`s.
//!
//! **Invariants** (the index's apply keeps them; a malformed block is an [`Error::Index`] when
//! read): every block holds 1 to [`ID_BLOCK_EVENTS`] entries, in strictly increasing key order,
//! the first of them its key; all of a block's keys sort before the next block's key (so the
//! block that may hold a key is the last one keyed at or before it); and an id enters a block
//! only where no block's keys span it and the per-id table does not hold it, so an id held
//! twice (only a damaged log could) has its later location in the per-id table, which a lookup
//! reads first.

use crate::error::{Error, Result};
use crate::index::blocks::entry_count;
use crate::index::tables::{IdKey, Row, ID_KEY_LEN};

/// The most entries one id block holds: two blocks fit a 4 KiB redb page.
pub(crate) const ID_BLOCK_EVENTS: usize = 40;
/// The fewest ids of a stretch (see the module's doc) that start a block of their own. Random ids'
/// sorted stretches are a key or two long: sixteen in a row with increasing positions come by chance
/// once in 16! (2 × 10^13).
pub(crate) const STRETCH_MIN: usize = 16;
/// Bytes per id block entry: the key, then position, segment and offset.
pub(crate) const ID_ENTRY_LEN: usize = ID_KEY_LEN + 24;

/// The number of entries of `block`, checked for length.
pub(crate) fn count(block: &[u8]) -> Result<usize> {
    entry_count(block, ID_ENTRY_LEN, ID_BLOCK_EVENTS, "id block")
}

/// Entry `i` of a block whose length [`count`] checked.
fn entry(block: &[u8], i: usize) -> Option<(IdKey, Row)> {
    let bytes = block.get(i * ID_ENTRY_LEN..(i + 1) * ID_ENTRY_LEN)?;
    let (key, rest) = bytes.split_at(ID_KEY_LEN);
    let word = |at: usize| {
        rest.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_le_bytes)
    };
    Some((IdKey::try_from(key).ok()?, (word(0)?, word(8)?, word(16)?)))
}

/// The last (greatest) key of `block`.
pub(crate) fn last_key(block: &[u8]) -> Result<IdKey> {
    last(block).map(|(key, _)| key)
}

/// The last (greatest) key of `block`, with where its event is.
pub(crate) fn last(block: &[u8]) -> Result<(IdKey, Row)> {
    let n = count(block)?;
    entry(block, n - 1).ok_or_else(|| Error::Index("an id block lost its last entry".into()))
}

/// Where the event with `key` is, if `block` holds it: a binary search over its entries.
pub(crate) fn find(block: &[u8], key: &IdKey) -> Result<Option<Row>> {
    let (mut low, mut high) = (0, count(block)?);
    while low < high {
        let mid = low + (high - low) / 2;
        let Some((at, located)) = entry(block, mid) else {
            break;
        };
        match at.cmp(key) {
            std::cmp::Ordering::Less => low = mid + 1,
            std::cmp::Ordering::Greater => high = mid,
            std::cmp::Ordering::Equal => return Ok(Some(located)),
        }
    }
    Ok(None)
}

/// Adds an entry to a block being built. The caller keeps keys increasing and the block within
/// [`ID_BLOCK_EVENTS`].
pub(crate) fn push(block: &mut Vec<u8>, key: &IdKey, (position, segment, offset): Row) {
    debug_assert!(block.len() < ID_BLOCK_EVENTS * ID_ENTRY_LEN);
    block.extend_from_slice(key);
    block.extend_from_slice(&position.to_le_bytes());
    block.extend_from_slice(&segment.to_le_bytes());
    block.extend_from_slice(&offset.to_le_bytes());
}

/// Whether `block` is full.
pub(crate) fn is_full(block: &[u8]) -> bool {
    block.len() >= ID_BLOCK_EVENTS * ID_ENTRY_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> IdKey {
        let mut k = [0; ID_KEY_LEN];
        k[ID_KEY_LEN - 1] = n;
        k
    }

    #[test]
    fn finds_every_entry_and_nothing_else() {
        let mut block = Vec::new();
        for n in (2..2 + ID_BLOCK_EVENTS as u8 * 2).step_by(2) {
            push(&mut block, &key(n), (u64::from(n), 1, u64::from(n) * 100));
        }
        assert!(is_full(&block));
        assert_eq!(count(&block).expect("count"), ID_BLOCK_EVENTS);
        for n in 0..=2 + ID_BLOCK_EVENTS as u8 * 2 {
            let found = find(&block, &key(n)).expect("find");
            if n >= 2 && n % 2 == 0 && n < 2 + ID_BLOCK_EVENTS as u8 * 2 {
                assert_eq!(found, Some((u64::from(n), 1, u64::from(n) * 100)), "{n}");
            } else {
                assert_eq!(found, None, "{n}");
            }
        }
        assert_eq!(
            last_key(&block).expect("last"),
            key(ID_BLOCK_EVENTS as u8 * 2)
        );
    }

    #[test]
    fn a_malformed_block_is_an_error() {
        for len in [
            0,
            ID_ENTRY_LEN - 1,
            ID_ENTRY_LEN + 1,
            (ID_BLOCK_EVENTS + 1) * ID_ENTRY_LEN,
        ] {
            let err = find(&vec![0; len], &key(1)).expect_err("malformed");
            assert!(err.to_string().contains("id block"), "{err}");
        }
    }
}
