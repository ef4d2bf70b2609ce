//! Commands: the runtime way to write (MODEL.md §4, seed 002's control plane). A command reads
//! its stream, folds it into a [`StreamState`], decides against the rules of [`crate::rules`],
//! and appends its events atomically with the stream's version as the expected version. When
//! another writer got there first, the command is decided again on the new state (and then
//! applied, found a no-op, or refused), never applied twice.
//!
//! Every command names its stream: the session (`sessionId`), or for a task command without a
//! session, the task's own stream. Queue, schedule and sensor commands run in the session that
//! holds the queue (seed 000: one planning session, each scheduled entry a run in it), so their
//! dedupe checks and their writes are one atomic decision.

use std::collections::BTreeSet;
use std::sync::Arc;

use journal_engine::seams::{Clock, SystemClock};
use journal_engine::{AppendOptions, Error as EngineError, Journal};
use journal_format::payload::{
    ChecklistItem, DispatchContext, EvidenceRequirements, MachineStatus, SchedulePayload,
    TaskIntent,
};
use journal_format::status::{ChecklistItemStatus, Lifecycle};
use journal_format::time_fmt;
use journal_format::{Envelope, StoredEvent};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::rules::{self, Rule, Violation};
use crate::state::{Checklist, StreamState, TaskState};

/// How many times a command is decided again after losing a race for its stream.
const CONFLICT_RETRIES: usize = 8;

/// Why a command did not run.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command breaks a rule; nothing was written.
    #[error("refused by rule {}: {}", .0.rule.name(), .0.message)]
    Refused(Violation),
    /// The journal failed (I/O, closed, read-only); nothing of this command was written.
    #[error(transparent)]
    Journal(#[from] EngineError),
    /// Other writers kept changing the stream; nothing was written.
    #[error("stream {stream} kept changing under the command ({attempts} attempts); try again")]
    Contended {
        /// The stream.
        stream: String,
        /// How many decisions were made.
        attempts: usize,
    },
}

impl CommandError {
    /// The rule this error refuses the command by: a broken rule, or an event the journal
    /// refused (the events a command builds come from its arguments, so that is a refusal of
    /// the arguments, [`Rule::InvalidArguments`]). `None` for a failure of the journal or
    /// contention, which are not the command's fault.
    #[must_use]
    pub fn violation(&self) -> Option<Violation> {
        match self {
            CommandError::Refused(v) => Some(v.clone()),
            CommandError::Journal(
                e @ (EngineError::InvalidEvent { .. }
                | EngineError::EventTooLarge { .. }
                | EngineError::InvalidInput(_)),
            ) => Some(Violation::new(Rule::InvalidArguments, e.to_string())),
            _ => None,
        }
    }
}

impl From<Violation> for CommandError {
    fn from(v: Violation) -> CommandError {
        CommandError::Refused(v)
    }
}

/// What an accepted command did.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The appended events, in order (empty for a no-op).
    pub events: Vec<StoredEvent>,
    /// Why nothing or less than asked was written (a no-op, a dedupe), when so.
    pub note: Option<String>,
}

/// The command names, as `journal command NAME` takes them.
pub const NAMES: [&str; 24] = [
    "create_task",
    "start_task",
    "append_task_progress",
    "pause_task",
    "resume_task",
    "cancel_task",
    "retry_task",
    "decide_completion",
    "complete_task",
    "fail_task",
    "link_tasks",
    "submit_turn",
    "interrupt_turn",
    "respond_action",
    "checklist_create",
    "checklist_update",
    "capture_checkpoint",
    "record_dispatch",
    "enqueue_task",
    "record_sensor_event",
    "upsert_schedule",
    "evaluate_schedules",
    "operator_cancel",
    "require_action",
];

/// Where a command writes: a session, and the runtime and thread to stamp on its events.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scope {
    /// The session (the stream). Task commands may omit it for a task that has none.
    pub session_id: Option<String>,
    /// The runtime, stamped on the events.
    pub runtime_id: Option<String>,
    /// The thread, stamped on the events.
    pub thread_id: Option<String>,
}

/// `create_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The new task's id.
    pub task_id: String,
    /// Its title.
    pub title: Option<String>,
    /// Its objective.
    pub objective: Option<String>,
    /// Its parent task (cancellation reaches children).
    pub parent_task_id: Option<String>,
    /// The evidence it must produce before it completes.
    pub evidence_requirements: Option<EvidenceRequirements>,
}

/// A command on one task: `start_task`, `pause_task`, `resume_task`, `retry_task`,
/// `cancel_task`, `operator_cancel`, `append_task_progress`, `fail_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskCommand {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// Why (a namespaced reason class or words).
    pub reason: Option<String>,
    /// Who asks (`user`, `operator`, `policy`, `runtime`; a cancel from `agent` or `model` is
    /// refused).
    pub requested_by: Option<String>,
    /// The attempt id to open (start and retry); one is generated when absent.
    pub attempt_id: Option<String>,
    /// Progress or failure details, recorded as the payload's extra fields.
    pub details: Option<Map<String, Value>>,
}

/// `decide_completion`: records seed 004's CompletionDecision for the current attempt.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecideCompletion {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// Whether completion is accepted.
    pub accepted: bool,
    /// Why.
    pub reasons: Vec<String>,
    /// Who decided.
    pub decided_by: Option<String>,
}

/// `complete_task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompleteTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task.
    pub task_id: String,
    /// Seed 003's machine status; anything but `ok` is refused.
    pub machine_status: Option<MachineStatus>,
    /// A summary for the operator.
    pub summary: Option<String>,
    /// `refuse` (the default) refuses a completion without an accepted decision or the
    /// declared evidence; `record_unverified` records it with outcome `unverified`.
    #[serde(default)]
    pub policy: CompletionPolicy,
}

/// What `complete_task` does when the gate is not met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompletionPolicy {
    /// Refuse.
    #[default]
    Refuse,
    /// Record the completion with outcome `unverified`.
    RecordUnverified,
}

/// `link_tasks`: a dependency edge.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkTasks {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The dependent task.
    pub task_id: String,
    /// The task it depends on.
    pub depends_on_task_id: String,
}

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

