//! `journal import`: a real Claude Code session imported, replayed with the same counts,
//! imported again adding nothing; a damaged file refused with its line, writing nothing.

mod common;

use std::path::{Path, PathBuf};

use common::journal;
use serde_json::Value;

fn agent_logs() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs");
    assert!(
        dir.is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

fn import_json(dir: &Path, args: &[&str]) -> Vec<Value> {
    let out = journal(dir)
        .arg("import")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_claude_code_session_imports_replays_and_imports_again_as_a_no_op() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let logs = agent_logs();
    let file = logs.join("claude-code/cctrace_phase0-investigation_main.jsonl");
    let blobs = logs.join("claude-code/cctrace_file-history");
    let args = [
        "claude-code",
        file.to_str().unwrap(),
        "--blobs",
        blobs.to_str().unwrap(),
    ];
    let first = import_json(&dir, &args);
    assert_eq!(first.len(), 1);
    let s = &first[0];
    assert_eq!(s["eventsWritten"], s["events"]);
    assert_eq!(s["artifactRefsResolved"], 10);
    assert_eq!(s["artifactRefsDangling"], 3);
    let session = s["sessions"][0].as_str().unwrap().to_string();

    let out = journal(&dir)
        .args(["replay", "session", &session, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let narrative: Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = &narrative["counts"];
    for (replayed, imported) in [
        ("modelCalls", "modelCalls"),
        ("toolCalls", "toolCalls"),
        ("toolResults", "toolResults"),
        ("openCalls", "openCalls"),
        ("subagents", "subagents"),
        ("compactions", "compactions"),
        ("events", "events"),
    ] {
        assert_eq!(counts[replayed], s[imported], "{replayed}");
    }

    let head = |dir: &Path| -> Value {
        let out = journal(dir).arg("digest").output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let before = head(&dir);
    let again = import_json(&dir, &args);
    assert_eq!(again[0]["eventsWritten"], 0);
    assert_eq!(head(&dir), before, "a second import adds nothing");
    let verify = journal(&dir).arg("verify").output().unwrap();
    assert!(verify.status.success());
}

#[test]
fn a_damaged_file_is_refused_with_its_line_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let source = agent_logs().join("codex/agent-history_real_sessions_codex_session-01.jsonl");
    let text = std::fs::read_to_string(source).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let cut = &lines[5][..lines[5].len() / 2];
    lines[5] = cut;
    let damaged = tmp.path().join("rollout.jsonl");
    std::fs::write(&damaged, lines.join("\n")).unwrap();

    let out = journal(&dir)
        .args(["import", "codex", damaged.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:6:", damaged.display())),
        "names file and line: {stderr}"
    );
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert!(!dir.exists(), "a refused import creates nothing");

    let out = journal(&dir)
        .args(["import", "codex", damaged.to_str().unwrap(), "--skip-bad"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("skipped line 6:"), "{stdout}");
}
