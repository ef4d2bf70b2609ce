//! The session snapshot and thread read model in Agent Runtime form: JSON that validates
//! against `agentruntime-snapshot.schema.json` (and, when the events carry the Lime profile's
//! fields, its stricter profile).
//!
//! Absent facts are absent fields (the spec's form has no `unknown` marker for most of them),
//! except where the spec requires a value: a thread or task status no fact gave is `unknown`.

use std::collections::BTreeSet;

use journal_format::status::Lifecycle;
use serde_json::{json, Map, Value};

use crate::activity::{Activity, ThreadSummary};
use crate::state::{StreamState, TaskState};

/// The schema version written when no event gave one.
pub const DEFAULT_SCHEMA_VERSION: &str = "agentruntime-0.4.0";

/// The spec's thread status words.
const THREAD_STATUSES: [&str; 9] = [
    "idle",
    "queued",
    "running",
    "blocked",
    "completed",
    "failed",
    "cancelled",
    "stale",
    "unknown",
];

/// The spec's attempt status words (`statusValue`).
const STATUS_VALUES: [&str; 14] = [
    "idle",
    "queued",
    "preparing",
    "running",
    "blocked",
    "streaming",
    "retrying",
    "completed",
    "failed",
    "cancelled",
    "stale",
    "unknown",
    "unavailable",
    "not_applicable",
];

fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<&String>) {
    if let Some(v) = value {
        map.insert(key.into(), Value::String(v.clone()));
    }
}

/// A task in the spec's form.
fn task(task: &TaskState, activity: &Activity) -> Value {
    let mut t = Map::new();
    t.insert("taskId".into(), json!(task.task_id));
    insert_some(&mut t, "parentTaskId", task.parent_task_id.as_ref());
    insert_some(&mut t, "sessionId", task.session_id.as_ref());
    insert_some(&mut t, "threadId", task.thread_id.as_ref());
    insert_some(&mut t, "turnId", task.turn_id.as_ref());
    insert_some(&mut t, "title", task.title.as_ref());
    insert_some(&mut t, "objective", task.objective.as_ref());
    // The spec's task states are the lifecycle's, except `interrupted`, which it does not
    // have: that is `unknown` there, with the journal's word as the native status.
    let status = if task.lifecycle == Lifecycle::Interrupted {
        t.insert("nativeStatus".into(), json!("interrupted"));
        json!("unknown")
    } else {
        json!(task.lifecycle)
    };
    t.insert("status".into(), status);
    if let Some(run) = task.attempts.last().and_then(|a| a.run_id.as_ref()) {
        t.insert("currentRunId".into(), json!(run));
    }
    let attempts: Vec<Value> = task
        .attempts
        .iter()
        .filter_map(|a| {
            // `runId` is required by the spec's attempt: an attempt no event tied to a run
            // cannot be written in this form.
            let run = a.run_id.as_ref()?;
            let status = if STATUS_VALUES.contains(&a.status.as_str()) {
                a.status.as_str()
            } else {
                "unknown"
            };
            Some(json!({"runId": run, "attemptId": a.attempt_id, "status": status}))
        })
        .collect();
    if !attempts.is_empty() {
        t.insert("attempts".into(), Value::Array(attempts));
    }
    let evidence: Vec<&str> = activity
        .evidence
        .iter()
        .filter(|(_, e)| e.task_id.as_ref() == Some(&task.task_id))
        .map(|(id, _)| id)
        .collect();
    if !evidence.is_empty() {
        t.insert("evidenceRefs".into(), json!(evidence));
    }
    Value::Object(t)
}

/// The thread read model in the spec's form.
#[must_use]
pub fn thread(
    id: &str,
    summary: &ThreadSummary,
    state: &StreamState,
    activity: &Activity,
) -> Value {
    let status = summary
        .status
        .as_deref()
        .filter(|s| THREAD_STATUSES.contains(s))
        .unwrap_or("unknown");
    let turns: Vec<Value> = summary
        .turns
        .iter()
        .map(|turn| {
            let mut t = Map::new();
            t.insert("turnId".into(), json!(turn.turn_id));
            t.insert("status".into(), json!(turn.status));
            insert_some(&mut t, "taskId", turn.task_id.as_ref());
            insert_some(&mut t, "runId", turn.run_id.as_ref());
            Value::Object(t)
        })
        .collect();
    let pending = pending_requests(id, state);
    let queued: Vec<Value> = summary
        .turns
        .iter()
        .filter(|t| t.status == "submitted" && summary.active_turn_id.as_ref() != Some(&t.turn_id))
        .map(|t| json!({"turnId": t.turn_id}))
        .collect();
    let incidents: Vec<Value> = state
        .tasks
        .values()
        .filter(|t| t.thread_id.as_deref() == Some(id))
        .flat_map(|t| t.incidents.iter())
        .map(|i| json!({"eventId": i.event_id, "rule": i.rule, "message": i.message, "position": i.position}))
        .collect();
    let evidence: Vec<(&str, &crate::activity::EvidenceSummary)> = activity
        .evidence
        .iter()
        .filter(|(_, e)| e.thread_id.as_deref() == Some(id))
        .collect();
    let outcomes: Vec<Value> = evidence
        .iter()
        .flat_map(|(_, e)| e.verification_outcomes.iter().cloned())
        .collect();
    let mut out = Map::new();
    out.insert("threadId".into(), json!(id));
    out.insert("status".into(), json!(status));
    insert_some(&mut out, "activeTurnId", summary.active_turn_id.as_ref());
    out.insert("turns".into(), Value::Array(turns));
    out.insert("pendingRequests".into(), Value::Array(pending));
    out.insert("queuedTurns".into(), Value::Array(queued));
    out.insert("incidents".into(), Value::Array(incidents));
    out.insert(
        "evidenceSummary".into(),
        json!({
            "evidenceRefs": evidence.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            "verificationOutcomes": outcomes,
        }),
    );
    Value::Object(out)
}

