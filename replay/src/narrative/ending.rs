//! How a narrative ends: the gaps its open steps leave (a call with no result, an approval
//! never resolved, a run with no terminal event) and its final state with why it was reached.

use journal_format::StoredEvent;

use super::open::Open;
use super::step::{evidence_of, payload_str};
use super::{Evidence, FinalState, Gap, Step};

/// Whether a lifecycle word or status ends a task or run.
pub(super) fn is_terminal(word: &str) -> bool {
    matches!(
        word,
        "completed" | "failed" | "cancelled" | "timed out" | "timed_out" | "lost" | "archived"
    )
}

/// A gap for each step still open: tool and model calls without a result, then approvals
/// never resolved (each in the order of its id).
pub(super) fn open_step_gaps(open: &Open, steps: &[Step]) -> Vec<Gap> {
    let calls = open.tools.iter().map(|(id, i)| {
        (
            i,
            "call_without_result",
            format!("tool call {id} has no result"),
        )
    });
    let models = open.models.iter().map(|(id, i)| {
        let detail = format!("model request {id} has no result");
        (i, "call_without_result", detail)
    });
    let actions = open.actions.iter().map(|(id, i)| {
        let detail = format!("action {id} was required and never resolved");
        (i, "approval_unresolved", detail)
    });
    calls
        .chain(models)
        .chain(actions)
        .filter_map(|(i, kind, detail)| {
            steps.get(*i).map(|s| Gap {
                kind: kind.into(),
                detail,
                event_ids: s.event_ids.clone(),
                positions: s.positions.clone(),
            })
        })
        .collect()
}

/// The gap of a run with no terminal event, at its `last` event.
pub(super) fn run_without_end(last: &StoredEvent) -> Gap {
    Gap {
        kind: "run_without_end".into(),
        detail: "the run has no terminal event".into(),
        event_ids: vec![last.envelope.event_id.clone()],
        positions: vec![last.position.0],
    }
}

/// The final state: a terminal event says it; an approval never resolved (`unresolved`, the
/// index of its step) overrides a completion (never shown completed); otherwise it is inferred
/// from the last lifecycle state seen.
pub(super) fn final_state(
    last_lifecycle: Option<(&'static str, &StoredEvent)>,
    steps: &[Step],
    unresolved: Option<usize>,
) -> FinalState {
    match (last_lifecycle, unresolved) {
        (_, Some(i)) => waiting_approval(steps.get(i)),
        (Some((word, event)), None) if is_terminal(word) => ended(word, event),
        (Some((word, event)), None) => FinalState {
            status: match word {
                "paused" => "paused",
                "queued" | "created" | "accepted" => "queued",
                _ => "running",
            }
            .into(),
            evidence: Evidence::Inferred,
            why: format!(
                "no terminal event; the last lifecycle event is {}",
                event.envelope.event_type
            ),
            event_id: Some(event.envelope.event_id.clone()),
            outcome: None,
        },
        (None, None) => FinalState {
            status: "unknown".into(),
            evidence: Evidence::Inferred,
            why: "no lifecycle event recorded".into(),
            event_id: None,
            outcome: None,
        },
    }
}

/// Waiting on the approval of step `approval`.
fn waiting_approval(approval: Option<&Step>) -> FinalState {
    FinalState {
        status: "waiting_approval".into(),
        evidence: Evidence::Inferred,
        why: format!(
            "an approval was required and never resolved{}",
            approval
                .map(|s| format!(": {}", s.title))
                .unwrap_or_default()
        ),
        event_id: approval.and_then(|s| s.event_ids.first().cloned()),
        outcome: None,
    }
}

/// Ended as the terminal lifecycle `event` (its `word`) says, with its reason or outcome.
fn ended(word: &str, event: &StoredEvent) -> FinalState {
    let reason = payload_str(event, "reason")
        .or_else(|| payload_str(event, "outcome"))
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    FinalState {
        status: word.replace(' ', "_"),
        evidence: evidence_of(event),
        why: format!("{} recorded{reason}", event.envelope.event_type),
        event_id: Some(event.envelope.event_id.clone()),
        outcome: None,
    }
}
