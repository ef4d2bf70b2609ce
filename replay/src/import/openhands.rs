//! OpenHands trajectories and evaluation output (FORMATS.md §3).
//!
//! - A trajectory is a JSON array of events (`id`, `timestamp` without a zone, `source`, then
//!   `action` + `args` or `observation` + `content` + `extras`); its session id is
//!   [`Options::session_id`] or the file name.
//! - Evaluation output is JSON lines, one run per line with its `history`; each line is an
//!   attempt of the task `instance_id` (which is also the session id).
//! - An observation pairs with its action through `cause`; a tool call's id is the action's
//!   `tool_call_id` scoped by the action id (OpenHands synthesizes ids like `toolu_01` that are
//!   unique only within a run).
//! - Each distinct `model_response` is a model call, with its usage as the call's cost.
//! - A message from the user is a request (a turn); the system prompt (`action: system`) and
//!   messages from the environment are context (`context.resolved`), never requests.
//! - `confirmation_state` is a permission asked for and resolved; agent state changes are the
//!   run's status; `awaiting_user_input` ends the turn.
//! - Timestamps without a zone are read as UTC, and the event says so
//!   (`timestampAssumedUtc: true`, the source's text in `sourceTimestamp`).

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::emit::Emitter;
use super::records::{self, bad, ptr, str_at, str_of, Record};
use super::{ImportError, Options, Parsed, Source};

/// Actions that run a tool.
const TOOL_ACTIONS: [&str; 9] = [
    "run",
    "run_ipython",
    "read",
    "edit",
    "write",
    "browse",
    "browse_interactive",
    "think",
    "recall",
];

/// Known kinds without a dedicated mapping (kept as vendor events, not counted unknown).
const KNOWN_KINDS: [&str; 3] = [
    "observation.null",
    "action.change_agent_state",
    "observation.recall",
];

pub(super) fn parse(
    file: &str,
    stem: &str,
    bytes: &[u8],
    options: &Options,
) -> Result<Parsed, ImportError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let mut out = Emitter::new(Source::OpenHands);
    if first == Some(&b'[') {
        let mut input = records::json_array(file, bytes, options)?;
        out.summary.records = input.read;
        let session = options
            .session_id
            .clone()
            .unwrap_or_else(|| stem.to_string());
        let mut run = Run::new(session, None);
        let events = std::mem::take(&mut input.records);
        for record in &events {
            if let Err(message) = check(&record.value) {
                bad(file, options, &mut input.skipped, record.line, message)?;
                continue;
            }
            run.event(&mut out, record);
        }
        out.summary.open_calls += run.open.len() as u64;
        out.summary.skipped = input.skipped;
    } else {
        let mut input = records::json_lines(file, bytes, options)?;
        out.summary.records = input.read;
        let lines = std::mem::take(&mut input.records);
        for record in &lines {
            match check_run(&record.value) {
                Ok(()) => {
                    let open = evaluation_run(&mut out, options, record, file, &mut input.skipped)?;
                    out.summary.open_calls += open;
                }
                Err(message) => bad(file, options, &mut input.skipped, record.line, message)?,
            }
        }
        out.summary.skipped = input.skipped;
    }
    Ok(out.finish())
}

fn check(event: &Map<String, Value>) -> Result<(), String> {
    if !event.get("id").is_some_and(Value::is_u64) {
        return Err("an event without a numeric `id`".into());
    }
    if str_of(event, "timestamp").is_none_or(|ts| utc(ts).is_none()) {
        return Err("an event without a readable `timestamp`".into());
    }
    if str_of(event, "action").is_none() && str_of(event, "observation").is_none() {
        return Err("an event that is neither an `action` nor an `observation`".into());
    }
    Ok(())
}

fn check_run(run: &Map<String, Value>) -> Result<(), String> {
    if str_of(run, "instance_id").is_none() {
        return Err("a run without `instance_id`".into());
    }
    if !run.get("history").is_some_and(Value::is_array) {
        return Err("a run without a `history` array".into());
    }
    Ok(())
}

