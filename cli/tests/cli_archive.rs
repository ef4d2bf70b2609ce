//! `journal archive` and `journal restore` through the real binary, as docs/ARCHIVE.md shows
//! them: a real Claude Code session imported and a stream of tool events appended, with small
//! segments; the old segments archived; the session still replayed with the archive attached,
//! and without it a clear error naming the positions and the archive; `verify` both ways, a
//! flipped byte in the archive found; retention by size and age; everything restored.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{journal, ok, stderr, stdout};
use serde_json::{json, Value};

const SESSION: &str = "132b2f66-ee5f-46f6-8904-32d9dc4d36c3";

fn claude_code_log() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/agent-logs/claude-code/cctrace_phase0-investigation_main.jsonl")
}

/// `journal` on `dir` with 1 MiB segments.
fn small(dir: &Path) -> Command {
    let mut cmd = journal(dir);
    cmd.args(["--segment-size", "1MiB"]);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the journal binary runs")
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text.trim()).expect("one JSON document")
}

/// A journal holding the imported session (segment 1) and 4,000 tool events after it.
fn build(tmp: &Path) -> PathBuf {
    let dir = tmp.join("j");
    ok(run(small(&dir)
        .arg("import")
        .arg("claude-code")
        .arg(claude_code_log())));
    let lines = tmp.join("events.jsonl");
    let mut file = std::fs::File::create(&lines).expect("create");
    for i in 0..4_000u64 {
        let event_type = [
            "turn.submitted",
            "model.requested",
            "tool.started",
            "tool.result",
        ][(i % 4) as usize];
        let line = json!({
            "type": event_type,
            "eventId": format!("evt-{i}"),
            "timestamp": "2026-05-11T10:00:00Z",
            "sessionId": format!("sess-{}", i % 7),
            "toolCallId": format!("call-{i}"),
            "sequence": i,
            "payload": {"command": format!("ls -la /tmp/{i}"), "exitCode": 0}
        });
        writeln!(file, "{line}").expect("write");
    }
    ok(run(small(&dir).args(["append", "--stream"]).arg(&lines)));
    dir
}

#[test]
fn a_user_archives_old_segments_and_still_replays_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = build(tmp.path());
    let archive = tmp.path().join("archive");
    let live_before = std::fs::read_dir(dir.join("segments")).expect("ls").count();
    assert!(live_before >= 2, "several segments: {live_before}");

    // The plan first: nothing moves.
    let plan = json_of(&ok(run(journal(&dir)
        .args(["archive", "--before", "1000", "--to"])
        .arg(&archive)
        .arg("--dry-run"))));
    assert_eq!(plan["dry_run"], true);
    let last = plan["last_archived"].as_u64().expect("a boundary");
    assert!(
        (800..1000).contains(&last),
        "the imported session's segment: {plan}"
    );
    assert_eq!(plan["first_live"].as_u64(), Some(last + 1));
    assert!(!archive.exists() && !dir.join("ARCHIVE").exists());

    let done = json_of(&ok(run(journal(&dir)
        .args(["archive", "--before", "1000", "--to"])
        .arg(&archive))));
    assert_eq!(done["segments"], plan["segments"]);
    assert_eq!(done["last_archived"].as_u64(), Some(last));
    assert!(archive.join("00000000000000000001.seg").exists());
    assert!(!dir.join("segments/00000000000000000001.seg").exists());

    // Detached: the archived session is not silently empty; the error says where it is.
    let out = run(journal(&dir).args(["replay", "session", SESSION]));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(
        said.contains("archived") && said.contains(&format!("1..={last}")),
        "{said}"
    );
    assert!(said.contains(&archive.display().to_string()), "{said}");
    let out = run(journal(&dir).args(["read", "--limit", "1"]));
    assert!(
        stderr(&out).contains("position 1 is archived"),
        "{}",
        stderr(&out)
    );
    let from = (last + 1).to_string();
    let first_live = json_of(&ok(run(
        journal(&dir).args(["read", "--limit", "1", "--from", &from])
    )));
    assert_eq!(first_live["position"].as_u64(), Some(last + 1));

    // What lies after the boundary replays without the archive.
    let live = ok(run(journal(&dir).args(["replay", "session", "sess-3"])));
    assert!(live.contains("sess-3"), "{live}");
    // Attached: the session replays as before.
    let replay = ok(run(journal(&dir)
        .arg("--archive")
        .arg(&archive)
        .args(["replay", "session", SESSION])));
    assert!(replay.contains("really ULTRATHINK this"), "{replay}");

    // verify both ways.
    let detached = json_of(&ok(run(journal(&dir).arg("verify"))));
    assert_eq!(detached["ok"], true);
    assert_eq!(detached["archive"]["attached"], false);
    assert_eq!(
        detached["archive"]["verified_from"].as_u64(),
        Some(last + 1)
    );
    let attached = json_of(&ok(run(journal(&dir)
        .arg("--archive")
        .arg(&archive)
        .arg("verify"))));
    assert_eq!(
        (
            attached["ok"].as_bool(),
            attached["archive"]["verified_from"].as_u64()
        ),
        (Some(true), Some(1))
    );

    // A flipped byte in the archive is found, naming the segment and its first position.
    let file = archive.join("00000000000000000001.seg");
    let mut bytes = std::fs::read(&file).expect("read");
    bytes[5_000] ^= 0x10;
    std::fs::write(&file, &bytes).expect("write");
    let out = run(journal(&dir).arg("--archive").arg(&archive).arg("verify"));
    assert_eq!(out.status.code(), Some(3));
    let report = json_of(&stdout(&out));
    let problems = report["problems"].as_array().expect("problems");
    let mismatch = problems
        .iter()
        .find(|p| p["kind"] == "archive_mismatch")
        .expect("reported");
    assert_eq!(
        (mismatch["segment"].as_str(), mismatch["position"].as_u64()),
        (Some("00000000000000000001.seg"), Some(1))
    );
    bytes[5_000] ^= 0x10;
    std::fs::write(&file, &bytes).expect("write back");

    // Everything back: the journal replays without an archive.
    let restored = json_of(&ok(run(journal(&dir)
        .arg("restore")
        .arg("--from")
        .arg(&archive))));
    assert_eq!(restored["last_archived"], 0);
    assert!(ok(run(journal(&dir).args(["replay", "session", SESSION])))
        .contains("really ULTRATHINK this"));
    let report = json_of(&ok(run(journal(&dir).arg("verify"))));
    assert_eq!(report["ok"], true);
    assert!(report.get("archive").is_none());
}

