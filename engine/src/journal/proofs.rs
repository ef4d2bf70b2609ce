//! What an auditor asks of the journal's Merkle tree: the tree head at the committed head, the
//! root of any earlier size, and inclusion and consistency proofs, with the stored body a leaf
//! is the hash of. The tree is `crate::tree`'s; the proofs' format and their checks are
//! `journal_format::merkle`'s.

use std::ops::ControlFlow;

use journal_format::merkle::TreeHash;
use journal_format::{ChainHash, Position};

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::log::read::Chain;

/// The journal's state as one digest: the committed head (its position and chain link) and the
/// Merkle tree of the events up to it. Keep it outside the journal; `verify --digest` checks
/// the journal still holds it, and a consistency proof that a later tree extends it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TreeHead {
    /// The head's position: also the tree's size (leaf `i` is the event at position `i + 1`).
    pub position: Position,
    /// The head's chain link.
    pub hash: ChainHash,
    /// The root of the Merkle tree of the events at positions `1..=position`.
    pub root: TreeHash,
}

impl Journal {
    /// The tree head of every event committed when called: waits for the indexer to grow the
    /// tree that far.
    ///
    /// # Errors
    /// [`Error::Tree`] when the tree does not hold the head (it failed, or, read-only, the
    /// process that writes the journal has not grown it yet); an I/O error.
    pub fn tree_head(&self) -> Result<TreeHead> {
        let head = self.head();
        self.tree_waited(head.position.0)?;
        Ok(TreeHead {
            position: head.position,
            hash: head.hash,
            root: self.tree().root_at(head.position.0)?,
        })
    }

    /// The root of the Merkle tree of the first `size` events.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a size beyond the head; [`Error::Tree`] as for
    /// [`Journal::tree_head`].
    pub fn tree_root(&self, size: u64) -> Result<TreeHash> {
        self.tree_waited(size)?;
        self.tree().root_at(size)
    }

    /// The inclusion proof of the event at `position` in the tree of `tree_size` events (RFC
    /// 9162's `PATH`, the siblings from the leaf up); it checks with
    /// `journal_format::merkle::verify_inclusion` against leaf index `position - 1`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a position not in the tree of `tree_size` or a size beyond
    /// the head; [`Error::Tree`] as for [`Journal::tree_head`].
    pub fn inclusion_proof(&self, position: Position, tree_size: u64) -> Result<Vec<TreeHash>> {
        if position == Position::ZERO || position.0 > tree_size {
            return Err(Error::InvalidInput(format!(
                "position {position} is not in the tree of {tree_size} events"
            )));
        }
        self.tree_waited(tree_size)?;
        self.tree().inclusion_proof(position.0 - 1, tree_size)
    }

    /// The consistency proof from the tree of `old_size` events to the tree of `new_size` (RFC
    /// 9162's `PROOF`); it checks with `journal_format::merkle::verify_consistency`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `old_size > new_size` or `new_size` is beyond the head;
    /// [`Error::Tree`] as for [`Journal::tree_head`].
    pub fn consistency_proof(&self, old_size: u64, new_size: u64) -> Result<Vec<TreeHash>> {
        if old_size > new_size {
            return Err(Error::InvalidInput(format!(
                "a consistency proof goes from a smaller tree to a larger one, not from {old_size} to {new_size}"
            )));
        }
        self.tree_waited(new_size)?;
        self.tree().consistency_proof(old_size, new_size)
    }

    /// The stored body of the event at `position`: the bytes its leaf hashes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] past the head, [`Error::Corruption`] when the frame is damaged.
    pub fn stored_body(&self, position: Position) -> Result<Vec<u8>> {
        if position == Position::ZERO || position > self.head().position {
            return Err(Error::InvalidInput(format!(
                "position {position} is not in the log"
            )));
        }
        let mut body = None;
        self.scan(position, Some(position), Chain::Unverified, |record| {
            body = Some(record.body.to_vec());
            Ok(ControlFlow::Break(()))
        })?;
        body.ok_or_else(|| Error::InvalidInput(format!("position {position} is not in the log")))
    }

    /// Waits until the tree holds `size` events, which must be committed.
    fn tree_waited(&self, size: u64) -> Result<()> {
        let head = self.head().position;
        if size > head.0 {
            return Err(Error::InvalidInput(format!(
                "the journal holds {head} events, not {size}"
            )));
        }
        let tree = self.tree();
        if tree.size() < size && !self.is_read_only() {
            self.wait_indexed()?;
        }
        if tree.size() < size {
            let why = match tree.lag_cause() {
                Some(failure) => failure,
                None if self.is_read_only() => {
                    "the process writing the journal has not grown it that far yet".into()
                }
                None => "it lags the log".into(),
            };
            return Err(Error::Tree(format!(
                "the tree holds {} of the {size} events asked for: {why}",
                tree.size()
            )));
        }
        Ok(())
    }
}
