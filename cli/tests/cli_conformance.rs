//! Agent Runtime conformance from the command line: every Lime-profile fixture event appended and
//! exported again is the same JSON; strict mode; export leaves out (and counts) what the spec's
//! enum does not know; commands answer with events or a named rule; `journal schema`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::journal;
use serde_json::{json, Value};

fn fixtures_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/agentruntime/fixtures/lime-profile");
    assert!(
        dir.is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    common::output_with_stdin(journal(dir).args(args), stdin)
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Sorts object keys at every depth.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let sorted: std::collections::BTreeMap<_, _> =
                o.iter().map(|(k, v)| (k.clone(), canonical(v))).collect();
            Value::Object(sorted.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[test]
fn fixture_events_round_trip_through_append_and_export() {
    let mut fixtures = Vec::new();
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with("-event.json") {
            let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            fixtures.push(v);
        }
    }
    fixtures.sort_by_key(|v| v["eventId"].as_str().unwrap().to_string());
    assert_eq!(fixtures.len(), 5);
    let dir = tempfile::tempdir().unwrap();
    let input: String = fixtures.iter().map(|v| format!("{v}\n")).collect();
    let out = run(dir.path(), &["append", "--strict", "lime"], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(
        dir.path(),
        &["export", "--format", "agentruntime", "--profile", "lime"],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut exported = lines(&out);
    exported.sort_by_key(|v| v["eventId"].as_str().unwrap().to_string());
    assert_eq!(exported.len(), fixtures.len());
    for (a, b) in exported.iter().zip(&fixtures) {
        assert_eq!(canonical(a), canonical(b), "{}", b["eventId"]);
    }
    let report: Value = serde_json::from_slice(out.stderr.trim_ascii()).unwrap();
    assert_eq!(report["leftOut"], 0);
}

#[test]
fn strict_mode_refuses_what_the_schema_does_not_allow_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let vendor =
        r#"{"type":"vendor.acme.deploy","eventId":"v1","timestamp":"2026-11-22T10:00:00Z"}"#;
    let out = run(dir.path(), &["append", "--strict"], vendor);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1") || err.contains("event #1"), "{err}");
    assert!(
        err.contains("agentruntime-event.schema.json") && err.contains("/type"),
        "{err}"
    );
    let read = run(dir.path(), &["read"], "");
    assert!(lines(&read).is_empty(), "nothing was written");
    // Without strict mode the same fact is recorded.
    let out = run(dir.path(), &["append"], vendor);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A typed payload of the wrong shape is refused even without strict mode, naming the field.
    let bad = r#"{"type":"task.completion.decided","eventId":"d1","timestamp":"2026-11-22T10:00:00Z","payload":{"accepted":"yes","reasons":[]}}"#;
    let out = run(dir.path(), &["append"], bad);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("task.completion.decided") && err.contains("payload.accepted"),
        "{err}"
    );
}

#[test]
fn export_maps_or_leaves_out_types_outside_the_enum_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let events = [
        json!({"type": "tool.started", "eventId": "e1", "timestamp": "2026-11-22T10:00:00Z", "sessionId": "s"}),
        json!({"type": "vendor.acme.deploy", "eventId": "e2", "timestamp": "2026-11-22T10:00:01Z", "sessionId": "s"}),
        json!({"type": "snapshot.written", "eventId": "e3", "timestamp": "2026-11-22T10:00:02Z", "sessionId": "s",
               "payload": {"schema": "session_runtime_v2", "version": 2}}),
        json!({"type": "checklist.created", "eventId": "e4", "timestamp": "2026-11-22T10:00:03Z", "sessionId": "s",
               "payload": {"items": [{"id": "a", "title": "t", "status": "pending"}]}}),
    ];
    let input: String = events.iter().map(|v| format!("{v}\n")).collect();
    assert!(run(dir.path(), &["append"], &input).status.success());
    let out = run(dir.path(), &["export", "--session", "s"], "");
    assert!(out.status.success());
    let exported = lines(&out);
    let types: Vec<(&str, Option<&str>)> = exported
        .iter()
        .map(|v| (v["type"].as_str().unwrap(), v["nativeType"].as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("tool.started", None),
            ("snapshot.updated", Some("snapshot.written"))
        ]
    );
    let report: Value = serde_json::from_slice(out.stderr.trim_ascii()).unwrap();
    assert_eq!(report["exported"], 2);
    assert_eq!(report["leftOut"], 2);
    // The Lime profile needs runtimeId, sequence, payload...: nothing here conforms.
    let out = run(dir.path(), &["export", "--profile", "lime"], "");
    assert!(lines(&out).is_empty());
    let report: Value = serde_json::from_slice(out.stderr.trim_ascii()).unwrap();
    assert_eq!(report["leftOut"], 4);
}

