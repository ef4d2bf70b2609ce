//! The Merkle tree against the log, as `verify` compares them: the tree built again from the
//! bodies the walk reads, and every hash the stored tree holds compared with it, read a run of
//! hashes at a time. Also the root a kept digest names, against the tree the log gives. What
//! keeps the stored tree from being checked (it failed, or lags) is reported as a problem.

use journal_format::merkle::{leaf_hash, Frontier, TreeHash};
use journal_format::Position;

use crate::journal::Journal;
use crate::tree::Tree;
use crate::verify::report::Problems;

/// How many stored hashes of a level are read at once.
const RUN: u64 = 4096;

/// The stored tree being compared with the log.
pub(super) struct TreeCompare<'j> {
    /// The stored tree, when it is to be checked.
    tree: Option<&'j Tree>,
    /// The leaves of the stored tree compared: it held them when the walk began.
    size: u64,
    /// The tree the walk builds from the log.
    built: Frontier,
    /// Per level, a run of stored hashes read: the index of the first, and the hashes.
    runs: Vec<(u64, Vec<TreeHash>)>,
    /// Stored hashes that differ from the log's, and the first of them (level, index).
    differ: u64,
    first_differ: Option<(u32, u64)>,
    /// The root a kept digest names, and the digest's position.
    digest: Option<(Position, TreeHash)>,
    /// The root of the tree the log gives at the digest's position, once the walk passed it.
    digest_seen: Option<TreeHash>,
    /// The first failure that stopped the comparison.
    failure: Option<String>,
}

impl<'j> TreeCompare<'j> {
    /// Readies the comparison with `journal`'s stored tree (when `check` is on and the journal
    /// keeps one) once it holds the log's head, and with the root of `digest`, when given. A
    /// walk that starts after `boundary` (the archive detached) builds on the stored tree's
    /// hashes of the archived leaves, so that a digest's root is still checked.
    pub fn new(
        journal: &'j Journal,
        check: bool,
        digest: Option<(Position, TreeHash)>,
        boundary: Position,
    ) -> TreeCompare<'j> {
        let mut compare = TreeCompare {
            tree: None,
            size: 0,
            built: Frontier::new(),
            runs: Vec::new(),
            differ: 0,
            first_differ: None,
            digest,
            digest_seen: None,
            failure: None,
        };
        if boundary > Position::ZERO && digest.is_some() {
            match journal.tree().frontier(boundary.0) {
                Ok(frontier) => compare.built = frontier,
                Err(e) => {
                    compare.failure = Some(format!(
                        "the kept digest's root cannot be checked: the tree's hashes of the archived positions ..={boundary} are not readable ({e})"
                    ));
                    compare.digest = None;
                }
            }
        }
        if digest.is_some_and(|(p, _)| p.0 == compare.built.size()) {
            compare.digest_seen = Some(compare.built.root());
        }
        if check && journal.keeps_tree() {
            // Read-only, another process grows the tree: what it made durable is compared,
            // however far that is.
            let grown = match journal.is_read_only() {
                true => journal.tree().failure().map_or(Ok(()), Err),
                false => journal.tree_head().map(|_| ()).map_err(|e| e.to_string()),
            };
            match grown {
                Ok(()) => {
                    compare.tree = Some(journal.tree());
                    compare.size = journal.tree().size();
                }
                Err(why) => compare.failure = Some(why),
            }
        }
        compare
    }

    /// Adds the leaf of the event at `position`, whose stored body is `body`, and compares
    /// each subtree it completes with the stored one.
    pub fn leaf(&mut self, position: Position, body: &[u8]) {
        if position.0 != self.built.size() + 1 {
            // Damage the walk reports elsewhere: the tree cannot be compared past it.
            if self.failure.is_none() && self.built.size() < self.size {
                self.failure = Some(format!(
                    "the log's positions break at {position}, so the tree is compared up to position {} only",
                    self.built.size()
                ));
            }
            self.tree = None;
            self.digest = None;
            return;
        }
        let mut completed = Vec::new();
        self.built.push_with(leaf_hash(body), |level, index, hash| {
            completed.push((level, index, *hash))
        });
        for (level, index, hash) in completed {
            self.compare(level, index, &hash);
        }
        if self.digest.is_some_and(|(p, _)| p == position) {
            self.digest_seen = Some(self.built.root());
        }
    }

    /// Compares the subtree `index` of `level` the log gives with the stored one, when the
    /// stored tree holds it.
    fn compare(&mut self, level: u32, index: u64, built: &TreeHash) {
        let Some(tree) = self.tree else {
            return;
        };
        if (index + 1) << level > self.size {
            return;
        }
        let level_at = level as usize;
        while self.runs.len() <= level_at {
            self.runs.push((0, Vec::new()));
        }
        let Some((first, run)) = self.runs.get_mut(level_at) else {
            return;
        };
        if index < *first || index >= *first + run.len() as u64 {
            let available = (self.size >> level) - index;
            match tree.hashes(level, index, available.min(RUN) as usize) {
                Ok(read) => (*first, *run) = (index, read),
                Err(e) => {
                    self.failure = Some(format!("reading the stored tree: {e}"));
                    self.tree = None;
                    return;
                }
            }
        }
        let stored = run.get((index - *first) as usize);
        if stored != Some(built) {
            self.differ += 1;
            self.first_differ.get_or_insert((level, index));
        }
    }

    /// Reports what the comparison found: stored hashes that differ, what stopped it, and a
    /// kept root the log does not give.
    pub fn finish(self, problems: &mut Problems) {
        if let Some((level, index)) = self.first_differ {
            let from = (index << level) + 1;
            let to = (index + 1) << level;
            problems.problem(
                "tree",
                None,
                None,
                Some(Position(from)),
                format!(
                    "{} stored hashes of the Merkle tree differ from the log's; the first covers positions {from}..={to} (level {level}, subtree {index}); the tree is rebuilt if its files are deleted",
                    self.differ
                ),
            );
        }
        if let Some(failure) = self.failure {
            problems.problem(
                "tree",
                None,
                None,
                None,
                format!("the Merkle tree was not checked whole: {failure}"),
            );
        }
        // A digest the walk did not reach is reported by the walk (`digest_beyond_head`).
        if let (Some((position, kept)), Some(built)) = (self.digest, self.digest_seen) {
            if kept != built {
                problems.problem(
                    "digest_mismatch",
                    None,
                    None,
                    Some(position),
                    format!("the kept digest's tree root is {kept}, the log's tree of {position} events has {built}: history was rewritten"),
                );
            }
        }
    }
}
