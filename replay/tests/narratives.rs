//! Narratives: of a generated workload (counts checked against the events), of each Agent
//! Runtime fixture event, every gap case, time travel, and the JSON form against its schema.

use std::path::{Path, PathBuf};

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::Envelope;
use journal_projections::workload;
use journal_replay::{load, Narrative, Scope};
use serde_json::{json, Value};

fn journal(dir: &Path, events: Vec<Envelope>) -> Journal {
    let journal = Journal::open(dir, Options::default()).unwrap();
    for chunk in events.chunks(2000) {
        journal
            .append_batch_blocking(chunk.to_vec(), AppendOptions::default())
            .unwrap();
    }
    journal
}

fn ev(t: &str, id: &str, ts: &str, fields: Value) -> Envelope {
    let mut v = json!({"type": t, "eventId": id, "timestamp": ts, "sessionId": "s"});
    if let (Value::Object(v), Value::Object(f)) = (&mut v, fields) {
        v.extend(f);
    }
    Envelope::from_json_value(v, &mut || unreachable!("ids are given")).unwrap()
}

fn kinds(n: &Narrative) -> Vec<&str> {
    n.gaps.iter().map(|g| g.kind.as_str()).collect()
}

fn schema_check(n: &Narrative) {
    let schema = schemars::schema_for!(Narrative).to_value();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let value = serde_json::to_value(n).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn a_generated_session_is_told_step_by_step_with_counts_that_match_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let events = workload::generate(21, 3, 1_500);
    let journal = journal(dir.path(), events.clone());
    let n = load(&journal, &Scope::Session("sess_00001".into()), None).unwrap();
    let mine: Vec<&Envelope> = events
        .iter()
        .filter(|e| e.session_id.as_deref() == Some("sess_00001"))
        .collect();
    let count = |t: &str| mine.iter().filter(|e| e.event_type == t).count() as u64;
    assert_eq!(n.counts.events, mine.len() as u64);
    assert_eq!(n.counts.tool_calls, count("tool.started"));
    assert_eq!(n.counts.tool_results, count("tool.result"));
    assert_eq!(
        n.counts.open_calls,
        count("tool.started") - count("tool.result")
    );
    assert_eq!(n.counts.model_calls, count("model.requested"));
    assert_eq!(n.counts.approvals, count("action.required"));
    assert_eq!(n.counts.subagents, count("subagent.spawned"));
    assert_eq!(n.counts.compactions, count("context.compaction.completed"));
    // Every event is in exactly one step (deltas aside, which this workload has none of).
    let mut ids: Vec<&str> = n
        .steps
        .iter()
        .flat_map(|s| s.event_ids.iter().map(String::as_str))
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = mine.iter().map(|e| e.event_id.as_str()).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected);
    // An approval names who decided and when.
    let approval = n.steps.iter().find(|s| s.kind == "approval").unwrap();
    assert!(approval.complete);
    assert!(
        approval.title.contains("approve by user:reviewer at"),
        "{}",
        approval.title
    );
    assert_eq!(approval.event_ids.len(), 2);
    // Calls without a result are gaps, each named.
    assert_eq!(
        kinds(&n)
            .iter()
            .filter(|k| **k == "call_without_result")
            .count() as u64,
        n.counts.open_calls
    );
    schema_check(&n);

    // A task and its runs: the retry is told as a failed attempt and a new one.
    let retried = mine
        .iter()
        .find(|e| e.event_type == "task.retrying")
        .and_then(|e| e.task_id.clone())
        .expect("the workload retries a task");
    let n = load(&journal, &Scope::Task(retried), None).unwrap();
    let attempts: Vec<&str> = n
        .steps
        .iter()
        .filter(|s| s.kind == "attempt")
        .map(|s| s.title.as_str())
        .collect();
    assert!(
        attempts.iter().any(|t| t.ends_with("_a1 failed")),
        "{attempts:?}"
    );
    assert!(
        attempts.iter().any(|t| t.ends_with("_a2 started")),
        "{attempts:?}"
    );
    assert!(
        n.steps.iter().any(|s| s.kind == "model_call"),
        "run events without a task id are included"
    );
}

