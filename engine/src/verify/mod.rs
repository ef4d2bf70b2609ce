//! `verify`: an independent walk over everything the journal stores. Every frame's checksums,
//! the chain across all segments, batch boundaries, segment headers and footers (and their
//! sparse indexes), the index against the log (nothing missing, nothing extra), the Merkle tree
//! against the log, every referenced blob against its hash, and optionally a digest (position,
//! chain link and tree root) the user kept outside the journal, which also catches truncated or
//! rewritten history. It reports every problem with its place; it repairs nothing.

mod archive_check;
mod blob_check;
mod index_check;
mod report;
mod tree_check;
mod walk;

pub use report::{ArchiveCheck, Problem, ReportHead, VerifyOptions, VerifyReport};

use journal_format::{ChainHash, Position};

use crate::error::Result;
use crate::journal::Journal;
use crate::log::Head;
use archive_check::ArchiveSide;
use blob_check::check_blobs;
use index_check::IndexCompare;
use tree_check::TreeCompare;
use walk::{unexpected_segments, Walk};

impl Journal {
    /// Checks everything the journal stores, up to the head at the time of the call. `progress`
    /// is called with bytes checked and bytes in all. Chain links are checked a chunk of frames
    /// at a time on as many threads as the machine has cores (up to 8).
    ///
    /// # Errors
    /// Only for failures to read at all (I/O); damage is reported in the [`VerifyReport`].
    pub fn verify(
        &self,
        options: &VerifyOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifyReport> {
        let log = self.log();
        let head: Head = log.head();
        let segments = log.segments();
        let states: Vec<_> = segments.iter().map(|s| s.snapshot()).collect();
        let total: u64 = states.iter().map(|s| s.end_offset).sum();
        let archived = ArchiveSide::of(self)?;
        // Detached, the index and the tree cover events the walk cannot read: not compared.
        let whole = archived.as_ref().is_none_or(|a| a.attached);
        let index = IndexCompare::new(self, options.check_index && whole);
        let digest_root = options
            .digest
            .zip(options.digest_root)
            .map(|((p, _), r)| (p, r));
        let start = archived
            .as_ref()
            .map_or((Position::FIRST, ChainHash::GENESIS), ArchiveSide::start);
        let boundary = Position(start.0 .0.saturating_sub(1));
        let tree = TreeCompare::new(self, options.check_tree && whole, digest_root, boundary);
        let mut walk = Walk::new(start, options.digest, index, tree, total, progress);
        for (segment, state) in segments.iter().zip(&states) {
            walk.segment(segment, state)?;
        }
        let Walk {
            mut problems,
            index,
            tree,
            counts,
            blob_refs,
            digest_seen,
            ..
        } = walk;
        unexpected_segments(self, &mut problems);
        if !digest_seen {
            digest_unseen(options.digest, start.0, head.position, &mut problems);
        }
        index.finish(&mut problems, &counts)?;
        tree.finish(&mut problems);
        if options.check_blobs {
            check_blobs(self.blobs(), &blob_refs, &mut problems)?;
        }
        let archive = archived
            .map(|side| side.check(self, &mut problems))
            .transpose()?;
        progress(total, total);
        Ok(VerifyReport {
            ok: problems.list.is_empty(),
            events: counts.events,
            segments: segments.len(),
            head: ReportHead {
                position: head.position.0,
                hash: head.hash.to_hex(),
            },
            problems: problems.list,
            archive,
        })
    }
}

/// The problem of a kept digest the walk did not pass: before `start` (archived, the archive
/// detached) it could not be checked; past the head, history was truncated.
fn digest_unseen(
    digest: Option<(Position, ChainHash)>,
    start: Position,
    head: Position,
    problems: &mut report::Problems,
) {
    let Some((at, _)) = digest else {
        return;
    };
    let (kind, detail) = if at < start {
        (
            "digest_archived",
            format!(
            "the kept digest is at position {at}, which is archived: attach the archive to check it"
        ),
        )
    } else {
        ("digest_beyond_head", format!(
            "the kept digest is at position {at} but the journal ends at {head}: history was truncated"
        ))
    };
    problems.problem(kind, None, None, Some(at), detail);
}
