//! What an auditor asks of the journal's Merkle tree: the tree head at the committed head, the
//! root of any earlier size, and inclusion and consistency proofs, with the stored body a leaf
//! is the hash of. The tree is `crate::tree`'s; the proofs' format and their checks are
//! `journal_format::merkle`'s.

use std::ops::ControlFlow;

use journal_format::checkpoint::SignedCheckpoint;
use journal_format::merkle::{leaf_hash, TreeHash};
use journal_format::proof::{
    ConsistencyProof, InclusionProof, CONSISTENCY_FORMAT, INCLUSION_FORMAT,
};
use journal_format::{ChainHash, EventIds, Position};

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

/// Proof documents: what `journal prove` prints and `GET /v1/proofs/...` answers, for
/// `journal check-proof` (or `journal_format::proof`) to check offline.
impl Journal {
    /// The inclusion proof document of the event `event_id`: against the kept checkpoint of
    /// `tree_size` (or an unsigned tree head of that size when none is kept); without a size,
    /// against the latest kept checkpoint that holds the event, else the unsigned tree head.
    /// The document carries the event's stored body and the checkpoint's text.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an unknown event or a size that does not hold it; as
    /// [`Journal::inclusion_proof`].
    pub fn inclusion_document(
        &self,
        event_id: &str,
        tree_size: Option<u64>,
    ) -> Result<InclusionProof> {
        let event = self
            .get(event_id)?
            .ok_or_else(|| Error::InvalidInput(format!("no event has id {event_id:?}")))?;
        self.inclusion_document_at(event.position, tree_size)
    }

    /// The inclusion proof document of the event at `position`, as
    /// [`Journal::inclusion_document`] makes it.
    ///
    /// # Errors
    /// As [`Journal::inclusion_document`].
    pub fn inclusion_document_at(
        &self,
        position: Position,
        tree_size: Option<u64>,
    ) -> Result<InclusionProof> {
        let (size, checkpoint) = self.proof_tree(tree_size, position.0)?;
        let mut documents = self.inclusion_documents(&[position], size, checkpoint.as_ref())?;
        documents
            .pop()
            .ok_or_else(|| Error::Internal("no inclusion document was made".into()))
    }

    /// The inclusion proof documents of the events at `positions`, all against the tree of
    /// `size` events and its `checkpoint` (as [`Journal::proof_tree`] chooses them): the root
    /// is computed, and the checkpoint's text made, once for all of them.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a position the tree of `size` does not hold; as
    /// [`Journal::inclusion_proof`].
    pub fn inclusion_documents(
        &self,
        positions: &[Position],
        size: u64,
        checkpoint: Option<&SignedCheckpoint>,
    ) -> Result<Vec<InclusionProof>> {
        let root = self.tree_root(size)?;
        let checkpoint = checkpoint.map(SignedCheckpoint::to_text);
        positions
            .iter()
            .map(|&position| {
                if position.0 == 0 || position.0 > size {
                    return Err(Error::InvalidInput(format!(
                        "a tree of {size} events does not hold position {position}"
                    )));
                }
                let body = self.stored_body(position)?;
                let event_id = EventIds::from_msgpack(&body)
                    .ok()
                    .and_then(|ids| ids.event_id.map(str::to_owned))
                    .ok_or_else(|| {
                        Error::Internal(format!("the event at {position} has no readable id"))
                    })?;
                Ok(InclusionProof {
                    format: INCLUSION_FORMAT.into(),
                    event_id,
                    position: position.0,
                    leaf_index: position.0 - 1,
                    tree_size: size,
                    leaf_hash: leaf_hash(&body),
                    path: self.inclusion_proof(position, size)?,
                    root,
                    body: InclusionProof::encode_body(&body),
                    checkpoint: checkpoint.clone(),
                })
            })
            .collect()
    }

    /// The consistency proof document from the tree of `old_size` events to that of
    /// `new_size` (without one: the latest kept checkpoint's size, else the tree head), with
    /// the kept checkpoints of both sizes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `old_size` is beyond the newer size; as
    /// [`Journal::consistency_proof`].
    pub fn consistency_document(
        &self,
        old_size: u64,
        new_size: Option<u64>,
    ) -> Result<ConsistencyProof> {
        let (new_size, new_checkpoint) = self.proof_tree(new_size, old_size)?;
        if old_size > new_size {
            return Err(Error::InvalidInput(format!(
                "the older size {old_size} is beyond the newer {new_size}"
            )));
        }
        Ok(ConsistencyProof {
            format: CONSISTENCY_FORMAT.into(),
            old_size,
            old_root: self.tree_root(old_size)?,
            new_size,
            new_root: self.tree_root(new_size)?,
            path: self.consistency_proof(old_size, new_size)?,
            old_checkpoint: self.checkpoint(old_size)?.map(|c| c.to_text()),
            new_checkpoint: new_checkpoint.map(|c| c.to_text()),
        })
    }

    /// The tree size a proof is against and its kept checkpoint: `size`'s, or the latest kept
    /// checkpoint of at least `needed` events, or the tree head, unsigned.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `size` is below `needed`; an I/O error reading the kept
    /// checkpoints.
    pub fn proof_tree(
        &self,
        size: Option<u64>,
        needed: u64,
    ) -> Result<(u64, Option<SignedCheckpoint>)> {
        if let Some(size) = size {
            if size < needed {
                return Err(Error::InvalidInput(format!(
                    "a tree of {size} events does not hold position {needed}"
                )));
            }
            return Ok((size, self.checkpoint(size)?));
        }
        match self
            .latest_checkpoint()?
            .filter(|c| c.checkpoint.tree_size >= needed)
        {
            Some(kept) => Ok((kept.checkpoint.tree_size, Some(kept))),
            None => Ok((self.head().position.0, None)),
        }
    }
}