#[test]
fn every_gap_is_shown_as_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let events = vec![
        ev(
            "task.created",
            "e1",
            "2026-05-11T10:00:00Z",
            json!({"taskId": "t", "runId": "r", "sequence": 1, "payload": {"objective": "fix it"}}),
        ),
        ev(
            "task.started",
            "e2",
            "2026-05-11T10:00:01Z",
            json!({"taskId": "t", "runId": "r", "sequence": 2}),
        ),
        ev(
            "tool.started",
            "e3",
            "2026-05-11T10:00:02Z",
            json!({"runId": "r", "toolCallId": "c1", "sequence": 3, "payload": {"toolName": "shell"}}),
        ),
        // sequence 4 and 5 never arrive
        ev(
            "action.required",
            "e4",
            "2026-05-11T10:00:03Z",
            json!({"taskId": "t", "runId": "r", "actionId": "a1", "sequence": 6, "payload": {"actionType": "tool_permission", "prompt": "rm -rf?"}}),
        ),
        // a producer clock going backwards, and a sequence going backwards
        ev(
            "model.requested",
            "e5",
            "2026-05-11T09:59:00Z",
            json!({"runId": "r", "modelRequestId": "m1", "sequence": 5}),
        ),
        ev(
            "task.completed",
            "e6",
            "2026-05-11T10:00:05Z",
            json!({"taskId": "t", "runId": "r", "sequence": 7, "payload": {"outcome": "ok"}}),
        ),
    ];
    let journal = journal(dir.path(), events);
    let n = load(&journal, &Scope::Run("r".into()), None).unwrap();
    let gaps = kinds(&n);
    for kind in [
        "call_without_result",
        "approval_unresolved",
        "timestamp_reversal",
        "run_without_end",
    ] {
        assert!(gaps.contains(&kind), "{kind} in {gaps:?}");
    }
    // A producer's sequence is judged over the whole session (a run holds only part of it).
    assert!(!gaps.contains(&"sequence_hole"), "{gaps:?}");
    let session = load(&journal, &Scope::Session("s".into()), None).unwrap();
    let session_gaps = kinds(&session);
    assert!(session_gaps.contains(&"sequence_hole"), "{session_gaps:?}");
    assert!(
        session_gaps.contains(&"sequence_reversal"),
        "{session_gaps:?}"
    );
    let hole = session
        .gaps
        .iter()
        .find(|g| g.kind == "sequence_hole")
        .unwrap();
    assert_eq!(hole.positions, vec![3, 4]);
    assert!(
        hole.detail.contains("from 3 to 6: 2 missing"),
        "{}",
        hole.detail
    );
    // Completed was recorded, but the approval never was resolved: not presented as completed.
    assert_eq!(n.final_state.status, "waiting_approval");
    assert!(n.final_state.why.contains("never resolved"));
    assert_eq!(n.final_state.event_id.as_deref(), Some("e4"));
    schema_check(&n);
}

#[test]
fn time_travel_tells_the_story_as_of_any_position() {
    let dir = tempfile::tempdir().unwrap();
    let events = vec![
        ev(
            "task.created",
            "e1",
            "2026-05-11T10:00:00Z",
            json!({"taskId": "t"}),
        ),
        ev(
            "task.started",
            "e2",
            "2026-05-11T10:00:01Z",
            json!({"taskId": "t"}),
        ),
        ev(
            "action.required",
            "e3",
            "2026-05-11T10:00:02Z",
            json!({"taskId": "t", "actionId": "a1", "payload": {"actionType": "tool_permission"}}),
        ),
        ev(
            "action.resolved",
            "e4",
            "2026-05-11T10:00:03Z",
            json!({"taskId": "t", "actionId": "a1", "payload": {"decision": "approve", "decidedBy": "user:ana"}}),
        ),
        ev(
            "task.paused",
            "e5",
            "2026-05-11T10:00:04Z",
            json!({"taskId": "t", "payload": {"reason": "user.requested"}}),
        ),
        ev(
            "task.resumed",
            "e6",
            "2026-05-11T10:00:05Z",
            json!({"taskId": "t"}),
        ),
        ev(
            "task.completed",
            "e7",
            "2026-05-11T10:00:06Z",
            json!({"taskId": "t", "payload": {"outcome": "ok"}}),
        ),
    ];
    let journal = journal(dir.path(), events);
    let scope = Scope::Task("t".into());
    let at = |p: u64| load(&journal, &scope, Some(p)).unwrap();
    let n = at(2);
    assert_eq!(
        (n.as_of, n.steps.len(), n.final_state.status.as_str()),
        (2, 2, "running")
    );
    assert_eq!(
        n.final_state.evidence,
        journal_replay::narrative::Evidence::Inferred
    );
    let n = at(3);
    assert_eq!(n.final_state.status, "waiting_approval");
    let n = at(5);
    assert_eq!(n.final_state.status, "paused");
    let n = at(7);
    assert_eq!(n.final_state.status, "completed");
    assert_eq!(
        n.final_state.evidence,
        journal_replay::narrative::Evidence::Observed
    );
    assert_eq!(n.final_state.event_id.as_deref(), Some("e7"));
    assert!(n.gaps.is_empty(), "{:?}", n.gaps);
    // Completed, but with no accepted completion decision: the rules say unverified, and why.
    assert_eq!(n.final_state.outcome.as_deref(), Some("unverified"));
    assert!(
        n.final_state.why.contains("unverified"),
        "{}",
        n.final_state.why
    );
    assert_eq!(n.incidents.len(), 1);
    assert_eq!(n.incidents[0].event_id, "e7");
    let text = journal_replay::text::render(&n, journal_replay::text::Colour::Plain);
    assert!(text.contains("task paused (user.requested)"), "{text}");
    assert!(text.contains("Final state: completed (observed)"), "{text}");
    assert!(!text.contains('\x1b'), "no colour unless asked");
}

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

