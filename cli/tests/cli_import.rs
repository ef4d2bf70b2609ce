//! `journal import`: a real Claude Code session imported, replayed with the same counts,
//! imported again adding nothing; a damaged file refused with its line, writing nothing.

mod common;
mod serving;

use std::path::{Path, PathBuf};

use common::{journal, ok};
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
    let stdout = ok(journal(dir)
        .arg("import")
        .args(args)
        .arg("--json")
        .output()
        .unwrap());
    stdout
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

    let stdout = ok(journal(&dir)
        .args(["replay", "session", &session, "--format", "json"])
        .output()
        .unwrap());
    let narrative: Value = serde_json::from_str(&stdout).unwrap();
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
    let first = head(&dir);
    let again = import_json(&dir, &args);
    assert_eq!(again[0]["eventsWritten"], 0);
    assert_eq!(head(&dir), first, "a second import adds nothing");
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

    let stdout = ok(journal(&dir)
        .args(["import", "codex", damaged.to_str().unwrap(), "--skip-bad"])
        .output()
        .unwrap());
    assert!(stdout.contains("skipped line 6:"), "{stdout}");
}

fn codex_fixture() -> PathBuf {
    agent_logs().join("codex/agent-history_real_sessions_codex_session-01.jsonl")
}

/// A Codex rollout of session `id` with one prompt, `prompt`.
fn codex_rollout(id: &str, prompt: &str) -> String {
    let records = [
        serde_json::json!({"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": id}}),
        serde_json::json!({"timestamp": "2026-01-01T00:00:01Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]}}),
        serde_json::json!({"timestamp": "2026-01-01T00:00:01Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}),
        serde_json::json!({"timestamp": "2026-01-01T00:00:01Z", "type": "event_msg", "payload": {"type": "user_message", "message": prompt}}),
    ];
    records.iter().map(|r| format!("{r}\n")).collect()
}

/// The events `journal read` finds of `session` (read-only beside a writer that holds the
/// journal).
fn events_of(dir: &Path, session: &str) -> Vec<Value> {
    let out = journal(dir)
        .args(["read", "--session", session])
        .output()
        .unwrap();
    if !out.status.success() {
        return Vec::new(); // no journal, no events
    }
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (at most about 30 s) until `done` holds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn a_directory_tree_imports_the_sessions_of_the_format_and_skips_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("codex-home");
    let day = home.join("sessions/2026/06/05");
    std::fs::create_dir_all(&day).unwrap();
    std::fs::copy(codex_fixture(), day.join("rollout-a.jsonl")).unwrap();
    std::fs::create_dir_all(home.join("sessions/2026/06/06")).unwrap();
    std::fs::write(
        home.join("sessions/2026/06/06/rollout-b.jsonl"),
        codex_rollout("session-b", "second session"),
    )
    .unwrap();
    // Files of other kinds in the tree: skipped, and counted.
    std::fs::copy(
        agent_logs().join("claude-code/cctrace_phase0-investigation_main.jsonl"),
        day.join("claude.jsonl"),
    )
    .unwrap();
    std::fs::write(day.join("notes.txt"), "not a session").unwrap();
    std::fs::write(home.join("sessions/config.jsonl"), "{\"name\": 1}\n").unwrap();

    let dir = tmp.path().join("j");
    let out = journal(&dir)
        .args(["import", "codex", "--json"])
        .arg(home.join("sessions"))
        .output()
        .unwrap();
    let stdout = ok(out.clone());
    let summaries: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let sessions: Vec<&str> = summaries
        .iter()
        .map(|s| s["sessions"][0].as_str().unwrap())
        .collect();
    assert_eq!(
        sessions,
        ["019e9625-802f-7e91-840a-cfe88d14117a", "session-b"]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("imported 2 sessions") && stderr.contains("3 other files skipped"),
        "{stderr}"
    );
    let b = events_of(&dir, "session-b");
    let requested: Vec<&str> = b
        .iter()
        .filter(|e| e["type"] == "turn.submitted")
        .map(|e| e["payload"]["input"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(requested, ["second session"]);
    assert_eq!(
        b.iter().filter(|e| e["type"] == "context.resolved").count(),
        1
    );

    // With no path, CODEX_HOME's sessions: the same files, already imported.
    let stdout = ok(journal(&dir)
        .args(["import", "codex", "--json"])
        .env("CODEX_HOME", &home)
        .output()
        .unwrap());
    for line in stdout.lines() {
        let s: Value = serde_json::from_str(line).unwrap();
        assert_eq!(s["eventsWritten"], 0, "{s}");
    }
    // The same tree as Claude Code sessions: the one transcript in it.
    let out = journal(&dir)
        .args(["import", "claude-code", "--json", "--claude-dir"])
        .arg(tmp.path().join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no claude-code sessions at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = ok(journal(&dir)
        .args(["import", "claude-code", "--json"])
        .arg(&home)
        .output()
        .unwrap());
    assert_eq!(stdout.lines().count(), 1);
}

#[test]
fn an_openhands_session_folder_imports_as_its_trajectory() {
    let tmp = tempfile::tempdir().unwrap();
    let trajectory = agent_logs().join("openhands/trajs_basic_gui_mode.json");
    let events: Vec<Value> = serde_json::from_slice(&std::fs::read(&trajectory).unwrap()).unwrap();
    let store = tmp.path().join("openhands");
    let folder = store.join("sessions/conv-1/events");
    std::fs::create_dir_all(&folder).unwrap();
    for e in &events {
        let n = e["id"].as_u64().unwrap();
        std::fs::write(
            folder.join(format!("{n}.json")),
            serde_json::to_string_pretty(e).unwrap(),
        )
        .unwrap();
    }
    std::fs::write(
        store.join("sessions/conv-1/metadata.json"),
        "{\"title\": \"x\"}",
    )
    .unwrap();

    let folder_import = import_json(
        &tmp.path().join("a"),
        &["openhands", "--openhands-dir", store.to_str().unwrap()],
    );
    let file_import = import_json(
        &tmp.path().join("b"),
        &[
            "openhands",
            trajectory.to_str().unwrap(),
            "--session",
            "conv-1",
        ],
    );
    assert_eq!(folder_import.len(), 1);
    assert_eq!(folder_import[0]["sessions"], serde_json::json!(["conv-1"]));
    for field in [
        "events",
        "records",
        "turns",
        "toolCalls",
        "toolResults",
        "requests",
    ] {
        assert_eq!(folder_import[0][field], file_import[0][field], "{field}");
    }
}

/// `--follow` on a file that grows while it runs: the journal gains what is appended (a line
/// written in two parts once it is whole), a rotated file's new session too, and SIGINT ends it
/// cleanly; importing the whole file again then adds nothing.
#[test]
fn follow_imports_what_a_growing_file_gains_until_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let whole = std::fs::read_to_string(codex_fixture()).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    let session = "019e9625-802f-7e91-840a-cfe88d14117a";
    let file = tmp.path().join("rollout.jsonl");
    // The file up to the prompt, without the prompt's user_message.
    std::fs::write(&file, format!("{}\n", lines[..6].join("\n"))).unwrap();

    // What a one-shot import of the whole file makes.
    let expected = import_json(
        &tmp.path().join("once"),
        &["codex", codex_fixture().to_str().unwrap()],
    )[0]["events"]
        .as_u64()
        .unwrap() as usize;

    let mut child = journal(&dir)
        .args(["import", "codex", "--follow", "--poll-ms", "50"])
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the first lines", || !events_of(&dir, session).is_empty());
    let first = events_of(&dir, session).len();
    assert!(first < expected, "{first} of {expected}");

    // The rest, the next line written in two parts: only whole lines are read.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    use std::io::Write as _;
    let (head, tail) = lines[6].split_at(lines[6].len() / 2);
    f.write_all(head.as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        events_of(&dir, session).len(),
        first,
        "half a line is not read"
    );
    f.write_all(format!("{tail}\n{}\n", lines[7..].join("\n")).as_bytes())
        .unwrap();
    drop(f);
    wait_for("the appended lines", || {
        events_of(&dir, session).len() >= expected
    });
    let events = events_of(&dir, session);
    let ids: std::collections::HashSet<&str> = events
        .iter()
        .map(|e| e["eventId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), events.len(), "no event stored twice");
    // A prompt read without its user_message is stored as context; its user_message adds a
    // revision (`supersedes`) that makes it the request.
    assert!(events
        .iter()
        .any(|e| e["type"] == "turn.submitted" && e["supersedes"].is_string()));

    // Rotation: the file is moved away (missing for a few passes) and a new one, another inode
    // holding another session, takes its place.
    std::fs::rename(&file, tmp.path().join("rollout.1.jsonl")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(&file, codex_rollout("session-rotated", "after rotation")).unwrap();
    wait_for("the rotated file's session", || {
        events_of(&dir, "session-rotated")
            .iter()
            .any(|e| e["type"] == "turn.submitted")
    });

    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut code = None;
    wait_for("the follower to stop on SIGINT", || {
        code = child.try_wait().unwrap();
        code.is_some()
    });
    let mut stderr = String::new();
    use std::io::Read as _;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(code.unwrap().code(), Some(0), "{stderr}");
    assert!(stderr.contains("rewritten or rotated"), "{stderr}");

    // Importing the whole file again adds nothing that following did not store.
    let again = import_json(&dir, &["codex", codex_fixture().to_str().unwrap()]);
    assert_eq!(again[0]["eventsWritten"], 0, "{}", again[0]);
    assert!(journal(&dir)
        .arg("verify")
        .output()
        .unwrap()
        .status
        .success());
}

/// `journal serve --follow-import codex=FILE`: a running agent reviewed live over HTTP; the
/// replay gains each prompt as the rollout grows, and the server stops cleanly.
#[test]
fn serve_follows_a_growing_session_and_replays_it_live() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let file = tmp.path().join("rollout.jsonl");
    std::fs::write(&file, codex_rollout("live-1", "first prompt")).unwrap();
    let spec = format!("codex={}", file.display());
    let server = serving::Server::start(&dir, &["--follow-import", &spec]);
    let requested = || -> Vec<Value> {
        let answer = serving::get(&server.url("/v1/replay/session/live-1"), None);
        if answer.status != 200 {
            return Vec::new();
        }
        answer.json()["requested"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    wait_for("the first prompt in the replay", || requested().len() == 1);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    use std::io::Write as _;
    let more = [
        serde_json::json!({"timestamp": "2026-01-01T00:00:05Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second prompt"}]}}),
        serde_json::json!({"timestamp": "2026-01-01T00:00:05Z", "type": "event_msg", "payload": {"type": "user_message", "message": "second prompt"}}),
    ];
    for r in more {
        writeln!(f, "{r}").unwrap();
    }
    drop(f);
    wait_for("the second prompt in the replay", || requested().len() == 2);
    assert_eq!(
        requested(),
        [
            serde_json::json!("first prompt"),
            serde_json::json!("second prompt")
        ]
    );
    let (code, log) = server.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("following codex sessions"), "{log}");
}
