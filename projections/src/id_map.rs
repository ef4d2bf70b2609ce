//! [`IdMap`]: the folds' maps from an id to what is known of it (calls, tasks, actions, turns),
//! hashed for the lookups that nearly every event makes, and read whole in the order of their
//! keys, as an ordered map is read.
//!
//! An ordered map of `String` keys (`BTreeMap`) finds a key by comparing it with up to a dozen
//! others, each of whose bytes sit behind a pointer: in a session with thousands of calls that
//! is a cache miss per comparison, and it was the largest single cost of the folds
//! (`docs/PERFORMANCE.md`). A hashed map finds it with one hash and one comparison.
//!
//! The keys' bytes sit back to back in one buffer (`keys`), each entry's span of it in one
//! list and its value in another, at the same index: a session's thousands of keys are a few
//! pages read in a row, not thousands of allocations scattered through the heap (nor strided
//! by their values), and a map is dropped with one free for all its keys. A hash table of the
//! entries' indices finds a key, and two
//! lists of indices, each sorted by key, read the map whole in order, as an ordered map is
//! read, without sorting and without a lookup per entry: a worker encodes a stream's whole
//! state at each commit, and for a live journal that is after nearly every event. A new key's
//! index goes into the short list (`recent`, by binary search), which is merged into the long
//! one (`order`, each of its keys finding its place by binary search) once it holds more than
//! the square root of the entries (and at least `RECENT_MAX_MIN`): an insertion moves O(√n)
//! indices and compares O(log n) keys, whatever order the ids come in, where inserting into
//! one sorted list would move O(n) (quadratic for a session's random call ids). A removal
//! shifts the list that holds its index and leaves its key's bytes in the buffer, which is
//! compacted when such dead bytes are more than half of it and more than `DEAD_MIN`, and
//! emptied with the map's last entry: removals are rare (a pending action resolved, an
//! artifact replaced). Each key is kept once, in one buffer of all keys, which keeps a rebuild's
//! peak memory low (`docs/PERFORMANCE.md`, the rebuild's figures).
//!
//! **Invariants:** `spans` and `values` have one element per entry; `table` holds every
//! entry's index exactly once, found by its key's hash; `order` and `recent` together hold
//! every index exactly once, each list strictly increasing by key (keys are unique); each span
//! lies within `keys`, on character boundaries, and no two spans overlap; `dead` is the bytes
//! of `keys` outside every span. Nothing outside this module sees the entries' own order or the buffer:
//! iteration, the stored (MessagePack) and JSON forms, the JSON schema and equality are those of
//! a `BTreeMap<String, V>` holding the same entries, so stored states, read models and their
//! digests do not change with the container (the tests compare them, after random changes).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Where one key's bytes are in the map's `keys` buffer.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    len: usize,
}

/// The map's keys, read by index: entry `i`'s key is `spans[i]` of `bytes`. Spans sit in a
/// list of their own, not beside their values: a binary search or a merge reads a key of many
/// entries and no value, and a value (a call's record) is ten times a span's size.
#[derive(Clone, Copy)]
struct Keys<'a> {
    bytes: &'a str,
    spans: &'a [Span],
}

impl<'a> Keys<'a> {
    /// The key of entry `i`. `table`, `order` and `recent` hold only indices of entries, and
    /// each span lies within `bytes`, on character boundaries (the module's invariants):
    /// another is a bug in this module.
    fn key(self, i: usize) -> &'a str {
        let Some(&Span { start, len }) = self.spans.get(i) else {
            unreachable!("index {i} past the map's {} entries", self.spans.len())
        };
        match self.bytes.get(start..start + len) {
            Some(key) => key,
            None => unreachable!("entry {i}'s key at {start}+{len} is not in the keys"),
        }
    }

    /// Where `id` is in `list` (indices sorted by key): `Ok` at its place, `Err` where it
    /// would go.
    fn search(self, list: &[usize], id: &str) -> Result<usize, usize> {
        list.binary_search_by(|&i| self.key(i).cmp(id))
    }

    /// `long` and `short` (indices sorted by key, holding different keys) as one list sorted
    /// by key. Each of `short`'s keys finds its place in what is left of `long` by binary
    /// search, and the indices between places are copied as they are:
    /// `short.len() × log₂(long.len())` comparisons, where a step-by-step merge makes one for
    /// each index of both lists.
    fn merge(self, long: &[usize], short: &[usize]) -> Vec<usize> {
        let mut merged = Vec::with_capacity(long.len() + short.len());
        let mut rest = long;
        for &i in short {
            let id = self.key(i);
            let (before, after) = rest.split_at(rest.partition_point(|&j| self.key(j) < id));
            merged.extend_from_slice(before);
            merged.push(i);
            rest = after;
        }
        merged.extend_from_slice(rest);
        merged
    }
}

