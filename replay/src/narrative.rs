//! The narrative of a run, a task or a session: its events in log order, grouped into steps
//! (a tool call with its result, a model call, an approval with its decision, ...), each naming
//! its canonical event ids and positions, its producer and times, and whether it was observed or
//! inferred; the gaps in the record; and the final state with why it was reached.
//!
//! Nothing is smoothed over: a call with no result, a run with no terminal event, a hole or
//! reversal in a producer's `sequence`, timestamps going backwards and an approval never
//! resolved are gaps, and a run that ended with an approval unresolved is never shown completed.

use std::collections::BTreeMap;

use journal_format::time_fmt::format_rfc3339_ns;
use journal_format::{Provenance, StoredEvent};
use serde::Serialize;
use serde_json::{json, Value};

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
    /// What kind of step: `request`, `turn`, `model_call`, `tool_call`, `process`,
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
    /// What was requested (turn inputs, task objectives), in order.
    pub requested: Vec<String>,
    /// The steps, in log order.
    pub steps: Vec<Step>,
    /// The gaps.
    pub gaps: Vec<Gap>,
    /// How it ended.
    pub final_state: FinalState,
    /// Facts in scope that broke a rule of MODEL.md §4 (kept, and shown).
    pub incidents: Vec<journal_projections::state::Incident>,
    /// Counts.
    pub counts: Counts,
}

fn producer(event: &StoredEvent) -> Option<String> {
    let e = &event.envelope;
    match (&e.runtime_id, &e.native_ns) {
        (Some(r), Some(ns)) => Some(format!("{r} ({ns})")),
        (Some(r), None) => Some(r.clone()),
        (None, Some(ns)) => Some(ns.clone()),
        (None, None) => None,
    }
}

fn evidence_of(event: &StoredEvent) -> Evidence {
    match event.envelope.provenance {
        Some(Provenance::Inferred | Provenance::Projected) => Evidence::Inferred,
        _ => Evidence::Observed,
    }
}

fn ids(event: &StoredEvent) -> BTreeMap<String, String> {
    let e = &event.envelope;
    [
        ("threadId", &e.thread_id),
        ("turnId", &e.turn_id),
        ("taskId", &e.task_id),
        ("runId", &e.run_id),
        ("attemptId", &e.attempt_id),
        ("toolCallId", &e.tool_call_id),
        ("actionId", &e.action_id),
        ("subagentId", &e.subagent_id),
        ("modelRequestId", &e.model_request_id),
        ("processId", &e.process_id),
        ("artifactId", &e.artifact_id),
        ("evidenceId", &e.evidence_id),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
    .collect()
}

fn payload_str<'a>(event: &'a StoredEvent, field: &str) -> Option<&'a str> {
    event
        .envelope
        .payload
        .as_ref()
        .and_then(|p| p.get(field))
        .and_then(Value::as_str)
}

/// The payload as a step shows it: strings beyond 2,000 characters are cut, with their length
/// (the whole value stays in the event, and `outputRef` points at blobs).
fn shown(value: Option<&Value>) -> Value {
    const CHARS_MAX: usize = 2000;
    match value {
        None => Value::Null,
        Some(Value::String(s)) if s.chars().count() > CHARS_MAX => {
            let cut: String = s.chars().take(CHARS_MAX).collect();
            json!({"text": cut, "truncatedFrom": s.chars().count()})
        }
        Some(Value::Object(m)) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), shown(Some(v)))).collect())
        }
        Some(Value::Array(a)) => Value::Array(a.iter().map(|v| shown(Some(v))).collect()),
        Some(v) => v.clone(),
    }
}

fn step(kind: &str, title: String, event: &StoredEvent) -> Step {
    let e = &event.envelope;
    let mut details = serde_json::Map::new();
    if let Some(p) = &e.payload {
        details.insert("payload".into(), shown(Some(p)));
    }
    if let Some(r) = &e.output_ref {
        details.insert("outputRef".into(), json!(r));
    }
    if let Some(s) = &e.status {
        details.insert("status".into(), json!(s));
    }
    Step {
        kind: kind.to_string(),
        title,
        evidence: evidence_of(event),
        event_ids: vec![e.event_id.clone()],
        positions: vec![event.position.0],
        producer: producer(event),
        timestamp: e.timestamp.clone(),
        recorded_at: format_rfc3339_ns(event.recorded_at_ns),
        ids: ids(event),
        details: Value::Object(details),
        complete: true,
        children: Vec::new(),
    }
}

