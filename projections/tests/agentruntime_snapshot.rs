//! The session snapshot in Agent Runtime form: the events that
//! `spec/agentruntime/fixtures/lime-profile/thread-read-snapshot.json` describes (four of them
//! the spec's own fixture events) are appended, and the read models reproduce that snapshot,
//! which validates against the core and the Lime profile snapshot schemas.

use std::path::{Path, PathBuf};

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::conformance::Schema;
use journal_format::strict_json;
use journal_format::Envelope;
use journal_projections::ReadModels;
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/agentruntime/fixtures/lime-profile");
    assert!(
        dir.is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

fn fixture(name: &str) -> Value {
    let bytes = std::fs::read(fixtures().join(name)).unwrap();
    strict_json::parse(&bytes).unwrap()
}

fn event(value: Value) -> Envelope {
    Envelope::from_json_value(value, &mut || unreachable!("every event has an id")).unwrap()
}

/// An event of the fixture's session, thread and turn.
fn ours(event_type: &str, id: &str, timestamp: &str, sequence: u64, extra: Value) -> Envelope {
    let mut v = json!({
        "type": event_type,
        "eventId": id,
        "timestamp": timestamp,
        "schemaVersion": "lime-profile-0.4.0",
        "runtimeId": "lime_runtime_local",
        "sessionId": "sess_lime_001",
        "threadId": "thread_lime_001",
        "turnId": "turn_lime_001",
        "sequence": sequence,
        "payload": {},
    });
    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
        v.extend(extra);
    }
    event(v)
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[test]
fn the_thread_read_snapshot_fixture_is_reproduced_from_its_events() {
    let task = json!({"taskId": "task_lime_001"});
    let with = |a: &Value, b: Value| {
        let mut a = a.clone();
        if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
            a.extend(b);
        }
        a
    };
    let mut session = ours(
        "session.created",
        "evt_session_001",
        "2026-05-11T09:59:59Z",
        0,
        json!({"workspaceId": "workspace_lime_001"}),
    );
    session.thread_id = None;
    session.turn_id = None;
    let events = vec![
        session,
        event(fixture("submit-turn-event.json")),
        event(fixture("routing-single-candidate-event.json")),
        ours(
            "turn.started",
            "evt_turn_started_001",
            "2026-05-11T10:00:02Z",
            4,
            json!({}),
        ),
        ours(
            "task.created",
            "evt_task_created_001",
            "2026-05-11T10:00:03Z",
            5,
            with(
                &task,
                json!({"payload": {"objective": "Implement Lime AgentRuntime profile fixture validation."}}),
            ),
        ),
        ours(
            "task.attempt.started",
            "evt_attempt_started_001",
            "2026-05-11T10:00:04Z",
            6,
            with(
                &task,
                json!({"runId": "run_lime_001", "attemptId": "attempt_lime_001", "payload": {"attemptNumber": 1}}),
            ),
        ),
        ours(
            "task.started",
            "evt_task_started_001",
            "2026-05-11T10:00:05Z",
            7,
            with(
                &task,
                json!({"runId": "run_lime_001", "attemptId": "attempt_lime_001"}),
            ),
        ),
        event(fixture("task-retry-attempt-failed-event.json")),
        ours(
            "task.failed",
            "evt_task_failed_001",
            "2026-05-11T10:02:01Z",
            33,
            with(
                &task,
                json!({"runId": "run_lime_001", "payload": {"reason": "tool_failed", "outcome": "failed"}}),
            ),
        ),
        ours(
            "task.retrying",
            "evt_task_retrying_001",
            "2026-05-11T10:02:02Z",
            34,
            task.clone(),
        ),
        ours(
            "task.attempt.started",
            "evt_attempt_started_002",
            "2026-05-11T10:02:03Z",
            35,
            with(
                &task,
                json!({"runId": "run_lime_002", "attemptId": "attempt_lime_002", "payload": {"attemptNumber": 2}}),
            ),
        ),
        ours(
            "task.started",
            "evt_task_started_002",
            "2026-05-11T10:02:04Z",
            36,
            with(
                &task,
                json!({"runId": "run_lime_002", "attemptId": "attempt_lime_002"}),
            ),
        ),
        ours(
            "task.attempt.completed",
            "evt_attempt_completed_002",
            "2026-05-11T10:04:59Z",
            57,
            with(
                &task,
                json!({"runId": "run_lime_002", "attemptId": "attempt_lime_002", "payload": {"status": "completed"}}),
            ),
        ),
        event(fixture("evidence-export-event.json")),
        ours(
            "task.completion.decided",
            "evt_completion_decided_001",
            "2026-05-11T10:05:00Z",
            59,
            with(
                &task,
                json!({"runId": "run_lime_002", "attemptId": "attempt_lime_002",
                "payload": {"accepted": true, "reasons": ["profile fixture validation passed"]}}),
            ),
        ),
        ours(
            "task.completed",
            "evt_task_completed_001",
            "2026-05-11T10:05:01Z",
            60,
            with(
                &task,
                json!({"runId": "run_lime_002", "payload": {"outcome": "ok"}}),
            ),
        ),
        ours(
            "turn.completed",
            "evt_turn_completed_001",
            "2026-05-11T10:05:01Z",
            61,
            json!({"telemetry": {"traceId": "trace_lime_001", "joinStatus": "joined"}}),
        ),
        {
            let mut e = ours(
                "thread.updated",
                "evt_thread_updated_001",
                "2026-05-11T10:05:01Z",
                62,
                json!({"status": "completed"}),
            );
            e.turn_id = None;
            e
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    // Not in strict mode: `task.completion.decided` is the journal's own family, outside the
    // spec's enum (the spec's events among these are its own fixtures).
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    journal
        .append_batch_blocking(events, AppendOptions::default())
        .unwrap();
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let answer = models
        .view_agentruntime("session", "sess_lime_001")
        .unwrap();
    let snapshot = answer.model.unwrap();
    let expected = fixture("thread-read-snapshot.json");
    assert_eq!(
        serde_json::to_string_pretty(&sorted(snapshot.clone())).unwrap(),
        serde_json::to_string_pretty(&sorted(expected)).unwrap()
    );
    Schema::Snapshot.check(&snapshot).unwrap();
    Schema::LimeSnapshot.check(&snapshot).unwrap();

    // The thread read model alone is the snapshot's thread.
    let thread = models
        .view_agentruntime("thread", "thread_lime_001")
        .unwrap()
        .model
        .unwrap();
    assert_eq!(thread, snapshot["threads"][0]);
    // No incident: every fact followed the rules.
    let session = models
        .view("session", "sess_lime_001")
        .unwrap()
        .model
        .unwrap();
    assert_eq!(session["incidents"], json!([]));
}
