//! Typed payloads: the shape of `payload` for every event type whose fields a seed defines
//! (task lifecycle and attempts, required actions, tool calls, checklist, snapshot and
//! checkpoint, completion, dispatch, cost, artifact and evidence changes, subagents, compaction,
//! schedules, sensors, workflows).
//!
//! A typed payload is checked on append ([`check`]): a field of the wrong type, an enum value the
//! seed does not define, or a missing required field is an error naming the event type and the
//! field. The check never rewrites the payload: the event is stored exactly as given, unknown
//! payload fields included. Meaning is not validated here (docs/MODEL.md §4: facts are recorded).
//!
//! Agent Runtime types (the spec leaves `payload` open) have every field optional; the journal's
//! own families (checklist, snapshot, checkpoint, completion decision, dispatch, schedule,
//! sensor, workflow) require the fields their seed marks required. Types with no typed form,
//! vendor types included, take any payload.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EnvelopeError;
use crate::status::ChecklistItemStatus;

/// Task lifecycle events (`task.created` … `task.archived`, the Agent Runtime spec; the queue runtime's TaskIntent and
/// TaskOutcome fields; the ecosystem contract's AgentTask).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskPayload {
    /// A short title (the ecosystem contract).
    pub title: Option<String>,
    /// What the task is for (the Agent Runtime spec's objective, the ecosystem contract's intent).
    pub objective: Option<String>,
    /// The queue runtime's task type.
    pub task_type: Option<String>,
    /// Where the task came from (the queue runtime's source; the dedupe key of an enqueue).
    pub source: Option<String>,
    /// Queue order only (a number in the queue runtime, a word in the ecosystem contract).
    pub priority: Option<Value>,
    /// Why this lifecycle step happened.
    pub reason: Option<String>,
    /// Who asked for it (e.g. `operator` for the queue runtime's operator cancel).
    pub requested_by: Option<String>,
    /// The terminal outcome (docs/MODEL.md §3), on terminal events.
    pub outcome: Option<String>,
    /// The queue runtime's machine status (`ok`, `needs_retry`, `blocked`, `failed`, `canceled`).
    pub machine_status: Option<MachineStatus>,
    /// The queue runtime's operator summary.
    pub operator_summary: Option<String>,
    /// The evidence the task declared it will produce.
    pub evidence_requirements: Option<EvidenceRequirements>,
    /// The queue runtime's TaskOutcome artifact paths.
    pub artifact_paths: Option<Vec<String>>,
    /// The queue runtime's TaskOutcome file changes.
    pub file_changes: Option<Vec<String>>,
    /// The queue runtime's workflow signal (a recorded signal moves a workflow; prose never does).
    pub workflow_signal: Option<String>,
    /// In the queue runtime: recorded, never treated as delivered.
    pub follow_up_tasks: Option<Vec<Value>>,
    /// In the queue runtime: recorded, never treated as delivered.
    pub external_messages: Option<Vec<Value>>,
    /// The queue runtime's attempt budget.
    pub max_attempts: Option<u32>,
    /// The queue runtime's availability gate (RFC 3339).
    pub available_at: Option<String>,
    /// An error message, on failure events.
    pub error: Option<String>,
}

/// The queue runtime's TaskOutcome machine status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum MachineStatus {
    Ok,
    NeedsRetry,
    Blocked,
    Failed,
    Canceled,
}

/// The evidence a task declares (the queue runtime's `evidence_requirements`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceRequirements {
    /// Artifact paths (or ids) that must exist before the task completes.
    #[serde(default)]
    pub required_artifacts: Vec<String>,
    /// Claimed file changes must be verified.
    pub require_file_change_verification: Option<bool>,
    /// An adapter audit artifact is required.
    pub require_adapter_audit: Option<bool>,
}

