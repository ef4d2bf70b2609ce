//! [`WorkerError`]: what stops a projection worker or a build by partition (the journal or the
//! store failed), as opposed to a projection's own fault applying an event.

use crate::store::StoreError;

/// A worker error: the journal or the store failed (a projection's own failure to apply an
/// event is not an error but a fault, see [`Fault`](crate::projection::Fault)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Reading the journal failed.
    #[error("reading the journal for projection {projection}: {source}")]
    Journal {
        /// The projection.
        projection: &'static str,
        /// The error.
        source: journal_engine::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A build by partition could not write or read its scratch files
    /// ([`crate::partition`]'s notes of where each partition's frames are).
    #[error("the build's scratch files in {}: {context}: {source}", dir.display())]
    Scratch {
        /// The directory holding them.
        dir: std::path::PathBuf,
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// A stored state could not be decoded or a state could not be encoded.
    #[error("projection {projection}, key {key}: {message}")]
    Codec {
        /// The projection.
        projection: &'static str,
        /// The key.
        key: String,
        /// What failed.
        message: String,
    },
}
