//! Standard output that goes away: `journal schema | head -c10`, `journal read | head` and
//! `journal get … | head` end quietly, as `cat` does, without a panic or a message.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

mod common;
use common::journal;

/// Runs `cmd` with its standard output read for `keep` bytes and then closed; asserts it ended
/// as `cat` does (exit 0, or killed by SIGPIPE) and said nothing on standard error.
fn assert_quiet_on_closed_pipe(cmd: &mut Command, keep: usize, what: &str) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut head = vec![0u8; keep];
    stdout.read_exact(&mut head).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || out.status.signal() == Some(13),
        "{what}: ends as cat does on a closed pipe, not {:?}; stderr: {stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "{what}: says nothing: {stderr}");
}

fn journal_with_events(dir: &Path, events: usize) {
    let lines: Vec<String> = (0..events)
        .map(|i| {
            json!({
                "type": "tool.started",
                "eventId": format!("e{i}"),
                "timestamp": "2026-05-11T10:00:00Z",
                "sessionId": "S",
                "payload": {"command": "x".repeat(200)},
            })
            .to_string()
        })
        .collect();
    let input = dir.join("input.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = journal(&dir.join("j"))
        .arg("append")
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_closed_pipe_ends_schema_read_and_get_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    journal_with_events(tmp.path(), 2000);
    let dir = tmp.path().join("j");
    assert_quiet_on_closed_pipe(journal(&dir).arg("schema"), 10, "schema | head -c10");
    assert_quiet_on_closed_pipe(journal(&dir).arg("read"), 10, "read | head -c10");
    assert_quiet_on_closed_pipe(journal(&dir).arg("read"), 0, "read | true");
    assert_quiet_on_closed_pipe(
        journal(&dir).args(["get", "session", "S"]),
        0,
        "get session S | true",
    );
    assert_quiet_on_closed_pipe(journal(&dir).args(["tail", "-n", "500"]), 0, "tail | true");
}
