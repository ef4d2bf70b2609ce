//! The auditor's commands, through the built binary: `journal key create` (file modes, never
//! overwriting), `journal check-proof` on documents built with the library from a real tree of
//! real event bodies (valid, tampered, checked with the wrong key or none), and `journal
//! checkpoint verify|cosign`. None of them opens or creates a journal.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use journal_format::checkpoint::{Checkpoint, SignedCheckpoint, SigningKey, VerifierKey};
use journal_format::merkle::{consistency_proof, inclusion_proof, leaf_hash, root_at, MemoryTree};
use journal_format::proof::{
    ConsistencyProof, InclusionProof, ProofDocument, CONSISTENCY_FORMAT, INCLUSION_FORMAT,
};
use journal_format::{ChainHash, Envelope, Position};
use serde_json::Value;

mod common;
use common::{output_with_stdin, stderr, stdout};

/// The `journal` binary, run in `dir` (so that a journal made by mistake would show there).
fn journal(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_journal"));
    cmd.current_dir(dir).env_remove("JOURNAL_DIR");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Creates the key `name` in `dir` with the binary; its private key.
fn create_key(dir: &Path, name: &str) -> SigningKey {
    let out = run(journal(dir).args(["key", "create", name, "--out"]).arg(dir));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stem = name.replace('/', "_");
    SigningKey::from_text(&fs::read_to_string(dir.join(format!("{stem}.key"))).unwrap()).unwrap()
}

fn event_body(i: u64) -> Vec<u8> {
    Envelope::new("tool.started", format!("evt-{i}"), "2026-11-27T10:00:00Z")
        .to_msgpack()
        .unwrap()
}

fn tree(size: u64) -> MemoryTree {
    let mut tree = MemoryTree::new();
    (0..size).for_each(|i| tree.push(leaf_hash(&event_body(i))));
    tree
}

fn signed(tree: &MemoryTree, size: u64, key: &SigningKey) -> String {
    let checkpoint = Checkpoint {
        origin: Checkpoint::origin_for("0190c6b2-cli"),
        tree_size: size,
        root: root_at(tree, size).unwrap(),
        chain_position: Position(size),
        chain_hash: ChainHash([7; 32]),
        time_ns: 1_795_773_600_000_000_000,
    };
    SignedCheckpoint::sign(checkpoint, key).unwrap().to_text()
}

fn inclusion(tree: &MemoryTree, index: u64, size: u64, key: &SigningKey) -> ProofDocument {
    let body = event_body(index);
    ProofDocument::Inclusion(InclusionProof {
        format: INCLUSION_FORMAT.into(),
        event_id: format!("evt-{index}"),
        position: index + 1,
        leaf_index: index,
        tree_size: size,
        leaf_hash: leaf_hash(&body),
        path: inclusion_proof(tree, index, size).unwrap(),
        root: root_at(tree, size).unwrap(),
        body: InclusionProof::encode_body(&body),
        checkpoint: Some(signed(tree, size, key)),
    })
}

/// A directory with the key `agent-journal/log` and a valid inclusion proof of event 3 of 10
/// in `proof.json`.
fn setup() -> (tempfile::TempDir, SigningKey, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let key = create_key(dir.path(), "agent-journal/log");
    let proof = dir.path().join("proof.json");
    fs::write(&proof, inclusion(&tree(10), 3, 10, &key).to_json()).unwrap();
    (dir, key, proof)
}

#[test]
fn key_create_writes_a_private_key_0600_and_a_verifier_key_0644_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(journal(dir.path()).args(["key", "create", "agent-journal/j1", "--out", "."]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (private, public) = (
        dir.path().join("agent-journal_j1.key"),
        dir.path().join("agent-journal_j1.pub"),
    );
    assert_eq!(mode(&private), 0o600);
    assert_eq!(mode(&public), 0o644);
    let key = SigningKey::from_text(&fs::read_to_string(&private).unwrap()).unwrap();
    let verifier = VerifierKey::from_text(&fs::read_to_string(&public).unwrap()).unwrap();
    assert_eq!(key.verifier(), verifier);
    assert_eq!(key.name(), "agent-journal/j1");
    assert_eq!(stdout(&out), format!("{}\n", verifier.to_text()));
    assert!(stderr(&out).contains("keep it secret"), "{}", stderr(&out));

    // A second key of the same name is refused, and the first pair is left as it was.
    let before = (fs::read(&private).unwrap(), fs::read(&public).unwrap());
    let again = run(journal(dir.path()).args(["key", "create", "agent-journal/j1"]));
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        before,
        (fs::read(&private).unwrap(), fs::read(&public).unwrap())
    );
    // So is a public key left alone: the private one is not made either.
    fs::remove_file(&private).unwrap();
    let half = run(journal(dir.path()).args(["key", "create", "agent-journal/j1"]));
    assert_eq!(half.status.code(), Some(1));
    assert!(!private.exists());

    // A name a signature line cannot carry is refused before anything is written.
    let bad = run(journal(dir.path()).args(["key", "create", "two words"]));
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("contains a space"),
        "{}",
        stderr(&bad)
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["agent-journal_j1.pub"], "no other file, no journal");

    // Two keys of one name differ: the seed comes from the operating system.
    let other = tempfile::tempdir().unwrap();
    let second = create_key(other.path(), "agent-journal/j1");
    assert_ne!(second.verifier(), verifier);
}

