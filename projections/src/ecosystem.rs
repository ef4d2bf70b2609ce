//! The ecosystem views of a session (the ecosystem contract of docs/MODEL.md): AgentSession, AgentRun, AgentTask, AgentTodo,
//! AgentApprovalCheckpoint, AgentActionLog and AgentCheckpoint, in the contract's own words and
//! status vocabularies, composed from the stored projections of the session's stream.
//!
//! A status the facts do not determine is `unknown`; nothing is assumed from the absence of a
//! fact (a run with no terminal event is not `completed`, an unresolved approval is `pending`).

use journal_format::status::{ChecklistItemStatus, Lifecycle};
use serde::Serialize;
use serde_json::Value;

use crate::activity::{Activity, At, Call};
use crate::state::{StreamState, TaskState};
use crate::views::{Known, Missing};

/// AgentSession.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSession {
    /// The session.
    pub session_id: Known<String>,
    /// The product.
    pub product_id: Known<String>,
    /// The user.
    pub user_id: Known<String>,
    /// `active`, `paused`, `waiting-approval`, `completed`, `failed`, `cancelled`, or
    /// `unknown`: the session's own recorded status when one was recorded; otherwise
    /// `waiting-approval` while an approval is pending, `active` while a task runs, `paused`
    /// when every unfinished task is paused.
    pub status: String,
    /// The producer's time of the first event.
    pub started_at: Known<String>,
    /// The producer's time of the newest event.
    pub updated_at: Known<String>,
    /// Whether a resume point was recorded (a checkpoint or a snapshot).
    pub resumable: bool,
    /// The newest unfinished task.
    pub current_task_id: Known<String>,
    /// Memory references of the newest checkpoint.
    pub memory_refs: Vec<String>,
    /// Artifacts recorded.
    pub artifact_refs: Vec<String>,
    /// Approvals (required actions) recorded.
    pub approval_refs: Vec<String>,
    /// The newest dispatch context.
    pub dispatch_context: Known<Value>,
}

/// AgentTask.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentTask {
    /// The task.
    pub task_id: String,
    /// Its session.
    pub session_id: Known<String>,
    /// Its title.
    pub title: Known<String>,
    /// Its intent (objective).
    pub intent: Known<String>,
    /// `queued`, `running`, `blocked`, `completed`, `failed`, `cancelled`, or `unknown`.
    pub status: String,
    /// Its priority.
    pub priority: Known<Value>,
    /// When it was created.
    pub created_at: Known<String>,
    /// Its newest event's time.
    pub updated_at: Known<String>,
}

/// AgentTodo: a checklist item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentTodo {
    /// The item's id.
    pub todo_id: String,
    /// Its session.
    pub session_id: Known<String>,
    /// Its text.
    pub text: String,
    /// `open`, `in-progress`, `done` or `dropped`.
    pub status: String,
    /// When the checklist was created.
    pub created_at: Known<String>,
    /// When the checklist last changed.
    pub updated_at: Known<String>,
}

/// AgentRun.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentRun {
    /// The run.
    pub run_id: String,
    /// Its session.
    pub session_id: Known<String>,
    /// Its task.
    pub task_id: Known<String>,
    /// `queued`, `running`, `paused`, `waiting-approval`, `completed`, `failed`,
    /// `cancelled`, or `unknown`.
    pub status: String,
    /// Its first event.
    pub started: At,
    /// The event that ended it.
    pub ended: Known<At>,
}

/// AgentApprovalCheckpoint: a required action and its resolution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentApprovalCheckpoint {
    /// The action.
    pub approval_id: String,
    /// The task it blocks.
    pub task_id: Known<String>,
    /// The tool call it is about.
    pub tool_call_id: Known<String>,
    /// What kind of decision.
    pub kind: Known<String>,
    /// `pending` until resolved; then the decision's word.
    pub status: String,
    /// Who decided.
    pub decided_by: Known<String>,
    /// Where it was required.
    pub requested_at_position: u64,
    /// Where it was resolved.
    pub resolved_at_position: Known<u64>,
}

/// One entry of AgentActionLog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentAction {
    /// `tool_call`, `model_call`, `process`, `subagent` or `job`.
    pub kind: String,
    /// The id of the call.
    pub id: String,
    /// Its name (tool, model, role), when recorded.
    pub name: Known<String>,
    /// `open` until its end is recorded; then the end's word.
    pub status: String,
    /// Its first event.
    pub started: At,
    /// The event that ended it.
    pub ended: Known<At>,
    /// Its output, by reference.
    pub output_ref: Known<String>,
}

