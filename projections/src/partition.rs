//! Builds from the start of the log in bounded memory: the log is read in several passes, each
//! applying only the events of the streams in one partition, and every projection at the start
//! of a generation is fed from the same pass.
//!
//! A build that applies the whole log in one pass holds every stream's decoded state at once,
//! and rewrites those states at every commit; when the streams interleave through the log (as
//! sessions do), that is all of them. Split by stream, a pass holds the states of its partition
//! only, writes each of them once, and decodes each event once for all the projections it
//! feeds. The first pass reads every event's stream from its body without decoding it
//! ([`EventIds::stream_key_bytes`]: the body's leading fields only, the id's bytes hashed as
//! they are, checked when the event is decoded in its own pass) and notes its partition; the
//! later passes step over the frames of other partitions without reading their bodies
//! ([`Journal::scan_where`]). Events are decoded one at a time into the same
//! [`StoredEvent`], whose strings' buffers serve the next, their payloads left in their stored
//! form until a fold asks for one ([`journal_engine::Record::decode_into_deferring_payload`],
//! [`Event`]).
//!
//! **Invariants:**
//! - A key belongs to one partition (a hash of the stream key), and every event of a key is
//!   applied in its pass, in position order: a state built here equals the state a single pass
//!   would build. Aliases are kept from the event with the highest position, as a single pass
//!   would leave them.
//! - The generation's checkpoint stays at position 0 (and the generation does not serve) until
//!   the last pass is written; a build interrupted before that is cleared and started again.
//! - A projection that cannot apply an event leaves the build: its generation is cleared and
//!   its checkpoint put back as it was, and its worker's ordinary catch-up finds the first
//!   event it cannot apply, in log order. A failure to read the log makes every worker leave
//!   the build that way.

use std::ops::ControlFlow;

use journal_engine::Journal;
use journal_format::{ChainHash, EventIds, Position, StoredEvent};

use crate::projection::{Event, Fault};
use crate::worker::WorkerError;

/// Events per partition by default: a build from the start splits the log into
/// `ceil(head / PARTITION_EVENTS)` passes, so that the states held at once stay about this many
/// events' worth, whatever the log's length (1,121,660 generated events: 12 passes, 69 MiB
/// peak, against 211 MiB in one pass; see `docs/PERFORMANCE.md`).
pub const PARTITION_EVENTS: u64 = 100_000;

/// A worker's side of a partitioned build (implemented by [`crate::worker::Worker`]).
pub trait Build {
    /// The projection's name.
    fn name(&self) -> &'static str;

    /// Starts a build of everything up to `head` when the worker is at the start of a
    /// generation (a first build, or a rebuild after a version change) and its projection is
    /// keyed by stream; `false` leaves the worker to its ordinary catch-up.
    ///
    /// # Errors
    /// [`WorkerError`] when the store or the journal fails.
    fn begin(&mut self, journal: &Journal, head: u64) -> Result<bool, WorkerError>;