/// An item given to `checklist_create` / `checklist_update` (the id may be omitted).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChecklistItemInput {
    /// Kept when given; generated when absent.
    pub id: Option<String>,
    /// What the item is.
    pub title: String,
    /// `implementation` (default) or `verification`.
    pub kind: Option<String>,
    /// The item's status (default `pending`).
    pub status: Option<ChecklistItemStatus>,
}

/// `checklist_create` and `checklist_update`: the full ordered list.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChecklistCommand {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The whole list.
    pub items: Vec<ChecklistItemInput>,
}

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
    /// Seed 000's dispatch context.
    pub dispatch_context: DispatchContext,
}

/// `enqueue_task` (seed 003).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnqueueTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task id; generated when absent.
    pub task_id: Option<String>,
    /// What to do.
    pub intent: TaskIntent,
    /// A client's idempotency key: an active task with the same key is the answer.
    pub idempotency_key: Option<String>,
    /// The attempt budget.
    pub max_attempts: Option<u32>,
}

/// `record_sensor_event` (seed 003's SensorEvent).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordSensorEvent {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The sensor.
    pub sensor_id: String,
    /// The sensor's own event id.
    pub sensor_event_id: String,
    /// The sensor-owned, stable dedupe key.
    pub dedupe_key: String,
    /// When observed.
    pub observed_at: Option<String>,
    /// What was observed.
    pub source_ref: Option<String>,
    /// The sensor's data.
    #[serde(default)]
    pub payload: Map<String, Value>,
    /// The task to enqueue.
    pub proposed_task: Option<TaskIntent>,
}

/// `upsert_schedule` (seed 003's RecurringScheduleRecord).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpsertSchedule {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The schedule.
    pub schedule: SchedulePayload,
}

/// `evaluate_schedules`: fire every due schedule at time `at`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluateSchedules {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The evaluation time (RFC 3339).
    pub at: String,
}

/// One command with its arguments.
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub enum Command {
    CreateTask(CreateTask),
    StartTask(TaskCommand),
    AppendTaskProgress(TaskCommand),
    PauseTask(TaskCommand),
    ResumeTask(TaskCommand),
    CancelTask(TaskCommand),
    OperatorCancel(TaskCommand),
    RetryTask(TaskCommand),
    DecideCompletion(DecideCompletion),
    CompleteTask(CompleteTask),
    FailTask(TaskCommand),
    LinkTasks(LinkTasks),
    SubmitTurn(SubmitTurn),
    InterruptTurn(InterruptTurn),
    RequireAction(RequireAction),
    RespondAction(RespondAction),
    ChecklistCreate(ChecklistCommand),
    ChecklistUpdate(ChecklistCommand),
    CaptureCheckpoint(CaptureCheckpoint),
    RecordDispatch(RecordDispatch),
    EnqueueTask(EnqueueTask),
    RecordSensorEvent(RecordSensorEvent),
    UpsertSchedule(UpsertSchedule),
    EvaluateSchedules(EvaluateSchedules),
}

/// The arguments of command `name`, refusing a bad field by its path and any field the
/// arguments do not know (an argument silently dropped would be a fact silently lost).
fn args<T: DeserializeOwned>(name: &str, value: Value) -> Result<T, Violation> {
    let mut ignored = Vec::new();
    let mut note = |path: serde_ignored::Path<'_>| ignored.push(path.to_string());
    let parsed: T =
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut note))
            .map_err(|e| {
                Violation::new(
                    Rule::InvalidArguments,
                    format!("{name}: `{}`: {}", e.path(), e.inner()),
                )
            })?;
    match ignored.first() {
        Some(path) => Err(Violation::new(
            Rule::InvalidArguments,
            format!("{name}: `{}`: unknown field", path.replace(".?", "")),
        )),
        None => Ok(parsed),
    }
}

/// Refuses an empty id among the arguments (`sessionId`, `taskId`, any field named `…Id`): the
/// journal refuses an event with an empty id, so such a command would fail only after deciding,
/// where it should be refused before anything is opened.
fn check_ids(name: &str, value: &Value) -> Result<(), Violation> {
    let Value::Object(fields) = value else {
        return Ok(());
    };
    match fields
        .iter()
        .find(|(key, v)| key.ends_with("Id") && v.as_str() == Some(""))
    {
        Some((key, _)) => Err(Violation::new(
            Rule::InvalidArguments,
            format!("{name}: `{key}` must not be empty"),
        )),
        None => Ok(()),
    }
}

impl Command {
    /// A command from its name and its arguments as JSON text: one JSON object (duplicate keys
    /// refused), as `journal command` and `POST /v1/commands/{name}` take them.
    ///
    /// # Errors
    /// [`Rule::InvalidArguments`] when the text is empty, not JSON, or not an object, or as
    /// [`Command::parse`].
    pub fn parse_text(name: &str, text: &str) -> Result<Command, Violation> {
        let invalid = |message: String| Violation::new(Rule::InvalidArguments, message);
        let bytes = text.trim().as_bytes();
        if bytes.is_empty() {
            return Err(invalid(
                "no arguments: give them as a JSON object, on the command line or on standard input"
                    .into(),
            ));
        }
        let value = journal_format::strict_json::parse(bytes)
            .map_err(|e| invalid(format!("the command's arguments are not JSON: {e}")))?;
        let kind = match &value {
            Value::Object(_) => return Command::parse(name, value),
            Value::Array(_) => "an array",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            Value::Null => "null",
        };
        Err(invalid(format!(
            "the command's arguments must be a JSON object, not {kind}"
        )))
    }

