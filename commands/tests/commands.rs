//! Commands against a real journal: every invariant of docs/MODEL.md §4 refused with its rule named
//! (or recorded as docs/MODEL.md §4 says), the happy paths, and concurrent writers racing on one stream.

use journal_commands::{CommandError, Commands};
use journal_engine::{Journal, Options};
use journal_format::StoredEvent;
use journal_projections::{Rule, StreamState};
use serde_json::{json, Value};

struct Fixture {
    _dir: tempfile::TempDir,
    journal: Journal,
    commands: Commands,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let commands = Commands::new(journal.clone());
    Fixture {
        _dir: dir,
        journal,
        commands,
    }
}

impl Fixture {
    async fn ok(&self, name: &str, mut args: Value) -> Vec<StoredEvent> {
        if args.get("sessionId").is_none() {
            args["sessionId"] = json!("s1");
        }
        match self.commands.run(name, args.clone()).await {
            Ok(a) => a.events,
            Err(e) => panic!("{name} {args}: {e}"),
        }
    }

    async fn refused(&self, name: &str, mut args: Value) -> Rule {
        if args.get("sessionId").is_none() {
            args["sessionId"] = json!("s1");
        }
        let head = self.journal.head().position;
        match self.commands.run(name, args.clone()).await {
            Err(CommandError::Refused(v)) => {
                assert_eq!(
                    self.journal.head().position,
                    head,
                    "a refused command wrote nothing"
                );
                assert!(!v.message.is_empty());
                v.rule
            }
            other => panic!("{name} {args}: expected a refusal, got {other:?}"),
        }
    }

    fn state(&self) -> StreamState {
        StreamState::fold(&self.journal.read_stream("session:s1", 1).unwrap())
    }

    fn types(events: &[StoredEvent]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e.envelope.event_type.as_str())
            .collect()
    }
}

#[tokio::test]
async fn a_task_runs_through_its_lifecycle_with_attempts_kept() {
    let f = fixture();
    let created = f
        .ok(
            "create_task",
            json!({"taskId": "t1", "title": "fix the bug"}),
        )
        .await;
    assert_eq!(Fixture::types(&created), ["task.created"]);
    let started = f
        .ok("start_task", json!({"taskId": "t1", "attemptId": "a1"}))
        .await;
    assert_eq!(
        Fixture::types(&started),
        ["task.attempt.started", "task.started"]
    );
    f.ok(
        "append_task_progress",
        json!({"taskId": "t1", "details": {"step": 1}}),
    )
    .await;
    let failed = f
        .ok(
            "fail_task",
            json!({"taskId": "t1", "reason": "cowork:tool_error"}),
        )
        .await;
    assert_eq!(
        Fixture::types(&failed),
        ["task.attempt.failed", "task.failed"]
    );
    let retried = f
        .ok("retry_task", json!({"taskId": "t1", "attemptId": "a2"}))
        .await;
    assert_eq!(
        Fixture::types(&retried),
        ["task.retrying", "task.attempt.started", "task.started"]
    );
    let state = f.state();
    let task = &state.tasks["t1"];
    assert_eq!(
        task.attempts
            .iter()
            .map(|a| (a.attempt_id.as_str(), a.status.as_str()))
            .collect::<Vec<_>>(),
        [("a1", "failed"), ("a2", "running")],
        "a retry keeps the task id and the failed attempt, with a new attempt id"
    );
    f.ok(
        "decide_completion",
        json!({"taskId": "t1", "accepted": true, "reasons": ["tests pass"]}),
    )
    .await;
    let done = f
        .ok(
            "complete_task",
            json!({"taskId": "t1", "machineStatus": "ok"}),
        )
        .await;
    assert_eq!(
        Fixture::types(&done),
        ["task.attempt.completed", "task.completed"]
    );
    let state = f.state();
    assert_eq!(
        state.tasks["t1"].outcome,
        Some(journal_format::status::Outcome::Ok)
    );
    assert!(state.tasks["t1"].incidents.is_empty());
}

