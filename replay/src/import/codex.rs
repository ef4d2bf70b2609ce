//! Codex rollout files (FORMATS.md §2): JSON lines of `{timestamp, type, payload}`.
//!
//! - Model history (`response_item`) is canonical; UI events (`event_msg` user/agent messages
//!   and reasoning) repeat it and are kept as vendor events for their timing.
//! - A user-role message of the model history is a person's request only when the next record
//!   is the `event_msg` `user_message` that shows what the person typed (Codex writes the two
//!   together); one without it is context Codex injected (instructions, the environment) and
//!   becomes `context.resolved`, as developer messages do. A user-role message that ends the
//!   file has no next record yet: it is context until the file grows, and a later import
//!   records the request as a revision of it.
//! - Turns by `turn_id` (`task_started` / `task_complete` / `turn_aborted`); a model call per
//!   `turn_context` (Codex writes one per sampling request), completed by the next
//!   `token_count` that carries usage, which is also the call's cost.
//! - Tool calls pair with their output by `call_id`; `update_plan` is the checklist; MCP tools
//!   (`mcp__<server>__<tool>`) keep their server as the tool namespace.
//! - `compacted` is a compaction (its replacement history goes to a blob).
//! - Approvals are not in the format and are not invented: only the policies are recorded.

use std::collections::{HashMap, HashSet};

use journal_format::Envelope;
use serde_json::{json, Map, Value};

use super::emit::{content_text, Emitter};
use super::records::{self, bad, str_at, str_of};
use super::{ImportError, Options, Parsed, Source};

pub(super) fn parse(file: &str, bytes: &[u8], options: &Options) -> Result<Parsed, ImportError> {
    let mut input = records::json_lines(file, bytes, options)?;
    let mut out = Emitter::new(Source::Codex);
    out.summary.records = input.read;
    let mut kept = Vec::with_capacity(input.records.len());
    for record in std::mem::take(&mut input.records) {
        match check(&record.value) {
            Ok(()) => kept.push(record),
            Err(message) => bad(file, options, &mut input.skipped, record.line, message)?,
        }
    }
    out.summary.skipped = input.skipped;
    let session = kept
        .iter()
        .find(|r| str_of(&r.value, "type") == Some("session_meta"))
        .and_then(|r| r.value.get("payload").and_then(|p| str_at(p, "/id")))
        .map(str::to_string)
        .ok_or_else(|| ImportError::NotImportable {
            file: file.to_string(),
            message: "no `session_meta` record names the session".into(),
        })?;

    let mut state = State {
        session,
        turn: None,
        model_call: None,
        model_calls_in_turn: 0,
        open_calls: HashMap::new(),
        policy: None,
        seen: HashSet::new(),
        pending: None,
    };
    for record in &kept {
        let key = format!("line-{}", record.line);
        map_record(&mut out, &mut state, &key, &record.value);
    }
    if let Some((key, record)) = state.pending.take() {
        context_message(&mut out, &line_of(&state, &key, &record));
    }
    out.summary.open_calls = state.open_calls.len() as u64;
    Ok(out.finish())
}

fn check(record: &Map<String, Value>) -> Result<(), String> {
    let Some(ts) = str_of(record, "timestamp") else {
        return Err("a record without `timestamp`".into());
    };
    journal_format::time_fmt::parse_rfc3339_ns(ts)
        .map_err(|_| format!("`timestamp` {ts:?} is not an RFC 3339 time"))?;
    if str_of(record, "type").is_none() {
        return Err("a record without `type`".into());
    }
    if !record.get("payload").is_some_and(Value::is_object) {
        return Err("a record without a `payload` object".into());
    }
    Ok(())
}

struct State {
    session: String,
    turn: Option<String>,
    /// The open model call's id.
    model_call: Option<String>,
    model_calls_in_turn: u64,
    /// Open tool calls: call id → tool name.
    open_calls: HashMap<String, String>,
    /// The last recorded (approval policy, sandbox policy).
    policy: Option<(Value, Value)>,
    /// Source ids already mapped (a record repeated in the file adds nothing).
    seen: HashSet<String>,
    /// A user-role message of the model history (its key and record) whose kind the next
    /// record tells: a request when that is the `user_message` the person typed, else context.
    pending: Option<(String, Map<String, Value>)>,
}

