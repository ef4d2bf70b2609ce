//! The frontier of the tree (the "compact range" of leaves `0..n`): the roots of the complete
//! subtrees that cover the leaves, one per set bit of `n`, from which the root of the whole tree
//! and the next leaf's merges follow without reading any earlier leaf.

use thiserror::Error;

use super::{empty_root, node_hash, TreeHash};

/// The roots of the complete aligned subtrees covering leaves `0..size`: for each set bit `k` of
/// `size`, from the highest down, the hash of the `2^k` leaves that follow the ones before.
///
/// This is what the writer keeps on the commit path: [`Frontier::push`] costs one hash per
/// subtree it completes, `O(log n)` at worst and below 2 on average over any run of pushes (the
/// pushes that merge `k` times are one in `2^(k+1)`); [`Frontier::root`] costs one hash per set
/// bit of the size, less one. It holds at most 64 hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// One hash per set bit of `size`, the largest (leftmost) subtree first.
    hashes: Vec<TreeHash>,
}

/// A frontier's parts that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrontierError {
    /// The number of hashes is not the number of set bits of the size.
    #[error("a frontier of {size} leaves holds {expected} hashes (one per set bit of the size), got {got}")]
    WrongHashCount {
        /// The frontier's size.
        size: u64,
        /// The number of set bits of the size.
        expected: usize,
        /// The number of hashes given.
        got: usize,
    },
}

impl Frontier {
    /// The frontier of the empty tree.
    #[must_use]
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// The frontier of `size` leaves from its hashes, as [`Frontier::hashes`] gave them.
    ///
    /// # Errors
    /// [`FrontierError::WrongHashCount`] when there is not one hash per set bit of `size`.
    pub fn from_parts(size: u64, hashes: Vec<TreeHash>) -> Result<Frontier, FrontierError> {
        let expected = size.count_ones() as usize;
        if hashes.len() != expected {
            return Err(FrontierError::WrongHashCount {
                size,
                expected,
                got: hashes.len(),
            });
        }
        Ok(Frontier { size, hashes })
    }

    /// The number of leaves pushed.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The roots of the complete subtrees covering the leaves, the largest (leftmost) first:
    /// the subtree of the highest set bit of the size, then the next, down to the lowest.
    #[must_use]
    pub fn hashes(&self) -> &[TreeHash] {
        &self.hashes
    }

    /// The root of the tree of the leaves pushed: the frontier's hashes folded from the right,
    /// `node(h0, node(h1, ... node(h_{k-1}, h_k)))`; the empty tree's root for no leaves.
    #[must_use]
    pub fn root(&self) -> TreeHash {
        let mut rest = self.hashes.iter().rev();
        let Some(last) = rest.next() else {
            return empty_root();
        };
        rest.fold(*last, |right, left| node_hash(left, &right))
    }

    /// Adds the next leaf, given its hash ([`super::leaf_hash`] of its bytes).
    ///
    /// # Panics
    /// If the frontier already holds `u64::MAX` leaves, which no journal reaches.
    pub fn push(&mut self, leaf: TreeHash) {
        self.push_with(leaf, |_, _, _| {});
    }

    /// Adds the next leaf, and tells `completed(level, index, hash)` each aligned subtree the
    /// leaf completes, the leaf itself (level 0) first: the subtree of leaves
    /// `index * 2^level .. (index + 1) * 2^level` and its hash. These are the hashes a
    /// [`super::Subtrees`] source stores; each is told exactly once over a run of pushes.
    ///
    /// # Panics
    /// If the frontier already holds `u64::MAX` leaves, which no journal reaches.
    pub fn push_with(&mut self, leaf: TreeHash, mut completed: impl FnMut(u32, u64, &TreeHash)) {
        let index = self.size;
        let size = index
            .checked_add(1)
            .unwrap_or_else(|| panic!("a Merkle frontier cannot hold more than u64::MAX leaves"));
        let mut carry = leaf;
        let mut level = 0u32;
        completed(level, index, &carry);
        // Each trailing one bit of the old size is a complete subtree of the same level as
        // `carry`, just left of it: merge them, as a binary counter carries.
        while (index >> level) & 1 == 1 {
            let Some(left) = self.hashes.pop() else {
                debug_assert!(false, "a frontier holds one hash per set bit of its size");
                break;
            };
            carry = node_hash(&left, &carry);
            level += 1;
            completed(level, index >> level, &carry);
        }
        self.hashes.push(carry);
        self.size = size;
        debug_assert_eq!(self.hashes.len(), self.size.count_ones() as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::super::leaf_hash;
    use super::*;

    #[test]
    fn from_parts_refuses_a_hash_count_that_does_not_fit_the_size() {
        let h = leaf_hash(b"x");
        assert!(Frontier::from_parts(0, vec![]).is_ok());
        assert!(Frontier::from_parts(5, vec![h, h]).is_ok());
        let err = Frontier::from_parts(5, vec![h]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a frontier of 5 leaves holds 2 hashes (one per set bit of the size), got 1"
        );
    }

    #[test]
    fn a_frontier_rebuilt_from_its_parts_goes_on_as_the_original() {
        let mut a = Frontier::new();
        for i in 0..11u32 {
            a.push(leaf_hash(&i.to_le_bytes()));
        }
        let mut b = Frontier::from_parts(a.size(), a.hashes().to_vec()).unwrap();
        for i in 11..40u32 {
            a.push(leaf_hash(&i.to_le_bytes()));
            b.push(leaf_hash(&i.to_le_bytes()));
            assert_eq!(a, b);
        }
    }

    #[test]
    fn push_tells_each_completed_subtree_once_leaf_first() {
        let mut frontier = Frontier::new();
        let mut told = Vec::new();
        for i in 0..4u32 {
            frontier.push_with(leaf_hash(&i.to_le_bytes()), |level, index, _| {
                told.push((level, index))
            });
        }
        let expected = [(0, 0), (0, 1), (1, 0), (0, 2), (0, 3), (1, 1), (2, 0)];
        assert_eq!(told, expected);
    }
}
