//! The read models of docs/MODEL.md §5, composed at read time from the stored projections of a
//! stream ([`StreamState`] and [`Activity`]): the session snapshot, thread, task, run,
//! checklist, queue and evidence views.
//!
//! A field no recorded fact has set is [`Known::Missing`] (`"unknown"`, `"unavailable"` or
//! `"not_applicable"`), never a guess: a task completed without an accepted decision shows
//! outcome `unverified` and its incident, a tool call with no result is `open`.

use std::collections::BTreeMap;

use journal_format::payload::ChecklistItem;
use journal_format::status::{Lifecycle, Outcome};
use serde::Serialize;

use crate::activity::{
    Activity, ArtifactSummary, At, Boundary, Call, Cost, EvidenceSummary, Permissions, Routing,
    ThreadSummary,
};
use crate::id_map::IdMap;
use crate::state::{
    ActionState, Attempt, Decision, Incident, ScheduleState, StreamState, TaskState,
};

/// Why a value is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// No fact says.
    Unknown,
    /// A fact says it exists, but it cannot be read (for example a blob not stored).
    Unavailable,
    /// It has no meaning here (for example the outcome of a task still running).
    NotApplicable,
}

/// A value a fact set, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Known<T> {
    /// What the facts say.
    Value(T),
    /// Why nothing is said.
    Missing(Missing),
}

impl<T> From<Option<T>> for Known<T> {
    fn from(value: Option<T>) -> Known<T> {
        value.map_or(Known::Missing(Missing::Unknown), Known::Value)
    }
}

/// Counts of calls by status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallCounts {
    /// All calls.
    pub total: u64,
    /// Calls with no end recorded.
    pub open: u64,
    /// By end word (`succeeded`, `failed`, `completed`, ...).
    pub by_status: BTreeMap<String, u64>,
    /// The open calls' ids.
    pub open_ids: Vec<String>,
}

impl CallCounts {
    fn of(calls: &IdMap<Call>) -> CallCounts {
        let mut c = CallCounts::default();
        for (id, call) in calls {
            c.total += 1;
            if call.ended.is_none() {
                c.open += 1;
                c.open_ids.push(id.to_owned());
            } else {
                *c.by_status.entry(call.status.clone()).or_insert(0) += 1;
            }
        }
        c
    }
}

/// Cost totals; `unknown` where no `cost.recorded` gave the figure.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostView {
    /// `cost.recorded` events.
    pub records: u64,
    /// Input tokens.
    pub input_tokens: Known<u64>,
    /// Output tokens.
    pub output_tokens: Known<u64>,
    /// US dollars.
    pub cost_usd: Known<f64>,
}

/// Routing and limit summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingView {
    /// Routing decisions recorded.
    pub decisions: u64,
    /// The newest selected model.
    pub selected_model: Known<String>,
    /// The newest candidate count.
    pub candidate_count: Known<u64>,
    /// Whether the newest routing had a single candidate.
    pub single_candidate: Known<bool>,
    /// Fallbacks applied.
    pub fallbacks: u64,
    /// Routings that were not possible.
    pub not_possible: u64,
    /// Limit, rate-limit and quota events, in order.
    pub limit_events: Vec<(String, At)>,
}

/// Permission and sandbox summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionView {
    /// `permission.requested` events.
    pub requested: u64,
    /// `permission.resolved` decisions by word.
    pub resolved: BTreeMap<String, u64>,
    /// `permission.evaluated` events.
    pub evaluated: u64,
    /// The newest sandbox profile applied.
    pub sandbox_profile: Known<serde_json::Value>,
    /// `sandbox.violation` events.
    pub sandbox_violations: Vec<At>,
}

