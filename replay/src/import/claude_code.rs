//! Claude Code session transcripts (FORMATS.md §1): a JSON-lines file whose records form a
//! tree linked by `parentUuid`.
//!
//! - The main thread (thread id = the session id) is the path from the root to the leaf named
//!   by the last `last-prompt`/`summary` record's `leafUuid`, or else to the last record with
//!   a uuid; records on other branches keep their thread `branch-<uuid of the branch's first
//!   record>`, sidechain records `agent-<agentId>`.
//! - Assistant records are one per content block: they are grouped by `message.id` into one
//!   model call; the usage of the group's last record is the call's cost (never summed).
//! - Tool calls pair with their results by `tool_use_id`; a call without one stays open.
//! - `Task`/`Agent` calls are subagents; `TodoWrite` is the checklist; `ExitPlanMode` and
//!   `AskUserQuestion` are decisions asked for and resolved; `permissionMode` changes are
//!   policy changes.
//! - A user record is a prompt (a request, a new turn) unless it carries tool results (results
//!   of their calls) or is something Claude Code wrote itself: a meta message, a compaction's
//!   summary, a command's output or an interruption's marker, which are context
//!   (`context.resolved`).
//! - File-history backups are artifact references, stored as blobs when found.

use std::collections::{HashMap, HashSet};

use journal_format::Envelope;
use serde_json::{json, Map, Value};

use super::emit::{content_text, Emitter};
use super::records::{self, bad, str_at, str_of, Record};
use super::{ImportError, Options, Parsed, Source};

/// Record kinds the mapping knows without a dedicated event: kept as vendor events but not
/// counted as unknown.
const KNOWN_VENDOR_KINDS: [&str; 6] = [
    "last-prompt",
    "summary",
    "custom-title",
    "ai-title",
    "attachment",
    "system",
];

/// Tools whose call spawns a subagent.
const SUBAGENT_TOOLS: [&str; 2] = ["Task", "Agent"];