/// One record being mapped: its key and time, its native kind, its payload, and the session
/// and turn its events go on (the turn as it was when the record was read).
struct Line<'r> {
    /// `line-<n>`: the record's place in the file, for the ids of the events it makes.
    key: &'r str,
    record: &'r Map<String, Value>,
    ts: String,
    /// `type`, or `type.payload.type`.
    native: String,
    payload: Value,
    session: String,
    turn: Option<String>,
}

impl Line<'_> {
    /// A new event of this record, with the id `<session>:<key>`, on its thread and turn;
    /// `None` when an event with that id was made already.
    fn emit<'o>(&self, out: &'o mut Emitter, t: &str, key: &str) -> Option<&'o mut Envelope> {
        let e = out.emit(t, &self.session, key, &self.ts, &self.native)?;
        e.thread_id = Some(self.session.clone());
        e.turn_id.clone_from(&self.turn);
        Some(e)
    }

    /// The string at `pointer` in the payload.
    fn str(&self, pointer: &str) -> Option<&str> {
        str_at(&self.payload, pointer)
    }

    /// The turn the payload names, else the open one, else the record's own key.
    fn turn_id(&self, state: &State) -> String {
        self.str("/turn_id")
            .map(str::to_string)
            .or_else(|| state.turn.clone())
            .unwrap_or_else(|| self.key.to_string())
    }
}

fn map_record(out: &mut Emitter, state: &mut State, line_key: &str, v: &Map<String, Value>) {
    let line = line_of(state, line_key, v);
    let sub = str_at(&line.payload, "/type").unwrap_or("").to_string();
    let kind = str_of(v, "type").unwrap_or("unknown");
    if let Some((key, record)) = state.pending.take() {
        let pending = line_of(state, &key, &record);
        if (kind, sub.as_str()) == ("event_msg", "user_message") {
            request(out, &pending, Some(&line));
            other(out, &line, &sub);
            return;
        }
        context_message(out, &pending);
    }
    match (kind, sub.as_str()) {
        ("session_meta", _) => session_meta(out, &line),
        ("event_msg", "task_started") => turn_started(out, state, &line),
        ("event_msg", "task_complete" | "turn_aborted") => turn_ended(out, state, &line),
        ("event_msg", "user_message") => request(out, &line, None),
        ("turn_context", _) => turn_context(out, state, &line),
        ("event_msg", "token_count") if line.payload.get("info").is_some_and(|i| !i.is_null()) => {
            token_count(out, state, &line);
        }
        ("response_item", "message") if line.str("/role") == Some("user") => {
            state.pending = Some((line_key.to_string(), v.clone()));
        }
        ("response_item", "message") => message(out, state, &line),
        ("response_item", "reasoning") => reasoning(out, state, &line),
        (
            "response_item",
            "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call",
        ) => tool_call(out, state, &line),
        (
            "response_item",
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output",
        ) => tool_output(out, state, &line),
        ("compacted", _) => compacted(out, &line),
        _ => other(out, &line, &sub),
    }
}

/// The record `v` at `key` as it is mapped now: on the session and the open turn.
fn line_of<'r>(state: &State, key: &'r str, v: &'r Map<String, Value>) -> Line<'r> {
    let kind = str_of(v, "type").unwrap_or("unknown");
    let payload = v.get("payload").cloned().unwrap_or(Value::Null);
    let sub = str_at(&payload, "/type").unwrap_or("");
    let native = if sub.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{sub}")
    };
    Line {
        key,
        record: v,
        ts: str_of(v, "timestamp").unwrap_or("").to_string(),
        native,
        payload,
        session: state.session.clone(),
        turn: state.turn.clone(),
    }
}

fn session_meta(out: &mut Emitter, line: &Line) {
    let p = &line.payload;
    let payload = json!({
        "cwd": line.str("/cwd"),
        "originator": line.str("/originator"),
        "cliVersion": line.str("/cli_version"),
        "source": p.get("source"),
        "modelProvider": line.str("/model_provider"),
        "forkedFromId": line.str("/forked_from_id"),
        "git": p.get("git").cloned(),
    });
    if let Some(e) = line.emit(out, "session.created", &format!("{}:session", line.key)) {
        e.payload = Some(payload);
    }
}