/// A task as the task snapshot shows it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSnapshot {
    /// The task.
    pub task_id: String,
    /// Its stream.
    pub stream: String,
    /// Its session.
    pub session_id: Known<String>,
    /// Its title.
    pub title: Known<String>,
    /// Its objective.
    pub objective: Known<String>,
    /// The thread it was first seen in.
    pub thread_id: Known<String>,
    /// The turn it was first seen in.
    pub turn_id: Known<String>,
    /// Where it stands (`unknown` when only mentioned).
    pub lifecycle: Lifecycle,
    /// How it ended: `not_applicable` while not terminal, `unverified` when it completed
    /// without what its completion needs.
    pub outcome: Known<Outcome>,
    /// The reason class of its last step.
    pub reason: Known<String>,
    /// Attempts, oldest first.
    pub attempts: Vec<Attempt>,
    /// The current attempt.
    pub current_attempt_id: Known<String>,
    /// Graph edges: parent.
    pub parent_task_id: Known<String>,
    /// Graph edges: children.
    pub children: Vec<String>,
    /// Graph edges: dependencies.
    pub depends_on: Vec<String>,
    /// The completion decision.
    pub decision: Known<Decision>,
    /// Delivery state: `pending_action` while an action blocks it, `cancel_requested`,
    /// `delivered` once terminal, else `in_progress` (or `unknown`).
    pub delivery_state: String,
    /// Actions blocking it.
    pub pending_actions: Vec<String>,
    /// Facts about it that broke a rule.
    pub incidents: Vec<Incident>,
}

impl TaskSnapshot {
    /// The snapshot of `task` in stream `stream`.
    #[must_use]
    pub fn of(stream: &str, task: &TaskState) -> TaskSnapshot {
        let outcome = if task.lifecycle.is_terminal() {
            Known::from(task.outcome)
        } else {
            Known::Missing(Missing::NotApplicable)
        };
        let delivery_state = if !task.pending_actions.is_empty() {
            "pending_action"
        } else if task.lifecycle.is_terminal() {
            "delivered"
        } else if task.cancel_requested {
            "cancel_requested"
        } else if task.lifecycle == Lifecycle::Unknown {
            "unknown"
        } else {
            "in_progress"
        };
        TaskSnapshot {
            task_id: task.task_id.clone(),
            stream: stream.to_string(),
            session_id: task.session_id.clone().into(),
            title: task.title.clone().into(),
            objective: task.objective.clone().into(),
            thread_id: task.thread_id.clone().into(),
            turn_id: task.turn_id.clone().into(),
            lifecycle: task.lifecycle,
            outcome,
            reason: task.reason.clone().into(),
            attempts: task.attempts.clone(),
            current_attempt_id: task.current_attempt().map(|a| a.attempt_id.clone()).into(),
            parent_task_id: task.parent_task_id.clone().into(),
            children: task.children.clone(),
            depends_on: task.depends_on.iter().cloned().collect(),
            decision: task.decision.clone().into(),
            delivery_state: delivery_state.to_string(),
            pending_actions: task.pending_actions.iter().cloned().collect(),
            incidents: task.incidents.clone(),
        }
    }
}

/// Tasks by where they stand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Not terminal.
    pub active: u64,
    /// Completed with outcome ok.
    pub completed: u64,
    /// Completed but unverified.
    pub unverified: u64,
    /// Failed, timed out or lost.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

/// The session checklist (the session runtime).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChecklistView {
    /// The items, in order.
    pub items: Vec<ChecklistItem>,
    /// Whether the verification nudge is raised.
    pub verification_nudge_needed: bool,
    /// The event that last set it.
    pub event_id: String,
}

/// The evidence summary of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceView {
    /// Evidence by id.
    pub evidence: BTreeMap<String, EvidenceSummary>,
    /// Artifacts by id or path.
    pub artifacts: BTreeMap<String, ArtifactSummary>,
    /// Per task with declared requirements: the required artifacts that do not exist.
    pub missing_by_task: BTreeMap<String, Vec<String>>,
}

/// The queue snapshot of a stream (the queue runtime).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// Tasks queued, not yet started.
    pub queued: Vec<String>,
    /// Tasks running or waiting.
    pub active: Vec<String>,
    /// Schedules by id.
    pub schedules: BTreeMap<String, ScheduleState>,
    /// Sensor dedupe keys seen.
    pub sensor_dedupe_keys: u64,
    /// `queue.changed` events.
    pub queue_changes: u64,
}