pub(super) fn parse(
    file: &str,
    bytes: &[u8],
    options: &Options,
    resolve: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Parsed, ImportError> {
    let mut input = records::json_lines(file, bytes, options)?;
    let mut out = Emitter::new(Source::ClaudeCode);
    out.summary.records = input.read;

    // Check each record has what its kind needs, before anything is mapped.
    // A record repeating an earlier record's uuid adds nothing (Claude Code dedups by uuid).
    let mut kept = Vec::with_capacity(input.records.len());
    let mut seen_uuids = HashSet::new();
    for record in std::mem::take(&mut input.records) {
        if let Err(message) = check(&record.value) {
            bad(file, options, &mut input.skipped, record.line, message)?;
            continue;
        }
        if let Some(uuid) = str_of(&record.value, "uuid") {
            if !seen_uuids.insert(uuid.to_string()) {
                out.summary.duplicate_records += 1;
                continue;
            }
        }
        kept.push(record);
    }
    out.summary.skipped = input.skipped;

    let default_session = kept
        .iter()
        .find_map(|r| str_of(&r.value, "sessionId"))
        .map(str::to_string)
        .ok_or_else(|| ImportError::NotImportable {
            file: file.to_string(),
            message: "no record names its session (`sessionId`)".into(),
        })?;

    let threads = Threads::new(&kept);
    let mut state = State {
        session: default_session,
        last_timestamp: String::new(),
        turn: None,
        turn_completed: false,
        open_calls: HashMap::new(),
        group_last: HashMap::new(),
        groups_started: HashSet::new(),
        group_text: HashMap::new(),
        permission_mode: None,
        artifacts: HashSet::new(),
    };
    for (i, r) in kept.iter().enumerate() {
        if str_of(&r.value, "type") == Some("assistant") {
            state.group_last.insert(group_of(&r.value), i);
        }
    }
    for (i, record) in kept.iter().enumerate() {
        map_record(&mut out, &mut state, &threads, i, record, resolve);
    }
    out.summary.open_calls = state.open_calls.len() as u64;
    Ok(out.finish())
}

/// What a record of each kind must have.
fn check(record: &Map<String, Value>) -> Result<(), String> {
    let Some(kind) = str_of(record, "type") else {
        return Err("a record without `type`".into());
    };
    if matches!(kind, "user" | "assistant" | "system") {
        for field in ["uuid", "timestamp"] {
            if str_of(record, field).is_none() {
                return Err(format!("a `{kind}` record without `{field}`"));
            }
        }
        if kind != "system" && record.get("message").is_none_or(|m| !m.is_object()) {
            return Err(format!("a `{kind}` record without `message`"));
        }
    }
    if let Some(ts) = str_of(record, "timestamp") {
        journal_format::time_fmt::parse_rfc3339_ns(ts)
            .map_err(|_| format!("`timestamp` {ts:?} is not an RFC 3339 time"))?;
    }
    Ok(())
}

/// The model call an assistant record belongs to.
fn group_of(record: &Map<String, Value>) -> String {
    record
        .get("message")
        .and_then(|m| str_at(m, "/id"))
        .or_else(|| str_of(record, "requestId"))
        .or_else(|| str_of(record, "uuid"))
        .unwrap_or("")
        .to_string()
}

/// The thread of each record: the main chain, a branch, or a sidechain.
struct Threads {
    main: HashSet<String>,
    parent: HashMap<String, String>,
    branch_root: std::cell::RefCell<HashMap<String, String>>,
}

impl Threads {
    fn new(records: &[Record]) -> Threads {
        let mut parent = HashMap::new();
        let mut leaf_named = None;
        let mut last = None;
        for r in records {
            let v = &r.value;
            if let Some(leaf) = str_of(v, "leafUuid") {
                leaf_named = Some(leaf.to_string());
            }
            let Some(uuid) = str_of(v, "uuid") else {
                continue;
            };
            let up = str_of(v, "parentUuid").or_else(|| str_of(v, "logicalParentUuid"));
            if let Some(up) = up {
                parent.insert(uuid.to_string(), up.to_string());
            }
            if v.get("isSidechain").and_then(Value::as_bool) != Some(true) {
                last = Some(uuid.to_string());
            }
        }
        let known = |u: &String| records.iter().any(|r| str_of(&r.value, "uuid") == Some(u));
        let leaf = leaf_named.filter(known).or(last);
        let mut main = HashSet::new();
        let mut at = leaf;
        while let Some(u) = at {
            if !main.insert(u.clone()) {
                break; // a cycle: the source is damaged; stop rather than loop
            }
            at = parent.get(&u).cloned();
        }
        Threads {
            main,
            parent,
            branch_root: std::cell::RefCell::new(HashMap::new()),
        }
    }

    fn thread(&self, session: &str, record: &Map<String, Value>) -> String {
        if record.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            return match str_of(record, "agentId") {
                Some(agent) => format!("agent-{agent}"),
                None => "sidechain".into(),
            };
        }
        let Some(uuid) = str_of(record, "uuid") else {
            return session.to_string();
        };
        if self.main.contains(uuid) {
            return session.to_string();
        }
        format!("branch-{}", self.branch_root(uuid))
    }

    /// The first record of the branch `uuid` is on: its highest ancestor not on the main
    /// chain.
    fn branch_root(&self, uuid: &str) -> String {
        let mut path = Vec::new();
        let mut at = uuid.to_string();
        let root = loop {
            if let Some(root) = self.branch_root.borrow().get(&at) {
                break root.clone();
            }
            path.push(at.clone());
            match self.parent.get(&at) {
                Some(up) if !self.main.contains(up) && !path.contains(up) => at = up.clone(),
                _ => break at.clone(),
            }
        };
        let mut memo = self.branch_root.borrow_mut();
        for p in path {
            memo.insert(p, root.clone());
        }
        root
    }
}

/// What mapping has seen so far.
struct State {
    session: String,
    last_timestamp: String,
    /// The current turn's id.
    turn: Option<String>,
    turn_completed: bool,
    /// Open tool calls: id → tool name.
    open_calls: HashMap<String, String>,
    /// The index of each model call's last record.
    group_last: HashMap<String, usize>,
    groups_started: HashSet<String>,
    /// The text blocks of each model call so far.
    group_text: HashMap<String, Vec<String>>,
    permission_mode: Option<String>,
    /// Backup names already made artifact references.
    artifacts: HashSet<String>,
}

