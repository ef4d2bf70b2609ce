//! Proof verification: RFC 9162 §2.1.3.2 (an inclusion proof) and §2.1.4.2 (a consistency
//! proof), with errors that say which part of a proof does not hold.
//!
//! Both algorithms walk two counters up the tree, `fn` (the node the proof is at) and `sn` (the
//! last node of the tree at that level), and take one proof hash per level until `sn` reaches 0;
//! at each step the hash goes to the left of the running hash when `fn` is a right child or the
//! last node of its level, and to its right otherwise. [`Walk`] is that loop without the hashes:
//! it gives the expected length of a proof, so a path of the wrong length is named as such
//! before any hashing, and the order of every hash.

use thiserror::Error;

use super::{empty_root, node_hash, TreeHash};

/// What is wrong with a proof, or with what it is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The leaf's index is not inside the tree.
    #[error("leaf index {index} is beyond a tree of {size} leaves")]
    IndexBeyondSize {
        /// The leaf's index.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// The older tree of a consistency proof is the larger.
    #[error("a consistency proof goes from a smaller tree to a larger one, not from {old} leaves to {new}")]
    SizesOutOfOrder {
        /// The older tree's size.
        old: u64,
        /// The newer tree's size.
        new: u64,
    },
    /// The proof holds more hashes than a proof for these sizes (and index) has.
    #[error("the proof is too long: {got} hashes, a proof for these sizes holds {expected}")]
    PathTooLong {
        /// The number of hashes such a proof holds.
        expected: usize,
        /// The number of hashes given.
        got: usize,
    },
    /// The proof holds fewer hashes than a proof for these sizes (and index) has.
    #[error("the proof is too short: {got} hashes, a proof for these sizes holds {expected}")]
    PathTooShort {
        /// The number of hashes such a proof holds.
        expected: usize,
        /// The number of hashes given.
        got: usize,
    },
    /// The proof leads to another root than the (newer) tree's.
    #[error("the proof leads to root {computed}, not to the tree's root {expected}")]
    RootMismatch {
        /// The root given.
        expected: TreeHash,
        /// The root the proof leads to.
        computed: TreeHash,
    },
    /// A consistency proof leads to another root of the older tree than the one given.
    #[error("the proof leads to old root {computed}, not to the older tree's root {expected}")]
    OldRootMismatch {
        /// The older tree's root given.
        expected: TreeHash,
        /// The older tree's root the proof leads to.
        computed: TreeHash,
    },
    /// Two roots given for one size differ: the tree of that size was not the same tree.
    #[error("two roots for one tree of {size} leaves differ: {old} and {new}")]
    SameSizeRootsDiffer {
        /// The size of both trees.
        size: u64,
        /// The older root given.
        old: TreeHash,
        /// The newer root given.
        new: TreeHash,
    },
    /// The root given for the empty tree is not the empty tree's root.
    #[error("the root of the empty tree is {empty}, not {given}")]
    NotTheEmptyRoot {
        /// The empty tree's root.
        empty: TreeHash,
        /// The root given for it.
        given: TreeHash,
    },
}

/// Checks that `leaf` (a leaf hash, [`super::leaf_hash`]) is leaf `index` of the tree of
/// `tree_size` leaves whose root is `root`, by RFC 9162 §2.1.3.2: `path` is the proof,
/// [`super::inclusion_proof`]'s hashes from the leaf up.
///
/// # Errors
/// [`ProofError::IndexBeyondSize`] unless `index < tree_size`; [`ProofError::PathTooLong`] or
/// [`ProofError::PathTooShort`] when `path` has not the length such a proof has;
/// [`ProofError::RootMismatch`] when it leads to another root.
pub fn verify_inclusion(
    leaf: &TreeHash,
    index: u64,
    tree_size: u64,
    path: &[TreeHash],
    root: &TreeHash,
) -> Result<(), ProofError> {
    if index >= tree_size {
        return Err(ProofError::IndexBeyondSize {
            index,
            size: tree_size,
        });
    }
    let walk = Walk::new(index, tree_size - 1);
    check_length(walk.clone().count(), path.len())?;
    let computed = walk.zip(path).fold(*leaf, |r, (side, p)| side.join(p, &r));
    if computed != *root {
        return Err(ProofError::RootMismatch {
            expected: *root,
            computed,
        });
    }
    Ok(())
}

