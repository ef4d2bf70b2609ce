//! The event ids the writer has staged or committed since the index's read view, each with the
//! answer a duplicate of it gets: with the view, what idempotency looks ids up in.
//!
//! Kept in **lanes**: stretches of ids that increase both in id and in position order. While the ids
//! come from producers whose ids each grow (UUID v7, ULIDs, counters; one producer, or several
//! interleaved), each producer's ids fill a lane of their own: an id joins the lane whose last
//! id is the greatest below it, a lookup binary-searches only the lanes whose span holds the id
//! (a new id, after its producer's last, usually none), and forgetting what the view now holds
//! pops the lanes' fronts. Nothing is hashed, and memory is touched at the lanes' ends. (A hash
//! map of up to 50,000 ids, one insert per event, cost the appending thread about 6% of its time
//! at batch 1000 in cache misses, and its removals 14% of the writer thread's with 8 producers:
//! `docs/PERFORMANCE.md`.) An id that fits no lane when [`LANES_MAX`] are in use (ids in no
//! order, as UUID v4) puts every id in one queue in position order with a hash map of them,
//! kept up to date until the queue empties.
//!
//! Invariants: the ids held are distinct (the writer stages an id only after finding it in
//! neither this nor the view); each lane's ids and positions strictly increase; in hashed form
//! the lanes are empty and `order` holds every id in position order.

use std::collections::VecDeque;
use std::sync::Arc;

// foldhash, as the writer's other maps (see `writer.rs`).
use foldhash::{HashMap, HashMapExt};

use crate::write::answer::Committed;
use journal_format::Position;

/// The most lanes kept before every id is hashed: a few more than the producers a journal
/// usually has.
const LANES_MAX: usize = 16;

/// One lane: ids and positions strictly increasing.
type Lane = VecDeque<(Arc<str>, Committed)>;

/// The ids since the index's view.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    /// Every id while they fit in at most [`LANES_MAX`] lanes (none is empty).
    lanes: Vec<Lane>,
    /// Every id in position order, once one fitted no lane; with `by_id`.
    order: VecDeque<(Arc<str>, Committed)>,
    /// Every id of `order` with its index there counted from `popped`; `None` while the ids
    /// are in lanes.
    by_id: Option<HashMap<Arc<str>, u64>>,
    /// How many entries left `order` at its front: an entry's index in `by_id` less this is
    /// its index in `order`.
    popped: u64,
}

impl Recent {
    /// Adds `id`, staged or committed at `committed.position`, which is after every position
    /// here; `id` is not here.
    ///
    /// # Panics
    /// In debug builds, when `committed.position` is not after the last one's, or `id` is here.
    pub(crate) fn push(&mut self, id: &Arc<str>, committed: Committed) {
        debug_assert!(self.get(id).is_none(), "recent ids are distinct");
        if self.by_id.is_none() {
            // The lane whose last id is the greatest below `id`.
            let mut fit: Option<usize> = None;
            let mut fit_last: Option<&str> = None;
            for (i, lane) in self.lanes.iter().enumerate() {
                if let Some((last, last_committed)) = lane.back() {
                    debug_assert!(
                        committed.position > last_committed.position,
                        "recent ids come in position order"
                    );
                    if **last < **id && fit_last.is_none_or(|best| **last > *best) {
                        fit = Some(i);
                        fit_last = Some(last);
                    }
                }
            }
            let lanes = self.lanes.len();
            match fit.and_then(|i| self.lanes.get_mut(i)) {
                Some(lane) => lane.push_back((Arc::clone(id), committed)),
                None if lanes < LANES_MAX => {
                    self.lanes
                        .push(VecDeque::from([(Arc::clone(id), committed)]));
                }
                None => {
                    self.hash_all();
                    self.push_hashed(id, committed);
                }
            }
            return;
        }
        self.push_hashed(id, committed);
    }

    fn push_hashed(&mut self, id: &Arc<str>, committed: Committed) {
        debug_assert!(self
            .order
            .back()
            .is_none_or(|(_, last)| committed.position > last.position));
        if let Some(by_id) = &mut self.by_id {
            by_id.insert(Arc::clone(id), self.popped + self.order.len() as u64);
        }
        self.order.push_back((Arc::clone(id), committed));
    }

    /// Moves every id from the lanes to `order`, in position order, and hashes them.
    fn hash_all(&mut self) {
        let mut all: Vec<(Arc<str>, Committed)> = self.lanes.drain(..).flatten().collect();
        all.sort_unstable_by_key(|(_, committed)| committed.position);
        let mut by_id = HashMap::with_capacity(all.len() * 2);
        self.order.clear();
        self.popped = 0;
        for (i, (id, committed)) in all.into_iter().enumerate() {
            by_id.insert(Arc::clone(&id), i as u64);
            self.order.push_back((id, committed));
        }
        self.by_id = Some(by_id);
    }