/// The thread read model.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadView {
    /// The thread.
    pub thread_id: String,
    /// Its stream.
    pub stream: String,
    /// Its status, as the last `thread.*` event gave it.
    pub status: Known<String>,
    /// The newest turn.
    pub active_turn_id: Known<String>,
    /// Its turns.
    pub turns: Vec<crate::activity::TurnSummary>,
    /// Actions required in this thread's stream and not resolved.
    pub pending_requests: Vec<ActionState>,
    /// Turns submitted and not yet started.
    pub queued_turns: Vec<String>,
}

impl ThreadView {
    fn of(stream: &str, id: &str, thread: &ThreadSummary, state: &StreamState) -> ThreadView {
        ThreadView {
            thread_id: id.to_string(),
            stream: stream.to_string(),
            status: thread.status.clone().into(),
            active_turn_id: thread.active_turn_id.clone().into(),
            turns: thread.turns.clone(),
            pending_requests: state
                .actions
                .values()
                .filter(|a| a.decision.is_none())
                .cloned()
                .collect(),
            queued_turns: thread
                .turns
                .iter()
                .filter(|t| t.status == "submitted")
                .map(|t| t.turn_id.clone())
                .collect(),
        }
    }
}

/// A run (the ecosystem's AgentRun).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its stream.
    pub stream: String,
    /// Its task, when an event said.
    pub task_id: Known<String>,
    /// `open` until a terminal `run.status`; then its word.
    pub status: String,
    /// The first event of the run.
    pub started: At,
    /// The event that ended it.
    pub ended: Known<At>,
}

/// The session snapshot: everything known of one session.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSnapshot {
    /// The stream.
    pub stream: String,
    /// The session.
    pub session_id: Known<String>,
    /// Its runtime.
    pub runtime_id: Known<String>,
    /// The status word of the newest `session.*` event that gave one.
    pub status: Known<String>,
    /// Events in the stream.
    pub events: u64,
    /// The first event.
    pub first: Known<At>,
    /// The newest event.
    pub last: Known<At>,
    /// The producer's time of the first event.
    pub started_at: Known<String>,
    /// The producer's time of the newest event.
    pub updated_at: Known<String>,
    /// Threads.
    pub threads: Vec<ThreadView>,
    /// Tasks.
    pub tasks: Vec<TaskSnapshot>,
    /// Tasks by where they stand.
    pub task_summary: TaskSummary,
    /// The checklist.
    pub checklist: Known<ChecklistView>,
    /// Actions required and not resolved.
    pub pending_actions: Vec<ActionState>,
    /// Model calls.
    pub model_calls: CallCounts,
    /// Tool calls.
    pub tool_calls: CallCounts,
    /// Processes.
    pub processes: CallCounts,
    /// Subagents and jobs (the Agent Runtime spec's subagent and job summary).
    pub subagents: CallCounts,
    /// Jobs.
    pub jobs: CallCounts,
    /// Runs.
    pub runs: CallCounts,
    /// Channels by id, with their newest state word.
    pub channels: BTreeMap<String, String>,
    /// Permission and sandbox summary.
    pub permissions: PermissionView,
    /// Routing and limit summary.
    pub routing: RoutingView,
    /// Context boundary snapshot: compactions in order.
    pub context_boundaries: Vec<Boundary>,
    /// Artifact checkpoint summary: checkpoints captured and snapshots written.
    pub checkpoints: Vec<crate::activity::CheckpointRecord>,
    /// Snapshots written, with their schema.
    pub snapshots: Vec<(At, Option<String>)>,
    /// The evidence summary.
    pub evidence: EvidenceView,
    /// Cost totals.
    pub cost: CostView,
    /// Trace ids.
    pub trace_ids: Vec<String>,
    /// Events by family.
    pub by_family: BTreeMap<String, u64>,
    /// Facts that broke a rule: on tasks and on the session.
    pub incidents: Vec<Incident>,
}

/// The evidence view of a stream.
#[must_use]
pub fn evidence(state: &StreamState, activity: &Activity) -> EvidenceView {
    let missing_by_task = state
        .tasks
        .values()
        .filter_map(|t| {
            let req = t.evidence_requirements.as_ref()?;
            let missing: Vec<String> = req
                .required_artifacts
                .iter()
                .filter(|a| !state.artifacts.contains(*a))
                .cloned()
                .collect();
            Some((t.task_id.clone(), missing))
        })
        .collect();
    EvidenceView {
        evidence: activity.evidence.to_ordered(),
        artifacts: activity.artifacts.to_ordered(),
        missing_by_task,
    }
}

