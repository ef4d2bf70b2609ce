//! The journal engine: an append-only, segmented log of checksummed, hash-chained event
//! envelopes, with durable group-committed appends, crash recovery, a derived redb index,
//! subscriptions, a blob store and `verify`.
//!
//! NOTE: the log is the single source of truth. The index is derived from it, may lag it, and
//! is rebuilt from it; read models (the `projections` crate) are derived from the log too, and
//! read it only through this crate's public API. Byte layouts live in `journal-format`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), journal_engine::Error> {
//! use journal_engine::{Journal, Options};
//! use journal_format::Envelope;
//!
//! let journal = Journal::open("./journal-data", Options::default())?;
//! let mut event = Envelope::new("session.created", "", "2026-05-11T10:00:00Z");
//! event.session_id = Some("sess_1".into());
//! let appended = journal.append(event).await?; // durable when this returns
//! println!("stored at position {}", appended.position);
//! # Ok(()) }
//! ```

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod archive;
mod blobs;
mod checkpoints;
mod error;
mod evidence;
mod index;
pub mod input;
mod journal;
mod keys;
mod log;
mod options;
mod progress;
pub mod seams;
mod signal;
pub mod sim_disk;
pub mod storage;
mod strings;
mod subscribe;
mod tree;
mod verify;
mod write;

pub use archive::{ArchiveOutcome, Retention};
pub use blobs::{BlobCheck, BlobStore, BLOB_BYTES_MAX};
pub use checkpoints::CheckpointPolicy;
pub use error::{Error, Result};
pub use index::By;
pub use journal::append::AppendOptions;
pub use journal::archive::ArchiveRequest;
pub use journal::proofs::TreeHead;
pub use journal::query::{Filter, Query};
pub use journal::redact::{Redacted, Redaction};
pub use journal::{Journal, Status};
pub use keys::{Encryption, MasterKey, Subject, MASTER_KEY_ENV};
pub use log::read::{Chain, EventIter, FrameAt, FrameReader, Record};
pub use log::report::{RecoveryAction, RecoveryReport};
pub use log::Head;
pub use options::{Durability, Limits, Options};
pub use subscribe::Subscription;
pub use verify::{ArchiveCheck, Problem, VerifyOptions, VerifyReport};
pub use write::answer::Appended;