    /// A command from its name and JSON arguments.
    ///
    /// # Errors
    /// [`Rule::InvalidArguments`] naming the unknown command or the bad field (an empty id
    /// included).
    pub fn parse(name: &str, value: Value) -> Result<Command, Violation> {
        if NAMES.contains(&name) {
            check_ids(name, &value)?;
        }
        Ok(match name {
            "create_task" => Command::CreateTask(args(name, value)?),
            "start_task" => Command::StartTask(args(name, value)?),
            "append_task_progress" => Command::AppendTaskProgress(args(name, value)?),
            "pause_task" => Command::PauseTask(args(name, value)?),
            "resume_task" => Command::ResumeTask(args(name, value)?),
            "cancel_task" => Command::CancelTask(args(name, value)?),
            "operator_cancel" => Command::OperatorCancel(args(name, value)?),
            "retry_task" => Command::RetryTask(args(name, value)?),
            "decide_completion" => Command::DecideCompletion(args(name, value)?),
            "complete_task" => Command::CompleteTask(args(name, value)?),
            "fail_task" => Command::FailTask(args(name, value)?),
            "link_tasks" => Command::LinkTasks(args(name, value)?),
            "submit_turn" => Command::SubmitTurn(args(name, value)?),
            "interrupt_turn" => Command::InterruptTurn(args(name, value)?),
            "require_action" => Command::RequireAction(args(name, value)?),
            "respond_action" => Command::RespondAction(args(name, value)?),
            "checklist_create" => Command::ChecklistCreate(args(name, value)?),
            "checklist_update" => Command::ChecklistUpdate(args(name, value)?),
            "capture_checkpoint" => Command::CaptureCheckpoint(args(name, value)?),
            "record_dispatch" => Command::RecordDispatch(args(name, value)?),
            "enqueue_task" => Command::EnqueueTask(args(name, value)?),
            "record_sensor_event" => Command::RecordSensorEvent(args(name, value)?),
            "upsert_schedule" => Command::UpsertSchedule(args(name, value)?),
            "evaluate_schedules" => Command::EvaluateSchedules(args(name, value)?),
            other => {
                return Err(Violation::new(
                    Rule::InvalidArguments,
                    format!("unknown command `{other}`; known: {}", NAMES.join(", ")),
                ))
            }
        })
    }

    /// The JSON Schema of each command's arguments, by name.
    #[must_use]
    pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
        use schemars::schema_for;
        vec![
            ("create_task", schema_for!(CreateTask)),
            ("start_task", schema_for!(TaskCommand)),
            ("append_task_progress", schema_for!(TaskCommand)),
            ("pause_task", schema_for!(TaskCommand)),
            ("resume_task", schema_for!(TaskCommand)),
            ("cancel_task", schema_for!(TaskCommand)),
            ("retry_task", schema_for!(TaskCommand)),
            ("decide_completion", schema_for!(DecideCompletion)),
            ("complete_task", schema_for!(CompleteTask)),
            ("fail_task", schema_for!(TaskCommand)),
            ("link_tasks", schema_for!(LinkTasks)),
            ("submit_turn", schema_for!(SubmitTurn)),
            ("interrupt_turn", schema_for!(InterruptTurn)),
            ("respond_action", schema_for!(RespondAction)),
            ("checklist_create", schema_for!(ChecklistCommand)),
            ("checklist_update", schema_for!(ChecklistCommand)),
            ("capture_checkpoint", schema_for!(CaptureCheckpoint)),
            ("record_dispatch", schema_for!(RecordDispatch)),
            ("enqueue_task", schema_for!(EnqueueTask)),
            ("record_sensor_event", schema_for!(RecordSensorEvent)),
            ("upsert_schedule", schema_for!(UpsertSchedule)),
            ("evaluate_schedules", schema_for!(EvaluateSchedules)),
            ("operator_cancel", schema_for!(TaskCommand)),
            ("require_action", schema_for!(RequireAction)),
        ]
    }

    fn scope(&self) -> &Scope {
        match self {
            Command::CreateTask(c) => &c.scope,
            Command::StartTask(c)
            | Command::AppendTaskProgress(c)
            | Command::PauseTask(c)
            | Command::ResumeTask(c)
            | Command::CancelTask(c)
            | Command::OperatorCancel(c)
            | Command::RetryTask(c)
            | Command::FailTask(c) => &c.scope,
            Command::DecideCompletion(c) => &c.scope,
            Command::CompleteTask(c) => &c.scope,
            Command::LinkTasks(c) => &c.scope,
            Command::SubmitTurn(c) => &c.scope,
            Command::InterruptTurn(c) => &c.scope,
            Command::RequireAction(c) => &c.scope,
            Command::RespondAction(c) => &c.scope,
            Command::ChecklistCreate(c) | Command::ChecklistUpdate(c) => &c.scope,
            Command::CaptureCheckpoint(c) => &c.scope,
            Command::RecordDispatch(c) => &c.scope,
            Command::EnqueueTask(c) => &c.scope,
            Command::RecordSensorEvent(c) => &c.scope,
            Command::UpsertSchedule(c) => &c.scope,
            Command::EvaluateSchedules(c) => &c.scope,
        }
    }

    /// The task a task command is about.
    fn task_id(&self) -> Option<&str> {
        match self {
            Command::CreateTask(c) => Some(&c.task_id),
            Command::StartTask(c)
            | Command::AppendTaskProgress(c)
            | Command::PauseTask(c)
            | Command::ResumeTask(c)
            | Command::CancelTask(c)
            | Command::OperatorCancel(c)
            | Command::RetryTask(c)
            | Command::FailTask(c) => Some(&c.task_id),
            Command::DecideCompletion(c) => Some(&c.task_id),
            Command::CompleteTask(c) => Some(&c.task_id),
            Command::LinkTasks(c) => Some(&c.task_id),
            _ => None,
        }
    }

    /// The stream key the command reads and writes.
    /// The key of the stream the command decides on and appends to (`session:<id>`, else
    /// `task:<id>`, ...).
    ///
    /// # Errors
    /// [`Rule::InvalidArguments`] for an empty id.
    pub fn stream_key(&self) -> Result<String, Violation> {
        let scope = self.scope();
        if let Some(session) = &scope.session_id {
            if session.is_empty() {
                return Err(Violation::new(
                    Rule::InvalidArguments,
                    "sessionId must not be empty",
                ));
            }
            return Ok(format!("session:{session}"));
        }
        match self.task_id() {
            Some(task) if !task.is_empty() => Ok(format!("task:{task}")),
            _ => Err(Violation::new(
                Rule::InvalidArguments,
                "this command needs a sessionId",
            )),
        }
    }
}

/// Runs commands against a journal.
#[derive(Clone)]
pub struct Commands {
    journal: Journal,
    clock: Arc<dyn Clock>,
}

