//! What happened in one stream, family by family: the facts behind the session snapshot's
//! summaries (threads and turns, runs, model and tool calls, processes, subagents and jobs,
//! permissions and sandbox, routing and limits, context boundaries, artifacts and evidence,
//! checkpoints and snapshots, channels, cost).
//!
//! Only recorded facts are counted; a field no fact has set stays `None` (shown as `unknown`),
//! and a call with no result stays open, never assumed to have succeeded.

use std::collections::{BTreeMap, BTreeSet};

use journal_format::payload::{
    ArtifactPayload, CompactionPayload, CostPayload, EvidencePayload, SubagentPayload,
    ToolResultPayload, ToolResultStatus,
};
use journal_format::{Envelope, StoredEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id_map::IdMap;
use crate::projection::Event;

/// Where a fact is in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct At {
    /// The event's position.
    pub position: u64,
    /// The event's id.
    pub event_id: String,
}

impl At {
    fn of(event: &StoredEvent) -> At {
        At {
            position: event.position.0,
            event_id: event.envelope.event_id.clone(),
        }
    }
}

/// A turn of a thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnSummary {
    /// The turn.
    pub turn_id: String,
    /// `submitted`, `running`, `completed`, `failed` (or the event's own status word).
    pub status: String,
    /// The task it ran, when an event said.
    pub task_id: Option<String>,
    /// The run, when an event said.
    pub run_id: Option<String>,
}

/// A thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSummary {
    /// The status the last `thread.*` event gave.
    pub status: Option<String>,
    /// Its turns, in the order first seen (changed by [`Activity::apply`] only).
    pub turns: Vec<TurnSummary>,
    /// The newest turn.
    pub active_turn_id: Option<String>,
    /// Where each of `turns` is, by id.
    #[serde(skip)]
    #[schemars(skip)]
    turn_index: TurnIndex,
}

/// Where each turn of a thread is in [`ThreadSummary::turns`], by id, so that an event finds
/// its turn with one lookup instead of a search of every turn before it (which made a thread's
/// cost grow with the square of its turns).
///
/// **Invariant:** derived from the list alone. It is never stored nor shown, equal to any
/// other (two summaries are equal when their lists are), and rebuilt from the list whenever it
/// does not cover it: a summary read back from the store starts without it.
#[derive(Clone, Debug, Default)]
struct TurnIndex(foldhash::HashMap<String, usize>);

impl PartialEq for TurnIndex {
    fn eq(&self, _: &TurnIndex) -> bool {
        true
    }
}

impl Eq for TurnIndex {}

impl ThreadSummary {
    /// Where turn `turn_id` is in `turns`: the last one with that id, as a search from the end
    /// would find.
    fn turn_position(&mut self, turn_id: &str) -> Option<usize> {
        let found = self.turn_index.0.get(turn_id).copied();
        let holds = |i: usize| self.turns.get(i).is_some_and(|t| t.turn_id == turn_id);
        if self.turn_index.0.len() == self.turns.len() && found.is_none_or(holds) {
            return found;
        }
        // Read back from the store, or `turns` changed outside the fold: index it again.
        self.turn_index.0.clear();
        for (i, turn) in self.turns.iter().enumerate() {
            self.turn_index.0.insert(turn.turn_id.clone(), i);
        }
        self.turn_index.0.get(turn_id).copied()
    }

    /// Adds a turn first seen now; returns its position.
    fn push_turn(&mut self, turn: TurnSummary) -> usize {
        let position = self.turns.len();
        self.turn_index.0.insert(turn.turn_id.clone(), position);
        self.turns.push(turn);
        position
    }
}

/// A call with a start and an end (model request, tool call, process, job, subagent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// A name, when given (tool name, model, profile).
    pub name: Option<String>,
    /// `open` until an end is recorded; then the end's word (`succeeded`, `failed`, `denied`,
    /// `completed`, `cancelled`, ...).
    pub status: String,
    /// The first event about it.
    pub started: At,
    /// The event that ended it.
    pub ended: Option<At>,
    /// The producer's time of the event that ended it.
    pub ended_timestamp: Option<String>,
    /// A reference to its output, when recorded.
    pub output_ref: Option<String>,
}

/// Routing and limits (the Agent Runtime spec's routing and limit summary).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Routing {
    /// Routing decisions recorded.
    pub decisions: u64,
    /// The newest selected model.
    pub selected_model: Option<String>,
    /// The newest candidate count.
    pub candidate_count: Option<u64>,
    /// Whether the newest routing had a single candidate.
    pub single_candidate: Option<bool>,
    /// Fallbacks applied.
    pub fallbacks: u64,
    /// Routings that were not possible.
    pub not_possible: u64,
    /// `limit.changed`, `rate_limit.hit`, `quota.low`, `quota.blocked`, in order.
    pub limit_events: Vec<(String, At)>,
}

