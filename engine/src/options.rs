//! Options of [`crate::Journal::open`]: durability, limits, salvage, and the seams (storage,
//! clock, entropy) that a simulation replaces.

use std::sync::Arc;
use std::time::Duration;

use journal_format::conformance::Schema;
use journal_format::{FRAME_BODY_LEN_MAX, SEGMENT_HEADER_LEN};

use crate::checkpoints::CheckpointPolicy;
use crate::error::{Error, Result};
use crate::seams::{Clock, Entropy, SystemClock, SystemEntropy};
use crate::storage::{FsStorage, Storage};

/// When an append is acknowledged.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The default: an append returns only once its bytes are on stable storage (`fdatasync`).
    /// Concurrent appends share one write and one sync (group commit).
    Durable,
    /// An append returns once its bytes are written to the operating system; they are synced
    /// at least every `sync_interval`. Loss window: a power failure or kernel crash loses what
    /// was acknowledged in the last `sync_interval`; a crash of the process alone loses nothing.
    Buffered {
        /// The longest time acknowledged bytes stay unsynced.
        sync_interval: Duration,
    },
}

/// Named limits. Exceeding one is an error that names it; nothing of the request is written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest stored event body, in bytes (default 1 MiB).
    pub event_bytes_max: u32,
    /// The most events in one atomic batch (default 10,000).
    pub batch_events_max: usize,
    /// The largest atomic batch, in stored bytes (default 16 MiB).
    pub batch_bytes_max: u64,
    /// The size at which a segment is sealed and a new one started (default 64 MiB): a batch
    /// that would take a segment's frames past it goes into a new segment. The footer written
    /// at sealing follows the frames, so a sealed file is slightly larger.
    pub segment_bytes_max: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            event_bytes_max: 1024 * 1024,
            batch_events_max: 10_000,
            batch_bytes_max: 16 * 1024 * 1024,
            segment_bytes_max: 64 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// Checks a batch against the limits without a journal, as an append would: the number of
    /// events, each event's stored size, and the batch's stored size. Lets a caller refuse bad
    /// input before opening anything.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`], [`Error::EventTooLarge`] or [`Error::InvalidEvent`].
    pub fn check_batch(
        &self,
        events: &[journal_format::Envelope],
        conformance: Option<Schema>,
    ) -> Result<()> {
        let sizes = events.iter().enumerate().map(|(i, e)| {
            check_fact(e, conformance).map_err(|source| Error::InvalidEvent {
                index: Some(i),
                source,
            })?;
            let body = e.to_msgpack().map_err(|source| Error::InvalidEvent {
                index: Some(i),
                source,
            })?;
            Ok((e.event_id.as_str(), body.len() as u64))
        });
        let sizes: Vec<(&str, u64)> = sizes.collect::<Result<_>>()?;
        self.check_sizes(&sizes)
    }

    /// The limit checks on `(event id, stored body size)` pairs.
    pub(crate) fn check_sizes(&self, sizes: &[(&str, u64)]) -> Result<()> {
        if sizes.len() > self.batch_events_max {
            return Err(Error::LimitExceeded {
                what: "batch length (events)",
                actual: sizes.len() as u64,
                limit: self.batch_events_max as u64,
            });
        }
        let mut total = 0u64;
        for (index, (event_id, size)) in sizes.iter().enumerate() {
            if *size > u64::from(self.event_bytes_max) {
                return Err(Error::EventTooLarge {
                    index,
                    event_id: (*event_id).to_string(),
                    size: *size,
                    limit: u64::from(self.event_bytes_max),
                });
            }
            total += size + journal_format::FRAME_HEADER_LEN as u64;
        }
        if total > self.batch_bytes_max {
            return Err(Error::LimitExceeded {
                what: "batch size (stored bytes)",
                actual: total,
                limit: self.batch_bytes_max,
            });
        }
        Ok(())
    }
}

/// The checks of a new fact: well-formed ([`journal_format::Envelope::validate_fact`]) and, in
/// strict mode, conforming to `conformance`.
pub(crate) fn check_fact(
    event: &journal_format::Envelope,
    conformance: Option<Schema>,
) -> std::result::Result<(), journal_format::EnvelopeError> {
    event.validate_fact()?;
    if let Some(schema) = conformance {
        schema.check(&event.to_json_value())?;
    }
    Ok(())
}