impl Commands {
    /// Commands on `journal`, stamping events with the system clock.
    #[must_use]
    pub fn new(journal: Journal) -> Commands {
        Commands {
            journal,
            clock: Arc::new(SystemClock),
        }
    }

    /// Stamps events with `clock` instead (tests, simulations).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Commands {
        self.clock = clock;
        self
    }

    /// Parses and runs one command.
    ///
    /// # Errors
    /// As [`Commands::execute`]; bad arguments are refused with [`Rule::InvalidArguments`].
    pub async fn run(&self, name: &str, args: Value) -> Result<Accepted, CommandError> {
        let command = Command::parse(name, args)?;
        self.execute(&command).await
    }

    /// Runs one command: read the stream, decide, append with the expected stream version;
    /// on a conflict, decide again on the new state.
    ///
    /// # Errors
    /// [`CommandError::Refused`] naming the broken rule (nothing written), a journal error, or
    /// [`CommandError::Contended`].
    pub async fn execute(&self, command: &Command) -> Result<Accepted, CommandError> {
        let stream = command.stream_key()?;
        for _ in 0..CONFLICT_RETRIES {
            let history = self.journal.read_stream(&stream, 1)?;
            let state = StreamState::fold(&history);
            let decided = decide(command, &state, &self.context())?;
            if decided.events.is_empty() {
                return Ok(Accepted {
                    events: Vec::new(),
                    note: decided.note,
                });
            }
            let options = AppendOptions {
                expected_stream_version: Some(state.version),
            };
            // Lent: the decided events become the answer's.
            match self.journal.append_batch(&decided.events, options).await {
                Ok(appended) => {
                    let events = decided
                        .events
                        .into_iter()
                        .zip(appended)
                        .map(|(mut envelope, a)| {
                            envelope.event_id = a.event_id.to_string();
                            StoredEvent {
                                position: a.position,
                                recorded_at_ns: a.recorded_at_ns,
                                stream_version: a.stream_version,
                                hash: a.hash,
                                envelope,
                            }
                        })
                        .collect();
                    return Ok(Accepted {
                        events,
                        note: decided.note,
                    });
                }
                Err(EngineError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CommandError::Contended {
            stream,
            attempts: CONFLICT_RETRIES,
        })
    }

    fn context(&self) -> Context {
        let now_ns = self.clock.now_unix_ns();
        Context {
            now: time_fmt::format_rfc3339_ns(now_ns),
            now_ns,
            counter: std::cell::Cell::new(0),
        }
    }
}

/// What a decision needs besides the state: the time, and fresh ids.
struct Context {
    now: String,
    now_ns: i64,
    counter: std::cell::Cell<u32>,
}

impl Context {
    /// A fresh id with a prefix: the time and a counter, unique within the journal's clock.
    fn id(&self, prefix: &str) -> String {
        let n = self.counter.get();
        self.counter.set(n + 1);
        format!("{prefix}_{:x}{n:02x}", self.now_ns)
    }
}

/// A decision: the events to append, and a note.
struct Decided {
    events: Vec<Envelope>,
    note: Option<String>,
}

impl Decided {
    fn events(events: Vec<Envelope>) -> Decided {
        Decided { events, note: None }
    }

    fn noop(note: impl Into<String>) -> Decided {
        Decided {
            events: Vec::new(),
            note: Some(note.into()),
        }
    }
}

/// A new event stamped with the command's scope and time; the journal assigns its id.
fn event(scope: &Scope, ctx: &Context, event_type: &str, payload: Value) -> Envelope {
    let mut e = Envelope::new(event_type, "", ctx.now.clone());
    e.session_id = scope.session_id.clone();
    e.runtime_id = scope.runtime_id.clone();
    e.thread_id = scope.thread_id.clone();
    if !payload.is_null() {
        e.payload = Some(payload);
    }
    e
}

fn task_event(
    scope: &Scope,
    ctx: &Context,
    task: &str,
    event_type: &str,
    payload: Value,
) -> Envelope {
    let mut e = event(scope, ctx, event_type, payload);
    e.task_id = Some(task.to_string());
    e
}

fn known_task<'s>(state: &'s StreamState, task_id: &str) -> Result<&'s TaskState, Violation> {
    state
        .tasks
        .get(task_id)
        .filter(|t| t.lifecycle != Lifecycle::Unknown)
        .ok_or_else(|| {
            Violation::new(
                Rule::UnknownTask,
                format!("task {task_id} does not exist in this stream"),
            )
        })
}