    /// Applies an event of stream `stream_key`; the fault when the projection cannot apply it.
    ///
    /// # Errors
    /// [`WorkerError`] when the projection does not key the event by `stream_key`.
    fn apply(&mut self, event: &Event<'_>, stream_key: &str) -> Result<Option<Fault>, WorkerError>;

    /// Writes the states of the partition just applied, the checkpoint left at position 0,
    /// and forgets them.
    ///
    /// # Errors
    /// [`WorkerError`] when the store fails.
    fn flush(&mut self) -> Result<(), WorkerError>;

    /// Writes the checkpoint: every state now reflects everything up to `position`.
    ///
    /// # Errors
    /// [`WorkerError`] when the store fails.
    fn finish(&mut self, position: u64, hash: Option<ChainHash>) -> Result<(), WorkerError>;

    /// Leaves the build, clearing what it wrote.
    ///
    /// # Errors
    /// [`WorkerError`] when the store fails.
    fn abandon(&mut self) -> Result<(), WorkerError>;
}

/// The partition of a stream key among `partitions` (FNV-1a: stable across runs and builds).
#[must_use]
pub fn partition_of(stream_key: &str, partitions: u64) -> u64 {
    partition_of_parts(&[stream_key.as_bytes()], partitions)
}

/// [`partition_of`] the concatenation of `parts`, without building it.
fn partition_of_parts(parts: &[&[u8]], partitions: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in parts.iter().copied().flatten() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % partitions.max(1)
}

/// Builds every worker of `workers` that is at the start of a generation up to the journal's
/// head, in `ceil(head / partition_events)` passes, calling `progress(name, position, head)`
/// after each. Does nothing when the log fits in one partition (the ordinary catch-up does
/// that as well); the workers' ordinary catch-up goes on from where this leaves them.
///
/// Returns `false` when reading the log failed (or a worker refused an event for a reason that
/// is not a fault): every worker has then left the build, as if it had not started, and the
/// ordinary catch-up meets the same failure in its turn; a caller should not try again by
/// partition.
///
/// # Errors
/// [`WorkerError`] when the store fails; a worker's fault is not an error (see the module's
/// invariants).
pub fn build(
    journal: &Journal,
    workers: &mut [&mut dyn Build],
    partition_events: u64,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<bool, WorkerError> {
    let head = journal.head().position.0;
    let partitions = head.div_ceil(partition_events.max(1));
    if partitions < 2 {
        return Ok(true);
    }
    let mut active: Vec<&mut dyn Build> = Vec::new();
    for worker in workers.iter_mut() {
        if worker.begin(journal, head)? {
            active.push(&mut **worker);
        }
    }
    let Some(first) = active.first() else {
        return Ok(true);
    };
    let reader = first.name();
    tracing::info!(
        head,
        partitions,
        "building read models from the start, by partition"
    );
    let mut head_hash = None;
    let noting = partitions <= 256;
    let mut memo: Vec<u8> = Vec::new();
    for partition in 0..partitions {
        if active.is_empty() {
            return Ok(true);
        }
        let mut faulted = vec![false; active.len()];
        let mut failed: Option<WorkerError> = None;
        // One event at a time, its strings' buffers reused for the next.
        let mut event = StoredEvent {
            position: Position(0),
            recorded_at_ns: 0,
            stream_version: 0,
            hash: ChainHash::default(),
            envelope: journal_format::Envelope::default(),
        };
        let mut key = String::new();
        // The first pass reads each event's stream from its body and notes its partition (one
        // byte per event, when there are at most 256); the others look it up, and step over
        // the frames of other partitions without reading their bodies.
        let noted = std::mem::take(&mut memo);
        let mut noting_now = Vec::new();
        let noted_at = |position: Position| {
            usize::try_from(position.0.saturating_sub(1))
                .ok()
                .and_then(|i| noted.get(i))
                .map(|&of| u64::from(of))
        };
        let select = |position| noted_at(position).is_none_or(|of| of == partition);
        let scanned =
            journal.scan_where(Position(1), Some(Position(head)), false, select, |record| {
                if record.position.0 == head {
                    head_hash = Some(record.hash);
                }
                if noted_at(record.position).is_none() {
                    let (kind, id) = stream_key_bytes(&record)?;
                    let of = partition_of_parts(&[kind.as_bytes(), id], partitions);
                    if noting {
                        noting_now.push(u8::try_from(of).unwrap_or(u8::MAX));
                    }
                    if of != partition {
                        return Ok(ControlFlow::Continue(()));
                    }
                }
                // The payload stays in its stored form, decoded only for a fold that asks.
                let payload = record.decode_into_deferring_payload(&mut event)?;
                let event = Event::deferred(&event, payload);
                // The decoded event's key hashes as its body's did: the same bytes, checked now.
                let (kind, id) = event.envelope.ids().stream_key_parts();
                key.clear();
                key.push_str(kind);
                key.push_str(id);
                for (worker, faulted) in active.iter_mut().zip(faulted.iter_mut()) {
                    if *faulted {
                        continue;
                    }
                    match worker.apply(&event, &key) {
                        Ok(None) => {}
                        Ok(Some(_)) => *faulted = true,
                        Err(e) => {
                            failed = Some(e);
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                }
                Ok(ControlFlow::Continue(()))
            });
        memo = noted;
        memo.append(&mut noting_now);
        let failed = failed.or(scanned.err().map(|source| WorkerError::Journal {
            projection: reader,
            source,
        }));
        if let Some(error) = failed {
            // Left to the ordinary catch-up, which applies what comes before the failing event
            // (and faults on an event a projection cannot apply) as one pass would.
            tracing::warn!(%error, "building by partition failed; building in one pass instead");
            for worker in active {
                worker.abandon()?;
            }
            return Ok(false);
        }
        let mut kept = Vec::with_capacity(active.len());
        for (worker, faulted) in active.into_iter().zip(faulted) {
            if faulted {
                worker.abandon()?;
            } else {
                worker.flush()?;
                let done = u128::from(head) * u128::from(partition + 1) / u128::from(partitions);
                progress(worker.name(), u64::try_from(done).unwrap_or(head), head);
                kept.push(worker);
            }
        }
        active = kept;
    }
    for worker in active {
        worker.finish(head, head_hash)?;
    }
    Ok(true)
}

/// The stream key of a record's body, its id as raw bytes ([`EventIds::stream_key_bytes`]).
fn stream_key_bytes<'a>(
    record: &journal_engine::Record<'a>,
) -> journal_engine::Result<(&'static str, &'a [u8])> {
    EventIds::stream_key_bytes(record.body).map_err(|e| journal_engine::Error::Corruption {
        segment: record.segment,
        offset: record.offset,
        position: Some(record.position),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_always_falls_in_the_same_partition_and_streams_spread() {
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            let key = format!("session:s-{i}");
            let p = partition_of(&key, 4);
            assert_eq!(p, partition_of(&key, 4));
            counts[usize::try_from(p).unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(
            partition_of("session:s-1", 7),
            partition_of_parts(&[b"session:", b"s-1"], 7)
        );
        assert_eq!(partition_of("anything", 1), 0);
        assert_eq!(partition_of("anything", 0), 0);
    }
}
