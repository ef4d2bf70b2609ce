//! The narrative of a run, a task or a session: its events in log order, grouped into steps
//! (a tool call with its result, a model call, an approval with its decision, ...), each naming
//! its canonical event ids and positions, its producer and times, and whether it was observed or
//! inferred; the gaps in the record; and the final state with why it was reached.
//!
//! Nothing is smoothed over: a call with no result, a run with no terminal event, a hole or
//! reversal in a producer's `sequence`, timestamps going backwards and an approval never
//! resolved are gaps, and a run that ended with an approval unresolved is never shown completed.

mod builder;
mod ending;
mod open;
mod step;

use std::collections::BTreeMap;

use journal_format::StoredEvent;
use serde::Serialize;
use serde_json::Value;

use builder::Builder;

/// What a narrative is of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", content = "id")]
pub enum Scope {
    /// A run (`runId`).
    Run(String),
    /// A task (`taskId`) and its runs.
    Task(String),
    /// A session (`sessionId`).
    Session(String),
}

/// Whether a step is a recorded fact or derived from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// An event says so.
    Observed,
    /// Derived: from a checkpoint, a mapping of a native status, or the final state.
    Inferred,
}

/// One step of a narrative.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// What kind of step: `request`, `context`, `turn`, `model_call`, `tool_call`, `process`,
    /// `subagent`, `approval`, `lifecycle` (queued, started, paused, resumed, retrying,
    /// interrupted, completed, failed, cancelled), `attempt`, `completion`, `checkpoint`,
    /// `compaction`, `artifact`, `evidence`, `memory`, `routing`, `permission`, `cost`,
    /// `error`, or `event` (anything else).
    pub kind: String,
    /// One line saying what happened.
    pub title: String,
    /// Observed or inferred.
    pub evidence: Evidence,
    /// The canonical ids of its events, in log order.
    pub event_ids: Vec<String>,
    /// Their positions.
    pub positions: Vec<u64>,
    /// The producer (`runtimeId`, with `nativeNs` for imported events), when recorded.
    pub producer: Option<String>,
    /// The producer's time of its first event.
    pub timestamp: String,
    /// The journal's time of its first event.
    pub recorded_at: String,
    /// The ids it is about (task, run, attempt, tool call, action, ...).
    pub ids: BTreeMap<String, String>,
    /// What it carried: arguments and result, decision and decider, payloads (large outputs
    /// stay references).
    pub details: Value,
    /// Whether it is complete: `false` for a call with no result or an approval not resolved.
    pub complete: bool,
    /// For a subagent: the narrative of its own events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Step>,
}

/// A place where the record is incomplete or inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gap {
    /// `call_without_result`, `approval_unresolved`, `run_without_end`, `sequence_hole`,
    /// `sequence_reversal`, `timestamp_reversal`.
    pub kind: String,
    /// What is missing or wrong.
    pub detail: String,
    /// The events it concerns.
    pub event_ids: Vec<String>,
    /// Their positions.
    pub positions: Vec<u64>,
}

/// How the scope ended, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalState {
    /// `completed`, `failed`, `cancelled`, `waiting_approval`, `running`, ... or `unknown`.
    pub status: String,
    /// Observed (a terminal event says so) or inferred (from the last state seen).
    pub evidence: Evidence,
    /// Why: the terminal event's reason and outcome, or what keeps it from ending.
    pub why: String,
    /// The event it rests on.
    pub event_id: Option<String>,
    /// The outcome the rules give it, when a task in scope ended: `ok`, `failed`, ...;
    /// `unverified` for a completion without what it needs (see `incidents`).
    pub outcome: Option<String>,
}

/// Counts, for summaries and for checking against imports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Events in the narrative.
    pub events: u64,
    /// Steps.
    pub steps: u64,
    /// Model calls.
    pub model_calls: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Tool calls with a result.
    pub tool_results: u64,
    /// Tool calls without one.
    pub open_calls: u64,
    /// Approvals (and other required actions).
    pub approvals: u64,
    /// Subagents.
    pub subagents: u64,
    /// Compactions.
    pub compactions: u64,
    /// Context the runtime put in front of the model (`context.resolved`): shown as steps of
    /// kind `context`, never counted as requests.
    #[serde(default)]
    pub context: u64,
    /// Gaps.
    pub gaps: u64,
}

/// A narrative.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Narrative {
    /// Its scope.
    pub scope: Scope,
    /// The position it is as of (`--at`), or the head it was built at.
    pub as_of: u64,
    /// What was requested (turn inputs, task objectives), in order; context the runtime
    /// injected is a step of kind `context`, not a request.
    pub requested: Vec<String>,
    /// The steps, in log order.
    pub steps: Vec<Step>,
    /// The gaps.
    pub gaps: Vec<Gap>,
    /// How it ended.
    pub final_state: FinalState,
    /// Facts in scope that broke a rule of docs/MODEL.md §4 (kept, and shown).
    pub incidents: Vec<journal_projections::state::Incident>,
    /// Counts.
    pub counts: Counts,
}

/// `events` without those a later one supersedes (`supersedes`: a later state of the same
/// fact, recorded as an event of its own): each fact is told once, in its latest state, where
/// that state stands in the log. (An import appends a revision among the events of the grown
/// source around it, which is where a fresh import of the whole source tells it.)
fn latest_states(events: Vec<&StoredEvent>) -> Vec<&StoredEvent> {
    // Each superseded fact's latest state, by the id of the fact's first event.
    let mut latest: BTreeMap<&str, &str> = BTreeMap::new();
    for event in &events {
        if let Some(first) = event.envelope.supersedes() {
            latest.insert(first, event.envelope.event_id.as_str());
        }
    }
    if latest.is_empty() {
        return events;
    }
    events
        .into_iter()
        .filter(|event| {
            let e = &event.envelope;
            let fact = e.supersedes().unwrap_or(e.event_id.as_str());
            latest.get(fact).is_none_or(|last| *last == e.event_id)
        })
        .collect()
}

/// Builds the narrative of `scope` from its `events` (in position order; see [`crate::load`]),
/// skipping events after `at` when given. `head` is the position the events were read up to.
#[must_use]
pub fn build(scope: &Scope, events: &[StoredEvent], at: Option<u64>, head: u64) -> Narrative {
    let events = latest_states(
        events
            .iter()
            .filter(|e| at.is_none_or(|at| e.position.0 <= at))
            .collect(),
    );
    let mut builder = Builder::new(scope);
    for event in &events {
        builder.add(event);
    }
    builder.finish(events.last().copied(), at.unwrap_or(head).min(head))
}