/// An event's time as the journal records it.
#[derive(Clone, Debug)]
struct Time {
    /// RFC 3339, in UTC.
    rfc3339: String,
    /// Whether the source gave no zone, and UTC was assumed.
    assumed_utc: bool,
}

/// A timestamp as RFC 3339 UTC, and whether its zone was assumed.
fn utc(ts: &str) -> Option<Time> {
    if journal_format::time_fmt::parse_rfc3339_ns(ts).is_ok() {
        return Some(Time {
            rfc3339: ts.to_string(),
            assumed_utc: false,
        });
    }
    let assumed = format!("{ts}Z");
    journal_format::time_fmt::parse_rfc3339_ns(&assumed)
        .ok()
        .map(|_| Time {
            rfc3339: assumed,
            assumed_utc: true,
        })
}

/// One evaluation run: an attempt of its task, with its history.
fn evaluation_run(
    out: &mut Emitter,
    options: &Options,
    record: &Record,
    file: &str,
    skipped: &mut Vec<super::Skipped>,
) -> Result<u64, ImportError> {
    let v = &record.value;
    let task = str_of(v, "instance_id").unwrap_or("task").to_string();
    let attempt = format!("line-{}", record.line);
    let mut run = Run::new(task.clone(), Some((task.clone(), attempt.clone())));
    let start = start_time(v);
    let started = json!({
        "adapterKind": "openhands",
        "adapterId": ptr(v, "/metadata/agent_class"),
        "model": ptr(v, "/metadata/llm_config/model"),
        "instruction": str_of(v, "instruction"),
    });
    let (t, key) = ("task.attempt.started", format!("{attempt}:started"));
    attempt_event(out, &run, t, &key, &start, started);
    let history = v
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, event) in history.iter().enumerate() {
        let checked = event
            .as_object()
            .ok_or_else(|| format!("history[{i}] is not an object"))
            .and_then(|event| {
                check(event).map_err(|message| format!("history[{i}]: {message}"))?;
                Ok(event)
            });
        match checked {
            Ok(event) => run.event(
                out,
                &Record {
                    line: record.line,
                    value: event.clone(),
                },
            ),
            Err(message) => bad(file, options, skipped, record.line, message)?,
        }
    }
    attempt_ended(out, &run, v, start);
    Ok(run.open.len() as u64)
}

/// When an evaluation run started: its metadata's `start_time`, else its first event's time.
fn start_time(v: &Map<String, Value>) -> Time {
    ptr(v, "/metadata/start_time")
        .and_then(Value::as_str)
        .and_then(|t| utc(&t.replace(' ', "T")))
        .or_else(|| {
            v.get("history")
                .and_then(|h| h.get(0))
                .and_then(|e| str_at(e, "/timestamp"))
                .and_then(utc)
        })
        .unwrap_or_else(|| Time {
            rfc3339: "1970-01-01T00:00:00Z".into(),
            assumed_utc: true,
        })
}

/// The end of an evaluation run's attempt, at its last event (or its `start`): failed when it
/// has an `error`, with its patch in a blob.
fn attempt_ended(out: &mut Emitter, run: &Run, v: &Map<String, Value>, start: Time) {
    let Some((_, attempt)) = &run.attempt else {
        return;
    };
    let end = run.last_time.clone().unwrap_or(start);
    let error = str_of(v, "error");
    let (t, word) = if error.is_some() {
        ("task.attempt.failed", "failed")
    } else {
        ("task.attempt.completed", "completed")
    };
    let patch = ptr(v, "/test_result/git_patch")
        .and_then(Value::as_str)
        .map(|p| out.blob(p.as_bytes().to_vec()));
    let payload = json!({
        "status": word,
        "diagnostics": {"error": error, "gitPatchRef": patch, "metrics": v.get("metrics")},
    });
    attempt_event(out, run, t, &format!("{attempt}:{word}"), &end, payload);
}