/// The indices of two lists sorted by key (and holding different keys), in key order: both
/// ends, as an ordered map's iterator.
struct Merged<'a> {
    keys: Keys<'a>,
    a: &'a [usize],
    b: &'a [usize],
}

impl<'a> Merged<'a> {
    fn new(keys: Keys<'a>, a: &'a [usize], b: &'a [usize]) -> Merged<'a> {
        Merged { keys, a, b }
    }

    /// Takes the index at `end` of list `list`.
    fn take(&mut self, list: List, end: End) -> Option<usize> {
        let list = match list {
            List::A => &mut self.a,
            List::B => &mut self.b,
        };
        let (&i, rest) = match end {
            End::Front => list.split_first()?,
            End::Back => list.split_last()?,
        };
        *list = rest;
        Some(i)
    }
}

/// One of the two lists [`Merged`] reads.
#[derive(Clone, Copy)]
enum List {
    A,
    B,
}

/// An end of a list.
#[derive(Clone, Copy)]
enum End {
    Front,
    Back,
}

impl Iterator for Merged<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        // The list whose first key comes first (the one not empty, when the other is).
        let list = match (self.a.first(), self.b.first()) {
            (Some(&x), Some(&y)) if self.keys.key(x) < self.keys.key(y) => List::A,
            (Some(_), None) => List::A,
            _ => List::B,
        };
        self.take(list, End::Front)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.a.len() + self.b.len();
        (len, Some(len))
    }
}

impl DoubleEndedIterator for Merged<'_> {
    fn next_back(&mut self) -> Option<usize> {
        // The list whose last key comes last (the one not empty, when the other is).
        let list = match (self.a.last(), self.b.last()) {
            (Some(&x), Some(&y)) if self.keys.key(x) > self.keys.key(y) => List::A,
            (Some(_), None) => List::A,
            _ => List::B,
        };
        self.take(list, End::Back)
    }
}

impl ExactSizeIterator for Merged<'_> {}

/// A map from ids to `V`, hashed for lookups and read in key order (see the module doc).
#[derive(Clone)]
pub struct IdMap<V> {
    /// Every key's bytes, back to back, and those of removed keys until they are compacted.
    keys: String,
    /// How many bytes of `keys` no entry names.
    dead: usize,
    /// Where each entry's key is in `keys`; entry `i` is `spans[i]` and `values[i]`, in no
    /// particular order.
    spans: Vec<Span>,
    /// Each entry's value.
    values: Vec<V>,
    /// The index of each entry, by its key's hash.
    table: HashTable<usize>,
    hasher: RandomState,
    /// Indices of entries in key order: all but the newest.
    order: Vec<usize>,
    /// The newest indices, in key order, until they are merged into `order`.
    recent: Vec<usize>,
}

/// The fewest indices `recent` holds before it is merged into `order` (more when the map is
/// larger: its square root).
const RECENT_MAX_MIN: usize = 32;

/// A removal compacts `keys` when its dead bytes are more than this (and more than half of
/// it): a small map does not copy its few keys at every other removal.
const DEAD_MIN: usize = 256;

impl<V> Default for IdMap<V> {
    fn default() -> IdMap<V> {
        IdMap {
            keys: String::new(),
            dead: 0,
            spans: Vec::new(),
            values: Vec::new(),
            table: HashTable::new(),
            hasher: RandomState::default(),
            order: Vec::new(),
            recent: Vec::new(),
        }
    }
}

impl<V> IdMap<V> {
    /// An empty map.
    #[must_use]
    pub fn new() -> IdMap<V> {
        IdMap::default()
    }