/// Permissions and sandbox (the Agent Runtime spec's permission and sandbox summary).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    /// `permission.requested` events.
    pub requested: u64,
    /// `permission.resolved` decisions by their word (`allow`, `deny`, ...; `unknown` when
    /// the event gave none).
    pub resolved: BTreeMap<String, u64>,
    /// `permission.evaluated` events.
    pub evaluated: u64,
    /// The newest sandbox profile applied.
    pub sandbox_profile: Option<Value>,
    /// `sandbox.violation` events.
    pub sandbox_violations: Vec<At>,
}

/// A context boundary (compaction).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Boundary {
    /// Where.
    pub at: At,
    /// `started`, `completed` or `failed`.
    pub status: String,
    /// Tokens before, when recorded.
    pub tokens_before: Option<u64>,
    /// Tokens after, when recorded.
    pub tokens_after: Option<u64>,
}

/// Token and money totals from `cost.recorded` (estimates are not totals), and the cost of
/// each model call a record names.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// `cost.recorded` events (a record that supersedes another is not counted again).
    pub records: u64,
    /// Input tokens, when any record gave them.
    pub input_tokens: Option<u64>,
    /// Output tokens, when any record gave them.
    pub output_tokens: Option<u64>,
    /// US dollars, when any record gave them.
    pub cost_usd: Option<f64>,
    /// By `modelRequestId`: the records that name the call (summed), or the latest state of
    /// its record when one supersedes it (`supersedes`).
    pub by_call: IdMap<CallCost>,
}

/// What `cost.recorded` gave for one model call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallCost {
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: Option<u64>,
    /// Tokens written to a prompt cache.
    pub cache_write_tokens: Option<u64>,
    /// US dollars.
    pub cost_usd: Option<f64>,
}

impl CallCost {
    fn add(&mut self, other: &CallCost) {
        add(&mut self.input_tokens, other.input_tokens);
        add(&mut self.output_tokens, other.output_tokens);
        add(&mut self.cache_read_tokens, other.cache_read_tokens);
        add(&mut self.cache_write_tokens, other.cache_write_tokens);
        add_usd(&mut self.cost_usd, other.cost_usd);
    }
}

/// What a `cost.recorded` is to its call: a new record, or a revision (it `supersedes` an
/// earlier one: a later state of the same record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CostRecord {
    /// Adds to the call's figures.
    New,
    /// Replaces the call's figures.
    Revision,
}

impl Cost {
    /// Applies one `cost.recorded` of the call `call` (if it names one). A
    /// [`CostRecord::Revision`] replaces the call's figures, in the totals too, instead of
    /// adding to them.
    fn record(&mut self, call: Option<&str>, figures: CallCost, record: CostRecord) {
        let replaced = call
            .filter(|_| record == CostRecord::Revision)
            .and_then(|c| self.by_call.get(c))
            .cloned();
        match &replaced {
            Some(old) => {
                sub(&mut self.input_tokens, old.input_tokens);
                sub(&mut self.output_tokens, old.output_tokens);
                if let (Some(total), Some(usd)) = (&mut self.cost_usd, old.cost_usd) {
                    *total -= usd;
                }
            }
            None => self.records += 1,
        }
        add(&mut self.input_tokens, figures.input_tokens);
        add(&mut self.output_tokens, figures.output_tokens);
        add_usd(&mut self.cost_usd, figures.cost_usd);
        if let Some(call) = call {
            let entry = self.by_call.get_or_insert_with(call, CallCost::default);
            if replaced.is_some() {
                *entry = figures;
            } else {
                entry.add(&figures);
            }
        }
    }
}

/// One artifact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactSummary {
    /// Its path, when given.
    pub path: Option<String>,
    /// The last change (`created`, `updated`, `deleted`, ...).
    pub change: Option<String>,
    /// Its content, by reference.
    pub content_ref: Option<String>,
    /// The newest event about it.
    pub at: At,
}

/// One piece of evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceSummary {
    /// Its kind.
    pub kind: Option<String>,
    /// Its verification outcome, when recorded.
    pub verification: Option<String>,
    /// The reference to it.
    pub evidence_ref: Option<String>,
    /// The verification outcomes the event recorded (`payload.verificationOutcomes`), as given.
    pub verification_outcomes: Vec<Value>,
    /// The thread it belongs to.
    pub thread_id: Option<String>,
    /// The task it is evidence for.
    pub task_id: Option<String>,
    /// The newest event about it.
    pub at: At,
}

/// A checkpoint captured (the ecosystem contract's AgentCheckpoint), as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRecord {
    /// Where.
    pub at: At,
    /// The producer's time.
    pub timestamp: String,
    /// The run, when the event named one.
    pub run_id: Option<String>,
    /// Its payload (`CheckpointPayload`).
    pub payload: Option<Value>,
}

