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
const KNOWN_KINDS: [&str; 4] = [
    "observation.null",
    "action.change_agent_state",
    "action.system",
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

/// A timestamp as RFC 3339 UTC, and whether its zone was assumed.
fn utc(ts: &str) -> Option<(String, bool)> {
    if journal_format::time_fmt::parse_rfc3339_ns(ts).is_ok() {
        return Some((ts.to_string(), false));
    }
    let assumed = format!("{ts}Z");
    journal_format::time_fmt::parse_rfc3339_ns(&assumed)
        .ok()
        .map(|_| (assumed, true))
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
    let start = ptr(v, "/metadata/start_time")
        .and_then(Value::as_str)
        .and_then(|t| utc(&t.replace(' ', "T")))
        .or_else(|| {
            v.get("history")
                .and_then(|h| h.get(0))
                .and_then(|e| str_at(e, "/timestamp"))
                .and_then(utc)
        })
        .unwrap_or_else(|| ("1970-01-01T00:00:00Z".into(), true));
    if let Some(e) = out.emit(
        "task.attempt.started",
        &task,
        &format!("{attempt}:started"),
        &start.0,
        "run",
    ) {
        e.task_id = Some(task.clone());
        e.attempt_id = Some(attempt.clone());
        e.thread_id = Some(task.clone());
        flag(e, &start, None);
        e.payload = Some(json!({
            "adapterKind": "openhands",
            "adapterId": ptr(v, "/metadata/agent_class"),
            "model": ptr(v, "/metadata/llm_config/model"),
            "instruction": str_of(v, "instruction"),
        }));
    }
    let history = v
        .get("history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, event) in history.iter().enumerate() {
        let Some(event) = event.as_object() else {
            bad(
                file,
                options,
                skipped,
                record.line,
                format!("history[{i}] is not an object"),
            )?;
            continue;
        };
        if let Err(message) = check(event) {
            bad(
                file,
                options,
                skipped,
                record.line,
                format!("history[{i}]: {message}"),
            )?;
            continue;
        }
        run.event(
            out,
            &Record {
                line: record.line,
                value: event.clone(),
            },
        );
    }
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
    if let Some(e) = out.emit(t, &task, &format!("{attempt}:{word}"), &end.0, "run") {
        e.task_id = Some(task.clone());
        e.attempt_id = Some(attempt.clone());
        e.thread_id = Some(task.clone());
        flag(e, &end, None);
        e.payload = Some(json!({
            "status": word,
            "diagnostics": {"error": error, "gitPatchRef": patch, "metrics": v.get("metrics")},
        }));
    }
    Ok(run.open.len() as u64)
}

/// Marks an event whose timestamp had no zone.
fn flag(e: &mut journal_format::Envelope, time: &(String, bool), source: Option<&str>) {
    if time.1 {
        e.extra
            .insert("timestampAssumedUtc".into(), Value::Bool(true));
        if let Some(s) = source {
            e.extra
                .insert("sourceTimestamp".into(), Value::String(s.to_string()));
        }
    }
}

/// The mapping state of one event stream.
struct Run {
    session: String,
    /// `(task, attempt)` for an evaluation run.
    attempt: Option<(String, String)>,
    /// Tool actions without an observation yet: action id → (call id, tool name).
    open: HashMap<u64, (String, String)>,
    model_responses: HashSet<String>,
    turn: Option<String>,
    last_time: Option<(String, bool)>,
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

    fn emit<'a>(
        &self,
        out: &'a mut Emitter,
        t: &str,
        key: &str,
        time: &(String, bool),
        source_ts: &str,
        native: &str,
    ) -> Option<&'a mut journal_format::Envelope> {
        let e = out.emit(t, &self.session, &self.scoped(key), &time.0, native)?;
        self.stamp(e, time, source_ts);
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
    fn stamp(&self, e: &mut journal_format::Envelope, time: &(String, bool), source_ts: &str) {
        e.thread_id = Some(self.session.clone());
        e.turn_id.clone_from(&self.turn);
        if let Some((task, attempt)) = &self.attempt {
            e.task_id = Some(task.clone());
            e.attempt_id = Some(attempt.clone());
        }
        flag(e, time, Some(source_ts));
    }

    fn event(&mut self, out: &mut Emitter, record: &Record) {
        let v = &record.value;
        let id = v.get("id").and_then(Value::as_u64).unwrap_or(0);
        if !self.seen.insert(id) {
            out.summary.duplicate_records += 1;
            return;
        }
        let source_ts = str_of(v, "timestamp").unwrap_or("");
        let Some(time) = utc(source_ts) else { return };
        if time.1 {
            out.summary.timestamps_assumed_utc += 1;
        }
        self.last_time = Some(time.clone());
        let source = str_of(v, "source").unwrap_or("");
        let native = match (str_of(v, "action"), str_of(v, "observation")) {
            (Some(a), _) => format!("action.{a}"),
            (None, Some(o)) => format!("observation.{o}"),
            (None, None) => "unknown".into(),
        };
        let key = format!("{id}");
        let args = v.get("args").cloned().unwrap_or(Value::Null);
        let meta = v.get("tool_call_metadata").cloned();

        // The model call behind an agent action, once per model response.
        if let Some(response) = meta.as_ref().and_then(|m| m.get("model_response")) {
            let response_id =
                str_at(response, "/id").map_or_else(|| format!("event-{id}"), str::to_string);
            if self.model_responses.insert(response_id.clone()) {
                out.summary.model_calls += 1;
                let model = str_at(response, "/model").map(str::to_string);
                let usage = response.get("usage").cloned().unwrap_or(Value::Null);
                let n = |k: &str| usage.get(k).and_then(Value::as_u64);
                if let Some(e) = self.emit(
                    out,
                    "model.requested",
                    &format!("{response_id}:requested"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.model_request_id = Some(response_id.clone());
                    e.payload = Some(json!({"model": model}));
                }
                if let Some(e) = self.emit(
                    out,
                    "model.completed",
                    &format!("{response_id}:completed"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.model_request_id = Some(response_id.clone());
                    e.payload = Some(json!({"model": model}));
                }
                let cost = ptr(v, "/llm_metrics/costs")
                    .and_then(Value::as_array)
                    .and_then(|c| c.last())
                    .and_then(|c| c.get("cost"))
                    .and_then(Value::as_f64);
                if let Some(e) = self.emit(
                    out,
                    "cost.recorded",
                    &format!("{response_id}:cost"),
                    &time,
                    source_ts,
                    &native,
                ) {
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
        }

        if let Some(state) = str_at(&args, "/confirmation_state") {
            self.permission(out, id, state, &time, source_ts, &native, &args);
        }

        match (str_of(v, "action"), str_of(v, "observation")) {
            (Some("message"), _) if source == "user" => {
                let turn = format!("turn-{id}");
                self.turn = Some(turn.clone());
                out.summary.turns += 1;
                let text = str_at(&args, "/content")
                    .or_else(|| str_of(v, "message"))
                    .unwrap_or("");
                let (text, text_ref) = out.text(text);
                if let Some(e) = self.emit(
                    out,
                    "turn.submitted",
                    &format!("{key}:submitted"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.payload = Some(
                        json!({"input": [{"type": "text", "text": text}], "inputRef": text_ref}),
                    );
                }
                let _ = self.emit(
                    out,
                    "turn.started",
                    &format!("{key}:started"),
                    &time,
                    source_ts,
                    &native,
                );
            }
            (Some("message"), _) => {
                let (text, text_ref) = out.text(str_of(v, "message").unwrap_or(""));
                if let Some(e) = self.emit(
                    out,
                    "model.delta",
                    &format!("{key}:message"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.payload =
                        Some(json!({"output": text, "outputRef": text_ref, "source": source}));
                }
            }
            (Some(action), _)
                if TOOL_ACTIONS.contains(&action) || meta.is_some() && action != "finish" =>
            {
                let call = meta
                    .as_ref()
                    .and_then(|m| str_at(m, "/tool_call_id"))
                    .map_or_else(|| format!("action-{id}"), |c| format!("{c}@{id}"));
                let name = meta
                    .as_ref()
                    .and_then(|m| str_at(m, "/function_name"))
                    .unwrap_or(action)
                    .to_string();
                out.summary.tool_calls += 1;
                self.open.insert(id, (call.clone(), name.clone()));
                let mut arguments = args.clone();
                if let Some(a) = arguments.as_object_mut() {
                    a.remove("confirmation_state");
                }
                let arguments = out.value(&arguments);
                if let Some(e) = self.emit(
                    out,
                    "tool.started",
                    &format!("{key}:started"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.tool_call_id = Some(call);
                    e.payload =
                        Some(json!({"toolName": name, "action": action, "arguments": arguments}));
                }
            }
            (Some("finish"), _) => {
                let (text, text_ref) = out.text(str_of(v, "message").unwrap_or(""));
                if let Some(e) = self.emit(
                    out,
                    "turn.completed",
                    &format!("{key}:finish"),
                    &time,
                    source_ts,
                    &native,
                ) {
                    e.payload =
                        Some(json!({"reason": "finish", "output": text, "outputRef": text_ref}));
                }
            }
            (None, Some("agent_state_changed")) => {
                let state = str_at(v.get("extras").unwrap_or(&Value::Null), "/agent_state")
                    .unwrap_or("unknown")
                    .to_string();
                if let Some(e) = self.emit(out, "run.status", &key, &time, source_ts, &native) {
                    e.native_status = Some(state.clone());
                    e.status = Some(run_status(&state).to_string());
                }
                if state == "awaiting_user_input" || state == "finished" {
                    if let Some(turn) = self.turn.take() {
                        if let Some(e) = self.emit(
                            out,
                            "turn.completed",
                            &format!("{key}:turn-completed"),
                            &time,
                            source_ts,
                            &native,
                        ) {
                            e.turn_id = Some(turn);
                            e.payload = Some(json!({"reason": state}));
                        }
                    }
                }
            }
            (None, Some(observation)) => {
                let cause = v.get("cause").and_then(Value::as_u64);
                match cause.and_then(|c| self.open.remove(&c)) {
                    Some((call, name)) => {
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
                        if let Some(e) =
                            self.emit(out, t, &format!("{key}:result"), &time, source_ts, &native)
                        {
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
                    None => self.vendor(out, &native, &key, &time, source_ts, v),
                }
            }
            _ => self.vendor(out, &native, &key, &time, source_ts, v),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn permission(
        &mut self,
        out: &mut Emitter,
        id: u64,
        state: &str,
        time: &(String, bool),
        source_ts: &str,
        native: &str,
        args: &Value,
    ) {
        let action = format!("confirm-{id}");
        let risk = args.get("security_risk").cloned();
        if let Some(e) = self.emit(
            out,
            "permission.requested",
            &format!("{id}:permission"),
            time,
            source_ts,
            native,
        ) {
            e.action_id = Some(action.clone());
            e.payload = Some(json!({"securityRisk": risk}));
        }
        let decision = match state {
            "confirmed" => Some("approved"),
            "rejected" => Some("rejected"),
            _ => None, // still awaiting: requested, never resolved in this source
        };
        if let Some(decision) = decision {
            if let Some(e) = self.emit(
                out,
                "permission.resolved",
                &format!("{id}:permission-resolved"),
                time,
                source_ts,
                native,
            ) {
                e.action_id = Some(action);
                e.payload =
                    Some(json!({"decision": decision, "decidedBy": "user", "nativeState": state}));
            }
        }
    }

    fn vendor(
        &self,
        out: &mut Emitter,
        native: &str,
        key: &str,
        time: &(String, bool),
        source_ts: &str,
        v: &Map<String, Value>,
    ) {
        if !KNOWN_KINDS.contains(&native) {
            *out.summary
                .unknown_kinds
                .entry(native.to_string())
                .or_default() += 1;
        }
        if let Some(e) = out.vendor(native, &self.session, &self.scoped(key), &time.0, v) {
            self.stamp(e, time, source_ts);
        }
    }
}

/// OpenHands agent states in the run status words of MODEL.md's status model.
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
