//! The audit round trip through the built binary: a journal's checkpoints signed with a key
//! `journal key create` made, an inclusion proof and a consistency proof from `journal prove`,
//! each checked offline by `journal check-proof` with the public key alone; a wrong key, a
//! changed proof and a claimed size beyond the checkpoint refused; a witness's cosignature kept.

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::{journal, ok};
use serde_json::Value;

/// Appends events `from..=to` of session s1, a batch of ten at a time.
fn append(dir: &Path, tmp: &Path, from: u64, to: u64) {
    let lines: Vec<String> = (from..=to)
        .map(|i| {
            format!(
                r#"{{"type":"tool.started","eventId":"e{i}","timestamp":"2026-11-27T10:00:00Z","sessionId":"s1","toolCallId":"c{i}","payload":{{"toolName":"bash","arguments":{{"command":"cargo test -p p{i}"}}}}}}"#
            )
        })
        .collect();
    for chunk in lines.chunks(10) {
        let file = tmp.join("batch.jsonl");
        fs::write(&file, chunk.join("\n")).unwrap();
        ok(journal(dir).arg("append").arg(&file).output().unwrap());
    }
}

fn check(tmp: &Path, proof: &Path, key: &str) -> Output {
    journal(tmp)
        .args(["check-proof", "--json", "--key"])
        .arg(tmp.join(key))
        .arg(proof)
        .output()
        .unwrap()
}