/// An event of an evaluation run's attempt itself (its start or end), at `time`.
fn attempt_event(out: &mut Emitter, run: &Run, t: &str, key: &str, time: &Time, payload: Value) {
    let Some((task, attempt)) = &run.attempt else {
        return;
    };
    if let Some(e) = out.emit(t, task, key, &time.rfc3339, "run") {
        e.task_id = Some(task.clone());
        e.attempt_id = Some(attempt.clone());
        e.thread_id = Some(task.clone());
        flag(e, time, None);
        e.payload = Some(payload);
    }
}

/// Marks an event whose timestamp had no zone.
fn flag(e: &mut journal_format::Envelope, time: &Time, source: Option<&str>) {
    if time.assumed_utc {
        e.extra
            .insert("timestampAssumedUtc".into(), Value::Bool(true));
        if let Some(s) = source {
            e.extra
                .insert("sourceTimestamp".into(), Value::String(s.to_string()));
        }
    }
}

/// Where the events made from one source event come from: its id (also the key of their
/// ids), its time, the source's text of that time, and its native kind.
struct Origin<'r> {
    id: u64,
    key: String,
    time: Time,
    source_ts: &'r str,
    native: String,
}

/// The mapping state of one agent run: a trajectory, or an evaluation run's history.
struct Run {
    session: String,
    /// `(task, attempt)` for an evaluation run.
    attempt: Option<(String, String)>,
    /// Tool actions without an observation yet: action id → (call id, tool name).
    open: HashMap<u64, (String, String)>,
    model_responses: HashSet<String>,
    turn: Option<String>,
    last_time: Option<Time>,
    seen: HashSet<u64>,
}

impl Run {
    fn new(session: String, attempt: Option<(String, String)>) -> Run {
        Run {
            session,
            attempt,
            open: HashMap::new(),
            model_responses: HashSet::new(),
            turn: None,
            last_time: None,
            seen: HashSet::new(),
        }
    }

