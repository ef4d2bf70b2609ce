//! The recovered log held against the journal's evidence of its past: the head record (`HEAD`)
//! and the index's head. A log that ends before a position the evidence records, or holds
//! another chain link there, lost or rewrote history; opening refuses it with
//! [`Error::HistoryMismatch`], unless the caller asked for salvage, which accepts the log as it
//! is and says so in the recovery report.
//!
//! The index's head counts as evidence only when the last writer was durable: a buffered writer
//! acknowledges (and indexes) appends before they are synced, so after a power failure its index
//! may be ahead of the log without anything having been taken away (`docs/FORMAT.md`, "Head
//! record").

use journal_format::head_record::HeadRecord;
use journal_format::{ChainHash, Position};

use crate::error::{Error, Result};
use crate::index::INDEX_FILE;
use crate::log::head_file::HEAD_FILE;
use crate::log::read;
use crate::log::report::{RecoveryAction, RecoveryReport};
use crate::log::Log;

/// What to do with the index after the check.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IndexVerdict {
    /// It agrees with the log: catch it up from its head.
    Keep,
    /// Clear it and rebuild it from the log, for this reason.
    Rebuild(String),
}

/// The last position the evidence records as durably committed: the head record's, or the
/// index's head when the last writer was durable, whichever is later. Recovery never cuts a
/// torn tail at or before it.
pub(crate) fn committed(
    head_record: Option<HeadRecord>,
    index_head: (Position, ChainHash),
) -> Position {
    let recorded = head_record.map_or(Position::ZERO, |r| r.position);
    let durable_writer = head_record.is_none_or(|r| !r.buffered());
    if durable_writer {
        recorded.max(index_head.0)
    } else {
        recorded
    }
}

/// How the log differs from one piece of evidence.
struct Contradiction {
    /// The first position concerned.
    position: Position,
    detail: String,
}

/// Checks the recovered `log` against the head record and the index's head (`index_head`,
/// position 0 when the index is empty or new).
///
/// # Errors
/// [`Error::HistoryMismatch`] naming the evidence and the positions, when `salvage` is off;
/// an I/O error reading the log.
pub(crate) fn check(
    log: &Log,
    head_record: Option<HeadRecord>,
    index_head: (Position, ChainHash),
    salvage: bool,
    report: &mut RecoveryReport,
) -> Result<IndexVerdict> {
    if let Some(record) = head_record {
        if let Some(c) = contradiction(log, HEAD_FILE, record.position, record.hash, salvage)? {
            accept_or_refuse(HEAD_FILE, c, salvage, report)?;
        }
    }
    let (position, hash) = index_head;
    let Some(c) = contradiction(log, INDEX_FILE, position, hash, salvage)? else {
        return Ok(IndexVerdict::Keep);
    };
    let buffered_writer = head_record.is_some_and(|r| r.buffered());
    if buffered_writer {
        return Ok(IndexVerdict::Rebuild(format!(
            "{} (the last writer acknowledged appends before syncing them: buffered durability)",
            c.detail
        )));
    }
    let reason = c.detail.clone();
    accept_or_refuse(INDEX_FILE, c, salvage, report)?;
    Ok(IndexVerdict::Rebuild(reason))
}

fn accept_or_refuse(
    evidence: &str,
    c: Contradiction,
    salvage: bool,
    report: &mut RecoveryReport,
) -> Result<()> {
    if !salvage {
        return Err(Error::HistoryMismatch {
            evidence: evidence.into(),
            position: c.position,
            detail: c.detail,
        });
    }
    tracing::warn!(evidence, detail = %c.detail, "salvage accepted a log that contradicts its evidence");
    report.actions.push(RecoveryAction::HistoryAccepted {
        evidence: evidence.into(),
        position: c.position.0,
        detail: c.detail,
    });
    Ok(())
}

/// How the log contradicts `evidence`'s record of `(position, hash)`, if it does. A frame that
/// cannot be read there is that damage ([`Error::Corruption`], naming its place), unless
/// `salvage` accepts it as a contradiction.
fn contradiction(
    log: &Log,
    evidence: &str,
    position: Position,
    hash: ChainHash,
    salvage: bool,
) -> Result<Option<Contradiction>> {
    let head = log.head();
    if position == Position::ZERO {
        return Ok(None);
    }
    if position > head.position {
        return Ok(Some(Contradiction {
            position: head.position.next(),
            detail: format!(
                "the log ends at position {} but {evidence} records position {position} as committed: positions {}..={position} are missing",
                head.position,
                head.position.next()
            ),
        }));
    }
    if let Some(b) = log
        .boundary()
        .filter(|b| !b.attached && position <= b.last_archived)
    {
        // Archived and detached: only the boundary's link, which the manifest keeps, is at hand.
        if position == b.last_archived && b.last_hash != hash {
            return Ok(Some(Contradiction {
                position,
                detail: format!(
                    "the archive manifest's chain link at position {position} is {}, {evidence} recorded {hash}",
                    b.last_hash
                ),
            }));
        }
        return Ok(None);
    }
    match read::read_position(log, position) {
        Ok(event) if event.hash == hash => Ok(None),
        Ok(event) => Ok(Some(Contradiction {
            position,
            detail: format!(
                "the log's chain link at position {position} is {}, {evidence} recorded {hash}: the history up to position {position} was rewritten",
                event.hash
            ),
        })),
        Err(e) if e.is_corruption() && salvage => Ok(Some(Contradiction {
            position,
            detail: format!("position {position}, which {evidence} records, cannot be read: {e}"),
        })),
        Err(e) => Err(e),
    }
}