/// Attempt events (`task.attempt.started|completed|failed`; the queue runtime's TaskAttempt, the Agent
/// Runtime fixture's retry fields).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptPayload {
    /// The attempt's status word.
    pub status: Option<String>,
    /// Whether another attempt may follow.
    pub retryable: Option<bool>,
    /// Why the attempt failed (e.g. `tool_failed`).
    pub failure_category: Option<String>,
    /// What happens next (e.g. `manual_or_policy_retry`).
    pub next_attempt_policy: Option<String>,
    /// The 1-based attempt number.
    pub attempt_number: Option<u32>,
    /// The attempt this one retries.
    pub previous_attempt_id: Option<String>,
    /// In the queue runtime: the adapter that ran it.
    pub adapter_id: Option<String>,
    /// In the queue runtime: the adapter's kind.
    pub adapter_kind: Option<String>,
    /// In the queue runtime: the model, when one was used.
    pub model: Option<String>,
    /// In the queue runtime: the runner.
    pub runner_id: Option<String>,
    /// The queue runtime's exit status.
    pub exit_status: Option<ExitStatus>,
    /// The queue runtime's retry class.
    pub retry_class: Option<RetryClass>,
    /// Free-form diagnostics.
    pub diagnostics: Option<Map<String, Value>>,
}

/// The queue runtime's TaskAttempt exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ExitStatus {
    Ok,
    Error,
    Timeout,
}

/// The queue runtime's TaskAttempt retry class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum RetryClass {
    None,
    Retryable,
    Permanent,
}

/// `action.required` (the Agent Runtime spec's required action, the coding-agent runtime's RequiredAction).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRequiredPayload {
    /// E.g. `tool_permission`, `structured_input`.
    pub action_type: Option<String>,
    /// The tool the decision is about.
    pub tool_name: Option<String>,
    /// E.g. `allow_or_deny`.
    pub decision_kind: Option<String>,
    /// What the decider is asked.
    pub prompt: Option<String>,
    /// What the decision covers.
    pub scope: Option<Map<String, Value>>,
}

/// `action.resolved`: who decided what.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionResolvedPayload {
    /// The decision word (`allow`, `deny`, `approved`, `rejected`, an answer kind).
    pub decision: Option<String>,
    /// Who decided (a user id, `policy`, a hook).
    pub decided_by: Option<String>,
    /// Why.
    pub reason: Option<String>,
    /// A structured answer.
    pub response: Option<Value>,
}

/// Tool call events (`tool.started`, `tool.args`, `tool.progress`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallPayload {
    /// The tool's name.
    pub tool_name: Option<String>,
    /// The arguments, as the model gave them.
    pub arguments: Option<Value>,
    /// A reference to large arguments.
    pub input_ref: Option<String>,
}

/// `tool.result` and `tool.failed` (the coding-agent runtime's ToolResult).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultPayload {
    /// The tool's name.
    pub tool_name: Option<String>,
    /// `success` or `failure`; a denial is a failure, never a success.
    pub status: Option<ToolResultStatus>,
    /// The output, when small (large output goes by `outputRef`).
    pub output: Option<String>,
    /// The error class on failure.
    pub error_type: Option<String>,
    /// The error message on failure.
    pub error: Option<String>,
    /// Whether the call may be retried.
    pub retryable: Option<bool>,
    /// The process exit code, for commands.
    pub exit_code: Option<i64>,
}

/// The coding-agent runtime's ToolResult status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ToolResultStatus {
    Success,
    Failure,
}

/// One item of a session checklist (the session runtime).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChecklistItem {
    /// Stable within the session; the command assigns one when the caller omits it.
    pub id: String,
    /// What the item is.
    pub title: String,
    /// `implementation` (the default) or `verification`; another word breaks the checklist
    /// rules (refused as a command, an incident as a fact).
    #[serde(default = "ChecklistItem::default_kind")]
    pub kind: String,
    /// The item's status.
    pub status: ChecklistItemStatus,
}

impl ChecklistItem {
    fn default_kind() -> String {
        String::from("implementation")
    }
}

