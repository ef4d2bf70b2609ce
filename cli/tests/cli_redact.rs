//! `journal redact` end to end: a real Claude Code session imported into an encrypted journal
//! (its large outputs as blobs), read, replayed, exported and its read models built; then the
//! session redacted, and every command shows `[redacted]` with the fact, `verify`, proofs and
//! evidence packs still pass, a rebuild from scratch agrees, and no file in the journal's
//! directory holds the session's plaintext.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use journal_testkit::disk;
use serde_json::Value;

fn agent_logs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs/claude-code")
}

/// `journal` on `dir` with the master key in `key`.
fn journal(dir: &Path, key: &Path) -> Command {
    let mut cmd = common::journal(dir);
    cmd.arg("--master-key").arg(key);
    cmd
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Strings of the imported session: the user's first request, the assistant's thinking, and
/// a file-history backup's text (stored as a blob).
const PLAINTEXT: [&str; 3] = [
    "really ULTRATHINK this",
    "portable, resumable Claude Code sessions",
    "Phase 0 Investigation Findings",
];

#[test]
fn a_redacted_session_reads_redacted_everywhere_verifies_and_leaves_no_plaintext() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let key = tmp.path().join("master.hex");
    let made: Value =
        serde_json::from_str(&ok(common::journal(&dir).args(["key", "master"]).arg(&key))).unwrap();
    assert_eq!(made["id"].as_str().unwrap().len(), 16);
    ok(journal(&dir, &key).args(["key", "init"]));
    let logs = agent_logs();
    let imported: Value = serde_json::from_str(&ok(journal(&dir, &key)
        .arg("import")
        .arg("claude-code")
        .arg(logs.join("cctrace_phase0-investigation_main.jsonl"))
        .arg("--blobs")
        .arg(logs.join("cctrace_file-history"))
        .arg("--json")))
    .unwrap();
    let session = imported["sessions"][0].as_str().unwrap().to_string();
    // Sealed at rest, readable with the key.
    let read = ok(journal(&dir, &key).args(["read", "--session", &session]));
    assert!(read.contains(PLAINTEXT[0]));
    ok(journal(&dir, &key).args(["get", "session", &session]));
    for text in &PLAINTEXT[..2] {
        assert_eq!(
            disk::holding(&dir, text.as_bytes()).unwrap(),
            Vec::<String>::new(),
            "{text}: sealed in the log"
        );
    }
    assert!(
        !disk::holding(&dir, PLAINTEXT[2].as_bytes())
            .unwrap()
            .is_empty(),
        "blobs are not sealed"
    );
    // Without the key, the journal does not open.
    let out = common::journal(&dir).args(["read"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("master key"));

    let redacted: Value = serde_json::from_str(&ok(journal(&dir, &key).args([
        "redact",
        "--session",
        &session,
        "--reason",
        "erasure request",
        "--by",
        "dpo@example.com",
    ])))
    .unwrap();
    let fact_id = redacted["redacted"]["fact"]["eventId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(redacted["redacted"]["events"].as_u64().unwrap() > 100);
    assert!(!redacted["redacted"]["blobsDestroyed"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(redacted["readModels"], "rebuilt");

    // Reads: every event of the session says why its content is gone.
    let read = ok(journal(&dir, &key).args(["read", "--session", &session]));
    let mut facts = 0;
    for line in read.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        if event["type"] == "journal.redacted" {
            facts += 1;
            assert_eq!(event["payload"]["by"], "dpo@example.com");
            continue;
        }
        assert_eq!(event["redacted"]["factEventId"], fact_id.as_str(), "{line}");
    }
    assert_eq!(facts, 1);
    assert!(read.contains("[redacted]"));
    // Verify, proofs, replay, export, evidence pack, read models and their rebuild.
    let verify: Value = serde_json::from_str(&ok(journal(&dir, &key).arg("verify"))).unwrap();
    assert_eq!(verify["ok"], true, "{verify}");
    let proof = tmp.path().join("proof.json");
    std::fs::write(
        &proof,
        ok(journal(&dir, &key).args(["prove", "inclusion", &fact_id])),
    )
    .unwrap();
    ok(common::journal(&dir).arg("check-proof").arg(&proof));
    let replay = ok(journal(&dir, &key).args(["replay", "session", &session, "--format", "json"]));
    let exported = ok(journal(&dir, &key).args(["export", "--session", &session]));
    let pack = tmp.path().join("pack");
    ok(journal(&dir, &key)
        .args(["export", "evidence", "--session", &session, "--out"])
        .arg(&pack));
    for proof in std::fs::read_dir(pack.join("proofs")).unwrap().take(20) {
        ok(common::journal(&dir)
            .arg("check-proof")
            .arg(proof.unwrap().path()));
    }
    let model = ok(journal(&dir, &key).args(["get", "session", &session]));
    let rebuilt = ok(journal(&dir, &key).arg("rebuild"));
    let verified: Value =
        serde_json::from_str(&ok(journal(&dir, &key).args(["rebuild", "--verify"]))).unwrap();
    assert_eq!(verified["equal"], true, "{verified} after {rebuilt}");
    for text in PLAINTEXT {
        for (what, output) in [
            ("replay", &replay),
            ("export", &exported),
            ("get", &model),
            ("read", &read),
        ] {
            assert!(!output.contains(text), "{what} shows {text}");
        }
        assert_eq!(
            disk::holding(&dir, text.as_bytes()).unwrap(),
            Vec::<String>::new(),
            "{text}"
        );
        assert_eq!(
            disk::holding(&pack, text.as_bytes()).unwrap(),
            Vec::<String>::new(),
            "{text} in the pack"
        );
    }
}