/// What happened in one stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// The session, when the stream is one.
    pub session_id: Option<String>,
    /// The runtime, from the first event that named one.
    pub runtime_id: Option<String>,
    /// The product, from the first event that named one.
    pub product_id: Option<String>,
    /// The user, from the first event that named one.
    pub user_id: Option<String>,
    /// The newest dispatch context (`dispatch.requested`).
    pub dispatch_context: Option<Value>,
    /// The workspace, from the first event that named one (`workspaceId`).
    pub workspace_id: Option<String>,
    /// The schema version of the newest event that gave one.
    pub schema_version: Option<String>,
    /// The newest `telemetry.joinStatus` recorded.
    pub telemetry_join_status: Option<String>,
    /// The status word of the newest `session.*` event that gave one.
    pub session_status: Option<String>,
    /// Events applied.
    pub events: u64,
    /// The first event.
    pub first: Option<At>,
    /// The newest event.
    pub last: Option<At>,
    /// The producer's timestamp of the first event.
    pub first_timestamp: Option<String>,
    /// The producer's timestamp of the newest event.
    pub last_timestamp: Option<String>,
    /// Events by family (the type's first segment).
    pub by_family: BTreeMap<String, u64>,
    /// Threads by id.
    pub threads: BTreeMap<String, ThreadSummary>,
    /// Runs by id: their task, attempt and the newest `run.status` word.
    pub runs: IdMap<Call>,
    /// Model requests by `modelRequestId` (or the event id of a request without one).
    pub model_calls: IdMap<Call>,
    /// Tool calls by `toolCallId`.
    pub tool_calls: IdMap<Call>,
    /// Processes by `processId`.
    pub processes: IdMap<Call>,
    /// Subagents by `subagentId`.
    pub subagents: IdMap<Call>,
    /// Jobs by `jobId`.
    pub jobs: IdMap<Call>,
    /// Channels by `channelId`: the newest `channel.*` word.
    pub channels: BTreeMap<String, String>,
    /// Permissions and sandbox.
    pub permissions: Permissions,
    /// Routing and limits.
    pub routing: Routing,
    /// Context boundaries, in order.
    pub compactions: Vec<Boundary>,
    /// Artifacts by id (or path).
    pub artifacts: IdMap<ArtifactSummary>,
    /// Evidence by id.
    pub evidence: IdMap<EvidenceSummary>,
    /// Checkpoints captured (`checkpoint.captured`), in order.
    pub checkpoints: Vec<CheckpointRecord>,
    /// Snapshots written or updated, in order, with their schema (`session_runtime_v2`) when given.
    pub snapshots: Vec<(At, Option<String>)>,
    /// Queue changes recorded.
    pub queue_changes: u64,
    /// `runtime.error` events.
    pub runtime_errors: Vec<At>,
    /// Trace ids seen.
    pub trace_ids: BTreeSet<String>,
    /// Cost totals.
    pub cost: Cost,
}

fn add(total: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *total = Some(total.unwrap_or(0).saturating_add(v));
    }
}

fn add_usd(total: &mut Option<f64>, value: Option<f64>) {
    if let Some(usd) = value {
        *total = Some(total.unwrap_or(0.0) + usd);
    }
}

fn sub(total: &mut Option<u64>, value: Option<u64>) {
    if let (Some(t), Some(v)) = (total.as_mut(), value) {
        *t = t.saturating_sub(v);
    }
}

/// Starts or updates a call: the first event opens it, `end` (when given) closes it; `name`
/// gives the call's name while it has none (called only then, so that it allocates only then).
fn touch(
    calls: &mut IdMap<Call>,
    id: &str,
    event: &Event<'_>,
    name: impl FnOnce() -> Option<String>,
    end: Option<&str>,
) {
    // One lookup; a key is allocated only for a new call.
    let call = calls.get_or_insert_with(id, || Call {
        name: None,
        status: "open".into(),
        started: At::of(event),
        ended: None,
        ended_timestamp: None,
        output_ref: None,
    });
    if call.name.is_none() {
        call.name = name();
    }
    if let Some(r) = &event.envelope.output_ref {
        call.output_ref = Some(r.clone());
    }
    if let Some(word) = end {
        word.clone_into(&mut call.status);
        call.ended = Some(At::of(event));
        call.ended_timestamp = Some(event.envelope.timestamp.clone());
    }
}

impl Activity {
    /// Applies one event.
    pub fn apply(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        let family = t.split('.').next().unwrap_or(t);
        self.count(event, family);
        self.note_ids(e);
        if let Some(thread) = &e.thread_id {
            self.apply_thread(thread, event);
        }
        if let Some(run) = &e.run_id {
            self.apply_run(run, event);
        }
        self.apply_family(family, event);
    }

