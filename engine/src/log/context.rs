//! What recovery works in: the storage and the journal's directory, what the journal's evidence
//! records as committed, whether recovery may change files, and the report of what it did.
//! Opening a segment and scanning a tail take it whole instead of each part as an argument.

use std::path::Path;

use journal_format::Position;

use crate::log::report::RecoveryReport;
use crate::storage::Storage;

/// The context of one recovery (or of one look at a log another process writes).
pub(crate) struct RecoveryContext<'a> {
    /// Where the journal's files are kept.
    pub storage: &'a dyn Storage,
    /// The journal's directory.
    pub dir: &'a Path,
    /// The last position the journal's evidence (`HEAD`, the index) records as durably
    /// committed: bytes a torn-write rule would cut at or before it were acknowledged, so they
    /// are damage instead (`Position::ZERO` when there is no evidence).
    pub committed: Position,
    /// Another process writes the journal: nothing is cut or removed, and whatever follows the
    /// last complete batch is taken as a write under way.
    pub read_only: bool,
    /// Where what recovery did is reported.
    pub report: &'a mut RecoveryReport,
}