/// The queue view of a stream.
#[must_use]
pub fn queue(state: &StreamState, activity: &Activity) -> QueueView {
    QueueView {
        queued: state
            .tasks
            .values()
            .filter(|t| t.lifecycle == Lifecycle::Queued)
            .map(|t| t.task_id.clone())
            .collect(),
        active: state
            .active_tasks()
            .filter(|t| t.lifecycle != Lifecycle::Queued)
            .map(|t| t.task_id.clone())
            .collect(),
        schedules: state.schedules.clone(),
        sensor_dedupe_keys: state.sensor_keys.len() as u64,
        queue_changes: activity.queue_changes,
    }
}

/// The checklist view of a stream.
#[must_use]
pub fn checklist(state: &StreamState) -> Known<ChecklistView> {
    state
        .checklist
        .as_ref()
        .map(|c| ChecklistView {
            items: c.items.clone(),
            verification_nudge_needed: c.verification_nudge_needed,
            event_id: c.event_id.clone(),
        })
        .into()
}

/// The thread view of `id` in a stream.
#[must_use]
pub fn thread(
    stream: &str,
    id: &str,
    state: &StreamState,
    activity: &Activity,
) -> Option<ThreadView> {
    activity
        .threads
        .get(id)
        .map(|t| ThreadView::of(stream, id, t, state))
}

/// The run view of `id` in a stream.
#[must_use]
pub fn run(stream: &str, id: &str, activity: &Activity) -> Option<RunView> {
    activity.runs.get(id).map(|r| RunView {
        run_id: id.to_string(),
        stream: stream.to_string(),
        task_id: r.name.clone().into(),
        status: r.status.clone(),
        started: r.started.clone(),
        ended: r.ended.clone().into(),
    })
}

fn cost_view(c: &Cost) -> CostView {
    CostView {
        records: c.records,
        input_tokens: c.input_tokens.into(),
        output_tokens: c.output_tokens.into(),
        cost_usd: c.cost_usd.into(),
    }
}

fn routing_view(r: &Routing) -> RoutingView {
    RoutingView {
        decisions: r.decisions,
        selected_model: r.selected_model.clone().into(),
        candidate_count: r.candidate_count.into(),
        single_candidate: r.single_candidate.into(),
        fallbacks: r.fallbacks,
        not_possible: r.not_possible,
        limit_events: r.limit_events.clone(),
    }
}

fn permission_view(p: &Permissions) -> PermissionView {
    PermissionView {
        requested: p.requested,
        resolved: p.resolved.clone(),
        evaluated: p.evaluated,
        sandbox_profile: p.sandbox_profile.clone().into(),
        sandbox_violations: p.sandbox_violations.clone(),
    }
}

/// The session snapshot of a stream.
#[must_use]
pub fn session(stream: &str, state: &StreamState, activity: &Activity) -> SessionSnapshot {
    let tasks: Vec<TaskSnapshot> = state
        .tasks
        .values()
        .map(|t| TaskSnapshot::of(stream, t))
        .collect();
    let mut summary = TaskSummary::default();
    for t in state.tasks.values() {
        match (t.lifecycle, t.outcome) {
            (Lifecycle::Completed, Some(Outcome::Unverified)) => summary.unverified += 1,
            (Lifecycle::Completed, _) => summary.completed += 1,
            (Lifecycle::Cancelled, _) => summary.cancelled += 1,
            (Lifecycle::Failed | Lifecycle::TimedOut | Lifecycle::Lost, _) => summary.failed += 1,
            (l, _) if !l.is_terminal() && l != Lifecycle::Unknown => summary.active += 1,
            _ => {}
        }
    }
    let incidents = state.all_incidents();
    SessionSnapshot {
        stream: stream.to_string(),
        session_id: activity.session_id.clone().into(),
        runtime_id: activity.runtime_id.clone().into(),
        status: activity.session_status.clone().into(),
        events: activity.events,
        first: activity.first.clone().into(),
        last: activity.last.clone().into(),
        started_at: activity.first_timestamp.clone().into(),
        updated_at: activity.last_timestamp.clone().into(),
        threads: activity
            .threads
            .iter()
            .map(|(id, t)| ThreadView::of(stream, id, t, state))
            .collect(),
        tasks,
        task_summary: summary,
        checklist: checklist(state),
        pending_actions: state
            .actions
            .values()
            .filter(|a| a.decision.is_none())
            .cloned()
            .collect(),
        model_calls: CallCounts::of(&activity.model_calls),
        tool_calls: CallCounts::of(&activity.tool_calls),
        processes: CallCounts::of(&activity.processes),
        subagents: CallCounts::of(&activity.subagents),
        jobs: CallCounts::of(&activity.jobs),
        runs: CallCounts::of(&activity.runs),
        channels: activity.channels.clone(),
        permissions: permission_view(&activity.permissions),
        routing: routing_view(&activity.routing),
        context_boundaries: activity.compactions.clone(),
        checkpoints: activity.checkpoints.clone(),
        snapshots: activity.snapshots.clone(),
        evidence: evidence(state, activity),
        cost: cost_view(&activity.cost),
        trace_ids: activity.trace_ids.iter().cloned().collect(),
        by_family: activity.by_family.clone(),
        incidents,
    }
}