/// Context shared by the events of one record.
struct At<'a> {
    session: String,
    thread: String,
    timestamp: String,
    kind: &'a str,
    key: &'a str,
}

impl At<'_> {
    /// An event of this record, at its time, on its thread, in `turn`.
    fn event<'o>(
        &self,
        out: &'o mut Emitter,
        event_type: &str,
        key: &str,
        turn: Option<&String>,
    ) -> Option<&'o mut Envelope> {
        self.event_at(out, event_type, key, &self.timestamp, turn)
    }

    /// [`At::event`] at another time than the record's.
    fn event_at<'o>(
        &self,
        out: &'o mut Emitter,
        event_type: &str,
        key: &str,
        time: &str,
        turn: Option<&String>,
    ) -> Option<&'o mut Envelope> {
        let e = out.emit(event_type, &self.session, key, time, self.kind)?;
        e.thread_id = Some(self.thread.clone());
        e.turn_id = turn.cloned();
        Some(e)
    }

    /// A vendor event carrying `record`, on this record's thread, in `turn`.
    fn vendor<'o>(
        &self,
        out: &'o mut Emitter,
        kind: &str,
        key: &str,
        record: &Map<String, Value>,
        turn: Option<&String>,
    ) -> Option<&'o mut Envelope> {
        let e = out.vendor(kind, &self.session, key, &self.timestamp, record)?;
        e.thread_id = Some(self.thread.clone());
        e.turn_id = turn.cloned();
        Some(e)
    }
}

fn map_record(
    out: &mut Emitter,
    state: &mut State,
    threads: &Threads,
    index: usize,
    record: &Record,
    resolve: &dyn Fn(&str) -> Option<Vec<u8>>,
) {
    let v = &record.value;
    let kind = str_of(v, "type").unwrap_or("unknown");
    let session = str_of(v, "sessionId").unwrap_or(&state.session).to_string();
    let timestamp = str_of(v, "timestamp")
        .or_else(|| v.get("snapshot").and_then(|s| str_at(s, "/timestamp")))
        .map(str::to_string)
        .unwrap_or_else(|| state.last_timestamp.clone());
    let timestamp = if timestamp.is_empty() {
        // No time anywhere before this record: the epoch, marked inferred below.
        "1970-01-01T00:00:00Z".to_string()
    } else {
        timestamp
    };
    state.last_timestamp.clone_from(&timestamp);
    let line_key = format!("line-{}", record.line);
    let key = str_of(v, "uuid").unwrap_or(&line_key).to_string();
    let at = At {
        thread: threads.thread(&session, v),
        session,
        timestamp,
        kind,
        key: &key,
    };
    match kind {
        "user" => user(out, state, &at, v),
        "assistant" => assistant(out, state, &at, index, v),
        "system" => system(out, state, &at, v),
        "file-history-snapshot" => file_history(out, state, &at, v, resolve),
        "queue-operation" => {
            let payload = json!({
                "operation": str_of(v, "operation"),
                "content": v.get("content").map(|c| out.value(c)),
            });
            if let Some(e) = at.event(out, "queue.changed", at.key, None) {
                e.payload = Some(payload);
            }
        }
        _ => {
            if !KNOWN_VENDOR_KINDS.contains(&kind) {
                *out.summary
                    .unknown_kinds
                    .entry(kind.to_string())
                    .or_default() += 1;
            }
            let _ = at.vendor(out, kind, at.key, v, None);
        }
    }
}

