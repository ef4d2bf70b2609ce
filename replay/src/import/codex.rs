//! Codex rollout files (FORMATS.md §2): JSON lines of `{timestamp, type, payload}`.
//!
//! - Model history (`response_item`) is canonical; UI events (`event_msg` user/agent messages
//!   and reasoning) repeat it and are kept as vendor events for their timing.
//! - Turns by `turn_id` (`task_started` / `task_complete` / `turn_aborted`); a model call per
//!   `turn_context` (Codex writes one per sampling request), completed by the next
//!   `token_count` that carries usage, which is also the call's cost.
//! - Tool calls pair with their output by `call_id`; `update_plan` is the checklist; MCP tools
//!   (`mcp__<server>__<tool>`) keep their server as the tool namespace.
//! - `compacted` is a compaction (its replacement history goes to a blob).
//! - Approvals are not in the format and are not invented: only the policies are recorded.

use std::collections::{HashMap, HashSet};

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
    };
    for record in &kept {
        let key = format!("line-{}", record.line);
        map_record(&mut out, &mut state, &key, &record.value);
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
}

fn map_record(out: &mut Emitter, state: &mut State, line_key: &str, v: &Map<String, Value>) {
    let kind = str_of(v, "type").unwrap_or("unknown");
    let ts = str_of(v, "timestamp").unwrap_or("").to_string();
    let p = v.get("payload").cloned().unwrap_or(Value::Null);
    let sub = str_at(&p, "/type").unwrap_or("");
    let native = if sub.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{sub}")
    };
    let session = state.session.clone();
    let turn = state.turn.clone();
    let mut emit = |out: &mut Emitter, t: &str, key: &str| -> Option<usize> {
        let e = out.emit(t, &session, key, &ts, &native)?;
        e.thread_id = Some(session.clone());
        e.turn_id.clone_from(&turn);
        Some(out.events.len() - 1)
    };
    macro_rules! set {
        ($idx:expr, |$e:ident| $body:block) => {
            if let Some(i) = $idx {
                if let Some($e) = out.events.get_mut(i) $body
            }
        };
    }
    match (kind, sub) {
        ("session_meta", _) => {
            let git = p.get("git").cloned();
            let i = emit(out, "session.created", &format!("{line_key}:session"));
            let payload = json!({
                "cwd": str_at(&p, "/cwd"),
                "originator": str_at(&p, "/originator"),
                "cliVersion": str_at(&p, "/cli_version"),
                "source": p.get("source"),
                "modelProvider": str_at(&p, "/model_provider"),
                "forkedFromId": str_at(&p, "/forked_from_id"),
                "git": git,
            });
            set!(i, |e| {
                e.payload = Some(payload);
            });
        }
        ("event_msg", "task_started") => {
            let id = str_at(&p, "/turn_id").map_or_else(|| line_key.to_string(), str::to_string);
            state.turn = Some(id.clone());
            state.model_calls_in_turn = 0;
            out.summary.turns += 1;
            let i = emit(out, "turn.started", &format!("{id}:started"));
            let window = p.get("model_context_window").cloned();
            set!(i, |e| {
                e.turn_id = Some(id.clone());
                e.payload = Some(json!({"modelContextWindow": window}));
            });
        }
        ("event_msg", "task_complete" | "turn_aborted") => {
            let id = str_at(&p, "/turn_id")
                .map(str::to_string)
                .or_else(|| state.turn.clone())
                .unwrap_or_else(|| line_key.to_string());
            let (t, word) = if sub == "task_complete" {
                ("turn.completed", "completed")
            } else {
                ("turn.failed", "aborted")
            };
            let last = str_at(&p, "/last_agent_message").map(|m| out.text(m).0);
            let i = emit(out, t, &format!("{id}:{word}"));
            let payload = json!({
                "reason": if word == "aborted" { p.get("reason").cloned().or(Some(json!("aborted"))) } else { None },
                "durationMs": p.get("duration_ms"),
                "timeToFirstTokenMs": p.get("time_to_first_token_ms"),
                "lastAgentMessage": last,
            });
            set!(i, |e| {
                e.turn_id = Some(id.clone());
                e.status_reason = (word == "aborted").then(|| "aborted".to_string());
                e.payload = Some(payload);
            });
            state.turn = None;
        }
        ("turn_context", _) => {
            let turn_id = str_at(&p, "/turn_id")
                .map(str::to_string)
                .or_else(|| state.turn.clone())
                .unwrap_or_else(|| line_key.to_string());
            let policy = (
                p.get("approval_policy").cloned().unwrap_or(Value::Null),
                p.get("sandbox_policy").cloned().unwrap_or(Value::Null),
            );
            if state.policy.as_ref() != Some(&policy) {
                let i = emit(out, "policy.changed", &format!("{line_key}:policy"));
                let profile = p.get("permission_profile").map(|v| out.value(v));
                set!(i, |e| {
                    e.payload = Some(json!({
                        "approvalPolicy": policy.0,
                        "sandboxPolicy": policy.1,
                        "permissionProfile": profile,
                    }));
                });
                state.policy = Some(policy);
            }
            state.model_calls_in_turn += 1;
            let call = format!("{turn_id}#{}", state.model_calls_in_turn);
            out.summary.model_calls += 1;
            state.model_call = Some(call.clone());
            let i = emit(out, "model.requested", &format!("{call}:requested"));
            let payload = json!({
                "model": str_at(&p, "/model"),
                "effort": p.get("effort"),
                "cwd": str_at(&p, "/cwd"),
                "collaborationMode": p.get("collaboration_mode"),
            });
            set!(i, |e| {
                e.model_request_id = Some(call.clone());
                e.payload = Some(payload);
            });
        }
        ("event_msg", "token_count") if p.get("info").is_some_and(|i| !i.is_null()) => {
            let last = p
                .pointer("/info/last_token_usage")
                .cloned()
                .unwrap_or(Value::Null);
            let total = p.pointer("/info/total_token_usage").cloned();
            let n = |k: &str| last.get(k).and_then(Value::as_u64);
            let call = state.model_call.take();
            if let Some(call) = &call {
                let i = emit(out, "model.completed", &format!("{call}:completed"));
                set!(i, |e| {
                    e.model_request_id = Some(call.clone());
                });
            }
            let i = emit(out, "cost.recorded", &format!("{line_key}:cost"));
            let rate_limits = p.get("rate_limits").cloned();
            set!(i, |e| {
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
            });
        }
        ("response_item", "message") => {
            let role = str_at(&p, "/role").unwrap_or("");
            let text = p.get("content").map(content_text).unwrap_or_default();
            let (text, text_ref) = out.text(&text);
            let (t, payload) = match role {
                "user" => (
                    "turn.submitted",
                    json!({"input": [{"type": "text", "text": text}], "inputRef": text_ref}),
                ),
                "assistant" => (
                    "model.delta",
                    json!({"output": text, "outputRef": text_ref, "phase": p.get("phase")}),
                ),
                _ => (
                    "context.resolved",
                    json!({"role": role, "text": text, "textRef": text_ref}),
                ),
            };
            let call = state.model_call.clone();
            let i = emit(out, t, &format!("{line_key}:message"));
            set!(i, |e| {
                if t == "model.delta" {
                    e.model_request_id = call;
                }
                e.payload = Some(payload);
            });
        }
        ("response_item", "reasoning") => {
            let summary = p.get("summary").map(content_text).unwrap_or_default();
            let (text, text_ref) = out.text(&summary);
            let encrypted =
                str_at(&p, "/encrypted_content").map(|c| out.blob(c.as_bytes().to_vec()));
            let call = state.model_call.clone();
            let i = emit(out, "reasoning.summary", &format!("{line_key}:reasoning"));
            set!(i, |e| {
                e.model_request_id = call;
                e.payload =
                    Some(json!({"text": text, "textRef": text_ref, "encryptedRef": encrypted}));
            });
        }
        (
            "response_item",
            "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call",
        ) => {
            let call = str_at(&p, "/call_id")
                .or_else(|| str_at(&p, "/id"))
                .map_or_else(|| line_key.to_string(), str::to_string);
            if !state.seen.insert(format!("call:{call}")) {
                out.summary.duplicate_records += 1;
                return;
            }
            let name = str_at(&p, "/name")
                .unwrap_or(if sub == "web_search_call" {
                    "web_search"
                } else {
                    "shell"
                })
                .to_string();
            // `arguments` is a JSON string; kept parsed when it parses, as given otherwise.
            let arguments = match p
                .get("arguments")
                .or_else(|| p.get("input"))
                .or_else(|| p.get("action"))
            {
                Some(Value::String(s)) => {
                    serde_json::from_str::<Value>(s).unwrap_or(Value::String(s.clone()))
                }
                Some(other) => other.clone(),
                None => Value::Null,
            };
            let namespace = name
                .strip_prefix("mcp__")
                .and_then(|rest| rest.split_once("__"))
                .map(|(server, _)| server.to_string());
            out.summary.tool_calls += 1;
            let args = out.value(&arguments);
            let i = emit(out, "tool.started", &format!("{call}:started"));
            set!(i, |e| {
                e.tool_call_id = Some(call.clone());
                e.payload = Some(
                    json!({"toolName": name, "toolNamespace": namespace, "arguments": args, "status": p.get("status")}),
                );
            });
            if name == "update_plan" {
                checklist(out, &mut emit, &call, &arguments);
            }
            if sub == "web_search_call" {
                // A web search records its own outcome; it has no separate output record.
                out.summary.tool_results += 1;
                let failed = str_at(&p, "/status").is_some_and(|s| s != "completed");
                let i = emit(
                    out,
                    if failed { "tool.failed" } else { "tool.result" },
                    &format!("{call}:result"),
                );
                set!(i, |e| {
                    e.tool_call_id = Some(call.clone());
                    e.payload = Some(
                        json!({"toolName": name, "status": if failed { "failure" } else { "success" }}),
                    );
                });
            } else {
                state.open_calls.insert(call, name);
            }
        }
        (
            "response_item",
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output",
        ) => {
            let call = str_at(&p, "/call_id").map_or_else(|| line_key.to_string(), str::to_string);
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
            let i = emit(
                out,
                if failed { "tool.failed" } else { "tool.result" },
                &format!("{call}:result"),
            );
            set!(i, |e| {
                e.tool_call_id = Some(call.clone());
                e.output_ref = output_ref;
                e.payload = Some(
                    json!({"toolName": name, "status": if failed { "failure" } else { "success" }, "output": output}),
                );
            });
        }
        ("compacted", _) => {
            out.summary.compactions += 1;
            let message = str_at(&p, "/message").unwrap_or("").to_string();
            let (summary, summary_ref) = out.text(&message);
            let history = p
                .get("replacement_history")
                .map(|h| out.blob(serde_json::to_vec(h).unwrap_or_default()));
            let i = emit(
                out,
                "context.compaction.completed",
                &format!("{line_key}:compacted"),
            );
            set!(i, |e| {
                e.payload = Some(
                    json!({"summary": summary, "summaryRef": summary_ref, "replacementHistoryRef": history}),
                );
            });
        }
        _ => {
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
            if !KNOWN.contains(&sub) {
                *out.summary.unknown_kinds.entry(native.clone()).or_default() += 1;
            }
            if let Some(e) = out.vendor(&native, &session, &format!("{line_key}:{native}"), &ts, v)
            {
                e.thread_id = Some(session.clone());
                e.turn_id.clone_from(&turn);
            }
        }
    }
}

/// `update_plan`'s `plan: [{step, status}]` as the checklist.
fn checklist(
    out: &mut Emitter,
    emit: &mut dyn FnMut(&mut Emitter, &str, &str) -> Option<usize>,
    call: &str,
    arguments: &Value,
) {
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
    if let Some(i) = emit(out, "checklist.updated", &format!("{call}:checklist")) {
        if let Some(e) = out.events.get_mut(i) {
            e.tool_call_id = Some(call.to_string());
            e.payload = Some(json!({"items": items}));
        }
    }
}
