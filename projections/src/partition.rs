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
//! they are, checked when the event is decoded in its own pass), applies partition 0's events,
//! and notes each other partition's frames, with a copy of each (up to a limit in bytes), in a
//! scratch file per partition (`partition/notes.rs`); each later pass reads its own frames
//! from there, in one sequential read, and the frames not copied from the log
//! ([`journal_engine::FrameReader`], with a read-ahead of 16 KiB: one system call for the
//! frames of many events, not one each), instead of stepping through the whole log again.
//! (With its frames read from the log, a pass over one partition of many copied nearly the
//! whole log out of the page cache through its read-ahead.) A pass takes its events in chunks
//! of 64 (or 1 MiB of bodies): it copies their frames, decodes them one after the other, then
//! applies the chunk to one worker after the
//! other, so that the decoder's code and each fold's stay in the instruction cache across the
//! chunk. Each slot of a chunk keeps its buffers for the next chunk's event there (its strings',
//! its body's), and the payloads stay in their stored form until a fold asks for one
//! ([`journal_engine::Record::decode_into_deferring_payload`], [`Event`]).
//!
//! Every frame is checked once, in the first pass (its header's and body's checksums), and
//! again when its own pass reads it, from the log or from its copy; the chain is not verified
//! (`journal verify` does that).
//!
//! **Invariants:**
//! - A key belongs to one partition (a hash of the stream key), and every event of a key is
//!   applied in its pass, in position order: a state built here equals the state a single pass
//!   would build. Aliases are kept from the event with the highest position, as a single pass
//!   would leave them.
//! - The generation's checkpoint stays at position 0 (and the generation does not serve) until
//!   the last pass is written; a build interrupted before that is cleared and started again.
//! - Each worker is given its partition's events in position order, whatever the chunks; a
//!   worker's fault stops its own events only.
//! - A projection that cannot apply an event leaves the build: its generation is cleared and
//!   its checkpoint put back as it was, and its worker's ordinary catch-up finds the first
//!   event it cannot apply, in log order. A failure to read the log makes every worker leave
//!   the build that way.

mod notes;

use std::ops::ControlFlow;
use std::path::Path;

use journal_engine::{Chain, FrameReader, Journal, Record};
use journal_format::{ChainHash, EventIds, Position, SegmentId, StoredEvent, FRAME_HEADER_LEN};

use notes::{Note, Notes};

use crate::projection::{Event, Fault};
use crate::worker_error::WorkerError;

/// Events per partition by default: a build from the start splits the log into
/// `ceil(head / PARTITION_EVENTS)` passes, so that the states held at once stay about this many
/// events' worth, whatever the log's length (1,121,660 generated events: 12 passes, 59 MiB
/// peak, against 189 MiB in one pass; 150,000 and 200,000 per partition took 68 and 82 MiB and
/// were no faster; see `docs/PERFORMANCE.md`).
pub const PARTITION_EVENTS: u64 = 100_000;

/// How many bytes a later pass reads at once when the next frame of its partition that was
/// not copied into its notes (past their limit in bytes) is not in what it read before. A read
/// of each frame alone cost a system call per event; a read-ahead copies the other
/// partitions' frames between them too (one frame in `partitions` is this
/// pass's). A few KiB saves most of the system calls; much larger read-aheads copy more than
/// they save. 16 KiB makes half the calls of 8 KiB where partitions are few and their frames
/// dense, for a copy the page cache serves.
const READ_AHEAD_BYTES: usize = 16 * 1024;

/// The most bytes of frames a build copies into its scratch files by default, all partitions
/// together (see [`Scratch`]).
pub const COPY_BYTES_MAX: u64 = 4 << 30;

/// Where a build keeps its scratch files (its notes of each later partition's frames, unnamed,
/// gone when it ends), and how many bytes of frames it may copy there.
#[derive(Debug, Clone, Copy)]
pub struct Scratch<'a> {
    /// The directory for the files.
    pub dir: &'a Path,
    /// The most bytes of frames the first pass copies, all partitions together: the scratch
    /// space a build takes, beyond 29 bytes per event. Never more than half the space free in
    /// `dir` when the build begins (none when that cannot be told): the store on the same disk
    /// grows too. Past it, frames are noted by their place and read from the log again; 0
    /// copies none.
    pub copy_bytes_max: u64,
}