    /// The keys, to read by index.
    fn read(&self) -> Keys<'_> {
        Keys {
            bytes: &self.keys,
            spans: &self.spans,
        }
    }

    /// Entry `i`'s value.
    fn value(&self, i: usize) -> &V {
        match self.values.get(i) {
            Some(value) => value,
            None => unreachable!("index {i} past the map's {} entries", self.values.len()),
        }
    }

    /// Entry `i`'s value, to change.
    fn value_mut(&mut self, i: usize) -> &mut V {
        let len = self.values.len();
        match self.values.get_mut(i) {
            Some(value) => value,
            None => unreachable!("index {i} past the map's {len} entries"),
        }
    }

    /// The index of `id`'s entry.
    fn find(&self, id: &str) -> Option<usize> {
        let keys = self.read();
        self.table
            .find(self.hasher.hash_one(id), |&i| keys.key(i) == id)
            .copied()
    }

    /// Adds `id`, which the map does not hold; returns its entry's index.
    fn push(&mut self, id: &str, value: V) -> usize {
        let index = self.spans.len();
        let at = match self.read().search(&self.recent, id) {
            Err(at) => at,
            Ok(_) => unreachable!("push is called only for a key the map does not hold"),
        };
        self.spans.push(Span {
            start: self.keys.len(),
            len: id.len(),
        });
        self.keys.push_str(id);
        self.values.push(value);
        let hash = self.hasher.hash_one(id);
        let keys = Keys {
            bytes: &self.keys,
            spans: &self.spans,
        };
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, index, |&i| hasher.hash_one(keys.key(i)));
        self.recent.insert(at, index);
        if self.recent.len() > RECENT_MAX_MIN.max(self.spans.len().isqrt()) {
            self.order = self.read().merge(&self.order, &self.recent);
            self.recent.clear();
        }
        index
    }

    /// The value of `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&V> {
        self.find(id).map(|i| self.value(i))
    }

    /// The value of `id`, to change.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        let i = self.find(id)?;
        Some(self.value_mut(i))
    }

    /// Whether `id` has a value.
    #[must_use]
    pub fn contains_key(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// Sets `id`'s value, returning the one it replaces.
    pub fn insert(&mut self, id: &str, value: V) -> Option<V> {
        match self.find(id) {
            Some(i) => Some(std::mem::replace(self.value_mut(i), value)),
            None => {
                self.push(id, value);
                None
            }
        }
    }

    /// Removes `id`, returning its value. The last entry takes its place; the key's bytes stay
    /// in `keys` until dead bytes are more than half of it and more than `DEAD_MIN`, or the
    /// map is empty.
    pub fn remove(&mut self, id: &str) -> Option<V> {
        let index = self.find(id)?;
        match self
            .table
            .find_entry(self.hasher.hash_one(id), |&i| i == index)
        {
            Ok(slot) => {
                slot.remove();
            }
            Err(_) => unreachable!("the table holds every entry's index"),
        }
        if let Ok(at) = self.read().search(&self.order, id) {
            self.order.remove(at);
        } else if let Ok(at) = self.read().search(&self.recent, id) {
            self.recent.remove(at);
        } else {
            unreachable!("the lists hold every entry's index");
        }
        let last = self.spans.len() - 1;
        let span = self.spans.swap_remove(index);
        let value = self.values.swap_remove(index);
        self.dead += span.len;
        if index != last {
            // The entry that was last is at `index` now: point its table slot and its place in
            // the lists there (its key, and so its place, is the same).
            let keys = Keys {
                bytes: &self.keys,
                spans: &self.spans,
            };
            let moved = keys.key(index);
            match self
                .table
                .find_mut(self.hasher.hash_one(moved), |&i| i == last)
            {
                Some(slot) => *slot = index,
                None => unreachable!("the table holds every entry's index"),
            }
            let renamed = |&i: &usize| keys.key(if i == last { index } else { i }).cmp(moved);
            let slot = match self.order.binary_search_by(renamed) {
                Ok(at) => self.order.get_mut(at),
                Err(_) => self
                    .recent
                    .binary_search_by(renamed)
                    .ok()
                    .and_then(|at| self.recent.get_mut(at)),
            };
            match slot {
                Some(slot) => *slot = index,
                None => unreachable!("the lists hold every entry's index"),
            }
        }
        if self.spans.is_empty() {
            self.keys.clear();
            self.dead = 0;
        } else if self.dead > DEAD_MIN && self.dead > self.keys.len() / 2 {
            self.compact();
        }
        debug_assert_eq!(self.table.len(), self.spans.len());
        debug_assert_eq!(self.values.len(), self.spans.len());
        debug_assert_eq!(self.order.len() + self.recent.len(), self.spans.len());
        debug_assert_eq!(
            self.keys.len() - self.dead,
            self.spans.iter().map(|span| span.len).sum::<usize>(),
            "dead bytes are those no span covers"
        );
        Some(value)
    }

    /// Copies the live keys into a new buffer, leaving the dead bytes behind. Indices do not
    /// change, so neither do the table and the lists.
    fn compact(&mut self) {
        let mut keys = String::with_capacity(self.keys.len() - self.dead);
        let old = &self.keys;
        for span in &mut self.spans {
            let start = keys.len();
            match old.get(span.start..span.start + span.len) {
                Some(key) => keys.push_str(key),
                None => unreachable!("a key at {}+{} is not in the keys", span.start, span.len),
            }
            span.start = start;
        }
        self.keys = keys;
        self.dead = 0;
    }

    /// The value of `id`, made by `make` when there is none; the key is copied only then.
    pub fn get_or_insert_with(&mut self, id: &str, make: impl FnOnce() -> V) -> &mut V {
        let index = match self.find(id) {
            Some(i) => i,
            None => self.push(id, make()),
        };
        self.value_mut(index)
    }

    /// The number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&str, &V)> + ExactSizeIterator {
        let keys = self.read();
        Merged::new(keys, &self.order, &self.recent).map(move |i| (keys.key(i), self.value(i)))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        let keys = self.read();
        Merged::new(keys, &self.order, &self.recent).map(move |i| keys.key(i))
    }

    /// The values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// The entries, copied into an ordered map (for a read model that shows them).
    #[must_use]
    pub fn to_ordered(&self) -> BTreeMap<String, V>
    where
        V: Clone,
    {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect()
    }
}