fn with_details(mut payload: Value, details: Option<&Map<String, Value>>) -> Value {
    if let (Value::Object(object), Some(details)) = (&mut payload, details) {
        for (k, v) in details {
            object.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    payload
}

fn checked_transition(task: &TaskState, event_type: &str) -> Result<(), Violation> {
    let to = rules::target_of(event_type).unwrap_or(task.lifecycle);
    rules::check_transition(&task.task_id, task.lifecycle, to, event_type)
}

fn reason_payload(c: &TaskCommand) -> Value {
    let mut p = json!({});
    if let Some(r) = &c.reason {
        set(&mut p, "reason", json!(r));
    }
    if let Some(by) = &c.requested_by {
        set(&mut p, "requestedBy", json!(by));
    }
    with_details(p, c.details.as_ref())
}

fn new_task_events(
    scope: &Scope,
    ctx: &Context,
    task_id: &str,
    intent: &TaskIntent,
    idempotency_key: Option<&str>,
    max_attempts: Option<u32>,
) -> Vec<Envelope> {
    let mut payload = json!({
        "taskType": intent.task_type,
        "title": intent.subject,
        "objective": intent.description,
        "source": intent.source,
        "priority": intent.priority,
        "maxAttempts": max_attempts,
        "evidenceRequirements": intent.evidence_requirements,
        "intent": (!intent.payload.is_empty()).then_some(&intent.payload),
    });
    if let Value::Object(o) = &mut payload {
        o.retain(|_, v| !v.is_null());
    }
    let mut created = task_event(scope, ctx, task_id, "task.created", payload);
    created.idempotency_key = idempotency_key.map(str::to_string);
    let queued = task_event(scope, ctx, task_id, "task.queued", Value::Null);
    vec![created, queued]
}

/// Decides a command on a state. Pure: the same state, command and context give the same
/// events.
#[allow(clippy::too_many_lines)] // One arm per command, each short; reads as a table.
fn decide(command: &Command, state: &StreamState, ctx: &Context) -> Result<Decided, Violation> {
    match command {
        Command::CreateTask(c) => {
            if state
                .tasks
                .get(&c.task_id)
                .is_some_and(|t| t.lifecycle != Lifecycle::Unknown)
            {
                return Err(Violation::new(
                    Rule::TaskExists,
                    format!("task {} already exists", c.task_id),
                ));
            }
            let mut payload = json!({
                "title": c.title,
                "objective": c.objective,
                "evidenceRequirements": c.evidence_requirements,
            });
            if let Value::Object(o) = &mut payload {
                o.retain(|_, v| !v.is_null());
            }
            let mut e = task_event(&c.scope, ctx, &c.task_id, "task.created", payload);
            e.parent_task_id = c.parent_task_id.clone();
            Ok(Decided::events(vec![e]))
        }
        Command::StartTask(c) => {
            let task = known_task(state, &c.task_id)?;
            if task.lifecycle == Lifecycle::Running {
                return Err(Violation::new(
                    Rule::AlreadyRunning,
                    format!("task {} is already running", c.task_id),
                ));
            }
            if !task.pending_actions.is_empty() {
                return Err(pending(task));
            }
            checked_transition(task, "task.attempt.started")?;
            Ok(Decided::events(attempt_events(
                c,
                task,
                ctx,
                "task.started",
            )))
        }
        Command::RetryTask(c) => {
            let task = known_task(state, &c.task_id)?;
            if !rules::retryable_from(task.lifecycle) {
                let rule = if task.lifecycle.is_terminal() {
                    Rule::TerminalIsFinal
                } else {
                    Rule::RetryNeedsFailure
                };
                return Err(Violation::new(
                    rule,
                    format!(
                        "task {} is {} and cannot be retried; a retry needs a failed, timed-out, lost, interrupted or blocked task",
                        c.task_id,
                        lifecycle_word(task.lifecycle)
                    ),
                ));
            }
            let mut events = vec![task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.retrying",
                reason_payload(c),
            )];
            events.extend(attempt_events(c, task, ctx, "task.started"));
            Ok(Decided::events(events))
        }
        Command::AppendTaskProgress(c) => {
            let task = known_task(state, &c.task_id)?;
            refuse_terminal(task, "task.progress")?;
            let mut e = task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.progress",
                with_details(json!({}), c.details.as_ref()),
            );
            e.attempt_id = task.current_attempt().map(|a| a.attempt_id.clone());
            Ok(Decided::events(vec![e]))
        }
        Command::PauseTask(c) => {
            let task = known_task(state, &c.task_id)?;
            if task.lifecycle == Lifecycle::Paused {
                return Ok(Decided::noop(format!(
                    "task {} is already paused",
                    c.task_id
                )));
            }
            checked_transition(task, "task.paused")?;
            Ok(Decided::events(vec![task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.paused",
                reason_payload(c),
            )]))
        }
        Command::ResumeTask(c) => {
            let task = known_task(state, &c.task_id)?;
            if task.lifecycle.is_terminal() {
                return Err(Violation::new(
                    Rule::ResumeOfTerminal,
                    format!(
                        "task {} is {} (terminal); a resume of a terminal task is refused — retry it to open a new attempt",
                        c.task_id,
                        lifecycle_word(task.lifecycle)
                    ),
                ));
            }
            if task.lifecycle == Lifecycle::Running {
                return Ok(Decided::noop(format!(
                    "task {} is already running; resume is a no-op",
                    c.task_id
                )));
            }
            if !task.pending_actions.is_empty() {
                return Err(pending(task));
            }
            checked_transition(task, "task.resumed")?;
            Ok(Decided::events(vec![task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.resumed",
                reason_payload(c),
            )]))
        }
        Command::CancelTask(c) | Command::OperatorCancel(c) => {
            let operator = matches!(command, Command::OperatorCancel(_));
            let by = if operator {
                "operator"
            } else {
                c.requested_by.as_deref().unwrap_or("user")
            };
            if matches!(by, "agent" | "model" | "assistant") {
                return Err(Violation::new(
                    Rule::OnlyOperatorCancels,
                    format!("a cancel requested by `{by}` is refused: cancellation comes from an operator, a user or policy, never from agent output"),
                ));
            }
            let task = known_task(state, &c.task_id)?;
            refuse_terminal(task, "task.cancel_requested")?;
            let mut ids = vec![c.task_id.clone()];
            ids.extend(state.descendants(&c.task_id).into_iter().filter(|id| {
                state
                    .tasks
                    .get(id)
                    .is_some_and(|t| !t.lifecycle.is_terminal())
            }));
            let mut payload = json!({"requestedBy": by, "reason": c.reason.clone().unwrap_or_else(|| by.to_string())});
            if operator {
                set(&mut payload, "reason", json!("queue:operator"));
            }
            let mut events = Vec::new();
            for id in &ids {
                let mut p = payload.clone();
                if id != &c.task_id {
                    set(&mut p, "cancelledWith", json!(c.task_id));
                }
                events.push(task_event(&c.scope, ctx, id, "task.cancel_requested", p));
            }
            for id in &ids {
                let mut p = payload.clone();
                set(&mut p, "outcome", json!("cancelled"));
                let mut e = task_event(&c.scope, ctx, id, "task.cancelled", p);
                if operator {
                    e.native_status = Some("operator_canceled".into());
                }
                events.push(e);
            }
            Ok(Decided::events(events))
        }
        Command::FailTask(c) => {
            let task = known_task(state, &c.task_id)?;
            refuse_terminal(task, "task.failed")?;
            let mut events = Vec::new();
            if let Some(a) = task.current_attempt() {
                let mut e = task_event(
                    &c.scope,
                    ctx,
                    &c.task_id,
                    "task.attempt.failed",
                    with_details(json!({"status": "failed"}), c.details.as_ref()),
                );
                e.attempt_id = Some(a.attempt_id.clone());
                events.push(e);
            }
            let mut p = reason_payload(c);
            set(&mut p, "outcome", json!("failed"));
            events.push(task_event(&c.scope, ctx, &c.task_id, "task.failed", p));
            Ok(Decided::events(events))
        }
        Command::DecideCompletion(c) => {
            let task = known_task(state, &c.task_id)?;
            refuse_terminal(task, "task.completion.decided")?;
            let mut e = task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.completion.decided",
                json!({"accepted": c.accepted, "reasons": c.reasons, "decidedBy": c.decided_by}),
            );
            e.attempt_id = task.current_attempt().map(|a| a.attempt_id.clone());
            Ok(Decided::events(vec![e]))
        }
        Command::CompleteTask(c) => {
            let task = known_task(state, &c.task_id)?;
            refuse_terminal(task, "task.completed")?;
            if !task.pending_actions.is_empty() {
                return Err(pending(task));
            }
            if let Some(m) = c.machine_status.filter(|m| *m != MachineStatus::Ok) {
                return Err(Violation::new(
                    Rule::MachineStatusNotOk,
                    format!(
                        "task {} cannot complete with machine status {m:?}; completed requires ok",
                        c.task_id
                    )
                    .to_lowercase(),
                ));
            }
            let gate = completion_gate(task, state);
            let outcome = match (&gate, c.policy) {
                (Ok(()), _) => "ok",
                (Err(_), CompletionPolicy::RecordUnverified) => "unverified",
                (Err(v), CompletionPolicy::Refuse) => return Err(v.clone()),
            };
            let mut p =
                json!({"outcome": outcome, "machineStatus": c.machine_status.map(|_| "ok")});
            if let Some(s) = &c.summary {
                set(&mut p, "operatorSummary", json!(s));
            }
            if let Err(v) = &gate {
                set(
                    &mut p,
                    "reason",
                    json!(format!("journal:{}", v.rule.name())),
                );
            }
            if let Value::Object(o) = &mut p {
                o.retain(|_, v| !v.is_null());
            }
            let mut events = Vec::new();
            if let Some(a) = task.current_attempt() {
                let mut e = task_event(
                    &c.scope,
                    ctx,
                    &c.task_id,
                    "task.attempt.completed",
                    json!({"status": "completed"}),
                );
                e.attempt_id = Some(a.attempt_id.clone());
                events.push(e);
            }
            events.push(task_event(&c.scope, ctx, &c.task_id, "task.completed", p));
            Ok(Decided::events(events))
        }
        Command::LinkTasks(c) => {
            known_task(state, &c.task_id)?;
            known_task(state, &c.depends_on_task_id)?;
            if c.task_id == c.depends_on_task_id || state.depends(&c.depends_on_task_id, &c.task_id)
            {
                return Err(Violation::new(
                    Rule::DependencyCycle,
                    format!(
                        "task {} depending on {} would close a cycle",
                        c.task_id, c.depends_on_task_id
                    ),
                ));
            }
            let mut e = task_event(
                &c.scope,
                ctx,
                &c.task_id,
                "task.dependency.updated",
                Value::Null,
            );
            let mut rel = Map::new();
            rel.insert("kind".into(), json!("depends_on"));
            rel.insert("fromTaskId".into(), json!(c.task_id));
            rel.insert("toTaskId".into(), json!(c.depends_on_task_id));
            e.task_relationship = Some(Box::new(rel));
            Ok(Decided::events(vec![e]))
        }
        Command::SubmitTurn(c) => {
            if state.turns.contains_key(&c.turn_id) {
                return Err(Violation::new(
                    Rule::TurnExists,
                    format!("turn {} was already submitted", c.turn_id),
                ));
            }
            let busy = state.turns.values().any(|t| {
                t.thread_id == c.scope.thread_id
                    && matches!(t.status.as_str(), "submitted" | "running")
            });
            let mut e = event(&c.scope, ctx, "turn.submitted", json!({"input": c.input}));
            e.turn_id = Some(c.turn_id.clone());
            e.status = Some(if busy { "queued" } else { "accepted" }.into());
            Ok(Decided::events(vec![e]))
        }
        Command::InterruptTurn(c) => {
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
        Command::RequireAction(c) => {
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
            let mut e = event(
                &c.scope,
                ctx,
                "action.required",
                json!({"actionType": c.action_type, "prompt": c.prompt}),
            );
            if let Some(Value::Object(o)) = &mut e.payload {
                o.retain(|_, v| !v.is_null());
            }
            e.action_id = Some(c.action_id.clone());
            e.task_id = c.task_id.clone();
            e.tool_call_id = c.tool_call_id.clone();
            Ok(Decided::events(vec![e]))
        }
        Command::RespondAction(c) => {
            let action = state.actions.get(&c.action_id).ok_or_else(|| {
                Violation::new(
                    Rule::UnknownAction,
                    format!("action {} was never required", c.action_id),
                )
            })?;
            if action.resolved_at_position.is_some() {
                return Err(Violation::new(
                    Rule::ActionAlreadyResolved,
                    format!(
                        "action {} was already resolved ({}) at position {}",
                        c.action_id,
                        action.decision.as_deref().unwrap_or("no decision"),
                        action.resolved_at_position.unwrap_or_default()
                    ),
                ));
            }
            let mut e = event(
                &c.scope,
                ctx,
                "action.resolved",
                json!({"decision": c.decision, "decidedBy": c.decided_by, "response": c.response}),
            );
            if let Some(Value::Object(o)) = &mut e.payload {
                o.retain(|_, v| !v.is_null());
            }
            e.action_id = Some(c.action_id.clone());
            e.task_id = action.task_id.clone();
            e.tool_call_id = action.tool_call_id.clone();
            e.turn_id = action.turn_id.clone();
            let mut events = vec![e];
            // A denial is never a tool success: the tool call it gated fails.
            if is_denial(&c.decision) {
                if let Some(call) = &action.tool_call_id {
                    let mut f = event(
                        &c.scope,
                        ctx,
                        "tool.failed",
                        json!({"status": "failure", "errorType": "permission_denied", "error": format!("denied by {}", c.decided_by)}),
                    );
                    f.tool_call_id = Some(call.clone());
                    f.task_id = action.task_id.clone();
                    f.action_id = Some(c.action_id.clone());
                    events.push(f);
                }
            }
            Ok(Decided::events(events))
        }
        Command::ChecklistCreate(c) | Command::ChecklistUpdate(c) => {
            let create = matches!(command, Command::ChecklistCreate(_));
            match (&state.checklist, create) {
                (Some(_), true) => {
                    return Err(Violation::new(
                        Rule::ChecklistExists,
                        "a checklist already exists in this session; use checklist_update",
                    ))
                }
                (None, false) => {
                    return Err(Violation::new(
                        Rule::NoChecklist,
                        "no checklist exists in this session; use checklist_create",
                    ))
                }
                _ => {}
            }
            let items = checklist_items(&c.items);
            Checklist::check_items(&items)?;
            let nudge = Checklist::needs_verification_nudge(&items);
            let was = state
                .checklist
                .as_ref()
                .is_some_and(|l| l.verification_nudge_needed);
            let kind = if create {
                "checklist.created"
            } else {
                "checklist.updated"
            };
            let payload = json!({"items": items, "verificationNudgeNeeded": nudge});
            let mut events = vec![event(&c.scope, ctx, kind, payload.clone())];
            // Edge-triggered: the nudge is emitted when the condition becomes true.
            if nudge && !was {
                events.push(event(
                    &c.scope,
                    ctx,
                    "checklist.verification_nudged",
                    payload,
                ));
            }
            Ok(Decided::events(events))
        }
        Command::CaptureCheckpoint(c) => {
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
            if let Value::Object(o) = &mut p {
                o.retain(|_, v| !v.is_null());
            }
            let mut e = event(&c.scope, ctx, "checkpoint.captured", p);
            e.task_id = c.task_id.clone();
            e.run_id = c.run_id.clone();
            Ok(Decided::events(vec![e]))
        }
        Command::RecordDispatch(c) => {
            if let Some(t) = &c.task_id {
                known_task(state, t)?;
            }
            let payload = serde_json::to_value(&c.dispatch_context).map_err(|e| {
                Violation::new(Rule::InvalidArguments, format!("dispatchContext: {e}"))
            })?;
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
        Command::EnqueueTask(c) => {
            let duplicate = state.active_tasks().find(|t| {
                let same_key =
                    c.idempotency_key.is_some() && t.idempotency_key == c.idempotency_key;
                let same_source = c.intent.source.is_some() && t.source == c.intent.source;
                same_key || same_source
            });
            if let Some(t) = duplicate {
                return Ok(Decided::noop(format!(
                    "deduped: active task {} has the same source or idempotency key",
                    t.task_id
                )));
            }
            let task_id = c.task_id.clone().unwrap_or_else(|| ctx.id("task"));
            if state.tasks.contains_key(&task_id) {
                return Err(Violation::new(
                    Rule::TaskExists,
                    format!("task {task_id} already exists"),
                ));
            }
            Ok(Decided::events(new_task_events(
                &c.scope,
                ctx,
                &task_id,
                &c.intent,
                c.idempotency_key.as_deref(),
                c.max_attempts,
            )))
        }
        Command::RecordSensorEvent(c) => {
            let pair = format!("{}/{}", c.sensor_id, c.sensor_event_id);
            let first = state.sensor_keys.get(&c.dedupe_key).cloned();
            let seen = first.is_some() || state.sensor_events.contains(&pair);
            let mut payload = json!({
                "sensorId": c.sensor_id,
                "sensorEventId": c.sensor_event_id,
                "dedupeKey": c.dedupe_key,
                "observedAt": c.observed_at,
                "sourceRef": c.source_ref,
                "data": c.payload,
            });
            if seen {
                set(&mut payload, "duplicateOf", json!(first));
            }
            if let Value::Object(o) = &mut payload {
                o.retain(|_, v| !v.is_null());
            }
            if seen {
                let mut e = event(&c.scope, ctx, "sensor.event.deduped", payload);
                e.idempotency_key = Some(c.dedupe_key.clone());
                return Ok(Decided {
                    events: vec![e],
                    note: Some(format!(
                        "deduped: the sensor event {pair} or its dedupe key {} was seen before; nothing was created",
                        c.dedupe_key
                    )),
                });
            }
            let mut recorded = event(&c.scope, ctx, "sensor.event.recorded", payload);
            recorded.idempotency_key = Some(c.dedupe_key.clone());
            let mut events = vec![recorded];
            if let Some(intent) = &c.proposed_task {
                let mut intent = intent.clone();
                intent
                    .source
                    .get_or_insert_with(|| format!("sensor:{}:{}", c.sensor_id, c.dedupe_key));
                let task_id = ctx.id("task");
                events.extend(new_task_events(
                    &c.scope, ctx, &task_id, &intent, None, None,
                ));
            }
            Ok(Decided::events(events))
        }
        Command::UpsertSchedule(c) => {
            if c.schedule.interval_seconds == 0 {
                return Err(Violation::new(
                    Rule::InvalidInterval,
                    format!(
                        "schedule {}: intervalSeconds must be at least 1",
                        c.schedule.schedule_id
                    ),
                ));
            }
            let next_run = time_fmt::parse_rfc3339_ns(&c.schedule.next_run_at).map_err(|e| {
                Violation::new(Rule::InvalidArguments, format!("schedule.nextRunAt: {e}"))
            })?;
            next_run_after(
                next_run,
                &c.schedule.schedule_id,
                c.schedule.interval_seconds,
            )?;
            let payload = serde_json::to_value(&c.schedule)
                .map_err(|e| Violation::new(Rule::InvalidArguments, format!("schedule: {e}")))?;
            Ok(Decided::events(vec![event(
                &c.scope,
                ctx,
                "schedule.upserted",
                payload,
            )]))
        }
        Command::EvaluateSchedules(c) => {
            let at = time_fmt::parse_rfc3339_ns(&c.at)
                .map_err(|e| Violation::new(Rule::InvalidArguments, format!("at: {e}")))?;
            let mut events = Vec::new();
            for (id, s) in &state.schedules {
                if !s.schedule.enabled {
                    continue;
                }
                let Ok(due) = time_fmt::parse_rfc3339_ns(&s.next_run_at) else {
                    continue;
                };
                if due > at {
                    continue;
                }
                let interval_ns = i128::from(s.schedule.interval_seconds) * 1_000_000_000;
                let missed = u64::try_from((at - due) / interval_ns).unwrap_or(u64::MAX);
                let next = next_run_after(at, id, s.schedule.interval_seconds)?;
                let next_run_at = time_fmt::format_rfc3339_ns(next);
                events.push(event(
                    &c.scope,
                    ctx,
                    "schedule.fired",
                    json!({
                        "scheduleId": id,
                        "evaluatedAt": c.at,
                        "dueAt": s.next_run_at,
                        "nextRunAt": next_run_at,
                        "missedRuns": missed,
                    }),
                ));
                let mut intent = s.schedule.task.clone();
                intent.source = Some(format!("schedule:{id}:{}", s.next_run_at));
                let task_id = ctx.id("task");
                events.extend(new_task_events(
                    &c.scope, ctx, &task_id, &intent, None, None,
                ));
            }
            if events.is_empty() {
                return Ok(Decided::noop(format!("no schedule is due at {}", c.at)));
            }
            Ok(Decided::events(events))
        }
    }
}