#[tokio::test]
async fn terminal_tasks_stay_terminal_and_resume_is_safe() {
    let f = fixture();
    f.ok("create_task", json!({"taskId": "t1"})).await;
    // Resume of a running task is a no-op.
    f.ok("start_task", json!({"taskId": "t1"})).await;
    let noop = f
        .commands
        .run("resume_task", json!({"sessionId": "s1", "taskId": "t1"}))
        .await
        .unwrap();
    assert!(noop.events.is_empty());
    assert!(noop.note.unwrap().contains("no-op"));
    f.ok("cancel_task", json!({"taskId": "t1"})).await;
    assert_eq!(
        f.refused("resume_task", json!({"taskId": "t1"})).await,
        Rule::ResumeOfTerminal
    );
    assert_eq!(
        f.refused("start_task", json!({"taskId": "t1"})).await,
        Rule::TerminalIsFinal
    );
    assert_eq!(
        f.refused("retry_task", json!({"taskId": "t1"})).await,
        Rule::TerminalIsFinal
    );
    assert_eq!(
        f.refused("append_task_progress", json!({"taskId": "t1"}))
            .await,
        Rule::TerminalIsFinal
    );
    assert_eq!(
        f.refused("fail_task", json!({"taskId": "t1"})).await,
        Rule::TerminalIsFinal
    );
    assert_eq!(
        f.refused("create_task", json!({"taskId": "t1"})).await,
        Rule::TaskExists
    );
    assert_eq!(
        f.refused("start_task", json!({"taskId": "nope"})).await,
        Rule::UnknownTask
    );
    f.ok("create_task", json!({"taskId": "t2"})).await;
    f.ok("start_task", json!({"taskId": "t2"})).await;
    assert_eq!(
        f.refused("start_task", json!({"taskId": "t2"})).await,
        Rule::AlreadyRunning
    );
    assert_eq!(
        f.refused("retry_task", json!({"taskId": "t2"})).await,
        Rule::RetryNeedsFailure
    );
}

#[tokio::test]
async fn completion_needs_an_accepted_decision_and_the_declared_evidence() {
    let f = fixture();
    f.ok(
        "create_task",
        json!({"taskId": "t1", "evidenceRequirements": {"requiredArtifacts": ["report.md"]}}),
    )
    .await;
    f.ok("start_task", json!({"taskId": "t1"})).await;
    assert_eq!(
        f.refused("complete_task", json!({"taskId": "t1"})).await,
        Rule::CompletionNotAccepted
    );
    f.ok(
        "decide_completion",
        json!({"taskId": "t1", "accepted": false, "reasons": ["tests fail"]}),
    )
    .await;
    assert_eq!(
        f.refused("complete_task", json!({"taskId": "t1"})).await,
        Rule::CompletionNotAccepted
    );
    f.ok(
        "decide_completion",
        json!({"taskId": "t1", "accepted": true, "reasons": ["ok"]}),
    )
    .await;
    assert_eq!(
        f.refused("complete_task", json!({"taskId": "t1"})).await,
        Rule::EvidenceMissing
    );
    assert_eq!(
        f.refused(
            "complete_task",
            json!({"taskId": "t1", "machineStatus": "needs_retry"})
        )
        .await,
        Rule::MachineStatusNotOk
    );
    // Recorded as unverified by policy.
    let done = f
        .ok(
            "complete_task",
            json!({"taskId": "t1", "policy": "record_unverified"}),
        )
        .await;
    let completed = done.last().unwrap();
    assert_eq!(
        completed.envelope.payload.as_ref().unwrap()["outcome"],
        "unverified"
    );
    assert_eq!(
        f.state().tasks["t1"].outcome,
        Some(journal_format::status::Outcome::Unverified)
    );
}

#[tokio::test]
async fn a_completion_with_its_artifact_is_verified() {
    let f = fixture();
    f.ok(
        "create_task",
        json!({"taskId": "t1", "evidenceRequirements": {"requiredArtifacts": ["report.md"]}}),
    )
    .await;
    f.ok("start_task", json!({"taskId": "t1"})).await;
    // The artifact is a fact recorded by the runtime.
    let mut artifact =
        journal_format::Envelope::new("artifact.changed", "art-1", "2026-11-22T10:00:00Z");
    artifact.session_id = Some("s1".into());
    artifact.payload = Some(json!({"path": "report.md", "change": "created"}));
    f.journal.append(artifact).await.unwrap();
    f.ok(
        "decide_completion",
        json!({"taskId": "t1", "accepted": true, "reasons": ["reviewed"]}),
    )
    .await;
    f.ok("complete_task", json!({"taskId": "t1"})).await;
    assert_eq!(
        f.state().tasks["t1"].outcome,
        Some(journal_format::status::Outcome::Ok)
    );
}

