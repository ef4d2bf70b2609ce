//! Writing a parsed file into a journal: every batch is checked before anything is written,
//! then the blobs are stored, then the events appended in order, in batches. Event ids are the
//! source's, so a second import (or the rest of one cut short by a crash) appends only what is
//! missing.

use journal_engine::{AppendOptions, Journal};
use serde::Serialize;

use super::Parsed;

/// Events per appended batch: small enough that a batch of events carrying up to
/// [`super::emit::INLINE_TEXT_MAX`] of inline text twice stays under the default batch size.
const BATCH_EVENTS: usize = 200;

/// What [`write()`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// Events appended.
    pub events_written: u64,
    /// Events whose id the journal already held: not written again.
    pub already_present: u64,
    /// Blobs stored (the blob store keeps one copy of equal content).
    pub blobs: u64,
}

/// Writes `parsed` into `journal`, calling `progress` with the number of events handled so
/// far after each batch.
///
/// # Errors
/// A journal error. An event the journal would refuse (its form, limits or conformance
/// profile) is reported before anything is written; an I/O error part-way leaves the batches before it written, and importing the file
/// again completes it.
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
        let appended = journal.append_batch_blocking(chunk, AppendOptions::default())?;
        for a in &appended {
            if a.duplicate {
                written.already_present += 1;
            } else {
                written.events_written += 1;
            }
        }
        done += chunk.len() as u64;
        progress(done);
    }
    Ok(written)
}
