//! Signed checkpoints through the journal: signing the tree head with a key, keeping a
//! checkpoint a witness cosigned (once it is checked against the journal), and reading those
//! kept. The store and the signer thread are `crate::checkpoints`'.

use journal_format::checkpoint::{Checkpoint, SignedCheckpoint, SigningKey};
use journal_format::Position;

use crate::error::{Error, Result};
use crate::journal::Journal;

impl Journal {
    /// The journal's id, a UUID v4 made when it was first opened for writing; checkpoints name
    /// it in their origin.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a journal opened read-only that was never opened for writing
    /// since ids exist.
    pub fn id(&self) -> Result<&str> {
        self.inner.id.as_deref().ok_or_else(|| {
            Error::Unsupported(
                "the journal has no id yet: open it for writing once to give it one".into(),
            )
        })
    }

    /// Signs a checkpoint of the tree head with `key`, keeps it and returns it. When a
    /// checkpoint of that tree size is kept already, `key`'s signature is added to it.
    ///
    /// # Errors
    /// [`Error::ReadOnly`]; [`Error::Tree`] when the tree does not hold the head; an I/O error.
    pub fn sign_checkpoint(&self, key: &SigningKey) -> Result<SignedCheckpoint> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let _one_at_a_time = self.inner.signing.lock().unwrap_or_else(|p| p.into_inner());
        let head = self.tree_head()?;
        let store = &self.inner.checkpoints;
        let mut signed = match store.get(head.position.0)? {
            Some(kept) => kept,
            None => SignedCheckpoint {
                checkpoint: Checkpoint {
                    origin: Checkpoint::origin_for(self.id()?),
                    tree_size: head.position.0,
                    root: head.root,
                    chain_position: head.position,
                    chain_hash: head.hash,
                    time_ns: self.inner.options.clock.now_unix_ns(),
                },
                signatures: Vec::new(),
            },
        };
        signed
            .cosign(key)
            .map_err(|e| Error::InvalidInput(format!("signing: {e}")))?;
        store.put(&signed)?;
        Ok(signed)
    }

    /// Keeps `signed` (a checkpoint of this journal a witness cosigned, say), with the
    /// signatures of the one kept for its tree size, once it is checked against the journal:
    /// its origin, and its tree size, root and chain head as the journal holds them. Signatures
    /// are not checked here (the journal holds no verifier keys); `check-proof` checks them.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what does not match the journal; [`Error::ReadOnly`].
    pub fn keep_checkpoint(&self, signed: &SignedCheckpoint) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let _one_at_a_time = self.inner.signing.lock().unwrap_or_else(|p| p.into_inner());
        self.check_checkpoint(&signed.checkpoint)?;
        let mut merged = match self.inner.checkpoints.get(signed.checkpoint.tree_size)? {
            Some(kept) if kept.checkpoint == signed.checkpoint => kept,
            _ => SignedCheckpoint {
                checkpoint: signed.checkpoint.clone(),
                signatures: Vec::new(),
            },
        };
        for s in &signed.signatures {
            merged
                .signatures
                .retain(|k| !(k.name == s.name && k.key_id == s.key_id));
            merged.signatures.push(s.clone());
        }
        self.inner.checkpoints.put(&merged)
    }

    /// Whether `checkpoint` states what this journal holds.
    fn check_checkpoint(&self, checkpoint: &Checkpoint) -> Result<()> {
        let mismatch = |what: String| Err(Error::InvalidInput(format!("the checkpoint {what}")));
        let origin = Checkpoint::origin_for(self.id()?);
        if checkpoint.origin != origin {
            return mismatch(format!(
                "is of {:?}, this journal is {origin:?}",
                checkpoint.origin
            ));
        }
        let size = checkpoint.tree_size;
        if size > self.head().position.0 {
            return mismatch(format!(
                "names {size} events, the journal holds {}",
                self.head().position
            ));
        }
        let root = self.tree_root(size)?;
        if checkpoint.root != root {
            return mismatch(format!(
                "says root {} for {size} events, the journal's is {root}",
                checkpoint.root
            ));
        }
        let at = checkpoint.chain_position;
        let hash = match at {
            Position::ZERO => journal_format::ChainHash::GENESIS,
            _ => self.get_position(at)?.hash,
        };
        if checkpoint.chain_hash != hash {
            return mismatch(format!(
                "says chain link {} at {at}, the journal holds {hash}",
                checkpoint.chain_hash
            ));
        }
        Ok(())
    }

    /// The checkpoint kept for tree size `size`.
    ///
    /// # Errors
    /// An I/O error, or a kept checkpoint that cannot be read.
    pub fn checkpoint(&self, size: u64) -> Result<Option<SignedCheckpoint>> {
        self.inner.checkpoints.get(size)
    }

    /// The tree sizes of the checkpoints kept, in order.
    ///
    /// # Errors
    /// An I/O error.
    pub fn checkpoint_sizes(&self) -> Result<Vec<u64>> {
        self.inner.checkpoints.sizes()
    }

    /// The checkpoint of the largest tree kept.
    ///
    /// # Errors
    /// As [`Journal::checkpoint`].
    pub fn latest_checkpoint(&self) -> Result<Option<SignedCheckpoint>> {
        match self.checkpoint_sizes()?.last() {
            Some(size) => self.checkpoint(*size),
            None => Ok(None),
        }
    }

    /// The checkpoint of the smallest tree kept that holds `position`.
    ///
    /// # Errors
    /// As [`Journal::checkpoint`].
    pub fn checkpoint_covering(&self, position: Position) -> Result<Option<SignedCheckpoint>> {
        match self
            .checkpoint_sizes()?
            .into_iter()
            .find(|s| *s >= position.0)
        {
            Some(size) => self.checkpoint(size),
            None => Ok(None),
        }
    }
}
