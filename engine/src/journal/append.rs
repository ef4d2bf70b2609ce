//! Appending: a batch checked and encoded on the caller's thread, then committed by the writer
//! (or by the caller itself, leading, when the writer is idle).

use std::borrow::Cow;
use std::sync::Arc;

use journal_format::merkle::leaf_hash;
use journal_format::Envelope;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::seams::uuid_v7;

use crate::journal::Journal;
use crate::strings::Strings;
use crate::write::{self, Appended, Command, PreparedEvent, WriteRequest};

/// The body bytes reserved per event when a batch is encoded (events are about 500 bytes; a
/// larger one grows the buffer).
const PREPARED_BODY_BYTES: usize = 768;

/// Options of one append.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendOptions {
    /// Refuse the append unless the stream's current version (its number of events) is this.
    /// All events of the batch must then belong to one stream.
    pub expected_stream_version: Option<u64>,
}

/// Who appends: an async caller hands its batch to the writer thread; a blocking one may lead,
/// committing on its own thread when the writer is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Async,
    Blocking,
}

/// Why an event's body was not encoded: the event (refused as invalid, with its index), or the
/// journal (its key store).
enum EncodeError {
    Envelope(journal_format::EnvelopeError),
    Journal(Error),
}

impl Journal {
    /// Checks `events` as [`Journal::append_batch`] would (form, this journal's limits and
    /// conformance profile), without writing anything: lets a caller that appends in several
    /// batches refuse bad input before the first one.
    ///
    /// # Errors
    /// As [`crate::Limits::check_batch`].
    pub fn check_batch(&self, events: &[Envelope]) -> Result<()> {
        let options = &self.inner.options;
        options.limits.check_batch(events, options.conformance)
    }

    /// Checks and encodes a batch for the writer: its events, their bodies back to back, and
    /// their stream keys, task and run ids back to back.
    ///
    /// A given batch (`Cow::Owned`) hands its event ids over to the prepared events; a lent one
    /// (`Cow::Borrowed`) is left as it was (the ids are copied), and is copied whole only when
    /// one of its events has no id yet, to be given one.
    fn prepare(
        &self,
        mut events: Cow<'_, [Envelope]>,
        options: &AppendOptions,
    ) -> Result<(Vec<PreparedEvent>, Vec<u8>, Strings)> {
        let limits = &self.inner.options.limits;
        if events.len() > limits.batch_events_max {
            return Err(Error::LimitExceeded {
                what: "batch length (events)",
                actual: events.len() as u64,
                limit: limits.batch_events_max as u64,
            });
        }
        let assigned = self.check_events(&mut events)?;
        if let Some(keys) = &self.inner.keys {
            // The keys the batch's new subjects need, made in one rewrite of the key store,
            // once every event has passed its checks.
            keys.prepare(&events)?;
        }
        let mut prepared = Vec::with_capacity(events.len());
        let mut bodies = Vec::with_capacity(events.len() * PREPARED_BODY_BYTES);
        let mut ids = Strings::default();
        for (i, id_assigned) in assigned.into_iter().enumerate() {
            let index = Some(i);
            let missing = || Error::Internal(format!("no event {i} in the batch"));
            let start = bodies.len();
            self.encode(&mut events, i, &mut bodies)
                .map_err(|source| match source {
                    EncodeError::Envelope(source) => Error::InvalidEvent { index, source },
                    EncodeError::Journal(e) => e,
                })?;
            let event = events.get(i).ok_or_else(missing)?;
            let (kind, id) = event.ids().stream_key_parts();
            let stream_key = ids.push_joined(&[kind, id]);
            let task = event.task_id.as_deref().map(|id| ids.push(id));
            let run = event.run_id.as_deref().map(|id| ids.push(id));
            // The event id the writer's idempotency maps share: taken from a given batch,
            // copied from a lent one. By reference either way: an envelope is a few
            // kilobytes, and moving each one out costs a copy.
            let event_id = match &mut events {
                Cow::Owned(given) => {
                    let event = given.get_mut(i).ok_or_else(missing)?;
                    Arc::from(std::mem::take(&mut event.event_id))
                }
                Cow::Borrowed(lent) => {
                    let event = lent.get(i).ok_or_else(missing)?;
                    Arc::from(event.event_id.as_str())
                }
            };
            let leaf = self
                .inner
                .options
                .tree
                .then(|| bodies.get(start..).map(leaf_hash))
                .flatten();
            prepared.push(PreparedEvent {
                body: start..bodies.len(),
                event_id,
                id_assigned,
                stream_key,
                task,
                run,
                leaf,
            });
        }
        let sizes: Vec<(&str, u64)> = prepared
            .iter()
            .map(|e| (&*e.event_id, e.body.len() as u64))
            .collect();
        limits.check_sizes(&sizes)?;
        if options.expected_stream_version.is_some() {
            if let Some(first) = prepared.first() {
                let first_key = ids.get(first.stream_key);
                if let Some(other) = prepared
                    .iter()
                    .map(|e| ids.get(e.stream_key))
                    .find(|key| *key != first_key)
                {
                    return Err(Error::InvalidInput(format!(
                        "an expected stream version needs every event of the batch in one stream; found {first_key} and {other}"
                    )));
                }
            }
        }
        Ok((prepared, bodies, ids))
    }