/// AgentCheckpoint.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCheckpoint {
    /// Where it was captured.
    pub at: At,
    /// The producer's time.
    pub created_at: String,
    /// Its session.
    pub session_id: Known<String>,
    /// Its run.
    pub run_id: Known<String>,
    /// The recorded checkpoint (`checkpointId`, `statusAtCapture`, refs, ...).
    pub checkpoint: Known<Value>,
}

/// The seven views of one session.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ecosystem {
    /// AgentSession.
    pub session: AgentSession,
    /// AgentTask, one per task.
    pub tasks: Vec<AgentTask>,
    /// AgentTodo, one per checklist item.
    pub todos: Vec<AgentTodo>,
    /// AgentRun, one per run.
    pub runs: Vec<AgentRun>,
    /// AgentApprovalCheckpoint, one per required action.
    pub approvals: Vec<AgentApprovalCheckpoint>,
    /// AgentActionLog, in the order the actions started.
    pub action_log: Vec<AgentAction>,
    /// AgentCheckpoint, in order.
    pub checkpoints: Vec<AgentCheckpoint>,
}

fn task_status(lifecycle: Lifecycle) -> &'static str {
    match lifecycle {
        Lifecycle::Draft | Lifecycle::Accepted | Lifecycle::Queued => "queued",
        Lifecycle::Preparing | Lifecycle::Running | Lifecycle::Retrying | Lifecycle::Cancelling => {
            "running"
        }
        Lifecycle::WaitingInput
        | Lifecycle::WaitingPermission
        | Lifecycle::WaitingResource
        | Lifecycle::Blocked
        | Lifecycle::Paused => "blocked",
        Lifecycle::Completed | Lifecycle::Archived => "completed",
        Lifecycle::Failed | Lifecycle::TimedOut | Lifecycle::Lost | Lifecycle::Interrupted => {
            "failed"
        }
        Lifecycle::Cancelled => "cancelled",
        Lifecycle::Stale | Lifecycle::Unknown => "unknown",
    }
}

/// A run's status: its end when recorded, else what its task is doing.
fn run_status(run: &Call, task: Option<&TaskState>) -> &'static str {
    match run.status.as_str() {
        "completed" => return "completed",
        "failed" | "timed_out" | "lost" => return "failed",
        "cancelled" | "canceled" => return "cancelled",
        _ => {}
    }
    match task.map(|t| t.lifecycle) {
        Some(Lifecycle::WaitingPermission | Lifecycle::WaitingInput) => "waiting-approval",
        Some(Lifecycle::Paused) => "paused",
        Some(Lifecycle::Queued | Lifecycle::Accepted | Lifecycle::Draft) => "queued",
        Some(l) if !l.is_terminal() && l != Lifecycle::Unknown => "running",
        _ => "unknown",
    }
}

fn action(kind: &str, id: &str, call: &Call) -> AgentAction {
    AgentAction {
        kind: kind.to_string(),
        id: id.to_string(),
        name: call.name.clone().into(),
        status: call.status.clone(),
        started: call.started.clone(),
        ended: call.ended.clone().into(),
        output_ref: call.output_ref.clone().into(),
    }
}

/// The ecosystem views of a session's stream.
#[must_use]
pub fn views(state: &StreamState, activity: &Activity) -> Ecosystem {
    let session_id: Known<String> = activity.session_id.clone().into();
    Ecosystem {
        session: session(state, activity),
        tasks: state.tasks.values().map(agent_task).collect(),
        todos: todos(state, &session_id),
        runs: runs(state, activity, &session_id),
        approvals: state
            .actions
            .values()
            .map(|a| AgentApprovalCheckpoint {
                approval_id: a.action_id.clone(),
                task_id: a.task_id.clone().into(),
                tool_call_id: a.tool_call_id.clone().into(),
                kind: a.action_type.clone().into(),
                status: a.decision.clone().unwrap_or_else(|| "pending".into()),
                decided_by: a.decided_by.clone().into(),
                requested_at_position: a.required_at_position,
                resolved_at_position: a.resolved_at_position.into(),
            })
            .collect(),
        action_log: action_log(activity),
        checkpoints: checkpoints(activity, &session_id),
    }
}

