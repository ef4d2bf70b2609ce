//! [`IdMap`]: the folds' maps from an id to what is known of it (calls, tasks, actions, turns),
//! hashed for the lookups that nearly every event makes, and read whole in the order of their
//! keys, as an ordered map is read.
//!
//! An ordered map of `String` keys (`BTreeMap`) finds a key by comparing it with up to a dozen
//! others, each of whose bytes sit behind a pointer: in a session with thousands of calls that
//! is a cache miss per comparison, and it was the largest single cost of the folds
//! (`docs/PERFORMANCE.md`). A hashed map finds it with one hash and one comparison.
//!
//! The keys are also kept in order (a `BTreeSet`, touched only when a key is added or
//! removed), so that reading the map whole walks them in order, as an ordered map does, without
//! sorting: a worker encodes a stream's whole state at each commit, and for a live journal that
//! is after nearly every event.
//!
//! **Invariants:** the ordered keys are exactly the hashed map's keys. Nothing outside this
//! module sees the hashed order: iteration, the stored (MessagePack) and JSON forms, the JSON
//! schema and equality are those of a `BTreeMap<String, V>` holding the same entries, so stored
//! states, read models and their digests do not change with the container (a test compares the
//! encodings).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use foldhash::fast::RandomState;
use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// A map from ids to `V`, hashed for lookups and read in key order (see the module doc).
#[derive(Clone, PartialEq)]
pub struct IdMap<V> {
    map: hashbrown::HashMap<String, V, RandomState>,
    /// The keys of `map`, in order.
    order: BTreeSet<String>,
}

impl<V> Default for IdMap<V> {
    fn default() -> IdMap<V> {
        IdMap {
            map: hashbrown::HashMap::with_hasher(RandomState::default()),
            order: BTreeSet::new(),
        }
    }
}

impl<V> IdMap<V> {
    /// An empty map.
    #[must_use]
    pub fn new() -> IdMap<V> {
        IdMap::default()
    }

    /// The value of `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&V> {
        self.map.get(id)
    }

    /// The value of `id`, to change.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        self.map.get_mut(id)
    }

    /// Whether `id` has a value.
    #[must_use]
    pub fn contains_key(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    /// Sets `id`'s value, returning the one it replaces.
    pub fn insert(&mut self, id: String, value: V) -> Option<V> {
        match self.map.entry(id) {
            hashbrown::hash_map::Entry::Occupied(mut entry) => Some(entry.insert(value)),
            hashbrown::hash_map::Entry::Vacant(entry) => {
                self.order.insert(entry.key().clone());
                entry.insert(value);
                None
            }
        }
    }

    /// Removes `id`, returning its value.
    pub fn remove(&mut self, id: &str) -> Option<V> {
        self.order.remove(id);
        self.map.remove(id)
    }

    /// The value of `id`, made by `make` when there is none; the key is allocated only then.
    pub fn get_or_insert_with(&mut self, id: &str, make: impl FnOnce() -> V) -> &mut V {
        match self.map.entry_ref(id) {
            hashbrown::hash_map::EntryRef::Occupied(entry) => entry.into_mut(),
            hashbrown::hash_map::EntryRef::Vacant(entry) => {
                self.order.insert(id.to_owned());
                entry.insert(make())
            }
        }
    }

    /// The number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &V)> {
        self.order
            .iter()
            .filter_map(|id| self.map.get_key_value(id.as_str()))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.order.iter()
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
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl<V> FromIterator<(String, V)> for IdMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> IdMap<V> {
        let mut map = IdMap::new();
        for (id, value) in iter {
            map.insert(id, value);
        }
        map
    }
}

impl<'a, V> IntoIterator for &'a IdMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = Box<dyn DoubleEndedIterator<Item = (&'a String, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// As an ordered map's: panics when `id` has no value (see [`IdMap::get`]).
impl<V> std::ops::Index<&str> for IdMap<V> {
    type Output = V;

    fn index(&self, id: &str) -> &V {
        match self.map.get(id) {
            Some(value) => value,
            None => panic!("no entry for {id:?}"),
        }
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
            self.order.len(),
            self.map.len(),
            "the ordered keys are the map's"
        );
        let mut map = serializer.serialize_map(Some(self.map.len()))?;
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
                map.map.reserve(access.size_hint().unwrap_or(0).min(4096));
                while let Some((id, value)) = access.next_entry::<String, V>()? {
                    map.insert(id, value);
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
        assert!(hashed.iter().eq(ordered.iter()));
        assert!(hashed.keys().rev().eq(ordered.keys().rev()));
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
        assert!(twice.iter().eq(ordered_twice.iter()));
        assert_eq!(
            schemars::schema_for!(IdMap<usize>),
            schemars::schema_for!(BTreeMap<String, usize>)
        );
        assert_eq!(hashed.remove("a"), ordered.remove("a"));
        assert!(!hashed.contains_key("a"));
        assert_eq!(hashed.get("b"), ordered.get("b"));
        assert_eq!(hashed.insert("b".into(), 7), ordered.insert("b".into(), 7));
        assert_eq!(
            hashed.insert("aa".into(), 8),
            ordered.insert("aa".into(), 8)
        );
        assert!(hashed.iter().eq(ordered.iter()));
        assert!(hashed.values().rev().eq(ordered.values().rev()));
        assert_eq!(hashed.to_ordered(), ordered);
        assert_eq!(hashed.len(), ordered.len());
    }
}
