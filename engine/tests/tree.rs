//! The Merkle tree the journal keeps: grown behind commits, equal to the tree of the stored
//! bodies; its proofs check; rebuilt from the log when its files are deleted or damaged, equal
//! to the one kept live; checked by `verify`, and a digest's root with it.

mod common;

use std::ops::ControlFlow;
use std::path::Path;

use journal_engine::{Chain, Journal, Options, RecoveryAction, VerifyOptions};
use journal_format::merkle::{
    leaf_hash, root_at, verify_consistency, verify_inclusion, MemoryTree, TreeHash,
};
use journal_format::Position;

use common::{append, event, small_segments};

/// The tree of the bodies the log holds, built apart from the journal's.
fn tree_of_log(journal: &Journal) -> MemoryTree {
    let mut tree = MemoryTree::new();
    journal
        .scan(Position::FIRST, None, Chain::Verified, |record| {
            tree.push(leaf_hash(record.body));
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    tree
}

/// Appends `n` events in batches of varying sizes (1 to 37), across sessions.
fn fill(journal: &Journal, from: u64, n: u64) {
    let mut i = from;
    while i < from + n {
        let batch = (1 + (i * 7919) % 37).min(from + n - i);
        let events = (i..i + batch)
            .map(|k| event(k, &format!("s{}", k % 5)))
            .collect();
        append(journal, events);
        i += batch;
    }
}

fn open(dir: &Path) -> Journal {
    Journal::open(dir, small_segments()).expect("open")
}

#[test]
fn the_kept_tree_is_the_tree_of_the_stored_bodies_and_its_proofs_check() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path());
    let empty = journal.tree_head().unwrap();
    assert_eq!(empty.position, Position::ZERO);
    assert_eq!(empty.root, MemoryTree::new().root());
    fill(&journal, 0, 700);
    let head = journal.tree_head().unwrap();
    let built = tree_of_log(&journal);
    assert_eq!(head.position.0, 700);
    assert_eq!(head.root, built.root());
    assert_eq!(head.hash, journal.head().hash);
    for size in [1, 2, 3, 64, 65, 127, 128, 129, 500, 700] {
        let root = journal.tree_root(size).unwrap();
        for position in [1, size / 2 + 1, size] {
            let proof = journal.inclusion_proof(Position(position), size).unwrap();
            let body = journal.stored_body(Position(position)).unwrap();
            verify_inclusion(&leaf_hash(&body), position - 1, size, &proof, &root)
                .unwrap_or_else(|e| panic!("position {position} in {size}: {e}"));
        }
        for old in [0, 1, size / 3, size - 1, size] {
            let proof = journal.consistency_proof(old, size).unwrap();
            let old_root = journal.tree_root(old).unwrap();
            verify_consistency(old, size, &old_root, &root, &proof)
                .unwrap_or_else(|e| panic!("{old} to {size}: {e}"));
        }
    }
    // Asked beyond the journal: refused, naming what it holds.
    let beyond = journal.inclusion_proof(Position(5), 701).unwrap_err();
    assert!(beyond.to_string().contains("holds 700 events"), "{beyond}");
    assert!(journal.inclusion_proof(Position(0), 10).is_err());
    assert!(journal.inclusion_proof(Position(11), 10).is_err());
    assert!(journal.consistency_proof(11, 10).is_err());
}

#[test]
fn a_deleted_tree_is_rebuilt_from_the_log_equal_to_the_one_kept_live() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path());
    fill(&journal, 0, 900);
    let live = journal.tree_head().unwrap();
    let live_proofs: Vec<_> = (1..=900)
        .step_by(97)
        .map(|p| journal.inclusion_proof(Position(p), 900).unwrap())
        .collect();
    journal.close();
    std::fs::remove_dir_all(dir.path().join("tree")).unwrap();
    let journal = open(dir.path());
    assert!(journal.recovery_report().actions.iter().any(
        |a| matches!(a, RecoveryAction::TreeRebuilt { reason } if reason.contains("missing"))
    ));
    assert_eq!(journal.tree_head().unwrap(), live);
    let rebuilt_proofs: Vec<_> = (1..=900)
        .step_by(97)
        .map(|p| journal.inclusion_proof(Position(p), 900).unwrap())
        .collect();
    assert_eq!(rebuilt_proofs, live_proofs);
    // And it goes on growing from there.
    fill(&journal, 900, 50);
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
}

#[test]
fn a_tree_behind_its_log_catches_up_and_a_damaged_head_or_level_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path());
    fill(&journal, 0, 300);
    journal.close();
    let tree_dir = dir.path().join("tree");
    let kept_head = std::fs::read(tree_dir.join("HEAD")).unwrap();
    // Appended after the tree's head was kept aside: putting the old head back leaves a tree
    // behind its log, with files longer than its head says.
    let journal = open(dir.path());
    fill(&journal, 300, 200);
    journal.close();
    std::fs::write(tree_dir.join("HEAD"), &kept_head).unwrap();
    let journal = open(dir.path());
    assert!(!journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::TreeRebuilt { .. })));
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
    journal.close();

    // A damaged head is set aside and the tree rebuilt.
    let mut bad = std::fs::read(tree_dir.join("HEAD")).unwrap();
    bad[30] ^= 0x10;
    std::fs::write(tree_dir.join("HEAD"), &bad).unwrap();
    let journal = open(dir.path());
    assert!(journal.recovery_report().actions.iter().any(
        |a| matches!(a, RecoveryAction::TreeRebuilt { reason } if reason.contains("checksum"))
    ));
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
    journal.close();

    // A changed hash on the frontier fails the root check at open: of 500 leaves (0b111110100),
    // the last hash of level 2 is the frontier's last, that of leaves 496..500.
    let level2 = tree_dir.join("level-02");
    let len = std::fs::metadata(&level2).unwrap().len();
    assert_eq!(len, (500 >> 2) * 32);
    common::flip_byte(&level2, len - 1);
    let journal = open(dir.path());
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::TreeRebuilt { reason } if reason.contains("root"))));
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
}

