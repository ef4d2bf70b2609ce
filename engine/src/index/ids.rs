//! The event-id table's blocks: up to [`ID_BLOCK_IDS`] event ids in one redb value, in byte
//! order, each with its event's location, keyed by the block's first id.
//!
//! One redb entry per id cost the indexer about 7,200 instructions per event (43% of its work
//! at batches of 1,000): every insert into a redb leaf moves the offsets of all its entries.
//! Blocks turn that into one value written per block an apply touches: ids that grow with time
//! (UUID v7, the journal's own, counters, ULIDs) all land in the last block, which is filled up
//! and followed by new ones; ids in no order (UUID v4) each rewrite the block they fall in,
//! which is split when it overflows.
//!
//! A block's bytes:
//!
//! ```text
//! count: u16 LE (1..=ID_BLOCK_IDS)
//! count × entry: id_end u32 LE, position u64 LE, segment u64 LE, offset u64 LE   (28 bytes each)
//! the ids' bytes, one after the other; id i is ids[id_end(i-1)..id_end(i)] (id_end(-1) = 0)
//! ```
//!
//! Invariants, checked when a block is read: the count is in range, the ids' ends never
//! decrease and the last one is where the bytes end ([`IdBlock::parse`]); every id is UTF-8 and
//! the ids strictly increase ([`IdBlock::entries`], for every reader that takes ids out). Across blocks (kept by [`merge`]'s caller): each block's key is its
//! first id, and a block's ids sort before the next block's key.

use std::cmp::Ordering;

use crate::error::{Error, Result};

/// (position, segment, offset).
pub(crate) type Located = (u64, u64, u64);

/// The most ids one block holds.
pub(crate) const ID_BLOCK_IDS: usize = 64;
/// The id bytes after which a block is closed before it is full, so that a block of long ids
/// stays a small value to rewrite.
const ID_BLOCK_ID_BYTES: usize = 16 * 1024;
/// How full a block split in the middle of the table is left: room for later ids that fall
/// into it, so that one more does not split it again.
const SPLIT_IDS: usize = ID_BLOCK_IDS * 3 / 4;
const SPLIT_ID_BYTES: usize = ID_BLOCK_ID_BYTES * 3 / 4;

const COUNT_LEN: usize = 2;
const ENTRY_LEN: usize = 4 + 8 + 8 + 8;

/// A block read from its bytes; ids and locations are read in place.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdBlock<'a> {
    entries: &'a [u8],
    ids: &'a [u8],
    count: usize,
}

fn malformed(what: &str) -> Error {
    Error::Index(format!("an event-id block is malformed: {what}"))
}

fn word<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes
        .get(at..at + N)
        .and_then(|w| <[u8; N]>::try_from(w).ok())
        .unwrap_or([0; N])
}

impl<'a> IdBlock<'a> {
    /// Reads a block's layout: its count in range, its entries all there, its last id ending
    /// where the bytes end. Each id's bounds are checked when it is read (a lookup reads a few
    /// of them, by binary search); [`IdBlock::entries`] checks the rest (UTF-8 ids in strictly
    /// increasing order) for the readers that take the ids out.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<IdBlock<'a>> {
        let (count, rest) = bytes
            .split_first_chunk::<COUNT_LEN>()
            .ok_or_else(|| malformed("shorter than its count"))?;
        let count = usize::from(u16::from_le_bytes(*count));
        if count == 0 || count > ID_BLOCK_IDS {
            return Err(malformed(&format!(
                "{count} ids, where a block holds 1 to {ID_BLOCK_IDS}"
            )));
        }
        if rest.len() < count * ENTRY_LEN {
            return Err(malformed("shorter than its entries"));
        }
        let (entries, ids) = rest.split_at(count * ENTRY_LEN);
        let block = IdBlock {
            entries,
            ids,
            count,
        };
        let end = block.id_end(count - 1);
        if end != ids.len() {
            return Err(malformed(&format!(
                "its last id ends at {end}, its ids take {} bytes",
                ids.len()
            )));
        }
        Ok(block)
    }

    fn id_end(&self, i: usize) -> usize {
        u32::from_le_bytes(word(self.entries, i * ENTRY_LEN)) as usize
    }

    fn id_bytes(&self, i: usize) -> Result<&'a [u8]> {
        let start = i.checked_sub(1).map_or(0, |p| self.id_end(p));
        let end = self.id_end(i);
        self.ids.get(start..end).ok_or_else(|| {
            malformed(&format!(
                "id {i} spans bytes {start}..{end} of {}",
                self.ids.len()
            ))
        })
    }

    fn id(&self, i: usize) -> Result<&'a str> {
        std::str::from_utf8(self.id_bytes(i)?)
            .map_err(|_| malformed(&format!("id {i} is not UTF-8")))
    }

    fn located(&self, i: usize) -> Located {
        let at = i * ENTRY_LEN + 4;
        let number = |k: usize| u64::from_le_bytes(word(self.entries, at + 8 * k));
        (number(0), number(1), number(2))
    }

    /// The block's greatest id.
    pub(crate) fn last_id(&self) -> Result<&'a str> {
        self.id(self.count - 1)
    }

    /// The location of `id`, if the block holds it (a binary search over the ids' bytes, which
    /// sort as `str`s do).
    pub(crate) fn find(&self, id: &str) -> Result<Option<Located>> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.id_bytes(mid)?.cmp(id.as_bytes()) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Ok(Some(self.located(mid))),
            }
        }
        Ok(None)
    }

    /// Every id with its location, in order, checked: each id UTF-8, each after the one
    /// before.
    pub(crate) fn entries(&self) -> Result<Vec<(&'a str, Located)>> {
        let mut out: Vec<(&'a str, Located)> = Vec::with_capacity(self.count);
        for i in 0..self.count {
            let id = self.id(i)?;
            if out.last().is_some_and(|(previous, _)| *previous >= id) {
                return Err(malformed(&format!(
                    "id {i} does not sort after id {}",
                    i - 1
                )));
            }
            out.push((id, self.located(i)));
        }
        Ok(out)
    }
}

