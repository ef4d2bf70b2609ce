//! A [`Subtrees`] source held in memory: every complete aligned subtree's hash, by level. For
//! tests and for tools that hold a whole (small) tree; the engine keeps the same hashes on disk.

use thiserror::Error;

use super::{Frontier, Subtrees, TreeHash};

/// Every complete aligned subtree's hash of the leaves pushed, by level: level 0 holds the leaf
/// hashes, level `k` the hashes of leaves `j * 2^k .. (j + 1) * 2^k` for every `j` whose block is
/// complete. About two hashes per leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryTree {
    frontier: Frontier,
    levels: Vec<Vec<TreeHash>>,
}

/// A subtree a [`MemoryTree`] does not hold: it reaches past the leaves pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("no complete subtree at level {level}, index {index}: the tree holds {size} leaves")]
pub struct MissingSubtree {
    /// The level asked for.
    pub level: u32,
    /// The index asked for, in units of `2^level` leaves.
    pub index: u64,
    /// The leaves the tree holds.
    pub size: u64,
}

impl MemoryTree {
    /// The tree of no leaves.
    #[must_use]
    pub fn new() -> MemoryTree {
        MemoryTree::default()
    }

    /// Adds the next leaf, given its hash ([`super::leaf_hash`] of its bytes).
    ///
    /// # Panics
    /// If the tree already holds `u64::MAX` leaves.
    pub fn push(&mut self, leaf: TreeHash) {
        let levels = &mut self.levels;
        self.frontier.push_with(leaf, |level, index, hash| {
            let level = level as usize;
            if levels.len() <= level {
                levels.resize_with(level + 1, Vec::new);
            }
            if let Some(row) = levels.get_mut(level) {
                debug_assert_eq!(row.len() as u64, index, "subtrees complete in order");
                row.push(*hash);
            }
        });
    }

    /// The number of leaves pushed.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The root of the tree of all the leaves pushed.
    #[must_use]
    pub fn root(&self) -> TreeHash {
        self.frontier.root()
    }

    /// The frontier of all the leaves pushed.
    #[must_use]
    pub fn frontier(&self) -> &Frontier {
        &self.frontier
    }
}

impl Subtrees for MemoryTree {
    type Error = MissingSubtree;

    fn aligned(&self, level: u32, index: u64) -> Result<TreeHash, MissingSubtree> {
        let missing = MissingSubtree {
            level,
            index,
            size: self.size(),
        };
        let row = usize::try_from(level)
            .ok()
            .and_then(|level| self.levels.get(level))
            .ok_or(missing)?;
        usize::try_from(index)
            .ok()
            .and_then(|index| row.get(index))
            .copied()
            .ok_or(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{leaf_hash, node_hash};
    use super::*;

    #[test]
    fn holds_every_complete_aligned_subtree_and_names_a_missing_one() {
        let leaves: Vec<TreeHash> = (0..3u8).map(|i| leaf_hash(&[i])).collect();
        let mut tree = MemoryTree::new();
        for leaf in &leaves {
            tree.push(*leaf);
        }
        assert_eq!(tree.aligned(0, 2), Ok(leaves[2]));
        assert_eq!(tree.aligned(1, 0), Ok(node_hash(&leaves[0], &leaves[1])));
        let missing = tree.aligned(1, 1).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "no complete subtree at level 1, index 1: the tree holds 3 leaves"
        );
        assert!(tree.aligned(7, 0).is_err());
        assert!(tree.aligned(0, u64::MAX).is_err());
    }
}