/// The copies' limit of a build with `scratch`: its own, and at most half the space free in its
/// directory now ([`Scratch::copy_bytes_max`]).
fn copy_limit(scratch: Scratch<'_>) -> u64 {
    let free = free_bytes(scratch.dir).unwrap_or(0);
    let limit = scratch.copy_bytes_max.min(free / 2);
    tracing::debug!(free, limit, "the build's copies of frames");
    limit
}

/// The bytes free for this process in the file system holding `dir`, when it can be told.
#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The bytes free in the file system holding `dir`: not told on this platform.
#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

impl<'a> Scratch<'a> {
    /// Scratch files in `dir`, with copies up to [`COPY_BYTES_MAX`].
    #[must_use]
    pub fn new(dir: &'a Path) -> Scratch<'a> {
        Scratch {
            dir,
            copy_bytes_max: COPY_BYTES_MAX,
        }
    }
}

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
/// after each. A log that fits in one partition is built in one pass, still decoding each
/// event once for all the workers and writing each state once (a worker's ordinary catch-up
/// decodes the log for itself and rewrites its states at every commit, which is slower); an
/// empty log is left alone. The workers' ordinary catch-up
/// goes on from where this leaves them. The first pass notes the other partitions' frames in
/// scratch files in `scratch.dir`, with copies of them up to the copies' limit ([`Scratch`],
/// `partition/notes.rs`); without the files (more than 256 partitions, or files that cannot
/// be created or written there), each later pass steps through the whole log.
///
/// Returns `false` when reading the log or the scratch files failed (or a worker refused an
/// event for a reason that is not a fault): every worker has then left the build, as if it had
/// not started, and the ordinary catch-up meets any failure of the log in its turn; a caller
/// should not try again by partition.
///
/// # Errors
/// [`WorkerError`] when the store fails; a worker's fault is not an error (see the module's
/// invariants).
pub fn build(
    journal: &Journal,
    workers: &mut [&mut dyn Build],
    partition_events: u64,
    scratch: Scratch<'_>,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<bool, WorkerError> {
    let head = journal.head().position.0;
    let partitions = head.div_ceil(partition_events.max(1));
    if partitions == 0 {
        return Ok(true);
    }
    let mut active = begin(journal, workers, head)?;
    let Some(first) = active.first() else {
        return Ok(true);
    };
    let reader = first.name();
    tracing::info!(
        head,
        partitions,
        "building read models from the start, by partition"
    );
    let mut passes = Passes {
        journal,
        head,
        partitions,
        notes: create_notes(scratch, partitions),
        head_hash: None,
        pass: Pass {
            reader,
            sealed: journal.is_encrypted().then(|| journal.clone()),
            faulted: Vec::new(),
            chunk: Chunk::default(),
        },
        frame_reader: journal.frame_reader().with_read_ahead(READ_AHEAD_BYTES),
    };
    for partition in 0..partitions {
        if active.is_empty() {
            return Ok(true);
        }
        debug_assert_eq!(
            passes.pass.chunk.len, 0,
            "a pass begins with an empty chunk"
        );
        passes.pass.faulted.clear();
        passes.pass.faulted.resize(active.len(), false);
        // The pass's last events, short of a full chunk, are applied once it has read them all.
        let applied = passes
            .read(partition, &mut active)
            .and_then(|()| passes.pass.apply(&mut active));
        if let Err(error) = applied {
            // Left to the ordinary catch-up, which applies what comes before the failing event
            // (and faults on an event a projection cannot apply) as one pass would.
            tracing::warn!(%error, "building by partition failed; building in one pass instead");
            for worker in active {
                worker.abandon()?;
            }
            return Ok(false);
        }
        let done = u128::from(head) * u128::from(partition + 1) / u128::from(partitions);
        let done = u64::try_from(done).unwrap_or(head);
        active = settle(active, &passes.pass.faulted, |name| {
            progress(name, done, head);
        })?;
    }
    debug_assert_eq!(
        passes.pass.chunk.len, 0,
        "the last pass applied its last chunk"
    );
    for worker in active {
        worker.finish(head, passes.head_hash)?;
    }
    Ok(true)
}

/// The workers of `workers` that begin a build up to `head` (those at the start of a
/// generation, keyed by stream).
fn begin<'w>(
    journal: &Journal,
    workers: &'w mut [&mut dyn Build],
    head: u64,
) -> Result<Vec<&'w mut dyn Build>, WorkerError> {
    let mut active: Vec<&mut dyn Build> = Vec::new();
    for worker in workers.iter_mut() {
        if worker.begin(journal, head)? {
            active.push(&mut **worker);
        }
    }
    Ok(active)
}