/// Writes the block holding `entries` (sorted, unique ids; 1 to [`ID_BLOCK_IDS`] of them) into
/// `out`, replacing what it held. Fails only for ids of more than 4 GiB together, which no block
/// holds: each id is part of an event of at most 16 MiB.
pub(crate) fn encode(entries: &[(&str, Located)], out: &mut Vec<u8>) -> Result<()> {
    assert!(
        (1..=ID_BLOCK_IDS).contains(&entries.len()),
        "an event-id block holds 1 to {ID_BLOCK_IDS} ids, not {}",
        entries.len()
    );
    debug_assert!(entries.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)));
    out.clear();
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut end = 0usize;
    for &(id, (position, segment, offset)) in entries {
        end += id.len();
        let end = u32::try_from(end)
            .map_err(|_| malformed(&format!("its ids would take {end} bytes")))?;
        out.extend_from_slice(&end.to_le_bytes());
        out.extend_from_slice(&position.to_le_bytes());
        out.extend_from_slice(&segment.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for &(id, _) in entries {
        out.extend_from_slice(id.as_bytes());
    }
    Ok(())
}

/// Merges `new` (sorted by id, unique) into a block's `old` entries (sorted, unique), a new id's
/// location replacing an old one's, and cuts the result into the blocks to write. `last` says
/// whether the block is the table's last: the ids that grow with time land there, so it is cut
/// into full blocks; a block in the middle is split into blocks with room to spare.
pub(crate) fn merge<'a>(
    old: &[(&'a str, Located)],
    new: &[(&'a str, Located)],
    last: bool,
) -> Vec<Vec<(&'a str, Located)>> {
    let mut merged = Vec::with_capacity(old.len() + new.len());
    let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
    loop {
        let next = match (o.peek(), n.peek()) {
            (Some(a), Some(b)) => match a.0.cmp(b.0) {
                Ordering::Less => o.next(),
                Ordering::Greater => n.next(),
                Ordering::Equal => {
                    o.next();
                    n.next()
                }
            },
            (Some(_), None) => o.next(),
            (None, Some(_)) => n.next(),
            (None, None) => break,
        };
        merged.extend(next.copied());
    }
    let fits = |ids: usize, bytes: usize| ids <= ID_BLOCK_IDS && bytes <= ID_BLOCK_ID_BYTES;
    if fits(merged.len(), merged.iter().map(|e| e.0.len()).sum()) {
        return vec![merged];
    }
    let (ids_max, bytes_max) = if last {
        (ID_BLOCK_IDS, ID_BLOCK_ID_BYTES)
    } else {
        (SPLIT_IDS, SPLIT_ID_BYTES)
    };
    let mut blocks = Vec::new();
    let mut block: Vec<(&str, Located)> = Vec::new();
    let mut bytes = 0;
    for entry in merged {
        if !block.is_empty() && (block.len() == ids_max || bytes + entry.0.len() > bytes_max) {
            blocks.push(std::mem::take(&mut block));
            bytes = 0;
        }
        bytes += entry.0.len();
        block.push(entry);
    }
    blocks.push(block);
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn located(i: u64) -> Located {
        (i, i / 100, i * 10)
    }

    #[test]
    fn a_block_reads_back_what_was_encoded() {
        let ids = ["", "a", "abc", "b", "é"];
        let entries: Vec<_> = ids
            .iter()
            .zip(1..)
            .map(|(id, i)| (*id, located(i)))
            .collect();
        let mut bytes = Vec::new();
        encode(&entries, &mut bytes).expect("encode");
        let block = IdBlock::parse(&bytes).expect("parse");
        assert_eq!(block.entries().expect("entries"), entries);
        assert_eq!(block.last_id().expect("last"), "é");
        for (id, at) in &entries {
            assert_eq!(block.find(id).expect("find"), Some(*at), "{id:?}");
        }
        for absent in ["0", "ab", "abcd", "c", "ê"] {
            assert_eq!(block.find(absent).expect("find"), None, "{absent}");
        }
    }

    #[test]
    fn a_malformed_block_is_an_error_naming_what_is_wrong() {
        let mut good = Vec::new();
        encode(&[("a", located(1)), ("b", located(2))], &mut good).expect("encode");
        let mut cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![], "shorter than its count"),
            (vec![0, 0], "0 ids"),
            (vec![65, 0], "65 ids"),
            (
                good[..good.len() - 1].to_vec(),
                "its last id ends at 2, its ids take 1 bytes",
            ),
            (
                [good.as_slice(), b"x"].concat(),
                "its last id ends at 2, its ids take 3 bytes",
            ),
            (
                good[..COUNT_LEN + ENTRY_LEN].to_vec(),
                "shorter than its entries",
            ),
        ];
        let mut unordered = good.clone();
        let ids_at = unordered.len() - 2;
        unordered[ids_at..].copy_from_slice(b"ba");
        cases.push((unordered, "id 1 does not sort after id 0"));
        let mut past_the_end = good.clone();
        past_the_end[COUNT_LEN] = 5; // id 0's end, past the ids' 2 bytes
        cases.push((past_the_end.clone(), "id 0 spans bytes 0..5 of 2"));
        let block = IdBlock::parse(&past_the_end).expect("the layout holds");
        // The search's first probe, id 1, starts where id 0 ends.
        let err = block.find("a").expect_err("a lookup reads ids 1 and 0");
        assert!(
            err.to_string().contains("id 1 spans bytes 5..2 of 2"),
            "{err}"
        );
        let mut not_utf8 = good.clone();
        not_utf8[ids_at] = 0xff;
        cases.push((not_utf8, "id 0 is not UTF-8"));
        for (bytes, expected) in cases {
            let err = IdBlock::parse(&bytes)
                .and_then(|block| block.entries().map(drop))
                .expect_err(expected);
            assert!(err.to_string().contains(expected), "{err} vs {expected}");
        }
    }

    #[test]
    fn a_merge_fills_the_last_block_and_splits_one_in_the_middle_with_room() {
        let names: Vec<String> = (0..200).map(|i| format!("id-{i:04}")).collect();
        let entry = |i: usize| (names[i].as_str(), located(i as u64));
        let old: Vec<_> = (0..40).map(entry).collect();
        let new: Vec<_> = (40..200).map(entry).collect();
        let sizes =
            |blocks: &[Vec<(&str, Located)>]| blocks.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(&merge(&old, &new, true)), vec![64, 64, 64, 8]);
        assert_eq!(sizes(&merge(&old, &new, false)), vec![48, 48, 48, 48, 8]);
        // A new id's location replaces the old one's; the blocks hold every id once, in order.
        let again = [(names[3].as_str(), located(999))];
        let blocks = merge(&old, &again, false);
        assert_eq!(sizes(&blocks), vec![40]);
        assert_eq!(blocks[0][3], (names[3].as_str(), located(999)));
        let all: Vec<_> = merge(&old, &new, false).concat();
        assert_eq!(all, (0..200).map(entry).collect::<Vec<_>>());
    }

    #[test]
    fn long_ids_close_a_block_before_it_is_full() {
        let long: Vec<String> = (0..10)
            .map(|i| format!("{i}{}", "x".repeat(4000)))
            .collect();
        let new: Vec<_> = long.iter().map(|id| (id.as_str(), located(1))).collect();
        let blocks = merge(&[], &new, true);
        assert_eq!(
            blocks.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
        // One id longer than the limit still gets a block of its own.
        let huge = "h".repeat(ID_BLOCK_ID_BYTES + 1);
        let blocks = merge(&new[..1], &[(huge.as_str(), located(2))], true);
        assert_eq!(blocks.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1]);
    }
}
