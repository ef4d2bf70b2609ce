//! The runtime state of one stream, folded from its events: tasks with their attempts, graph
//! edges and completion decisions; required actions; turns; the session checklist; schedules
//! and sensor dedupe keys. This is the one state machine: commands decide on it, and the read
//! models are built from it.
//!
//! The fold is total: every well-formed fact is applied, even one that breaks a rule of
//! [`crate::rules`]; such a fact is kept and shown as an [`Incident`] on its entity, naming the
//! event and the rule. Nothing is inferred from prose.

use std::collections::{BTreeMap, BTreeSet};

use journal_format::payload::{
    ChecklistItem, ChecklistPayload, CompletionDecisionPayload, EvidenceRequirements,
    MachineStatus, SchedulePayload, SensorPayload, TaskPayload,
};
use journal_format::status::{ChecklistItemStatus, Lifecycle, Outcome};
use journal_format::{Envelope, StoredEvent};
use serde::Serialize;
use serde_json::Value;

use crate::id_map::IdMap;
use crate::projection::Event;
use crate::rules::{self, Rule, Violation};

/// A fact that broke a rule: kept, and shown on its entity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Incident {
    /// The event's position.
    pub position: u64,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The rule it broke.
    pub rule: Rule,
    /// What is wrong.
    pub message: String,
}

/// One execution attempt of a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// The attempt's id.
    pub attempt_id: String,
    /// `running`, `completed` or `failed` (a failed attempt is kept after a retry).
    pub status: String,
    /// Where it started.
    pub started_at_position: u64,
    /// The run executing it, when the event named one.
    #[serde(default)]
    pub run_id: Option<String>,
}

/// The completion decision that applies to a task (the newest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Whether completion was accepted.
    pub accepted: bool,
    /// Why.
    pub reasons: Vec<String>,
    /// The decision event.
    pub event_id: String,
    /// The attempt it was made for, when the event named one.
    pub attempt_id: Option<String>,
}

/// A task as the log tells it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// The task's id.
    pub task_id: String,
    /// Its session, when it has one.
    pub session_id: Option<String>,
    /// Its runtime, when given.
    pub runtime_id: Option<String>,
    /// Its parent task.
    pub parent_task_id: Option<String>,
    /// Its title, when given.
    pub title: Option<String>,
    /// Its objective, when given.
    #[serde(default)]
    pub objective: Option<String>,
    /// The thread it was first seen in.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The turn it was first seen in.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// The producer's time of its `task.created`.
    #[serde(default)]
    pub created_at: Option<String>,
    /// The producer's time of its newest event.
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Its priority, as given (a number or a word).
    #[serde(default)]
    pub priority: Option<Value>,
    /// The queue runtime's source (the dedupe key of an enqueue).
    pub source: Option<String>,
    /// The idempotency key it was created with.
    pub idempotency_key: Option<String>,
    /// Where it stands.
    pub lifecycle: Lifecycle,
    /// How it ended (terminal only).
    pub outcome: Option<Outcome>,
    /// The reason class of its last lifecycle step.
    pub reason: Option<String>,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
    /// Tasks created with this one as parent.
    pub children: Vec<String>,
    /// Tasks this one depends on.
    pub depends_on: BTreeSet<String>,
    /// The evidence it declared.
    pub evidence_requirements: Option<EvidenceRequirements>,
    /// The newest completion decision.
    pub decision: Option<Decision>,
    /// The queue runtime's machine status, when an outcome recorded one.
    pub machine_status: Option<MachineStatus>,
    /// Actions required for this task and not yet resolved.
    pub pending_actions: BTreeSet<String>,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// Facts about this task that broke a rule.
    pub incidents: Vec<Incident>,
}