/// The run `interval_seconds` after `from_ns`, when the journal can record it: times are
/// nanoseconds since 1970 in 64 bits, up to 2262-04-11T23:47:16.854775807Z.
///
/// # Errors
/// `invalid_interval` naming the schedule, never a run clamped to the last recordable time.
fn next_run_after(
    from_ns: i128,
    schedule_id: &str,
    interval_seconds: u64,
) -> Result<i64, Violation> {
    i128::from(interval_seconds)
        .checked_mul(1_000_000_000)
        .and_then(|interval_ns| from_ns.checked_add(interval_ns))
        .and_then(|next| i64::try_from(next).ok())
        .ok_or_else(|| {
            Violation::new(
                Rule::InvalidInterval,
                format!(
                    "schedule {schedule_id}: intervalSeconds {interval_seconds} after {} puts the \
                     next run past {}, the last time the journal can record",
                    time_fmt::format_rfc3339_ns(i64::try_from(from_ns).unwrap_or(i64::MAX)),
                    time_fmt::format_rfc3339_ns(i64::MAX)
                ),
            )
        })
}

fn lifecycle_word(l: Lifecycle) -> String {
    serde_json::to_value(l)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{l:?}"))
}

fn pending(task: &TaskState) -> Violation {
    let ids: Vec<&str> = task.pending_actions.iter().map(String::as_str).collect();
    Violation::new(
        Rule::ActionPending,
        format!(
            "task {} waits on action {}; only respond_action with that id moves it on",
            task.task_id,
            ids.join(", ")
        ),
    )
}