/// `checklist.created`, `checklist.updated`, `checklist.verification_nudged`: the full current
/// list, as the session runtime's `task_list_*` events carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChecklistPayload {
    /// The whole ordered list.
    pub items: Vec<ChecklistItem>,
    /// The session runtime's advisory flag.
    #[serde(default)]
    pub verification_nudge_needed: bool,
}

/// `snapshot.written`: a runtime snapshot such as `session_runtime_v2`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPayload {
    /// The snapshot's schema name, e.g. `session_runtime_v2`.
    pub schema: String,
    /// The schema's version number.
    pub version: Option<u64>,
    /// The body by reference (e.g. `blake3:<hex>`).
    pub body_ref: Option<String>,
    /// The body inline, when small.
    pub body: Option<Value>,
}

/// The ecosystem contract's AgentCheckpoint status at capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum CheckpointStatus {
    Queued,
    Running,
    Paused,
    WaitingApproval,
    Completed,
    Failed,
    Cancelled,
}

/// `checkpoint.captured`: the ecosystem contract's AgentCheckpoint.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointPayload {
    /// The checkpoint's id.
    pub checkpoint_id: String,
    /// The run's status when captured.
    pub status_at_capture: CheckpointStatus,
    /// Short title.
    pub title: Option<String>,
    /// Summary of the state.
    pub summary: Option<String>,
    /// The task in progress.
    pub current_task_id: Option<String>,
    /// The session's todos at capture.
    #[serde(default)]
    pub todo_ids: Vec<String>,
    /// Artifact references.
    #[serde(default)]
    pub artifact_refs: Vec<String>,
    /// Memory references.
    #[serde(default)]
    pub memory_refs: Vec<String>,
    /// Approval references.
    #[serde(default)]
    pub approval_refs: Vec<String>,
    /// Where the execution originated.
    pub dispatch_context: Option<DispatchContext>,
    /// A token to resume from.
    pub resume_token: Option<String>,
    /// The last action's time.
    pub last_action_at: Option<String>,
}

/// The ecosystem contract's AgentDispatchContext (the payload of `dispatch.requested`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DispatchContext {
    /// The surface the work came from.
    pub origin_surface: Option<OriginSurface>,
    /// The product that dispatched it.
    pub origin_product_id: String,
    /// How it was dispatched.
    pub dispatch_mode: DispatchMode,
    /// When (RFC 3339).
    pub initiated_at: String,
}

/// The ecosystem contract's dispatch origin surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum OriginSurface {
    Browser,
    Mobile,
    Desktop,
    Web,
    ProductApi,
}

/// The ecosystem contract's dispatch mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum DispatchMode {
    Interactive,
    Queued,
    Scheduled,
    Remote,
}

/// `task.completion.attempted` (the coding-agent runtime's CompletionAttempt).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionAttemptPayload {
    /// What the agent claims it did.
    pub summary: Option<String>,
    /// Artifacts the agent claims it produced.
    pub claimed_artifacts: Option<Vec<String>>,
}

/// `task.completion.decided` (the coding-agent runtime's CompletionDecision).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionDecisionPayload {
    /// Whether completion is accepted.
    pub accepted: bool,
    /// Why.
    pub reasons: Vec<String>,
    /// Who decided (the runtime, a policy, a reviewer).
    pub decided_by: Option<String>,
}

/// `cost.estimated` and `cost.recorded`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostPayload {
    /// The model the cost is for.
    pub model: Option<String>,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: Option<u64>,
    /// Tokens written to a prompt cache.
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens.
    pub reasoning_tokens: Option<u64>,
    /// All tokens.
    pub total_tokens: Option<u64>,
    /// The cost in US dollars.
    pub cost_usd: Option<f64>,
}