/// Checks that the tree of `old_size` leaves whose root is `old_root` is a prefix of the tree of
/// `new_size` leaves whose root is `new_root`, by RFC 9162 §2.1.4.2 for `0 < old_size <
/// new_size`: `path` is the proof, [`super::consistency_proof`]'s hashes. For equal sizes the
/// proof is empty and the roots must be equal; from the empty tree it is empty and `old_root`
/// must be the empty tree's root.
///
/// # Errors
/// [`ProofError::SizesOutOfOrder`] if `old_size > new_size`; [`ProofError::PathTooLong`] or
/// [`ProofError::PathTooShort`] when `path` has not the length such a proof has;
/// [`ProofError::OldRootMismatch`] or [`ProofError::RootMismatch`] when it leads to another
/// root of either tree; [`ProofError::SameSizeRootsDiffer`] and
/// [`ProofError::NotTheEmptyRoot`] for the two cases without a proof.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &TreeHash,
    new_root: &TreeHash,
    path: &[TreeHash],
) -> Result<(), ProofError> {
    if old_size > new_size {
        return Err(ProofError::SizesOutOfOrder {
            old: old_size,
            new: new_size,
        });
    }
    if old_size == 0 || old_size == new_size {
        check_length(0, path.len())?;
        return check_without_proof(old_size, old_root, new_root);
    }
    // Steps 2 to 4: a complete old tree is its own first hash, given by its root; both
    // counters climb past the levels where the old tree's last node is a right child.
    let old_is_complete = old_size.is_power_of_two();
    let walk = Walk::new(old_size - 1, new_size - 1).past_right_children();
    let steps = walk.clone().count();
    check_length(steps + usize::from(!old_is_complete), path.len())?;
    let (seed, rest) = match (old_is_complete, path.split_first()) {
        (true, _) => (*old_root, path),
        (false, Some((first, rest))) => (*first, rest),
        (false, None) => {
            return Err(ProofError::PathTooShort {
                expected: 1,
                got: 0,
            })
        }
    };
    // Steps 5 and 6: `fr` climbs to the old root, `sr` to the new one.
    let (mut fr, mut sr) = (seed, seed);
    for (side, c) in walk.zip(rest) {
        match side {
            Side::Left => {
                fr = node_hash(c, &fr);
                sr = node_hash(c, &sr);
            }
            Side::Right => sr = node_hash(&sr, c),
        }
    }
    // Step 7.
    if fr != *old_root {
        return Err(ProofError::OldRootMismatch {
            expected: *old_root,
            computed: fr,
        });
    }
    if sr != *new_root {
        return Err(ProofError::RootMismatch {
            expected: *new_root,
            computed: sr,
        });
    }
    Ok(())
}

/// The cases of [`verify_consistency`] that have an empty proof: from the empty tree, or
/// between two trees of one size.
fn check_without_proof(
    old_size: u64,
    old_root: &TreeHash,
    new_root: &TreeHash,
) -> Result<(), ProofError> {
    if old_size == 0 {
        let empty = empty_root();
        if *old_root != empty {
            return Err(ProofError::NotTheEmptyRoot {
                empty,
                given: *old_root,
            });
        }
    } else if old_root != new_root {
        return Err(ProofError::SameSizeRootsDiffer {
            size: old_size,
            old: *old_root,
            new: *new_root,
        });
    }
    Ok(())
}

