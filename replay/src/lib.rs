//! Run narratives for review (docs/MODEL.md §6, the ecosystem contract's ActionTrail replay requirements).
//!
//! - [`narrative`]: the narrative of a run, task or session — steps with their canonical event
//!   ids, observed or inferred; gaps shown as gaps; the final state and why.
//! - [`text`]: the narrative for a terminal.
//! - [`html`]: the review app's pages (sessions list, session), which the static export
//!   (`journal replay --format html`, `journal export replay`) renders too.
//! - [`load`]: the events of a scope from a journal, and the narrative as of a position.
//! - [`pack`]: a session's replay or evidence pack, as files or one tar archive.
//! - [`import`]: sessions other runtimes wrote (Claude Code, Codex, OpenHands) turned into
//!   events and appended, so that they can be replayed.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod html;
pub mod import;
pub mod narrative;
pub mod pack;
pub mod text;

use std::collections::BTreeMap;

use journal_engine::{Filter, Journal};
use journal_format::status::Outcome;
use journal_format::StoredEvent;
use journal_projections::StreamState;

pub use narrative::{Narrative, Scope};

/// The events of `scope`, in position order: a session's or run's events, or a task's events
/// together with the events of its runs that do not name the task.
///
/// # Errors
/// A journal error.
pub fn events(journal: &Journal, scope: &Scope) -> journal_engine::Result<Vec<StoredEvent>> {
    let query = |filter: Filter| -> journal_engine::Result<Vec<StoredEvent>> {
        journal.query(filter)?.collect()
    };
    Ok(match scope {
        Scope::Session(id) => query(Filter {
            session: Some(id.clone()),
            ..Filter::default()
        })?,
        Scope::Run(id) => query(Filter {
            run: Some(id.clone()),
            ..Filter::default()
        })?,
        Scope::Task(id) => {
            let mut by_position: BTreeMap<u64, StoredEvent> = BTreeMap::new();
            let task_events = query(Filter {
                task: Some(id.clone()),
                ..Filter::default()
            })?;
            let runs: std::collections::BTreeSet<String> = task_events
                .iter()
                .filter_map(|e| e.envelope.run_id.clone())
                .collect();
            for e in task_events {
                by_position.insert(e.position.0, e);
            }
            for run in runs {
                for e in query(Filter {
                    run: Some(run),
                    ..Filter::default()
                })? {
                    by_position.insert(e.position.0, e);
                }
            }
            by_position.into_values().collect()
        }
    })
}

/// The narrative of `scope`, as of position `at` (the head when `None`).
///
/// # Errors
/// A journal error.
pub fn load(
    journal: &Journal,
    scope: &Scope,
    at: Option<u64>,
) -> journal_engine::Result<Narrative> {
    load_review(journal, scope, at).map(|r| r.narrative)
}

/// What the review app shows of a scope: its narrative as of a position, the rules' state of
/// its events as of the same position (tasks, attempts, decisions, approvals), and the
/// position of its newest event (the end of the time-travel control).
#[derive(Clone, Debug)]
pub struct Review {
    /// The narrative.
    pub narrative: Narrative,
    /// The rules' state.
    pub state: StreamState,
    /// The position of the scope's newest event, whatever the narrative is as of.
    pub last_position: u64,
}

/// The [`Review`] of `scope` as of position `at` (the head when `None`).
///
/// # Errors
/// A journal error.
pub fn load_review(
    journal: &Journal,
    scope: &Scope,
    at: Option<u64>,
) -> journal_engine::Result<Review> {
    let head = journal.head().position.0;
    let events = events(journal, scope)?;
    let mut narrative = narrative::build(scope, &events, at, head);
    let state = judge(&mut narrative, &events, at);
    nest_subagents(journal, &mut narrative, at, head, SUBAGENT_DEPTH_MAX)?;
    Ok(Review {
        narrative,
        state,
        last_position: events.last().map_or(0, |e| e.position.0),
    })
}

/// How deep subagents' narratives are nested (a subagent of a subagent of ...).
const SUBAGENT_DEPTH_MAX: u32 = 4;

/// Nests under each subagent step the narrative of the session it ran in
/// (`payload.childSessionId`), as the step's children, and adds its gaps to the narrative's.
fn nest_subagents(
    journal: &Journal,
    narrative: &mut Narrative,
    at: Option<u64>,
    head: u64,
    depth: u32,
) -> journal_engine::Result<()> {
    if depth == 0 {
        return Ok(());
    }
    let own = match &narrative.scope {
        Scope::Session(id) => Some(id.clone()),
        _ => None,
    };
    let mut nested_gaps = Vec::new();
    for step in narrative.steps.iter_mut().filter(|s| s.kind == "subagent") {
        let child = step
            .details
            .get("payload")
            .and_then(|p| p.get("childSessionId"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let Some(child) = child.filter(|c| Some(c) != own.as_ref()) else {
            continue;
        };
        let scope = Scope::Session(child);
        let events = events(journal, &scope)?;
        let mut nested = narrative::build(&scope, &events, at, head);
        nest_subagents(journal, &mut nested, at, head, depth - 1)?;
        step.children.extend(nested.steps);
        nested_gaps.extend(nested.gaps);
    }
    // A subagent's gaps (a call it never got a result for, ...) are the run's gaps too.
    narrative.counts.gaps += nested_gaps.len() as u64;
    narrative.gaps.extend(nested_gaps);
    Ok(())
}

/// Applies the rules (the same fold the read models use) to the events in scope: their
/// incidents, and the outcome of the task the scope ended with. Returns the state.
fn judge(narrative: &mut Narrative, events: &[StoredEvent], at: Option<u64>) -> StreamState {
    let state = StreamState::fold(
        events
            .iter()
            .filter(|e| at.is_none_or(|at| e.position.0 <= at)),
    );
    let incidents = state.all_incidents();
    let ended = narrative.final_state.event_id.as_ref().and_then(|id| {
        events
            .iter()
            .find(|e| &e.envelope.event_id == id)
            .and_then(|e| e.envelope.task_id.as_ref())
            .and_then(|task| state.tasks.get(task))
    });
    if let Some(outcome) = ended.and_then(|t| t.outcome) {
        let word = serde_json::to_value(outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        if outcome == Outcome::Unverified {
            let why: Vec<&str> = incidents
                .iter()
                .filter(|i| Some(&i.event_id) == narrative.final_state.event_id.as_ref())
                .map(|i| i.message.as_str())
                .collect();
            narrative.final_state.why = format!(
                "{}; the completion is unverified: {}",
                narrative.final_state.why,
                why.join("; ")
            );
        }
        narrative.final_state.outcome = word;
    }
    narrative.incidents = incidents;
    state
}