#[test]
fn check_proof_prints_what_a_valid_document_established() {
    let (dir, _key, proof) = setup();
    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--key",
        "agent-journal_log.pub",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("event \"evt-3\" is at position 4 of the journal's tree of 10 events"),
        "{text}"
    );
    assert!(
        text.contains("checkpoint agent-journal/0190c6b2-cli of 10 events"),
        "{text}"
    );
    assert!(text.contains("signed by agent-journal/log"), "{text}");
    assert!(!text.contains("NOT SIGNED"), "{text}");

    // The same from standard input, as JSON.
    let document = fs::read_to_string(&proof).unwrap();
    let out = output_with_stdin(
        journal(dir.path()).args([
            "check-proof",
            "-",
            "--json",
            "--key",
            "agent-journal_log.pub",
        ]),
        &document,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["ok"], true);
    assert_eq!(json["signed"], true);
    assert_eq!(json["proven"]["kind"], "inclusion");
    assert_eq!(json["proven"]["event_id"], "evt-3");
    assert_eq!(json["proven"]["position"], 4);
    assert_eq!(json["checkpoints"][0]["signers"][0], "agent-journal/log");
    assert_eq!(
        json["checkpoints"][0]["time"],
        "2026-11-27T10:00:00.000000000Z"
    );
    assert!(
        !dir.path().join("journal-data").exists(),
        "no journal is opened or made"
    );
}