/// The scratch files for the notes of `partitions` partitions; `None` (each pass then steps
/// through the whole log) with more than [`notes::NOTED_PARTITIONS_MAX`] partitions or files
/// that cannot be created.
fn create_notes(scratch: Scratch<'_>, partitions: u64) -> Option<Notes> {
    if partitions > notes::NOTED_PARTITIONS_MAX {
        return None;
    }
    Notes::create(scratch.dir, partitions, copy_limit(scratch))
        .inspect_err(|error| {
            tracing::warn!(%error, "stepping through the whole log in each pass instead");
        })
        .ok()
}

/// The workers that go on after a pass: a worker that faulted in it (`faulted`, one flag per
/// worker) leaves the build; each other writes its partition's states, and `flushed` is told
/// its name.
fn settle<'w>(
    active: Vec<&'w mut dyn Build>,
    faulted: &[bool],
    mut flushed: impl FnMut(&str),
) -> Result<Vec<&'w mut dyn Build>, WorkerError> {
    let mut kept = Vec::with_capacity(active.len());
    for (worker, &faulted) in active.into_iter().zip(faulted) {
        if faulted {
            worker.abandon()?;
        } else {
            worker.flush()?;
            flushed(worker.name());
            kept.push(worker);
        }
    }
    Ok(kept)
}

/// A build's reading of the log, pass after pass.
struct Passes<'j> {
    journal: &'j Journal,
    /// The last position built.
    head: u64,
    partitions: u64,
    /// The later partitions' frames, noted by the first pass; `None` when each pass steps
    /// through the whole log.
    notes: Option<Notes>,
    /// The chain link of the event at `head`, once the first pass has read it.
    head_hash: Option<ChainHash>,
    pass: Pass,
    /// Reads the frames the notes hold no copy of.
    frame_reader: FrameReader,
}

impl Passes<'_> {
    /// Reads partition `partition`'s events into the pass, which applies them to `active`
    /// chunk by chunk: a later pass from its notes, the first pass (and each pass without
    /// notes) from the log.
    fn read(&mut self, partition: u64, active: &mut [&mut dyn Build]) -> Result<(), WorkerError> {
        match &mut self.notes {
            // The later passes read their own frames, where the first noted them.
            Some(notes) if partition > 0 => {
                let (pass, frame_reader) = (&mut self.pass, &mut self.frame_reader);
                notes.read(partition, |note| {
                    match note {
                        Note::Copied(record) => pass.push(&record, active)?,
                        Note::At(position, at) => {
                            let record = frame_reader.read(at, position).map_err(|source| {
                                WorkerError::Journal {
                                    projection: pass.reader,
                                    source,
                                }
                            })?;
                            pass.push(&record, active)?;
                        }
                    }
                    Ok(true)
                })
            }
            _ => self.scan(partition, active),
        }
    }

    /// Steps through the log, reading each event's stream from its body: applies the events
    /// of `partition`, and notes the others for their own passes while notes can be written
    /// (a note that cannot, on a full disk, leaves the later passes to step through the log,
    /// as without notes).
    fn scan(&mut self, partition: u64, active: &mut [&mut dyn Build]) -> Result<(), WorkerError> {
        let (head, partitions) = (self.head, self.partitions);
        let Passes {
            journal,
            notes,
            head_hash,
            pass,
            ..
        } = self;
        let mut failed = None;
        let mut unnoted = None;
        let scanned = journal.scan(
            Position(1),
            Some(Position(head)),
            Chain::Unverified,
            |record| {
                if record.position.0 == head {
                    *head_hash = Some(record.hash);
                }
                let (kind, id) = stream_key_bytes(&record)?;
                let of = partition_of_parts(&[kind.as_bytes(), id], partitions);
                let applied = match notes {
                    Some(notes) if of != partition && unnoted.is_none() => {
                        if let Err(e) = notes.note(of, &record) {
                            unnoted = Some(e);
                        }
                        Ok(())
                    }
                    _ if of == partition => pass.push(&record, active),
                    _ => Ok(()),
                };
                Ok(match applied {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failed = Some(e);
                        ControlFlow::Break(())
                    }
                })
            },
        );
        if let (Some(notes), None) = (notes.as_mut(), &unnoted) {
            unnoted = notes.flush().err();
        }
        if let Some(error) = unnoted {
            tracing::warn!(%error, "stepping through the whole log in each later pass instead");
            *notes = None;
        }
        match (failed, scanned) {
            (Some(e), _) => Err(e),
            (None, Err(source)) => Err(WorkerError::Journal {
                projection: pass.reader,
                source,
            }),
            (None, Ok(())) => Ok(()),
        }
    }
}