fn user(out: &mut Emitter, state: &mut State, at: &At, v: &Map<String, Value>) {
    let content = v.get("message").and_then(|m| m.get("content"));
    if let Some(mode) = str_of(v, "permissionMode") {
        if state.permission_mode.as_deref() != Some(mode) {
            state.permission_mode = Some(mode.to_string());
            let key = format!("{}:permission-mode", at.key);
            if let Some(e) = at.event(out, "policy.changed", &key, state.turn.as_ref()) {
                e.payload = Some(json!({"permissionMode": mode}));
            }
        }
    }
    let results: Vec<&Value> = content
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| str_at(b, "/type") == Some("tool_result"))
                .collect()
        })
        .unwrap_or_default();
    if !results.is_empty() {
        for block in results {
            tool_result(out, state, at, v, block);
        }
        return;
    }
    let text = content.map(content_text).unwrap_or_default();
    if let Some(kind) = context_kind(v, &text) {
        out.summary.context_messages += 1;
        let (text, text_ref) = out.text(&text);
        if let Some(e) = at.event(out, "context.resolved", at.key, state.turn.as_ref()) {
            e.payload =
                Some(json!({"kind": kind, "role": "user", "text": text, "textRef": text_ref}));
        }
        return;
    }
    // A prompt: a new turn.
    let turn = str_of(v, "promptId").unwrap_or(at.key).to_string();
    state.turn = Some(turn.clone());
    state.turn_completed = false;
    out.summary.turns += 1;
    out.summary.requests += 1;
    let (text, text_ref) = out.text(&text);
    let submitted = format!("{}:submitted", at.key);
    if let Some(e) = at.event(out, "turn.submitted", &submitted, Some(&turn)) {
        e.payload = Some(json!({
            "input": [{"type": "text", "text": text}],
            "inputRef": text_ref,
        }));
    }
    let started = format!("{}:started", at.key);
    let _ = at.event(out, "turn.started", &started, Some(&turn));
}

/// What Claude Code writes as a user message that no person typed: meta messages (`isMeta`,
/// such as the caveat before a local command's output), the summary that replaces a compacted
/// conversation, the output of a local or `!` shell command, and the marker of an interruption.
/// `None` for a prompt. The command tags and the interruption marker are Claude Code's own
/// fixed text; a redacted message carries neither and stays a prompt.
fn context_kind(v: &Map<String, Value>, text: &str) -> Option<&'static str> {
    const COMMAND_OUTPUT: [&str; 4] = [
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<bash-stdout>",
        "<bash-stderr>",
    ];
    let is = |flag: &str| v.get(flag).and_then(Value::as_bool) == Some(true);
    let text = text.trim_start();
    if is("isCompactSummary") {
        Some("compaction_summary")
    } else if is("isMeta") {
        Some("meta")
    } else if COMMAND_OUTPUT.iter().any(|tag| text.starts_with(tag)) {
        Some("command_output")
    } else if text.starts_with("[Request interrupted by user") {
        Some("interruption")
    } else {
        None
    }
}