/// `task_started`: a turn opens (Codex calls a turn a task).
fn turn_started(out: &mut Emitter, state: &mut State, line: &Line) {
    let id = line
        .str("/turn_id")
        .map_or_else(|| line.key.to_string(), str::to_string);
    state.turn = Some(id.clone());
    state.model_calls_in_turn = 0;
    out.summary.turns += 1;
    let window = line.payload.get("model_context_window").cloned();
    if let Some(e) = line.emit(out, "turn.started", &format!("{id}:started")) {
        e.turn_id = Some(id.clone());
        e.payload = Some(json!({"modelContextWindow": window}));
    }
}

/// `task_complete` or `turn_aborted`: the turn ends.
fn turn_ended(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let id = line.turn_id(state);
    let aborted = line.str("/type") == Some("turn_aborted");
    let (t, word) = if aborted {
        ("turn.failed", "aborted")
    } else {
        ("turn.completed", "completed")
    };
    let last = line.str("/last_agent_message").map(|m| out.text(m).0);
    let payload = json!({
        "reason": if aborted { p.get("reason").cloned().or(Some(json!("aborted"))) } else { None },
        "durationMs": p.get("duration_ms"),
        "timeToFirstTokenMs": p.get("time_to_first_token_ms"),
        "lastAgentMessage": last,
    });
    if let Some(e) = line.emit(out, t, &format!("{id}:{word}")) {
        e.turn_id = Some(id.clone());
        e.status_reason = aborted.then(|| "aborted".to_string());
        e.payload = Some(payload);
    }
    state.turn = None;
}

/// `turn_context`: the policies when they change, and a model call (Codex writes one per
/// sampling request).
fn turn_context(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let turn_id = line.turn_id(state);
    policy(out, state, line);
    state.model_calls_in_turn += 1;
    let call = format!("{turn_id}#{}", state.model_calls_in_turn);
    out.summary.model_calls += 1;
    state.model_call = Some(call.clone());
    let payload = json!({
        "model": line.str("/model"),
        "effort": p.get("effort"),
        "cwd": line.str("/cwd"),
        "collaborationMode": p.get("collaboration_mode"),
    });
    if let Some(e) = line.emit(out, "model.requested", &format!("{call}:requested")) {
        e.model_request_id = Some(call.clone());
        e.payload = Some(payload);
    }
}

/// The approval and sandbox policies of a `turn_context`, recorded when they differ from the
/// last ones recorded.
fn policy(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let policy = (
        p.get("approval_policy").cloned().unwrap_or(Value::Null),
        p.get("sandbox_policy").cloned().unwrap_or(Value::Null),
    );
    if state.policy.as_ref() == Some(&policy) {
        return;
    }
    let profile = p.get("permission_profile").map(|v| out.value(v));
    if let Some(e) = line.emit(out, "policy.changed", &format!("{}:policy", line.key)) {
        e.payload = Some(json!({
            "approvalPolicy": policy.0,
            "sandboxPolicy": policy.1,
            "permissionProfile": profile,
        }));
    }
    state.policy = Some(policy);
}

/// A `token_count` with usage: the open model call completes, and its usage is the cost.
fn token_count(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let last = p
        .pointer("/info/last_token_usage")
        .cloned()
        .unwrap_or(Value::Null);
    let total = p.pointer("/info/total_token_usage").cloned();
    let n = |k: &str| last.get(k).and_then(Value::as_u64);
    let call = state.model_call.take();
    if let Some(call) = &call {
        if let Some(e) = line.emit(out, "model.completed", &format!("{call}:completed")) {
            e.model_request_id = Some(call.clone());
        }
    }
    let rate_limits = p.get("rate_limits").cloned();
    if let Some(e) = line.emit(out, "cost.recorded", &format!("{}:cost", line.key)) {
        e.model_request_id.clone_from(&call);
        e.payload = Some(json!({
            "inputTokens": n("input_tokens"),
            "outputTokens": n("output_tokens"),
            "cacheReadTokens": n("cached_input_tokens"),
            "reasoningTokens": n("reasoning_output_tokens"),
            "totalTokens": n("total_tokens"),
            "cumulative": total,
            "rateLimits": rate_limits,
        }));
    }
}