#[test]
fn each_agent_runtime_fixture_event_is_narrated_as_observed() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with("-event.json") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let event = Envelope::from_json_slice(&bytes, &mut || unreachable!()).unwrap();
        let session = event.session_id.clone().unwrap();
        let id = event.event_id.clone();
        let dir = tempfile::tempdir().unwrap();
        let journal = journal(dir.path(), vec![event]);
        let n = load(&journal, &Scope::Session(session), None).unwrap();
        assert_eq!(n.steps.len(), 1, "{}", path.display());
        let step = &n.steps[0];
        assert_eq!(step.event_ids, vec![id]);
        assert_eq!(step.positions, vec![1]);
        assert_eq!(step.producer.as_deref(), Some("lime_runtime_local"));
        assert_eq!(step.evidence, journal_replay::narrative::Evidence::Observed);
        schema_check(&n);
        checked += 1;
    }
    assert_eq!(checked, 5, "the five lime-profile event fixtures");
}

#[test]
fn a_subagents_own_narrative_is_nested_under_the_step_that_spawned_it() {
    let dir = tempfile::tempdir().unwrap();
    let child = |t: &str, id: &str, ts: &str, fields: Value| {
        let mut e = ev(t, id, ts, fields);
        e.session_id = Some("child".into());
        e
    };
    let events = vec![
        ev(
            "subagent.spawned",
            "p1",
            "2026-05-11T10:00:00Z",
            json!({"subagentId": "sa", "payload": {"role": "reviewer", "childSessionId": "child"}}),
        ),
        child(
            "tool.started",
            "c1",
            "2026-05-11T10:00:01Z",
            json!({"toolCallId": "k1", "payload": {"toolName": "grep"}}),
        ),
        child(
            "tool.result",
            "c2",
            "2026-05-11T10:00:02Z",
            json!({"toolCallId": "k1", "payload": {"status": "success"}}),
        ),
        ev(
            "subagent.completed",
            "p2",
            "2026-05-11T10:00:03Z",
            json!({"subagentId": "sa"}),
        ),
    ];
    let journal = journal(dir.path(), events);
    let n = load(&journal, &Scope::Session("s".into()), None).unwrap();
    assert_eq!(n.steps.len(), 1);
    let spawned = &n.steps[0];
    assert_eq!(spawned.kind, "subagent");
    assert!(spawned.complete);
    assert_eq!(spawned.children.len(), 1, "{:?}", spawned.children);
    assert_eq!(spawned.children[0].kind, "tool_call");
    assert_eq!(spawned.children[0].event_ids, vec!["c1", "c2"]);
    // As of a position before the child's result, the nested call is still open.
    let n = load(&journal, &Scope::Session("s".into()), Some(2)).unwrap();
    assert!(!n.steps[0].children[0].complete);
    assert!(
        n.gaps
            .iter()
            .any(|g| g.kind == "call_without_result" && g.event_ids == vec!["c1"]),
        "the subagent's open call is a gap of the parent's narrative: {:?}",
        n.gaps
    );
    schema_check(&n);
}