    /// Gives each event without an id one, in batch order, and checks each (its form under
    /// this journal's conformance profile, no field the journal reserves), so that a batch
    /// refused at an event has drawn no id for the events after it. A lent batch is copied
    /// first when an id is given. Returns which events were given an id.
    fn check_events(&self, events: &mut Cow<'_, [Envelope]>) -> Result<Vec<bool>> {
        let mut assigned = Vec::with_capacity(events.len());
        for i in 0..events.len() {
            let index = Some(i);
            let missing = || Error::Internal(format!("no event {i} in the batch"));
            let id_assigned = events.get(i).is_some_and(|e| e.event_id.is_empty());
            if id_assigned {
                let event = events.to_mut().get_mut(i).ok_or_else(missing)?;
                event.event_id = uuid_v7(&*self.inner.options.clock, &*self.inner.options.entropy);
            }
            let event = events.get(i).ok_or_else(missing)?;
            crate::options::check_fact(event, self.inner.options.conformance)
                .map_err(|source| Error::InvalidEvent { index, source })?;
            if let Some(name) = journal_format::seal::reserved_field(&event.extra) {
                return Err(Error::InvalidEvent {
                    index,
                    source: journal_format::EnvelopeError::JournalField(name),
                });
            }
            assigned.push(id_assigned);
        }
        Ok(assigned)
    }

    /// Appends event `i`'s body to `bodies`: sealed when the journal is encrypted (in place in a
    /// given batch, whose plaintext is not needed afterwards; from a copy in a lent one).
    fn encode(
        &self,
        events: &mut Cow<'_, [Envelope]>,
        i: usize,
        bodies: &mut Vec<u8>,
    ) -> std::result::Result<(), EncodeError> {
        let missing =
            || EncodeError::Journal(Error::Internal(format!("no event {i} in the batch")));
        let Some(keys) = &self.inner.keys else {
            let event = events.get(i).ok_or_else(missing)?;
            return event.write_msgpack(bodies).map_err(EncodeError::Envelope);
        };
        match events {
            Cow::Owned(given) => {
                let event = given.get_mut(i).ok_or_else(missing)?;
                keys.seal_in_place(event).map_err(EncodeError::Journal)?;
                event.write_msgpack(bodies).map_err(EncodeError::Envelope)
            }
            Cow::Borrowed(lent) => {
                let event = lent.get(i).ok_or_else(missing)?;
                match keys.seal(event).map_err(EncodeError::Journal)? {
                    Some(sealed) => sealed.write_msgpack(bodies),
                    None => event.write_msgpack(bodies),
                }
                .map_err(EncodeError::Envelope)
            }
        }
    }

    /// Sends `cmd` to the writer thread, counted as queued until the thread has committed it
    /// (see `write::thread::lead`).
    pub(crate) fn send(&self, cmd: Command) -> Result<()> {
        let tx = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
        let tx = tx.as_ref().ok_or(Error::Closed)?;
        if let Some(cell) = &self.inner.cell {
            cell.queue();
        }
        tx.send(cmd).map_err(|_| {
            if let Some(cell) = &self.inner.cell {
                cell.unqueue(1);
            }
            Error::Closed
        })
    }