#[test]
fn check_proof_refuses_a_tampered_document_with_exit_3_naming_the_field() {
    let (dir, _key, proof) = setup();
    let document = fs::read_to_string(&proof).unwrap();
    let value: Value = serde_json::from_str(&document).unwrap();
    let first = value["path"][0].as_str().unwrap();
    let changed = if first.starts_with('0') {
        first.replacen('0', "1", 1)
    } else {
        format!("0{}", &first[1..])
    };
    fs::write(&proof, document.replace(first, &changed)).unwrap();

    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--key",
        "agent-journal_log.pub",
    ]));
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    let says = stderr(&out);
    assert!(
        says.starts_with("journal: proof refused: path: the Merkle proof does not hold"),
        "{says}"
    );

    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--json",
        "--key",
        "agent-journal_log.pub",
    ]));
    assert_eq!(out.status.code(), Some(3));
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["ok"], false);
    assert!(
        json["problem"].as_str().unwrap().starts_with("path: "),
        "{json}"
    );

    // Not a proof document at all: refused the same way.
    fs::write(&proof, "{\"format\":\"something else\"}").unwrap();
    let out = run(journal(dir.path()).args(["check-proof", "proof.json"]));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("unknown proof format"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_proof_refuses_a_checkpoint_signed_by_another_key_and_says_when_none_is_given() {
    let (dir, key, _proof) = setup();
    let other = create_key(dir.path(), "agent-journal/other");
    assert_ne!(other.verifier(), key.verifier());
    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--key",
        "agent-journal_other.pub",
    ]));
    assert_eq!(out.status.code(), Some(3));
    let says = stderr(&out);
    assert!(
        says.contains("checkpoint: no signature by any key given"),
        "{says}"
    );
    assert!(says.contains(&other.verifier().label()), "{says}");

    // Either key given is enough when one of them signed.
    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--key",
        "agent-journal_other.pub",
        "--key",
        "agent-journal_log.pub",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // No key: the proof's structure is checked, and the output says nothing was signed-checked.
    let out = run(journal(dir.path()).args(["check-proof", "proof.json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("signatures not checked"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("NOT SIGNED"), "{}", stdout(&out));

    // A key file that is not a verifier key is bad input (exit 1), not a refused proof.
    let out = run(journal(dir.path()).args([
        "check-proof",
        "proof.json",
        "--key",
        "agent-journal_log.key",
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("this is a private key"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_proof_checks_a_consistency_document() {
    let dir = tempfile::tempdir().unwrap();
    let key = create_key(dir.path(), "log");
    let tree = tree(20);
    let document = ProofDocument::Consistency(ConsistencyProof {
        format: CONSISTENCY_FORMAT.into(),
        old_size: 7,
        old_root: root_at(&tree, 7).unwrap(),
        new_size: 20,
        new_root: root_at(&tree, 20).unwrap(),
        path: consistency_proof(&tree, 7, 20).unwrap(),
        old_checkpoint: Some(signed(&tree, 7, &key)),
        new_checkpoint: Some(signed(&tree, 20, &key)),
    });
    fs::write(dir.path().join("grew.json"), document.to_json()).unwrap();
    let out = run(journal(dir.path()).args(["check-proof", "grew.json", "--key", "log.pub"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("the tree of 7 events"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("the journal only grew"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn checkpoint_cosign_adds_a_witness_line_and_verify_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = create_key(dir.path(), "log");
    let witness = create_key(dir.path(), "witness");
    let file = dir.path().join("checkpoint.txt");
    fs::write(&file, signed(&tree(4), 4, &log)).unwrap();

    let out = run(journal(dir.path()).args([
        "checkpoint",
        "cosign",
        "checkpoint.txt",
        "--key",
        "witness.key",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = fs::read_to_string(&file).unwrap();
    let cosigned = SignedCheckpoint::parse(&text).unwrap();
    assert_eq!(cosigned.signatures.len(), 2);
    assert_eq!(
        cosigned.verify(&[witness.verifier()]),
        Ok(vec!["witness".to_owned()])
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n.to_string_lossy().contains("tmp")),
        "{names:?}"
    );

    for (key, signer) in [("log.pub", "log"), ("witness.pub", "witness")] {
        let out =
            run(journal(dir.path()).args(["checkpoint", "verify", "checkpoint.txt", "--key", key]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stdout(&out).ends_with(&format!("signed by {signer}\n")),
            "{}",
            stdout(&out)
        );
    }
    create_key(dir.path(), "stranger");
    let out = run(journal(dir.path()).args([
        "checkpoint",
        "verify",
        "checkpoint.txt",
        "--key",
        "stranger.pub",
    ]));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("checkpoint refused: no signature by any key given"),
        "{}",
        stderr(&out)
    );

    // One changed byte of the body: refused by name of the key whose signature fails.
    fs::write(&file, text.replacen("\n4\n", "\n5\n", 1)).unwrap();
    let out = run(journal(dir.path()).args([
        "checkpoint",
        "verify",
        "checkpoint.txt",
        "--key",
        "log.pub",
        "--json",
    ]));
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains(&format!(
            "the signature by key {} does not verify",
            log.verifier().label()
        )),
        "{}",
        stderr(&out)
    );
}
