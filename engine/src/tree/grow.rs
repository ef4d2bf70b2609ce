//! Growing the tree: the committed bodies read back from the log, each hashed as a leaf and
//! pushed into the frontier, and every subtree that completes written to its level, a level's
//! hashes gathered and written together.

use journal_format::merkle::leaf_hash;
use journal_format::Position;

use crate::error::{Error, Result};
use crate::log::read::{self, Chain};
use crate::log::Log;
use crate::tree::levels::HASH_LEN;
use crate::tree::Tree;

/// How many leaves are gathered before their hashes are written (about 1 MiB of level 0).
const WRITE_LEAVES: u64 = 32 * 1024;

/// Hashes completed and not yet written: per level, the index of the first and the bytes.
#[derive(Default)]
struct Pending {
    levels: Vec<(u64, Vec<u8>)>,
}

impl Pending {
    fn add(&mut self, level: u32, index: u64, hash: &[u8; 32]) {
        let level = level as usize;
        while self.levels.len() <= level {
            self.levels.push((u64::MAX, Vec::new()));
        }
        if let Some((first, bytes)) = self.levels.get_mut(level) {
            if bytes.is_empty() {
                *first = index;
            }
            debug_assert_eq!(*first + bytes.len() as u64 / HASH_LEN, index);
            bytes.extend_from_slice(hash);
        }
    }

    /// Writes what is pending, the lowest level first.
    fn write(&mut self, tree: &Tree) -> Result<()> {
        for (level, (first, bytes)) in self.levels.iter_mut().enumerate() {
            if !bytes.is_empty() {
                tree.levels.write(level, *first, bytes)?;
                bytes.clear();
            }
        }
        Ok(())
    }
}

impl Tree {
    /// Grows the tree to the log's position `to`, reading the bodies it lacks from the log.
    /// Nothing to do when it holds them already.
    ///
    /// # Errors
    /// Reading the log or writing a level: the tree keeps what it held, and the next growth
    /// tries again from there.
    pub(crate) fn grow(&self, log: &Log, to: Position) -> Result<()> {
        if let Some(why) = self.failure() {
            return Err(Error::Tree(format!("the tree stopped growing: {why}")));
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let grown = self.grow_from_log(log, to);
        if let Err(e) = &grown {
            self.set_back(&format!("growing the tree to position {to} failed: {e}"));
        }
        grown
    }

    /// After a failed growth, sets the frontier back to the size readers were told (every hash
    /// of it is written), so that the next growth tries again from there: a full disk that is
    /// freed does not stop the tree for the rest of the process. What failed is kept for the
    /// readers the tree then lags; a frontier that cannot be set back fails the tree.
    fn set_back(&self, what_failed: &str) {
        let mut writing = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        *self.lagging.lock().unwrap_or_else(|p| p.into_inner()) = Some(what_failed.to_owned());
        match super::frontier_at(&self.levels, self.size()) {
            Ok(frontier) => writing.frontier = frontier,
            Err(e) => self.fail(&format!("{what_failed}; setting it back failed: {e}")),
        }
    }

    fn grow_from_log(&self, log: &Log, to: Position) -> Result<()> {
        let mut writing = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let from = Position(writing.frontier.size() + 1);
        if from > to {
            return Ok(());
        }
        let mut pending = Pending::default();
        let mut unwritten = 0;
        read::for_each_frame(log, from, to, Chain::Unverified, &mut |raw| {
            let expected = writing.frontier.size() + 1;
            if raw.header.meta.position.0 != expected {
                return Err(Error::Internal(format!(
                    "the tree expected position {expected}, the log gave {}",
                    raw.header.meta.position
                )));
            }
            writing
                .frontier
                .push_with(leaf_hash(raw.body), |level, index, hash| {
                    pending.add(level, index, &hash.0);
                });
            unwritten += 1;
            if unwritten >= WRITE_LEAVES {
                pending.write(self)?;
                self.size.store(
                    writing.frontier.size(),
                    std::sync::atomic::Ordering::Release,
                );
                unwritten = 0;
            }
            Ok(true)
        })?;
        pending.write(self)?;
        let size = writing.frontier.size();
        if size != to.0 {
            return Err(Error::Internal(format!(
                "the tree grew to {size} leaves, not to position {to}"
            )));
        }
        self.size.store(size, std::sync::atomic::Ordering::Release);
        *self.lagging.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}
