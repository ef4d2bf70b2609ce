//! Writing a parsed file into a journal: every batch is checked before anything is written,
//! then the blobs are stored, then the events appended in order, in batches. Event ids are the
//! source's, so a second import (or the rest of one cut short by a crash) appends only what is
//! missing.
//!
//! A source record can change after it was imported: a transcript imported while it was
//! written held the first records of a message that was still streaming, and the grown file
//! makes the same event (same id) with other values. The journal never rewrites an event (and
//! refuses an id reused with another body), so the later state is appended as a **revision**:
//! the event with the id `<id>~rev<n>` (n = 1, 2, ...) and the field `supersedes: <id>`
//! (`journal_format::envelope::SUPERSEDES_FIELD`), which read models and replay show in place of
//! the earlier state. An event whose latest stored state is the parsed one is already present.

use journal_engine::{AppendOptions, Journal};
use journal_format::envelope::SUPERSEDES_FIELD;
use journal_format::Envelope;
use serde::Serialize;
use serde_json::Value;

use super::Parsed;

/// Events per appended batch: small enough that a batch of events carrying up to
/// [`super::emit::INLINE_TEXT_MAX`] of inline text twice stays under the default batch size.
const BATCH_EVENTS: usize = 200;

/// What [`write()`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// Events appended that the journal did not hold (revisions not counted).
    pub events_written: u64,
    /// Events whose id the journal already held: not written again.
    pub already_present: u64,
    /// Events the journal held in an earlier state (their source record changed since, as a
    /// transcript does while it is written): each recorded as a revision that supersedes it.
    pub revised: u64,
    /// Blobs stored (the blob store keeps one copy of equal content).
    pub blobs: u64,
}

/// Writes `parsed` into `journal`, calling `progress` with the number of events handled so
/// far after each batch.
///
/// Each event is looked up first (its id, then its revisions' ids): only what the journal
/// does not hold, or holds in another state, is appended.
///
/// # Errors
/// A journal error. An event the journal would refuse (its form, limits or conformance
/// profile) is reported before anything is written; an I/O error part-way leaves the batches
/// before it written, and importing the file again completes it.
pub fn write(
    journal: &Journal,
    parsed: &Parsed,
    progress: &mut dyn FnMut(u64),
) -> journal_engine::Result<Written> {
    for chunk in parsed.events.chunks(BATCH_EVENTS) {
        journal.check_batch(chunk)?;
    }
    let mut written = Written::default();
    for blob in &parsed.blobs {
        let reference = journal.blobs().put(&blob.bytes)?;
        debug_assert_eq!(
            reference, blob.reference,
            "blob references are BLAKE3 of content"
        );
        written.blobs += 1;
    }
    let mut done = 0u64;
    for chunk in parsed.events.chunks(BATCH_EVENTS) {
        let (batch, revisions) = missing(journal, chunk, &mut written)?;
        let appended = journal.append_batch_blocking(batch, AppendOptions::default())?;
        for (a, revision) in appended.iter().zip(revisions) {
            match (a.duplicate, revision) {
                (true, _) => written.already_present += 1,
                (false, true) => written.revised += 1,
                (false, false) => written.events_written += 1,
            }
        }
        done += chunk.len() as u64;
        progress(done);
    }
    Ok(written)
}

/// The events of `chunk` the journal does not hold in their parsed state, each new or a
/// revision of what it holds, with whether it is a revision; the others are counted as already
/// present.
fn missing(
    journal: &Journal,
    chunk: &[Envelope],
    written: &mut Written,
) -> journal_engine::Result<(Vec<Envelope>, Vec<bool>)> {
    let mut batch = Vec::new();
    let mut revisions = Vec::new();
    for event in chunk {
        match stored_state(journal, &event.event_id)? {
            None => {
                batch.push(event.clone());
                revisions.push(false);
            }
            Some((stored, _)) if same_fact(&stored, event) => written.already_present += 1,
            Some((_, n)) => {
                batch.push(revision(event, n + 1));
                revisions.push(true);
            }
        }
    }
    Ok((batch, revisions))
}

/// The id of revision `n` (from 1) of the event `id`.
fn revision_id(id: &str, n: u64) -> String {
    format!("{id}~rev{n}")
}

/// Revision `n` of `event`: the same event under its own id, naming the event it supersedes.
fn revision(event: &Envelope, n: u64) -> Envelope {
    let mut r = event.clone();
    r.event_id = revision_id(&event.event_id, n);
    r.extra.insert(
        SUPERSEDES_FIELD.to_string(),
        Value::String(event.event_id.clone()),
    );
    r
}

/// What the journal holds of the event `id`: its latest state (the event, or its newest
/// revision) and how many revisions it has; `None` when it holds nothing under `id`.
fn stored_state(journal: &Journal, id: &str) -> journal_engine::Result<Option<(Envelope, u64)>> {
    let Some(first) = journal.get(id)? else {
        return Ok(None);
    };
    let mut latest = first.envelope;
    let mut n = 0;
    while let Some(next) = journal.get(&revision_id(id, n + 1))? {
        latest = next.envelope;
        n += 1;
    }
    Ok(Some((latest, n)))
}

/// Whether `stored` (an event or a revision of it) holds the same fact as `event`, the
/// revision's own id and the event it names aside.
fn same_fact(stored: &Envelope, event: &Envelope) -> bool {
    if stored.supersedes().is_none() {
        return stored == event;
    }
    let mut stored = stored.clone();
    stored.event_id.clone_from(&event.event_id);
    stored.extra.remove(SUPERSEDES_FIELD);
    stored == *event
}
