//! Growing the tree: each committed event's leaf hash (given by the writer, which hashed the
//! body where it was encoded, or hashed from the body read back from the log) pushed into the
//! frontier, and every subtree that completes written to its level, a level's hashes gathered
//! and written together.

use std::sync::atomic::Ordering;

use journal_format::merkle::{leaf_hash, TreeHash};
use journal_format::Position;

use crate::error::{Error, Result};
use crate::log::read::{self, Chain};
use crate::log::Log;
use crate::tree::levels::HASH_LEN;
use crate::tree::{Tree, Writing};

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
    /// Grows the tree to the log's position `to`: from the leaf hashes `given` (each event's
    /// position and its hash, when hashed where its body was encoded) as far as they continue
    /// the tree, then from the bodies read back from the log for the rest. Nothing to do when
    /// it holds them already.
    ///
    /// # Errors
    /// Reading the log or writing a level: the tree keeps what it held, and the next growth
    /// tries again from there.
    pub(crate) fn grow(
        &self,
        log: &Log,
        given: impl IntoIterator<Item = (Position, Option<TreeHash>)>,
        to: Position,
    ) -> Result<()> {
        if let Some(why) = self.failure() {
            return Err(Error::Tree(format!("the tree stopped growing: {why}")));
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let grown = self.grow_unchecked(log, given, to);
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

    fn grow_unchecked(
        &self,
        log: &Log,
        given: impl IntoIterator<Item = (Position, Option<TreeHash>)>,
        to: Position,
    ) -> Result<()> {
        let mut writing = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if writing.frontier.size() >= to.0 {
            return Ok(());
        }
        let mut growth = Growth {
            tree: self,
            writing: &mut writing,
            pending: Pending::default(),
            unwritten: 0,
        };
        for (position, leaf) in given {
            let next = growth.next();
            if position < next {
                continue;
            }
            match leaf {
                Some(leaf) if position == next && position <= to => growth.push(leaf)?,
                _ => break,
            }
        }
        let from = growth.next();
        if from <= to {
            read::for_each_frame(log, from, to, Chain::Unverified, &mut |raw| {
                let expected = growth.next();
                if raw.header.meta.position != expected {
                    return Err(Error::Internal(format!(
                        "the tree expected position {expected}, the log gave {}",
                        raw.header.meta.position
                    )));
                }
                growth.push(leaf_hash(raw.body))?;
                Ok(true)
            })?;
        }
        growth.finish(to)
    }
}

/// One growth under the writer's lock: leaves pushed into the frontier, the hashes they complete
/// written a batch at a time, readers told of each batch written.
struct Growth<'t, 'w> {
    tree: &'t Tree,
    writing: &'w mut Writing,
    pending: Pending,
    unwritten: u64,
}

impl Growth<'_, '_> {
    /// The position of the next leaf.
    fn next(&self) -> Position {
        Position(self.writing.frontier.size() + 1)
    }

    fn push(&mut self, leaf: TreeHash) -> Result<()> {
        let pending = &mut self.pending;
        self.writing.frontier.push_with(leaf, |level, index, hash| {
            pending.add(level, index, &hash.0)
        });
        self.unwritten += 1;
        if self.unwritten >= WRITE_LEAVES {
            self.write()?;
        }
        Ok(())
    }

    /// Writes the pending hashes, then tells readers the size they complete.
    fn write(&mut self) -> Result<()> {
        self.pending.write(self.tree)?;
        self.tree
            .size
            .store(self.writing.frontier.size(), Ordering::Release);
        self.unwritten = 0;
        Ok(())
    }

    /// Writes what is pending; the tree must now hold the leaves to `to`.
    fn finish(mut self, to: Position) -> Result<()> {
        self.write()?;
        let size = self.writing.frontier.size();
        if size != to.0 {
            return Err(Error::Internal(format!(
                "the tree grew to {size} leaves, not to position {to}"
            )));
        }
        *self.tree.lagging.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }
}
