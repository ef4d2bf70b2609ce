//! Completion (the coding-agent runtime): `decide_completion`, which records the completion decision for the
//! current attempt, and `complete_task`, which completes a task only through the gate (an
//! accepted decision and the declared evidence) unless its policy records it unverified.

use journal_format::payload::MachineStatus;
use journal_projections::rules::{Rule, Violation};
use journal_projections::state::{StreamState, TaskState};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::context::{drop_nulls, set, task_event, Context, Decided};
use crate::scope::Scope;
use crate::task::{known_task, pending, refuse_terminal};

/// `decide_completion`: records the coding-agent runtime's CompletionDecision for the current attempt.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecideCompletion {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// Whether completion is accepted.
    pub accepted: bool,
    /// Why.
    pub reasons: Vec<String>,
    /// Who decided.
    pub decided_by: Option<String>,
}

/// `complete_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompleteTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// The queue runtime's machine status; anything but `ok` is refused.
    pub machine_status: Option<MachineStatus>,
    /// A summary for the operator.
    pub summary: Option<String>,
    /// `refuse` (the default) refuses a completion without an accepted decision or the
    /// declared evidence; `record_unverified` records it with outcome `unverified`.
    #[serde(default)]
    pub policy: CompletionPolicy,
}

/// What `complete_task` does when the gate is not met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionPolicy {
    /// Refuse.
    #[default]
    Refuse,
    /// Record the completion with outcome `unverified`.
    RecordUnverified,
}

/// `decide_completion`: `task.completion.decided` for the current attempt.
pub(crate) fn decide_completion(
    c: &DecideCompletion,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    refuse_terminal(task, "task.completion.decided")?;
    let mut e = task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.completion.decided",
        json!({"accepted": c.accepted, "reasons": c.reasons, "decidedBy": c.decided_by}),
    );
    e.attempt_id = task.current_attempt().map(|a| a.attempt_id.clone());
    Ok(Decided::events(vec![e]))
}

/// `complete_task`: the current attempt's `task.attempt.completed`, then `task.completed` with
/// its outcome (`ok`, or `unverified` when the policy records a completion the gate refuses).
pub(crate) fn complete(
    c: &CompleteTask,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    refuse_terminal(task, "task.completed")?;
    if !task.pending_actions.is_empty() {
        return Err(pending(task));
    }
    if let Some(m) = c.machine_status.filter(|m| *m != MachineStatus::Ok) {
        return Err(Violation::new(
            Rule::MachineStatusNotOk,
            format!(
                "task {} cannot complete with machine status {m:?}; completed requires ok",
                c.task_id
            )
            .to_lowercase(),
        ));
    }
    let completed = completed_payload(c, completion_gate(task, state))?;
    let mut events = Vec::new();
    if let Some(a) = task.current_attempt() {
        let mut e = task_event(
            &c.scope,
            ctx,
            &c.task_id,
            "task.attempt.completed",
            json!({"status": "completed"}),
        );
        e.attempt_id = Some(a.attempt_id.clone());
        events.push(e);
    }
    events.push(task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.completed",
        completed,
    ));
    Ok(Decided::events(events))
}

/// The payload of `task.completed` given the gate's answer: outcome `ok` through the gate;
/// outcome `unverified` with the broken rule as its reason under `record_unverified`.
///
/// # Errors
/// The gate's refusal under the `refuse` policy.
fn completed_payload(c: &CompleteTask, gate: Result<(), Violation>) -> Result<Value, Violation> {
    let outcome = match (&gate, c.policy) {
        (Ok(()), _) => "ok",
        (Err(_), CompletionPolicy::RecordUnverified) => "unverified",
        (Err(v), CompletionPolicy::Refuse) => return Err(v.clone()),
    };
    let mut p = json!({"outcome": outcome, "machineStatus": c.machine_status.map(|_| "ok")});
    if let Some(s) = &c.summary {
        set(&mut p, "operatorSummary", json!(s));
    }
    if let Err(v) = &gate {
        set(
            &mut p,
            "reason",
            json!(format!("journal:{}", v.rule.name())),
        );
    }
    drop_nulls(&mut p);
    Ok(p)
}

/// The coding-agent runtime's gate: an accepted completion decision for the current attempt, and every artifact
/// the task declared.
///
/// # Errors
/// The first unmet condition.
pub fn completion_gate(task: &TaskState, state: &StreamState) -> Result<(), Violation> {
    match &task.decision {
        Some(d) if d.accepted => {}
        Some(d) => {
            return Err(Violation::new(
                Rule::CompletionNotAccepted,
                format!(
                    "task {}: the completion decision {} was not accepted ({})",
                    task.task_id,
                    d.event_id,
                    d.reasons.join("; ")
                ),
            ))
        }
        None => {
            return Err(Violation::new(
                Rule::CompletionNotAccepted,
                format!(
                    "task {} has no accepted completion decision for its current attempt",
                    task.task_id
                ),
            ))
        }
    }
    if let Some(reqs) = &task.evidence_requirements {
        let missing: Vec<&str> = reqs
            .required_artifacts
            .iter()
            .filter(|a| !state.artifacts.contains(*a))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Violation::new(
                Rule::EvidenceMissing,
                format!(
                    "task {} declared artifacts that do not exist: {}",
                    task.task_id,
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}
