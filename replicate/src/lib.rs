//! Replication through NATS JetStream: [`publish`](mod@publish) sends every committed event of a journal to
//! a stream, in position order, one message per event carrying its stored frame;
//! [`follow`](mod@follow) builds a replica from such a stream (the same positions and hash chain), or
//! gathers several sources into one journal keeping each event's origin; [`ingest`](mod@ingest) appends
//! Agent Runtime events that producers publish to subjects.
//!
//! NATS is the transport and the replicated log; the journal stays the ground truth on each
//! side: a source is durable before anything is published, and a replica stores only frames
//! that continue its own chain.

mod cursor;
pub mod follow;
pub mod ingest;
pub mod keys;
pub mod local_cluster;
pub mod publish;
mod stream;

pub use cursor::replicated_positions;
pub use follow::{follow, follow_fleet, FollowOptions, FollowProgress, Origin};
pub use ingest::{ingest, IngestOptions};
pub use publish::{replicate, Progress, ReplicateOptions};
pub use stream::StreamLimits;

/// The header naming the journal an event comes from (its `JOURNAL_ID`).
pub const HEADER_JOURNAL: &str = "Journal-Id";
/// The header holding the event's position in its journal.
pub const HEADER_POSITION: &str = "Journal-Position";
/// The header holding the event's chain link (hex).
pub const HEADER_HASH: &str = "Journal-Hash";
/// The header holding the event's id.
pub const HEADER_EVENT_ID: &str = "Journal-Event-Id";
/// The header a dead letter gives its reason in.
pub const HEADER_REASON: &str = "Journal-Refused";

/// What can go wrong while replicating, following or ingesting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The journal refused or failed.
    #[error(transparent)]
    Journal(#[from] journal_engine::Error),
    /// NATS or JetStream failed: the operation and what the server or client said.
    #[error("NATS: {0}")]
    Nats(String),
    /// The stream exists and cannot be used as asked (it does not take the journal's subject,
    /// or takes other subjects too); retrying does not mend it.
    #[error("stream {stream}: {reason}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// Why it cannot be used, and what to do.
        reason: String,
    },
    /// A message of the stream cannot be what it claims (missing or malformed headers, a
    /// frame of another journal); the replica is left as it was.
    #[error("message {sequence} of the stream: {reason}")]
    BadMessage {
        /// Its stream sequence.
        sequence: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A file of the replication state could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;

/// A NATS error as this crate's.
pub(crate) fn nats(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Nats(format!("{what}: {e}"))
}

/// Connects to `url` (`nats://HOST:PORT`, several separated by commas), retrying the first
/// connection and reconnecting after a loss, as the client does.
///
/// # Errors
/// [`Error::Nats`] when the address cannot be used.
pub async fn connect(url: &str) -> Result<async_nats::Client> {
    let servers = url
        .split(',')
        .map(|u| u.trim().parse::<async_nats::ServerAddr>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| nats(&format!("reading the server address {url}"), e))?;
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connection_timeout(std::time::Duration::from_secs(2))
        .connect(servers)
        .await
        .map_err(|e| nats(&format!("connecting to {url}"), e))
}

/// The subject a journal's events are published on.
#[must_use]
pub fn subject_for(prefix: &str, journal_id: &str) -> String {
    format!("{prefix}.{journal_id}")
}