impl TaskState {
    fn new(task_id: &str) -> TaskState {
        TaskState {
            task_id: task_id.to_string(),
            session_id: None,
            runtime_id: None,
            parent_task_id: None,
            title: None,
            objective: None,
            thread_id: None,
            turn_id: None,
            created_at: None,
            updated_at: None,
            priority: None,
            source: None,
            idempotency_key: None,
            lifecycle: Lifecycle::Unknown,
            outcome: None,
            reason: None,
            attempts: Vec::new(),
            children: Vec::new(),
            depends_on: BTreeSet::new(),
            evidence_requirements: None,
            decision: None,
            machine_status: None,
            pending_actions: BTreeSet::new(),
            cancel_requested: false,
            incidents: Vec::new(),
        }
    }

    /// The attempt in progress, if any.
    #[must_use]
    pub fn current_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.status == "running")
    }

    /// The thread and turn the task was first seen in, and the time of its newest event.
    fn note_context(&mut self, e: &Envelope) {
        if self.thread_id.is_none() {
            self.thread_id.clone_from(&e.thread_id);
        }
        if self.turn_id.is_none() {
            self.turn_id.clone_from(&e.turn_id);
        }
        self.updated_at = Some(e.timestamp.clone());
    }

    /// What `task.created` records; a second creation is applied and shown as an incident.
    fn apply_created(&mut self, event: &Event<'_>, p: &TaskPayload) {
        let e = &event.envelope;
        if self.lifecycle != Lifecycle::Unknown {
            self.incidents.push(incident(
                event,
                Violation::new(
                    Rule::TaskExists,
                    format!("task {} created twice", self.task_id),
                ),
            ));
        }
        self.session_id = e.session_id.clone();
        self.runtime_id = e.runtime_id.clone();
        self.parent_task_id = e.parent_task_id.clone();
        self.title = p.title.clone();
        self.objective = p.objective.clone();
        self.created_at = Some(e.timestamp.clone());
        self.priority = p.priority.clone();
        self.source = p.source.clone();
        self.idempotency_key = e.idempotency_key.clone();
        self.evidence_requirements = p.evidence_requirements.clone();
    }

    /// The completion decision of `task.completion.decided`, which replaces any before it.
    fn apply_decision(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        if let Some(d) = event.payload_as::<CompletionDecisionPayload>() {
            self.decision = Some(Decision {
                accepted: d.accepted,
                reasons: d.reasons,
                event_id: e.event_id.clone(),
                attempt_id: e.attempt_id.clone(),
            });
        }
    }

    /// `task.attempt.completed` or `failed`: the status of the attempt it names (the newest
    /// when it names none).
    fn end_attempt(&mut self, e: &Envelope) {
        let status = if e.event_type.ends_with("completed") {
            "completed"
        } else {
            "failed"
        };
        let id = e.attempt_id.as_deref();
        if let Some(a) = self
            .attempts
            .iter_mut()
            .rev()
            .find(|a| id.is_none_or(|id| a.attempt_id == id))
        {
            a.status = status.into();
        }
    }

    /// The lifecycle step of a `task.*` event, if it takes one: checked against the rules (a
    /// forbidden step is taken and shown as an incident), a new attempt for
    /// `task.attempt.started`, and the outcome of a terminal step. `missing` are the declared
    /// artifacts that do not exist.
    fn apply_step(&mut self, event: &Event<'_>, p: &TaskPayload, missing: &[String]) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        let Some(to) = rules::target_of(t) else {
            return;
        };
        if let Err(v) = rules::check_transition(&self.task_id, self.lifecycle, to, t) {
            self.incidents.push(incident(event, v));
        }
        if t == "task.attempt.started" {
            self.start_attempt(event);
        }
        self.lifecycle = to;
        match t {
            "task.completed" => self.apply_completed(event, p, missing),
            "task.failed" | "task.timed_out" => {
                self.outcome = Some(Outcome::Failed);
                self.finish_running_attempt("failed");
            }
            "task.cancelled" => self.outcome = Some(Outcome::Cancelled),
            _ => {}
        }
    }

    /// A new running attempt (any other still running failed), with no outcome or decision yet.
    fn start_attempt(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let attempt_id = e.attempt_id.clone().unwrap_or_else(|| e.event_id.clone());
        for a in self.attempts.iter_mut().filter(|a| a.status == "running") {
            a.status = "failed".into();
        }
        self.attempts.push(Attempt {
            attempt_id,
            status: "running".into(),
            started_at_position: event.position.0,
            run_id: e.run_id.clone(),
        });
        self.outcome = None;
        self.decision = None;
    }

    /// `task.completed`: its outcome (`ok` unless it says otherwise), `unverified` with an
    /// incident for each rule of the coding-agent runtime's gate it broke, and the running attempt completed.
    fn apply_completed(&mut self, event: &Event<'_>, p: &TaskPayload, missing: &[String]) {
        let mut outcome = p
            .outcome
            .as_deref()
            .and_then(|o| serde_json::from_value(Value::String(o.into())).ok())
            .unwrap_or(Outcome::Ok);
        let broke = self.completion_violations(missing);
        if !broke.is_empty() {
            outcome = Outcome::Unverified;
        }
        for v in broke {
            self.incidents.push(incident(event, v));
        }
        self.outcome = Some(outcome);
        self.finish_running_attempt("completed");
    }

    /// The rules a completion breaks: no accepted decision, declared artifacts `missing`, a
    /// machine status other than `ok`.
    fn completion_violations(&self, missing: &[String]) -> Vec<Violation> {
        let mut broke = Vec::new();
        if !self.decision.as_ref().is_some_and(|d| d.accepted) {
            broke.push(Violation::new(
                Rule::CompletionNotAccepted,
                format!(
                    "task {} completed without an accepted completion decision",
                    self.task_id
                ),
            ));
        }
        if !missing.is_empty() {
            broke.push(Violation::new(
                Rule::EvidenceMissing,
                format!(
                    "task {} completed without its required artifacts: {}",
                    self.task_id,
                    missing.join(", ")
                ),
            ));
        }
        if self.machine_status.is_some_and(|m| m != MachineStatus::Ok) {
            broke.push(Violation::new(
                Rule::MachineStatusNotOk,
                format!(
                    "task {} completed with machine status {:?}",
                    self.task_id, self.machine_status
                ),
            ));
        }
        broke
    }

    /// Ends the newest attempt with `status` when it is still running.
    fn finish_running_attempt(&mut self, status: &str) {
        if let Some(a) = self.attempts.last_mut().filter(|a| a.status == "running") {
            a.status = status.into();
        }
    }
}

