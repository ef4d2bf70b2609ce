//! What recovery reports: the actions it took opening the log, and the damage it found with
//! its place.

use journal_format::{Position, SegmentId};
use serde::Serialize;

use crate::error::Error;

/// What recovery did when the journal was opened.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RecoveryReport {
    /// How many segment files were found.
    pub segments: usize,
    /// How many bytes of the unsealed tail were scanned.
    pub tail_bytes_scanned: u64,
    /// What was repaired or moved aside; empty after a clean shutdown.
    pub actions: Vec<RecoveryAction>,
}

/// One thing recovery did.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The final write was torn (a crash during an unacknowledged write): its bytes were cut
    /// from the log and kept in `saved_to`.
    TornTailCut {
        /// The segment file name.
        segment: String,
        /// Where the cut starts.
        offset: u64,
        /// How many bytes were cut.
        bytes: u64,
        /// Complete frames of an unfinished batch that were cut with it, as `[first, last]`.
        positions: Option<[u64; 2]>,
        /// What was found at the cut.
        detail: String,
        /// Where the cut bytes were kept.
        saved_to: Option<String>,
    },
    /// A segment file whose creation did not complete (no valid header, no frames) was removed.
    IncompleteSegmentRemoved {
        /// The segment file name.
        segment: String,
        /// Its length.
        bytes: u64,
    },
    /// Salvage: damaged bytes (and everything after them) were moved aside.
    Quarantined {
        /// The segment file name where the damage starts.
        segment: String,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong there.
        detail: String,
        /// The files the bytes were moved to.
        files: Vec<String>,
        /// The positions of the readable frames among the moved bytes, as `[first, last]`.
        positions: Option<[u64; 2]>,
        /// How many readable frames the moved bytes hold.
        readable_frames: u64,
    },
    /// Salvage: the log contradicts the journal's evidence of its past (`HEAD` or the index's
    /// head: history lost or rewritten) and was accepted as it is.
    HistoryAccepted {
        /// The file holding the evidence.
        evidence: String,
        /// The first position concerned.
        position: u64,
        /// What the evidence records and what the log holds.
        detail: String,
    },
    /// Salvage: a segment that had lost its footer, whose frames all hold and which the next
    /// segment continues, was sealed again.
    Resealed {
        /// The segment file name.
        segment: String,
        /// Its last position.
        last_position: u64,
    },
    /// The index was cleared and rebuilt from the log.
    IndexRebuilt {
        /// Why.
        reason: String,
    },
    /// The index lagged the log (normal after a crash) and was caught up.
    IndexCaughtUp {
        /// The first position indexed.
        from: u64,
        /// The last position indexed.
        to: u64,
    },
    /// The Merkle tree was set aside and is built again from the log.
    TreeRebuilt {
        /// Why.
        reason: String,
    },
    /// Segments the archive manifest lists were still in the live log (an archive interrupted
    /// after its manifest was written, or a restore before it was): the live copies were
    /// removed, the archived ones being listed and synced.
    ArchiveCompleted {
        /// The segment file names removed from `segments/`.
        segments: Vec<String>,
    },
    /// Segments the archive manifest lists were still in the live log, but their archived
    /// copies were missing or not whole (an archive interrupted before its copies were
    /// durable, the archive directory lost): they were taken out of the manifest and stay live.
    ArchiveRolledBack {
        /// The segment file names kept live.
        segments: Vec<String>,
    },
}

/// Damage found while opening, with its place.
#[derive(Debug)]
pub(crate) struct Damage {
    pub(crate) segment: SegmentId,
    pub(crate) offset: u64,
    pub(crate) position: Option<Position>,
    pub(crate) detail: String,
    /// Not damage after all: an I/O failure while reading or repairing at this place.
    pub(crate) io: bool,
    /// Row 3: a segment that is not the last has no valid footer (its frames may all hold).
    pub(crate) unsealed: bool,
}

impl Damage {
    /// Damage in segment `segment` at `offset`, where position `position` belongs.
    pub(crate) fn at(
        segment: SegmentId,
        offset: u64,
        position: Option<Position>,
        detail: String,
    ) -> Damage {
        Damage {
            segment,
            offset,
            position,
            detail,
            io: false,
            unsealed: false,
        }
    }

    /// A failure to read or repair segment `segment` at `offset`.
    pub(crate) fn io_failure(segment: SegmentId, offset: u64, detail: String) -> Damage {
        Damage {
            segment,
            offset,
            position: None,
            detail,
            io: true,
            unsealed: false,
        }
    }

    /// The error that refuses to open the log for this damage.
    pub(crate) fn into_error(self) -> Error {
        if self.io {
            return Error::Io {
                context: format!(
                    "recovering segment {} at offset {}",
                    self.segment, self.offset
                ),
                source: std::io::Error::other(self.detail),
            };
        }
        Error::Corruption {
            segment: self.segment,
            offset: self.offset,
            position: self.position,
            detail: self.detail,
        }
    }
}
