//! The in-memory map of the log: its segments, what each holds, and the committed head. The
//! writer changes it; readers take snapshots of it and never read past the committed head.

use std::sync::{Arc, RwLock};

use journal_format::{ChainHash, Position, SegmentId};
use tokio::sync::watch;

use crate::error::Error;
use crate::log::segment::Segment;

/// The newest durable (or, in buffered mode, acknowledged) event.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Its position; `Position(0)` for an empty journal.
    pub position: Position,
    /// Its chain link; [`ChainHash::GENESIS`] for an empty journal.
    pub hash: ChainHash,
}

/// Where the live log begins when older segments were archived (`archive/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Boundary {
    /// The last archived position: the live log starts after it.
    pub last_archived: Position,
    /// The chain link at the last archived position.
    pub last_hash: ChainHash,
    /// Where the archived segments were copied to (the locations the manifest names).
    pub locations: Vec<String>,
    /// Whether the archive is attached: its segments are then in the map, before the live ones.
    pub attached: bool,
}

/// The segments of the log and its head.
#[derive(Debug)]
pub(crate) struct Log {
    segments: RwLock<Vec<Arc<Segment>>>,
    head: watch::Sender<Head>,
    boundary: RwLock<Option<Boundary>>,
}

impl Log {
    pub(crate) fn new(segments: Vec<Arc<Segment>>, head: Head) -> Log {
        Log {
            segments: RwLock::new(segments),
            head: watch::Sender::new(head),
            boundary: RwLock::new(None),
        }
    }

    /// Where the live log begins, when segments were archived.
    pub(crate) fn boundary(&self) -> Option<Boundary> {
        self.boundary
            .read()
            .map(|b| b.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub(crate) fn set_boundary(&self, boundary: Option<Boundary>) {
        *self.boundary.write().unwrap_or_else(|p| p.into_inner()) = boundary;
    }

    /// The error for a read of `position` (or of segment `segment`) that the map cannot serve:
    /// [`Error::Archived`] when it lies in a detached archive, else `otherwise`.
    pub(crate) fn missing(&self, position: Position, otherwise: Error) -> Error {
        match self.boundary() {
            Some(b) if !b.attached && position <= b.last_archived && position.0 > 0 => {
                Error::Archived {
                    position,
                    last_archived: b.last_archived,
                    locations: b.locations.join(", "),
                }
            }
            _ => otherwise,
        }
    }

    /// Replaces the segments at `range` (indexes into the map, oldest first) with `insert`:
    /// segments archived, attached or restored while the journal is open.
    pub(crate) fn splice(&self, range: std::ops::Range<usize>, insert: Vec<Arc<Segment>>) {
        let mut segments = self.segments.write().unwrap_or_else(|p| p.into_inner());
        let end = range.end.min(segments.len());
        let start = range.start.min(end);
        segments.splice(start..end, insert);
    }

    pub(crate) fn head(&self) -> Head {
        *self.head.borrow()
    }

    /// A receiver that sees every new head.
    pub(crate) fn watch_head(&self) -> watch::Receiver<Head> {
        self.head.subscribe()
    }

    /// Sets the head, and tells whoever watches it.
    pub(crate) fn set_head(&self, head: Head) {
        self.head.send_replace(head);
    }

    /// Sets the head when `head` is past it.
    pub(crate) fn advance_head(&self, head: Head) {
        if head.position > self.head().position {
            self.set_head(head);
        }
    }

    /// Adds `segment` after the last.
    pub(crate) fn push(&self, segment: Arc<Segment>) {
        let mut segments = self.segments.write().unwrap_or_else(|p| p.into_inner());
        debug_assert!(
            segments.last().is_none_or(|last| last.id < segment.id),
            "segments are added in order"
        );
        segments.push(segment);
    }

    /// Replaces every segment and the head (a read-only journal that found none at open).
    pub(crate) fn replace(&self, segments: Vec<Arc<Segment>>, head: Head) {
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = segments;
        self.set_head(head);
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