/// AgentSession: the session's ids and times, its status, its current task, and its resume
/// point's references.
fn session(state: &StreamState, activity: &Activity) -> AgentSession {
    let unfinished: Vec<&TaskState> = state.active_tasks().collect();
    let newest_checkpoint = activity.checkpoints.last().and_then(|c| c.payload.as_ref());
    let memory_refs = newest_checkpoint
        .and_then(|p| p.get("memoryRefs"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    AgentSession {
        session_id: activity.session_id.clone().into(),
        product_id: activity.product_id.clone().into(),
        user_id: activity.user_id.clone().into(),
        status: session_status(state, activity, &unfinished).to_string(),
        started_at: activity.first_timestamp.clone().into(),
        updated_at: activity.last_timestamp.clone().into(),
        resumable: !activity.checkpoints.is_empty() || !activity.snapshots.is_empty(),
        current_task_id: unfinished
            .iter()
            .max_by_key(|t| t.attempts.last().map_or(0, |a| a.started_at_position))
            .map(|t| t.task_id.clone())
            .into(),
        memory_refs,
        artifact_refs: activity.artifacts.keys().map(str::to_owned).collect(),
        approval_refs: state.actions.keys().map(str::to_owned).collect(),
        dispatch_context: activity.dispatch_context.clone().into(),
    }
}

/// The session's status: its own recorded status; else `waiting-approval` while an approval is
/// pending, `paused` when every unfinished task is paused, `active` while one is not.
fn session_status(
    state: &StreamState,
    activity: &Activity,
    unfinished: &[&TaskState],
) -> &'static str {
    match activity.session_status.as_deref() {
        Some("active") => "active",
        Some("paused") => "paused",
        Some("completed") => "completed",
        Some("failed") => "failed",
        Some("cancelled") => "cancelled",
        Some("waiting-approval" | "waiting_approval") => "waiting-approval",
        _ if state.actions.values().any(|a| a.decision.is_none()) => "waiting-approval",
        _ if !unfinished.is_empty()
            && unfinished.iter().all(|t| t.lifecycle == Lifecycle::Paused) =>
        {
            "paused"
        }
        _ if !unfinished.is_empty() => "active",
        _ => "unknown",
    }
}

/// AgentTask of a task.
fn agent_task(t: &TaskState) -> AgentTask {
    AgentTask {
        task_id: t.task_id.clone(),
        session_id: t.session_id.clone().into(),
        title: t.title.clone().into(),
        intent: t.objective.clone().into(),
        status: task_status(t.lifecycle).to_string(),
        priority: t.priority.clone().into(),
        created_at: t.created_at.clone().into(),
        updated_at: t.updated_at.clone().into(),
    }
}

/// AgentTodo, one per item of the session's checklist.
fn todos(state: &StreamState, session_id: &Known<String>) -> Vec<AgentTodo> {
    let Some(c) = &state.checklist else {
        return Vec::new();
    };
    c.items
        .iter()
        .map(|i| AgentTodo {
            todo_id: i.id.clone(),
            session_id: session_id.clone(),
            text: i.title.clone(),
            status: match i.status {
                ChecklistItemStatus::Pending => "open",
                ChecklistItemStatus::InProgress => "in-progress",
                ChecklistItemStatus::Completed => "done",
                ChecklistItemStatus::Removed => "dropped",
            }
            .to_string(),
            created_at: c.created_at.clone().into(),
            updated_at: c.updated_at.clone().into(),
        })
        .collect()
}

/// AgentRun, one per run, its status from its end or its task.
fn runs(state: &StreamState, activity: &Activity, session_id: &Known<String>) -> Vec<AgentRun> {
    activity
        .runs
        .iter()
        .map(|(id, run)| {
            // A run's `name` is the task it runs.
            let task = run.name.as_ref().and_then(|t| state.tasks.get(t));
            AgentRun {
                run_id: id.to_owned(),
                session_id: session_id.clone(),
                task_id: run.name.clone().into(),
                status: run_status(run, task).to_string(),
                started: run.started.clone(),
                ended: run.ended.clone().into(),
            }
        })
        .collect()
}

/// AgentActionLog: every tool call, model call, process, subagent and job, in the order they
/// started.
fn action_log(activity: &Activity) -> Vec<AgentAction> {
    let mut log: Vec<AgentAction> = [
        ("tool_call", &activity.tool_calls),
        ("model_call", &activity.model_calls),
        ("process", &activity.processes),
        ("subagent", &activity.subagents),
        ("job", &activity.jobs),
    ]
    .into_iter()
    .flat_map(|(kind, calls)| calls.iter().map(move |(id, c)| action(kind, id, c)))
    .collect();
    log.sort_by_key(|a| a.started.position);
    log
}

/// AgentCheckpoint, one per checkpoint, in order.
fn checkpoints(activity: &Activity, session_id: &Known<String>) -> Vec<AgentCheckpoint> {
    activity
        .checkpoints
        .iter()
        .map(|c| AgentCheckpoint {
            at: c.at.clone(),
            created_at: c.timestamp.clone(),
            session_id: session_id.clone(),
            run_id: c.run_id.clone().into(),
            checkpoint: c
                .payload
                .clone()
                .map_or(Known::Missing(Missing::Unknown), Known::Value),
        })
        .collect()
}