    /// Counts the event, in all and in its family, and moves the first and last facts.
    fn count(&mut self, event: &Event<'_>, family: &str) {
        let e = &event.envelope;
        self.events += 1;
        if self.first.is_none() {
            self.first = Some(At::of(event));
            self.first_timestamp = Some(e.timestamp.clone());
        }
        // Every event moves `last`: reuse its strings rather than allocating new ones.
        match &mut self.last {
            Some(last) => {
                last.position = event.position.0;
                last.event_id.clone_from(&e.event_id);
            }
            None => self.last = Some(At::of(event)),
        }
        match &mut self.last_timestamp {
            Some(last) => last.clone_from(&e.timestamp),
            None => self.last_timestamp = Some(e.timestamp.clone()),
        }
        match self.by_family.get_mut(family) {
            Some(count) => *count += 1,
            None => {
                self.by_family.insert(family.to_string(), 1);
            }
        }
    }

    /// The stream's ids as the first event to name each gave them (session, runtime, product,
    /// user, workspace), the newest schema version and telemetry join status, and every trace.
    fn note_ids(&mut self, e: &Envelope) {
        if self.session_id.is_none() {
            self.session_id.clone_from(&e.session_id);
        }
        if self.runtime_id.is_none() {
            self.runtime_id.clone_from(&e.runtime_id);
        }
        if self.product_id.is_none() {
            self.product_id.clone_from(&e.product_id);
        }
        if self.user_id.is_none() {
            self.user_id.clone_from(&e.user_id);
        }
        if self.workspace_id.is_none() {
            self.workspace_id = e
                .extra
                .get("workspaceId")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if e.schema_version.is_some() {
            self.schema_version.clone_from(&e.schema_version);
        }
        if let Some(join) = e
            .telemetry
            .as_ref()
            .and_then(|t| t.get("joinStatus"))
            .and_then(Value::as_str)
        {
            self.telemetry_join_status = Some(join.to_string());
        }
        if let Some(trace) = &e.trace_id {
            if !self.trace_ids.contains(trace) {
                self.trace_ids.insert(trace.clone());
            }
        }
    }

    /// The run an event names: opened by its first event, ended by a terminal `run.status`,
    /// and given the status word of any other `run.status`.
    fn apply_run(&mut self, run: &str, event: &Event<'_>) {
        let e = &event.envelope;
        let status = (e.event_type == "run.status")
            .then_some(e.status.as_ref())
            .flatten();
        let end = status.map(String::as_str).filter(|s| {
            matches!(
                *s,
                "completed" | "failed" | "cancelled" | "canceled" | "timed_out" | "lost"
            )
        });
        touch(&mut self.runs, run, event, || e.task_id.clone(), end);
        if let (Some(status), None) = (status, end) {
            if let Some(run) = self.runs.get_mut(run) {
                run.status.clone_from(status);
            }
        }
    }

    /// What the event's family records.
    fn apply_family(&mut self, family: &str, event: &Event<'_>) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        match family {
            "session" => {
                if let Some(status) = e.status.as_ref().or(e.phase.as_ref()) {
                    self.session_status = Some(status.clone());
                }
            }
            "model" => self.apply_model(event),
            "tool" => self.apply_tool(event),
            "process" => self.apply_process(event),
            "subagent" => self.apply_subagent(event),
            "job" => self.apply_job(event),
            "channel" => {
                if let Some(id) = &e.channel_id {
                    let word = t.strip_prefix("channel.").unwrap_or(t);
                    self.channels.insert(id.clone(), word.to_string());
                }
            }
            "permission" | "sandbox" => self.apply_permission(event),
            "routing" | "limit" | "rate_limit" | "quota" => self.apply_routing(event),
            "context" => self.apply_context(event),
            "artifact" => self.apply_artifact(event),
            "evidence" => self.apply_evidence(event),
            "checkpoint" => self.checkpoints.push(CheckpointRecord {
                at: At::of(event),
                timestamp: e.timestamp.clone(),
                run_id: e.run_id.clone(),
                payload: event.payload_value(),
            }),
            "dispatch" => self.dispatch_context = event.payload_value(),
            // `snapshot.written` carries the snapshot's schema (`session_runtime_v2`); an Agent
            // Runtime `snapshot.updated` has none.
            "snapshot" if t == "snapshot.written" || t == "snapshot.updated" => {
                self.snapshots
                    .push((At::of(event), event.payload_str("schema")));
            }
            "queue" => self.queue_changes += 1,
            "runtime" if t == "runtime.error" => self.runtime_errors.push(At::of(event)),
            "cost" if t == "cost.recorded" => self.apply_cost(event),
            _ => {}
        }
    }

    /// A process: opened by its first event, closed by the event that ends it.
    fn apply_process(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let Some(id) = &e.process_id else {
            return;
        };
        let end = match e.event_type.as_str() {
            "process.completed" => Some("completed"),
            "process.failed" => Some("failed"),
            "process.terminated" => Some("terminated"),
            _ => None,
        };
        touch(&mut self.processes, id, event, || None, end);
    }