#[test]
fn verify_finds_a_changed_hash_inside_the_tree_and_checks_a_digests_root() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path());
    fill(&journal, 0, 400);
    let head = journal.tree_head().unwrap();
    let with_root = |root: TreeHash| VerifyOptions {
        digest: Some((head.position, head.hash)),
        digest_root: Some(root),
        ..VerifyOptions::default()
    };
    let report = journal
        .verify(&with_root(head.root), &mut |_, _| {})
        .unwrap();
    assert!(report.ok, "{:?}", report.problems);
    let report = journal
        .verify(&with_root(TreeHash([1; 32])), &mut |_, _| {})
        .unwrap();
    assert!(report
        .problems
        .iter()
        .any(|p| p.kind == "digest_mismatch" && p.detail.contains("tree root")));
    journal.close();

    // Leaf 10's hash (not on the frontier, so open keeps the tree) changed on disk.
    common::flip_byte(&dir.path().join("tree").join("level-00"), 10 * 32 + 3);
    let journal = open(dir.path());
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    let tree = report
        .problems
        .iter()
        .find(|p| p.kind == "tree")
        .unwrap_or_else(|| panic!("no tree problem in {:?}", report.problems));
    assert_eq!(tree.position, Some(11));
    assert!(tree.detail.contains("positions 11..=11"), "{}", tree.detail);
}

#[test]
fn a_read_only_journal_proves_what_its_tree_holds() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path());
    fill(&journal, 0, 120);
    let head = journal.tree_head().unwrap();
    journal.close();
    let read_only = Journal::open(
        dir.path(),
        Options {
            read_only: true,
            ..small_segments()
        },
    )
    .unwrap();
    assert_eq!(read_only.tree_head().unwrap(), head);
    let proof = read_only.inclusion_proof(Position(7), 120).unwrap();
    let body = read_only.stored_body(Position(7)).unwrap();
    verify_inclusion(&leaf_hash(&body), 6, 120, &proof, &head.root).unwrap();
}

#[test]
fn a_journal_opened_without_its_tree_refuses_proofs_and_grows_it_when_opened_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let without = || Options {
        tree: false,
        ..small_segments()
    };
    let journal = Journal::open(dir.path(), without()).unwrap();
    fill(&journal, 0, 200);
    let refused = journal.tree_head().unwrap_err();
    assert!(refused.to_string().contains("Options::tree"), "{refused}");
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(report.ok, "{:?}", report.problems);
    journal.close();
    assert!(!dir.path().join("tree").exists());
    let journal = open(dir.path());
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
    fill(&journal, 200, 30);
    journal.close();
    // Off again: the kept tree is left alone, and picked up behind the log the next time.
    let journal = Journal::open(dir.path(), without()).unwrap();
    fill(&journal, 230, 40);
    journal.close();
    let journal = open(dir.path());
    assert_eq!(journal.tree_head().unwrap().position.0, 270);
    assert_eq!(
        journal.tree_head().unwrap().root,
        tree_of_log(&journal).root()
    );
}

/// A journal of 1,000,000 events: proofs of spread positions against the tree the log gives,
/// and the tree rebuilt from the log after its files are deleted has the same root.
#[test]
fn proofs_from_a_journal_of_a_million_events() {
    const EVENTS: u64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let buffered = || Options {
        durability: journal_engine::Durability::Buffered {
            sync_interval: std::time::Duration::from_millis(200),
        },
        ..Options::default()
    };
    let journal = Journal::open(dir.path(), buffered()).unwrap();
    let mut at = 0;
    while at < EVENTS {
        let batch: Vec<_> = (at..at + 5000)
            .map(|i| {
                let mut e = journal_format::Envelope::new(
                    "tool.started",
                    format!("e{i}"),
                    "2026-11-27T10:00:00Z",
                );
                e.session_id = Some(format!("s{}", i % 97));
                e
            })
            .collect();
        journal
            .append_batch_blocking(batch, journal_engine::AppendOptions::default())
            .unwrap();
        at += 5000;
    }
    let head = journal.tree_head().unwrap();
    assert_eq!(head.position.0, EVENTS);
    let built = tree_of_log(&journal);
    assert_eq!(head.root, built.root());
    for k in 0..200u64 {
        let position = 1 + (k * 4_999_999_967) % EVENTS;
        let size = position + (k * 7_919) % (EVENTS - position + 1);
        let proof = journal.inclusion_proof(Position(position), size).unwrap();
        assert!(proof.len() <= 20, "{} hashes", proof.len());
        let body = journal.stored_body(Position(position)).unwrap();
        let root = root_at(&built, size).unwrap();
        verify_inclusion(&leaf_hash(&body), position - 1, size, &proof, &root).unwrap();
        let old = position;
        let proof = journal.consistency_proof(old, size).unwrap();
        verify_consistency(old, size, &root_at(&built, old).unwrap(), &root, &proof).unwrap();
    }
    journal.close();
    std::fs::remove_dir_all(dir.path().join("tree")).unwrap();
    let journal = Journal::open(dir.path(), buffered()).unwrap();
    assert_eq!(journal.tree_head().unwrap(), head);
}