    /// A new event of type `t` made from the source event `from`, with `key` as its id's key.
    fn emit<'a>(
        &self,
        out: &'a mut Emitter,
        t: &str,
        key: &str,
        from: &Origin,
    ) -> Option<&'a mut journal_format::Envelope> {
        let e = out.emit(
            t,
            &self.session,
            &self.scoped(key),
            &from.time.rfc3339,
            &from.native,
        )?;
        self.stamp(e, &from.time, from.source_ts);
        Some(e)
    }

    /// `key` within this run's attempt, when it is one: an evaluation output's runs may repeat
    /// the same event ids.
    fn scoped(&self, key: &str) -> String {
        match &self.attempt {
            Some((_, attempt)) => format!("{attempt}:{key}"),
            None => key.to_string(),
        }
    }

    /// Puts an event of this run on its thread, turn, task and attempt, and flags an assumed zone.
    fn stamp(&self, e: &mut journal_format::Envelope, time: &Time, source_ts: &str) {
        e.thread_id = Some(self.session.clone());
        e.turn_id.clone_from(&self.turn);
        if let Some((task, attempt)) = &self.attempt {
            e.task_id = Some(task.clone());
            e.attempt_id = Some(attempt.clone());
        }
        flag(e, time, Some(source_ts));
    }

    /// Maps one source event: the model call behind it, a permission it asked for, then the
    /// event itself by its action or observation.
    fn event(&mut self, out: &mut Emitter, record: &Record) {
        let v = &record.value;
        let Some(from) = self.origin(out, v) else {
            return;
        };
        let source = str_of(v, "source").unwrap_or("");
        let args = v.get("args").cloned().unwrap_or(Value::Null);
        let meta = v.get("tool_call_metadata");
        if let Some(response) = meta.and_then(|m| m.get("model_response")) {
            self.model_call(out, &from, v, response);
        }
        if let Some(state) = str_at(&args, "/confirmation_state") {
            self.permission(out, &from, state, &args);
        }
        match (str_of(v, "action"), str_of(v, "observation")) {
            (Some("message"), _) if source == "user" => self.user_message(out, &from, v, &args),
            (Some("system"), _) => self.context(out, &from, v, &args, "system_prompt"),
            (Some("message"), _) if source != "agent" => {
                self.context(out, &from, v, &args, "environment");
            }
            (Some("message"), _) => {
                let (text, text_ref) = out.text(str_of(v, "message").unwrap_or(""));
                if let Some(e) =
                    self.emit(out, "model.delta", &format!("{}:message", from.key), &from)
                {
                    e.payload =
                        Some(json!({"output": text, "outputRef": text_ref, "source": source}));
                }
            }
            (Some(action), _)
                if TOOL_ACTIONS.contains(&action) || meta.is_some() && action != "finish" =>
            {
                self.tool_action(out, &from, action, &args, meta);
            }
            (Some("finish"), _) => {
                let (text, text_ref) = out.text(str_of(v, "message").unwrap_or(""));
                if let Some(e) = self.emit(
                    out,
                    "turn.completed",
                    &format!("{}:finish", from.key),
                    &from,
                ) {
                    e.payload =
                        Some(json!({"reason": "finish", "output": text, "outputRef": text_ref}));
                }
            }
            (None, Some("agent_state_changed")) => self.agent_state(out, &from, v),
            (None, Some(observation)) => self.observation(out, &from, v, observation),
            _ => self.vendor(out, &from, v),
        }
    }

    /// The origin of a source event not seen before, with a readable time (which becomes the
    /// run's last); `None` for a repeated event (counted) or an unreadable time.
    fn origin<'r>(&mut self, out: &mut Emitter, v: &'r Map<String, Value>) -> Option<Origin<'r>> {
        let id = v.get("id").and_then(Value::as_u64).unwrap_or(0);
        if !self.seen.insert(id) {
            out.summary.duplicate_records += 1;
            return None;
        }
        let source_ts = str_of(v, "timestamp").unwrap_or("");
        let time = utc(source_ts)?;
        if time.assumed_utc {
            out.summary.timestamps_assumed_utc += 1;
        }
        self.last_time = Some(time.clone());
        let native = match (str_of(v, "action"), str_of(v, "observation")) {
            (Some(a), _) => format!("action.{a}"),
            (None, Some(o)) => format!("observation.{o}"),
            (None, None) => "unknown".into(),
        };
        Some(Origin {
            id,
            key: format!("{id}"),
            time,
            source_ts,
            native,
        })
    }

    /// The model call behind an agent action, once per model response: requested, completed,
    /// and its usage as its cost.
    fn model_call(
        &mut self,
        out: &mut Emitter,
        from: &Origin,
        v: &Map<String, Value>,
        response: &Value,
    ) {
        let response_id =
            str_at(response, "/id").map_or_else(|| format!("event-{}", from.id), str::to_string);
        if !self.model_responses.insert(response_id.clone()) {
            return;
        }
        out.summary.model_calls += 1;
        let model = str_at(response, "/model").map(str::to_string);
        let usage = response.get("usage").cloned().unwrap_or(Value::Null);
        let n = |k: &str| usage.get(k).and_then(Value::as_u64);
        for (t, word) in [
            ("model.requested", "requested"),
            ("model.completed", "completed"),
        ] {
            if let Some(e) = self.emit(out, t, &format!("{response_id}:{word}"), from) {
                e.model_request_id = Some(response_id.clone());
                e.payload = Some(json!({"model": model}));
            }
        }
        let cost = ptr(v, "/llm_metrics/costs")
            .and_then(Value::as_array)
            .and_then(|c| c.last())
            .and_then(|c| c.get("cost"))
            .and_then(Value::as_f64);
        if let Some(e) = self.emit(out, "cost.recorded", &format!("{response_id}:cost"), from) {
            e.model_request_id = Some(response_id.clone());
            e.payload = Some(json!({
                "model": model,
                "inputTokens": n("prompt_tokens"),
                "outputTokens": n("completion_tokens"),
                "cacheReadTokens": n("cache_read_input_tokens"),
                "cacheWriteTokens": n("cache_creation_input_tokens"),
                "totalTokens": n("total_tokens"),
                "costUsd": cost,
            }));
        }
    }

    /// A user's message: a turn submitted and started.
    fn user_message(
        &mut self,
        out: &mut Emitter,
        from: &Origin,
        v: &Map<String, Value>,
        args: &Value,
    ) {
        self.turn = Some(format!("turn-{}", from.id));
        out.summary.turns += 1;
        out.summary.requests += 1;
        let text = str_at(args, "/content")
            .or_else(|| str_of(v, "message"))
            .unwrap_or("");
        let (text, text_ref) = out.text(text);
        if let Some(e) = self.emit(
            out,
            "turn.submitted",
            &format!("{}:submitted", from.key),
            from,
        ) {
            e.payload =
                Some(json!({"input": [{"type": "text", "text": text}], "inputRef": text_ref}));
        }
        let _ = self.emit(out, "turn.started", &format!("{}:started", from.key), from);
    }

    /// What OpenHands put in front of the model that no person asked: the system prompt (with
    /// its tools), or a message from the environment.
    fn context(
        &mut self,
        out: &mut Emitter,
        from: &Origin,
        v: &Map<String, Value>,
        args: &Value,
        kind: &str,
    ) {
        out.summary.context_messages += 1;
        let text = str_at(args, "/content")
            .or_else(|| str_of(v, "message"))
            .unwrap_or("");
        let (text, text_ref) = out.text(text);
        let tools = args.get("tools").map(|t| out.value(t));
        let payload = json!({
            "kind": kind,
            "role": str_of(v, "source"),
            "text": text,
            "textRef": text_ref,
            "tools": tools,
            "openhandsVersion": str_at(args, "/openhands_version"),
        });
        if let Some(e) = self.emit(
            out,
            "context.resolved",
            &format!("{}:context", from.key),
            from,
        ) {
            e.payload = Some(payload);
        }
    }

    /// An action that runs a tool: a call, open until its observation.
    fn tool_action(
        &mut self,
        out: &mut Emitter,
        from: &Origin,
        action: &str,
        args: &Value,
        meta: Option<&Value>,
    ) {
        let call = meta.and_then(|m| str_at(m, "/tool_call_id")).map_or_else(
            || format!("action-{}", from.id),
            |c| format!("{c}@{}", from.id),
        );
        let name = meta
            .and_then(|m| str_at(m, "/function_name"))
            .unwrap_or(action)
            .to_string();
        out.summary.tool_calls += 1;
        self.open.insert(from.id, (call.clone(), name.clone()));
        let mut arguments = args.clone();
        if let Some(a) = arguments.as_object_mut() {
            a.remove("confirmation_state");
        }
        let arguments = out.value(&arguments);
        if let Some(e) = self.emit(out, "tool.started", &format!("{}:started", from.key), from) {
            e.tool_call_id = Some(call);
            e.payload = Some(json!({"toolName": name, "action": action, "arguments": arguments}));
        }
    }

    /// An agent state change: the run's status; waiting for the user or finished also ends the
    /// open turn.
    fn agent_state(&mut self, out: &mut Emitter, from: &Origin, v: &Map<String, Value>) {
        let state = str_at(v.get("extras").unwrap_or(&Value::Null), "/agent_state")
            .unwrap_or("unknown")
            .to_string();
        if let Some(e) = self.emit(out, "run.status", &from.key, from) {
            e.native_status = Some(state.clone());
            e.status = Some(run_status(&state).to_string());
        }
        if state != "awaiting_user_input" && state != "finished" {
            return;
        }
        if let Some(turn) = self.turn.take() {
            let key = format!("{}:turn-completed", from.key);
            if let Some(e) = self.emit(out, "turn.completed", &key, from) {
                e.turn_id = Some(turn);
                e.payload = Some(json!({"reason": state}));
            }
        }
    }

    /// An observation: the result of the tool action it is caused by, or else a vendor event.
    fn observation(
        &mut self,
        out: &mut Emitter,
        from: &Origin,
        v: &Map<String, Value>,
        observation: &str,
    ) {
        let cause = v.get("cause").and_then(Value::as_u64);
        let Some((call, name)) = cause.and_then(|c| self.open.remove(&c)) else {
            self.vendor(out, from, v);
            return;
        };
        out.summary.tool_results += 1;
        let exit = ptr(v, "/extras/metadata/exit_code").and_then(Value::as_i64);
        let failed = observation == "error"
            || exit.is_some_and(|c| c != 0)
            || v.get("success").and_then(Value::as_bool) == Some(false);
        let content = str_of(v, "content").unwrap_or("");
        let (output, output_ref) = out.text(content);
        let diff = ptr(v, "/extras/diff")
            .and_then(Value::as_str)
            .map(|d| out.blob(d.as_bytes().to_vec()));
        let t = if failed { "tool.failed" } else { "tool.result" };
        if let Some(e) = self.emit(out, t, &format!("{}:result", from.key), from) {
            e.tool_call_id = Some(call);
            e.output_ref = output_ref;
            e.causation_id = cause.map(|c| c.to_string());
            e.payload = Some(json!({
                "toolName": name,
                "status": if failed { "failure" } else { "success" },
                "output": output,
                "exitCode": exit,
                "diffRef": diff,
            }));
        }
    }

    /// A `confirmation_state`: a permission asked for, and resolved unless still awaited.
    fn permission(&mut self, out: &mut Emitter, from: &Origin, state: &str, args: &Value) {
        let id = from.id;
        let action = format!("confirm-{id}");
        let risk = args.get("security_risk").cloned();
        if let Some(e) = self.emit(
            out,
            "permission.requested",
            &format!("{id}:permission"),
            from,
        ) {
            e.action_id = Some(action.clone());
            e.payload = Some(json!({"securityRisk": risk}));
        }
        let decision = match state {
            "confirmed" => "approved",
            "rejected" => "rejected",
            _ => return, // still awaiting: requested, never resolved in this source
        };
        let key = format!("{id}:permission-resolved");
        if let Some(e) = self.emit(out, "permission.resolved", &key, from) {
            e.action_id = Some(action);
            e.payload =
                Some(json!({"decision": decision, "decidedBy": "user", "nativeState": state}));
        }
    }

    fn vendor(&self, out: &mut Emitter, from: &Origin, v: &Map<String, Value>) {
        let native = from.native.as_str();
        if !KNOWN_KINDS.contains(&native) {
            *out.summary
                .unknown_kinds
                .entry(native.to_string())
                .or_default() += 1;
        }
        let key = self.scoped(&from.key);
        if let Some(e) = out.vendor(native, &self.session, &key, &from.time.rfc3339, v) {
            self.stamp(e, &from.time, from.source_ts);
        }
    }
}

/// OpenHands agent states in the run status words of the status model (docs/MODEL.md §3).
fn run_status(state: &str) -> &'static str {
    match state {
        "loading" | "init" => "starting",
        "running" => "running",
        "awaiting_user_input" | "awaiting_user_confirmation" => "waiting",
        "paused" => "paused",
        "stopped" => "cancelled",
        "finished" => "completed",
        "rejected" | "user_rejected" => "cancelled",
        "error" => "failed",
        _ => "unknown",
    }
}
