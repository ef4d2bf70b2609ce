//! Session records: `capture_checkpoint` (what a resume starts from: the task's status, the
//! checklist's items, the session's artifacts and approvals) and `record_dispatch` (the ecosystem contract's
//! dispatch context).

use journal_format::payload::DispatchContext;
use journal_format::status::Lifecycle;
use journal_format::time_fmt;
use journal_projections::rules::{Rule, Violation};
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::context::{drop_nulls, event, Context, Decided};
use crate::scope::Scope;
use crate::task::known_task;

/// `capture_checkpoint`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaptureCheckpoint {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The checkpoint id; generated when absent.
    pub checkpoint_id: Option<String>,
    /// The task in progress (its state gives `statusAtCapture`).
    pub task_id: Option<String>,
    /// The run.
    pub run_id: Option<String>,
    /// Title.
    pub title: Option<String>,
    /// Summary.
    pub summary: Option<String>,
    /// Memory references.
    #[serde(default)]
    pub memory_refs: Vec<String>,
    /// A token to resume from.
    pub resume_token: Option<String>,
}

/// `record_dispatch`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordDispatch {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task dispatched, if any.
    pub task_id: Option<String>,
    /// The ecosystem contract's dispatch context.
    pub dispatch_context: DispatchContext,
}

/// `capture_checkpoint`: `checkpoint.captured`, with `statusAtCapture` from the task's state,
/// the checklist's item ids and the session's artifacts and approvals.
pub(crate) fn capture_checkpoint(
    c: &CaptureCheckpoint,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let task = c
        .task_id
        .as_deref()
        .map(|t| known_task(state, t))
        .transpose()?;
    let status = task.map_or("running", |t| checkpoint_status(t.lifecycle));
    let checkpoint_id = c
        .checkpoint_id
        .clone()
        .unwrap_or_else(|| ctx.id("checkpoint"));
    let todo_ids: Vec<&str> = state
        .checklist
        .iter()
        .flat_map(|l| l.items.iter().map(|i| i.id.as_str()))
        .collect();
    let approval_refs: Vec<&str> = state.actions.keys().collect();
    let artifact_refs: Vec<&str> = state.artifacts.iter().map(String::as_str).collect();
    let mut p = json!({
        "checkpointId": checkpoint_id,
        "statusAtCapture": status,
        "title": c.title,
        "summary": c.summary,
        "currentTaskId": c.task_id,
        "todoIds": todo_ids,
        "artifactRefs": artifact_refs,
        "memoryRefs": c.memory_refs,
        "approvalRefs": approval_refs,
        "resumeToken": c.resume_token,
    });
    drop_nulls(&mut p);
    let mut e = event(&c.scope, ctx, "checkpoint.captured", p);
    e.task_id = c.task_id.clone();
    e.run_id = c.run_id.clone();
    Ok(Decided::events(vec![e]))
}

/// `record_dispatch`: `dispatch.requested` with the dispatch context; refused for an unknown
/// task or an `initiatedAt` that is not RFC 3339.
pub(crate) fn record_dispatch(
    c: &RecordDispatch,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    if let Some(t) = &c.task_id {
        known_task(state, t)?;
    }
    let payload = serde_json::to_value(&c.dispatch_context)
        .map_err(|e| Violation::new(Rule::InvalidArguments, format!("dispatchContext: {e}")))?;
    time_fmt::parse_rfc3339_ns(&c.dispatch_context.initiated_at).map_err(|e| {
        Violation::new(
            Rule::InvalidArguments,
            format!("dispatchContext.initiatedAt: {e}"),
        )
    })?;
    let mut e = event(&c.scope, ctx, "dispatch.requested", payload);
    e.task_id = c.task_id.clone();
    Ok(Decided::events(vec![e]))
}

/// The checkpoint's `statusAtCapture` for a task's lifecycle.
fn checkpoint_status(l: Lifecycle) -> &'static str {
    use Lifecycle as L;
    match l {
        L::Queued | L::Accepted | L::Draft => "queued",
        L::Paused | L::Interrupted => "paused",
        L::WaitingPermission | L::WaitingInput => "waiting-approval",
        L::Completed | L::Archived => "completed",
        L::Failed | L::TimedOut | L::Lost => "failed",
        L::Cancelled | L::Cancelling => "cancelled",
        _ => "running",
    }
}
