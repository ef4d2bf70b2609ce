//! What one frame of the log tells the index about its event: position, ids, stream version
//! and where the frame lies. The writer makes them as it frames a commit, a catch-up as it
//! re-reads the log, and `verify` to check the index against the log.

use journal_format::merkle::TreeHash;
use journal_format::{Location, Position, SegmentId, StoredEvent};

use crate::strings::{Span, Strings};

/// What the index records about one event, its ids held as `Id`: borrowed (an [`IndexEntry`]),
/// as spans of an [`IndexBatch`]'s strings, or owned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry<Id> {
    pub position: Position,
    pub event_id: Id,
    pub stream_key: Id,
    pub stream_version: u64,
    pub task: Option<Id>,
    pub run: Option<Id>,
    /// Where the frame lies.
    pub location: Location,
    /// Where the frame ends in its segment.
    pub end_offset: u64,
}

/// An entry whose ids are borrowed (from an [`IndexBatch`], a body or an envelope): what
/// [`Index::apply`] takes.
pub(crate) type IndexEntry<'a> = Entry<&'a str>;

impl<Id> Entry<Id> {
    /// The same entry with each id turned by `f`, in the order event id, stream key, task,
    /// run.
    pub(crate) fn map_ids<'s, T>(&'s self, mut f: impl FnMut(&'s Id) -> T) -> Entry<T> {
        Entry {
            position: self.position,
            event_id: f(&self.event_id),
            stream_key: f(&self.stream_key),
            stream_version: self.stream_version,
            task: self.task.as_ref().map(&mut f),
            run: self.run.as_ref().map(&mut f),
            location: self.location,
            end_offset: self.end_offset,
        }
    }
}

/// Index entries that own their ids, all of them in one buffer: what the writer hands the
/// indexer after a commit, and what a catch-up from the log gathers.
#[derive(Debug, Default)]
pub(crate) struct IndexBatch {
    ids: Strings,
    /// Each entry, its ids as spans of `ids`, its event id pushed first.
    entries: Vec<Entry<Span>>,
    /// Each entry's Merkle leaf hash when it was hashed where its body was encoded (the tree
    /// then needs no read of the body); as long as `entries`.
    leaves: Vec<Option<TreeHash>>,
}

impl IndexBatch {
    /// Adds `entry`, copying its ids.
    pub(crate) fn push(&mut self, entry: &IndexEntry<'_>) {
        self.push_with_leaf(entry, None);
    }

    /// Adds `entry` and its event's leaf hash, when known.
    pub(crate) fn push_with_leaf(&mut self, entry: &IndexEntry<'_>, leaf: Option<TreeHash>) {
        let spans = entry.map_ids(|id| self.ids.push(id));
        self.entries.push(spans);
        self.leaves.push(leaf);
    }

    /// Each entry's position and leaf hash, when known, in the order they were pushed.
    pub(crate) fn leaves(&self) -> impl Iterator<Item = (Position, Option<TreeHash>)> + '_ {
        debug_assert_eq!(self.entries.len(), self.leaves.len());
        self.entries
            .iter()
            .zip(&self.leaves)
            .map(|(entry, leaf)| (entry.position, *leaf))
    }

    /// Room for `entries` more entries of `bytes` of ids in all.
    pub(crate) fn reserve(&mut self, entries: usize, bytes: usize) {
        self.entries.reserve(entries);
        self.leaves.reserve(entries);
        self.ids.reserve(bytes);
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bytes its entries' ids take.
    #[cfg(test)]
    pub(crate) fn id_bytes(&self) -> usize {
        self.ids.len()
    }

    /// Entry `i`.
    #[cfg(test)]
    pub(crate) fn get(&self, i: usize) -> Option<IndexEntry<'_>> {
        self.entries
            .get(i)
            .map(|spans| spans.map_ids(|id| self.ids.get(*id)))
    }

    /// The entries in the order they were pushed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = IndexEntry<'_>> {
        self.entries
            .iter()
            .map(|spans| spans.map_ids(|id| self.ids.get(*id)))
    }

    /// Keeps the first `len` entries (and their ids) only.
    pub(crate) fn truncate(&mut self, len: usize) {
        if let Some(first_gone) = self.entries.get(len) {
            // An entry's ids are pushed after those of the entries before it, its event id
            // first.
            self.ids.truncate(first_gone.event_id.start());
            self.entries.truncate(len);
            self.leaves.truncate(len);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.entries.clear();
        self.leaves.clear();
    }
}

/// The index entry of a stored event at a location, given its stream key.
pub(crate) fn index_entry<'a>(
    event: &'a StoredEvent,
    stream_key: &'a str,
    segment: SegmentId,
    offset: u64,
    end_offset: u64,
) -> IndexEntry<'a> {
    let e = &event.envelope;
    IndexEntry {
        position: event.position,
        event_id: &e.event_id,
        stream_key,
        stream_version: event.stream_version,
        task: e.task_id.as_deref(),
        run: e.run_id.as_deref(),
        location: Location::new(segment, offset),
        end_offset,
    }
}
