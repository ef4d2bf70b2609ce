//! Task commands (the Agent Runtime spec): `create_task`, `start_task`, `retry_task`, `append_task_progress`,
//! `pause_task`, `resume_task`, `cancel_task` and `operator_cancel`, `fail_task`, `link_tasks`;
//! and the checks every command about a task makes (it exists, it is not terminal, no action
//! blocks it).

use journal_format::payload::EvidenceRequirements;
use journal_format::status::Lifecycle;
use journal_format::Envelope;
use journal_projections::rules::{self, Rule, Violation};
use journal_projections::state::{StreamState, TaskState};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::context::{drop_nulls, set, task_event, with_details, Context, Decided};
use crate::scope::Scope;

/// `create_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The new task's id.
    pub task_id: String,
    /// Its title.
    pub title: Option<String>,
    /// Its objective.
    pub objective: Option<String>,
    /// Its parent task (cancellation reaches children).
    pub parent_task_id: Option<String>,
    /// The evidence it must produce before it completes.
    pub evidence_requirements: Option<EvidenceRequirements>,
}

/// A command on one task: `start_task`, `pause_task`, `resume_task`, `retry_task`,
/// `cancel_task`, `operator_cancel`, `append_task_progress`, `fail_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskCommand {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// Why (a namespaced reason class or words).
    pub reason: Option<String>,
    /// Who asks (`user`, `operator`, `policy`, `runtime`; a cancel from `agent` or `model` is
    /// refused).
    pub requested_by: Option<String>,
    /// The attempt id to open (start and retry); one is generated when absent.
    pub attempt_id: Option<String>,
    /// Progress or failure details, recorded as the payload's extra fields.
    pub details: Option<Map<String, Value>>,
}

/// `link_tasks`: a dependency edge.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkTasks {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The dependent task.
    pub task_id: String,
    /// The task it depends on.
    pub depends_on_task_id: String,
}

/// Who a cancel comes from: the requester its arguments name, or an operator (the queue runtime's
/// operator cancel, which records its own reason and native status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelBy {
    /// `cancel_task`: `requestedBy`, `user` when absent.
    Requester,
    /// `operator_cancel`.
    Operator,
}

/// `create_task`: a new task, refused when the stream already has one with that id.
pub(crate) fn create(
    c: &CreateTask,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    if state
        .tasks
        .get(&c.task_id)
        .is_some_and(|t| t.lifecycle != Lifecycle::Unknown)
    {
        return Err(Violation::new(
            Rule::TaskExists,
            format!("task {} already exists", c.task_id),
        ));
    }
    let mut payload = json!({
        "title": c.title,
        "objective": c.objective,
        "evidenceRequirements": c.evidence_requirements,
    });
    drop_nulls(&mut payload);
    let mut e = task_event(&c.scope, ctx, &c.task_id, "task.created", payload);
    e.parent_task_id = c.parent_task_id.clone();
    Ok(Decided::events(vec![e]))
}

/// `start_task`: a new attempt, refused for a running task or one an action blocks.
pub(crate) fn start(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    if task.lifecycle == Lifecycle::Running {
        return Err(Violation::new(
            Rule::AlreadyRunning,
            format!("task {} is already running", c.task_id),
        ));
    }
    if !task.pending_actions.is_empty() {
        return Err(pending(task));
    }
    checked_transition(task, "task.attempt.started")?;
    Ok(Decided::events(attempt_events(
        c,
        task,
        ctx,
        "task.started",
    )))
}

/// `retry_task`: `task.retrying` and a new attempt, for a task that failed, timed out, was
/// lost, interrupted or blocked.
pub(crate) fn retry(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    if !rules::retryable_from(task.lifecycle) {
        let rule = if task.lifecycle.is_terminal() {
            Rule::TerminalIsFinal
        } else {
            Rule::RetryNeedsFailure
        };
        return Err(Violation::new(
            rule,
            format!(
                "task {} is {} and cannot be retried; a retry needs a failed, timed-out, lost, interrupted or blocked task",
                c.task_id,
                lifecycle_word(task.lifecycle)
            ),
        ));
    }
    let mut events = vec![task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.retrying",
        reason_payload(c),
    )];
    events.extend(attempt_events(c, task, ctx, "task.started"));
    Ok(Decided::events(events))
}

