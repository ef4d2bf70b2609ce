//! The journal's Merkle tree: the hashing, the frontier the writer keeps, proof generation from
//! stored subtree hashes, and proof verification. Layout: `docs/FORMAT.md`, "Merkle tree".
//!
//! The tree has the structure of RFC 9162 (Certificate Transparency v2), §2.1, with BLAKE3 as
//! its hash: the leaves are the events' stored bodies in position order (leaf `i` is the event
//! at position `i + 1`), a leaf hashes as `BLAKE3(0x00 || body)`, an inner node as
//! `BLAKE3(0x01 || left || right)`, a list of `n > 1` leaves splits at the largest power of two
//! smaller than `n`, and the empty tree's root is `BLAKE3()` of no bytes.
//!
//! An inclusion proof shows that a leaf is at an index of the tree a root names; a consistency
//! proof shows that the tree a root names for an older size is a prefix of the tree of a newer
//! one, so that the journal only grew between two checkpoints. Both are a few dozen hashes
//! and check offline in microseconds.
//!
//! NOTE: a root does not commit to its tree's size. A proof is checked against a size *and* a
//! root, and a verifier must take both from one trusted source (a checkpoint that signs both):
//! an inclusion proof for index 0 of 5 leaves also verifies against the same root with a
//! claimed size of 7, because both sizes give the leaf the same position in the tree's shape.
//!
//! Pure: no I/O. Proof generation reads subtree hashes through the [`Subtrees`] trait, which the
//! engine implements over its stored hashes and [`MemoryTree`] implements in memory.

use std::fmt;
use std::str::FromStr;

use crate::types::{hash_from_hex, hash_to_hex};

mod frontier;
mod memory;
mod prove;
mod verify;

pub use frontier::{Frontier, FrontierError};
pub use memory::{MemoryTree, MissingSubtree};
pub use prove::{consistency_proof, inclusion_proof, root_at, ProveError, Subtrees};
pub use verify::{verify_consistency, verify_inclusion, ProofError};

/// The byte a leaf's bytes are prefixed with before hashing (RFC 9162 §2.1.1).
pub const LEAF_PREFIX: u8 = 0x00;
/// The byte the two child hashes of an inner node are prefixed with before hashing.
pub const NODE_PREFIX: u8 = 0x01;

/// A hash of the Merkle tree: a leaf's, an inner node's or a root. BLAKE3, 32 bytes.
///
/// Displays and parses as 64 hex digits (parsing takes either case).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct TreeHash(pub [u8; 32]);

impl TreeHash {
    /// Lower-case hex, 64 characters.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hash_to_hex(&self.0)
    }

    /// Parses 64 hex digits (either case).
    ///
    /// # Errors
    /// Returns a message naming the problem when the text is not 64 hex digits.
    pub fn from_hex(text: &str) -> Result<TreeHash, String> {
        hash_from_hex(text).map(TreeHash)
    }
}

impl fmt::Debug for TreeHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TreeHash({})", self.to_hex())
    }
}

impl fmt::Display for TreeHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for TreeHash {
    type Err = String;

    fn from_str(text: &str) -> Result<TreeHash, String> {
        TreeHash::from_hex(text)
    }
}

/// The hash of a leaf: `BLAKE3(0x00 || leaf)`. For the journal, `leaf` is an event's stored
/// body (the MessagePack envelope of its frame, without the frame header).
#[must_use]
pub fn leaf_hash(leaf: &[u8]) -> TreeHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&[LEAF_PREFIX]);
    hasher.update(leaf);
    TreeHash(*hasher.finalize().as_bytes())
}

/// The hash of an inner node: `BLAKE3(0x01 || left || right)`.
#[must_use]
pub fn node_hash(left: &TreeHash, right: &TreeHash) -> TreeHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&[NODE_PREFIX]);
    hasher.update(&left.0);
    hasher.update(&right.0);
    TreeHash(*hasher.finalize().as_bytes())
}

/// The root of the tree of no leaves: BLAKE3 of no bytes.
#[must_use]
pub fn empty_root() -> TreeHash {
    TreeHash(*blake3::hash(&[]).as_bytes())
}

/// Where a tree of `size > 1` leaves splits: the largest power of two smaller than `size`.
/// `None` for a size of 0 or 1, which does not split.
pub(crate) fn split_point(size: u64) -> Option<u64> {
    if size < 2 {
        return None;
    }
    let below = size - 1;
    Some(1 << (u64::BITS - 1 - below.leading_zeros()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_hash_hex_round_trips_and_rejects_bad_text() {
        let h = TreeHash([0x5c; 32]);
        assert_eq!(h.to_string().parse::<TreeHash>(), Ok(h));
        assert_eq!(TreeHash::from_hex(&h.to_hex().to_uppercase()), Ok(h));
        assert!("abc"
            .parse::<TreeHash>()
            .unwrap_err()
            .contains("64 hex digits"));
        assert!("zz".repeat(32).parse::<TreeHash>().is_err());
        assert_eq!(format!("{h:?}"), format!("TreeHash({h})"));
    }

    #[test]
    fn hashes_prefix_leaves_and_nodes_differently() {
        assert_eq!(empty_root().0, *blake3::hash(b"").as_bytes());
        assert_eq!(leaf_hash(b"x").0, *blake3::hash(b"\x00x").as_bytes());
        let (a, b) = (leaf_hash(b"a"), leaf_hash(b"b"));
        let mut node = vec![1u8];
        node.extend_from_slice(&a.0);
        node.extend_from_slice(&b.0);
        assert_eq!(node_hash(&a, &b).0, *blake3::hash(&node).as_bytes());
        assert_ne!(node_hash(&a, &b), node_hash(&b, &a));
    }

    #[test]
    fn split_point_is_the_largest_power_of_two_below() {
        assert_eq!(split_point(0), None);
        assert_eq!(split_point(1), None);
        assert_eq!(split_point(2), Some(1));
        assert_eq!(split_point(3), Some(2));
        assert_eq!(split_point(4), Some(2));
        assert_eq!(split_point(5), Some(4));
        assert_eq!(split_point(17), Some(16));
        assert_eq!(split_point(u64::MAX), Some(1 << 63));
        assert_eq!(split_point((1 << 63) + 1), Some(1 << 63));
    }
}
