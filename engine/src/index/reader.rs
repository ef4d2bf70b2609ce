//! A read view of the index: lookups of event ids and stream heads against one read
//! transaction, with the shortcuts the writer's idempotency check relies on.

use std::cell::{OnceCell, RefCell};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use journal_format::{Located, Position};
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable};

use crate::error::Result;
use crate::index::blocks::{block_at, block_entries};
use crate::index::id_blocks;
use crate::index::ids::{id_key, IdTables};
use crate::index::tables::IdKey;
use crate::index::tables::{guard, located, Row, STREAMS};

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
    /// ULIDs), and a descent per new id is a noticeable part of an append.
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
    /// Each gap the view found: whether it is clean, and the key it ends before.
    #[cfg(test)]
    pub(crate) fn gaps(&self) -> Vec<(bool, Option<IdKey>)> {
        self.gaps
            .borrow()
            .iter()
            .map(|gap| (gap.clean, gap.before))
            .collect()
    }

    /// A view of the index as `txn` sees it, which reflects positions up to `indexed`.
    pub(crate) fn new(
        marker: Arc<Path>,
        txn: &ReadTransaction,
        indexed: Position,
    ) -> Result<IndexReader> {
        Ok(IndexReader {
            marker,
            ids: IdTables::open(txn)?,
            streams: txn.open_table(STREAMS)?,
            indexed,
            greatest: OnceCell::new(),
            gaps: RefCell::new(Vec::new()),
        })
    }

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