/// The snapshot schema a runtime resumes from first (the session runtime).
pub const CURRENT_SNAPSHOT_SCHEMA: &str = "session_runtime_v2";

/// Where a resume state comes from, by the session runtime's precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeSource {
    /// The newest snapshot of the current schema.
    Snapshot,
    /// The newest snapshot of an older schema (the runtime writes a current one at its next
    /// checkpoint).
    OlderSnapshot,
    /// No snapshot: the state folded from the events themselves (`history.reconstructed`).
    HistoryReconstructed,
}

/// The resume state of a session: what a runtime coming back after a crash restores from.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeState {
    /// Which source was used.
    pub source: ResumeSource,
    /// Whether the session can be resumed (some source exists).
    pub resumable: bool,
    /// The snapshot used, when one was: where, and its schema.
    pub snapshot_at: Known<At>,
    /// Its schema.
    pub schema: Known<String>,
    /// The snapshot's payload as recorded (`SnapshotPayload`; the body may be by reference).
    pub snapshot: Known<serde_json::Value>,
    /// The position from which the stream's events are replayed on top of the snapshot (the
    /// snapshot's position plus one), or 1 when reconstructing from the events.
    pub replay_from_position: u64,
    /// With `history_reconstructed`: the state folded from the events.
    pub reconstructed: Known<SessionSnapshot>,
}

/// The resume state of a stream; `snapshot_payload` fetches a snapshot event's payload by id.
#[must_use]
pub fn resume(
    stream: &str,
    state: &StreamState,
    activity: &Activity,
    snapshot_payload: &dyn Fn(&str) -> Option<serde_json::Value>,
) -> ResumeState {
    let newest = |current: bool| {
        activity
            .snapshots
            .iter()
            .rev()
            .find(|(_, schema)| (schema.as_deref() == Some(CURRENT_SNAPSHOT_SCHEMA)) == current)
    };
    let chosen = newest(true)
        .map(|s| (ResumeSource::Snapshot, s))
        .or_else(|| newest(false).map(|s| (ResumeSource::OlderSnapshot, s)));
    match chosen {
        Some((source, (at, schema))) => ResumeState {
            source,
            resumable: true,
            snapshot_at: Known::Value(at.clone()),
            schema: schema.clone().into(),
            snapshot: snapshot_payload(&at.event_id)
                .map_or(Known::Missing(Missing::Unavailable), Known::Value),
            replay_from_position: at.position + 1,
            reconstructed: Known::Missing(Missing::NotApplicable),
        },
        None => ResumeState {
            source: ResumeSource::HistoryReconstructed,
            resumable: activity.events > 0,
            snapshot_at: Known::Missing(Missing::NotApplicable),
            schema: Known::Missing(Missing::NotApplicable),
            snapshot: Known::Missing(Missing::NotApplicable),
            replay_from_position: 1,
            reconstructed: Known::Value(session(stream, state, activity)),
        },
    }
}