/// What the build keeps from one event to the next, and from one pass to the next.
struct Pass {
    /// The projection named when reading the log fails.
    reader: &'static str,
    /// The journal, to open sealed content with, when it is encrypted.
    sealed: Option<Journal>,
    /// Which of the active workers faulted in this pass (they apply nothing more).
    faulted: Vec<bool>,
    /// The pass's events read and not yet applied.
    chunk: Chunk,
}

/// How many events a pass reads before it decodes them, then applies them to one worker after
/// the other. Applying each event to every worker in turn ran the decoder's and each fold's
/// code once per event, and their code together does not fit the instruction cache: in chunks,
/// each stays in the cache for the whole chunk (larger chunks are no faster).
const CHUNK_EVENTS: usize = 64;

/// A chunk is applied once its bodies reach this many bytes, even short of [`CHUNK_EVENTS`]:
/// the bodies copied and their events decoded stay about this size whatever the bodies' size.
const CHUNK_BYTES: usize = 1024 * 1024;

/// A slot keeps at most this much of a frame's buffer for the next chunk's event there, so
/// that a few large frames do not stay held through the build.
const SLOT_FRAME_BYTES_KEPT: usize = 64 * 1024;

/// A pass's events in the order read, each in a slot whose buffers serve the next chunk's
/// event there: the frame copied, and the event decoded into the one before it.
///
/// **Invariant:** slots `..len` hold the events read and not yet applied, in log order, and
/// `bytes` is the sum of their bodies' lengths; `copies`, `events` and `keys` have one slot
/// each per index.
#[derive(Default)]
struct Chunk {
    /// How many slots hold events not yet applied.
    len: usize,
    /// The bodies' bytes in those slots.
    bytes: usize,
    /// Each slot's frame, copied out of the log's read buffer.
    copies: Vec<Copied>,
    /// Each slot's event, decoded with its payload deferred.
    events: Vec<StoredEvent>,
    /// Each slot's stream key.
    keys: Vec<String>,
}

/// A frame copied out of the log's read buffer, to be decoded with its chunk: the fields of
/// its [`Record`], the frame (header and body) in a buffer of its own.
#[derive(Default)]
struct Copied {
    position: Position,
    recorded_at_ns: i64,
    stream_version: u64,
    hash: ChainHash,
    segment: SegmentId,
    offset: u64,
    frame: Vec<u8>,
}

impl Copied {
    /// Overwrites this copy with `record`'s frame.
    fn copy(&mut self, record: &Record<'_>) {
        self.position = record.position;
        self.recorded_at_ns = record.recorded_at_ns;
        self.stream_version = record.stream_version;
        self.hash = record.hash;
        self.segment = record.segment;
        self.offset = record.offset;
        self.frame.clear();
        self.frame
            .shrink_to(SLOT_FRAME_BYTES_KEPT.max(record.frame.len()));
        self.frame.extend_from_slice(record.frame);
    }

