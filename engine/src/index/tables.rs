//! The index's redb tables, the keys of its metadata, how a location is stored, and the guard
//! every redb call runs under.

use std::path::Path;

use journal_format::{Located, Position, SegmentId};
use redb::TableDefinition;

use crate::error::{Error, Result};

/// The index file inside the journal directory.
pub(crate) const INDEX_FILE: &str = "index.redb";

/// An event id's fixed-width key: a tag byte, then 16 bytes.
pub(crate) type IdKey = [u8; ID_KEY_LEN];
pub(crate) const ID_KEY_LEN: usize = 17;

/// A [`Located`] as the index's tables store it: (position, segment, offset).
pub(crate) type Row = (u64, u64, u64);

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Event ids with a fixed-width key (see [`id_key`]) of applies whose ids did not grow →
/// location.
pub(crate) const EVENT_ID_KEYS: TableDefinition<&IdKey, Row> =
    TableDefinition::new("event_id_keys");
/// Event ids with a fixed-width key of applies whose ids grew from after every id indexed, in
/// blocks ([`crate::index::id_blocks`]): first key → block.
pub(crate) const EVENT_ID_BLOCKS: TableDefinition<&IdKey, &[u8]> =
    TableDefinition::new("event_id_blocks");
/// Every other event id → location.
pub(crate) const OTHER_EVENT_IDS: TableDefinition<&str, Row> =
    TableDefinition::new("other_event_ids");
/// (stream key, first stream version) → block.
pub(crate) const STREAMS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("streams");
/// (task id, first position) → block.
pub(crate) const BY_TASK: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("by_task");
/// (run id, first position) → block.
pub(crate) const BY_RUN: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("by_run");
pub(crate) const SPARSE: TableDefinition<u64, (u64, u64)> = TableDefinition::new("sparse");

/// The key of the index's head in `META` (see [`Checkpoint`]).
pub(crate) const INDEXED_KEY: &str = "indexed";
/// The version of the index layout; a different stored version means rebuild.
pub(crate) const LAYOUT_KEY: &str = "layout";
pub(crate) const LAYOUT_VERSION: u64 = 5;

/// Runs `f` on the index, turning a panic inside redb (what some damaged pages cause) into
/// [`Error::Index`] naming the damage. It leaves `marker` behind, so that the next open that may
/// write deletes the index and rebuilds it from the log. The index is derived: its damage never
/// stops the log being read.
pub(crate) fn guard<T>(marker: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| String::from("a panic inside redb"));
            if let Err(e) = std::fs::write(marker, why.as_bytes()) {
                tracing::warn!(error = %e, "cannot leave the index's damage marker");
            }
            tracing::error!(%why, "the index is damaged");
            Err(Error::Index(format!(
                "{INDEX_FILE} is damaged ({why}); it is rebuilt from the log at the next open that may write"
            )))
        }
    }
}

/// The [`Located`] a table row holds.
pub(crate) fn located((position, segment, offset): Row) -> Located {
    Located::new(Position(position), SegmentId(segment), offset)
}