#[tokio::test]
async fn waiting_permission_is_left_only_through_respond_action() {
    let f = fixture();
    f.ok("create_task", json!({"taskId": "t1"})).await;
    f.ok("start_task", json!({"taskId": "t1"})).await;
    f.ok(
        "require_action",
        json!({"actionId": "act1", "taskId": "t1", "toolCallId": "call1", "actionType": "tool_permission"}),
    )
    .await;
    assert_eq!(
        f.state().tasks["t1"].lifecycle,
        journal_format::status::Lifecycle::WaitingPermission
    );
    f.ok("pause_task", json!({"taskId": "t1"})).await;
    assert_eq!(
        f.refused("resume_task", json!({"taskId": "t1"})).await,
        Rule::ActionPending
    );
    f.ok(
        "decide_completion",
        json!({"taskId": "t1", "accepted": true, "reasons": ["ok"]}),
    )
    .await;
    assert_eq!(
        f.refused("complete_task", json!({"taskId": "t1"})).await,
        Rule::ActionPending,
        "an unresolved action is never treated as approved"
    );
    assert_eq!(
        f.refused(
            "respond_action",
            json!({"actionId": "other", "decision": "allow", "decidedBy": "u1"})
        )
        .await,
        Rule::UnknownAction
    );
    let denied = f
        .ok(
            "respond_action",
            json!({"actionId": "act1", "decision": "deny", "decidedBy": "u1"}),
        )
        .await;
    assert_eq!(
        Fixture::types(&denied),
        ["action.resolved", "tool.failed"],
        "a denial is never a tool success"
    );
    assert_eq!(
        denied[1].envelope.payload.as_ref().unwrap()["errorType"],
        "permission_denied"
    );
    assert_eq!(
        f.refused(
            "respond_action",
            json!({"actionId": "act1", "decision": "allow", "decidedBy": "u1"})
        )
        .await,
        Rule::ActionAlreadyResolved
    );
    let state = f.state();
    assert!(state.tasks["t1"].pending_actions.is_empty());
}

#[tokio::test]
async fn cancel_records_the_request_first_and_reaches_children() {
    let f = fixture();
    f.ok("create_task", json!({"taskId": "parent"})).await;
    f.ok(
        "create_task",
        json!({"taskId": "child", "parentTaskId": "parent"}),
    )
    .await;
    f.ok(
        "create_task",
        json!({"taskId": "grandchild", "parentTaskId": "child"}),
    )
    .await;
    f.ok("start_task", json!({"taskId": "child"})).await;
    assert_eq!(
        f.refused(
            "cancel_task",
            json!({"taskId": "parent", "requestedBy": "agent"})
        )
        .await,
        Rule::OnlyOperatorCancels
    );
    let events = f
        .ok(
            "cancel_task",
            json!({"taskId": "parent", "requestedBy": "user"}),
        )
        .await;
    let pairs: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e.envelope.event_type.as_str(),
                e.envelope.task_id.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("task.cancel_requested", "parent"),
            ("task.cancel_requested", "child"),
            ("task.cancel_requested", "grandchild"),
            ("task.cancelled", "parent"),
            ("task.cancelled", "child"),
            ("task.cancelled", "grandchild"),
        ]
    );
    let state = f.state();
    for t in ["parent", "child", "grandchild"] {
        assert_eq!(
            state.tasks[t].lifecycle,
            journal_format::status::Lifecycle::Cancelled
        );
    }
    // Operator cancel: the queue runtime's operator_canceled.
    f.ok("create_task", json!({"taskId": "q1"})).await;
    let events = f.ok("operator_cancel", json!({"taskId": "q1"})).await;
    let cancelled = events.last().unwrap();
    assert_eq!(
        cancelled.envelope.native_status.as_deref(),
        Some("operator_canceled")
    );
    assert_eq!(
        cancelled.envelope.payload.as_ref().unwrap()["requestedBy"],
        "operator"
    );
}