/// Adds a later event to a step (a result to its call, a decision to its approval).
fn join(step: &mut Step, event: &StoredEvent, role: &str) {
    step.event_ids.push(event.envelope.event_id.clone());
    step.positions.push(event.position.0);
    if evidence_of(event) == Evidence::Inferred {
        step.evidence = Evidence::Inferred;
    }
    for (k, v) in ids(event) {
        step.ids.entry(k).or_insert(v);
    }
    if let Value::Object(d) = &mut step.details {
        let mut part = serde_json::Map::new();
        part.insert("type".into(), json!(event.envelope.event_type));
        if let Some(p) = &event.envelope.payload {
            part.insert("payload".into(), shown(Some(p)));
        }
        if let Some(r) = &event.envelope.output_ref {
            part.insert("outputRef".into(), json!(r));
        }
        if let Some(s) = &event.envelope.status {
            part.insert("status".into(), json!(s));
        }
        d.insert(role.to_string(), Value::Object(part));
    }
}

/// What a lifecycle event type means, in a word.
fn lifecycle_word(t: &str) -> Option<&'static str> {
    Some(match t {
        "task.created" => "created",
        "task.accepted" => "accepted",
        "task.queued" => "queued",
        "task.started" => "started",
        "task.paused" => "paused",
        "task.resumed" => "resumed",
        "task.retrying" => "retrying",
        "task.waiting" => "waiting",
        "task.blocked" => "blocked",
        "task.cancel_requested" => "cancel requested",
        "task.cancelled" => "cancelled",
        "task.timed_out" => "timed out",
        "task.failed" => "failed",
        "task.lost" => "lost",
        "task.completed" => "completed",
        "task.archived" => "archived",
        "task.progress" => "progress",
        _ => return None,
    })
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
#[allow(clippy::too_many_lines)] // One arm per kind of step; reads as a table.
pub fn build(scope: &Scope, events: &[StoredEvent], at: Option<u64>, head: u64) -> Narrative {
    let events = latest_states(
        events
            .iter()
            .filter(|e| at.is_none_or(|at| e.position.0 <= at))
            .collect(),
    );
    let mut steps: Vec<Step> = Vec::new();
    let mut gaps: Vec<Gap> = Vec::new();
    let mut requested = Vec::new();
    // Open steps by the id that will close them: index into `steps`.
    let mut open_tools: BTreeMap<String, usize> = BTreeMap::new();
    let mut open_models: BTreeMap<String, usize> = BTreeMap::new();
    let mut open_actions: BTreeMap<String, usize> = BTreeMap::new();
    let mut open_subagents: BTreeMap<String, usize> = BTreeMap::new();
    let mut open_processes: BTreeMap<String, usize> = BTreeMap::new();
    let mut counts = Counts::default();
    // Sequence and time checks per producer.
    let mut last_sequence: BTreeMap<String, (u64, &StoredEvent)> = BTreeMap::new();
    let mut last_time: Option<(i128, &StoredEvent)> = None;
    let mut last_lifecycle: Option<(&'static str, &StoredEvent)> = None;
    let mut run_ended = false;

    for event in &events {
        let event = *event;
        let e = &event.envelope;
        let t = e.event_type.as_str();
        counts.events += 1;
        // A producer's sequence is checked over a whole session: a task or run holds only
        // some of the session's events, so holes there would be noise.
        if let (Some(seq), Scope::Session(_)) = (e.sequence, scope) {
            let key = format!(
                "{}|{}",
                e.runtime_id.as_deref().unwrap_or("-"),
                e.session_id.as_deref().unwrap_or("-")
            );
            if let Some((prev, prev_event)) = last_sequence.get(&key) {
                let (kind, detail) = if seq <= *prev {
                    ("sequence_reversal", format!("sequence {seq} after {prev}"))
                } else if seq > prev + 1 {
                    (
                        "sequence_hole",
                        format!(
                            "sequence jumps from {prev} to {seq}: {} missing",
                            seq - prev - 1
                        ),
                    )
                } else {
                    ("", String::new())
                };
                if !kind.is_empty() {
                    gaps.push(Gap {
                        kind: kind.into(),
                        detail,
                        event_ids: vec![prev_event.envelope.event_id.clone(), e.event_id.clone()],
                        positions: vec![prev_event.position.0, event.position.0],
                    });
                }
            }
            last_sequence.insert(key, (seq, event));
        }
        if let Ok(ns) = journal_format::time_fmt::parse_rfc3339_ns(&e.timestamp) {
            if let Some((prev, prev_event)) = last_time {
                if ns < prev {
                    gaps.push(Gap {
                        kind: "timestamp_reversal".into(),
                        detail: format!(
                            "{} is earlier than the event before it ({})",
                            e.timestamp, prev_event.envelope.timestamp
                        ),
                        event_ids: vec![prev_event.envelope.event_id.clone(), e.event_id.clone()],
                        positions: vec![prev_event.position.0, event.position.0],
                    });
                }
            }
            last_time = Some((ns, event));
        }

        let family = t.split('.').next().unwrap_or(t);
        match (family, t) {
            (_, "turn.submitted") => {
                let input = e
                    .payload
                    .as_ref()
                    .and_then(|p| p.get("input"))
                    .map(|i| {
                        i.as_array()
                            .map(|parts| {
                                parts
                                    .iter()
                                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            })
                            .unwrap_or_else(|| i.to_string())
                    })
                    .or_else(|| payload_str(event, "inputRef").map(str::to_string))
                    .unwrap_or_else(|| "(input not recorded)".into());
                requested.push(input.clone());
                steps.push(step("request", format!("turn submitted: {input}"), event));
            }
            ("turn", _) => {
                let word = t.strip_prefix("turn.").unwrap_or(t);
                steps.push(step("turn", format!("turn {word}"), event));
            }
            (_, "task.created") => {
                let what = payload_str(event, "objective")
                    .or_else(|| payload_str(event, "title"))
                    .unwrap_or("(no objective recorded)");
                requested.push(what.to_string());
                steps.push(step(
                    "request",
                    format!(
                        "task {} created: {what}",
                        e.task_id.as_deref().unwrap_or("?")
                    ),
                    event,
                ));
                last_lifecycle = Some(("created", event));
            }
            ("model", "model.requested") => {
                counts.model_calls += 1;
                let model = payload_str(event, "model").unwrap_or("model");
                let mut s = step("model_call", format!("{model} called"), event);
                s.complete = false;
                let id = e
                    .model_request_id
                    .clone()
                    .unwrap_or_else(|| e.event_id.clone());
                open_models.insert(id, steps.len());
                steps.push(s);
            }
            ("model", "model.completed" | "model.failed") => {
                let id = e.model_request_id.clone().unwrap_or_default();
                match open_models.remove(&id).and_then(|i| steps.get_mut(i)) {
                    Some(s) => {
                        join(s, event, "result");
                        s.complete = true;
                        if t == "model.failed" {
                            s.title.push_str(" — failed");
                        }
                    }
                    None => steps.push(step(
                        "model_call",
                        format!("{t} (no request recorded)"),
                        event,
                    )),
                }
            }
            ("model" | "reasoning", _) => {} // deltas: part of their call, not steps
            ("tool", "tool.started" | "tool.args") if e.tool_call_id.is_some() => {
                let id = e.tool_call_id.clone().unwrap_or_default();
                if let Some(s) = open_tools.get(&id).and_then(|i| steps.get_mut(*i)) {
                    join(s, event, "arguments");
                    continue;
                }
                counts.tool_calls += 1;
                let name = payload_str(event, "toolName").unwrap_or("tool");
                let mut s = step("tool_call", format!("{name} called"), event);
                s.complete = false;
                open_tools.insert(id, steps.len());
                steps.push(s);
            }
            ("tool", "tool.progress") => {
                if let Some(s) = e
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| open_tools.get(id))
                    .and_then(|i| steps.get_mut(*i))
                {
                    join(s, event, "progress");
                }
            }
            ("tool", "tool.result" | "tool.failed") => {
                let id = e.tool_call_id.clone().unwrap_or_default();
                let failed = t == "tool.failed"
                    || payload_str(event, "status") == Some("failure")
                    || e.status.as_deref() == Some("failed");
                match open_tools.remove(&id).and_then(|i| steps.get_mut(i)) {
                    Some(s) => {
                        join(s, event, "result");
                        s.complete = true;
                        counts.tool_results += 1;
                        s.title.push_str(if failed {
                            " — failed"
                        } else {
                            " — returned"
                        });
                    }
                    None => {
                        counts.tool_calls += 1;
                        counts.tool_results += 1;
                        steps.push(step("tool_call", format!("{t} (no call recorded)"), event));
                    }
                }
            }
            ("process", _) => {
                let id = e.process_id.clone().unwrap_or_default();
                let word = t.strip_prefix("process.").unwrap_or(t);
                match open_processes.get(&id).copied() {
                    Some(i) => {
                        if let Some(s) = steps.get_mut(i) {
                            join(s, event, word);
                            if matches!(word, "completed" | "failed" | "terminated") {
                                s.complete = true;
                                s.title.push_str(&format!(" — {word}"));
                                open_processes.remove(&id);
                            }
                        }
                    }
                    None => {
                        let mut s = step("process", format!("process {id} {word}"), event);
                        s.complete = matches!(word, "completed" | "failed" | "terminated");
                        if !s.complete {
                            open_processes.insert(id, steps.len());
                        }
                        steps.push(s);
                    }
                }
            }
            ("subagent", _) => {
                let id = e.subagent_id.clone().unwrap_or_default();
                let word = t.strip_prefix("subagent.").unwrap_or(t);
                match open_subagents.get(&id).copied() {
                    Some(i) => {
                        if let Some(s) = steps.get_mut(i) {
                            if matches!(word, "completed" | "failed" | "closed") {
                                join(s, event, word);
                                s.complete = true;
                                s.title.push_str(&format!(" — {word}"));
                                open_subagents.remove(&id);
                            } else {
                                s.children.push(step(
                                    "subagent",
                                    format!("subagent {word}"),
                                    event,
                                ));
                            }
                        }
                    }
                    None => {
                        counts.subagents += 1;
                        let role = payload_str(event, "role").unwrap_or("subagent");
                        let mut s = step("subagent", format!("{role} {id} {word}"), event);
                        s.complete = false;
                        open_subagents.insert(id, steps.len());
                        steps.push(s);
                    }
                }
            }
            (_, "action.required") => {
                counts.approvals += 1;
                let kind = payload_str(event, "actionType").unwrap_or("decision");
                let prompt = payload_str(event, "prompt").unwrap_or("");
                let mut s = step(
                    "approval",
                    format!("{kind} required: {prompt}")
                        .trim_end_matches(": ")
                        .to_string(),
                    event,
                );
                s.complete = false;
                open_actions.insert(e.action_id.clone().unwrap_or_default(), steps.len());
                steps.push(s);
            }
            (_, "action.resolved") => {
                let id = e.action_id.clone().unwrap_or_default();
                let decision = payload_str(event, "decision").unwrap_or("resolved");
                let by = payload_str(event, "decidedBy").unwrap_or("someone not recorded");
                match open_actions.remove(&id).and_then(|i| steps.get_mut(i)) {
                    Some(s) => {
                        join(s, event, "decision");
                        s.complete = true;
                        s.title
                            .push_str(&format!(" — {decision} by {by} at {}", e.timestamp));
                    }
                    None => steps.push(step(
                        "approval",
                        format!("{decision} by {by} (no request recorded)"),
                        event,
                    )),
                }
            }
            ("task", _) if t.starts_with("task.attempt.") => {
                let word = t.strip_prefix("task.attempt.").unwrap_or(t);
                steps.push(step(
                    "attempt",
                    format!("attempt {} {word}", e.attempt_id.as_deref().unwrap_or("?")),
                    event,
                ));
            }
            ("task", _) if t.starts_with("task.completion.") => {
                let title = if t == "task.completion.decided" {
                    let accepted = e
                        .payload
                        .as_ref()
                        .and_then(|p| p.get("accepted"))
                        .and_then(Value::as_bool);
                    match accepted {
                        Some(true) => "completion accepted".to_string(),
                        Some(false) => "completion rejected".to_string(),
                        None => "completion decided".to_string(),
                    }
                } else {
                    "completion attempted".to_string()
                };
                steps.push(step("completion", title, event));
            }
            ("task", _) => {
                let word = lifecycle_word(t).unwrap_or("updated");
                let reason = payload_str(event, "reason")
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                steps.push(step("lifecycle", format!("task {word}{reason}"), event));
                if word != "progress" {
                    last_lifecycle = Some((word, event));
                }
            }
            ("run", _) => {
                let word = e.status.as_deref().unwrap_or("status");
                if matches!(
                    word,
                    "completed" | "failed" | "cancelled" | "canceled" | "timed_out" | "lost"
                ) {
                    run_ended = true;
                }
                steps.push(step("lifecycle", format!("run {word}"), event));
            }
            ("checkpoint", _) | ("snapshot", _) => {
                steps.push(step("checkpoint", t.to_string(), event));
            }
            ("context", _) if t.starts_with("context.compaction.") => {
                if t == "context.compaction.completed" || t == "context.compaction.failed" {
                    counts.compactions += u64::from(t.ends_with("completed"));
                }
                steps.push(step("compaction", t.replace('.', " "), event));
            }
            ("artifact", _) => {
                let path = payload_str(event, "path")
                    .map(str::to_string)
                    .or_else(|| e.artifact_id.clone())
                    .unwrap_or_default();
                let change = payload_str(event, "change").unwrap_or("changed");
                steps.push(step("artifact", format!("artifact {path} {change}"), event));
            }
            ("evidence", _) => steps.push(step("evidence", "evidence recorded".into(), event)),
            ("routing", _) => steps.push(step("routing", t.replace('.', " "), event)),
            ("permission" | "sandbox", _) => {
                steps.push(step("permission", t.replace('.', " "), event))
            }
            ("cost", _) | ("limit" | "rate_limit" | "quota", _) => {
                steps.push(step("cost", t.replace('.', " "), event));
            }
            ("runtime", "runtime.error") => {
                steps.push(step("error", "runtime error".into(), event))
            }
            _ if t.contains("memory") => steps.push(step("memory", t.to_string(), event)),
            _ => steps.push(step("event", t.to_string(), event)),
        }
    }

    for (id, i) in &open_tools {
        if let Some(s) = steps.get(*i) {
            gaps.push(Gap {
                kind: "call_without_result".into(),
                detail: format!("tool call {id} has no result"),
                event_ids: s.event_ids.clone(),
                positions: s.positions.clone(),
            });
        }
    }
    counts.open_calls = open_tools.len() as u64;
    for (id, i) in &open_models {
        if let Some(s) = steps.get(*i) {
            gaps.push(Gap {
                kind: "call_without_result".into(),
                detail: format!("model request {id} has no result"),
                event_ids: s.event_ids.clone(),
                positions: s.positions.clone(),
            });
        }
    }
    for (id, i) in &open_actions {
        if let Some(s) = steps.get(*i) {
            gaps.push(Gap {
                kind: "approval_unresolved".into(),
                detail: format!("action {id} was required and never resolved"),
                event_ids: s.event_ids.clone(),
                positions: s.positions.clone(),
            });
        }
    }

    // The final state: a terminal event says it; an unresolved approval overrides a
    // completion (never shown completed); otherwise it is inferred from the last state seen.
    let terminal = |w: &str| {
        matches!(
            w,
            "completed" | "failed" | "cancelled" | "timed out" | "timed_out" | "lost" | "archived"
        )
    };
    let final_state = match (last_lifecycle, open_actions.values().next()) {
        (_, Some(i)) => {
            let s = steps.get(*i);
            FinalState {
                status: "waiting_approval".into(),
                evidence: Evidence::Inferred,
                why: format!(
                    "an approval was required and never resolved{}",
                    s.map(|s| format!(": {}", s.title)).unwrap_or_default()
                ),
                event_id: s.and_then(|s| s.event_ids.first().cloned()),
                outcome: None,
            }
        }
        (Some((word, event)), None) if terminal(word) => {
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
    };
    if matches!(scope, Scope::Run(_)) && !run_ended && !terminal(final_state.status.as_str()) {
        if let Some(last) = events.last() {
            gaps.push(Gap {
                kind: "run_without_end".into(),
                detail: "the run has no terminal event".into(),
                event_ids: vec![last.envelope.event_id.clone()],
                positions: vec![last.position.0],
            });
        }
    }
    counts.steps = steps.len() as u64;
    counts.gaps = gaps.len() as u64;
    Narrative {
        scope: scope.clone(),
        as_of: at.unwrap_or(head).min(head),
        requested,
        steps,
        gaps,
        final_state,
        incidents: Vec::new(),
        counts,
    }
}
