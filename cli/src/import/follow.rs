//! `journal import --follow` (and `journal serve --follow-import`): imports the sessions
//! found, then looks at them again every `--poll-ms` and imports what they gained, until
//! stopped (SIGINT or SIGTERM; the server's stop), so that a running agent can be reviewed
//! live.
//!
//! - A file is read again when its size, inode or modification time changed; a file whose size
//!   shrank or whose inode changed was rewritten or rotated, is reported, and is read again
//!   from its start. Directories are searched again each time, so a session that starts later
//!   is imported too (a file's format is told once, from its first record).
//! - Only lines written whole are read (a runtime writes a line at a time; the rest of a line
//!   being written is read on the next pass).
//! - Only what is new is appended: the events made from a file are compared with those already
//!   handled (by id and content), and the rest goes through [`import::write`], whose event ids
//!   make any repeat a no-op, so following and importing the same file again never duplicate
//!   anything. A source record that changed (a message still streaming when it was read) is
//!   recorded as a revision, as a second import records it.
//! - A file that cannot be parsed (a damaged line) is reported once and kept under watch; an
//!   error of the journal ends the command.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use journal_engine::Journal;
use journal_replay::import::{self, Options, Parsed};
use serde_json::json;

use super::find::{self, Unit};
use super::{parse_unit, text, ImportArgs, Summaries};
use crate::{out, Failure};

/// What a file or an events directory looked like when it was last read: enough to tell that
/// it grew, or was rewritten or rotated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    /// Bytes (the sum over an events directory's files).
    len: u64,
    /// The inode (of the file; of the directory for an events directory).
    inode: u64,
    /// The modification time, in nanoseconds (the newest over an events directory).
    modified_ns: i128,
    /// Files (1 for a file).
    files: u64,
}

impl Stamp {
    /// Whether `self` is a rewritten or rotated file rather than `before` grown.
    fn replaces(&self, before: &Stamp) -> bool {
        self.len < before.len || self.inode != before.inode
    }
}

/// One session under watch.
#[derive(Default)]
struct Watched {
    /// How it looked when last read.
    stamp: Option<Stamp>,
    /// The last parse error reported, so that it is reported once.
    error: Option<String>,
}

/// The events and blobs already handled, by id and content hash.
#[derive(Default)]
struct Handled {
    events: HashMap<String, blake3::Hash>,
    blobs: HashSet<String>,
}

/// Imports the sessions `args` names, and what they gain, until `stop` completes (checked
/// between passes); prints a summary per session in `form` when it is first imported and a
/// line each time it gains events.
///
/// # Errors
/// A journal error, or a path that cannot be read.
pub async fn follow(
    journal: &Journal,
    args: &ImportArgs,
    form: Summaries,
    stop: impl std::future::Future<Output = ()>,
) -> Result<u8, Failure> {
    tokio::pin!(stop);
    let options = args.options();
    let poll = Duration::from_millis(args.poll_ms.max(1));
    let mut watched: BTreeMap<Unit, Watched> = BTreeMap::new();
    let mut handled = Handled::default();
    let mut detections = find::Detections::default();
    loop {
        let found = find::find_again(args, &mut detections)?;
        for unit in found.units {
            let w = watched.entry(unit.clone()).or_default();
            tokio::task::block_in_place(|| {
                pass(journal, args, &options, &unit, w, &mut handled, form)
            })?;
        }
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(poll) => {}
        }
    }
    Ok(0)
}

/// Reads `unit` again if it changed since `w` saw it, and imports what is new.
fn pass(
    journal: &Journal,
    args: &ImportArgs,
    options: &Options,
    unit: &Unit,
    w: &mut Watched,
    handled: &mut Handled,
    form: Summaries,
) -> Result<(), Failure> {
    let Some(stamp) = stamp(unit) else {
        return Ok(()); // gone between the search and now: looked at again on the next pass
    };
    if w.stamp == Some(stamp) {
        return Ok(());
    }
    let first = w.stamp.is_none();
    if w.stamp.is_some_and(|before| stamp.replaces(&before)) {
        out::warn(format_args!(
            "{}: rewritten or rotated; reading it again from its start",
            unit.path().display()
        ));
    }
    w.stamp = Some(stamp);
    let mut parsed = match parse_unit(args.format, unit, options) {
        Ok(parsed) => parsed,
        Err(e) => {
            let message = e.to_string();
            if w.error.as_ref() != Some(&message) {
                out::warn(format_args!("{message} (still following it)"));
                w.error = Some(message);
            }
            return Ok(());
        }
    };
    w.error = None;
    let new = unhandled(&parsed, handled);
    if new.events.is_empty() && !first {
        return Ok(());
    }
    let written = import::write(journal, &new, &mut |_| {})?;
    for e in &new.events {
        handled.events.insert(e.event_id.clone(), fingerprint(e));
    }
    handled
        .blobs
        .extend(new.blobs.iter().map(|b| b.reference.clone()));
    parsed.summary.events_written = Some(written.events_written);
    let line = || {
        format!(
            "{}: {} events written, {} revised ({} events from {} records in all)",
            parsed.summary.file,
            written.events_written,
            written.revised,
            parsed.summary.events,
            parsed.summary.records
        )
    };
    match (form, first) {
        (Summaries::Json, _) => out::line(json!(parsed.summary))?,
        (Summaries::Text, true) => out::text(text(&parsed, written))?,
        (Summaries::Text, false) => out::line(line())?,
        (Summaries::Log, _) => tracing::info!(target: "journal::import", "{}", line()),
    }
    Ok(())
}

/// The part of `parsed` not handled yet: events whose id is new or whose content changed,
/// and blobs not stored yet.
fn unhandled(parsed: &Parsed, handled: &Handled) -> Parsed {
    Parsed {
        events: parsed
            .events
            .iter()
            .filter(|e| handled.events.get(&e.event_id) != Some(&fingerprint(e)))
            .cloned()
            .collect(),
        blobs: parsed
            .blobs
            .iter()
            .filter(|b| !handled.blobs.contains(&b.reference))
            .cloned()
            .collect(),
        summary: parsed.summary.clone(),
    }
}

/// A hash of an event's content.
fn fingerprint(event: &journal_format::Envelope) -> blake3::Hash {
    blake3::hash(&serde_json::to_vec(event).unwrap_or_default())
}

/// How `unit` looks now; `None` when it cannot be read.
fn stamp(unit: &Unit) -> Option<Stamp> {
    match unit {
        Unit::File(path) => {
            let meta = std::fs::metadata(path).ok()?;
            Some(Stamp {
                len: meta.len(),
                inode: inode(&meta),
                modified_ns: modified_ns(&meta),
                files: 1,
            })
        }
        Unit::OpenHandsEvents(dir) => {
            let meta = std::fs::metadata(dir).ok()?;
            let mut stamp = Stamp {
                len: 0,
                inode: inode(&meta),
                modified_ns: modified_ns(&meta),
                files: 0,
            };
            for entry in std::fs::read_dir(dir).ok()?.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                stamp.len += meta.len();
                stamp.files += 1;
                stamp.modified_ns = stamp.modified_ns.max(modified_ns(&meta));
            }
            Some(stamp)
        }
    }
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// The modification time in nanoseconds since the epoch (0 when the platform has none).
fn modified_ns(meta: &std::fs::Metadata) -> i128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}
