//! An encrypted journal replicated through a three-node JetStream cluster of real `nats-server`
//! processes (`tests/nats/mod.rs`) and followed: the replica reads with the source's master
//! key, and after a session is redacted on the source the replica gets the fact and the key
//! destruction: its copy reads `[redacted]`, and no file in its directory holds the session's
//! plaintext or the destroyed key, raw or wrapped.

mod common;
mod nats;

use std::path::Path;
use std::process::Command;

use common::{journal, ok, output_with_stdin};
use journal_testkit::disk;
use nats::Cluster;
use serde_json::Value;

/// `journal` on `dir` with the master key in `key`.
fn with_key(dir: &Path, key: &Path) -> Command {
    let mut cmd = journal(dir);
    cmd.arg("--master-key").arg(key);
    cmd
}

/// One event's JSON line, its output (content, sealed at rest) `text`.
fn line(i: u64, session: &str, text: &str) -> String {
    format!(
        "{{\"type\":\"tool.completed\",\"eventId\":\"{session}-{i}\",\"timestamp\":\"2026-05-11T10:00:00Z\",\"sessionId\":\"{session}\",\"toolCallId\":\"c{i}\",\"status\":\"succeeded\",\"payload\":{{\"toolName\":\"bash\",\"output\":\"{text}\"}}}}\n"
    )
}

/// `journal replicate` then `journal follow` until the replica holds `until` events; neither
/// is given the master key.
fn replicate_and_follow(url: &str, src: &Path, rep: &Path, until: u64) {
    let until = until.to_string();
    let mut replicate = journal(src);
    replicate.args([
        "replicate",
        "--to",
        url,
        "--stream",
        "ENC",
        "--replicas",
        "3",
    ]);
    ok(replicate.args(["--until", &until]).output().unwrap());
    let mut follow = journal(rep);
    follow.args([
        "follow", "--from", url, "--stream", "ENC", "--until", &until,
    ]);
    ok(follow.output().unwrap());
}

#[test]
fn a_replica_of_an_encrypted_journal_reads_with_its_key_and_forgets_what_the_source_redacts() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let tmp = tempfile::tempdir().unwrap();
    let (src, rep, key) = (
        tmp.path().join("src"),
        tmp.path().join("rep"),
        tmp.path().join("master.hex"),
    );
    ok(journal(&src)
        .args(["key", "master"])
        .arg(&key)
        .output()
        .unwrap());
    ok(with_key(&src, &key).args(["key", "init"]).output().unwrap());
    let lines: String = (1..=20)
        .flat_map(|i| {
            [
                line(i, "gone", &format!("SECRET-GONE-{i}")),
                line(i, "kept", &format!("SECRET-KEPT-{i}")),
            ]
        })
        .collect();
    ok(output_with_stdin(
        with_key(&src, &key).args(["append", "--stream"]),
        &lines,
    ));
    replicate_and_follow(&url, &src, &rep, 40);

    // Readable with the source's master key, sealed at rest.
    let read = ok(with_key(&rep, &key)
        .args(["read", "--session", "gone"])
        .output()
        .unwrap());
    assert!(read.contains("SECRET-GONE-7"), "{read}");
    assert_eq!(
        disk::holding(&rep, b"SECRET-GONE").unwrap(),
        Vec::<String>::new()
    );
    let master_hex = std::fs::read_to_string(&key).unwrap();
    let (data, wrapped) = disk::data_key(&rep, master_hex.trim(), "session:gone/1").unwrap();

    ok(with_key(&src, &key)
        .args(["redact", "--session", "gone", "--reason", "erasure request"])
        .output()
        .unwrap());
    replicate_and_follow(&url, &src, &rep, 41);

    let read = ok(with_key(&rep, &key)
        .args(["read", "--session", "gone"])
        .output()
        .unwrap());
    let mut facts = 0;
    for line in read.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        if event["type"] == "journal.redacted" {
            facts += 1;
            assert_eq!(event["payload"]["reason"], "erasure request");
        } else {
            assert_eq!(event["payload"]["output"], "[redacted]", "{line}");
            assert!(event["redacted"]["factEventId"].is_string(), "{line}");
        }
    }
    assert_eq!(facts, 1, "the replica holds the redaction fact");
    let kept = ok(with_key(&rep, &key)
        .args(["read", "--session", "kept"])
        .output()
        .unwrap());
    assert!(
        kept.contains("SECRET-KEPT-7"),
        "the other session stays readable"
    );
    for needle in [&b"SECRET-GONE"[..], &data[..], wrapped.as_bytes()] {
        assert_eq!(
            disk::holding(&rep, needle).unwrap(),
            Vec::<String>::new(),
            "nothing in the replica's directory holds the redacted content or its key"
        );
    }
    let digest = |dir: &Path| -> String {
        let out = ok(with_key(dir, &key).arg("digest").output().unwrap());
        serde_json::from_str::<Value>(&out).unwrap()["digest"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(digest(&rep), digest(&src));
}
