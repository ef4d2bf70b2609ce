//! Signed checkpoints and proof documents as an auditor meets them: the golden key and
//! checkpoint texts of `checkpoint_vectors.json` (written by this code with
//! `CHECKPOINT_VECTORS_WRITE=1`, checked by the independent `checkpoint_vectors.py`), and the
//! properties that make them evidence: every single-bit change to a signed checkpoint or to a
//! proof document makes its check fail, another key's signature is refused, and a cosigned
//! checkpoint verifies with either key.

use journal_format::checkpoint::{Checkpoint, CheckpointError, SignedCheckpoint, SigningKey};
use journal_format::merkle::{
    consistency_proof, inclusion_proof, leaf_hash, root_at, MemoryTree, TreeHash,
};
use journal_format::proof::{
    check_consistency, check_inclusion, CheckError, ConsistencyProof, InclusionProof,
    ProofDocument, Proven, CONSISTENCY_FORMAT, INCLUSION_FORMAT,
};
use journal_format::{ChainHash, Envelope, Position};
use proptest::prelude::*;
use serde_json::{json, Value};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/checkpoint_vectors.json");

fn key(name: &str, seed: u8) -> SigningKey {
    SigningKey::from_seed(name, [seed; 32]).unwrap()
}

/// The stored body of event `i`: a real envelope, as the journal stores it.
fn event_body(i: u64) -> Vec<u8> {
    Envelope::new("tool.started", format!("evt-{i}"), "2026-11-27T10:00:00Z")
        .to_msgpack()
        .unwrap()
}

/// A tree of `size` events, leaf `i` being event `i`'s body.
fn tree(size: u64) -> MemoryTree {
    let mut tree = MemoryTree::new();
    for i in 0..size {
        tree.push(leaf_hash(&event_body(i)));
    }
    tree
}

fn checkpoint_of(tree: &MemoryTree, size: u64) -> Checkpoint {
    Checkpoint {
        origin: Checkpoint::origin_for("0190c6b2-journal"),
        tree_size: size,
        root: root_at(tree, size).unwrap(),
        chain_position: Position(size),
        chain_hash: ChainHash([size as u8; 32]),
        time_ns: 1_795_773_600_000_000_000 + size as i64,
    }
}

fn signed_text(checkpoint: Checkpoint, signer: &SigningKey) -> String {
    SignedCheckpoint::sign(checkpoint, signer)
        .unwrap()
        .to_text()
}

/// The inclusion proof document of event `index` in the first `size` events of `tree`, its
/// checkpoint signed by `signer`.
fn inclusion(tree: &MemoryTree, index: u64, size: u64, signer: &SigningKey) -> InclusionProof {
    let body = event_body(index);
    InclusionProof {
        format: INCLUSION_FORMAT.into(),
        event_id: format!("evt-{index}"),
        position: index + 1,
        leaf_index: index,
        tree_size: size,
        leaf_hash: leaf_hash(&body),
        path: inclusion_proof(tree, index, size).unwrap(),
        root: root_at(tree, size).unwrap(),
        body: InclusionProof::encode_body(&body),
        checkpoint: Some(signed_text(checkpoint_of(tree, size), signer)),
    }
}

fn consistency(tree: &MemoryTree, old: u64, new: u64, signer: &SigningKey) -> ConsistencyProof {
    ConsistencyProof {
        format: CONSISTENCY_FORMAT.into(),
        old_size: old,
        old_root: root_at(tree, old).unwrap(),
        new_size: new,
        new_root: root_at(tree, new).unwrap(),
        path: consistency_proof(tree, old, new).unwrap(),
        old_checkpoint: Some(signed_text(checkpoint_of(tree, old), signer)),
        new_checkpoint: Some(signed_text(checkpoint_of(tree, new), signer)),
    }
}

/// `text` with bit `bit` flipped; `None` when the result is not UTF-8 (no text reader takes it).
fn flip(text: &str, bit: usize) -> Option<String> {
    let mut bytes = text.as_bytes().to_vec();
    bytes[bit / 8] ^= 1 << (bit % 8);
    String::from_utf8(bytes).ok()
}

fn flip_hash(hash: &TreeHash, bit: usize) -> TreeHash {
    let mut bytes = hash.0;
    bytes[bit / 8 % 32] ^= 1 << (bit % 8);
    TreeHash(bytes)
}