#[tokio::test]
async fn checklist_rules_and_the_edge_triggered_verification_nudge() {
    let f = fixture();
    assert_eq!(
        f.refused("checklist_update", json!({"items": [{"title": "a"}]}))
            .await,
        Rule::NoChecklist
    );
    assert_eq!(
        f.refused("checklist_create", json!({"items": []})).await,
        Rule::ChecklistEmpty
    );
    assert_eq!(
        f.refused(
            "checklist_create",
            json!({"items": [{"id": "x", "title": "a"}, {"id": "x", "title": "b"}]})
        )
        .await,
        Rule::ChecklistDuplicateId
    );
    assert_eq!(
        f.refused(
            "checklist_create",
            json!({"items": [{"title": "a", "status": "in_progress"}, {"title": "b", "status": "in_progress"}]})
        )
        .await,
        Rule::ChecklistMultipleInProgress
    );
    assert_eq!(
        f.refused(
            "checklist_create",
            json!({"items": [{"title": "a"}, {"title": "  \n"}]})
        )
        .await,
        Rule::ChecklistBlankTitle
    );
    assert_eq!(
        f.refused(
            "checklist_create",
            json!({"items": [{"title": "a", "kind": "research"}]})
        )
        .await,
        Rule::ChecklistUnknownKind
    );
    let created = f
        .ok(
            "checklist_create",
            json!({"items": [{"title": "write code", "status": "in_progress"}, {"id": "item-1", "title": "docs"}]}),
        )
        .await;
    let items = &created[0].envelope.payload.as_ref().unwrap()["items"];
    assert_eq!(items[0]["id"], "item-2", "generated ids avoid the caller's");
    assert_eq!(items[0]["kind"], "implementation");
    assert_eq!(
        f.refused("checklist_create", json!({"items": [{"title": "a"}]}))
            .await,
        Rule::ChecklistExists
    );
    let done = json!({"items": [
        {"id": "item-2", "title": "write code", "status": "completed"},
        {"id": "item-1", "title": "docs", "status": "completed"}]});
    let updated = f.ok("checklist_update", done.clone()).await;
    assert_eq!(
        Fixture::types(&updated),
        ["checklist.updated", "checklist.verification_nudged"]
    );
    // Edge-triggered: the same state again raises no second nudge.
    let again = f.ok("checklist_update", done).await;
    assert_eq!(Fixture::types(&again), ["checklist.updated"]);
    // A verification item clears the condition.
    let verified = f
        .ok(
            "checklist_update",
            json!({"items": [
                {"id": "item-2", "title": "write code", "status": "completed"},
                {"id": "v", "title": "run tests", "kind": "verification", "status": "pending"}]}),
        )
        .await;
    assert_eq!(
        verified[0].envelope.payload.as_ref().unwrap()["verificationNudgeNeeded"],
        false
    );
}

#[tokio::test]
async fn turns_links_checkpoints_and_dispatch() {
    let f = fixture();
    let a = f
        .ok(
            "submit_turn",
            json!({"threadId": "th1", "turnId": "u1", "input": [{"text": "hi"}]}),
        )
        .await;
    assert_eq!(a[0].envelope.status.as_deref(), Some("accepted"));
    let b = f
        .ok(
            "submit_turn",
            json!({"threadId": "th1", "turnId": "u2", "input": "more"}),
        )
        .await;
    assert_eq!(b[0].envelope.status.as_deref(), Some("queued"));
    assert_eq!(
        f.refused(
            "submit_turn",
            json!({"threadId": "th1", "turnId": "u1", "input": "x"})
        )
        .await,
        Rule::TurnExists
    );
    let i = f
        .ok("interrupt_turn", json!({"threadId": "th1", "turnId": "u1"}))
        .await;
    assert_eq!(i[0].envelope.status.as_deref(), Some("interrupted"));

    f.ok("create_task", json!({"taskId": "a"})).await;
    f.ok("create_task", json!({"taskId": "b"})).await;
    f.ok("link_tasks", json!({"taskId": "a", "dependsOnTaskId": "b"}))
        .await;
    assert_eq!(
        f.refused("link_tasks", json!({"taskId": "b", "dependsOnTaskId": "a"}))
            .await,
        Rule::DependencyCycle
    );
    assert_eq!(
        f.refused("link_tasks", json!({"taskId": "a", "dependsOnTaskId": "a"}))
            .await,
        Rule::DependencyCycle
    );

    f.ok("start_task", json!({"taskId": "a"})).await;
    let cp = f
        .ok(
            "capture_checkpoint",
            json!({"taskId": "a", "checkpointId": "cp1", "title": "midway"}),
        )
        .await;
    assert_eq!(
        cp[0].envelope.payload.as_ref().unwrap()["statusAtCapture"],
        "running"
    );
    let d = f
        .ok(
            "record_dispatch",
            json!({"taskId": "a", "dispatchContext": {"originSurface": "desktop", "originProductId": "cowork", "dispatchMode": "queued", "initiatedAt": "2026-11-22T10:00:00Z"}}),
        )
        .await;
    assert_eq!(Fixture::types(&d), ["dispatch.requested"]);
    assert_eq!(
        f.refused(
            "record_dispatch",
            json!({"dispatchContext": {"originProductId": "x", "dispatchMode": "teleport", "initiatedAt": "2026-11-22T10:00:00Z"}})
        )
        .await,
        Rule::InvalidArguments
    );
    assert_eq!(
        f.refused("no_such_command", json!({})).await,
        Rule::InvalidArguments
    );
    assert_eq!(
        f.refused("create_task", json!({"taskId": "c", "colour": "red"}))
            .await,
        Rule::InvalidArguments,
        "unknown arguments are refused, not ignored"
    );
}