/// `artifact.changed` (the queue runtime's ArtifactRecord, the Agent Runtime spec's artifact refs).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactPayload {
    /// `created`, `updated`, `deleted`, or another word.
    pub change: Option<String>,
    /// The queue runtime's role (`plan`, `execute-report`, `verify-report`, `output`, ...).
    pub role: Option<String>,
    /// The artifact's path.
    pub path: Option<String>,
    /// Its content type.
    pub content_type: Option<String>,
    /// Its content by reference.
    pub content_ref: Option<String>,
    /// Whether it exists (`false` for a reference that did not resolve).
    pub exists: Option<bool>,
    /// When it was verified.
    pub verified_at: Option<String>,
}

/// `evidence.changed`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidencePayload {
    /// E.g. `trace`, `replay`, `verification`, `review`, `export`.
    pub kind: Option<String>,
    /// The evidence by reference.
    pub evidence_ref: Option<String>,
    /// A verification outcome word (`passed`, `failed`, ...).
    pub verification: Option<String>,
    /// A reviewer's note.
    pub note: Option<String>,
}

/// `subagent.*` events.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubagentPayload {
    /// The thread the parent runs in.
    pub parent_thread_id: Option<String>,
    /// The child's own thread.
    pub child_thread_id: Option<String>,
    /// The child's session, when it has its own.
    pub child_session_id: Option<String>,
    /// The queue runtime's profile id.
    pub profile_id: Option<String>,
    /// The child's role.
    pub role: Option<String>,
    /// What the child was asked.
    pub prompt: Option<String>,
    /// The child's status word.
    pub status: Option<String>,
    /// The child's result.
    pub result: Option<String>,
}

/// `context.compaction.*`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPayload {
    /// Why (`auto`, `manual`, a limit).
    pub trigger: Option<String>,
    /// Context tokens before.
    pub tokens_before: Option<u64>,
    /// Context tokens after.
    pub tokens_after: Option<u64>,
    /// The summary, when small.
    pub summary: Option<String>,
    /// The summary by reference.
    pub summary_ref: Option<String>,
    /// The error, on failure.
    pub error: Option<String>,
}

/// The queue runtime's TaskIntent: what a schedule or sensor enqueues.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskIntent {
    /// The task type.
    pub task_type: String,
    /// Where it came from.
    pub source: Option<String>,
    /// Subject line.
    pub subject: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Queue order only.
    pub priority: Option<i64>,
    /// The task's own data.
    #[serde(default)]
    pub payload: Map<String, Value>,
    /// Declared evidence.
    pub evidence_requirements: Option<EvidenceRequirements>,
}

/// `schedule.upserted`: the queue runtime's RecurringScheduleRecord.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulePayload {
    /// The schedule's id.
    pub schedule_id: String,
    /// Its name.
    pub name: String,
    /// Whether it fires.
    pub enabled: bool,
    /// Its interval, at least 1.
    pub interval_seconds: u64,
    /// When it is next due (RFC 3339).
    pub next_run_at: String,
    /// What each run enqueues.
    pub task: TaskIntent,
}

/// `schedule.fired`: one coalesced due run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleFiredPayload {
    /// The schedule.
    pub schedule_id: String,
    /// The evaluation time (RFC 3339).
    pub evaluated_at: String,
    /// The slot that was due (RFC 3339).
    pub due_at: String,
    /// The next run: evaluation time plus one interval.
    pub next_run_at: String,
    /// Missed slots coalesced into this one run.
    #[serde(default)]
    pub missed_runs: u64,
}

/// `sensor.event.recorded` and `sensor.event.deduped`: the queue runtime's SensorEvent.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SensorPayload {
    /// The sensor.
    pub sensor_id: String,
    /// The sensor's own event id.
    pub sensor_event_id: String,
    /// The sensor-owned, stable dedupe key.
    pub dedupe_key: String,
    /// When the sensor observed it.
    pub observed_at: Option<String>,
    /// What it observed.
    pub source_ref: Option<String>,
    /// The event that first carried this key (on `sensor.event.deduped`).
    pub duplicate_of: Option<String>,
}