#[test]
fn commands_answer_with_events_or_the_broken_rule() {
    let dir = tempfile::tempdir().unwrap();
    // Arguments the command does not know, even nested ones, are refused before the journal
    // is opened or created.
    let out = run(
        dir.path(),
        &[
            "command",
            "create_task",
            r#"{"sessionId":"s1","taskId":"t1","evidenceRequirements":{"requireTests":true}}"#,
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let answer = lines(&out);
    assert_eq!(answer[0]["error"]["rule"], "invalid_arguments");
    assert!(
        answer[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("evidenceRequirements.requireTests"),
        "{answer:?}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused command creates nothing"
    );
    let out = run(
        dir.path(),
        &[
            "command",
            "create_task",
            r#"{"sessionId":"s1","taskId":"t1"}"#,
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&out);
    assert_eq!(events[0]["type"], "task.created");
    assert_eq!(events[0]["position"], 1);
    // Arguments from standard input.
    let out = run(
        dir.path(),
        &["command", "complete_task", "-"],
        r#"{"sessionId":"s1","taskId":"t1"}"#,
    );
    assert_eq!(out.status.code(), Some(1));
    let answer = lines(&out);
    assert_eq!(answer[0]["error"]["rule"], "completion_not_accepted");
    assert!(answer[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("t1"));
    let out = run(dir.path(), &["command", "create_task", "{not json"], "");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(lines(&out)[0]["error"]["rule"], "invalid_arguments");
    let read = run(dir.path(), &["read"], "");
    assert_eq!(lines(&read).len(), 1, "refusals wrote nothing");
}

#[test]
fn every_command_refusal_is_a_rule_and_a_message_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal_dir = dir.path().join("j");
    let cases: &[(&[&str], &str, &str)] = &[
        (&["command", "create_task", "{not json"], "", "not JSON"),
        (&["command", "create_task", "[1, 2]"], "", "JSON object"),
        (&["command", "create_task", "\"s1\""], "", "JSON object"),
        (&["command", "create_task"], "", "no arguments"),
        (&["command", "create_task", "-"], "  \n", "no arguments"),
        (
            &["command", "create_task"],
            r#"{"sessionId":"s1","taskId":""}"#,
            "taskId",
        ),
        (
            &["command", "start_task", r#"{"sessionId":"","taskId":"t1"}"#],
            "",
            "sessionId",
        ),
    ];
    for (args, stdin, phrase) in cases {
        let out = run(&journal_dir, args, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let answer = lines(&out);
        assert_eq!(
            answer.len(),
            1,
            "{args:?}: one answer: {answer:?} / {stderr}"
        );
        let error = &answer[0]["error"];
        assert_eq!(error["rule"], "invalid_arguments", "{args:?}: {answer:?}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(phrase), "{args:?}: {phrase} in {message}");
        assert!(
            !journal_dir.exists(),
            "{args:?}: a refused command creates nothing"
        );
    }
}

#[test]
fn schema_prints_the_event_form_payloads_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["schema", "--list"], "");
    let names = String::from_utf8_lossy(&out.stdout).to_string();
    for name in [
        "event",
        "payload.ChecklistPayload",
        "command.complete_task",
        "state.stream",
        "agentruntime.agentruntime-event.schema.json",
    ] {
        assert!(names.lines().any(|l| l == name), "{name} in {names}");
    }
    let out = run(dir.path(), &["schema", "event"], "");
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(schema["properties"]["eventId"].is_object());
    assert!(schema["required"]
        .as_array()
        .unwrap()
        .contains(&json!("type")));
    let out = run(dir.path(), &["schema", "nope"], "");
    assert_eq!(out.status.code(), Some(2));
}
