//! The in-memory map of the log: its segments, what each holds, and the committed head. The
//! writer changes it; readers take snapshots of it and never read past the committed head.

pub(crate) mod entries;
pub(crate) mod head_file;
pub(crate) mod read;
pub(crate) mod recovery;
pub(crate) mod salvage;
pub(crate) mod scan;

use std::sync::{Arc, RwLock};

use journal_format::{ChainHash, FooterEntry, Position, SegmentId};
use tokio::sync::watch;

use crate::storage::StorageFile;

/// A sparse index entry is added when a frame starts at least this many bytes after the
/// previous entry's frame.
pub(crate) const SPARSE_INTERVAL_BYTES: u64 = 64 * 1024;

/// The newest durable (or, in buffered mode, acknowledged) event.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Its position; `Position(0)` for an empty journal.
    pub position: Position,
    /// Its chain link; [`ChainHash::GENESIS`] for an empty journal.
    pub hash: ChainHash,
}

/// What a segment holds, as of the last commit.
///
/// # Invariants
/// `sparse` is strictly increasing in position and offset; `last_position + 1 ==
/// first_position` exactly when the segment holds no frame; a sealed segment never changes.
#[derive(Clone, Debug)]
pub(crate) struct SegmentState {
    pub sparse: Vec<FooterEntry>,
    pub end_offset: u64,
    pub last_position: Position,
    pub last_hash: ChainHash,
    pub sealed: bool,
}

/// Where a segment's frames end, as of the last commit: what a writer appending after them and
/// a reader bounded by them need, copied out without the sparse index (which
/// [`Segment::snapshot`] clones: up to a thousand entries in a full segment).
#[derive(Copy, Clone, Debug)]
pub(crate) struct SegmentEnd {
    pub end_offset: u64,
    pub last_position: Position,
    pub last_hash: ChainHash,
    /// The offset of the frame the last sparse index entry points at.
    pub last_sparse_offset: Option<u64>,
}

impl SegmentEnd {
    fn of(state: &SegmentState) -> SegmentEnd {
        SegmentEnd {
            end_offset: state.end_offset,
            last_position: state.last_position,
            last_hash: state.last_hash,
            last_sparse_offset: state.sparse.last().map(|e| e.offset.0),
        }
    }
}

/// One segment file.
#[derive(Debug)]
pub(crate) struct Segment {
    pub id: SegmentId,
    pub first_position: Position,
    pub prev_hash: ChainHash,
    pub file: Arc<dyn StorageFile>,
    pub state: RwLock<SegmentState>,
}

impl Segment {
    pub(crate) fn snapshot(&self) -> SegmentState {
        self.state
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Where the segment's frames end, as of the last commit.
    pub(crate) fn end(&self) -> SegmentEnd {
        SegmentEnd::of(&self.state.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Where to start scanning for `position`: the offset of the nearest indexed frame at or
    /// before it (`first_offset` when none is), that frame's position, and where the frames
    /// end, read together under one lock.
    pub(crate) fn seek(
        &self,
        first_offset: u64,
        position: Position,
    ) -> (u64, Position, SegmentEnd) {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let i = state.sparse.partition_point(|e| e.position <= position);
        let (start, at) = match i.checked_sub(1).and_then(|i| state.sparse.get(i)) {
            Some(e) => (e.offset.0, e.position),
            None => (first_offset, self.first_position),
        };
        let end = SegmentEnd::of(&state);
        (start, at, end)
    }
}

/// The segments of the log and its head.
#[derive(Debug)]
pub(crate) struct Log {
    pub segments: RwLock<Vec<Arc<Segment>>>,
    pub head: watch::Sender<Head>,
}

impl Log {
    pub(crate) fn new(segments: Vec<Arc<Segment>>, head: Head) -> Log {
        Log {
            segments: RwLock::new(segments),
            head: watch::Sender::new(head),
        }
    }

    pub(crate) fn head(&self) -> Head {
        *self.head.borrow()
    }

    pub(crate) fn segments(&self) -> Vec<Arc<Segment>> {
        self.segments
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The segment with this id, if the log has it.
    pub(crate) fn segment(&self, id: SegmentId) -> Option<Arc<Segment>> {
        let segments = self.segments.read().unwrap_or_else(|p| p.into_inner());
        let i = segments.binary_search_by_key(&id, |s| s.id).ok()?;
        segments.get(i).cloned()
    }

    /// The segment holding `position`, if any.
    pub(crate) fn segment_of(&self, position: Position) -> Option<Arc<Segment>> {
        let segments = self.segments.read().unwrap_or_else(|p| p.into_inner());
        let i = segments.partition_point(|s| s.first_position <= position);
        i.checked_sub(1).and_then(|i| segments.get(i)).cloned()
    }
}
