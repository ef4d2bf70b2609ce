//! Turn commands: `submit_turn` (accepted, or queued behind the thread's active turn) and
//! `interrupt_turn`.

use journal_projections::rules::{Rule, Violation};
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::context::{event, Context, Decided};
use crate::scope::Scope;

/// `submit_turn`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitTurn {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The turn's id.
    pub turn_id: String,
    /// The input parts.
    pub input: Value,
}

/// `interrupt_turn`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptTurn {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The turn; the thread's active turn when absent.
    pub turn_id: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// `submit_turn`: `turn.submitted`, `queued` when the thread has an active turn, else
/// `accepted`; refused for a turn id already submitted.
pub(crate) fn submit(
    c: &SubmitTurn,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    if state.turns.contains_key(&c.turn_id) {
        return Err(Violation::new(
            Rule::TurnExists,
            format!("turn {} was already submitted", c.turn_id),
        ));
    }
    let busy = state.turns.values().any(|t| {
        t.thread_id == c.scope.thread_id && matches!(t.status.as_str(), "submitted" | "running")
    });
    let mut e = event(&c.scope, ctx, "turn.submitted", json!({"input": c.input}));
    e.turn_id = Some(c.turn_id.clone());
    e.status = Some(if busy { "queued" } else { "accepted" }.into());
    Ok(Decided::events(vec![e]))
}

/// `interrupt_turn`: `turn.failed` with status `interrupted` for the turn (the thread's active
/// turn when none is named); a no-op when no turn is active.
pub(crate) fn interrupt(
    c: &InterruptTurn,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let active = state.turns.values().find(|t| {
        c.turn_id.as_ref().is_none_or(|id| &t.turn_id == id)
            && (c.scope.thread_id.is_none() || t.thread_id == c.scope.thread_id)
            && matches!(t.status.as_str(), "submitted" | "running")
    });
    let Some(turn) = active else {
        return Ok(Decided::noop(
            "no active turn to interrupt; interrupt is a no-op",
        ));
    };
    let mut e = event(
        &c.scope,
        ctx,
        "turn.failed",
        json!({"reason": c.reason.clone().unwrap_or_else(|| "interrupted".into())}),
    );
    e.turn_id = Some(turn.turn_id.clone());
    e.thread_id = turn.thread_id.clone().or(e.thread_id);
    e.status = Some("interrupted".into());
    Ok(Decided::events(vec![e]))
}
