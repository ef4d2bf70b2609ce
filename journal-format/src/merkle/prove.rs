//! Proof generation: the PATH of an inclusion proof (RFC 9162 §2.1.3.1) and the PROOF of a
//! consistency proof (§2.1.4.1), built from the hashes of complete aligned subtrees a
//! [`Subtrees`] source holds.
//!
//! Every subtree a proof names is one of two kinds. A subtree off the right edge of the tree is
//! complete and aligned: its `2^k` leaves start at a multiple of `2^k`, and it is one lookup. A
//! subtree on the right edge (it ends at the tree's size) may be incomplete; it starts at a
//! multiple of a power of two at least as large as it, so it is the right fold of the aligned
//! blocks its size's set bits name, one lookup per set bit. A proof holds at most one subtree
//! of the second kind (after the first step down to a left child, every subtree lies inside a
//! complete one), so a proof for a tree of `n` leaves takes at most `2 * ceil(log2 n) + 1`
//! lookups.

use thiserror::Error;

use super::{empty_root, node_hash, split_point, TreeHash};

/// A source of the hashes of complete aligned subtrees of one append-only tree.
///
/// Level 0 holds the leaf hashes; level `k` holds, for each `index`, the hash of leaves
/// `index * 2^k .. (index + 1) * 2^k` once all of them are in the tree. Such a hash never
/// changes as the tree grows, so a source can store each once, as it is completed
/// ([`super::Frontier::push_with`] tells them), and answer each lookup with one read.
pub trait Subtrees {
    /// What goes wrong reading a hash.
    type Error;

    /// The hash of the complete subtree of `2^level` leaves starting at leaf `index * 2^level`.
    ///
    /// # Errors
    /// When the source cannot read it, or does not hold it (the subtree is not complete).
    fn aligned(&self, level: u32, index: u64) -> Result<TreeHash, Self::Error>;
}

/// Why a proof could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProveError<E> {
    /// An inclusion proof was asked for a leaf the tree does not have.
    #[error("leaf index {index} is beyond a tree of {size} leaves")]
    IndexBeyondSize {
        /// The leaf's index.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// A consistency proof was asked from a larger tree to a smaller one.
    #[error("a consistency proof goes from a smaller tree to a larger one, not from {old} leaves to {new}")]
    SizesOutOfOrder {
        /// The older tree's size.
        old: u64,
        /// The newer tree's size.
        new: u64,
    },
    /// The source failed to give a subtree's hash.
    #[error("reading a subtree hash: {0}")]
    Source(E),
}

/// The root of the tree of the first `size` leaves the source holds; the empty tree's root for
/// 0. One lookup per set bit of `size`.
///
/// # Errors
/// The source's error when it cannot give a subtree's hash.
pub fn root_at<S: Subtrees + ?Sized>(source: &S, size: u64) -> Result<TreeHash, S::Error> {
    subtree_hash(source, 0, size)
}

/// The inclusion proof of leaf `index` in the tree of the first `tree_size` leaves: RFC 9162's
/// `PATH(index, D[tree_size])`, the sibling hashes from the leaf up to the root. At most
/// `ceil(log2 tree_size)` hashes.
///
/// # Errors
/// [`ProveError::IndexBeyondSize`] unless `index < tree_size`; [`ProveError::Source`] when
/// the source cannot give a subtree's hash.
pub fn inclusion_proof<S: Subtrees + ?Sized>(
    source: &S,
    index: u64,
    tree_size: u64,
) -> Result<Vec<TreeHash>, ProveError<S::Error>> {
    if index >= tree_size {
        return Err(ProveError::IndexBeyondSize {
            index,
            size: tree_size,
        });
    }
    // Walk down from the root to the leaf; `(start, size)` is the subtree holding it.
    let (mut start, mut size) = (0u64, tree_size);
    let mut siblings = Vec::new();
    while let Some(k) = split_point(size) {
        let (sibling_start, sibling_size) = if index - start < k {
            let right = (start + k, size - k);
            size = k;
            right
        } else {
            let left = (start, k);
            start += k;
            size -= k;
            left
        };
        siblings
            .push(subtree_hash(source, sibling_start, sibling_size).map_err(ProveError::Source)?);
    }
    debug_assert_eq!(start, index);
    siblings.reverse();
    Ok(siblings)
}

/// The consistency proof from the tree of the first `old_size` leaves to the tree of the first
/// `new_size`: RFC 9162's `PROOF(old_size, D[new_size])`, the hashes from the deepest up. Empty
/// when the sizes are equal or `old_size` is 0 (nothing to prove but the roots). At most
/// `ceil(log2 new_size) + 1` hashes.
///
/// # Errors
/// [`ProveError::SizesOutOfOrder`] if `old_size > new_size`; [`ProveError::Source`] when the
/// source cannot give a subtree's hash.
pub fn consistency_proof<S: Subtrees + ?Sized>(
    source: &S,
    old_size: u64,
    new_size: u64,
) -> Result<Vec<TreeHash>, ProveError<S::Error>> {
    if old_size > new_size {
        return Err(ProveError::SizesOutOfOrder {
            old: old_size,
            new: new_size,
        });
    }
    if old_size == 0 || old_size == new_size {
        return Ok(Vec::new());
    }
    // SUBPROOF(m, D[start..start + size], whole_old_tree), walked down from the root.
    let (mut start, mut size, mut m) = (0u64, new_size, old_size);
    let mut whole_old_tree = true;
    let mut hashes = Vec::new();
    loop {
        if m == size {
            if !whole_old_tree {
                hashes.push(subtree_hash(source, start, size).map_err(ProveError::Source)?);
            }
            break;
        }
        let Some(k) = split_point(size) else {
            debug_assert!(false, "0 < m < size, so size > 1");
            break;
        };
        let (sibling_start, sibling_size) = if m <= k {
            let right = (start + k, size - k);
            size = k;
            right
        } else {
            let left = (start, k);
            start += k;
            size -= k;
            m -= k;
            whole_old_tree = false;
            left
        };
        hashes.push(subtree_hash(source, sibling_start, sibling_size).map_err(ProveError::Source)?);
    }
    hashes.reverse();
    Ok(hashes)
}

/// `MTH(D[start..start + size])` for a subtree that a proof names: `start` is a multiple of
/// the smallest power of two at least `size` (the subtrees of the RFC's recursion are). It is the
/// right fold of the aligned blocks named by the set bits of `size`, largest first; one lookup
/// per set bit.
fn subtree_hash<S: Subtrees + ?Sized>(
    source: &S,
    start: u64,
    size: u64,
) -> Result<TreeHash, S::Error> {
    debug_assert!(size == 0 || start.trailing_zeros() >= u64::BITS - (size - 1).leading_zeros());
    let mut folded: Option<TreeHash> = None;
    // From the lowest set bit (the rightmost block) up to the highest (the leftmost).
    let mut rest = size;
    while rest != 0 {
        let level = rest.trailing_zeros();
        rest &= rest - 1;
        // The block's leaves start after the larger blocks to its left, whose sizes are the
        // bits of `rest` above this one.
        let block_start = start + rest;
        let block = source.aligned(level, block_start >> level)?;
        folded = Some(match folded {
            None => block,
            Some(right) => node_hash(&block, &right),
        });
    }
    Ok(folded.unwrap_or_else(empty_root))
}