    /// What `id` was answered with, if it is here.
    pub(crate) fn get(&self, id: &str) -> Option<&Committed> {
        if let Some(by_id) = &self.by_id {
            let at = usize::try_from(by_id.get(id)? - self.popped).ok()?;
            return self.order.get(at).map(|(_, committed)| committed);
        }
        for lane in &self.lanes {
            let (Some((first, _)), Some((last, _))) = (lane.front(), lane.back()) else {
                continue;
            };
            if id > &**last || id < &**first {
                continue;
            }
            if let Ok(at) = lane.binary_search_by(|(stored, _)| (**stored).cmp(id)) {
                return lane.get(at).map(|(_, committed)| committed);
            }
        }
        None
    }

    /// Forgets the ids at positions up to `indexed` (the index's view holds them now).
    pub(crate) fn forget_through(&mut self, indexed: Position) {
        for lane in &mut self.lanes {
            while lane
                .front()
                .is_some_and(|(_, committed)| committed.position <= indexed)
            {
                lane.pop_front();
            }
        }
        self.lanes.retain(|lane| !lane.is_empty());
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
        for lane in &mut self.lanes {
            while lane
                .back()
                .is_some_and(|(_, committed)| committed.position >= from)
            {
                lane.pop_back();
            }
        }
        self.lanes.retain(|lane| !lane.is_empty());
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

    #[cfg(test)]
    fn lanes(&self) -> usize {
        self.lanes.len()
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
            location: journal_format::Location::new(journal_format::SegmentId(1), position),
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
    fn interleaved_producers_fill_a_lane_each_without_a_map() {
        let mut recent = Recent::default();
        for p in 1..=800u64 {
            let id = format!("evt-{}-{:06}", p % 8, p / 8);
            recent.push(&Arc::from(id), committed(p));
        }
        assert!(!recent.is_hashed());
        assert_eq!(recent.lanes(), 8);
        assert_eq!(
            recent.get("evt-3-000042").map(|c| c.position),
            Some(Position(339))
        );
        assert!(recent.get("evt-3-000101").is_none());
        assert!(recent.get("evt-8-000000").is_none());
        recent.forget_through(Position(795));
        assert_eq!(recent.lanes(), 5, "the lanes emptied are gone");
        assert!(recent.get("evt-3-000042").is_none());
        assert_eq!(
            recent.get("evt-7-000099").map(|c| c.position),
            Some(Position(799))
        );
        recent.unstage_from(Position(797));
        assert_eq!(recent.lanes(), 1);
        assert!(recent.get("evt-7-000099").is_none());
        assert_eq!(
            recent.get("evt-4-000099").map(|c| c.position),
            Some(Position(796))
        );
    }

    #[test]
    fn ids_that_fit_no_lane_build_the_map_until_the_queue_empties() {
        let mut recent = Recent::default();
        // Decreasing ids: each starts a lane, until there are as many as allowed.
        let ids: Vec<String> = (0..=LANES_MAX as u64)
            .rev()
            .map(|n| format!("{n:03}"))
            .collect();
        for (p, id) in ids.iter().enumerate() {
            assert!(!recent.is_hashed(), "{id}");
            recent.push(&Arc::from(id.as_str()), committed(p as u64 + 1));
        }
        assert!(recent.is_hashed());
        assert_eq!(recent.lanes(), 0);
        for (p, id) in ids.iter().enumerate() {
            assert_eq!(
                recent.get(id).map(|c| c.position),
                Some(Position(p as u64 + 1)),
                "{id}"
            );
        }
        recent.forget_through(Position(ids.len() as u64));
        assert!(!recent.is_hashed());
        assert!(recent.get("000").is_none());
        recent.push(&Arc::from("100"), committed(100));
        assert_eq!((recent.is_hashed(), recent.lanes()), (false, 1));
    }

    proptest! {
        /// Against a map kept beside it, through pushes in any id order, forgetting and
        /// unstaging.
        #[test]
        fn answers_as_a_map_would(
            ops in proptest::collection::vec((0u8..10, 0u16..500), 1..400),
        ) {
            let mut recent = Recent::default();
            let mut model: BTreeMap<String, u64> = BTreeMap::new();
            let mut next = 1u64;
            let mut forgotten = 0u64;
            for (op, n) in ops {
                match op {
                    // Mostly ids that grow, one producer's or four interleaved, sometimes any,
                    // sometimes ids that decrease (each starts a lane, until they are hashed).
                    0..=5 | 9 => {
                        let id = match op {
                            9 => format!("!{:06}", 999_999 - next),
                            5 => format!("{n:05}"),
                            4 => format!("{next:05}"),
                            producer => format!("{producer}-{next:05}"),
                        };
                        if model.contains_key(&id) {
                            continue;
                        }
                        recent.push(&Arc::from(id.as_str()), committed(next));
                        model.insert(id, next);
                        next += 1;
                    }
                    6 | 7 => {
                        let through = forgotten + u64::from(n % 5);
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
                for probe in [
                    format!("{n:05}"),
                    format!("{next:05}"),
                    "00001".to_string(),
                    format!("{}-{n:05}", n % 4),
                ] {
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