fn tool_result(out: &mut Emitter, state: &mut State, at: &At, v: &Map<String, Value>, b: &Value) {
    let Some(call) = str_at(b, "/tool_use_id") else {
        return;
    };
    let failed = b.get("is_error").and_then(Value::as_bool) == Some(true);
    let tool = state.open_calls.remove(call);
    out.summary.tool_results += 1;
    if tool.is_none() {
        out.summary.tool_calls += 1; // a result whose call the file does not hold
    }
    let text = b.get("content").map(content_text).unwrap_or_default();
    let (output, output_ref) = out.text(&text);
    let structured = v.get("toolUseResult").map(|r| out.value(r));
    let event_type = if failed { "tool.failed" } else { "tool.result" };
    let key = format!("{call}:result");
    if let Some(e) = at.event(out, event_type, &key, state.turn.as_ref()) {
        e.tool_call_id = Some(call.to_string());
        e.output_ref.clone_from(&output_ref);
        e.payload = Some(json!({
            "toolName": tool,
            "status": if failed { "failure" } else { "success" },
            "output": output,
            "structured": structured,
        }));
    }
    let result = v.get("toolUseResult");
    match tool.as_deref() {
        Some(name) if SUBAGENT_TOOLS.contains(&name) => {
            let agent = result.and_then(|r| str_at(r, "/agentId"));
            let event_type = if failed {
                "subagent.failed"
            } else {
                "subagent.completed"
            };
            let key = format!("{call}:subagent-end");
            if let Some(e) = at.event(out, event_type, &key, state.turn.as_ref()) {
                e.subagent_id = Some(call.to_string());
                e.tool_call_id = Some(call.to_string());
                e.payload = Some(json!({
                    "childThreadId": agent.map(|a| format!("agent-{a}")),
                    "status": if failed { "failed" } else { "completed" },
                    "result": if output.len() <= 2000 { Some(output.clone()) } else { None },
                    "totalTokens": result.and_then(|r| r.get("totalTokens")),
                    "totalDurationMs": result.and_then(|r| r.get("totalDurationMs")),
                    "totalToolUseCount": result.and_then(|r| r.get("totalToolUseCount")),
                }));
            }
        }
        Some(name @ ("ExitPlanMode" | "AskUserQuestion")) => {
            let key = format!("{call}:decision");
            let decision = match (name, failed) {
                (_, true) => "rejected",
                ("ExitPlanMode", false) => "approved",
                _ => "answered",
            };
            let response = result.and_then(|r| r.get("answers")).map(|a| out.value(a));
            if let Some(e) = at.event(out, "action.resolved", &key, state.turn.as_ref()) {
                e.action_id = Some(call.to_string());
                e.tool_call_id = Some(call.to_string());
                e.payload = Some(json!({
                    "decision": decision,
                    "decidedBy": "user",
                    "response": response,
                }));
            }
        }
        _ => {}
    }
}

fn assistant(out: &mut Emitter, state: &mut State, at: &At, index: usize, v: &Map<String, Value>) {
    let message = v.get("message").cloned().unwrap_or(Value::Null);
    let group = group_of(v);
    let model = str_at(&message, "/model").map(str::to_string);
    if state.groups_started.insert(group.clone()) {
        out.summary.model_calls += 1;
        let key = format!("{group}:requested");
        if let Some(e) = at.event(out, "model.requested", &key, state.turn.as_ref()) {
            e.model_request_id = Some(group.clone());
            e.request_id = str_of(v, "requestId").map(str::to_string);
            e.payload = Some(json!({"model": model}));
        }
    }
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (n, block) in blocks.iter().enumerate() {
        match str_at(block, "/type") {
            Some("text") => state
                .group_text
                .entry(group.clone())
                .or_default()
                .push(str_at(block, "/text").unwrap_or("").to_string()),
            Some("thinking") => {
                let (text, text_ref) = out.text(str_at(block, "/thinking").unwrap_or(""));
                let key = format!("{}:{n}:thinking", at.key);
                if let Some(e) = at.event(out, "reasoning.summary", &key, state.turn.as_ref()) {
                    e.model_request_id = Some(group.clone());
                    e.payload = Some(json!({"text": text, "textRef": text_ref}));
                }
            }
            Some("tool_use") => tool_use(out, state, at, &group, block),
            _ => {}
        }
    }
    if state.group_last.get(&group) == Some(&index) {
        let text = state
            .group_text
            .remove(&group)
            .unwrap_or_default()
            .join("\n");
        let (output, output_ref) = out.text(&text);
        let stop = str_at(&message, "/stop_reason").map(str::to_string);
        let key = format!("{group}:completed");
        if let Some(e) = at.event(out, "model.completed", &key, state.turn.as_ref()) {
            e.model_request_id = Some(group.clone());
            e.output_ref = output_ref;
            e.payload = Some(json!({"model": model, "stopReason": stop, "output": output}));
        }
        if let Some(usage) = message.get("usage") {
            let n = |k: &str| usage.get(k).and_then(Value::as_u64);
            let key = format!("{group}:cost");
            if let Some(e) = at.event(out, "cost.recorded", &key, state.turn.as_ref()) {
                e.model_request_id = Some(group.clone());
                e.payload = Some(json!({
                    "model": model,
                    "inputTokens": n("input_tokens"),
                    "outputTokens": n("output_tokens"),
                    "cacheReadTokens": n("cache_read_input_tokens"),
                    "cacheWriteTokens": n("cache_creation_input_tokens"),
                }));
            }
        }
        if stop.as_deref() == Some("end_turn") {
            complete_turn(out, state, at, "end_turn");
        }
    }
}