/// `append_task_progress`: `task.progress` on the current attempt.
pub(crate) fn progress(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    refuse_terminal(task, "task.progress")?;
    let mut e = task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.progress",
        with_details(json!({}), c.details.as_ref()),
    );
    e.attempt_id = task.current_attempt().map(|a| a.attempt_id.clone());
    Ok(Decided::events(vec![e]))
}

/// `pause_task`: `task.paused`; a no-op for a paused task.
pub(crate) fn pause(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    if task.lifecycle == Lifecycle::Paused {
        return Ok(Decided::noop(format!(
            "task {} is already paused",
            c.task_id
        )));
    }
    checked_transition(task, "task.paused")?;
    Ok(Decided::events(vec![task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.paused",
        reason_payload(c),
    )]))
}

/// `resume_task`: `task.resumed`; a no-op for a running task, refused for a terminal one.
pub(crate) fn resume(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    if task.lifecycle.is_terminal() {
        return Err(Violation::new(
            Rule::ResumeOfTerminal,
            format!(
                "task {} is {} (terminal); a resume of a terminal task is refused — retry it to open a new attempt",
                c.task_id,
                lifecycle_word(task.lifecycle)
            ),
        ));
    }
    if task.lifecycle == Lifecycle::Running {
        return Ok(Decided::noop(format!(
            "task {} is already running; resume is a no-op",
            c.task_id
        )));
    }
    if !task.pending_actions.is_empty() {
        return Err(pending(task));
    }
    checked_transition(task, "task.resumed")?;
    Ok(Decided::events(vec![task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.resumed",
        reason_payload(c),
    )]))
}

/// `cancel_task` and `operator_cancel`: `task.cancel_requested`, then `task.cancelled`, for
/// the task and each of its unfinished descendants.
pub(crate) fn cancel(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
    from: CancelBy,
) -> Result<Decided, Violation> {
    let by = canceller(c, from)?;
    let task = known_task(state, &c.task_id)?;
    refuse_terminal(task, "task.cancel_requested")?;
    let mut ids = vec![c.task_id.clone()];
    ids.extend(state.descendants(&c.task_id).into_iter().filter(|id| {
        state
            .tasks
            .get(id)
            .is_some_and(|t| !t.lifecycle.is_terminal())
    }));
    let mut payload =
        json!({"requestedBy": by, "reason": c.reason.clone().unwrap_or_else(|| by.to_string())});
    if from == CancelBy::Operator {
        set(&mut payload, "reason", json!("queue:operator"));
    }
    let mut events = Vec::new();
    for id in &ids {
        let mut p = payload.clone();
        if id != &c.task_id {
            set(&mut p, "cancelledWith", json!(c.task_id));
        }
        events.push(task_event(&c.scope, ctx, id, "task.cancel_requested", p));
    }
    for id in &ids {
        let mut p = payload.clone();
        set(&mut p, "outcome", json!("cancelled"));
        let mut e = task_event(&c.scope, ctx, id, "task.cancelled", p);
        if from == CancelBy::Operator {
            e.native_status = Some("operator_canceled".into());
        }
        events.push(e);
    }
    Ok(Decided::events(events))
}

/// Who asks for a cancel, refused when it is agent output: cancellation comes from an
/// operator, a user or policy.
fn canceller(c: &TaskCommand, from: CancelBy) -> Result<&str, Violation> {
    let by = match from {
        CancelBy::Operator => "operator",
        CancelBy::Requester => c.requested_by.as_deref().unwrap_or("user"),
    };
    if matches!(by, "agent" | "model" | "assistant") {
        return Err(Violation::new(
            Rule::OnlyOperatorCancels,
            format!("a cancel requested by `{by}` is refused: cancellation comes from an operator, a user or policy, never from agent output"),
        ));
    }
    Ok(by)
}

/// `fail_task`: the current attempt's `task.attempt.failed`, then `task.failed`.
pub(crate) fn fail(
    c: &TaskCommand,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = known_task(state, &c.task_id)?;
    refuse_terminal(task, "task.failed")?;
    let mut events = Vec::new();
    if let Some(a) = task.current_attempt() {
        let mut e = task_event(
            &c.scope,
            ctx,
            &c.task_id,
            "task.attempt.failed",
            with_details(json!({"status": "failed"}), c.details.as_ref()),
        );
        e.attempt_id = Some(a.attempt_id.clone());
        events.push(e);
    }
    let mut p = reason_payload(c);
    set(&mut p, "outcome", json!("failed"));
    events.push(task_event(&c.scope, ctx, &c.task_id, "task.failed", p));
    Ok(Decided::events(events))
}

