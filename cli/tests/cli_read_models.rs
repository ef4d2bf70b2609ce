//! Read models from the command line: `journal get` killed with SIGKILL at random moments while
//! it catches the projections up, and `journal rebuild --verify` finding the models kept
//! incrementally equal to a rebuild from scratch; `get` answers with freshness; `status` lists
//! the projections; `rebuild` prints digests.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::journal;
use journal_projections::workload;
use serde_json::Value;

fn append_file(dir: &Path, tmp: &Path, lines: &[String]) {
    let file = tmp.join("chunk.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = journal(dir).arg("append").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json_out(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn read_models_kept_across_kills_equal_a_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let lines: Vec<String> = workload::generate(5, 24, 24_000)
        .iter()
        .map(|e| e.to_json_value().to_string())
        .collect();
    let mut rng = workload::Rng::new(17);
    let mut kills = 0;
    for chunk in lines.chunks(4000) {
        append_file(&dir, tmp.path(), chunk);
        let mut child = journal(&dir)
            .args(["get", "session", "sess_00001"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + rng.below(120)));
        if child.try_wait().unwrap().is_none() {
            kills += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(kills > 0, "no `journal get` was killed while it worked");
    let out = journal(&dir)
        .args(["rebuild", "--verify"])
        .output()
        .unwrap();
    let report = json_out(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["equal"], true, "{report}");
    for p in report["projections"].as_array().unwrap() {
        assert_eq!(p["keys"], 24, "{p}");
        assert_eq!(p["position"], lines.len(), "{p}");
    }

    // `get` answers with the model and its freshness.
    let out = journal(&dir)
        .args(["get", "task", "task_00003_0"])
        .output()
        .unwrap();
    let answer = json_out(&out);
    assert_eq!(answer["model"]["taskId"], "task_00003_0");
    assert_eq!(answer["freshness"]["state"], "fresh");
    assert_eq!(answer["freshness"]["lagEvents"], 0);
    // The session snapshot in Agent Runtime form validates against the spec's schema.
    let out = journal(&dir)
        .args(["get", "session", "sess_00004", "--format", "agentruntime"])
        .output()
        .unwrap();
    let snapshot = json_out(&out)["model"].clone();
    journal_format::conformance::Schema::Snapshot
        .check(&snapshot)
        .unwrap();
    assert_eq!(snapshot["sessionId"], "sess_00004");
    assert_eq!(snapshot["threads"][0]["threadId"], "thread_00004");
    // The replay of a session, as JSON (validated against `journal schema replay.narrative`),
    // as text, and as of an earlier position.
    let out = journal(&dir)
        .args(["replay", "session", "sess_00004", "--format", "json"])
        .output()
        .unwrap();
    let narrative = json_out(&out);
    let schema = json_out(
        &journal(&dir)
            .args(["schema", "replay.narrative"])
            .output()
            .unwrap(),
    );
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&narrative));
    let events = lines
        .iter()
        .filter(|l| l.contains(r#""sessionId":"sess_00004""#))
        .count();
    assert_eq!(narrative["counts"]["events"], events);
    let first = narrative["steps"][5]["positions"][0].as_u64().unwrap();
    let earlier = json_out(
        &journal(&dir)
            .args([
                "replay",
                "session",
                "sess_00004",
                "--format",
                "json",
                "--at",
            ])
            .arg(first.to_string())
            .output()
            .unwrap(),
    );
    assert_eq!(earlier["asOf"], first);
    assert_eq!(earlier["steps"].as_array().unwrap().len(), 6);
    let text = journal(&dir)
        .args(["replay", "session", "sess_00004"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Final state:"), "{text}");
    assert!(!text.contains('\x1b'), "no colour when not on a terminal");
    let out = journal(&dir)
        .args(["replay", "run", "no-such-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // An evidence pack: the session's events with their chain links, the head digest, the
    // referenced blobs (and the ones missing), the replay, and a manifest of BLAKE3 hashes.
    let blob_file = tmp.path().join("output.txt");
    std::fs::write(&blob_file, "the full tool output").unwrap();
    let put = json_out(
        &journal(&dir)
            .args(["blob", "put"])
            .arg(&blob_file)
            .output()
            .unwrap(),
    );
    let reference = put["ref"].as_str().unwrap().to_string();
    let missing = format!("blake3:{}", "0".repeat(64));
    append_file(
        &dir,
        tmp.path(),
        &[
            format!(
                r#"{{"type":"tool.result","eventId":"with-blob","timestamp":"2026-05-12T00:00:00Z","sessionId":"sess_00004","toolCallId":"cb","outputRef":"{reference}"}}"#
            ),
            format!(
                r#"{{"type":"tool.result","eventId":"dangling","timestamp":"2026-05-12T00:00:01Z","sessionId":"sess_00004","toolCallId":"cd","outputRef":"{missing}"}}"#
            ),
        ],
    );
    let pack = tmp.path().join("pack");
    let out = journal(&dir)
        .args(["export", "evidence", "--session", "sess_00004", "--out"])
        .arg(&pack)
        .output()
        .unwrap();
    let summary = json_out(&out);
    assert_eq!(summary["exported"]["events"], events + 2, "{summary}");
    assert_eq!(summary["exported"]["blobs"], 1);
    assert_eq!(
        summary["exported"]["blobsMissing"],
        serde_json::json!([missing])
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(pack.join("MANIFEST.json")).unwrap()).unwrap();
    for f in manifest["files"].as_array().unwrap() {
        let bytes = std::fs::read(pack.join(f["file"].as_str().unwrap())).unwrap();
        assert_eq!(f["blake3"], blake3::hash(&bytes).to_hex().to_string());
    }
    let stored = std::fs::read_to_string(
        pack.join(format!("blobs/{}", reference.trim_start_matches("blake3:"))),
    )
    .unwrap();
    assert_eq!(stored, "the full tool output");
    let exported_lines = std::fs::read_to_string(pack.join("events.jsonl")).unwrap();
    assert_eq!(exported_lines.lines().count(), events + 2);
    assert!(exported_lines.lines().all(|l| l.contains(r#""hash":"#)));
    let head: Value =
        serde_json::from_slice(&std::fs::read(pack.join("head.json")).unwrap()).unwrap();
    let digest = format!("{}:{}", head["position"], head["hash"].as_str().unwrap());
    let verified = json_out(
        &journal(&dir)
            .args(["verify", "--digest", &digest])
            .output()
            .unwrap(),
    );
    // The chain checks against the digest; the only problem is the blob that never was stored.
    let problems = verified["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{verified}");
    assert_eq!(problems[0]["kind"], "blob_missing");
    assert!(pack.join("replay.html").is_file());
    // Into a directory that is not empty: refused.
    let out = journal(&dir)
        .args(["export", "replay", "--session", "sess_00004", "--out"])
        .arg(&pack)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Waiting for a position past the head gives up in time and says so.
    let out = journal(&dir)
        .args([
            "get",
            "session",
            "sess_00003",
            "--min-position",
            "99999999",
            "--timeout-ms",
            "200",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(json_out(&out)["freshness"]["state"], "behind");
    assert!(String::from_utf8_lossy(&out.stderr).contains("short of --min-position 99999999"));
    // Unknown id: exit 1; unknown kind: exit 2.
    let out = journal(&dir)
        .args(["get", "task", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_out(&out)["model"], Value::Null);
    let out = journal(&dir).args(["get", "tasks", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no read model named tasks"));

    // Appended but not caught up: `status` shows the exact lag.
    let extra: Vec<String> = (0..3)
        .map(|i| {
            format!(
                r#"{{"type":"tool.progress","eventId":"late-{i}","timestamp":"2026-05-12T00:00:00Z","sessionId":"sess_00001"}}"#
            )
        })
        .collect();
    append_file(&dir, tmp.path(), &extra);
    let status = json_out(&journal(&dir).arg("status").output().unwrap());
    for p in status["projections"].as_array().unwrap() {
        assert_eq!(p["freshness"]["state"], "stale", "{p}");
        assert_eq!(p["freshness"]["lagEvents"], 3, "{p}");
    }

    // `rebuild` starts from scratch and prints the same digests as the verified ones.
    let rebuilt = json_out(&journal(&dir).arg("rebuild").output().unwrap());
    let verified = json_out(
        &journal(&dir)
            .args(["rebuild", "--verify"])
            .output()
            .unwrap(),
    );
    for (r, v) in rebuilt["projections"]
        .as_array()
        .unwrap()
        .iter()
        .zip(verified["projections"].as_array().unwrap())
    {
        assert_eq!(r["digest"], v["digest"]);
        assert_eq!(r["state"], "fresh");
    }
    assert_eq!(rebuilt["events"], lines.len() + 5);
}

#[test]
fn the_demo_runs_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("demo");
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_journal"))
            .current_dir(tmp.path())
            .args(["demo", "--out"])
            .arg(&out_dir)
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        // Twice: the second run replaces the first demo journal.
        let out = run();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("(missing: 0)"), "{text}");
        assert!(text.contains("\"state\":\"fresh\""), "{text}");
        assert!(text.contains("Final state: completed"), "{text}");
        assert!(text.contains("ok: true"), "{text}");
        assert!(!text.contains('\x1b'), "no colour when not on a terminal");
        assert!(out_dir.join("replay-sess_00003.html").is_file());
    }
    // It never replaces a directory that is not a demo journal.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), "mine").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_journal"))
        .args(["demo", "--out"])
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(other.join("keep.txt").is_file());
}

#[test]
fn status_before_any_read_model_says_unknown_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    append_file(
        &dir,
        tmp.path(),
        &[r#"{"type":"session.created","eventId":"e1","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1"}"#.to_string()],
    );
    let status = json_out(&journal(&dir).arg("status").output().unwrap());
    for p in status["projections"].as_array().unwrap() {
        assert_eq!(p["freshness"]["state"], "unknown", "{p}");
        assert_eq!(p["freshness"]["lagEvents"], 1, "{p}");
        let version = if p["name"] == "activity" { 4 } else { 1 };
        assert_eq!(p["version"], version, "{p}");
    }
    assert!(!dir.join("projections.redb").exists());
}

fn session_line(i: u64) -> String {
    serde_json::json!({
        "type": "tool.started",
        "eventId": format!("c{i}"),
        "timestamp": "2026-05-11T10:00:00Z",
        "sessionId": "S",
        "toolCallId": format!("call-{i}"),
    })
    .to_string()
}

#[test]
fn concurrent_gets_beside_a_writer_all_answer() {
    use std::io::{BufRead, BufReader, Write};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    // A writer holds the journal open and keeps appending while the readers run.
    let mut writer = journal(&dir)
        .args(["append", "--stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap()).lines();
    for i in 0..50 {
        writeln!(stdin, "{}", session_line(i)).unwrap();
        acks.next().unwrap().unwrap();
    }
    let appending = std::thread::spawn(move || {
        for i in 50..250 {
            writeln!(stdin, "{}", session_line(i)).unwrap();
            acks.next().unwrap().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(stdin);
    });
    for round in 0..3 {
        concurrent_gets(&dir, 10, 50, &format!("round {round} beside the writer"));
    }
    appending.join().unwrap();
    assert!(writer.wait().unwrap().success());
    // And without a writer: one of them takes the journal's lock, the others read beside it.
    concurrent_gets(&dir, 10, 250, "without a writer");
}

/// Runs `n` `journal get session S` at once; each must answer, reflecting at least `least`,
/// with freshness that tells the truth.
fn concurrent_gets(dir: &Path, n: usize, least: u64, what: &str) {
    let readers: Vec<_> = (0..n)
        .map(|_| {
            journal(dir)
                .args(["get", "session", "S"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for reader in readers {
        let out = reader.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
        let answer = json_out(&out);
        assert!(answer["model"].is_object(), "{what}: {answer}");
        let freshness = &answer["freshness"];
        let position = freshness["position"].as_u64().unwrap();
        let head = freshness["head"].as_u64().unwrap();
        assert!(position >= least && position <= head, "{what}: {freshness}");
        assert_eq!(
            freshness["lagEvents"],
            head - position,
            "{what}: {freshness}"
        );
        let state = if position == head { "fresh" } else { "stale" };
        assert_eq!(freshness["state"], state, "{what}: {freshness}");
    }
}

#[test]
fn get_short_of_min_position_says_so_and_exits_4() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let lines: Vec<String> = (0..3).map(session_line).collect();
    append_file(&dir, tmp.path(), &lines);
    let out = journal(&dir)
        .args(["get", "session", "S", "--min-position", "999999"])
        .args(["--timeout-ms", "500"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = json_out(&out);
    let freshness = &answer["freshness"];
    assert_eq!(freshness["state"], "behind", "{freshness}");
    assert_eq!(freshness["position"], 3, "{freshness}");
    assert_eq!(freshness["minPosition"], 999_999, "{freshness}");
    assert!(answer["model"].is_object(), "{answer}");
    // Reached: fresh, exit 0.
    let out = journal(&dir)
        .args(["get", "session", "S", "--min-position", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let answer = json_out(&out);
    assert_eq!(answer["freshness"]["state"], "fresh");
    assert_eq!(answer["freshness"]["minPosition"], 3, "{answer}");
}
