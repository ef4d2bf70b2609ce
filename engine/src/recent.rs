//! The event ids the writer has staged or committed since the index's read view, each with the
//! answer a duplicate of it gets: with the view, what idempotency looks ids up in.
//!
//! Kept in position order, the order the indexer moves past them in. While the ids come in
//! increasing order, as UUID v7, ULIDs and counters do, that order is also the ids' order, and a
//! lookup is a binary search: nothing is hashed, and adding an id touches only the end of a
//! queue. (A hash map of up to 50,000 ids, one insert per event, cost the appending thread about
//! 6% of its time at batch 1000 in cache misses: `docs/PERFORMANCE.md`.) The first id that does
//! not sort after the one before it builds a hash map of them all, kept up to date until the
//! queue empties.

use std::collections::VecDeque;
use std::sync::Arc;

// foldhash, as the writer's other maps (see `writer.rs`).
use foldhash::{HashMap, HashMapExt};

use crate::writer::Committed;
use journal_format::Position;

/// The ids since the index's view, in position order.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    order: VecDeque<(Arc<str>, Committed)>,
    /// Every id of `order` with its index there counted from `popped`; `None` while `order`'s
    /// ids increase.
    by_id: Option<HashMap<Arc<str>, u64>>,
    /// How many entries left `order` at its front: an entry's index in `by_id` less this is
    /// its index in `order`.
    popped: u64,
}

impl Recent {
    /// Adds `id`, staged or committed at `committed.position`, after every id already here.
    ///
    /// # Panics
    /// In debug builds, when `committed.position` is not after the last one's.
    pub(crate) fn push(&mut self, id: &Arc<str>, committed: Committed) {
        if let Some((last_id, last)) = self.order.back() {
            debug_assert!(
                committed.position > last.position,
                "recent ids come in position order"
            );
            if self.by_id.is_none() && **id <= **last_id {
                self.by_id = Some(self.index_all());
            }
        }
        if let Some(by_id) = &mut self.by_id {
            by_id.insert(Arc::clone(id), self.popped + self.order.len() as u64);
        }
        self.order.push_back((Arc::clone(id), committed));
    }

    fn index_all(&self) -> HashMap<Arc<str>, u64> {
        let mut by_id = HashMap::with_capacity(self.order.len() * 2);
        for (i, (id, _)) in self.order.iter().enumerate() {
            by_id.insert(Arc::clone(id), self.popped + i as u64);
        }
        by_id
    }

    /// What `id` was answered with, if it is here.
    pub(crate) fn get(&self, id: &str) -> Option<&Committed> {
        let at = match &self.by_id {
            Some(by_id) => usize::try_from(by_id.get(id)? - self.popped).ok()?,
            None => self
                .order
                .binary_search_by(|(stored, _)| (**stored).cmp(id))
                .ok()?,
        };
        self.order.get(at).map(|(_, committed)| committed)
    }

    /// Forgets the ids at positions up to `indexed` (the index's view holds them now).
    pub(crate) fn forget_through(&mut self, indexed: Position) {
        while let Some((_, committed)) = self.order.front() {
            if committed.position > indexed {
                break;
            }
            if let Some((id, _)) = self.order.pop_front() {
                self.popped += 1;
                if let Some(by_id) = &mut self.by_id {
                    by_id.remove(&id);
                }
            }
        }
        if self.order.is_empty() {
            self.by_id = None;
        }
    }

    /// Takes back the ids at positions from `from` on (a request that failed after staging
    /// them).
    pub(crate) fn unstage_from(&mut self, from: Position) {
        while let Some((_, committed)) = self.order.back() {
            if committed.position < from {
                break;
            }
            if let Some((id, _)) = self.order.pop_back() {
                if let Some(by_id) = &mut self.by_id {
                    by_id.remove(&id);
                }
            }
        }
        if self.order.is_empty() {
            self.by_id = None;
        }
    }

    #[cfg(test)]
    fn is_hashed(&self) -> bool {
        self.by_id.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use journal_format::ChainHash;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn committed(position: u64) -> Committed {
        Committed {
            position: Position(position),
            hash: ChainHash::GENESIS,
            stream_version: position,
            recorded_at_ns: 0,
        }
    }

    #[test]
    fn increasing_ids_are_searched_without_a_map() {
        let mut recent = Recent::default();
        for p in 1..=100 {
            recent.push(&Arc::from(format!("evt-{p:04}")), committed(p));
        }
        assert!(!recent.is_hashed());
        assert_eq!(
            recent.get("evt-0042").map(|c| c.position),
            Some(Position(42))
        );
        assert!(recent.get("evt-0101").is_none());
        assert!(recent.get("evt-00420").is_none());
        recent.forget_through(Position(50));
        assert!(recent.get("evt-0042").is_none());
        assert_eq!(
            recent.get("evt-0051").map(|c| c.position),
            Some(Position(51))
        );
    }

    #[test]
    fn an_id_out_of_order_builds_the_map_until_the_queue_empties() {
        let mut recent = Recent::default();
        recent.push(&Arc::from("b"), committed(1));
        recent.push(&Arc::from("c"), committed(2));
        recent.push(&Arc::from("a"), committed(3));
        assert!(recent.is_hashed());
        for (id, p) in [("a", 3), ("b", 1), ("c", 2)] {
            assert_eq!(
                recent.get(id).map(|c| c.position),
                Some(Position(p)),
                "{id}"
            );
        }
        recent.forget_through(Position(3));
        assert!(!recent.is_hashed());
        assert!(recent.get("a").is_none());
    }

    proptest! {
        /// Against a map kept beside it, through pushes in any id order, forgetting and
        /// unstaging.
        #[test]
        fn answers_as_a_map_would(
            ops in proptest::collection::vec((0u8..10, 0u16..500), 1..300),
        ) {
            let mut recent = Recent::default();
            let mut model: BTreeMap<String, u64> = BTreeMap::new();
            let mut next = 1u64;
            let mut forgotten = 0u64;
            for (op, n) in ops {
                match op {
                    // Mostly growing ids, sometimes any.
                    0..=5 => {
                        let id = if op == 5 { format!("{n:05}") } else { format!("{next:05}") };
                        if model.contains_key(&id) {
                            continue;
                        }
                        recent.push(&Arc::from(id.as_str()), committed(next));
                        model.insert(id, next);
                        next += 1;
                    }
                    6 | 7 => {
                        let through = forgotten + u64::from(n % 20);
                        recent.forget_through(Position(through));
                        model.retain(|_, p| *p > through);
                        forgotten = forgotten.max(through);
                    }
                    8 => {
                        let from = next.saturating_sub(u64::from(n % 5)).max(forgotten + 1);
                        recent.unstage_from(Position(from));
                        model.retain(|_, p| *p < from);
                        next = from.max(model.values().max().map_or(0, |p| p + 1)).max(1);
                    }
                    _ => {}
                }
                for probe in [format!("{n:05}"), format!("{next:05}"), "00001".to_string()] {
                    prop_assert_eq!(
                        recent.get(&probe).map(|c| c.position.0),
                        model.get(&probe).copied(),
                        "{}", probe
                    );
                }
            }
            for (id, p) in &model {
                prop_assert_eq!(recent.get(id).map(|c| c.position.0), Some(*p));
            }
        }
    }
}