/// `link_tasks`: a `depends_on` edge, refused when it would close a cycle.
pub(crate) fn link(
    c: &LinkTasks,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    known_task(state, &c.task_id)?;
    known_task(state, &c.depends_on_task_id)?;
    if c.task_id == c.depends_on_task_id || state.depends(&c.depends_on_task_id, &c.task_id) {
        return Err(Violation::new(
            Rule::DependencyCycle,
            format!(
                "task {} depending on {} would close a cycle",
                c.task_id, c.depends_on_task_id
            ),
        ));
    }
    let mut e = task_event(
        &c.scope,
        ctx,
        &c.task_id,
        "task.dependency.updated",
        Value::Null,
    );
    let mut rel = Map::new();
    rel.insert("kind".into(), json!("depends_on"));
    rel.insert("fromTaskId".into(), json!(c.task_id));
    rel.insert("toTaskId".into(), json!(c.depends_on_task_id));
    e.task_relationship = Some(Box::new(rel));
    Ok(Decided::events(vec![e]))
}

/// The task `task_id` of the stream, refused when the stream has no such task.
pub(crate) fn known_task<'s>(
    state: &'s StreamState,
    task_id: &str,
) -> Result<&'s TaskState, Violation> {
    state
        .tasks
        .get(task_id)
        .filter(|t| t.lifecycle != Lifecycle::Unknown)
        .ok_or_else(|| {
            Violation::new(
                Rule::UnknownTask,
                format!("task {task_id} does not exist in this stream"),
            )
        })
}

/// Refuses `event_type` on a terminal task.
pub(crate) fn refuse_terminal(task: &TaskState, event_type: &str) -> Result<(), Violation> {
    if task.lifecycle.is_terminal() {
        return Err(Violation::new(
            Rule::TerminalIsFinal,
            format!(
                "task {} is {} (terminal); `{event_type}` is refused",
                task.task_id,
                lifecycle_word(task.lifecycle)
            ),
        ));
    }
    Ok(())
}

/// The refusal of a step on a task that waits on an action.
pub(crate) fn pending(task: &TaskState) -> Violation {
    let ids: Vec<&str> = task.pending_actions.iter().map(String::as_str).collect();
    Violation::new(
        Rule::ActionPending,
        format!(
            "task {} waits on action {}; only respond_action with that id moves it on",
            task.task_id,
            ids.join(", ")
        ),
    )
}

/// A lifecycle as the journal writes it (`timed_out`, ...).
fn lifecycle_word(l: Lifecycle) -> String {
    serde_json::to_value(l)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{l:?}"))
}

/// Refuses `event_type` when the rules forbid the step it takes the task to.
fn checked_transition(task: &TaskState, event_type: &str) -> Result<(), Violation> {
    let to = rules::target_of(event_type).unwrap_or(task.lifecycle);
    rules::check_transition(&task.task_id, task.lifecycle, to, event_type)
}

/// The payload of a lifecycle step: the reason, who asked, and the details.
fn reason_payload(c: &TaskCommand) -> Value {
    let mut p = json!({});
    if let Some(r) = &c.reason {
        set(&mut p, "reason", json!(r));
    }
    if let Some(by) = &c.requested_by {
        set(&mut p, "requestedBy", json!(by));
    }
    with_details(p, c.details.as_ref())
}

/// A new attempt: `task.attempt.started` (numbered, linked to the previous attempt) and the
/// lifecycle event `lifecycle_type`, both with the attempt's id.
fn attempt_events(
    c: &TaskCommand,
    task: &TaskState,
    ctx: &Context,
    lifecycle_type: &str,
) -> Vec<Envelope> {
    let attempt_id = c.attempt_id.clone().unwrap_or_else(|| ctx.id("attempt"));
    let number = task.attempts.len() + 1;
    let mut p = json!({"attemptNumber": number});
    if let Some(previous) = task.attempts.last() {
        set(&mut p, "previousAttemptId", json!(previous.attempt_id));
    }
    let mut started = task_event(&c.scope, ctx, &c.task_id, "task.attempt.started", p);
    started.attempt_id = Some(attempt_id.clone());
    let mut lifecycle = task_event(&c.scope, ctx, &c.task_id, lifecycle_type, reason_payload(c));
    lifecycle.attempt_id = Some(attempt_id);
    vec![started, lifecycle]
}