    /// The copied frame as a record of the log.
    fn record(&self) -> Record<'_> {
        Record {
            position: self.position,
            recorded_at_ns: self.recorded_at_ns,
            stream_version: self.stream_version,
            hash: self.hash,
            // A record's frame is its header then its body: the copy holds both.
            body: self.frame.get(FRAME_HEADER_LEN..).unwrap_or_default(),
            frame: &self.frame,
            segment: self.segment,
            offset: self.offset,
        }
    }
}

impl Pass {
    /// Copies `record` into the chunk, and applies the chunk when it is full.
    fn push(
        &mut self,
        record: &Record<'_>,
        active: &mut [&mut dyn Build],
    ) -> Result<(), WorkerError> {
        let chunk = &mut self.chunk;
        if let Some(copied) = chunk.copies.get_mut(chunk.len) {
            copied.copy(record);
        } else {
            let mut copied = Copied::default();
            copied.copy(record);
            chunk.copies.push(copied);
            chunk.events.push(StoredEvent {
                position: Position(0),
                recorded_at_ns: 0,
                stream_version: 0,
                hash: ChainHash::default(),
                envelope: journal_format::Envelope::default(),
            });
            chunk.keys.push(String::new());
        }
        chunk.len += 1;
        chunk.bytes += record.body.len();
        if chunk.len == CHUNK_EVENTS || chunk.bytes >= CHUNK_BYTES {
            self.apply(active)?;
        }
        Ok(())
    }

    /// Decodes the chunk's events (their payloads left in their stored form, for a fold that
    /// asks) and applies them, in order, to each active worker that has not faulted, one
    /// worker after the other; empties the chunk.
    fn apply(&mut self, active: &mut [&mut dyn Build]) -> Result<(), WorkerError> {
        let Chunk {
            len,
            bytes,
            copies,
            events,
            keys,
        } = &mut self.chunk;
        let n = std::mem::take(len);
        *bytes = 0;
        let mut payloads = Vec::with_capacity(n);
        let sealed = self.sealed.as_ref();
        for ((copied, event), key) in copies
            .iter()
            .zip(events.iter_mut())
            .zip(keys.iter_mut())
            .take(n)
        {
            let projection = self.reader;
            let failed = |source| WorkerError::Journal { projection, source };
            let record = copied.record();
            let payload = match sealed {
                // Sealed content is opened whole: the payload is held by the envelope.
                Some(journal) => {
                    record.decode_into(event).map_err(failed)?;
                    journal.open_content(event).map_err(failed)?;
                    None
                }
                None => Some(
                    record
                        .decode_into_deferring_payload(event)
                        .map_err(failed)?,
                ),
            };
            // The decoded event's key: the bytes its body's hashed to this partition, now
            // checked as UTF-8.
            let (kind, id) = event.envelope.ids().stream_key_parts();
            key.clear();
            key.push_str(kind);
            key.push_str(id);
            payloads.push(payload);
        }
        for (worker, faulted) in active.iter_mut().zip(self.faulted.iter_mut()) {
            for ((event, &payload), key) in events.iter().zip(&payloads).zip(keys.iter()) {
                if *faulted {
                    break;
                }
                let event = match payload {
                    Some(payload) => Event::deferred(event, payload),
                    None => Event::new(event),
                };
                if worker.apply(&event, key)?.is_some() {
                    *faulted = true;
                }
            }
        }
        Ok(())
    }
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

    #[test]
    fn copies_take_at_most_half_the_free_space_and_none_where_it_cannot_be_told() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 2_000, "{free} bytes free");
        let limit = |copy_bytes_max| {
            copy_limit(Scratch {
                dir: dir.path(),
                copy_bytes_max,
            })
        };
        assert_eq!(limit(1_000), 1_000);
        assert_eq!(limit(0), 0);
        // Half the free space, give or take what others wrote meanwhile.
        let most = limit(u64::MAX);
        assert!(most <= free && most > free / 4, "{most} of {free}");
        let gone = dir.path().join("gone");
        assert_eq!(
            copy_limit(Scratch {
                dir: &gone,
                copy_bytes_max: 1_000
            }),
            0
        );
    }
}