/// A message of the model history from the model or the system: the model's output, or
/// instructions (context).
fn message(out: &mut Emitter, state: &State, line: &Line) {
    if line.str("/role") != Some("assistant") {
        context_message(out, line);
        return;
    }
    let text = line
        .payload
        .get("content")
        .map(content_text)
        .unwrap_or_default();
    let (text, text_ref) = out.text(&text);
    let payload =
        json!({"output": text, "outputRef": text_ref, "phase": line.payload.get("phase")});
    if let Some(e) = line.emit(out, "model.delta", &format!("{}:message", line.key)) {
        e.model_request_id.clone_from(&state.model_call);
        e.payload = Some(payload);
    }
}

/// A person's request: the user-role message of the model history with the `user_message`
/// that follows it (`typed`: the text as the person typed it), or a `user_message` alone when
/// the history holds no message for it.
fn request(out: &mut Emitter, line: &Line, typed: Option<&Line>) {
    out.summary.requests += 1;
    let typed_text = typed.and_then(|t| t.str("/message"));
    let text = match typed_text {
        Some(text) => text.to_string(),
        None if line.str("/type") == Some("user_message") => {
            line.str("/message").unwrap_or("").to_string()
        }
        None => line
            .payload
            .get("content")
            .map(content_text)
            .unwrap_or_default(),
    };
    let images = typed
        .unwrap_or(line)
        .payload
        .get("images")
        .and_then(Value::as_array)
        .map(Vec::len)
        .filter(|n| *n > 0);
    let (text, text_ref) = out.text(&text);
    let payload =
        json!({"input": [{"type": "text", "text": text}], "inputRef": text_ref, "images": images});
    if let Some(e) = line.emit(out, "turn.submitted", &format!("{}:message", line.key)) {
        e.payload = Some(payload);
    }
}

/// Context put in front of the model that no person typed: developer or system instructions,
/// and user-role messages Codex injected (the environment, project instructions).
fn context_message(out: &mut Emitter, line: &Line) {
    out.summary.context_messages += 1;
    let role = line.str("/role").unwrap_or("");
    let kind = if role == "user" {
        "injected"
    } else {
        "instructions"
    };
    let text = line
        .payload
        .get("content")
        .map(content_text)
        .unwrap_or_default();
    let (text, text_ref) = out.text(&text);
    let payload = json!({"kind": kind, "role": role, "text": text, "textRef": text_ref});
    if let Some(e) = line.emit(out, "context.resolved", &format!("{}:message", line.key)) {
        e.payload = Some(payload);
    }
}

fn reasoning(out: &mut Emitter, state: &State, line: &Line) {
    let summary = line
        .payload
        .get("summary")
        .map(content_text)
        .unwrap_or_default();
    let (text, text_ref) = out.text(&summary);
    let encrypted = line
        .str("/encrypted_content")
        .map(|c| out.blob(c.as_bytes().to_vec()));
    if let Some(e) = line.emit(out, "reasoning.summary", &format!("{}:reasoning", line.key)) {
        e.model_request_id.clone_from(&state.model_call);
        e.payload = Some(json!({"text": text, "textRef": text_ref, "encryptedRef": encrypted}));
    }
}

/// A tool call (a repeated one adds nothing); `update_plan` is also the checklist, and a web
/// search carries its own result.
fn tool_call(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let web_search = line.str("/type") == Some("web_search_call");
    let call = line
        .str("/call_id")
        .or_else(|| line.str("/id"))
        .map_or_else(|| line.key.to_string(), str::to_string);
    if !state.seen.insert(format!("call:{call}")) {
        out.summary.duplicate_records += 1;
        return;
    }
    let name = line
        .str("/name")
        .unwrap_or(if web_search { "web_search" } else { "shell" })
        .to_string();
    let arguments = arguments(p);
    let namespace = name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
        .map(|(server, _)| server.to_string());
    out.summary.tool_calls += 1;
    let args = out.value(&arguments);
    if let Some(e) = line.emit(out, "tool.started", &format!("{call}:started")) {
        e.tool_call_id = Some(call.clone());
        e.payload = Some(
            json!({"toolName": name, "toolNamespace": namespace, "arguments": args, "status": p.get("status")}),
        );
    }
    if name == "update_plan" {
        checklist(out, line, &call, &arguments);
    }
    if web_search {
        web_search_result(out, line, &call, &name);
    } else {
        state.open_calls.insert(call, name);
    }
}

