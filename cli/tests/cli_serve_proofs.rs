//! Proofs served: `journal serve --checkpoint-key` signs checkpoints as events arrive over
//! HTTP; `GET /v1/checkpoints/latest` serves the latest, `GET /v1/proofs/inclusion/{eventId}`
//! and `GET /v1/proofs/consistency` the documents `journal check-proof` then checks offline
//! with the public key alone; a token limited to other sessions gets no proof of an event.

mod common;
mod serving;

use std::path::Path;
use std::time::Duration;

use common::journal;
use serving::{create_token, events, get, post, Server};

fn check_proof(tmp: &Path, document: &str, key: &str) -> std::process::Output {
    let file = tmp.join("proof.json");
    std::fs::write(&file, document).unwrap();
    journal(tmp)
        .args(["check-proof", "--json", "--key"])
        .arg(tmp.join(key))
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn a_served_journal_signs_checkpoints_and_serves_proofs_that_check_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let (tmp, dir) = (tmp.path(), tmp.path().join("journal"));
    for name in ["log", "other"] {
        let out = journal(tmp)
            .args(["key", "create", name, "--out"])
            .arg(tmp)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let key = tmp.join("log.key");
    let server = Server::start(
        &dir,
        &[
            "--checkpoint-key",
            key.to_str().unwrap(),
            "--checkpoint-every-events",
            "50",
        ],
    );
    assert_eq!(get(&server.url("/v1/checkpoints/latest"), None).status, 404);
    let appended = post(&server.url("/v1/events"), None, &events("e", "s1", 0..120));
    assert_eq!(appended.status, 200, "{}", appended.body);
    // The signer looks every 100 ms.
    let mut latest = get(&server.url("/v1/checkpoints/latest"), None);
    for _ in 0..200 {
        if latest.status == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        latest = get(&server.url("/v1/checkpoints/latest"), None);
    }
    assert_eq!(latest.status, 200, "{}", latest.body);
    assert_eq!(latest.body.lines().nth(1), Some("120"), "{}", latest.body);

    let proof = get(&server.url("/v1/proofs/inclusion/e42"), None);
    assert_eq!(proof.status, 200, "{}", proof.body);
    assert_eq!(proof.json()["tree_size"], 120);
    let out = check_proof(tmp, &proof.body, "log.pub");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        check_proof(tmp, &proof.body, "other.pub").status.code(),
        Some(3)
    );

    post(&server.url("/v1/events"), None, &events("f", "s2", 0..80));
    let mut grown = get(&server.url("/v1/proofs/consistency?from=120"), None);
    for _ in 0..200 {
        if grown.status == 200 && grown.json()["new_size"] == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        grown = get(&server.url("/v1/proofs/consistency?from=120"), None);
    }
    assert_eq!(grown.json()["new_size"], 200, "{}", grown.body);
    let out = check_proof(tmp, &grown.body, "log.pub");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let unknown = get(&server.url("/v1/proofs/inclusion/nope"), None);
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    let backwards = get(&server.url("/v1/proofs/consistency?from=150&to=120"), None);
    assert_eq!(backwards.status, 400, "{}", backwards.body);
    let (code, log) = server.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn a_token_limited_to_other_sessions_gets_no_proof_of_an_event() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let admin = create_token(&dir, &["--scope", "append,read,admin"]);
    let limited = create_token(&dir, &["--scope", "read", "--sessions", "s2"]);
    let server = Server::start(&dir, &[]);
    let appended = post(
        &server.url("/v1/events"),
        Some(&admin),
        &events("e", "s1", 0..5),
    );
    assert_eq!(appended.status, 200, "{}", appended.body);
    assert_eq!(
        get(&server.url("/v1/proofs/inclusion/e1"), None).status,
        401
    );
    assert_eq!(
        get(&server.url("/v1/proofs/inclusion/e1"), Some(&limited)).status,
        403
    );
    let proof = get(&server.url("/v1/proofs/inclusion/e1"), Some(&admin));
    assert_eq!(proof.status, 200, "{}", proof.body);
    assert_eq!(
        proof.json()["checkpoint"],
        serde_json::Value::Null,
        "no key: unsigned"
    );
    server.terminate();
}