/// Whether the document `text` (JSON) is accepted by `check` with `signer`'s key.
fn accepted(text: &str, signer: &SigningKey) -> bool {
    ProofDocument::from_json(text)
        .and_then(|d| d.check(&[signer.verifier()]))
        .is_ok()
}

// --- golden vectors -----------------------------------------------------------------------------

fn golden_checkpoint() -> Checkpoint {
    let mut root = [0u8; 32];
    root.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    Checkpoint {
        origin: Checkpoint::origin_for("0190c6b2-7d1e-7c3a-9f00-5a1b2c3d4e5f"),
        tree_size: 6_700,
        root: TreeHash(root),
        chain_position: Position(6_700),
        chain_hash: ChainHash([0xc4; 32]),
        time_ns: 1_795_773_600_123_456_789,
    }
}

fn golden_vectors() -> Value {
    let mut seed = [0u8; 32];
    seed.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let log = SigningKey::from_seed("agent-journal/0190c6b2", seed).unwrap();
    let witness = SigningKey::from_seed("witness.example/w1", [0xff; 32]).unwrap();
    let checkpoint = golden_checkpoint();
    let mut signed = SignedCheckpoint::sign(checkpoint.clone(), &log).unwrap();
    let signed_text = signed.to_text();
    signed.cosign(&witness).unwrap();
    json!({
        "about": "Golden vectors of the journal's signed checkpoints (docs/FORMAT.md, \
                  \"Checkpoints and proof documents\"): C2SP signed notes with Ed25519. \
                  Written by journal-format/tests/checkpoint.rs, checked by checkpoint_vectors.py.",
        "keys": [
            {"name": log.name(), "seed": hex(&seed), "key_id": log.key_id().to_string(),
             "public_key": hex(&log.verifier().public_key()),
             "private_text": log.to_text(), "verifier_text": log.verifier().to_text()},
            {"name": witness.name(), "seed": hex(&[0xff; 32]),
             "key_id": witness.key_id().to_string(),
             "public_key": hex(&witness.verifier().public_key()),
             "private_text": witness.to_text(), "verifier_text": witness.verifier().to_text()},
        ],
        "checkpoint": {
            "origin": checkpoint.origin, "tree_size": checkpoint.tree_size,
            "root": checkpoint.root.to_hex(), "chain_position": checkpoint.chain_position.0,
            "chain_hash": checkpoint.chain_hash.to_hex(), "time_ns": checkpoint.time_ns,
        },
        "body": checkpoint.body(),
        "signed": signed_text,
        "cosigned": signed.to_text(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn golden_vectors_match_the_file() {
    let computed = golden_vectors();
    if std::env::var_os("CHECKPOINT_VECTORS_WRITE").is_some() {
        let text = serde_json::to_string_pretty(&computed).unwrap() + "\n";
        std::fs::write(VECTORS, text).unwrap();
        return;
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    assert_eq!(
        file, computed,
        "regenerate with CHECKPOINT_VECTORS_WRITE=1, then check with checkpoint_vectors.py"
    );
    // The file's texts read back and verify with the file's keys.
    let log = SigningKey::from_text(file["keys"][0]["private_text"].as_str().unwrap()).unwrap();
    let witness = journal_format::checkpoint::VerifierKey::from_text(
        file["keys"][1]["verifier_text"].as_str().unwrap(),
    )
    .unwrap();
    let cosigned = SignedCheckpoint::parse(file["cosigned"].as_str().unwrap()).unwrap();
    assert_eq!(cosigned.checkpoint, golden_checkpoint());
    assert_eq!(
        cosigned.verify(&[log.verifier(), witness]),
        Ok(vec![
            "agent-journal/0190c6b2".to_owned(),
            "witness.example/w1".to_owned()
        ])
    );
}

/// FORMAT.md's golden signed checkpoint and verifier keys are the ones this code makes.
#[test]
fn golden_signed_checkpoint_matches_format_md() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md")).unwrap();
    let marker = "<!-- golden:signed-checkpoint -->\n```text\n";
    let start = doc
        .find(marker)
        .expect("FORMAT.md has the golden signed checkpoint")
        + marker.len();
    let block = &doc[start..start + doc[start..].find("```").unwrap()];
    let vectors = golden_vectors();
    assert_eq!(block, vectors["cosigned"].as_str().unwrap());
    for key in vectors["keys"].as_array().unwrap() {
        let text = key["verifier_text"].as_str().unwrap();
        assert!(
            doc.contains(&format!("`{text}`")),
            "FORMAT.md names the verifier key {text}"
        );
    }
}

#[test]
fn the_golden_body_is_a_tlog_checkpoint_with_two_extension_lines() {
    let body = golden_checkpoint().body();
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(
        lines,
        [
            "agent-journal/0190c6b2-7d1e-7c3a-9f00-5a1b2c3d4e5f",
            "6700",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            &format!("chain 6700 {}", "c4".repeat(32)),
            "time 2026-11-27T10:00:00.123456789Z",
        ]
    );
}

// --- signed checkpoints -------------------------------------------------------------------------

#[test]
fn every_single_bit_change_to_a_signed_checkpoint_fails_it() {
    let log = key("agent-journal/j", 1);
    let text = signed_text(golden_checkpoint(), &log);
    let keys = [log.verifier()];
    assert!(SignedCheckpoint::parse(&text)
        .unwrap()
        .verify(&keys)
        .is_ok());
    for bit in 0..text.len() * 8 {
        let Some(changed) = flip(&text, bit) else {
            continue;
        };
        let verdict = SignedCheckpoint::parse(&changed).and_then(|s| s.verify(&keys));
        assert!(
            verdict.is_err(),
            "bit {bit} changed and still verifies: {changed:?}"
        );
    }
}

fn arb_checkpoint() -> impl Strategy<Value = Checkpoint> {
    (
        "[a-z0-9./-]{1,40}",
        any::<u64>(),
        any::<[u8; 32]>(),
        any::<u64>(),
        any::<[u8; 32]>(),
        any::<i64>(),
    )
        .prop_map(
            |(id, tree_size, root, position, chain, time_ns)| Checkpoint {
                origin: Checkpoint::origin_for(&id),
                tree_size,
                root: TreeHash(root),
                chain_position: Position(position),
                chain_hash: ChainHash(chain),
                time_ns,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_single_bit_change_to_any_signed_checkpoint_fails_it(
        checkpoint in arb_checkpoint(),
        seed in any::<[u8; 32]>(),
        bit in any::<prop::sample::Index>(),
    ) {
        let log = SigningKey::from_seed("log.example/a", seed).unwrap();
        let text = signed_text(checkpoint.clone(), &log);
        let parsed = SignedCheckpoint::parse(&text).unwrap();
        prop_assert_eq!(&parsed.checkpoint, &checkpoint);
        prop_assert_eq!(parsed.verify(&[log.verifier()]), Ok(vec!["log.example/a".to_owned()]));
        if let Some(changed) = flip(&text, bit.index(text.len() * 8)) {
            let verdict = SignedCheckpoint::parse(&changed).and_then(|s| s.verify(&[log.verifier()]));
            prop_assert!(verdict.is_err(), "{:?}", changed);
        }
    }

    #[test]
    fn a_checkpoint_signed_with_another_key_is_refused(
        checkpoint in arb_checkpoint(),
        (a, b) in (any::<[u8; 32]>(), any::<[u8; 32]>()).prop_filter("two keys", |(a, b)| a != b),
        same_name in any::<bool>(),
    ) {
        let signer = SigningKey::from_seed("log", a).unwrap();
        let other = SigningKey::from_seed(if same_name { "log" } else { "other" }, b).unwrap();
        let signed = SignedCheckpoint::parse(&signed_text(checkpoint, &signer)).unwrap();
        let verdict = signed.verify(&[other.verifier()]);
        prop_assert!(
            matches!(verdict, Err(CheckpointError::NotSignedByGivenKey { .. })),
            "{:?}",
            verdict
        );
    }

    #[test]
    fn a_cosigned_checkpoint_verifies_with_either_key(
        checkpoint in arb_checkpoint(),
        (a, b) in (any::<[u8; 32]>(), any::<[u8; 32]>()),
    ) {
        let log = SigningKey::from_seed("log", a).unwrap();
        let witness = SigningKey::from_seed("witness", b).unwrap();
        let mut signed = SignedCheckpoint::sign(checkpoint, &log).unwrap();
        signed.cosign(&witness).unwrap();
        let signed = SignedCheckpoint::parse(&signed.to_text()).unwrap();
        prop_assert_eq!(signed.verify(&[log.verifier()]), Ok(vec!["log".to_owned()]));
        prop_assert_eq!(signed.verify(&[witness.verifier()]), Ok(vec!["witness".to_owned()]));
    }
}

// --- proof documents ----------------------------------------------------------------------------

#[test]
fn an_inclusion_proof_says_what_it_established() {
    let log = key("agent-journal/j", 1);
    let tree = tree(7);
    let proof = inclusion(&tree, 4, 7, &log);
    let checked = check_inclusion(&proof, &[log.verifier()]).unwrap();
    assert_eq!(
        checked.proven,
        Proven::Inclusion {
            event_id: "evt-4".into(),
            position: 5,
            tree_size: 7,
            root: tree.root()
        }
    );
    assert!(checked.signed);
    assert_eq!(checked.checkpoints[0].signers, ["agent-journal/j"]);
    assert_eq!(
        checked.checkpoints[0].origin,
        "agent-journal/0190c6b2-journal"
    );
    let text = checked.to_string();
    assert!(text.contains("event \"evt-4\" is at position 5"), "{text}");
    assert!(text.contains("signed by agent-journal/j"), "{text}");
    // The document reads back as itself.
    let document = ProofDocument::Inclusion(proof);
    assert_eq!(ProofDocument::from_json(&document.to_json()), Ok(document));
}

#[test]
fn every_single_bit_change_to_an_inclusion_document_fails_it() {
    let log = key("agent-journal/j", 1);
    let tree = tree(11);
    let text = ProofDocument::Inclusion(inclusion(&tree, 9, 11, &log)).to_json();
    assert!(accepted(&text, &log));
    for bit in 0..text.len() * 8 {
        if let Some(changed) = flip(&text, bit) {
            assert!(
                !accepted(&changed, &log),
                "bit {bit} changed and still accepted: {changed}"
            );
        }
    }
}

#[test]
fn every_single_bit_change_to_a_consistency_document_fails_it() {
    let log = key("agent-journal/j", 1);
    let tree = tree(13);
    let text = ProofDocument::Consistency(consistency(&tree, 6, 13, &log)).to_json();
    assert!(accepted(&text, &log));
    for bit in 0..text.len() * 8 {
        if let Some(changed) = flip(&text, bit) {
            assert!(
                !accepted(&changed, &log),
                "bit {bit} changed and still accepted: {changed}"
            );
        }
    }
}

/// `p` with one bit of one field changed, the field and bit picked by `which` and `bit`.
fn change_inclusion(p: &InclusionProof, which: usize, bit: usize) -> Option<InclusionProof> {
    let mut p = p.clone();
    match which % 10 {
        0 => p.format = flip(&p.format, bit % (p.format.len() * 8))?,
        1 => p.event_id = flip(&p.event_id, bit % (p.event_id.len() * 8))?,
        2 => p.position ^= 1 << (bit % 64),
        3 => p.leaf_index ^= 1 << (bit % 64),
        4 => p.tree_size ^= 1 << (bit % 64),
        5 => p.leaf_hash = flip_hash(&p.leaf_hash, bit),
        6 if p.path.is_empty() => return None,
        6 => {
            let i = bit / 256 % p.path.len();
            p.path[i] = flip_hash(&p.path[i], bit);
        }
        7 => p.root = flip_hash(&p.root, bit),
        8 => p.body = flip(&p.body, bit % (p.body.len() * 8))?,
        _ => {
            let text = p.checkpoint.take()?;
            p.checkpoint = Some(flip(&text, bit % (text.len() * 8))?);
        }
    }
    Some(p)
}

fn change_consistency(p: &ConsistencyProof, which: usize, bit: usize) -> Option<ConsistencyProof> {
    let mut p = p.clone();
    match which % 8 {
        0 => p.format = flip(&p.format, bit % (p.format.len() * 8))?,
        1 => p.old_size ^= 1 << (bit % 64),
        2 => p.old_root = flip_hash(&p.old_root, bit),
        3 => p.new_size ^= 1 << (bit % 64),
        4 => p.new_root = flip_hash(&p.new_root, bit),
        5 if p.path.is_empty() => return None,
        5 => {
            let i = bit / 256 % p.path.len();
            p.path[i] = flip_hash(&p.path[i], bit);
        }
        6 => {
            let text = p.old_checkpoint.take()?;
            p.old_checkpoint = Some(flip(&text, bit % (text.len() * 8))?);
        }
        _ => {
            let text = p.new_checkpoint.take()?;
            p.new_checkpoint = Some(flip(&text, bit % (text.len() * 8))?);
        }
    }
    Some(p)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_single_bit_change_to_any_field_of_an_inclusion_proof_fails_it(
        size in 1u64..120,
        index in any::<prop::sample::Index>(),
        which in 0usize..10,
        bit in any::<usize>(),
    ) {
        let log = key("agent-journal/j", 1);
        let tree = tree(size);
        let proof = inclusion(&tree, index.index(size as usize) as u64, size, &log);
        prop_assert!(check_inclusion(&proof, &[log.verifier()]).is_ok());
        if let Some(changed) = change_inclusion(&proof, which, bit) {
            let verdict = check_inclusion(&changed, &[log.verifier()]);
            prop_assert!(verdict.is_err(), "field {} bit {}: {:?}", which, bit, changed);
        }
    }

    #[test]
    fn a_single_bit_change_to_any_field_of_a_consistency_proof_fails_it(
        new in 1u64..120,
        old in any::<prop::sample::Index>(),
        which in 0usize..8,
        bit in any::<usize>(),
    ) {
        let log = key("agent-journal/j", 1);
        let tree = tree(new);
        let old = old.index(new as usize + 1) as u64;
        let proof = consistency(&tree, old, new, &log);
        prop_assert!(check_consistency(&proof, &[log.verifier()]).is_ok());
        if let Some(changed) = change_consistency(&proof, which, bit) {
            let verdict = check_consistency(&changed, &[log.verifier()]);
            prop_assert!(verdict.is_err(), "field {} bit {}: {:?}", which, bit, changed);
        }
    }

    #[test]
    fn a_proof_checked_with_another_key_is_refused(
        size in 1u64..40,
        seed in 2u8..,
    ) {
        let (log, other) = (key("agent-journal/j", 1), key("agent-journal/j", seed));
        let tree = tree(size);
        let proof = inclusion(&tree, size - 1, size, &log);
        let verdict = check_inclusion(&proof, &[other.verifier()]);
        prop_assert!(matches!(
            verdict,
            Err(CheckError::Checkpoint { field: "checkpoint", source: CheckpointError::NotSignedByGivenKey { .. } })
        ), "{:?}", verdict);
    }
}

#[test]
fn a_proof_for_a_tree_beyond_its_checkpoint_is_refused_naming_both_sizes() {
    let log = key("log", 1);
    let tree = tree(9);
    let mut proof = inclusion(&tree, 2, 9, &log);
    proof.checkpoint = Some(signed_text(checkpoint_of(&tree, 8), &log));
    let err = check_inclusion(&proof, &[log.verifier()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tree_size 9 is beyond the 8 events of checkpoint: the checkpoint does not sign that tree"
    );
    proof.checkpoint = Some(signed_text(checkpoint_of(&tree, 9), &log));
    let mut smaller = inclusion(&tree, 2, 5, &log);
    smaller.checkpoint = proof.checkpoint.clone();
    let err = check_inclusion(&smaller, &[log.verifier()]).unwrap_err();
    assert!(
        matches!(
            err,
            CheckError::SizeDiffersFromCheckpoint {
                proof: 5,
                checkpoint: 9,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn keys_given_and_no_checkpoint_is_refused_and_no_keys_is_reported_unsigned() {
    let log = key("log", 1);
    let tree = tree(5);
    let mut proof = inclusion(&tree, 0, 5, &log);
    proof.checkpoint = None;
    let err = check_inclusion(&proof, &[log.verifier()]).unwrap_err();
    assert_eq!(
        err,
        CheckError::Unsigned {
            field: "checkpoint"
        }
    );
    assert!(
        err.to_string().contains("an unsigned root proves nothing"),
        "{err}"
    );
    let checked = check_inclusion(&proof, &[]).unwrap();
    assert!(!checked.signed && checked.checkpoints.is_empty());
    assert!(checked.to_string().contains("NOT SIGNED"));
    // With no key, a present checkpoint's size and root are still held to the proof's.
    let signed = inclusion(&tree, 0, 5, &log);
    let checked = check_inclusion(&signed, &[]).unwrap();
    assert!(!checked.signed);
    assert!(checked.checkpoints[0].signers.is_empty());
    assert!(checked.to_string().contains("signatures not checked"));
    let mut other_root = signed.clone();
    other_root.checkpoint = Some(signed_text(checkpoint_of(&tree, 4), &log));
    assert!(check_inclusion(&other_root, &[]).is_err());
}

#[test]
fn the_body_must_be_the_events_and_its_id_the_documents() {
    let log = key("log", 1);
    let tree = tree(3);
    let mut proof = inclusion(&tree, 1, 3, &log);
    proof.event_id = "evt-2".into();
    let err = check_inclusion(&proof, &[log.verifier()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "event_id: the document says \"evt-2\", the body holds \"evt-1\""
    );
    let mut proof = inclusion(&tree, 1, 3, &log);
    proof.body = InclusionProof::encode_body(b"not an event");
    proof.leaf_hash = leaf_hash(b"not an event");
    let err = check_inclusion(&proof, &[log.verifier()]).unwrap_err();
    assert!(matches!(err, CheckError::BodyNotAnEvent(_)), "{err}");
    let mut proof = inclusion(&tree, 1, 3, &log);
    proof.leaf_index = 2;
    let err = check_inclusion(&proof, &[log.verifier()]).unwrap_err();
    assert!(
        err.to_string()
            .contains("leaf_index 2 is not position 2 - 1"),
        "{err}"
    );
    proof.position = 0;
    proof.leaf_index = u64::MAX;
    assert!(matches!(
        check_inclusion(&proof, &[log.verifier()]),
        Err(CheckError::LeafIndexNotPosition { .. })
    ));
}

#[test]
fn a_consistency_proof_between_two_journals_is_refused() {
    let log = key("log", 1);
    let tree = tree(8);
    let mut proof = consistency(&tree, 3, 8, &log);
    let mut other = checkpoint_of(&tree, 3);
    other.origin = Checkpoint::origin_for("another");
    proof.old_checkpoint = Some(signed_text(other, &log));
    let err = check_consistency(&proof, &[log.verifier()]).unwrap_err();
    assert!(matches!(err, CheckError::OriginsDiffer { .. }), "{err}");
    let checked = check_consistency(&consistency(&tree, 3, 8, &log), &[log.verifier()]).unwrap();
    assert_eq!(checked.checkpoints.len(), 2);
    assert!(checked.to_string().contains("the journal only grew"));
    let mut backwards = consistency(&tree, 3, 8, &log);
    std::mem::swap(&mut backwards.old_size, &mut backwards.new_size);
    assert!(matches!(
        check_consistency(&backwards, &[log.verifier()]),
        Err(CheckError::Merkle(_))
    ));
}

#[test]
fn documents_that_are_not_proofs_are_named() {
    let says = |text: &str, what: &str| {
        let err = ProofDocument::from_json(text).unwrap_err().to_string();
        assert!(err.contains(what), "{text}: {err}");
    };
    says("{", "not a proof document");
    says(
        r#"{"format":"agent-journal-inclusion-proof/2"}"#,
        "unknown proof format",
    );
    says(
        r#"{"format":"agent-journal-inclusion-proof/1"}"#,
        "missing field",
    );
    let log = key("log", 1);
    let document = ProofDocument::Inclusion(inclusion(&tree(2), 0, 2, &log));
    let mut value: Value = serde_json::from_str(&document.to_json()).unwrap();
    value["extra"] = json!(1);
    says(&value.to_string(), "unknown field `extra`");
    let upper = document.to_json().replace(
        &inclusion(&tree(2), 0, 2, &log).root.to_hex(),
        &inclusion(&tree(2), 0, 2, &log).root.to_hex().to_uppercase(),
    );
    says(&upper, "not in lower case");
}
