//! The Merkle tree against RFC 9162 §2.1 as the RFC defines it: the frontier's root against the
//! recursive tree hash, generated proofs against the RFC's recursive PATH and PROOF, every proof
//! verifying and every single-bit change to one failing, and the golden vectors of
//! `merkle_vectors.json` (written by this code with `MERKLE_VECTORS_WRITE=1`, checked by the
//! independent `merkle_vectors.py`).

use std::cell::Cell;

use journal_format::merkle::{
    consistency_proof, empty_root, inclusion_proof, leaf_hash, root_at, verify_consistency,
    verify_inclusion, Frontier, MemoryTree, MissingSubtree, ProofError, ProveError, Subtrees,
    TreeHash,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// RFC 9162 §2.1 over leaf hashes, written from the definitions: recursive, no shortcuts.
mod reference {
    use journal_format::merkle::{empty_root, node_hash, TreeHash};

    /// The largest power of two smaller than `n` (`n > 1`).
    pub fn split(n: u64) -> u64 {
        let mut k = 1;
        while k < n - k {
            k *= 2;
        }
        k
    }

    /// MTH(D[n]), given the leaves' hashes.
    pub fn mth(leaves: &[TreeHash]) -> TreeHash {
        match leaves {
            [] => empty_root(),
            [leaf] => *leaf,
            _ => {
                let k = split(leaves.len() as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    /// PATH(m, D[n]).
    pub fn path(m: usize, leaves: &[TreeHash]) -> Vec<TreeHash> {
        if leaves.len() <= 1 {
            return Vec::new();
        }
        let k = split(leaves.len() as u64) as usize;
        let (mut below, sibling) = if m < k {
            (path(m, &leaves[..k]), mth(&leaves[k..]))
        } else {
            (path(m - k, &leaves[k..]), mth(&leaves[..k]))
        };
        below.push(sibling);
        below
    }

    /// PROOF(m, D[n]), and empty for m = 0 or m = n.
    pub fn proof(m: usize, leaves: &[TreeHash]) -> Vec<TreeHash> {
        if m == 0 || m == leaves.len() {
            return Vec::new();
        }
        subproof(m, leaves, true)
    }

    fn subproof(m: usize, leaves: &[TreeHash], whole: bool) -> Vec<TreeHash> {
        let n = leaves.len();
        if m == n {
            return if whole { Vec::new() } else { vec![mth(leaves)] };
        }
        let k = split(n as u64) as usize;
        let (mut below, sibling) = if m <= k {
            (subproof(m, &leaves[..k], whole), mth(&leaves[k..]))
        } else {
            (subproof(m - k, &leaves[k..], false), mth(&leaves[..k]))
        };
        below.push(sibling);
        below
    }

    /// The shape of leaf `m`'s place in a tree of `n` leaves: for each hash of its PATH, from
    /// the leaf up, whether that sibling is on the left. An inclusion proof depends on the index
    /// and size only through this.
    pub fn sides(m: u64, n: u64) -> Vec<bool> {
        if n <= 1 {
            return Vec::new();
        }
        let k = split(n);
        let (mut below, left) = if m < k {
            (sides(m, k), false)
        } else {
            (sides(m - k, n - k), true)
        };
        below.push(left);
        below
    }
}

fn leaves(seed: u64, n: u64) -> Vec<TreeHash> {
    (0..n)
        .map(|i| leaf_hash(format!("{seed}:{i}").as_bytes()))
        .collect()
}

fn tree_of(leaves: &[TreeHash]) -> MemoryTree {
    let mut tree = MemoryTree::new();
    for leaf in leaves {
        tree.push(*leaf);
    }
    tree
}

fn flip(hash: &TreeHash, bit: usize) -> TreeHash {
    let mut bytes = hash.0;
    bytes[bit / 8] ^= 1 << (bit % 8);
    TreeHash(bytes)
}

#[test]
fn the_frontier_root_is_the_recursive_tree_hash_for_sizes_0_to_300() {
    let leaves = leaves(1, 300);
    let mut frontier = Frontier::new();
    assert_eq!(frontier.root(), empty_root());
    for n in 1..=300 {
        frontier.push(leaves[n - 1]);
        assert_eq!(frontier.size(), n as u64);
        assert_eq!(frontier.root(), reference::mth(&leaves[..n]), "size {n}");
        assert_eq!(frontier.hashes().len(), n.count_ones() as usize);
    }
    let tree = tree_of(&leaves);
    for n in 0..=300 {
        assert_eq!(
            root_at(&tree, n as u64),
            Ok(reference::mth(&leaves[..n])),
            "size {n}"
        );
    }
}

#[test]
fn a_memory_tree_holds_each_complete_aligned_subtree_hash() {
    let leaves = leaves(2, 100);
    let tree = tree_of(&leaves);
    for level in 0..7u32 {
        let block = 1usize << level;
        for index in 0..(100 / block) {
            let expected = reference::mth(&leaves[index * block..(index + 1) * block]);
            assert_eq!(tree.aligned(level, index as u64), Ok(expected));
        }
        assert!(tree.aligned(level, (100 / block) as u64).is_err());
    }
}

#[test]
fn proofs_are_the_rfcs_path_and_proof_for_sizes_1_to_64() {
    let leaves = leaves(3, 64);
    let tree = tree_of(&leaves);
    for n in 1..=64usize {
        for m in 0..n {
            let proof = inclusion_proof(&tree, m as u64, n as u64);
            assert_eq!(
                proof,
                Ok(reference::path(m, &leaves[..n])),
                "PATH({m}, D[{n}])"
            );
        }
        for m in 0..=n {
            let proof = consistency_proof(&tree, m as u64, n as u64);
            assert_eq!(
                proof,
                Ok(reference::proof(m, &leaves[..n])),
                "PROOF({m}, D[{n}])"
            );
        }
    }
}

#[test]
fn consistency_between_all_sizes_to_64_verifies_and_a_rewritten_history_does_not() {
    let original = leaves(4, 64);
    let tree = tree_of(&original);
    let roots: Vec<TreeHash> = (0..=64).map(|n| reference::mth(&original[..n])).collect();
    for old in 0..=64u64 {
        for new in old..=64 {
            let proof = consistency_proof(&tree, old, new).unwrap();
            let verified =
                verify_consistency(old, new, &roots[old as usize], &roots[new as usize], &proof);
            assert_eq!(verified, Ok(()), "{old} -> {new}");
        }
    }
    // Leaf `j` rewritten: a tree that no longer extends an older one that held the leaf, but
    // still extends one that did not.
    for j in 0..64 {
        let mut rewritten = original.clone();
        rewritten[j] = leaf_hash(b"rewritten");
        let forged = tree_of(&rewritten);
        for new in (j as u64 + 1)..=64 {
            let forged_root = root_at(&forged, new).unwrap();
            for old in 1..=new {
                let old_root = &roots[old as usize];
                let forged_proof = consistency_proof(&forged, old, new).unwrap();
                let honest_proof = consistency_proof(&tree, old, new).unwrap();
                let by_forged = verify_consistency(old, new, old_root, &forged_root, &forged_proof);
                let by_honest = verify_consistency(old, new, old_root, &forged_root, &honest_proof);
                if (j as u64) < old {
                    assert!(by_forged.is_err(), "leaf {j} rewritten, {old} -> {new}");
                    assert!(by_honest.is_err(), "leaf {j} rewritten, {old} -> {new}");
                } else {
                    assert_eq!(by_forged, Ok(()), "leaf {j} appended after {old}, -> {new}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_inclusion_proof_verifies_and_every_bit_flip_fails(
        seed in any::<u64>(),
        size in 1u64..3000,
        pick in any::<prop::sample::Index>(),
    ) {
        let leaves = leaves(seed, size);
        let tree = tree_of(&leaves);
        let index = pick.index(size as usize) as u64;
        let leaf = leaves[index as usize];
        let root = tree.root();
        let path = inclusion_proof(&tree, index, size).unwrap();
        prop_assert_eq!(verify_inclusion(&leaf, index, size, &path, &root), Ok(()));

        for (i, bit) in (0..path.len()).flat_map(|i| (0..256).map(move |bit| (i, bit))) {
            let mut bad = path.clone();
            bad[i] = flip(&bad[i], bit);
            prop_assert!(verify_inclusion(&leaf, index, size, &bad, &root).is_err());
        }
        for bit in 0..256 {
            prop_assert!(verify_inclusion(&flip(&leaf, bit), index, size, &path, &root).is_err());
            prop_assert!(verify_inclusion(&leaf, index, size, &path, &flip(&root, bit)).is_err());
        }
        // A changed index or size passes only where the leaf keeps its place in the tree's
        // shape: never for another index (each leaf has a shape of its own), and for another
        // size only where the root's subtrees line up the same (the root does not commit to
        // the size: a checkpoint signs both).
        let shape = reference::sides(index, size);
        for bit in 0..64 {
            let other = index ^ (1 << bit);
            let same = other < size && reference::sides(other, size) == shape;
            prop_assert!(!same);
            prop_assert!(verify_inclusion(&leaf, other, size, &path, &root).is_err());
            let other = size ^ (1 << bit);
            let same = index < other && reference::sides(index, other) == shape;
            prop_assert_eq!(verify_inclusion(&leaf, index, other, &path, &root).is_ok(), same);
        }
        let mut longer = path.clone();
        longer.push(root);
        prop_assert_eq!(
            verify_inclusion(&leaf, index, size, &longer, &root),
            Err(ProofError::PathTooLong { expected: path.len(), got: path.len() + 1 })
        );
        if let Some((_, shorter)) = path.split_last() {
            prop_assert_eq!(
                verify_inclusion(&leaf, index, size, shorter, &root),
                Err(ProofError::PathTooShort { expected: path.len(), got: path.len() - 1 })
            );
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_every_bit_flip_fails(
        seed in any::<u64>(),
        new in 1u64..3000,
        pick in any::<prop::sample::Index>(),
    ) {
        let leaves = leaves(seed, new);
        let tree = tree_of(&leaves);
        let old = pick.index(new as usize) as u64 + 1;
        let (old_root, new_root) = (root_at(&tree, old).unwrap(), tree.root());
        let path = consistency_proof(&tree, old, new).unwrap();
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, &path), Ok(()));

        for (i, bit) in (0..path.len()).flat_map(|i| (0..256).map(move |bit| (i, bit))) {
            let mut bad = path.clone();
            bad[i] = flip(&bad[i], bit);
            prop_assert!(verify_consistency(old, new, &old_root, &new_root, &bad).is_err());
        }
        for bit in 0..256 {
            prop_assert!(verify_consistency(old, new, &flip(&old_root, bit), &new_root, &path).is_err());
            prop_assert!(verify_consistency(old, new, &old_root, &flip(&new_root, bit), &path).is_err());
        }
        let mut longer = path.clone();
        longer.push(new_root);
        let verified = verify_consistency(old, new, &old_root, &new_root, &longer);
        prop_assert!(matches!(verified, Err(ProofError::PathTooLong { .. })), "{:?}", verified);
    }
}

/// A source that counts its lookups.
struct Counting<'a> {
    tree: &'a MemoryTree,
    lookups: Cell<u32>,
}

impl Subtrees for Counting<'_> {
    type Error = MissingSubtree;

    fn aligned(&self, level: u32, index: u64) -> Result<TreeHash, MissingSubtree> {
        self.lookups.set(self.lookups.get() + 1);
        self.tree.aligned(level, index)
    }
}

#[test]
fn a_proof_takes_at_most_two_lookups_per_level() {
    let tree = tree_of(&leaves(5, 1100));
    let source = Counting {
        tree: &tree,
        lookups: Cell::new(0),
    };
    let mut sizes: Vec<u64> = (1..=70).collect();
    sizes.extend([
        127, 128, 129, 255, 256, 257, 683, 1023, 1024, 1025, 1099, 1100,
    ]);
    for &n in &sizes {
        let levels = u64::BITS - (n - 1).leading_zeros();
        for m in [0, 1, n / 3, n / 2, n.saturating_sub(2), n - 1] {
            let m = m.min(n - 1);
            source.lookups.set(0);
            inclusion_proof(&source, m, n).unwrap();
            assert!(source.lookups.get() <= 2 * levels, "PATH({m}, D[{n}])");
            source.lookups.set(0);
            consistency_proof(&source, m + 1, n).unwrap();
            assert!(
                source.lookups.get() <= 2 * levels + 1,
                "PROOF({}, D[{n}])",
                m + 1
            );
        }
        source.lookups.set(0);
        root_at(&source, n).unwrap();
        assert_eq!(source.lookups.get(), n.count_ones());
    }
}

#[test]
fn what_is_wrong_is_named() {
    let tree = tree_of(&leaves(6, 5));
    let (root, h) = (tree.root(), leaf_hash(b"x"));
    assert_eq!(
        verify_inclusion(&h, 5, 5, &[], &root),
        Err(ProofError::IndexBeyondSize { index: 5, size: 5 })
    );
    assert_eq!(
        verify_consistency(5, 4, &root, &root, &[]),
        Err(ProofError::SizesOutOfOrder { old: 5, new: 4 })
    );
    assert_eq!(
        verify_consistency(5, 5, &root, &h, &[]),
        Err(ProofError::SameSizeRootsDiffer {
            size: 5,
            old: root,
            new: h
        })
    );
    assert_eq!(verify_consistency(0, 5, &empty_root(), &root, &[]), Ok(()));
    assert_eq!(
        verify_consistency(0, 5, &h, &root, &[]),
        Err(ProofError::NotTheEmptyRoot {
            empty: empty_root(),
            given: h
        })
    );
    assert_eq!(
        verify_consistency(3, 5, &root, &root, &[]),
        Err(ProofError::PathTooShort {
            expected: 4,
            got: 0
        })
    );
    let err = verify_inclusion(&h, 0, 1, &[], &root).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the proof leads to root {h}, not to the tree's root {root}")
    );
    assert_eq!(
        inclusion_proof(&tree, 5, 5),
        Err(ProveError::IndexBeyondSize { index: 5, size: 5 })
    );
    assert_eq!(
        consistency_proof(&tree, 6, 5),
        Err(ProveError::SizesOutOfOrder { old: 6, new: 5 })
    );
    // Asked for more leaves than the source holds: the source says which subtree it lacks.
    let err = inclusion_proof(&tree, 0, 8).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reading a subtree hash: no complete subtree at level 2, index 1: the tree holds 5 leaves"
    );
}

#[test]
fn a_root_does_not_commit_to_its_size() {
    // Leaf 0 of 5 has three right siblings: [1], [2, 3] and [4]. In trees of 6, 7 or 8 leaves
    // it has three right siblings too, so the same hashes verify against the same root for
    // those sizes; a verifier takes the size and the root from one signed checkpoint.
    let leaves = leaves(7, 5);
    let tree = tree_of(&leaves);
    let path = inclusion_proof(&tree, 0, 5).unwrap();
    for size in 1..=20 {
        let verified = verify_inclusion(&leaves[0], 0, size, &path, &tree.root());
        assert_eq!(verified.is_ok(), (5..=8).contains(&size), "size {size}");
    }
}

// --- golden vectors ------------------------------------------------------------------------------

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/merkle_vectors.json");
const GOLDEN_LEAVES: u64 = 17;
const GOLDEN_INCLUSION: [(u64, u64); 12] = [
    (0, 1),
    (0, 2),
    (1, 2),
    (2, 3),
    (0, 7),
    (3, 7),
    (6, 7),
    (5, 8),
    (15, 16),
    (0, 17),
    (9, 17),
    (16, 17),
];
const GOLDEN_CONSISTENCY: [(u64, u64); 12] = [
    (0, 17),
    (1, 2),
    (1, 17),
    (2, 3),
    (3, 7),
    (4, 7),
    (6, 8),
    (7, 17),
    (8, 16),
    (15, 17),
    (16, 17),
    (17, 17),
];

fn hex_list(hashes: &[TreeHash]) -> Value {
    hashes.iter().map(TreeHash::to_hex).collect()
}

/// The vectors as this crate computes them.
fn golden_vectors() -> Value {
    let texts: Vec<String> = (0..GOLDEN_LEAVES).map(|i| format!("leaf {i}")).collect();
    let hashes: Vec<TreeHash> = texts.iter().map(|t| leaf_hash(t.as_bytes())).collect();
    let tree = tree_of(&hashes);
    let roots: Vec<Value> = (1..=GOLDEN_LEAVES)
        .map(|size| json!({"size": size, "root": root_at(&tree, size).unwrap().to_hex()}))
        .collect();
    let inclusion: Vec<Value> = GOLDEN_INCLUSION
        .iter()
        .map(|&(index, size)| {
            let path = inclusion_proof(&tree, index, size).unwrap();
            json!({"index": index, "size": size, "path": hex_list(&path)})
        })
        .collect();
    let consistency: Vec<Value> = GOLDEN_CONSISTENCY
        .iter()
        .map(|&(old, new)| {
            let path = consistency_proof(&tree, old, new).unwrap();
            json!({"old": old, "new": new, "path": hex_list(&path)})
        })
        .collect();
    json!({
        "about": "Golden vectors of the journal's Merkle tree (docs/FORMAT.md, \"Merkle tree\"): \
                  RFC 9162 section 2.1 with BLAKE3; leaf i is the ASCII bytes of leaves[i]. \
                  Written by journal-format/tests/merkle.rs, checked by merkle_vectors.py.",
        "leaves": texts,
        "empty_root": empty_root().to_hex(),
        "leaf_hashes": hex_list(&hashes),
        "roots": roots,
        "inclusion": inclusion,
        "consistency": consistency,
    })
}

fn hashes_of(value: &Value) -> Vec<TreeHash> {
    let list = value.as_array().expect("a list of hashes");
    list.iter()
        .map(|h| {
            h.as_str()
                .expect("a hex string")
                .parse()
                .expect("64 hex digits")
        })
        .collect()
}

fn number(value: &Value) -> u64 {
    value.as_u64().expect("a size or index")
}

#[test]
fn golden_vectors_match_the_file() {
    let computed = golden_vectors();
    if std::env::var_os("MERKLE_VECTORS_WRITE").is_some() {
        let text = serde_json::to_string_pretty(&computed).unwrap() + "\n";
        std::fs::write(VECTORS, text).unwrap();
        return;
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    assert_eq!(
        file, computed,
        "regenerate with MERKLE_VECTORS_WRITE=1, then check with merkle_vectors.py"
    );

    // The file's proofs verify against the file's roots, and its roots are the reference's.
    let leaves = hashes_of(&file["leaf_hashes"]);
    let root_of = |size: u64| -> TreeHash {
        let roots = file["roots"].as_array().unwrap();
        let entry = match size {
            0 => &file["empty_root"],
            _ => &roots.iter().find(|r| number(&r["size"]) == size).unwrap()["root"],
        };
        entry.as_str().unwrap().parse().unwrap()
    };
    for size in 0..=GOLDEN_LEAVES {
        assert_eq!(root_of(size), reference::mth(&leaves[..size as usize]));
    }
    for entry in file["inclusion"].as_array().unwrap() {
        let (index, size) = (number(&entry["index"]), number(&entry["size"]));
        let path = hashes_of(&entry["path"]);
        assert_eq!(
            path,
            reference::path(index as usize, &leaves[..size as usize])
        );
        let verified =
            verify_inclusion(&leaves[index as usize], index, size, &path, &root_of(size));
        assert_eq!(verified, Ok(()), "inclusion of {index} in {size}");
    }
    for entry in file["consistency"].as_array().unwrap() {
        let (old, new) = (number(&entry["old"]), number(&entry["new"]));
        let path = hashes_of(&entry["path"]);
        assert_eq!(
            path,
            reference::proof(old as usize, &leaves[..new as usize])
        );
        let verified = verify_consistency(old, new, &root_of(old), &root_of(new), &path);
        assert_eq!(verified, Ok(()), "consistency of {old} with {new}");
    }
}

#[test]
fn golden_roots_match_format_md() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md")).unwrap();
    let marker = "<!-- golden:merkle-roots -->\n```text\n";
    let start = doc
        .find(marker)
        .expect("FORMAT.md has the golden Merkle roots")
        + marker.len();
    let block = &doc[start..start + doc[start..].find("```").unwrap()];
    let texts: Vec<String> = (0..GOLDEN_LEAVES).map(|i| format!("leaf {i}")).collect();
    let tree = tree_of(
        &texts
            .iter()
            .map(|t| leaf_hash(t.as_bytes()))
            .collect::<Vec<_>>(),
    );
    let mut sizes = Vec::new();
    for line in block.lines() {
        let (size, root) = line.trim().split_once(' ').unwrap();
        let size: u64 = size.parse().unwrap();
        let root: TreeHash = root.parse().unwrap();
        assert_eq!(
            root_at(&tree, size),
            Ok(root),
            "FORMAT.md's root of {size} leaves"
        );
        sizes.push(size);
    }
    assert_eq!(sizes, [0, 1, 2, 3, 7, 17]);
}