/// A tool call; a subagent's spawn, the checklist or a question for the user besides, for the
/// tools that are those.
fn tool_use(out: &mut Emitter, state: &mut State, at: &At, group: &str, block: &Value) {
    let Some(call) = str_at(block, "/id") else {
        return;
    };
    let name = str_at(block, "/name").unwrap_or("tool").to_string();
    let input = block.get("input").cloned().unwrap_or(Value::Null);
    out.summary.tool_calls += 1;
    state.open_calls.insert(call.to_string(), name.clone());
    let arguments = out.value(&input);
    let key = format!("{call}:started");
    if let Some(e) = at.event(out, "tool.started", &key, state.turn.as_ref()) {
        e.tool_call_id = Some(call.to_string());
        e.model_request_id = Some(group.to_string());
        e.payload = Some(json!({"toolName": name, "arguments": arguments}));
    }
    let turn = state.turn.as_ref();
    if SUBAGENT_TOOLS.contains(&name.as_str()) {
        subagent_spawned(out, at, turn, call, &input);
    }
    if name == "TodoWrite" {
        checklist(out, at, turn, call, &input);
    }
    if matches!(name.as_str(), "ExitPlanMode" | "AskUserQuestion") {
        asked(out, at, turn, call, &name, &input);
    }
}

/// A subagent tool's call spawns a subagent, whose id is the call's.
fn subagent_spawned(out: &mut Emitter, at: &At, turn: Option<&String>, call: &str, input: &Value) {
    out.summary.subagents += 1;
    let key = format!("{call}:subagent-spawned");
    let role = str_at(input, "/subagent_type")
        .unwrap_or("subagent")
        .to_string();
    let prompt = str_at(input, "/description").map(str::to_string);
    if let Some(e) = at.event(out, "subagent.spawned", &key, turn) {
        e.subagent_id = Some(call.to_string());
        e.tool_call_id = Some(call.to_string());
        e.payload = Some(json!({
            "parentThreadId": at.thread,
            "role": role,
            "prompt": prompt,
            "status": "running",
        }));
    }
}