fn refuse_terminal(task: &TaskState, event_type: &str) -> Result<(), Violation> {
    if task.lifecycle.is_terminal() {
        return Err(Violation::new(
            Rule::TerminalIsFinal,
            format!(
                "task {} is {} (terminal); `{event_type}` is refused",
                task.task_id,
                lifecycle_word(task.lifecycle)
            ),
        ));
    }
    Ok(())
}

fn attempt_events(
    c: &TaskCommand,
    task: &TaskState,
    ctx: &Context,
    lifecycle_type: &str,
) -> Vec<Envelope> {
    let attempt_id = c.attempt_id.clone().unwrap_or_else(|| ctx.id("attempt"));
    let number = task.attempts.len() + 1;
    let mut p = json!({"attemptNumber": number});
    if let Some(previous) = task.attempts.last() {
        set(&mut p, "previousAttemptId", json!(previous.attempt_id));
    }
    let mut started = task_event(&c.scope, ctx, &c.task_id, "task.attempt.started", p);
    started.attempt_id = Some(attempt_id.clone());
    let mut lifecycle = task_event(&c.scope, ctx, &c.task_id, lifecycle_type, reason_payload(c));
    lifecycle.attempt_id = Some(attempt_id);
    vec![started, lifecycle]
}

/// Seed 004's gate: an accepted completion decision for the current attempt, and every artifact
/// the task declared.
///
/// # Errors
/// The first unmet condition.
pub fn completion_gate(task: &TaskState, state: &StreamState) -> Result<(), Violation> {
    match &task.decision {
        Some(d) if d.accepted => {}
        Some(d) => {
            return Err(Violation::new(
                Rule::CompletionNotAccepted,
                format!(
                    "task {}: the completion decision {} was not accepted ({})",
                    task.task_id,
                    d.event_id,
                    d.reasons.join("; ")
                ),
            ))
        }
        None => {
            return Err(Violation::new(
                Rule::CompletionNotAccepted,
                format!(
                    "task {} has no accepted completion decision for its current attempt",
                    task.task_id
                ),
            ))
        }
    }
    if let Some(reqs) = &task.evidence_requirements {
        let missing: Vec<&str> = reqs
            .required_artifacts
            .iter()
            .filter(|a| !state.artifacts.contains(*a))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Violation::new(
                Rule::EvidenceMissing,
                format!(
                    "task {} declared artifacts that do not exist: {}",
                    task.task_id,
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn is_denial(decision: &str) -> bool {
    matches!(
        decision.to_ascii_lowercase().as_str(),
        "deny" | "denied" | "reject" | "rejected" | "decline" | "declined" | "cancel"
    )
}

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

/// The items of a checklist command with ids assigned (`item-N`, unused in the list) and
/// defaults applied.
fn checklist_items(input: &[ChecklistItemInput]) -> Vec<ChecklistItem> {
    let mut used: BTreeSet<String> = input.iter().filter_map(|i| i.id.clone()).collect();
    let mut next = 1usize;
    input
        .iter()
        .map(|i| {
            let id = i.id.clone().unwrap_or_else(|| loop {
                let candidate = format!("item-{next}");
                next += 1;
                if used.insert(candidate.clone()) {
                    break candidate;
                }
            });
            ChecklistItem {
                id,
                title: i.title.clone(),
                kind: i.kind.clone().unwrap_or_else(|| "implementation".into()),
                status: i.status.unwrap_or(ChecklistItemStatus::Pending),
            }
        })
        .collect()
}

/// Sets `key` on a JSON object (does nothing on another value).
fn set(object: &mut Value, key: &str, value: Value) {
    if let Value::Object(o) = object {
        o.insert(key.to_string(), value);
    }
}