/// The thread's pending requests: the actions not yet decided whose task is in thread `id`, or
/// that name no task this stream holds.
fn pending_requests(id: &str, state: &StreamState) -> Vec<Value> {
    let in_thread = |task: &TaskState| task.thread_id.as_deref() == Some(id);
    state
        .actions
        .values()
        .filter(|a| a.decision.is_none())
        .filter(|a| {
            a.task_id
                .as_ref()
                .and_then(|t| state.tasks.get(t))
                .is_none_or(in_thread)
        })
        .map(|a| {
            let mut m = Map::new();
            m.insert("actionId".into(), json!(a.action_id));
            insert_some(&mut m, "actionType", a.action_type.as_ref());
            insert_some(&mut m, "taskId", a.task_id.as_ref());
            insert_some(&mut m, "toolCallId", a.tool_call_id.as_ref());
            Value::Object(m)
        })
        .collect()
}

/// The session snapshot in the spec's form.
#[must_use]
pub fn snapshot(state: &StreamState, activity: &Activity) -> Value {
    let mut out = Map::new();
    out.insert(
        "schemaVersion".into(),
        json!(activity
            .schema_version
            .as_deref()
            .unwrap_or(DEFAULT_SCHEMA_VERSION)),
    );
    insert_some(&mut out, "runtimeId", activity.runtime_id.as_ref());
    insert_some(&mut out, "sessionId", activity.session_id.as_ref());
    insert_some(&mut out, "workspaceId", activity.workspace_id.as_ref());
    insert_some(&mut out, "updatedAt", activity.last_timestamp.as_ref());
    out.insert(
        "threads".into(),
        Value::Array(
            activity
                .threads
                .iter()
                .map(|(id, t)| thread(id, t, state, activity))
                .collect(),
        ),
    );
    out.insert(
        "tasks".into(),
        Value::Array(state.tasks.values().map(|t| task(t, activity)).collect()),
    );
    let (mut active, mut completed, mut failed, mut cancelled, mut unverified) = (0, 0, 0, 0, 0);
    for t in state.tasks.values() {
        match t.lifecycle {
            Lifecycle::Completed
                if t.outcome == Some(journal_format::status::Outcome::Unverified) =>
            {
                unverified += 1;
            }
            Lifecycle::Completed => completed += 1,
            Lifecycle::Failed | Lifecycle::TimedOut | Lifecycle::Lost => failed += 1,
            Lifecycle::Cancelled => cancelled += 1,
            l if !l.is_terminal() && l != Lifecycle::Unknown => active += 1,
            _ => {}
        }
    }
    let mut summary = Map::new();
    summary.insert("active".into(), json!(active));
    summary.insert("completed".into(), json!(completed));
    summary.insert("failed".into(), json!(failed));
    // Beyond the spec's three counts, only when there is something to say.
    if cancelled > 0 {
        summary.insert("cancelled".into(), json!(cancelled));
    }
    if unverified > 0 {
        summary.insert("unverified".into(), json!(unverified));
    }
    out.insert("taskSummary".into(), Value::Object(summary));
    let r = &activity.routing;
    let mut routing = Map::new();
    if let Some(n) = r.candidate_count {
        routing.insert("candidateCount".into(), json!(n));
    }
    if let Some(single) = r.single_candidate {
        routing.insert("singleCandidate".into(), json!(single));
    }
    insert_some(&mut routing, "selectedModel", r.selected_model.as_ref());
    out.insert("routingLimitSummary".into(), Value::Object(routing));
    let mut telemetry = Map::new();
    telemetry.insert("traceIds".into(), json!(activity.trace_ids));
    insert_some(
        &mut telemetry,
        "joinStatus",
        activity.telemetry_join_status.as_ref(),
    );
    out.insert("telemetrySummary".into(), Value::Object(telemetry));
    let refs: BTreeSet<&str> = activity.evidence.keys().collect();
    out.insert("evidenceRefs".into(), json!(refs));
    Value::Object(out)
}