/// `TodoWrite`'s `todos: [{id, content, status}]` as the checklist.
fn checklist(out: &mut Emitter, at: &At, turn: Option<&String>, call: &str, input: &Value) {
    let items: Vec<Value> = input
        .get("todos")
        .and_then(Value::as_array)
        .map(|todos| {
            todos
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let status = match str_at(t, "/status") {
                        Some("in_progress") => "in_progress",
                        Some("completed") => "completed",
                        _ => "pending",
                    };
                    json!({
                        "id": str_at(t, "/id").map_or_else(|| format!("todo-{}", i + 1), str::to_string),
                        "title": str_at(t, "/content").unwrap_or(""),
                        "status": status,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let key = format!("{call}:checklist");
    if let Some(e) = at.event(out, "checklist.updated", &key, turn) {
        e.tool_call_id = Some(call.to_string());
        e.payload = Some(json!({"items": items}));
    }
}

/// `ExitPlanMode` (a plan to approve) or `AskUserQuestion` (a question): an action required
/// of the user, whose id is the call's.
fn asked(out: &mut Emitter, at: &At, turn: Option<&String>, call: &str, name: &str, input: &Value) {
    let key = format!("{call}:asked");
    let (action_type, prompt) = if name == "ExitPlanMode" {
        ("plan_approval", str_at(input, "/plan").map(str::to_string))
    } else {
        ("question", None)
    };
    let prompt = prompt.map(|p| out.text(&p).0);
    let questions = input.get("questions").map(|q| out.value(q));
    if let Some(e) = at.event(out, "action.required", &key, turn) {
        e.action_id = Some(call.to_string());
        e.tool_call_id = Some(call.to_string());
        e.payload = Some(json!({
            "actionType": action_type,
            "toolName": name,
            "prompt": prompt,
            "questions": questions,
        }));
    }
}

fn complete_turn(out: &mut Emitter, state: &mut State, at: &At, why: &str) {
    let Some(turn) = state.turn.clone() else {
        return;
    };
    if state.turn_completed {
        return;
    }
    state.turn_completed = true;
    let key = format!("{}:turn-completed", at.key);
    if let Some(e) = at.event(out, "turn.completed", &key, Some(&turn)) {
        e.payload = Some(json!({"reason": why}));
    }
}

fn system(out: &mut Emitter, state: &mut State, at: &At, v: &Map<String, Value>) {
    match str_of(v, "subtype") {
        Some("stop_hook_summary") => {
            let key = format!("{}:hook", at.key);
            if let Some(e) = at.event(out, "hook.completed", &key, state.turn.as_ref()) {
                e.payload = Some(json!({
                    "hookInfos": v.get("hookInfos"),
                    "hookErrors": v.get("hookErrors"),
                    "preventedContinuation": v.get("preventedContinuation"),
                    "stopReason": v.get("stopReason"),
                }));
            }
            complete_turn(out, state, at, "stop_hook");
        }
        Some("compact_boundary") => {
            out.summary.compactions += 1;
            let meta = v.get("compactMetadata");
            if let Some(e) = at.event(
                out,
                "context.compaction.completed",
                at.key,
                state.turn.as_ref(),
            ) {
                e.payload = Some(json!({
                    "trigger": meta.and_then(|m| str_at(m, "/trigger")),
                    "tokensBefore": meta.and_then(|m| m.get("preTokens")).and_then(Value::as_u64),
                    "logicalParentUuid": str_of(v, "logicalParentUuid"),
                }));
            }
        }
        Some("api_error") => {
            if let Some(e) = at.event(out, "runtime.error", at.key, state.turn.as_ref()) {
                e.payload = Some(json!({"error": v.get("error"), "content": v.get("content")}));
            }
        }
        subtype => {
            let kind = format!("system.{}", subtype.unwrap_or("unknown"));
            if !matches!(subtype, Some("local_command" | "informational")) {
                *out.summary.unknown_kinds.entry(kind.clone()).or_default() += 1;
            }
            let _ = at.vendor(out, &kind, at.key, v, state.turn.as_ref());
        }
    }
}

fn file_history(
    out: &mut Emitter,
    state: &mut State,
    at: &At,
    v: &Map<String, Value>,
    resolve: &dyn Fn(&str) -> Option<Vec<u8>>,
) {
    let backups = v
        .get("snapshot")
        .and_then(|s| s.get("trackedFileBackups"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut made = 0;
    for (path, backup) in &backups {
        let Some(name) = str_at(backup, "/backupFileName") else {
            continue; // the file did not exist at that version: nothing to reference
        };
        if !state.artifacts.insert(name.to_string()) {
            continue;
        }
        made += 1;
        let content = resolve(name);
        let (exists, reference) = match content {
            Some(bytes) => {
                out.summary.artifact_refs_resolved += 1;
                (true, Some(out.blob(bytes)))
            }
            None => {
                out.summary.artifact_refs_dangling += 1;
                (false, None)
            }
        };
        let time = str_at(backup, "/backupTime")
            .unwrap_or(&at.timestamp)
            .to_string();
        let key = format!("artifact:{name}");
        if let Some(e) = at.event_at(out, "artifact.changed", &key, &time, None) {
            e.artifact_id = Some(name.to_string());
            e.payload = Some(json!({
                "change": "backed_up",
                "role": "file_history_backup",
                "path": path,
                "contentRef": reference,
                "exists": exists,
                "availability": if exists { "available" } else { "unavailable" },
                "version": backup.get("version"),
                "backupTime": str_at(backup, "/backupTime"),
                "messageId": str_of(v, "messageId"),
            }));
        }
    }
    if made == 0 {
        // A snapshot that adds no new reference is still a record: kept, never dropped.
        let key = format!("{}:{}", at.key, str_of(v, "messageId").unwrap_or(""));
        let _ = at.vendor(out, at.kind, &key, v, None);
    }
}
