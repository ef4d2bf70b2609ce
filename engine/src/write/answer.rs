//! What the writer gives back: the answer to each appended event, what it remembers of a
//! committed one, the poison flag, and the committed groups it hands the indexer.

use std::sync::{Arc, Mutex};

use journal_format::{seal, ChainHash, Envelope, Location, Position};
use serde::Serialize;

use crate::keys::Keys;
use crate::log::entries::IndexBatch;

/// What the journal assigned to one appended event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Appended {
    /// The event's position (the original one for a duplicate).
    pub position: Position,
    /// The event id (shared with the journal's own copy: answering a batch allocates nothing
    /// per event).
    pub event_id: Arc<str>,
    /// Its chain link.
    #[serde(serialize_with = "hex")]
    pub hash: ChainHash,
    /// Its version within its stream.
    pub stream_version: u64,
    /// `recordedAt`, nanoseconds since the Unix epoch.
    #[serde(skip)]
    pub recorded_at_ns: i64,
    /// Whether the event id was already stored, so nothing new was written for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// What the writer keeps of a staged or committed event for idempotency, under its event id:
/// its answer, less the id (the map's key), so that remembering an event copies its id once;
/// and where its frame is, so that a later use of the id can compare bodies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Committed {
    pub position: Position,
    pub hash: ChainHash,
    pub stream_version: u64,
    pub recorded_at_ns: i64,
    /// Where its frame is.
    pub location: Location,
}

/// Whether an append stored its event, or found it stored before (a duplicate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    Now,
    Before,
}

impl Committed {
    /// The answer to an append of `event_id`: the one that stored it, or one after it that
    /// found it stored.
    pub(crate) fn answer(self, event_id: &Arc<str>, stored: Stored) -> Appended {
        Appended {
            position: self.position,
            event_id: Arc::clone(event_id),
            hash: self.hash,
            stream_version: self.stream_version,
            recorded_at_ns: self.recorded_at_ns,
            duplicate: stored == Stored::Before,
        }
    }
}

/// Whether two stored bodies hold the same event: the same bytes, or bytes that decode to
/// equal envelopes (the same fields and values, whatever the order of the keys of a JSON
/// object a producer sent: `{"a":1,"b":2}` and `{"b":2,"a":1}` are one value). A body holds
/// only what the caller gave; the journal's own fields are in the frame header. In an
/// encrypted journal (`keys`), bodies that differ are compared opened: sealed content that
/// differs in its keys' order only, or that a stored event holds in another form (or in
/// plaintext, written before the journal was encrypted), is the same event.
pub(crate) fn same_body(stored: &[u8], new: &[u8], keys: Option<&Keys>) -> bool {
    if stored == new {
        return true;
    }
    let (Ok(mut a), Ok(mut b)) = (Envelope::from_msgpack(stored), Envelope::from_msgpack(new))
    else {
        return false;
    };
    if a == b {
        return true;
    }
    let Some(keys) = keys else {
        return false;
    };
    // Content whose key was destroyed cannot be compared: it is not the same as any other.
    let open = |e: &mut Envelope| {
        let opened = keys.open_envelope(e, None).is_ok();
        e.extra.remove(seal::UNENCRYPTED_FIELD);
        opened && !e.extra.contains_key(seal::REDACTED_FIELD)
    };
    open(&mut a) && open(&mut b) && a == b
}

fn hex<S: serde::Serializer>(hash: &ChainHash, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&hash.to_hex())
}

/// The poison flag: why the writer refuses every write until the journal is reopened, once a
/// write or sync failed. Shared by the writer, the syncer and the journal's status.
#[derive(Debug, Default)]
pub(crate) struct Poison {
    cause: Mutex<Option<String>>,
}

impl Poison {
    /// Why the writer is poisoned, if it is.
    pub(crate) fn cause(&self) -> Option<String> {
        self.cause.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `cause` as the reason the writer is poisoned (the first reason stays).
    pub(crate) fn set(&self, cause: &str) {
        self.cause
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| cause.to_string());
    }
}

/// What the writer hands the indexer after a group is durable: the group's index entries, and
/// the head after it.
#[derive(Debug)]
pub(crate) struct CommittedGroup {
    pub entries: IndexBatch,
    pub head: (Position, ChainHash),
}