/// A required action (a pending human or policy decision).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionState {
    /// The action's id.
    pub action_id: String,
    /// The task it blocks, when any.
    pub task_id: Option<String>,
    /// The tool call it is about, when any.
    pub tool_call_id: Option<String>,
    /// The turn it belongs to, when any.
    pub turn_id: Option<String>,
    /// The kind of decision asked (`tool_permission`, ...).
    pub action_type: Option<String>,
    /// Where it was required.
    pub required_at_position: u64,
    /// The decision, once resolved.
    pub decision: Option<String>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// Where it was resolved.
    pub resolved_at_position: Option<u64>,
}

/// A turn of a thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnState {
    /// The turn's id.
    pub turn_id: String,
    /// Its thread.
    pub thread_id: Option<String>,
    /// `submitted`, `running`, `completed`, `failed` or `interrupted`.
    pub status: String,
}

/// The session checklist (the session runtime).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checklist {
    /// The whole ordered list.
    pub items: Vec<ChecklistItem>,
    /// Whether the verification nudge is raised.
    pub verification_nudge_needed: bool,
    /// The last event that set it.
    pub event_id: String,
    /// The producer's time of the first checklist event.
    #[serde(default)]
    pub created_at: Option<String>,
    /// The producer's time of the last one.
    #[serde(default)]
    pub updated_at: Option<String>,
}