    /// A subagent, named by its role or profile: opened by its first event, closed by the event
    /// that ends it.
    fn apply_subagent(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let Some(id) = &e.subagent_id else {
            return;
        };
        let p = read::of::<read::Subagent, SubagentPayload>(event);
        let end = match e.event_type.as_str() {
            "subagent.completed" => Some("completed"),
            "subagent.failed" => Some("failed"),
            "subagent.closed" => Some("closed"),
            _ => None,
        };
        let name = p.and_then(|p| p.role.or(p.profile_id));
        touch(&mut self.subagents, id, event, || name, end);
    }

    /// A job (not one of its items): opened by its first event, closed by the event that ends
    /// it.
    fn apply_job(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let (Some(id), None) = (&e.job_id, &e.job_item_id) else {
            return;
        };
        let end = match e.event_type.as_str() {
            "job.completed" => Some("completed"),
            "job.failed" => Some("failed"),
            "job.cancelled" => Some("cancelled"),
            _ => None,
        };
        touch(&mut self.jobs, id, event, || None, end);
    }

    /// An artifact as its newest event tells it, by its id, else its path.
    fn apply_artifact(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let p: ArtifactPayload = event.payload_as().unwrap_or_default();
        let Some(id) = e.artifact_id.clone().or_else(|| p.path.clone()) else {
            return;
        };
        self.artifacts.insert(
            &id,
            ArtifactSummary {
                path: p.path,
                change: p.change,
                content_ref: p.content_ref.or_else(|| e.output_ref.clone()),
                at: At::of(event),
            },
        );
    }

    /// A piece of evidence as its newest event tells it, by its id, else the event's.
    fn apply_evidence(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let p = read::of::<read::Evidence, EvidencePayload>(event).unwrap_or_default();
        let id = e.evidence_id.clone().unwrap_or_else(|| e.event_id.clone());
        let verification_outcomes = match event.payload_field("verificationOutcomes") {
            Some(Value::Array(outcomes)) => outcomes,
            _ => Vec::new(),
        };
        self.evidence.insert(
            &id,
            EvidenceSummary {
                kind: p.kind,
                verification: p.verification.or_else(|| e.status.clone()),
                evidence_ref: p.evidence_ref,
                verification_outcomes,
                thread_id: e.thread_id.clone(),
                task_id: e.task_id.clone(),
                at: At::of(event),
            },
        );
    }

    /// `cost.recorded`: its figures added to the totals, or replacing the call's figures when
    /// it `supersedes` an earlier record.
    fn apply_cost(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let p: CostPayload = event.payload_as().unwrap_or_default();
        let figures = CallCost {
            input_tokens: p.input_tokens,
            output_tokens: p.output_tokens,
            cache_read_tokens: p.cache_read_tokens,
            cache_write_tokens: p.cache_write_tokens,
            cost_usd: p.cost_usd,
        };
        let record = if e.supersedes().is_some() {
            CostRecord::Revision
        } else {
            CostRecord::New
        };
        self.cost
            .record(e.model_request_id.as_deref(), figures, record);
    }

    fn apply_thread(&mut self, thread: &str, event: &Event<'_>) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        // One lookup for a thread already known; a key is allocated only for a new one.
        let summary = match self.threads.get_mut(thread) {
            Some(summary) => summary,
            None => self.threads.entry(thread.to_string()).or_default(),
        };
        if t.starts_with("thread.") {
            if let Some(status) = &e.status {
                summary.status = Some(status.clone());
            }
        }
        let Some(turn_id) = &e.turn_id else {
            return;
        };
        let index = match summary.turn_position(turn_id) {
            Some(i) => i,
            None => summary.push_turn(TurnSummary {
                turn_id: turn_id.clone(),
                status: "submitted".into(),
                task_id: None,
                run_id: None,
            }),
        };
        match &mut summary.active_turn_id {
            Some(active) => active.clone_from(turn_id),
            None => summary.active_turn_id = Some(turn_id.clone()),
        }
        let Some(turn) = summary.turns.get_mut(index) else {
            return;
        };
        if turn.task_id.is_none() {
            turn.task_id.clone_from(&e.task_id);
        }
        if e.run_id.is_some() {
            turn.run_id.clone_from(&e.run_id);
        }
        let status = match t {
            "turn.submitted" => "submitted",
            "turn.started" => "running",
            "turn.completed" => "completed",
            "turn.failed" if e.status.as_deref() == Some("interrupted") => "interrupted",
            "turn.failed" => "failed",
            _ => return,
        };
        status.clone_into(&mut turn.status);
    }

    fn apply_model(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let id = e.model_request_id.as_deref().unwrap_or(&e.event_id);
        let end = match e.event_type.as_str() {
            "model.requested" | "model.delta" => None,
            "model.completed" => Some("completed"),
            "model.failed" => Some("failed"),
            _ => return,
        };
        if e.event_type == "model.delta" && !self.model_calls.contains_key(id) {
            return;
        }
        touch(
            &mut self.model_calls,
            id,
            event,
            || event.payload_str("model"),
            end,
        );
    }