/// How [`crate::Journal::open`] behaves.
#[derive(Clone, Debug)]
pub struct Options {
    /// When appends are acknowledged.
    pub durability: Durability,
    /// Size limits.
    pub limits: Limits,
    /// Open even when damage is found outside the torn tail, moving the damaged part aside into
    /// `quarantine/` and reporting which positions it holds. Off by default: damage refuses to
    /// open.
    pub salvage: bool,
    /// Open without writing anything and without the lock, beside a process that has the
    /// journal open for writing: no recovery repairs, no index (filtered reads scan the log),
    /// no appends. [`crate::Journal::refresh`] picks up what the writer appended since.
    pub read_only: bool,
    /// Strict mode: every appended event must also conform to this Agent Runtime JSON Schema
    /// (`Schema::Event` or the stricter `Schema::LimeEvent`). Off by default: the journal
    /// records any well-formed fact, vendor types included (docs/MODEL.md §4).
    pub conformance: Option<Schema>,
    /// Zero-fill the tail segment ahead of its frames (2 MiB ahead, or twice the last write when
    /// that is more, a mebibyte at a time) on a thread of its own, and sync the zeros in
    /// durable mode. On by default: on ext4 and XFS a write that extends a file makes
    /// `fdatasync` also commit the file's new size through the file system's journal, while a
    /// write into space already written flushes its own bytes only. Turn off on copy-on-write file systems (btrfs, ZFS), where writing zeros ahead
    /// gains nothing, and in simulations that must replay exactly: the filler's writes happen
    /// when its thread runs.
    pub preallocate: bool,
    /// Keep the Merkle tree over the events (`tree/`), for inclusion and consistency proofs and
    /// tree heads in digests. On by default; off, the journal keeps no tree (nothing is
    /// deleted) and proofs are refused, and the next open with it on grows it from the log.
    pub tree: bool,
    /// Sign checkpoints of the tree head by itself, with this policy's key, every so many
    /// events or so much time (and at close); `None` (the default): only on request
    /// ([`crate::Journal::sign_checkpoint`]).
    pub checkpoints: Option<CheckpointPolicy>,
    /// Where bytes go.
    pub storage: Arc<dyn Storage>,
    /// The journal's clock, for `recordedAt` and UUID v7 ids.
    pub clock: Arc<dyn Clock>,
    /// Randomness, for UUID v7 ids, data keys and their wrapping.
    pub entropy: Arc<dyn Entropy>,
    /// Encrypt events' content at rest (docs/REDACTION.md): given to a journal without a key
    /// store, it makes one, and events appended from then on are sealed; a journal with a key
    /// store needs it to open for writing, and to read content. `None` by default.
    pub encryption: Option<crate::keys::Encryption>,
    /// A replica (docs/REPLICATION.md): written only with frames copied from its source
    /// ([`crate::Journal::append_frames`]) and given its source's key store
    /// ([`crate::Journal::install_key_store`]), so an encrypted one opens for writing without
    /// its master key: it seals nothing. Off by default.
    pub replica: bool,
    /// The archive directory the journal's archived segments were moved to
    /// (docs/ARCHIVE.md): attached, reads, replay, proofs and rebuilds reach the archived
    /// positions, and `verify` checks the archived files. `None` (the default): the live log
    /// starts at the archive's boundary, and a read before it is [`crate::Error::Archived`].
    pub archive: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            durability: Durability::Durable,
            limits: Limits::default(),
            salvage: false,
            read_only: false,
            conformance: None,
            preallocate: true,
            tree: true,
            checkpoints: None,
            storage: Arc::new(FsStorage),
            clock: Arc::new(SystemClock),
            entropy: Arc::new(SystemEntropy),
            encryption: None,
            replica: false,
            archive: None,
        }
    }
}

impl Options {
    /// Checks that the limits fit together and within the format.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the limit that does not fit.
    pub fn validate(&self) -> Result<()> {
        if self.read_only && self.salvage {
            return Err(Error::InvalidInput(
                "salvage writes; it cannot be read-only".into(),
            ));
        }
        let l = &self.limits;
        if l.event_bytes_max == 0 || l.event_bytes_max > FRAME_BODY_LEN_MAX {
            return Err(Error::InvalidInput(format!(
                "event_bytes_max must be between 1 and {FRAME_BODY_LEN_MAX}"
            )));
        }
        if l.batch_events_max == 0 {
            return Err(Error::InvalidInput(
                "batch_events_max must be at least 1".into(),
            ));
        }
        let overhead = SEGMENT_HEADER_LEN as u64;
        if l.segment_bytes_max < l.batch_bytes_max.saturating_add(overhead) {
            return Err(Error::InvalidInput(format!(
                "segment_bytes_max ({}) must exceed batch_bytes_max ({}) by at least {overhead} bytes",
                l.segment_bytes_max, l.batch_bytes_max
            )));
        }
        if l.batch_bytes_max < u64::from(l.event_bytes_max) + 128 {
            return Err(Error::InvalidInput(
                "batch_bytes_max must hold at least one event of event_bytes_max".into(),
            ));
        }
        Ok(())
    }
}