impl Checklist {
    /// The session runtime's nudge condition: at least one implementation item, all implementation items
    /// completed, and no verification item.
    #[must_use]
    pub fn needs_verification_nudge(items: &[ChecklistItem]) -> bool {
        let live = || {
            items
                .iter()
                .filter(|i| i.status != ChecklistItemStatus::Removed)
        };
        let mut implementation = live().filter(|i| i.kind == "implementation").peekable();
        implementation.peek().is_some()
            && implementation.all(|i| i.status == ChecklistItemStatus::Completed)
            && !live().any(|i| i.kind == "verification")
    }

    /// The item kinds the session runtime knows.
    pub const ITEM_KINDS: [&'static str; 2] = ["implementation", "verification"];

    /// The session runtime's rules for a new list: not empty, unique ids, every title not
    /// blank, every kind one of [`Checklist::ITEM_KINDS`], at most one `in_progress`.
    ///
    /// # Errors
    /// The first broken rule.
    pub fn check_items(items: &[ChecklistItem]) -> Result<(), Violation> {
        if items.is_empty() {
            return Err(Violation::new(
                Rule::ChecklistEmpty,
                "a checklist has at least one item",
            ));
        }
        let mut seen = BTreeSet::new();
        for item in items {
            if item.title.trim().is_empty() {
                return Err(Violation::new(
                    Rule::ChecklistBlankTitle,
                    format!("checklist item {} has a blank title", item.id),
                ));
            }
            if !Checklist::ITEM_KINDS.contains(&item.kind.as_str()) {
                return Err(Violation::new(
                    Rule::ChecklistUnknownKind,
                    format!(
                        "checklist item {} has kind {:?}; a kind is {}",
                        item.id,
                        item.kind,
                        Checklist::ITEM_KINDS.join(" or ")
                    ),
                ));
            }
            if !seen.insert(item.id.as_str()) {
                return Err(Violation::new(
                    Rule::ChecklistDuplicateId,
                    format!("checklist item id {} appears twice", item.id),
                ));
            }
        }
        let in_progress: Vec<&str> = items
            .iter()
            .filter(|i| i.status == ChecklistItemStatus::InProgress)
            .map(|i| i.id.as_str())
            .collect();
        if in_progress.len() > 1 {
            return Err(Violation::new(
                Rule::ChecklistMultipleInProgress,
                format!(
                    "at most one item may be in_progress; found {}",
                    in_progress.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// A recurring schedule (the queue runtime).
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleState {
    /// The schedule as last upserted.
    pub schedule: SchedulePayload,
    /// When it is next due, after the last firing.
    pub next_run_at: String,
    /// When it last fired.
    pub last_run_at: Option<String>,
}

/// The state of one stream.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamState {
    /// The stream version this state reflects (the number of events applied).
    pub version: u64,
    /// The position of the last event applied.
    pub position: u64,
    /// Tasks by id.
    pub tasks: IdMap<TaskState>,
    /// Required actions by id.
    pub actions: IdMap<ActionState>,
    /// Turns by id.
    pub turns: IdMap<TurnState>,
    /// The session checklist.
    pub checklist: Option<Checklist>,
    /// Artifacts that exist, by path and by id.
    pub artifacts: BTreeSet<String>,
    /// Schedules by id.
    pub schedules: BTreeMap<String, ScheduleState>,
    /// Sensor dedupe keys seen, with the event that first carried each.
    pub sensor_keys: BTreeMap<String, String>,
    /// Sensor `(sensorId, sensorEventId)` pairs seen, as `sensorId/sensorEventId`.
    pub sensor_events: BTreeSet<String>,
    /// Facts that broke a rule and belong to no task.
    pub incidents: Vec<Incident>,
}

fn incident(event: &StoredEvent, violation: Violation) -> Incident {
    Incident {
        position: event.position.0,
        event_id: event.envelope.event_id.clone(),
        event_type: event.envelope.event_type.clone(),
        rule: violation.rule,
        message: violation.message,
    }
}

impl StreamState {
    /// Folds events (in position order) into a state.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a StoredEvent>) -> StreamState {
        let mut state = StreamState::default();
        for event in events {
            state.apply(&Event::new(event));
        }
        state
    }

    /// Every incident of the stream, on its tasks and on the stream itself, in log order.
    #[must_use]
    pub fn all_incidents(&self) -> Vec<Incident> {
        let mut incidents: Vec<Incident> = self
            .tasks
            .values()
            .flat_map(|t| t.incidents.iter().cloned())
            .chain(self.incidents.iter().cloned())
            .collect();
        incidents.sort_by_key(|i| i.position);
        incidents
    }

    /// Applies one event. Never fails: a fact that breaks a rule is applied and recorded as an
    /// incident.
    pub fn apply(&mut self, event: &Event<'_>) {
        self.version = event.stream_version;
        self.position = event.position.0;
        let t = event.envelope.event_type.as_str();
        match t {
            "action.required" => self.apply_action_required(event),
            "action.resolved" => self.apply_action_resolved(event),
            "turn.submitted" | "turn.started" | "turn.completed" | "turn.failed" => {
                self.apply_turn(&event.envelope);
            }
            "checklist.created" | "checklist.updated" | "checklist.verification_nudged" => {
                self.apply_checklist(event);
            }
            "task.dependency.updated" => self.apply_dependency(&event.envelope),
            "artifact.changed" => self.apply_artifact(event),
            "schedule.upserted" => self.apply_schedule_upserted(event),
            "schedule.fired" => self.apply_schedule_fired(event),
            "sensor.event.recorded" => self.apply_sensor_recorded(event),
            _ => {}
        }
        if t.starts_with("task.") {
            self.apply_task_event(event);
        }
    }

    /// A turn's status from `turn.submitted`, `started`, `completed` or `failed` (`interrupted`
    /// when the failure says so).
    fn apply_turn(&mut self, e: &Envelope) {
        let Some(turn_id) = &e.turn_id else {
            return;
        };
        let status = match e.event_type.as_str() {
            "turn.submitted" => "submitted",
            "turn.started" => "running",
            "turn.completed" => "completed",
            _ if e.status.as_deref() == Some("interrupted") => "interrupted",
            _ => "failed",
        };
        self.turns.insert(
            turn_id,
            TurnState {
                turn_id: turn_id.clone(),
                thread_id: e.thread_id.clone(),
                status: status.into(),
            },
        );
    }

    /// The whole checklist from a checklist event; a list that breaks the session runtime's rules is kept
    /// and shown as an incident.
    fn apply_checklist(&mut self, event: &Event<'_>) {
        let Some(p) = event.payload_as::<ChecklistPayload>() else {
            return;
        };
        let e = &event.envelope;
        if let Err(v) = Checklist::check_items(&p.items) {
            self.incidents.push(incident(event, v));
        }
        let created_at = self
            .checklist
            .as_ref()
            .and_then(|c| c.created_at.clone())
            .or_else(|| Some(e.timestamp.clone()));
        self.checklist = Some(Checklist {
            items: p.items,
            verification_nudge_needed: p.verification_nudge_needed,
            event_id: e.event_id.clone(),
            created_at,
            updated_at: Some(e.timestamp.clone()),
        });
    }

    /// A `depends_on` edge from `task.dependency.updated` (its source the event's task when the
    /// relationship names none).
    fn apply_dependency(&mut self, e: &Envelope) {
        let Some(rel) = &e.task_relationship else {
            return;
        };
        let field = |k: &str| rel.get(k).and_then(Value::as_str).map(str::to_string);
        let from = field("fromTaskId").or(e.task_id.clone());
        if let (Some(from), Some(to), Some("depends_on")) =
            (from, field("toTaskId"), field("kind").as_deref())
        {
            self.add_dependency(&from, &to);
        }
    }

    /// An artifact that exists, or no longer does, by its path and by its id.
    fn apply_artifact(&mut self, event: &Event<'_>) {
        let p: journal_format::payload::ArtifactPayload = event.payload_as().unwrap_or_default();
        let keys = [p.path.clone(), event.envelope.artifact_id.clone()];
        let gone = p.exists == Some(false) || p.change.as_deref() == Some("deleted");
        for key in keys.into_iter().flatten() {
            if gone {
                self.artifacts.remove(&key);
            } else {
                self.artifacts.insert(key);
            }
        }
    }

    /// A schedule as upserted, keeping when it last fired.
    fn apply_schedule_upserted(&mut self, event: &Event<'_>) {
        let Some(p) = event.payload_as::<SchedulePayload>() else {
            return;
        };
        let previous = self.schedules.get(&p.schedule_id);
        let last_run_at = previous.and_then(|s| s.last_run_at.clone());
        self.schedules.insert(
            p.schedule_id.clone(),
            ScheduleState {
                next_run_at: p.next_run_at.clone(),
                last_run_at,
                schedule: p,
            },
        );
    }

    /// A fired schedule's next run and last run.
    fn apply_schedule_fired(&mut self, event: &Event<'_>) {
        let Some(p) = event.payload_as::<journal_format::payload::ScheduleFiredPayload>() else {
            return;
        };
        if let Some(s) = self.schedules.get_mut(&p.schedule_id) {
            s.next_run_at = p.next_run_at;
            s.last_run_at = Some(p.evaluated_at);
        }
    }

    /// A sensor event's dedupe key (with the first event that carried it) and its ids.
    fn apply_sensor_recorded(&mut self, event: &Event<'_>) {
        let Some(p) = event.payload_as::<SensorPayload>() else {
            return;
        };
        self.sensor_keys
            .entry(p.dedupe_key)
            .or_insert_with(|| event.envelope.event_id.clone());
        self.sensor_events
            .insert(format!("{}/{}", p.sensor_id, p.sensor_event_id));
    }

    fn task_mut(&mut self, envelope: &Envelope) -> Option<&mut TaskState> {
        let task_id = envelope.task_id.as_ref()?;
        if !self.tasks.contains_key(task_id) {
            self.tasks.insert(task_id, TaskState::new(task_id));
        }
        self.tasks.get_mut(task_id)
    }

    /// A `task.*` event on its task: the fields it records, the decision or attempt it ends,
    /// its lifecycle step (a step the rules forbid is taken and shown as an incident), and a
    /// new task's place among its parent's children.
    fn apply_task_event(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        // The required artifacts a completion lacks, looked up before the task is borrowed.
        let missing = if t == "task.completed" {
            self.missing_artifacts(e)
        } else {
            Vec::new()
        };
        let Some(task) = self.task_mut(e) else {
            return;
        };
        task.note_context(e);
        let p: TaskPayload = if t.starts_with("task.attempt.") || t.starts_with("task.completion.")
        {
            TaskPayload::default()
        } else {
            event.payload_as().unwrap_or_default()
        };
        if t == "task.created" {
            task.apply_created(event, &p);
        }
        if let Some(m) = p.machine_status {
            task.machine_status = Some(m);
        }
        if p.reason.is_some() {
            task.reason = p.reason.clone();
        }
        match t {
            "task.completion.decided" => return task.apply_decision(event),
            "task.attempt.completed" | "task.attempt.failed" => return task.end_attempt(e),
            "task.cancel_requested" => task.cancel_requested = true,
            _ => {}
        }
        task.apply_step(event, &p, &missing);
        if t == "task.created" {
            if let Some(parent) = &e.parent_task_id {
                self.add_child(parent, e.task_id.clone().unwrap_or_default());
            }
        }
    }

    /// The artifacts the task of `e` declared that do not exist.
    fn missing_artifacts(&self, e: &Envelope) -> Vec<String> {
        e.task_id
            .as_ref()
            .and_then(|id| self.tasks.get(id))
            .and_then(|task| task.evidence_requirements.as_ref())
            .map(|reqs| {
                reqs.required_artifacts
                    .iter()
                    .filter(|a| !self.artifacts.contains(*a))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Lists `child` among the children of `parent`, once.
    fn add_child(&mut self, parent: &str, child: String) {
        if let Some(p) = self.tasks.get_mut(parent) {
            if !p.children.contains(&child) {
                p.children.push(child);
            }
        }
    }

    fn apply_action_required(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let Some(action_id) = e.action_id.clone() else {
            return;
        };
        let p: journal_format::payload::ActionRequiredPayload =
            event.payload_as().unwrap_or_default();
        let waiting = match p.action_type.as_deref() {
            Some(t) if t.contains("input") || t.contains("question") => Lifecycle::WaitingInput,
            _ => Lifecycle::WaitingPermission,
        };
        self.actions.insert(
            &action_id,
            ActionState {
                action_id: action_id.clone(),
                task_id: e.task_id.clone(),
                tool_call_id: e.tool_call_id.clone(),
                turn_id: e.turn_id.clone(),
                action_type: p.action_type,
                required_at_position: event.position.0,
                decision: None,
                decided_by: None,
                resolved_at_position: None,
            },
        );
        if let Some(task) = self.task_mut(e) {
            task.pending_actions.insert(action_id);
            if !task.lifecycle.is_terminal() {
                task.lifecycle = waiting;
            }
        }
    }

    fn apply_action_resolved(&mut self, event: &Event<'_>) {
        let e = &event.envelope;
        let Some(action_id) = e.action_id.clone() else {
            return;
        };
        let p: journal_format::payload::ActionResolvedPayload =
            event.payload_as().unwrap_or_default();
        let Some(action) = self.actions.get_mut(&action_id) else {
            self.incidents.push(incident(
                event,
                Violation::new(
                    Rule::UnknownAction,
                    format!("action {action_id} resolved but never required"),
                ),
            ));
            return;
        };
        if action.resolved_at_position.is_some() {
            let v = Violation::new(
                Rule::ActionAlreadyResolved,
                format!("action {action_id} resolved twice"),
            );
            self.incidents.push(incident(event, v));
            return;
        }
        action.decision = p.decision;
        action.decided_by = p.decided_by;
        action.resolved_at_position = Some(event.position.0);
        let task_id = action.task_id.clone().or(e.task_id.clone());
        if let Some(task) = task_id.and_then(|t| self.tasks.get_mut(&t)) {
            task.pending_actions.remove(&action_id);
            let waiting = matches!(
                task.lifecycle,
                Lifecycle::WaitingPermission | Lifecycle::WaitingInput
            );
            if waiting && task.pending_actions.is_empty() {
                task.lifecycle = Lifecycle::Running;
            }
        }
    }

    /// The active (non-terminal) tasks.
    pub fn active_tasks(&self) -> impl Iterator<Item = &TaskState> {
        self.tasks
            .values()
            .filter(|t| !t.lifecycle.is_terminal() && t.lifecycle != Lifecycle::Unknown)
    }

    /// Every descendant of `task_id` in this stream, depth first.
    #[must_use]
    pub fn descendants(&self, task_id: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![task_id.to_string()];
        let mut seen = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if let Some(task) = self.tasks.get(&id) {
                for child in task.children.iter().rev() {
                    if seen.insert(child.clone()) {
                        out.push(child.clone());
                        stack.push(child.clone());
                    }
                }
            }
        }
        out
    }

    /// Whether `from` depends (transitively) on `to`.
    #[must_use]
    pub fn depends(&self, from: &str, to: &str) -> bool {
        let mut stack = vec![from.to_string()];
        let mut seen = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if id == to {
                return true;
            }
            if seen.insert(id.clone()) {
                if let Some(t) = self.tasks.get(&id) {
                    stack.extend(t.depends_on.iter().cloned());
                }
            }
        }
        false
    }

    /// Records a dependency edge (from `task.dependency.updated`).
    pub(crate) fn add_dependency(&mut self, from: &str, to: &str) {
        if let Some(t) = self.tasks.get_mut(from) {
            t.depends_on.insert(to.to_string());
        }
    }
}