/// `workflow.transitioned` and `workflow.completed` (the queue runtime's goal loop).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowPayload {
    /// The workflow instance.
    pub workflow_id: String,
    /// The state it left.
    pub from_state: Option<String>,
    /// The state it entered.
    pub to_state: Option<String>,
    /// The recorded signal that moved it (never prose).
    pub signal: Option<String>,
    /// The task whose outcome carried the signal.
    pub signal_task_id: Option<String>,
}

/// `handoff.requested` and `handoff.accepted` (the ecosystem contract's AgentHandoff).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffPayload {
    /// Who hands off.
    pub from_agent: Option<String>,
    /// Who takes over.
    pub to_agent: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// The typed payload shape of an event type, if it has one: its name (for schemas) and the
/// check. `required` is whether the event needs a payload at all. `any` names the shape's
/// fields of type `Option<Value>`, which take any JSON (a test holds the list to the schema).
struct Shape {
    name: &'static str,
    required: bool,
    check: Check,
    any: &'static [&'static str],
}

/// A shape's check of a payload, given the fields to step over; on failure the field's path
/// and what is wrong with it.
type Check = fn(&Value, &[&str]) -> Result<(), (String, String)>;

fn checker<T: DeserializeOwned>(value: &Value, any: &[&str]) -> Result<(), (String, String)> {
    // Every append checks its payloads: the common case, a payload of the right shape, goes
    // without the path tracking, which is worked out only to name the field of one that fails.
    // It also steps over the fields that take any JSON: deserializing one would copy it whole
    // (a tool's arguments, a snapshot's body: often the bulk of the event) to learn nothing.
    let holds = match value {
        Value::Object(map) if !any.is_empty() => T::deserialize(Without { map, any }).is_ok(),
        _ => T::deserialize(value).is_ok(),
    };
    if holds {
        return Ok(());
    }
    serde_path_to_error::deserialize::<_, T>(value)
        .map(drop)
        .map_err(|e| (e.path().to_string(), e.inner().to_string()))
}

macro_rules! shape {
    ($ty:ty, $required:expr) => {
        shape!($ty, $required, [])
    };
    ($ty:ty, $required:expr, [$($any:literal),*]) => {
        Shape {
            name: stringify!($ty),
            required: $required,
            check: checker::<$ty>,
            any: &[$($any),*],
        }
    };
}

/// A payload object seen without some of its fields, for the typed check: a field of type
/// `Option<Value>` takes any JSON, so leaving it out changes no verdict (it reads as absent).
struct Without<'a> {
    map: &'a serde_json::Map<String, Value>,
    any: &'a [&'a str],
}

impl<'de> serde::Deserializer<'de> for Without<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_map(WithoutAccess {
            entries: self.map.iter(),
            any: self.any,
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// The entries of a [`Without`], the left-out fields skipped.
struct WithoutAccess<'de> {
    entries: serde_json::map::Iter<'de>,
    any: &'de [&'de str],
    value: Option<&'de Value>,
}

impl<'de> serde::de::MapAccess<'de> for WithoutAccess<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        for (key, value) in self.entries.by_ref() {
            if self.any.contains(&key.as_str()) {
                continue;
            }
            self.value = Some(value);
            let key = serde::de::value::BorrowedStrDeserializer::<serde_json::Error>::new(key);
            return seed.deserialize(key).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(serde::de::Error::custom(
                "a payload value asked for before its key",
            )),
        }
    }
}

