//! Action commands: `require_action`, which pauses a task for a human or policy decision, and
//! `respond_action`, which resolves it (a denial also fails the tool call it gated).

use journal_format::Envelope;
use journal_projections::rules::{Rule, Violation};
use journal_projections::state::ActionState;
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::context::{drop_nulls, event, Context, Decided};
use crate::scope::Scope;
use crate::task::{known_task, refuse_terminal};

/// `require_action`: the runtime pauses for a decision.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequireAction {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The action's id.
    pub action_id: String,
    /// The task it blocks.
    pub task_id: Option<String>,
    /// The tool call it is about.
    pub tool_call_id: Option<String>,
    /// E.g. `tool_permission`.
    pub action_type: String,
    /// What the decider is asked.
    pub prompt: Option<String>,
}

/// `respond_action`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RespondAction {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The action.
    pub action_id: String,
    /// `allow` / `approve` or `deny` / `reject`, or an answer word.
    pub decision: String,
    /// Who decided.
    pub decided_by: String,
    /// A structured answer.
    pub response: Option<Value>,
}

/// `require_action`: `action.required`, blocking its task; refused for an action id the
/// stream already has or a terminal task.
pub(crate) fn require(
    c: &RequireAction,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    if let Some(task_id) = &c.task_id {
        let task = known_task(state, task_id)?;
        refuse_terminal(task, "action.required")?;
    }
    if state.actions.contains_key(&c.action_id) {
        return Err(Violation::new(
            Rule::ActionAlreadyResolved,
            format!("action {} already exists", c.action_id),
        ));
    }
    let mut payload = json!({"actionType": c.action_type, "prompt": c.prompt});
    drop_nulls(&mut payload);
    let mut e = event(&c.scope, ctx, "action.required", payload);
    e.action_id = Some(c.action_id.clone());
    e.task_id = c.task_id.clone();
    e.tool_call_id = c.tool_call_id.clone();
    Ok(Decided::events(vec![e]))
}

/// `respond_action`: `action.resolved` on the action's task, tool call and turn, and for a
/// denial the gated tool call's `tool.failed`; refused for an unknown or resolved action.
pub(crate) fn respond(
    c: &RespondAction,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let action = unresolved(state, &c.action_id)?;
    let mut payload =
        json!({"decision": c.decision, "decidedBy": c.decided_by, "response": c.response});
    drop_nulls(&mut payload);
    let mut e = event(&c.scope, ctx, "action.resolved", payload);
    e.action_id = Some(c.action_id.clone());
    e.task_id = action.task_id.clone();
    e.tool_call_id = action.tool_call_id.clone();
    e.turn_id = action.turn_id.clone();
    let mut events = vec![e];
    // A denial is never a tool success: the tool call it gated fails.
    if is_denial(&c.decision) {
        events.extend(denied_tool_call(c, action, ctx));
    }
    Ok(Decided::events(events))
}

/// The action `action_id`, refused when it was never required or is already resolved.
fn unresolved<'s>(state: &'s StreamState, action_id: &str) -> Result<&'s ActionState, Violation> {
    let action = state.actions.get(action_id).ok_or_else(|| {
        Violation::new(
            Rule::UnknownAction,
            format!("action {action_id} was never required"),
        )
    })?;
    if action.resolved_at_position.is_some() {
        return Err(Violation::new(
            Rule::ActionAlreadyResolved,
            format!(
                "action {action_id} was already resolved ({}) at position {}",
                action.decision.as_deref().unwrap_or("no decision"),
                action.resolved_at_position.unwrap_or_default()
            ),
        ));
    }
    Ok(action)
}

/// The `tool.failed` (`permission_denied`) of the tool call a denied action gated, if any.
fn denied_tool_call(c: &RespondAction, action: &ActionState, ctx: &Context) -> Option<Envelope> {
    let call = action.tool_call_id.as_ref()?;
    let mut f = event(
        &c.scope,
        ctx,
        "tool.failed",
        json!({"status": "failure", "errorType": "permission_denied", "error": format!("denied by {}", c.decided_by)}),
    );
    f.tool_call_id = Some(call.clone());
    f.task_id = action.task_id.clone();
    f.action_id = Some(c.action_id.clone());
    Some(f)
}

/// Whether a decision word refuses (`deny`, `reject`, `decline`, `cancel`, ...).
fn is_denial(decision: &str) -> bool {
    matches!(
        decision.to_ascii_lowercase().as_str(),
        "deny" | "denied" | "reject" | "rejected" | "decline" | "declined" | "cancel"
    )
}