/// Whether a proof of `got` hashes has the `expected` length.
fn check_length(expected: usize, got: usize) -> Result<(), ProofError> {
    match got.cmp(&expected) {
        std::cmp::Ordering::Less => Err(ProofError::PathTooShort { expected, got }),
        std::cmp::Ordering::Greater => Err(ProofError::PathTooLong { expected, got }),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// Which side of the running hash a proof hash goes on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Side {
    /// `HASH(0x01 || p || r)`: the running hash is a right child, or the last node of its level.
    Left,
    /// `HASH(0x01 || r || p)`.
    Right,
}

impl Side {
    /// The parent of the running hash `r` and the proof hash `p` on this side.
    fn join(self, p: &TreeHash, r: &TreeHash) -> TreeHash {
        match self {
            Side::Left => node_hash(p, r),
            Side::Right => node_hash(r, p),
        }
    }
}

/// The loop of RFC 9162 §2.1.3.2 step 4 (and §2.1.4.2 step 6) without the hashes: one [`Side`]
/// per proof hash, until `sn` reaches 0.
#[derive(Clone, Debug)]
struct Walk {
    /// `fn`: the index, at the current level, of the node the running hash stands for.
    node: u64,
    /// `sn`: the index, at the current level, of the tree's last node.
    last: u64,
}

impl Walk {
    /// The walk from node `node` of a level whose last node is `last`.
    fn new(node: u64, last: u64) -> Walk {
        debug_assert!(node <= last);
        Walk { node, last }
    }

    /// §2.1.4.2 step 4: right-shifts both counters while `fn` is odd.
    fn past_right_children(mut self) -> Walk {
        while self.node & 1 == 1 {
            self.node >>= 1;
            self.last >>= 1;
        }
        self
    }
}

impl Iterator for Walk {
    type Item = Side;

    fn next(&mut self) -> Option<Side> {
        if self.last == 0 {
            return None;
        }
        let side = if self.node & 1 == 1 || self.node == self.last {
            // The last node of its level with no right sibling: climb to the level where it is
            // a right child (or the root), where the proof hash is its left sibling.
            while self.node & 1 == 0 && self.node != 0 {
                self.node >>= 1;
                self.last >>= 1;
            }
            Side::Left
        } else {
            Side::Right
        };
        self.node >>= 1;
        self.last >>= 1;
        Some(side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sides(node: u64, last: u64) -> Vec<Side> {
        Walk::new(node, last).collect()
    }

    #[test]
    fn the_walk_orders_hashes_as_the_tree_does() {
        use Side::{Left, Right};
        // One leaf: no hash. Two: the sibling on the side away from the leaf.
        assert_eq!(sides(0, 0), vec![]);
        assert_eq!(sides(0, 1), vec![Right]);
        assert_eq!(sides(1, 1), vec![Left]);
        // Leaf 2 of 3 is the right child of the root: one hash, MTH(D[0:2]), on its left.
        assert_eq!(sides(2, 2), vec![Left]);
        // Leaf 4 of 7 (leaves 4..7 are [[4,5],6]): 5 on its right, 6 on the right, 0..4 left.
        assert_eq!(sides(4, 6), vec![Right, Right, Left]);
        // Leaf 6 of 7: its parent climbs over the missing sibling.
        assert_eq!(sides(6, 6), vec![Left, Left]);
    }

    #[test]
    fn wrong_lengths_are_named_before_any_hashing() {
        let h = TreeHash([7; 32]);
        let err = verify_inclusion(&h, 0, 4, &[h], &h).unwrap_err();
        assert_eq!(
            err,
            ProofError::PathTooShort {
                expected: 2,
                got: 1
            }
        );
        assert_eq!(
            err.to_string(),
            "the proof is too short: 1 hashes, a proof for these sizes holds 2"
        );
        let err = verify_consistency(3, 3, &h, &h, &[h]).unwrap_err();
        assert_eq!(
            err,
            ProofError::PathTooLong {
                expected: 0,
                got: 1
            }
        );
    }
}