fn shape_of(event_type: &str) -> Option<Shape> {
    Some(match event_type {
        t if t.starts_with("task.attempt.") => shape!(AttemptPayload, false),
        "task.completion.attempted" => shape!(CompletionAttemptPayload, false),
        "task.completion.decided" => shape!(CompletionDecisionPayload, true),
        "task.created"
        | "task.accepted"
        | "task.queued"
        | "task.started"
        | "task.updated"
        | "task.waiting"
        | "task.blocked"
        | "task.paused"
        | "task.resumed"
        | "task.retrying"
        | "task.cancel_requested"
        | "task.cancelled"
        | "task.timed_out"
        | "task.failed"
        | "task.lost"
        | "task.completed"
        | "task.archived" => shape!(TaskPayload, false, ["priority"]),
        "action.required" => shape!(ActionRequiredPayload, false),
        "action.resolved" => shape!(ActionResolvedPayload, false, ["response"]),
        "tool.started" | "tool.args" | "tool.progress" => {
            shape!(ToolCallPayload, false, ["arguments"])
        }
        "tool.result" | "tool.failed" => shape!(ToolResultPayload, false),
        "checklist.created" | "checklist.updated" | "checklist.verification_nudged" => {
            shape!(ChecklistPayload, true)
        }
        "snapshot.written" => shape!(SnapshotPayload, true, ["body"]),
        "checkpoint.captured" => shape!(CheckpointPayload, true),
        "dispatch.requested" => shape!(DispatchContext, true),
        "handoff.requested" | "handoff.accepted" => shape!(HandoffPayload, false),
        "cost.estimated" | "cost.recorded" => shape!(CostPayload, false),
        "artifact.changed" => shape!(ArtifactPayload, false),
        "evidence.changed" => shape!(EvidencePayload, false),
        t if t.starts_with("subagent.") => shape!(SubagentPayload, false),
        t if t.starts_with("context.compaction.") => shape!(CompactionPayload, false),
        "schedule.upserted" => shape!(SchedulePayload, true),
        "schedule.fired" => shape!(ScheduleFiredPayload, true),
        "sensor.event.recorded" | "sensor.event.deduped" => shape!(SensorPayload, true),
        "workflow.transitioned" | "workflow.completed" => shape!(WorkflowPayload, true),
        _ => return None,
    })
}

/// The name of the typed payload of `event_type` (e.g. `ChecklistPayload`), or `None` when the
/// type takes any payload.
#[must_use]
pub fn shape_name(event_type: &str) -> Option<&'static str> {
    shape_of(event_type).map(|s| s.name)
}

/// Checks `payload` against the typed shape of `event_type`.
///
/// # Errors
/// [`EnvelopeError::InvalidPayload`] naming the event type and the field (as a path below
/// `payload`), or the missing payload.
pub fn check(event_type: &str, payload: Option<&Value>) -> Result<(), EnvelopeError> {
    let Some(shape) = shape_of(event_type) else {
        return Ok(());
    };
    let invalid = |field: String, message: String| EnvelopeError::InvalidPayload {
        event_type: event_type.to_string(),
        field,
        message,
    };
    match payload {
        None | Some(Value::Null) if shape.required => Err(invalid(
            "payload".into(),
            format!("a `{event_type}` event needs a {} payload", shape.name),
        )),
        None | Some(Value::Null) => Ok(()),
        Some(value) => (shape.check)(value, shape.any).map_err(|(path, message)| {
            let field = if path == "." {
                "payload".to_string()
            } else {
                format!("payload.{path}")
            };
            invalid(field, bounded(message))
        }),
    }
}

/// The longest payload error message kept, in characters: serde quotes the offending value,
/// which may be megabytes long.
const MESSAGE_CHARS_MAX: usize = 200;

/// `message` cut to [`MESSAGE_CHARS_MAX`] characters, marked with `…` when cut.
fn bounded(message: String) -> String {
    match message.char_indices().nth(MESSAGE_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    }
}