    /// Prepares a batch and hands it to the writer thread; a blocking caller commits it on its
    /// own thread instead when the writer is idle (see `write::thread::lead`).
    fn submit(
        &self,
        events: Cow<'_, [Envelope]>,
        options: &AppendOptions,
        caller: Caller,
    ) -> Result<Option<oneshot::Receiver<Result<Vec<Appended>>>>> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = self.inner.poison.cause() {
            return Err(Error::Poisoned(cause));
        }
        let (events, bodies, ids) = self.prepare(events, options)?;
        if events.is_empty() {
            return Ok(None);
        }
        let (reply, rx) = oneshot::channel();
        let request = WriteRequest {
            events,
            bodies,
            ids,
            expected_version: options.expected_stream_version,
            verbatim: None,
            reply,
        };
        let request = match (&self.inner.cell, caller) {
            (Some(cell), Caller::Blocking) => {
                write::thread::lead(cell, &self.inner.progress, &self.inner.log, request)
            }
            _ => Some(request),
        };
        if let Some(request) = request {
            self.send(Command::Write(request))?;
        }
        Ok(Some(rx))
    }

    /// Appends one event; see [`Journal::append_batch`].
    ///
    /// # Errors
    /// As [`Journal::append_batch`].
    pub async fn append(&self, event: Envelope) -> Result<Appended> {
        let mut appended = self
            .append_batch(vec![event], AppendOptions::default())
            .await?;
        appended
            .pop()
            .ok_or_else(|| Error::Internal("no answer for the event".into()))
    }

    /// Appends a batch atomically: all of it becomes durable, or none of it. Events without an
    /// `eventId` get a UUID v7; events whose id is already stored with the same body are not
    /// stored again and are answered with their original position (`duplicate: true`); an id
    /// stored with another body refuses the batch. Returns once the batch is durable (or, in
    /// buffered mode, written).
    ///
    /// `events` is given (a `Vec<Envelope>` the journal takes) or lent (a `&[Envelope]` or
    /// `&Vec` it only reads): with a lent batch the caller keeps its envelopes, to retry after a
    /// conflict or to reuse them, and frees them when it likes, off the append's path (freeing
    /// an envelope with a JSON payload of nested maps costs about as much as encoding it). A
    /// lent batch with an event that has no id is copied, to give it one; that id is the
    /// journal's answer, not the caller's envelope's, so a batch to be retried after an unclear
    /// outcome (`Io`, `Poisoned`, `Closed`) should carry its ids
    /// ([`Journal::new_event_id`]): a retry is then answered as duplicates, never stored twice.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::EventTooLarge`] or [`Error::LimitExceeded`] for bad
    /// input, [`Error::IdReused`] for an event id stored (or earlier in the batch) with another
    /// body, [`Error::Conflict`] when the expected stream version differs, [`Error::Poisoned`]
    /// after an I/O failure, [`Error::Closed`]. On any error nothing of the batch is written.
    pub async fn append_batch<'e>(
        &self,
        events: impl Into<Cow<'e, [Envelope]>>,
        options: AppendOptions,
    ) -> Result<Vec<Appended>> {
        // Not led: a commit's `fdatasync` must not block the runtime's thread.
        match self.submit(events.into(), &options, Caller::Async)? {
            None => Ok(Vec::new()),
            Some(rx) => rx.await.map_err(|_| Error::Closed)?,
        }
    }

    /// [`Journal::append_batch`] for callers outside an async runtime.
    ///
    /// # Errors
    /// As [`Journal::append_batch`].
    ///
    /// # Panics
    /// When called from inside an async runtime (use `append_batch` there).
    pub fn append_batch_blocking<'e>(
        &self,
        events: impl Into<Cow<'e, [Envelope]>>,
        options: AppendOptions,
    ) -> Result<Vec<Appended>> {
        match self.submit(events.into(), &options, Caller::Blocking)? {
            None => Ok(Vec::new()),
            Some(rx) => rx.blocking_recv().map_err(|_| Error::Closed)?,
        }
    }

    /// Makes everything acknowledged so far durable (useful in buffered mode).
    ///
    /// # Errors
    /// The sync's I/O error (which poisons the writer), or [`Error::Closed`].
    pub async fn sync(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Sync(reply))?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

#[cfg(test)]
mod tests {
    use journal_format::Position;

    use super::*;
    use crate::options::Options;

    fn event(producer: u64, i: u64) -> Envelope {
        let mut e = Envelope::new(
            "turn.submitted",
            format!("evt-{producer}-{i:04}"),
            "2026-05-11T10:00:00Z",
        );
        e.session_id = Some(format!("s{producer}"));
        e
    }

    /// Every command sent to the writer thread is uncounted once committed: a count left
    /// behind would send every later append through the writer thread's queue (`write::thread::lead`).
    #[test]
    fn queued_commands_are_uncounted_once_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Journal::open(dir.path(), Options::default()).expect("open");
        std::thread::scope(|scope| {
            for producer in 0..8 {
                let journal = &journal;
                scope.spawn(move || {
                    for i in 0..40 {
                        journal
                            .append_batch_blocking(
                                vec![event(producer, i)],
                                AppendOptions::default(),
                            )
                            .expect("append");
                    }
                });
            }
        });
        // A sync goes through the queue whatever the timing.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(journal.sync()).expect("sync");
        assert_eq!(journal.head().position, Position(320));
        // The writer thread uncounts a group just after answering it.
        let cell = journal.inner.cell.as_ref().expect("a writable journal");
        for _ in 0..5_000 {
            if cell.queued() == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(cell.queued(), 0, "nothing left counted as queued");
    }
}