#[tokio::test]
async fn queue_sensors_and_schedules_dedupe_and_coalesce() {
    let f = fixture();
    let intent = json!({"taskType": "triage", "source": "github:issue/7", "payload": {}});
    let first = f.ok("enqueue_task", json!({"intent": intent})).await;
    assert_eq!(Fixture::types(&first), ["task.created", "task.queued"]);
    let again = f
        .commands
        .run("enqueue_task", json!({"sessionId": "s1", "intent": intent}))
        .await
        .unwrap();
    assert!(
        again.events.is_empty(),
        "an active task with the same source dedupes"
    );
    assert!(again.note.unwrap().contains("deduped"));
    f.ok(
        "enqueue_task",
        json!({"intent": {"taskType": "t", "payload": {}}, "idempotencyKey": "k1"}),
    )
    .await;
    let dup = f
        .commands
        .run(
            "enqueue_task",
            json!({"sessionId": "s1", "intent": {"taskType": "t", "payload": {}}, "idempotencyKey": "k1"}),
        )
        .await
        .unwrap();
    assert!(dup.events.is_empty());

    let sensor = json!({"sensorId": "gh", "sensorEventId": "e1", "dedupeKey": "issue-9",
        "proposedTask": {"taskType": "triage", "payload": {}}});
    let recorded = f.ok("record_sensor_event", sensor.clone()).await;
    assert_eq!(
        Fixture::types(&recorded),
        ["sensor.event.recorded", "task.created", "task.queued"]
    );
    let deduped = f.ok("record_sensor_event", sensor).await;
    assert_eq!(
        Fixture::types(&deduped),
        ["sensor.event.deduped"],
        "a seen dedupe key is recorded as deduped and creates nothing"
    );
    let same_event = f
        .ok(
            "record_sensor_event",
            json!({"sensorId": "gh", "sensorEventId": "e1", "dedupeKey": "other"}),
        )
        .await;
    assert_eq!(Fixture::types(&same_event), ["sensor.event.deduped"]);

    assert_eq!(
        f.refused(
            "upsert_schedule",
            json!({"schedule": {"scheduleId": "daily", "name": "d", "enabled": true, "intervalSeconds": 0,
                "nextRunAt": "2026-11-20T00:00:00Z", "task": {"taskType": "report", "payload": {}}}})
        )
        .await,
        Rule::InvalidInterval
    );
    f.ok(
        "upsert_schedule",
        json!({"schedule": {"scheduleId": "daily", "name": "d", "enabled": true, "intervalSeconds": 86400,
            "nextRunAt": "2026-11-20T00:00:00Z", "task": {"taskType": "report", "payload": {}}}}),
    )
    .await;
    // Three days late: one task, next run = evaluation time + interval.
    let fired = f
        .ok("evaluate_schedules", json!({"at": "2026-11-22T12:00:00Z"}))
        .await;
    assert_eq!(
        Fixture::types(&fired),
        ["schedule.fired", "task.created", "task.queued"]
    );
    let p = fired[0].envelope.payload.as_ref().unwrap();
    assert_eq!(p["nextRunAt"], "2026-11-23T12:00:00Z");
    assert_eq!(p["missedRuns"], 2);
    let none = f
        .commands
        .run(
            "evaluate_schedules",
            json!({"sessionId": "s1", "at": "2026-11-23T11:59:59Z"}),
        )
        .await
        .unwrap();
    assert!(none.events.is_empty(), "not due again before the next run");
}