impl<K: AsRef<str>, V> FromIterator<(K, V)> for IdMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> IdMap<V> {
        let mut map = IdMap::new();
        for (id, value) in iter {
            map.insert(id.as_ref(), value);
        }
        map
    }
}

impl<'a, V> IntoIterator for &'a IdMap<V> {
    type Item = (&'a str, &'a V);
    type IntoIter = Box<dyn DoubleEndedIterator<Item = (&'a str, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// As an ordered map's: panics when `id` has no value (see [`IdMap::get`]).
impl<V> std::ops::Index<&str> for IdMap<V> {
    type Output = V;

    fn index(&self, id: &str) -> &V {
        match self.get(id) {
            Some(value) => value,
            None => panic!("no entry for {id:?}"),
        }
    }
}

/// As an ordered map's: the same entries.
impl<V: PartialEq> PartialEq for IdMap<V> {
    fn eq(&self, other: &IdMap<V>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<V: fmt::Debug> fmt::Debug for IdMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for IdMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        debug_assert_eq!(
            self.order.len() + self.recent.len(),
            self.len(),
            "the lists hold every entry"
        );
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (id, value) in self.iter() {
            map.serialize_entry(id, value)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for IdMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<IdMap<V>, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);

        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Entries<V> {
            type Value = IdMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from ids")
            }

            // As an ordered map reads it: a key given twice keeps its last value.
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<IdMap<V>, A::Error> {
                let mut map = IdMap::new();
                let hint = access.size_hint().unwrap_or(0).min(4096);
                map.spans.reserve(hint);
                map.values.reserve(hint);
                // The table is empty: nothing to rehash.
                map.table.reserve(hint, |_| 0);
                while let Some((id, value)) = access.next_entry::<String, V>()? {
                    map.insert(&id, value);
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

impl<V: schemars::JsonSchema> schemars::JsonSchema for IdMap<V> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        BTreeMap::<String, V>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        BTreeMap::<String, V>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        BTreeMap::<String, V>::json_schema(generator)
    }

    fn inline_schema() -> bool {
        BTreeMap::<String, V>::inline_schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An ordered map's entries with its keys as `&str`, as an `IdMap` gives them.
    fn as_str<V>(ordered: &BTreeMap<String, V>) -> impl DoubleEndedIterator<Item = (&str, &V)> {
        ordered.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// A change to a map.
    #[derive(Clone, Debug)]
    enum Change {
        Insert(String, u32),
        GetOrInsert(String, u32),
        Remove(String),
    }

    fn change() -> impl Strategy<Value = Change> {
        // Few distinct ids, so that changes meet the same keys again.
        let id = prop_oneof!["[a-d]{0,3}", "call_[0-9]{1,2}", Just("é".to_owned()),];
        prop_oneof![
            (id.clone(), any::<u32>()).prop_map(|(k, v)| Change::Insert(k, v)),
            (id.clone(), any::<u32>()).prop_map(|(k, v)| Change::GetOrInsert(k, v)),
            id.prop_map(Change::Remove),
        ]
    }

    proptest! {
        #[test]
        fn any_changes_leave_the_ordered_map_of_the_same_changes(
            changes in proptest::collection::vec(change(), 0..200)
        ) {
            let mut ordered = BTreeMap::new();
            let mut hashed = IdMap::new();
            for change in changes {
                match change {
                    Change::Insert(k, v) => {
                        prop_assert_eq!(hashed.insert(&k, v), ordered.insert(k, v));
                    }
                    Change::GetOrInsert(k, v) => {
                        prop_assert_eq!(
                            *hashed.get_or_insert_with(&k, || v),
                            *ordered.entry(k).or_insert(v)
                        );
                    }
                    Change::Remove(k) => {
                        prop_assert_eq!(hashed.remove(&k), ordered.remove(&k));
                    }
                }
                prop_assert_eq!(hashed.len(), ordered.len());
            }
            prop_assert!(hashed.iter().eq(as_str(&ordered)));
            prop_assert!(hashed.keys().rev().eq(ordered.keys().map(String::as_str).rev()));
            for (k, v) in &ordered {
                prop_assert_eq!(hashed.get(k), Some(v));
                prop_assert!(hashed.contains_key(k));
            }
            prop_assert_eq!(hashed.get("absent"), None);
            if let Some((k, v)) = ordered.iter().next() {
                prop_assert_eq!(&hashed[k.as_str()], v);
                let mut changed = hashed.clone();
                prop_assert!(changed == hashed);
                if let Some(value) = changed.get_mut(k) {
                    *value = value.wrapping_add(1);
                }
                prop_assert!(changed != hashed);
            }
            prop_assert_eq!(
                rmp_serde::to_vec(&hashed).unwrap(),
                rmp_serde::to_vec(&ordered).unwrap()
            );
            let back: IdMap<u32> = rmp_serde::from_slice(&rmp_serde::to_vec(&ordered).unwrap()).unwrap();
            prop_assert!(back == hashed);
        }
    }

    #[test]
    fn many_ids_in_no_order_stay_in_key_order_through_merges_and_removals() {
        // Enough entries for the short list to be merged many times at sizes past its minimum.
        let mut ordered = BTreeMap::new();
        let mut hashed = IdMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = format!("toolu_{:016x}", x % 50_000);
            if n % 7 == 3 {
                assert_eq!(hashed.remove(&id), ordered.remove(&id));
            } else {
                assert_eq!(hashed.insert(&id, n), ordered.insert(id, n));
            }
        }
        assert_eq!(hashed.len(), ordered.len());
        assert!(hashed.iter().eq(as_str(&ordered)));
        assert!(hashed.iter().rev().eq(as_str(&ordered).rev()));
        assert_eq!(hashed.keys().len(), ordered.len());
        // Both ends at once, as a double-ended iterator may be read.
        let mut both = hashed.keys();
        let mut expected = ordered.keys().map(String::as_str);
        while let (Some(front), Some(back)) = (both.next(), both.next_back()) {
            assert_eq!(Some(front), expected.next());
            assert_eq!(Some(back), expected.next_back());
        }
    }

    #[test]
    fn removing_most_keys_compacts_the_buffer_and_keeps_every_other_entry() {
        let mut ordered = BTreeMap::new();
        let mut hashed = IdMap::new();
        for n in 0..2_000u32 {
            let id = format!("call_{:08}", (n * 7_919) % 2_000);
            hashed.insert(&id, n);
            ordered.insert(id, n);
        }
        let full = hashed.keys.len();
        assert_eq!(full, 2_000 * "call_00000000".len());
        // Remove three in four, a few at a time between lookups and inserts of others.
        for n in 0..2_000u32 {
            if n % 4 != 0 {
                let id = format!("call_{n:08}");
                assert_eq!(hashed.remove(&id), ordered.remove(&id));
                assert!(!hashed.contains_key(&id));
            }
            let kept = format!("call_{:08}", n - n % 4);
            assert_eq!(hashed.get(&kept), ordered.get(&kept));
        }
        // The dead bytes went past half of the buffer (and its minimum): it was compacted at
        // least once, and holds no more than twice the live keys' bytes.
        let live: usize = ordered.keys().map(String::len).sum();
        assert!(hashed.keys.len() < full, "the keys were never compacted");
        assert!(hashed.keys.len() - hashed.dead == live);
        assert!(hashed.keys.len() <= 2 * live.max(DEAD_MIN));
        assert!(hashed.iter().eq(as_str(&ordered)));
        for (id, n) in &ordered {
            assert_eq!(hashed.get(id), Some(n));
        }
        // New keys after a compaction go where they belong.
        for id in ["call_00000001", "a", "zz"] {
            assert_eq!(hashed.insert(id, 9), ordered.insert(id.to_owned(), 9));
        }
        assert!(hashed.iter().eq(as_str(&ordered)));
        assert_eq!(
            rmp_serde::to_vec(&hashed).unwrap(),
            rmp_serde::to_vec(&ordered).unwrap()
        );
        // The last removal empties the buffer, whatever it held dead.
        for id in ordered.keys() {
            assert!(hashed.remove(id).is_some());
        }
        assert!(hashed.is_empty());
        assert_eq!((hashed.keys.len(), hashed.dead), (0, 0));
    }

    #[test]
    fn reads_whole_and_encodes_as_the_ordered_map_of_the_same_entries() {
        let ids: Vec<String> = (0..500)
            .map(|i| format!("call_{}", (i * 7919) % 1000))
            .chain(["", "b", "a", "ab", "é", "Z"].map(String::from))
            .collect();
        let mut ordered = BTreeMap::new();
        let mut hashed = IdMap::new();
        for (n, id) in ids.iter().enumerate() {
            ordered.insert(id.clone(), n);
            *hashed.get_or_insert_with(id, || 0) = n;
        }
        assert_eq!(hashed.len(), ordered.len());
        assert!(hashed.iter().eq(as_str(&ordered)));
        assert!(hashed
            .keys()
            .rev()
            .eq(ordered.keys().map(String::as_str).rev()));
        assert_eq!(
            rmp_serde::to_vec(&hashed).unwrap(),
            rmp_serde::to_vec(&ordered).unwrap()
        );
        assert_eq!(
            serde_json::to_string(&hashed).unwrap(),
            serde_json::to_string(&ordered).unwrap()
        );
        assert_eq!(format!("{hashed:?}"), format!("{ordered:?}"));
        let back: IdMap<usize> =
            rmp_serde::from_slice(&rmp_serde::to_vec(&ordered).unwrap()).unwrap();
        assert!(back == hashed);
        let twice: IdMap<u8> = serde_json::from_str(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        let ordered_twice: BTreeMap<String, u8> =
            serde_json::from_str(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert!(twice.iter().eq(as_str(&ordered_twice)));
        assert_eq!(
            schemars::schema_for!(IdMap<usize>),
            schemars::schema_for!(BTreeMap<String, usize>)
        );
        assert_eq!(hashed.remove("a"), ordered.remove("a"));
        assert!(!hashed.contains_key("a"));
        assert_eq!(hashed.get("b"), ordered.get("b"));
        assert_eq!(hashed.insert("b", 7), ordered.insert("b".into(), 7));
        assert_eq!(hashed.insert("aa", 8), ordered.insert("aa".into(), 8));
        assert!(hashed.iter().eq(as_str(&ordered)));
        assert!(hashed.values().rev().eq(ordered.values().rev()));
        assert_eq!(hashed.to_ordered(), ordered);
        assert_eq!(hashed.len(), ordered.len());
    }
}