    fn apply_tool(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let Some(id) = &e.tool_call_id else {
            return;
        };
        let end = match e.event_type.as_str() {
            "tool.result" => {
                let p = read::of::<read::ToolResult, ToolResultPayload>(event).unwrap_or_default();
                Some(match (p.status, e.status.as_deref()) {
                    (Some(ToolResultStatus::Failure), _) | (None, Some("failed" | "failure")) => {
                        "failed"
                    }
                    (Some(ToolResultStatus::Success), _)
                    | (None, Some("success" | "completed")) => "succeeded",
                    // A result that does not say how it went is not a success.
                    (None, _) => "ended",
                })
            }
            "tool.failed" => Some("failed"),
            _ => None,
        };
        touch(
            &mut self.tool_calls,
            id,
            event,
            || event.payload_str("toolName"),
            end,
        );
    }

    fn apply_permission(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let p = &mut self.permissions;
        match e.event_type.as_str() {
            "permission.requested" => p.requested += 1,
            "permission.evaluated" => p.evaluated += 1,
            "permission.resolved" => {
                let decision = e
                    .permission_decision
                    .as_ref()
                    .and_then(|d| d.get("decision").or_else(|| d.get("outcome")))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| event.payload_str("decision"))
                    .or_else(|| e.status.clone())
                    .unwrap_or_else(|| "unknown".into());
                *p.resolved.entry(decision).or_insert(0) += 1;
            }
            "sandbox.applied" => {
                p.sandbox_profile = e
                    .sandbox_profile
                    .as_ref()
                    .map(|m| Value::Object(m.as_ref().clone()))
                    .or_else(|| event.payload_value());
            }
            "sandbox.violation" => p.sandbox_violations.push(At::of(event)),
            _ => {}
        }
    }

    fn apply_routing(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let r = &mut self.routing;
        let t = e.event_type.as_str();
        let decision = e.routing_decision.as_ref();
        let field = |name: &str| {
            decision
                .and_then(|d| d.get(name))
                .cloned()
                .or_else(|| event.payload_field(name))
        };
        match t {
            "routing.decided" | "routing.single_candidate" => {
                r.decisions += 1;
                if let Some(Value::String(model)) =
                    field("selectedModel").or_else(|| field("model"))
                {
                    r.selected_model = Some(model);
                }
                if let Some(n) = field("candidateCount").and_then(|v| v.as_u64()) {
                    r.candidate_count = Some(n);
                }
                r.single_candidate = Some(t == "routing.single_candidate")
                    .filter(|s| *s)
                    .or_else(|| r.candidate_count.map(|n| n == 1));
            }
            "routing.candidates.resolved" => {
                let count = e
                    .candidate_model_set
                    .as_ref()
                    .and_then(|c| c.get("candidates"))
                    .and_then(Value::as_array)
                    .map(|a| a.len() as u64)
                    .or_else(|| field("candidateCount").and_then(|v| v.as_u64()));
                if count.is_some() {
                    r.candidate_count = count;
                }
            }
            "routing.fallback.applied" => r.fallbacks += 1,
            "routing.not_possible" => r.not_possible += 1,
            _ => r.limit_events.push((t.to_string(), At::of(event))),
        }
    }

    fn apply_context(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let status = match e.event_type.as_str() {
            "context.compaction.started" => "started",
            "context.compaction.completed" => "completed",
            "context.compaction.failed" => "failed",
            _ => return,
        };
        let p = read::of::<read::Compaction, CompactionPayload>(event).unwrap_or_default();
        // A completion or failure closes the newest started boundary.
        if status != "started" {
            if let Some(open) = self
                .compactions
                .iter_mut()
                .rev()
                .find(|b| b.status == "started")
            {
                open.status = status.to_string();
                open.tokens_before = open.tokens_before.or(p.tokens_before);
                open.tokens_after = p.tokens_after;
                open.at = At::of(event);
                return;
            }
        }
        self.compactions.push(Boundary {
            at: At::of(event),
            status: status.to_string(),
            tokens_before: p.tokens_before,
            tokens_after: p.tokens_after,
        });
    }
}

/// The parts of payloads the fold reads, each read alone: a deferred payload steps over the
/// rest (a tool's output, a subagent's prompt and result, a compaction's summary, an evidence
/// note) without building it, where the whole payload type would copy it. Each field has the name and type it has in its
/// payload type of `journal_format::payload` (a test holds them equal on payloads of that type).
///
/// Read from a map, a payload whose other fields break the whole type's shape is still read
/// for these: an `evidence.*` type other than `evidence.changed`, whose payload the append does
/// not check, or history appended before the check. A payload that is not a map (serde also
/// reads a struct from an array of all its fields in order, and the append's check with it) is
/// read with the whole type, as before version 3.
mod read {
    use std::marker::PhantomData;