/// A tool call's arguments: `arguments` is a JSON string, kept parsed when it parses and as
/// given otherwise; `input` or `action` when there is none.
fn arguments(p: &Value) -> Value {
    match p
        .get("arguments")
        .or_else(|| p.get("input"))
        .or_else(|| p.get("action"))
    {
        Some(Value::String(s)) => {
            serde_json::from_str::<Value>(s).unwrap_or(Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// A web search records its own outcome; it has no separate output record.
fn web_search_result(out: &mut Emitter, line: &Line, call: &str, name: &str) {
    out.summary.tool_results += 1;
    let failed = line.str("/status").is_some_and(|s| s != "completed");
    let t = if failed { "tool.failed" } else { "tool.result" };
    if let Some(e) = line.emit(out, t, &format!("{call}:result")) {
        e.tool_call_id = Some(call.to_string());
        e.payload =
            Some(json!({"toolName": name, "status": if failed { "failure" } else { "success" }}));
    }
}

/// A tool call's output, paired with its call by `call_id` (a repeated one adds nothing).
fn tool_output(out: &mut Emitter, state: &mut State, line: &Line) {
    let p = &line.payload;
    let call = line
        .str("/call_id")
        .map_or_else(|| line.key.to_string(), str::to_string);
    if !state.seen.insert(format!("output:{call}")) {
        out.summary.duplicate_records += 1;
        return;
    }
    let name = state.open_calls.remove(&call);
    out.summary.tool_results += 1;
    if name.is_none() {
        out.summary.tool_calls += 1; // a result whose call the file does not hold
    }
    let text = match p.get("output") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other
            .get("content")
            .map_or_else(|| other.to_string(), content_text),
        None => String::new(),
    };
    let failed = p.pointer("/output/success").and_then(Value::as_bool) == Some(false);
    let (output, output_ref) = out.text(&text);
    let t = if failed { "tool.failed" } else { "tool.result" };
    if let Some(e) = line.emit(out, t, &format!("{call}:result")) {
        e.tool_call_id = Some(call.clone());
        e.output_ref = output_ref;
        e.payload = Some(
            json!({"toolName": name, "status": if failed { "failure" } else { "success" }, "output": output}),
        );
    }
}

/// `compacted`: a compaction, its replacement history in a blob.
fn compacted(out: &mut Emitter, line: &Line) {
    out.summary.compactions += 1;
    let message = line.str("/message").unwrap_or("").to_string();
    let (summary, summary_ref) = out.text(&message);
    let history = line
        .payload
        .get("replacement_history")
        .map(|h| out.blob(serde_json::to_vec(h).unwrap_or_default()));
    let key = format!("{}:compacted", line.key);
    if let Some(e) = line.emit(out, "context.compaction.completed", &key) {
        e.payload = Some(
            json!({"summary": summary, "summaryRef": summary_ref, "replacementHistoryRef": history}),
        );
    }
}

/// Any other record, kept as a vendor event; `sub` (the payload's type) is counted unknown
/// unless it is a UI event that repeats the model history or is known to carry nothing to map.
fn other(out: &mut Emitter, line: &Line, sub: &str) {
    const KNOWN: [&str; 10] = [
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "token_count",
        "context_compacted",
        "entered_review_mode",
        "exited_review_mode",
        "undo_completed",
        "ghost_snapshot",
    ];
    let native = &line.native;
    if !KNOWN.contains(&sub) {
        *out.summary.unknown_kinds.entry(native.clone()).or_default() += 1;
    }
    let key = format!("{}:{native}", line.key);
    if let Some(e) = out.vendor(native, &line.session, &key, &line.ts, line.record) {
        e.thread_id = Some(line.session.clone());
        e.turn_id.clone_from(&line.turn);
    }
}

/// `update_plan`'s `plan: [{step, status}]` as the checklist.
fn checklist(out: &mut Emitter, line: &Line, call: &str, arguments: &Value) {
    let items: Vec<Value> = arguments
        .get("plan")
        .and_then(Value::as_array)
        .map(|plan| {
            plan.iter()
                .enumerate()
                .map(|(i, s)| {
                    let status = match str_at(s, "/status") {
                        Some("in_progress") => "in_progress",
                        Some("completed") => "completed",
                        _ => "pending",
                    };
                    json!({"id": format!("step-{}", i + 1), "title": str_at(s, "/step").unwrap_or(""), "status": status})
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(e) = line.emit(out, "checklist.updated", &format!("{call}:checklist")) {
        e.tool_call_id = Some(call.to_string());
        e.payload = Some(json!({"items": items}));
    }
}