/// The JSON Schemas of every typed payload, by shape name.
#[must_use]
pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    vec![
        ("TaskPayload", schemars::schema_for!(TaskPayload)),
        ("AttemptPayload", schemars::schema_for!(AttemptPayload)),
        (
            "ActionRequiredPayload",
            schemars::schema_for!(ActionRequiredPayload),
        ),
        (
            "ActionResolvedPayload",
            schemars::schema_for!(ActionResolvedPayload),
        ),
        ("ToolCallPayload", schemars::schema_for!(ToolCallPayload)),
        (
            "ToolResultPayload",
            schemars::schema_for!(ToolResultPayload),
        ),
        ("ChecklistPayload", schemars::schema_for!(ChecklistPayload)),
        ("SnapshotPayload", schemars::schema_for!(SnapshotPayload)),
        (
            "CheckpointPayload",
            schemars::schema_for!(CheckpointPayload),
        ),
        ("DispatchContext", schemars::schema_for!(DispatchContext)),
        (
            "CompletionAttemptPayload",
            schemars::schema_for!(CompletionAttemptPayload),
        ),
        (
            "CompletionDecisionPayload",
            schemars::schema_for!(CompletionDecisionPayload),
        ),
        ("CostPayload", schemars::schema_for!(CostPayload)),
        ("ArtifactPayload", schemars::schema_for!(ArtifactPayload)),
        ("EvidencePayload", schemars::schema_for!(EvidencePayload)),
        ("SubagentPayload", schemars::schema_for!(SubagentPayload)),
        (
            "CompactionPayload",
            schemars::schema_for!(CompactionPayload),
        ),
        ("SchedulePayload", schemars::schema_for!(SchedulePayload)),
        (
            "ScheduleFiredPayload",
            schemars::schema_for!(ScheduleFiredPayload),
        ),
        ("SensorPayload", schemars::schema_for!(SensorPayload)),
        ("WorkflowPayload", schemars::schema_for!(WorkflowPayload)),
        ("HandoffPayload", schemars::schema_for!(HandoffPayload)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn untyped_and_vendor_types_take_any_payload() {
        assert!(check("vendor.acme.thing", Some(&json!([1, "x"]))).is_ok());
        assert!(check("model.delta", Some(&json!("text"))).is_ok());
        assert!(check("no.such.type", None).is_ok());
    }

    #[test]
    fn agent_runtime_types_have_optional_fields_but_typed_ones() {
        assert!(check("tool.result", None).is_ok());
        assert!(check("tool.result", Some(&json!({"status": "success", "x": 1}))).is_ok());
        let err = check("tool.result", Some(&json!({"status": "approved"}))).unwrap_err();
        let EnvelopeError::InvalidPayload {
            event_type, field, ..
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(
            (event_type.as_str(), field.as_str()),
            ("tool.result", "payload.status")
        );
        let err = check("cost.recorded", Some(&json!({"inputTokens": "12"}))).unwrap_err();
        assert!(err.to_string().contains("payload.inputTokens"), "{err}");
    }

    #[test]
    fn an_error_quoting_a_huge_value_stays_short() {
        let huge = "y".repeat(2 << 20);
        let err = check("tool.result", Some(&json!(huge))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`tool.result`"), "{text}");
        assert!(text.ends_with('…'), "{text}");
        assert!(
            text.chars().count() < 2 * MESSAGE_CHARS_MAX,
            "{}",
            text.len()
        );
    }

    #[test]
    fn journal_families_require_their_fields() {
        let err = check("task.completion.decided", None).unwrap_err();
        assert!(err
            .to_string()
            .contains("needs a CompletionDecisionPayload"));
        let err = check("task.completion.decided", Some(&json!({"accepted": true}))).unwrap_err();
        assert!(err.to_string().contains("reasons"), "{err}");
        let err = check(
            "checklist.updated",
            Some(&json!({"items": [{"id": "a", "title": "t", "status": "doing"}]})),
        )
        .unwrap_err();
        assert!(err.to_string().contains("payload.items[0].status"), "{err}");
        assert!(check(
            "checklist.updated",
            Some(&json!({"items": [{"id": "a", "title": "t", "status": "in_progress"}]})),
        )
        .is_ok());
        let err = check(
            "checkpoint.captured",
            Some(&json!({"checkpointId": "c1", "statusAtCapture": "waiting_approval"})),
        )
        .unwrap_err();
        assert!(err.to_string().contains("statusAtCapture"), "{err}");
    }

    /// The fields each check steps over are exactly the shape's optional fields that take any
    /// JSON, as its schema says: a field added, retyped or renamed fails here.
    #[test]
    fn the_fields_a_check_steps_over_are_those_that_take_any_json() {
        let schemas = schemas();
        let types = crate::vocabulary::AGENT_RUNTIME_TYPES
            .iter()
            .chain(crate::vocabulary::JOURNAL_TYPES.iter().map(|(t, _)| t));
        let mut seen = 0;
        for t in types {
            let Some(shape) = shape_of(t) else { continue };
            let (_, schema) = schemas.iter().find(|(n, _)| *n == shape.name).unwrap();
            let schema = schema.as_value();
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut any: Vec<&str> = schema["properties"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(name, property)| {
                    // `true` or a schema with no constraint but its description.
                    let unconstrained = property.as_bool() == Some(true)
                        || property
                            .as_object()
                            .is_some_and(|o| o.keys().all(|k| k == "description"));
                    unconstrained && !required.contains(&name.as_str())
                })
                .map(|(name, _)| name.as_str())
                .collect();
            any.sort_unstable();
            let mut listed = shape.any.to_vec();
            listed.sort_unstable();
            assert_eq!(listed, any, "{t} ({})", shape.name);
            seen += usize::from(!listed.is_empty());
        }
        assert!(seen >= 4, "types with fields that take any JSON: {seen}");
    }

    /// Stepping over the fields that take any JSON changes no verdict and no error.
    #[test]
    fn a_check_that_steps_over_any_json_gives_the_verdicts_of_a_full_one() {
        let full = |t: &str, payload: &Value| {
            let shape = shape_of(t).unwrap();
            (shape.check)(payload, &[])
        };
        let stepped = |t: &str, payload: &Value| {
            let shape = shape_of(t).unwrap();
            assert!(!shape.any.is_empty());
            (shape.check)(payload, shape.any)
        };
        let anything = [
            json!(null),
            json!(1),
            json!("x"),
            json!([1, {"a": [null]}]),
            json!({"deep": {"er": [1, 2.5, "s", true]}}),
        ];
        for value in &anything {
            for payload in [
                json!({"toolName": "bash", "arguments": value}),
                json!({"toolName": 7, "arguments": value}),
                json!({"arguments": value, "toolCallId": ["not", "a", "string"]}),
            ] {
                assert_eq!(
                    full("tool.started", &payload),
                    stepped("tool.started", &payload)
                );
            }
            for payload in [
                json!({"snapshotId": "s1", "body": value}),
                json!({"body": value}),
            ] {
                assert_eq!(
                    full("snapshot.written", &payload),
                    stepped("snapshot.written", &payload)
                );
            }
            let task = json!({"priority": value, "status": "nonsense"});
            assert_eq!(full("task.created", &task), stepped("task.created", &task));
            let task = json!({"priority": value, "title": "t"});
            assert_eq!(full("task.created", &task), stepped("task.created", &task));
        }
        assert!(stepped("tool.started", &json!({"toolName": 7, "arguments": 1})).is_err());
        assert!(stepped("tool.started", &json!({"toolName": "b", "arguments": [1]})).is_ok());
    }

    #[test]
    fn every_typed_shape_has_a_schema() {
        let names: Vec<&str> = schemas().iter().map(|(n, _)| *n).collect();
        for t in crate::vocabulary::AGENT_RUNTIME_TYPES
            .iter()
            .chain(crate::vocabulary::JOURNAL_TYPES.iter().map(|(t, _)| t))
        {
            if let Some(name) = shape_name(t) {
                assert!(names.contains(&name), "{t} → {name} has no schema");
            }
        }
    }
}
