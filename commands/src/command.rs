//! The command type: [`Command`], one variant per command of the control plane with its
//! arguments, parsed from a name and JSON (unknown arguments and empty ids refused before
//! anything is opened); [`Scope`], where a command writes; the JSON Schema of each command's
//! arguments; and the key of the stream a command decides on.

use journal_projections::rules::{Rule, Violation};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::action::{RequireAction, RespondAction};
use crate::checklist::ChecklistCommand;
use crate::completion::{CompleteTask, DecideCompletion};
use crate::queue::{EnqueueTask, RecordSensorEvent};
use crate::schedule::{EvaluateSchedules, UpsertSchedule};
pub use crate::scope::Scope;
use crate::session::{CaptureCheckpoint, RecordDispatch};
use crate::task::{CreateTask, LinkTasks, TaskCommand};
use crate::turn::{InterruptTurn, SubmitTurn};

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
