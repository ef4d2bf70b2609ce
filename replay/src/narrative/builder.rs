//! Telling a scope's events, in log order, as steps and gaps: a dispatch on the event's type
//! that calls one function per kind of step, and the state they share (the steps still open by
//! the id that will close them, the last sequence and time seen, the last lifecycle event).

use std::collections::BTreeMap;

use journal_format::StoredEvent;
use serde_json::Value;

use super::ending;
use super::open::Open;
use super::step::{join, lifecycle_word, payload_str, step};
use super::{Counts, Gap, Narrative, Scope, Step};

/// The characters of a context's first line that its step's title shows (the whole text is in
/// the step's details).
const CONTEXT_TITLE_CHARS: usize = 80;

/// A narrative being built, one event at a time.
pub(super) struct Builder<'a> {
    scope: &'a Scope,
    steps: Vec<Step>,
    gaps: Vec<Gap>,
    requested: Vec<String>,
    open: Open,
    counts: Counts,
    /// Each producer's last `sequence` (by runtime and session), with its event.
    last_sequence: BTreeMap<String, (u64, &'a StoredEvent)>,
    /// The last event's time (nanoseconds) that could be read, with the event.
    last_time: Option<(i128, &'a StoredEvent)>,
    /// The last lifecycle event (other than progress), with its word.
    last_lifecycle: Option<(&'static str, &'a StoredEvent)>,
    /// Whether a run status said the run ended.
    run_ended: bool,
}

impl<'a> Builder<'a> {
    pub(super) fn new(scope: &'a Scope) -> Builder<'a> {
        Builder {
            scope,
            steps: Vec::new(),
            gaps: Vec::new(),
            requested: Vec::new(),
            open: Open::default(),
            counts: Counts::default(),
            last_sequence: BTreeMap::new(),
            last_time: None,
            last_lifecycle: None,
            run_ended: false,
        }
    }

    /// Tells the next event: checks its sequence and time, then makes or extends a step.
    pub(super) fn add(&mut self, event: &'a StoredEvent) {
        self.counts.events += 1;
        self.check_sequence(event);
        self.check_time(event);
        self.tell(event);
    }

    /// The narrative: gaps for the steps left open, the final state, and the counts.
    /// `last` is the last event told; `as_of` the position the narrative is as of.
    pub(super) fn finish(mut self, last: Option<&StoredEvent>, as_of: u64) -> Narrative {
        self.gaps
            .extend(ending::open_step_gaps(&self.open, &self.steps));
        self.counts.open_calls = self.open.tools.len() as u64;
        let unresolved = self.open.actions.values().next().copied();
        let final_state = ending::final_state(self.last_lifecycle, &self.steps, unresolved);
        if matches!(self.scope, Scope::Run(_))
            && !self.run_ended
            && !ending::is_terminal(&final_state.status)
        {
            self.gaps.extend(last.map(ending::run_without_end));
        }
        self.counts.steps = self.steps.len() as u64;
        self.counts.gaps = self.gaps.len() as u64;
        Narrative {
            scope: self.scope.clone(),
            as_of,
            requested: self.requested,
            steps: self.steps,
            gaps: self.gaps,
            final_state,
            incidents: Vec::new(),
            counts: self.counts,
        }
    }

    /// A hole or reversal in a producer's `sequence`. It is checked over a whole session
    /// only: a task or run holds only some of the session's events, so holes there would be
    /// noise.
    fn check_sequence(&mut self, event: &'a StoredEvent) {
        let e = &event.envelope;
        let (Some(seq), Scope::Session(_)) = (e.sequence, self.scope) else {
            return;
        };
        let key = format!(
            "{}|{}",
            e.runtime_id.as_deref().unwrap_or("-"),
            e.session_id.as_deref().unwrap_or("-")
        );
        if let Some((prev, prev_event)) = self.last_sequence.get(&key) {
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
                self.gaps.push(Gap {
                    kind: kind.into(),
                    detail,
                    event_ids: vec![prev_event.envelope.event_id.clone(), e.event_id.clone()],
                    positions: vec![prev_event.position.0, event.position.0],
                });
            }
        }
        self.last_sequence.insert(key, (seq, event));
    }

    /// A timestamp earlier than the one before it.
    fn check_time(&mut self, event: &'a StoredEvent) {
        let e = &event.envelope;
        let Ok(ns) = journal_format::time_fmt::parse_rfc3339_ns(&e.timestamp) else {
            return;
        };
        if let Some((prev, prev_event)) = self.last_time {
            if ns < prev {
                self.gaps.push(Gap {
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
        self.last_time = Some((ns, event));
    }

    /// Makes or extends the step the event belongs to, by its type.
    fn tell(&mut self, event: &'a StoredEvent) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        let family = t.split('.').next().unwrap_or(t);
        match (family, t) {
            (_, "turn.submitted") => self.turn_submitted(event),
            ("turn", _) => {
                let word = t.strip_prefix("turn.").unwrap_or(t);
                self.push("turn", format!("turn {word}"), event);
            }
            (_, "task.created") => self.task_created(event),
            ("model", "model.requested") => self.model_requested(event),
            ("model", "model.completed" | "model.failed") => self.model_ended(event),
            ("model" | "reasoning", _) => {} // deltas: part of their call, not steps
            ("tool", "tool.started" | "tool.args") if e.tool_call_id.is_some() => {
                self.tool_started(event);
            }
            ("tool", "tool.progress") => self.tool_progress(event),
            ("tool", "tool.result" | "tool.failed") => self.tool_ended(event),
            ("process", _) => self.process(event),
            ("subagent", _) => self.subagent(event),
            (_, "action.required") => self.action_required(event),
            (_, "action.resolved") => self.action_resolved(event),
            ("task", _) if t.starts_with("task.attempt.") => {
                let word = t.strip_prefix("task.attempt.").unwrap_or(t);
                let attempt = e.attempt_id.as_deref().unwrap_or("?");
                self.push("attempt", format!("attempt {attempt} {word}"), event);
            }
            ("task", _) if t.starts_with("task.completion.") => self.completion(event),
            ("task", _) => self.task_lifecycle(event),
            ("run", _) => self.run_status(event),
            ("checkpoint" | "snapshot", _) => self.push("checkpoint", t.to_string(), event),
            ("context", _) if t.starts_with("context.compaction.") => self.compaction(event),
            (_, "context.resolved") => self.context(event),
            ("artifact", _) => self.artifact(event),
            ("evidence", _) => self.push("evidence", "evidence recorded".into(), event),
            ("routing", _) => self.push("routing", t.replace('.', " "), event),
            ("permission" | "sandbox", _) => self.push("permission", t.replace('.', " "), event),
            ("cost" | "limit" | "rate_limit" | "quota", _) => {
                self.push("cost", t.replace('.', " "), event);
            }
            ("runtime", "runtime.error") => self.push("error", "runtime error".into(), event),
            _ if t.contains("memory") => self.push("memory", t.to_string(), event),
            _ => self.push("event", t.to_string(), event),
        }
    }

    /// Adds a complete step of one event.
    fn push(&mut self, kind: &str, title: String, event: &StoredEvent) {
        self.steps.push(step(kind, title, event));
    }

    /// Adds a step that a later event completes; returns its index, for [`Open`].
    fn push_open(&mut self, mut s: Step) -> usize {
        s.complete = false;
        self.steps.push(s);
        self.steps.len() - 1
    }

    /// A turn's input, as requested, and its step.
    fn turn_submitted(&mut self, event: &StoredEvent) {
        let input = event
            .envelope
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
        self.requested.push(input.clone());
        self.push("request", format!("turn submitted: {input}"), event);
    }

    /// A task's objective, as requested, and its first lifecycle state.
    fn task_created(&mut self, event: &'a StoredEvent) {
        let what = payload_str(event, "objective")
            .or_else(|| payload_str(event, "title"))
            .unwrap_or("(no objective recorded)");
        self.requested.push(what.to_string());
        let task = event.envelope.task_id.as_deref().unwrap_or("?");
        self.push("request", format!("task {task} created: {what}"), event);
        self.last_lifecycle = Some(("created", event));
    }

    fn model_requested(&mut self, event: &StoredEvent) {
        let e = &event.envelope;
        self.counts.model_calls += 1;
        let model = payload_str(event, "model").unwrap_or("model");
        let i = self.push_open(step("model_call", format!("{model} called"), event));
        let id = e
            .model_request_id
            .clone()
            .unwrap_or_else(|| e.event_id.clone());
        self.open.models.insert(id, i);
    }

    fn model_ended(&mut self, event: &StoredEvent) {
        let t = event.envelope.event_type.as_str();
        let id = event.envelope.model_request_id.clone().unwrap_or_default();
        match self
            .open
            .models
            .remove(&id)
            .and_then(|i| self.steps.get_mut(i))
        {
            Some(s) => {
                join(s, event, "result");
                s.complete = true;
                if t == "model.failed" {
                    s.title.push_str(" — failed");
                }
            }
            None => self.push("model_call", format!("{t} (no request recorded)"), event),
        }
    }

    /// A tool call's start, or its arguments joined to the call already open.
    fn tool_started(&mut self, event: &StoredEvent) {
        let id = event.envelope.tool_call_id.clone().unwrap_or_default();
        if let Some(s) = self
            .open
            .tools
            .get(&id)
            .and_then(|i| self.steps.get_mut(*i))
        {
            join(s, event, "arguments");
            return;
        }
        self.counts.tool_calls += 1;
        let name = payload_str(event, "toolName").unwrap_or("tool");
        let i = self.push_open(step("tool_call", format!("{name} called"), event));
        self.open.tools.insert(id, i);
    }

    fn tool_progress(&mut self, event: &StoredEvent) {
        if let Some(s) = event
            .envelope
            .tool_call_id
            .as_ref()
            .and_then(|id| self.open.tools.get(id))
            .and_then(|i| self.steps.get_mut(*i))
        {
            join(s, event, "progress");
        }
    }

    /// A tool call's result, joined to its call (or a step of its own when no call was
    /// recorded).
    fn tool_ended(&mut self, event: &StoredEvent) {
        let e = &event.envelope;
        let t = e.event_type.as_str();
        let id = e.tool_call_id.clone().unwrap_or_default();
        let failed = t == "tool.failed"
            || payload_str(event, "status") == Some("failure")
            || e.status.as_deref() == Some("failed");
        match self
            .open
            .tools
            .remove(&id)
            .and_then(|i| self.steps.get_mut(i))
        {
            Some(s) => {
                join(s, event, "result");
                s.complete = true;
                self.counts.tool_results += 1;
                s.title.push_str(if failed {
                    " — failed"
                } else {
                    " — returned"
                });
            }
            None => {
                self.counts.tool_calls += 1;
                self.counts.tool_results += 1;
                self.push("tool_call", format!("{t} (no call recorded)"), event);
            }
        }
    }

    /// A process's events, joined into one step until it ends.
    fn process(&mut self, event: &StoredEvent) {
        let t = event.envelope.event_type.as_str();
        let id = event.envelope.process_id.clone().unwrap_or_default();
        let word = t.strip_prefix("process.").unwrap_or(t);
        let ends = matches!(word, "completed" | "failed" | "terminated");
        let Some(i) = self.open.processes.get(&id).copied() else {
            let s = step("process", format!("process {id} {word}"), event);
            if ends {
                self.steps.push(s);
            } else {
                let i = self.push_open(s);
                self.open.processes.insert(id, i);
            }
            return;
        };
        if let Some(s) = self.steps.get_mut(i) {
            join(s, event, word);
            if ends {
                s.complete = true;
                s.title.push_str(&format!(" — {word}"));
                self.open.processes.remove(&id);
            }
        }
    }

    /// A subagent's start, its events as children of its step, and its end.
    fn subagent(&mut self, event: &StoredEvent) {
        let t = event.envelope.event_type.as_str();
        let id = event.envelope.subagent_id.clone().unwrap_or_default();
        let word = t.strip_prefix("subagent.").unwrap_or(t);
        let Some(i) = self.open.subagents.get(&id).copied() else {
            self.counts.subagents += 1;
            let role = payload_str(event, "role").unwrap_or("subagent");
            let i = self.push_open(step("subagent", format!("{role} {id} {word}"), event));
            self.open.subagents.insert(id, i);
            return;
        };
        if let Some(s) = self.steps.get_mut(i) {
            if matches!(word, "completed" | "failed" | "closed") {
                join(s, event, word);
                s.complete = true;
                s.title.push_str(&format!(" — {word}"));
                self.open.subagents.remove(&id);
            } else {
                s.children
                    .push(step("subagent", format!("subagent {word}"), event));
            }
        }
    }

    fn action_required(&mut self, event: &StoredEvent) {
        self.counts.approvals += 1;
        let kind = payload_str(event, "actionType").unwrap_or("decision");
        let prompt = payload_str(event, "prompt").unwrap_or("");
        let title = format!("{kind} required: {prompt}")
            .trim_end_matches(": ")
            .to_string();
        let i = self.push_open(step("approval", title, event));
        let id = event.envelope.action_id.clone().unwrap_or_default();
        self.open.actions.insert(id, i);
    }

    /// A decision, joined to its approval (or a step of its own when none was recorded).
    fn action_resolved(&mut self, event: &StoredEvent) {
        let e = &event.envelope;
        let id = e.action_id.clone().unwrap_or_default();
        let decision = payload_str(event, "decision").unwrap_or("resolved");
        let by = payload_str(event, "decidedBy").unwrap_or("someone not recorded");
        match self
            .open
            .actions
            .remove(&id)
            .and_then(|i| self.steps.get_mut(i))
        {
            Some(s) => {
                join(s, event, "decision");
                s.complete = true;
                s.title
                    .push_str(&format!(" — {decision} by {by} at {}", e.timestamp));
            }
            None => self.push(
                "approval",
                format!("{decision} by {by} (no request recorded)"),
                event,
            ),
        }
    }

    fn completion(&mut self, event: &StoredEvent) {
        let title = if event.envelope.event_type == "task.completion.decided" {
            let accepted = event
                .envelope
                .payload
                .as_ref()
                .and_then(|p| p.get("accepted"))
                .and_then(Value::as_bool);
            match accepted {
                Some(true) => "completion accepted",
                Some(false) => "completion rejected",
                None => "completion decided",
            }
        } else {
            "completion attempted"
        };
        self.push("completion", title.to_string(), event);
    }

    /// A task's lifecycle state; the last one (progress aside) decides the final state.
    fn task_lifecycle(&mut self, event: &'a StoredEvent) {
        let word = lifecycle_word(&event.envelope.event_type).unwrap_or("updated");
        let reason = payload_str(event, "reason")
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        self.push("lifecycle", format!("task {word}{reason}"), event);
        if word != "progress" {
            self.last_lifecycle = Some((word, event));
        }
    }

    fn run_status(&mut self, event: &StoredEvent) {
        let word = event.envelope.status.as_deref().unwrap_or("status");
        if matches!(
            word,
            "completed" | "failed" | "cancelled" | "canceled" | "timed_out" | "lost"
        ) {
            self.run_ended = true;
        }
        self.push("lifecycle", format!("run {word}"), event);
    }

    fn compaction(&mut self, event: &StoredEvent) {
        let t = event.envelope.event_type.as_str();
        if t == "context.compaction.completed" || t == "context.compaction.failed" {
            self.counts.compactions += u64::from(t.ends_with("completed"));
        }
        self.push("compaction", t.replace('.', " "), event);
    }

    /// Context the runtime put in front of the model (instructions, the environment, command
    /// output): a step of its own, labelled by its kind, never a request.
    fn context(&mut self, event: &StoredEvent) {
        self.counts.context += 1;
        let kind = payload_str(event, "kind").unwrap_or("context");
        let first_line = payload_str(event, "text")
            .and_then(|t| t.lines().find(|l| !l.trim().is_empty()))
            .map(str::trim)
            .unwrap_or("");
        let mut title = kind.to_string();
        if !first_line.is_empty() {
            let cut: String = first_line.chars().take(CONTEXT_TITLE_CHARS).collect();
            let more = if cut.len() < first_line.len() {
                "…"
            } else {
                ""
            };
            title.push_str(&format!(": {cut}{more}"));
        }
        self.push("context", title, event);
    }

    fn artifact(&mut self, event: &StoredEvent) {
        let path = payload_str(event, "path")
            .map(str::to_string)
            .or_else(|| event.envelope.artifact_id.clone())
            .unwrap_or_default();
        let change = payload_str(event, "change").unwrap_or("changed");
        self.push("artifact", format!("artifact {path} {change}"), event);
    }
}