#[test]
fn retention_by_size_and_age_and_bad_policies_refused_before_opening() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = build(tmp.path());
    let archive = tmp.path().join("archive");
    // Nothing was recorded a day ago.
    let none = json_of(&ok(run(journal(&dir)
        .args(["archive", "--older-than", "1d", "--to"])
        .arg(&archive))));
    assert_eq!(none["segments"], json!([]));
    // Refused before anything is opened: the journal is unchanged.
    let before = common::snapshot(&dir);
    let out = run(journal(&dir)
        .args(["archive", "--older-than", "90x", "--to"])
        .arg(&archive));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unit"), "{}", stderr(&out));
    let out = run(journal(&dir).args(["archive", "--to"]).arg(&archive));
    assert_eq!(out.status.code(), Some(2), "a policy is required");
    common::assert_same(&common::snapshot(&dir), &before, "a bad policy");
    // A replication with only position 5 acknowledged holds archiving back, unless forced.
    std::fs::write(dir.join("replicate.fleet.cursor"), "5 5\n").expect("cursor");
    let out = run(journal(&dir)
        .args(["archive", "--keep-size", "1MiB", "--to"])
        .arg(&archive));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("stream fleet has positions up to 5 acknowledged"),
        "{}",
        stderr(&out)
    );
    let status = json_of(&ok(run(journal(&dir).arg("status"))));
    assert_eq!(status["lastArchived"], 0, "nothing archived: {status}");
    // By size: the live log is brought under 1 MiB; the segment holding the head stays.
    let sized = json_of(&ok(run(journal(&dir)
        .args(["archive", "--keep-size", "1MiB", "--force", "--to"])
        .arg(&archive))));
    std::fs::remove_file(dir.join("replicate.fleet.cursor")).expect("cursor removed");
    assert!(
        !sized["segments"].as_array().expect("list").is_empty(),
        "{sized}"
    );
    let status = json_of(&ok(run(journal(&dir).arg("status"))));
    assert!(
        status["logBytes"].as_u64().expect("bytes") <= 1 << 20,
        "{status}"
    );
    assert_eq!(status["lastArchived"], sized["last_archived"]);
    // By age: everything sealed is older than no time at all, but the head's segment stays.
    ok(run(journal(&dir)
        .args(["archive", "--older-than", "0s", "--to"])
        .arg(&archive)));
    let head = json_of(&ok(run(journal(&dir).arg("digest"))));
    let last = json_of(&ok(run(journal(&dir)
        .args(["read", "--from"])
        .arg(head["position"].to_string()))));
    assert_eq!(last["position"], head["position"]);
}