#[test]
fn an_auditor_checks_an_event_and_the_journals_growth_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let (tmp, dir) = (tmp.path(), tmp.path().join("journal"));
    for name in ["log", "witness", "other"] {
        ok(journal(tmp)
            .args(["key", "create", name, "--out"])
            .arg(tmp)
            .output()
            .unwrap());
    }
    append(&dir, tmp, 1, 57);
    let first = ok(journal(&dir)
        .args(["checkpoint", "sign", "--key"])
        .arg(tmp.join("log.key"))
        .output()
        .unwrap());
    assert!(
        first.lines().nth(1) == Some("57"),
        "the tree size is the second line: {first}"
    );

    // Inclusion: e23 against the checkpoint of 57 events.
    let inclusion = tmp.join("inclusion.json");
    ok(journal(&dir)
        .args(["prove", "inclusion", "e23", "--out"])
        .arg(&inclusion)
        .output()
        .unwrap());
    let document: Value = serde_json::from_slice(&fs::read(&inclusion).unwrap()).unwrap();
    assert_eq!(
        (
            document["position"].as_u64(),
            document["tree_size"].as_u64()
        ),
        (Some(23), Some(57))
    );
    let checked: Value = serde_json::from_str(&ok(check(tmp, &inclusion, "log.pub"))).unwrap();
    assert_eq!(checked["ok"], true, "{checked}");
    assert_eq!(checked["signed"], true, "{checked}");

    // The journal grows; the next checkpoint; the growth between the two proved.
    append(&dir, tmp, 58, 130);
    ok(journal(&dir)
        .args(["checkpoint", "sign", "--key"])
        .arg(tmp.join("log.key"))
        .output()
        .unwrap());
    let consistency = tmp.join("consistency.json");
    ok(journal(&dir)
        .args(["prove", "consistency", "57", "--out"])
        .arg(&consistency)
        .output()
        .unwrap());
    let checked: Value = serde_json::from_str(&ok(check(tmp, &consistency, "log.pub"))).unwrap();
    assert_eq!(checked["ok"], true, "{checked}");
    // An event newer than the first checkpoint is proved against the latest.
    let newer = tmp.join("newer.json");
    ok(journal(&dir)
        .args(["prove", "inclusion", "e100", "--out"])
        .arg(&newer)
        .output()
        .unwrap());
    ok(check(tmp, &newer, "log.pub"));

    // Refused: another key, a changed path hash, a size beyond the checkpoint.
    assert_eq!(check(tmp, &inclusion, "other.pub").status.code(), Some(3));
    let mut changed = document.clone();
    let hash = changed["path"][0].as_str().unwrap().to_owned();
    let flipped = format!(
        "{}{}",
        if hash.starts_with('0') { "1" } else { "0" },
        &hash[1..]
    );
    changed["path"][0] = Value::String(flipped);
    let changed_file = tmp.join("changed.json");
    fs::write(&changed_file, changed.to_string()).unwrap();
    assert_eq!(check(tmp, &changed_file, "log.pub").status.code(), Some(3));
    let mut beyond = document.clone();
    beyond["tree_size"] = Value::from(58);
    fs::write(&changed_file, beyond.to_string()).unwrap();
    let out = check(tmp, &changed_file, "log.pub");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A witness cosigns the latest checkpoint elsewhere; the journal keeps its signature.
    let text = ok(journal(&dir)
        .args(["checkpoint", "show", "latest"])
        .output()
        .unwrap());
    let copy = tmp.join("latest.checkpoint");
    fs::write(&copy, &text).unwrap();
    ok(journal(tmp)
        .args(["checkpoint", "cosign"])
        .arg(&copy)
        .arg("--key")
        .arg(tmp.join("witness.key"))
        .output()
        .unwrap());
    ok(journal(&dir)
        .args(["checkpoint", "keep"])
        .arg(&copy)
        .output()
        .unwrap());
    let list = ok(journal(&dir).args(["checkpoint", "list"]).output().unwrap());
    let rows: Vec<Value> = list
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["tree_size"], 130);
    assert_eq!(
        rows[1]["signers"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );
    let witnessed = tmp.join("witnessed.json");
    ok(journal(&dir)
        .args(["prove", "inclusion", "e5", "--out"])
        .arg(&witnessed)
        .output()
        .unwrap());
    ok(check(tmp, &witnessed, "witness.pub"));
    // A checkpoint of another history is not kept.
    let mut forged = text.replacen("\n130\n", "\n129\n", 1);
    forged.push('\n');
    fs::write(&copy, forged).unwrap();
    assert_ne!(
        journal(&dir)
            .args(["checkpoint", "keep"])
            .arg(&copy)
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn an_evidence_pack_carries_a_proof_of_each_event_and_of_the_growth_since_the_last_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let (tmp, dir) = (tmp.path(), tmp.path().join("journal"));
    ok(journal(tmp)
        .args(["key", "create", "log", "--out"])
        .arg(tmp)
        .output()
        .unwrap());
    append(&dir, tmp, 1, 40);
    ok(journal(&dir)
        .args(["checkpoint", "sign", "--key"])
        .arg(tmp.join("log.key"))
        .output()
        .unwrap());
    let first = tmp.join("pack1");
    ok(journal(&dir)
        .args(["export", "evidence", "--session", "s1", "--out"])
        .arg(&first)
        .output()
        .unwrap());
    let proofs: Vec<_> = fs::read_dir(first.join("proofs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(proofs.len(), 40);
    for proof in &proofs {
        let checked: Value = serde_json::from_str(&ok(check(tmp, proof, "log.pub"))).unwrap();
        assert_eq!(checked["signed"], true, "{checked}");
    }
    let head: Value = serde_json::from_slice(&fs::read(first.join("head.json")).unwrap()).unwrap();
    let verify = head["verify"].as_str().unwrap();
    let digest = verify.rsplit(' ').next().unwrap();
    ok(journal(&dir)
        .args(["verify", "--digest", digest])
        .output()
        .unwrap());

    // The next pack, since the first's checkpoint: the growth between them proved too.
    append(&dir, tmp, 41, 75);
    ok(journal(&dir)
        .args(["checkpoint", "sign", "--key"])
        .arg(tmp.join("log.key"))
        .output()
        .unwrap());
    let second = tmp.join("pack2");
    ok(journal(&dir)
        .args(["export", "evidence", "--session", "s1", "--since"])
        .arg(first.join("checkpoint.txt"))
        .arg("--out")
        .arg(&second)
        .output()
        .unwrap());
    let checked: Value =
        serde_json::from_str(&ok(check(tmp, &second.join("consistency.json"), "log.pub"))).unwrap();
    assert_eq!(checked["ok"], true, "{checked}");
    let manifest: Value =
        serde_json::from_slice(&fs::read(second.join("MANIFEST.json")).unwrap()).unwrap();
    assert_eq!(manifest["exported"]["proofs"]["treeSize"], 75);
    assert_eq!(manifest["exported"]["proofs"]["consistencyFrom"], 40);
}