    use journal_format::payload::{
        CompactionPayload, EvidencePayload, SubagentPayload, ToolResultPayload, ToolResultStatus,
    };
    use serde::de::{DeserializeOwned, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    use crate::projection::Event;

    /// `event`'s payload as `N` when it is a map, else as the whole type `W`, narrowed; `None`
    /// when neither reads it.
    pub fn of<N, W>(event: &Event<'_>) -> Option<N>
    where
        N: DeserializeOwned + From<W>,
        W: DeserializeOwned,
    {
        event
            .payload_as::<FromMap<N>>()
            .map(|FromMap(narrow)| narrow)
            .or_else(|| event.payload_as::<W>().map(N::from))
    }

    /// `T` read from a map only: a derived `Deserialize` would read a struct from an array too,
    /// by position, and a narrow type's positions are not its whole type's.
    struct FromMap<T>(T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for FromMap<T> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FromMap<T>, D::Error> {
            struct Map<T>(PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for Map<T> {
                type Value = T;

                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a map")
                }

                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                    T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                }
            }
            deserializer.deserialize_map(Map(PhantomData)).map(FromMap)
        }
    }

    /// Of [`ToolResultPayload`].
    #[derive(Debug, Default, PartialEq, Deserialize)]
    pub struct ToolResult {
        pub status: Option<ToolResultStatus>,
    }

    impl From<ToolResultPayload> for ToolResult {
        fn from(whole: ToolResultPayload) -> ToolResult {
            ToolResult {
                status: whole.status,
            }
        }
    }

    /// Of [`SubagentPayload`].
    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Subagent {
        pub profile_id: Option<String>,
        pub role: Option<String>,
    }

    impl From<SubagentPayload> for Subagent {
        fn from(whole: SubagentPayload) -> Subagent {
            Subagent {
                profile_id: whole.profile_id,
                role: whole.role,
            }
        }
    }

    /// Of [`CompactionPayload`].
    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Compaction {
        pub tokens_before: Option<u64>,
        pub tokens_after: Option<u64>,
    }

    impl From<CompactionPayload> for Compaction {
        fn from(whole: CompactionPayload) -> Compaction {
            Compaction {
                tokens_before: whole.tokens_before,
                tokens_after: whole.tokens_after,
            }
        }
    }

    /// Of [`EvidencePayload`].
    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Evidence {
        pub kind: Option<String>,
        pub evidence_ref: Option<String>,
        pub verification: Option<String>,
    }

    impl From<EvidencePayload> for Evidence {
        fn from(whole: EvidencePayload) -> Evidence {
            Evidence {
                kind: whole.kind,
                evidence_ref: whole.evidence_ref,
                verification: whole.verification,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use journal_format::{ChainHash, Envelope, Position, StoredEvent};

    use super::*;

    fn turn_event(position: u64, kind: &str, turn: &str) -> StoredEvent {
        let mut envelope = Envelope::new(kind, format!("e{position}"), "2026-05-11T10:00:00Z");
        envelope.session_id = Some("s1".into());
        envelope.thread_id = Some("th1".into());
        envelope.turn_id = Some(turn.into());
        StoredEvent {
            position: Position(position),
            recorded_at_ns: 0,
            stream_version: position,
            hash: ChainHash::default(),
            envelope,
        }
    }

    /// The event `kind` with `payload`, held, and decoded with its payload deferred.
    fn both_ways(kind: &str, payload: serde_json::Value) -> (StoredEvent, StoredEvent, Vec<u8>) {
        let mut envelope = Envelope::new(kind, "e1", "2026-11-25T00:00:00Z");
        envelope.payload = Some(payload);
        let body = envelope.to_msgpack().expect("encode");
        let held = StoredEvent {
            position: Position(1),
            recorded_at_ns: 0,
            stream_version: 1,
            hash: ChainHash::default(),
            envelope,
        };
        (held.clone(), held, body)
    }

    /// `read::of` gives the whole type's fields, narrowed, for `payload` as a map of every
    /// field and as the array of them in order (serde reads a struct from either, and so does
    /// the append's shape check), through a payload held and one deferred.
    fn reads_as_the_whole<N, W>(kind: &str, payload: serde_json::Value)
    where
        N: serde::de::DeserializeOwned + From<W> + PartialEq + std::fmt::Debug,
        W: serde::de::DeserializeOwned + Serialize,
    {
        let whole: W = serde_json::from_value(payload.clone()).expect("the whole type");
        // The same fields as an array, in order: MessagePack without field names.
        let array: serde_json::Value =
            rmp_serde::from_slice(&rmp_serde::to_vec(&whole).expect("encode")).expect("decode");
        assert!(array.is_array(), "{array}");
        for payload in [payload, array] {
            let (held, mut deferred, body) = both_ways(kind, payload.clone());
            held.envelope
                .validate_fact()
                .expect("a payload of its type's shape");
            let bytes = deferred
                .envelope
                .decode_msgpack_deferring_payload(&body)
                .expect("decode");
            for event in [Event::new(&held), Event::deferred(&deferred, bytes)] {
                let narrow = read::of::<N, W>(&event);
                assert!(narrow.is_some(), "{kind} {payload}");
                assert_eq!(
                    narrow,
                    event.payload_as::<W>().map(N::from),
                    "{kind} {payload}"
                );
            }
        }
    }

    #[test]
    fn a_narrow_read_gives_the_fields_of_the_whole_payload_type() {
        use journal_format::payload::{
            CompactionPayload, EvidencePayload, SubagentPayload, ToolResultPayload,
        };
        use serde_json::json;
        reads_as_the_whole::<read::ToolResult, ToolResultPayload>(
            "tool.result",
            json!({"toolName": "shell", "status": "failure", "output": "o".repeat(500),
                   "errorType": "exit", "error": "boom", "retryable": false, "exitCode": 2}),
        );
        reads_as_the_whole::<read::Subagent, SubagentPayload>(
            "subagent.spawned",
            json!({"parentThreadId": "t1", "childThreadId": "t2", "childSessionId": "s2",
                   "profileId": "p1", "role": "reviewer", "prompt": "review it",
                   "status": "running", "result": "r"}),
        );
        reads_as_the_whole::<read::Compaction, CompactionPayload>(
            "context.compaction.completed",
            json!({"trigger": "auto", "tokensBefore": 180_000, "tokensAfter": 40_000,
                   "summary": "earlier turns", "summaryRef": "blob:1", "error": "none"}),
        );
        reads_as_the_whole::<read::Evidence, EvidencePayload>(
            "evidence.changed",
            json!({"kind": "test_run", "evidenceRef": "blob:2", "verification": "passed",
                   "note": "all green"}),
        );
        // A map whose other field breaks the whole type (an `evidence.*` type the append does
        // not check): its fields are read all the same, where the whole type reads nothing.
        let (held, _, _) = both_ways(
            "evidence.recorded",
            json!({"kind": "test_run", "verification": "passed", "note": 5}),
        );
        held.envelope.validate_fact().expect("not checked");
        let event = Event::new(&held);
        assert!(event.payload_as::<EvidencePayload>().is_none());
        let narrow = read::of::<read::Evidence, EvidencePayload>(&event).expect("read");
        assert_eq!(
            (narrow.kind.as_deref(), narrow.verification.as_deref()),
            (Some("test_run"), Some("passed"))
        );
        // An array as long as the narrow type's fields, which the whole type does not read, is
        // not read by position either.
        let (held, mut deferred, body) = both_ways("subagent.spawned", json!(["p1", "reviewer"]));
        let bytes = deferred
            .envelope
            .decode_msgpack_deferring_payload(&body)
            .expect("decode");
        for event in [Event::new(&held), Event::deferred(&deferred, bytes)] {
            assert!(read::of::<read::Subagent, SubagentPayload>(&event).is_none());
        }
        // A narrow field of the wrong type: nothing, as the whole type.
        let (held, _, _) = both_ways("tool.result", json!({"status": 7}));
        let event = Event::new(&held);
        assert!(read::of::<read::ToolResult, ToolResultPayload>(&event).is_none());
    }

    #[test]
    fn a_turn_is_found_by_its_id_before_and_after_the_summary_is_stored() {
        let mut activity = Activity::default();
        let mut position = 0;
        let mut apply = |activity: &mut Activity, kind: &str, turn: &str| {
            position += 1;
            activity.apply(&Event::new(&turn_event(position, kind, turn)));
        };
        for t in 0..300 {
            apply(&mut activity, "turn.submitted", &format!("turn-{t}"));
        }
        apply(&mut activity, "turn.started", "turn-17");
        // Read back, as a worker reads a stored state: the index is not stored.
        let bytes = rmp_serde::to_vec_named(&activity).unwrap();
        let mut back: Activity = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, activity);
        apply(&mut back, "turn.completed", "turn-17");
        apply(&mut back, "turn.failed", "turn-299");
        apply(&mut back, "turn.submitted", "turn-300");
        let thread = &back.threads["th1"];
        assert_eq!(thread.turns.len(), 301);
        let status = |t: usize| thread.turns[t].status.as_str();
        assert_eq!(
            (status(17), status(299), status(300)),
            ("completed", "failed", "submitted")
        );
        assert_eq!(thread.turns[300].turn_id, "turn-300");
        assert_eq!(thread.active_turn_id.as_deref(), Some("turn-300"));
        assert_ne!(back, activity);

        // A list changed outside the fold, its length kept: the index is not trusted blindly.
        let thread = back.threads.get_mut("th1").unwrap();
        thread.turns.swap(1, 2);
        apply(&mut back, "turn.started", "turn-1");
        let thread = &back.threads["th1"];
        assert_eq!(thread.turns.len(), 301);
        assert_eq!(
            (
                thread.turns[2].turn_id.as_str(),
                thread.turns[2].status.as_str()
            ),
            ("turn-1", "running")
        );
    }
}
