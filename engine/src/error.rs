//! The engine's error type. Variants say what the caller can do: fix the input, retry on a new
//! state, reopen, or inspect corruption at the place named.

use std::io;
use std::path::PathBuf;

use journal_format::{EnvelopeError, Position, SegmentId};
use thiserror::Error;

/// Everything that can go wrong in the engine.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what was being done.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What the engine was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes are damaged: the place and what is wrong. Nothing was repaired.
    #[error("corruption in segment {segment} at byte offset {offset}{}: {detail}",
        .position.map(|p| format!(" (position {p})")).unwrap_or_default())]
    Corruption {
        /// The segment file.
        segment: SegmentId,
        /// The byte offset of the damaged structure in that file.
        offset: u64,
        /// The position concerned, when known.
        position: Option<Position>,
        /// What is wrong.
        detail: String,
    },
    /// The log does not hold what the journal's evidence of its past says it held (`HEAD`, or
    /// the index's head): history was lost or rewritten. Nothing was repaired; opening with
    /// salvage accepts the log as it is and records that it did.
    #[error("history lost or rewritten: {detail} (evidence: {evidence}; open with --salvage to accept the log as it is)")]
    HistoryMismatch {
        /// Which file holds the evidence (`HEAD`, `index.redb`).
        evidence: String,
        /// The first position concerned.
        position: Position,
        /// What the evidence says and what the log holds.
        detail: String,
    },
    /// An event is malformed; nothing of the request was written.
    #[error("invalid event{}: {source}", .index.map(|i| format!(" #{i} of the batch")).unwrap_or_default())]
    InvalidEvent {
        /// The event's 0-based index in its batch, when the request was a batch.
        index: Option<usize>,
        /// What is wrong.
        #[source]
        source: EnvelopeError,
    },
    /// A request is malformed in a way that is not about one event.
    #[error("invalid request: {0}")]
    InvalidInput(String),
    /// A named limit was exceeded; nothing of the request was written.
    #[error("{what} is {actual}, over the limit of {limit}")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// The size of the request.
        actual: u64,
        /// The configured limit.
        limit: u64,
    },
    /// One event of a request is larger than the event size limit; nothing was written.
    #[error(
        "event #{index} ({event_id}) is {size} bytes stored, over the event size limit of {limit}"
    )]
    EventTooLarge {
        /// The event's 0-based index in its batch.
        index: usize,
        /// Its id.
        event_id: String,
        /// Its stored size in bytes.
        size: u64,
        /// The configured limit (`Limits::event_bytes_max`).
        limit: u64,
    },
    /// The expected stream version did not match; nothing was written.
    #[error("stream version conflict on {stream}: expected {expected}, actual {actual}")]
    Conflict {
        /// The stream key.
        stream: String,
        /// The version the caller expected.
        expected: u64,
        /// The stream's current version.
        actual: u64,
    },
    /// An event reuses an event id with a different body: an id names one event (as an
    /// idempotency key does), so the batch was refused and nothing of it was written. The same
    /// id with the same body is a duplicate instead, answered with the original.
    #[error("event #{index} of the batch reuses event id {event_id} with a different body than {}; \
        an event id names one event: give a changed event a new id",
        .position.map_or_else(|| "an earlier event of the same batch".to_string(),
            |p| format!("the event stored at position {p}")))]
    IdReused {
        /// The event id.
        event_id: String,
        /// The refused event's 0-based index in its batch.
        index: usize,
        /// Where the id's event is stored; `None` when the earlier use is in the same batch.
        position: Option<Position>,
    },
    /// A write or sync failed earlier; the writer refuses all writes until the journal is
    /// reopened (the state of unsynced bytes is unknown, so retrying would be unsafe).
    #[error("the journal writer is poisoned by an earlier failure ({0}); reopen the journal")]
    Poisoned(String),
    /// An invariant of the engine itself broke (a bug, not a fault of the request or of the
    /// disk); nothing of the request was written.
    #[error("internal error: {0}; nothing of this request was written (please report it)")]
    Internal(String),
    /// The journal was opened read-only.
    #[error("the journal is open read-only")]
    ReadOnly,
    /// The journal is closed.
    #[error("the journal is closed")]
    Closed,
    /// Another process holds the journal's lock.
    #[error("the journal at {0} is locked by another process")]
    Locked(PathBuf),
    /// The derived index failed; the log is unaffected and the index is rebuilt on reopen.
    #[error("index error: {0}")]
    Index(String),
    /// The Merkle tree does not hold what was asked of it, or failed; the log is unaffected
    /// and the tree is rebuilt from it on reopen.
    #[error("Merkle tree: {0}")]
    Tree(String),
    /// A frame copied from another journal ([`crate::Journal::append_frames`]) does not
    /// continue this log: a damaged frame, a gap, or a link that does not chain. Nothing of the
    /// request was written.
    #[error("the frame at position {position} was refused: {reason}")]
    FrameRefused {
        /// The position the frame holds (or, for a damaged header, claims).
        position: Position,
        /// What does not hold.
        reason: String,
    },
    /// The key store is not whole, a key in it does not unwrap with the master key, or sealed
    /// content does not open with its key (its bytes were altered): stored data is damaged.
    #[error("encryption keys: {0}")]
    Keys(String),
    /// The position lies in segments moved to an archive that is not attached.
    #[error("position {position} is archived (positions 1..={last_archived} were moved to {locations}); attach the archive (--archive DIR, or Options::archive) to read it")]
    Archived {
        /// The position asked for.
        position: Position,
        /// The last archived position: the live log starts after it.
        last_archived: Position,
        /// Where the archived segments are.
        locations: String,
    },
    /// The journal directory holds a format this build cannot read.
    #[error("unsupported journal format: {0}")]
    Unsupported(String),
}

/// A `Result` with the engine's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with what the engine was doing.
    pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            context: context.to_owned(),
            source,
        }
    }

    /// Wraps an I/O error with what the engine was doing, said by `context`, which runs only
    /// when there is an error: a context that names a file or an offset is formatted on the
    /// failure path, not on every write and read (a `format!` per commit is a noticeable part of
    /// a single append).
    pub(crate) fn io_with(context: impl FnOnce() -> String) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            context: context(),
            source,
        }
    }

    /// Whether this error reports damaged stored data.
    #[must_use]
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corruption { .. } | Error::HistoryMismatch { .. } | Error::Keys(_)
        )
    }
}

impl From<redb::Error> for Error {
    fn from(e: redb::Error) -> Error {
        Error::Index(e.to_string())
    }
}

macro_rules! index_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Index(e.to_string())
            }
        }
    )*};
}
index_error_from!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);