/// A schedule's next run is a time the journal records as nanoseconds since 1970 in 64 bits
/// (up to 2262-04-11T23:47:16.854775807Z): an interval that puts it past that is refused by
/// rule, never clamped to the last recordable time.
#[tokio::test]
async fn a_schedule_whose_next_run_cannot_be_recorded_is_refused() {
    let f = fixture();
    let schedule = |interval: Value, next: &str| {
        json!({"schedule": {"scheduleId": "far", "name": "f", "enabled": true,
            "intervalSeconds": interval, "nextRunAt": next,
            "task": {"taskType": "report", "payload": {}}}})
    };
    let refused = |args: Value| {
        let commands = f.commands.clone();
        let head = f.journal.head().position;
        let journal = f.journal.clone();
        async move {
            match commands.run("upsert_schedule", args).await {
                Err(CommandError::Refused(v)) => {
                    assert_eq!(journal.head().position, head, "nothing written");
                    (v.rule, v.message)
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };
    let mut args = schedule(json!(u64::MAX), "2026-05-10T02:00:00Z");
    args["sessionId"] = json!("s1");
    let (rule, message) = refused(args).await;
    assert_eq!(rule, Rule::InvalidInterval);
    assert!(
        message.contains("18446744073709551615") && message.contains("2262-04-11"),
        "{message}"
    );
    // At the edge: one day after 2262-04-10 is recordable, two are not.
    f.ok(
        "upsert_schedule",
        schedule(json!(86_400), "2262-04-10T00:00:00Z"),
    )
    .await;
    let mut args = schedule(json!(2 * 86_400), "2262-04-10T00:00:00Z");
    args["sessionId"] = json!("s1");
    assert_eq!(refused(args).await.0, Rule::InvalidInterval);
    // Evaluated late, the next run (evaluation time + interval) would not be recordable: the
    // evaluation is refused, naming the schedule, and nothing fires.
    let head = f.journal.head().position;
    match f
        .commands
        .run(
            "evaluate_schedules",
            json!({"sessionId": "s1", "at": "2262-04-11T00:00:00Z"}),
        )
        .await
    {
        Err(CommandError::Refused(v)) => {
            assert_eq!(v.rule, Rule::InvalidInterval);
            assert!(v.message.contains("far"), "{}", v.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(f.journal.head().position, head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_never_apply_a_command_twice() {
    let f = fixture();
    f.ok("create_task", json!({"taskId": "t1"})).await;
    f.ok("start_task", json!({"taskId": "t1"})).await;
    f.ok(
        "require_action",
        json!({"actionId": "act1", "taskId": "t1", "actionType": "tool_permission"}),
    )
    .await;
    let mut handles = Vec::new();
    for i in 0..8 {
        let commands = f.commands.clone();
        handles.push(tokio::spawn(async move {
            commands
                .run(
                    "respond_action",
                    json!({"sessionId": "s1", "actionId": "act1", "decision": "allow", "decidedBy": format!("u{i}")}),
                )
                .await
        }));
        let commands = f.commands.clone();
        handles.push(tokio::spawn(async move {
            commands
                .run(
                    "enqueue_task",
                    json!({"sessionId": "s1", "intent": {"taskType": "x", "source": "one-source", "payload": {}}}),
                )
                .await
        }));
    }
    let mut resolved = 0;
    let mut enqueued = 0;
    for h in handles {
        match h.await.unwrap() {
            Ok(a) => {
                for e in &a.events {
                    match e.envelope.event_type.as_str() {
                        "action.resolved" => resolved += 1,
                        "task.created" => enqueued += 1,
                        _ => {}
                    }
                }
            }
            Err(CommandError::Refused(v)) => assert_eq!(v.rule, Rule::ActionAlreadyResolved),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(resolved, 1, "one writer resolves the action");
    assert_eq!(enqueued, 1, "one task per source");
    let state = f.state();
    assert!(state.incidents.is_empty(), "{:?}", state.incidents);
}

#[tokio::test]
async fn facts_that_break_a_rule_are_kept_and_shown_as_incidents() {
    let f = fixture();
    f.ok("create_task", json!({"taskId": "t1"})).await;
    // A fact, not a command: completed with no decision. Stored, and flagged.
    let mut e = journal_format::Envelope::new("task.completed", "fact-1", "2026-11-22T10:00:00Z");
    e.session_id = Some("s1".into());
    e.task_id = Some("t1".into());
    f.journal.append(e).await.unwrap();
    let mut e = journal_format::Envelope::new("task.resumed", "fact-2", "2026-11-22T10:00:01Z");
    e.session_id = Some("s1".into());
    e.task_id = Some("t1".into());
    f.journal.append(e).await.unwrap();
    let state = f.state();
    let task = &state.tasks["t1"];
    assert_eq!(
        task.outcome,
        Some(journal_format::status::Outcome::Unverified)
    );
    let rules: Vec<(Rule, &str)> = task
        .incidents
        .iter()
        .map(|i| (i.rule, i.event_id.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            (Rule::CompletionNotAccepted, "fact-1"),
            (Rule::TerminalIsFinal, "fact-2")
        ]
    );
}
