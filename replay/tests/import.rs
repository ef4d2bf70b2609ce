//! Import of the real agent sessions in `testdata/agent-logs/`: each summary's counts
//! against counts taken from the file here, independently of the importer; re-import adds
//! nothing; replay agrees with the summary; damaged copies are refused with their line.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use journal_engine::{Journal, Options as JournalOptions};
use journal_replay::import::{self, ImportError, Options, Parsed, Source, Summary};
use journal_replay::Scope;
use serde_json::Value;

fn agent_logs() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs");
    assert!(
        dir.is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

fn claude_file() -> PathBuf {
    agent_logs().join("claude-code/cctrace_phase0-investigation_main.jsonl")
}

fn claude_history() -> PathBuf {
    agent_logs().join("claude-code/cctrace_file-history")
}

fn codex_file() -> PathBuf {
    agent_logs().join("codex/agent-history_real_sessions_codex_session-01.jsonl")
}

fn openhands_files() -> Vec<PathBuf> {
    [
        "trajs_basic_gui_mode.json",
        "trajs_wrong_initial_state.json",
    ]
    .iter()
    .map(|f| agent_logs().join("openhands").join(f))
    .collect()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The counts a summary must show, taken from the source file by this test.
#[derive(Debug, Default, PartialEq, Eq)]
struct Expected {
    records: u64,
    turns: u64,
    model_calls: u64,
    tool_calls: u64,
    tool_results: u64,
    open_calls: u64,
    subagents: u64,
    compactions: u64,
    resolved: u64,
    dangling: u64,
    requests: u64,
    context: u64,
}

fn counts(s: &Summary) -> Expected {
    Expected {
        records: s.records,
        turns: s.turns,
        model_calls: s.model_calls,
        tool_calls: s.tool_calls,
        tool_results: s.tool_results,
        open_calls: s.open_calls,
        subagents: s.subagents,
        compactions: s.compactions,
        resolved: s.artifact_refs_resolved,
        dangling: s.artifact_refs_dangling,
        requests: s.requests,
        context: s.context_messages,
    }
}

fn claude_expected() -> Expected {
    let records = lines(&claude_file());
    let mut e = Expected {
        records: records.len() as u64,
        ..Expected::default()
    };
    let mut messages = HashSet::new();
    let mut calls = HashSet::new();
    let mut results = HashSet::new();
    let mut backups = HashSet::new();
    for r in &records {
        let blocks = r
            .pointer("/message/content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match r["type"].as_str().unwrap() {
            "assistant" => {
                messages.insert(r["message"]["id"].as_str().unwrap().to_string());
                for b in blocks.iter().filter(|b| b["type"] == "tool_use") {
                    calls.insert(b["id"].as_str().unwrap().to_string());
                    if matches!(b["name"].as_str(), Some("Task" | "Agent")) {
                        e.subagents += 1;
                    }
                }
            }
            "user" => {
                let tool_results: Vec<_> = blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .collect();
                for b in &tool_results {
                    results.insert(b["tool_use_id"].as_str().unwrap().to_string());
                }
                let meta = r.get("isMeta") == Some(&Value::Bool(true))
                    || r.get("isCompactSummary") == Some(&Value::Bool(true));
                // Claude Code's own text: a command's output, an interruption's marker.
                let text = match &r["message"]["content"] {
                    Value::String(s) => s.clone(),
                    _ => blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                };
                let text = text.trim_start();
                let injected = text.starts_with("[Request interrupted by user")
                    || ["<local-command-std", "<bash-std"]
                        .iter()
                        .any(|tag| text.starts_with(tag));
                if tool_results.is_empty() && (meta || injected) {
                    e.context += 1;
                } else if tool_results.is_empty() {
                    e.turns += 1;
                    e.requests += 1;
                }
            }
            "system" if r["subtype"] == "compact_boundary" => e.compactions += 1,
            "file-history-snapshot" => {
                for b in r["snapshot"]["trackedFileBackups"]
                    .as_object()
                    .unwrap()
                    .values()
                {
                    if let Some(name) = b["backupFileName"].as_str() {
                        backups.insert(name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    e.model_calls = messages.len() as u64;
    e.tool_calls = calls.len() as u64;
    e.tool_results = results.len() as u64;
    e.open_calls = calls.difference(&results).count() as u64;
    for b in &backups {
        if claude_history().join(b).is_file() {
            e.resolved += 1;
        } else {
            e.dangling += 1;
        }
    }
    e
}

fn codex_expected() -> Expected {
    let records = lines(&codex_file());
    let mut e = Expected {
        records: records.len() as u64,
        ..Expected::default()
    };
    let mut calls = HashSet::new();
    let mut outputs = HashSet::new();
    for (i, r) in records.iter().enumerate() {
        let sub = r.pointer("/payload/type").and_then(Value::as_str);
        // What the person typed is the `user_message` after its model-history message; a
        // user-role message without one is context Codex injected, as a developer message is.
        let typed = records
            .get(i + 1)
            .is_some_and(|next| next["payload"]["type"] == "user_message");
        match (r["type"].as_str().unwrap(), sub) {
            ("response_item", Some("message")) => match r["payload"]["role"].as_str() {
                Some("assistant") => {}
                Some("user") if typed => e.requests += 1,
                _ => e.context += 1,
            },
            ("event_msg", Some("task_started")) => e.turns += 1,
            ("turn_context", _) => e.model_calls += 1,
            ("compacted", _) => e.compactions += 1,
            ("response_item", Some("function_call" | "custom_tool_call" | "local_shell_call")) => {
                calls.insert(r["payload"]["call_id"].as_str().unwrap().to_string());
            }
            ("response_item", Some(s)) if s.ends_with("_call_output") => {
                outputs.insert(r["payload"]["call_id"].as_str().unwrap().to_string());
            }
            _ => {}
        }
    }
    e.tool_calls = calls.len() as u64;
    e.tool_results = outputs.len() as u64;
    e.open_calls = calls.difference(&outputs).count() as u64;
    e
}

fn openhands_expected(path: &Path) -> (Expected, u64) {
    let events: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut e = Expected {
        records: events.len() as u64,
        ..Expected::default()
    };
    let mut responses = HashSet::new();
    let mut tool_actions = HashSet::new();
    let mut answered = HashSet::new();
    let mut no_zone = 0;
    for ev in &events {
        let ts = ev["timestamp"].as_str().unwrap();
        if !ts.ends_with('Z') && !ts.contains('+') {
            no_zone += 1;
        }
        if let Some(id) = ev.pointer("/tool_call_metadata/model_response/id") {
            responses.insert(id.as_str().unwrap().to_string());
        }
        match (ev["action"].as_str(), ev["source"].as_str()) {
            (Some("message"), Some("user")) => {
                e.turns += 1;
                e.requests += 1;
            }
            (Some("system"), _) | (Some("message"), Some("environment")) => e.context += 1,
            (Some("message" | "finish" | "change_agent_state"), _) => {}
            (Some(_), _) => {
                tool_actions.insert(ev["id"].as_u64().unwrap());
            }
            (None, _) => {
                if let Some(cause) = ev["cause"].as_u64() {
                    answered.insert(cause);
                }
            }
        }
    }
    e.model_calls = responses.len() as u64;
    e.tool_calls = tool_actions.len() as u64;
    e.tool_results = tool_actions.intersection(&answered).count() as u64;
    e.open_calls = e.tool_calls - e.tool_results;
    (e, no_zone)
}

fn parse(source: Source, path: &Path) -> Parsed {
    let options = Options {
        blobs_dir: Some(claude_history()),
        ..Options::default()
    };
    import::parse_file(source, path, &options).unwrap_or_else(|e| panic!("{e}"))
}

/// Imports `parsed` twice: the second adds nothing. Then every session's narrative agrees with
/// the summary.
fn import_twice_and_replay(parsed: &Parsed) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    let first = import::write(&journal, parsed, &mut |_| {}).unwrap();
    assert_eq!(first.events_written, parsed.events.len() as u64);
    let head = journal.head();
    let second = import::write(&journal, parsed, &mut |_| {}).unwrap();
    assert_eq!(second.events_written, 0, "re-import adds nothing");
    assert_eq!(second.already_present, parsed.events.len() as u64);
    assert_eq!(journal.head(), head, "the log did not grow");
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );

    let s = &parsed.summary;
    let mut replayed = Expected::default();
    for session in &s.sessions {
        let n = journal_replay::load(&journal, &Scope::Session(session.clone()), None).unwrap();
        replayed.model_calls += n.counts.model_calls;
        replayed.tool_calls += n.counts.tool_calls;
        replayed.tool_results += n.counts.tool_results;
        replayed.open_calls += n.counts.open_calls;
        replayed.subagents += n.counts.subagents;
        replayed.compactions += n.counts.compactions;
        let turns = n.steps.iter().filter(|s| s.title == "turn started").count();
        replayed.turns += turns as u64;
        let requests = n
            .steps
            .iter()
            .filter(|s| s.kind == "request" && s.title.starts_with("turn submitted"))
            .count();
        replayed.requests += requests as u64;
        replayed.context += n.counts.context;
        assert_eq!(
            n.requested.len(),
            n.steps.iter().filter(|s| s.kind == "request").count(),
            "what was requested is the request steps, never context"
        );
    }
    let mut from_summary = counts(s);
    from_summary.records = 0;
    from_summary.resolved = 0;
    from_summary.dangling = 0;
    assert_eq!(
        replayed, from_summary,
        "replay agrees with the import summary"
    );
}

#[test]
fn claude_code_session_imports_with_counts_taken_from_the_file() {
    let parsed = parse(Source::ClaudeCode, &claude_file());
    assert_eq!(counts(&parsed.summary), claude_expected());
    // FORMATS.md's own figures for this file.
    assert_eq!(parsed.summary.model_calls, 100);
    assert_eq!(
        (
            parsed.summary.artifact_refs_resolved,
            parsed.summary.artifact_refs_dangling
        ),
        (10, 3)
    );
    assert!(parsed.summary.unknown_kinds.is_empty());
    // The export's own command is the call left open.
    let open = "toolu_01LYedDqGBy8HJv92hmfSZz1";
    let of_call: Vec<&str> = parsed
        .events
        .iter()
        .filter(|e| e.tool_call_id.as_deref() == Some(open))
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(of_call, ["tool.started"]);
    // Usage is the last record's of each message, never a sum: check every message.
    let mut last_output = HashMap::new();
    for r in lines(&claude_file()) {
        if r["type"] == "assistant" {
            last_output.insert(
                r["message"]["id"].as_str().unwrap().to_string(),
                r["message"]["usage"]["output_tokens"].as_u64(),
            );
        }
    }
    for e in parsed
        .events
        .iter()
        .filter(|e| e.event_type == "cost.recorded")
    {
        let id = e.model_request_id.as_deref().unwrap();
        let got = e.payload.as_ref().unwrap()["outputTokens"].as_u64();
        assert_eq!(got, last_output[id], "usage of {id}");
    }
    // Every event says where it came from.
    for e in &parsed.events {
        assert_eq!(e.native_ns.as_deref(), Some("claude_code"));
        assert!(e.native_type.is_some() && e.provenance.is_some());
        assert!(
            e.event_id.starts_with("claude-code:132b2f66-"),
            "{}",
            e.event_id
        );
    }
    // Dangling backups are unavailable, resolved ones reference stored content.
    let artifacts: Vec<&Value> = parsed
        .events
        .iter()
        .filter(|e| e.event_type == "artifact.changed")
        .map(|e| e.payload.as_ref().unwrap())
        .collect();
    assert_eq!(artifacts.len(), 13);
    assert_eq!(
        artifacts
            .iter()
            .filter(|a| a["availability"] == "unavailable")
            .count(),
        3
    );
    for a in artifacts.iter().filter(|a| a["exists"] == true) {
        let reference = a["contentRef"].as_str().unwrap();
        assert!(parsed.blobs.iter().any(|b| b.reference == reference));
    }
    import_twice_and_replay(&parsed);
}

#[test]
fn codex_rollout_imports_with_counts_taken_from_the_file() {
    let parsed = parse(Source::Codex, &codex_file());
    assert_eq!(counts(&parsed.summary), codex_expected());
    assert_eq!(
        parsed.summary.sessions,
        ["019e9625-802f-7e91-840a-cfe88d14117a"]
    );
    // Approvals are not in the format: none invented.
    assert!(!parsed
        .events
        .iter()
        .any(|e| e.event_type.starts_with("action.") || e.event_type.starts_with("permission.")));
    // Redacted text is carried as is.
    assert!(parsed.events.iter().any(|e| e
        .payload
        .as_ref()
        .is_some_and(|p| p.to_string().contains("[REDACTED_PROMPT]"))));
    import_twice_and_replay(&parsed);
}

#[test]
fn openhands_trajectories_import_with_counts_taken_from_the_file() {
    for path in openhands_files() {
        let parsed = parse(Source::OpenHands, &path);
        let (expected, no_zone) = openhands_expected(&path);
        assert_eq!(counts(&parsed.summary), expected, "{}", path.display());
        assert_eq!(parsed.summary.timestamps_assumed_utc, no_zone);
        let flagged = parsed
            .events
            .iter()
            .filter(|e| e.extra.get("timestampAssumedUtc") == Some(&Value::Bool(true)))
            .count();
        assert_eq!(
            flagged,
            parsed.events.len(),
            "every event of a zoneless file is flagged"
        );
        import_twice_and_replay(&parsed);
    }
}

#[test]
fn openhands_confirmation_states_are_permission_facts() {
    let parsed = parse(Source::OpenHands, &openhands_files()[0]);
    let requested = parsed
        .events
        .iter()
        .filter(|e| e.event_type == "permission.requested")
        .count();
    let resolved = parsed
        .events
        .iter()
        .filter(|e| e.event_type == "permission.resolved")
        .count();
    let in_file = std::fs::read_to_string(&openhands_files()[0])
        .unwrap()
        .matches("\"confirmation_state\"")
        .count();
    assert_eq!(requested, in_file);
    assert!(resolved <= requested);
}

/// A copy of `path` with line `line` (1-based) replaced by `with`.
fn damaged_copy(dir: &Path, path: &Path, line: usize, with: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(path).unwrap();
    let out: Vec<String> = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| {
            if i + 1 == line {
                with(l)
            } else {
                l.to_string()
            }
        })
        .collect();
    let copy = dir.join(path.file_name().unwrap());
    std::fs::write(&copy, out.join("\n")).unwrap();
    copy
}

fn refused_line(source: Source, path: &Path) -> u64 {
    match import::parse_file(source, path, &Options::default()) {
        Err(ImportError::Damaged { line, file, .. }) => {
            assert_eq!(file, path.display().to_string(), "the error names the file");
            line
        }
        other => panic!("expected a damaged-record error, got {other:?}"),
    }
}

#[test]
fn damaged_copies_are_refused_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let truncate = |l: &str| l.get(..l.len() / 2).unwrap_or("").to_string();

    let claude = damaged_copy(dir.path(), &claude_file(), 200, truncate);
    assert_eq!(refused_line(Source::ClaudeCode, &claude), 200);
    let claude = damaged_copy(dir.path(), &claude_file(), 300, |l| {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(l).unwrap();
        v.remove("uuid");
        Value::Object(v).to_string()
    });
    assert_eq!(refused_line(Source::ClaudeCode, &claude), 300);

    let codex = damaged_copy(dir.path(), &codex_file(), 5, truncate);
    assert_eq!(refused_line(Source::Codex, &codex), 5);
    let codex = damaged_copy(dir.path(), &codex_file(), 7, |_| "not json at all".into());
    assert_eq!(refused_line(Source::Codex, &codex), 7);

    let source = &openhands_files()[0];
    let text = std::fs::read_to_string(source).unwrap();
    let line = 1 + text
        .lines()
        .position(|l| l.contains("\"id\": 9,"))
        .expect("the trajectory has an event 9");
    let openhands = damaged_copy(dir.path(), source, line, |l| {
        l.replace("\"id\": 9,", "\"id\": 9,,")
    });
    assert_eq!(refused_line(Source::OpenHands, &openhands), line as u64);
}

#[test]
fn skip_bad_imports_the_rest_and_reports_what_it_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = damaged_copy(dir.path(), &codex_file(), 9, |_| "{\"timestamp\": ".into());
    let options = Options {
        skip_bad: true,
        ..Options::default()
    };
    let parsed = import::parse_file(Source::Codex, &damaged, &options).unwrap();
    assert_eq!(parsed.summary.skipped.len(), 1);
    assert_eq!(parsed.summary.skipped[0].line, 9);
    assert_eq!(parsed.summary.records, 11, "the skipped record was read");
    let whole = parse(Source::Codex, &codex_file());
    assert!(parsed.events.len() < whole.events.len());
    // What was imported is a subset of the whole file's events, with the same ids.
    let ids: HashSet<&str> = whole.events.iter().map(|e| e.event_id.as_str()).collect();
    assert!(parsed
        .events
        .iter()
        .all(|e| ids.contains(e.event_id.as_str())));
}

fn parse_bytes(source: Source, text: &str) -> Parsed {
    import::parse(
        source,
        "synthetic",
        "synthetic",
        text.as_bytes(),
        &Options::default(),
        &|_| None,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn threads_of(parsed: &Parsed) -> HashMap<String, String> {
    parsed
        .events
        .iter()
        .filter(|e| e.event_type == "turn.started" || e.event_type == "model.requested")
        .map(|e| {
            let key = e
                .turn_id
                .clone()
                .filter(|_| e.event_type == "turn.started")
                .or_else(|| e.model_request_id.clone())
                .unwrap();
            (key, e.thread_id.clone().unwrap())
        })
        .collect()
}

#[test]
fn claude_code_branches_sidechains_compaction_duplicates_and_unknown_kinds() {
    let r = |json: &str| -> String {
        let mut v: serde_json::Map<String, Value> = serde_json::from_str(json).unwrap();
        v.insert("sessionId".into(), "s1".into());
        v.entry("timestamp")
            .or_insert("2026-01-06T09:00:00.000Z".into());
        Value::Object(v).to_string()
    };
    let prompt = |uuid: &str, parent: &str| {
        r(&format!(
            r#"{{"type":"user","uuid":"{uuid}","parentUuid":{parent},"message":{{"role":"user","content":"prompt {uuid}"}}}}"#
        ))
    };
    let answer = |uuid: &str, parent: &str, msg: &str, extra: &str| {
        r(&format!(
            r#"{{"type":"assistant","uuid":"{uuid}","parentUuid":{parent},{extra}"message":{{"id":"{msg}","model":"m","role":"assistant","content":[{{"type":"text","text":"ok"}}],"stop_reason":"end_turn","usage":{{"input_tokens":1,"output_tokens":2}}}}}}"#
        ))
    };
    let lines = [
        prompt("u1", "null"),
        answer("a1", "\"u1\"", "m1", ""),
        prompt("u2", "\"a1\""), // a rewind left this branch
        answer("a2", "\"u2\"", "m2", ""),
        prompt("u3", "\"a1\""),
        r(
            r#"{"type":"system","subtype":"compact_boundary","uuid":"c1","parentUuid":null,"logicalParentUuid":"u3","compactMetadata":{"trigger":"auto","preTokens":12345}}"#,
        ),
        r(
            r#"{"type":"user","uuid":"u4","parentUuid":"c1","isCompactSummary":true,"message":{"role":"user","content":"summary"}}"#,
        ),
        prompt("u5", "\"u4\""),
        answer("s1", "null", "m3", r#""isSidechain":true,"agentId":"abc","#),
        r(r#"{"type":"mystery-kind","uuid":"x1","parentUuid":null}"#),
        prompt("u5", "\"u4\""), // the same record again
        r#"{"type":"last-prompt","leafUuid":"u5","sessionId":"s1"}"#.to_string(),
    ];
    let parsed = parse_bytes(Source::ClaudeCode, &lines.join("\n"));
    let s = &parsed.summary;
    assert_eq!((s.records, s.turns, s.model_calls), (12, 4, 3));
    assert_eq!(s.duplicate_records, 1);
    assert_eq!(s.compactions, 1);
    assert_eq!(s.unknown_kinds.get("mystery-kind"), Some(&1));
    assert_eq!(
        s.events_by_type.get("vendor.claude_code.mystery_kind"),
        Some(&1)
    );

    let threads = threads_of(&parsed);
    assert_eq!(
        threads["u1"], "s1",
        "the path to the named leaf is the main thread"
    );
    assert_eq!(threads["u3"], "s1");
    assert_eq!(
        threads["u5"], "s1",
        "the walk crosses the compaction to its logical parent"
    );
    assert_eq!(
        threads["u2"], "branch-u2",
        "an abandoned branch is its own thread"
    );
    assert_eq!(threads["m2"], "branch-u2");
    assert_eq!(
        threads["m3"], "agent-abc",
        "a sidechain is its agent's thread"
    );

    let compaction = parsed
        .events
        .iter()
        .find(|e| e.event_type == "context.compaction.completed")
        .unwrap();
    let payload = compaction.payload.as_ref().unwrap();
    assert_eq!(payload["trigger"], "auto");
    assert_eq!(payload["tokensBefore"], 12345);
}

#[test]
fn openhands_evaluation_output_runs_are_attempts() {
    let history: Value =
        serde_json::from_slice(&std::fs::read(&openhands_files()[1]).unwrap()).unwrap();
    let run = |error: Option<&str>| {
        serde_json::json!({
            "instance_id": "inst-1",
            "instruction": "Please rename game_2048.py to 2048.py",
            "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "m"}, "start_time": "2025-01-27 23:16:50"},
            "history": history,
            "error": error,
        })
        .to_string()
    };
    let text = [run(None), run(Some("Agent reached maximum iteration"))].join("\n");
    let parsed = parse_bytes(Source::OpenHands, &text);
    let of = |t: &str| parsed.summary.events_by_type.get(t).copied().unwrap_or(0);
    assert_eq!(of("task.attempt.started"), 2);
    assert_eq!(of("task.attempt.completed"), 1);
    assert_eq!(of("task.attempt.failed"), 1);
    assert_eq!(parsed.summary.sessions, ["inst-1"]);
    let (one, _) = openhands_expected(&openhands_files()[1]);
    assert_eq!(
        parsed.summary.tool_calls,
        2 * one.tool_calls,
        "each run's calls are its own"
    );
    assert!(parsed
        .events
        .iter()
        .all(|e| e.task_id.as_deref() == Some("inst-1") && e.attempt_id.is_some()));
    import_twice_and_replay(&parsed);
}

/// What a reader compares between two imports of the same content: each step without the
/// journal's own ids, positions and times.
fn steps_as_read(journal: &Journal, session: &str) -> Vec<Value> {
    let n = journal_replay::load(journal, &Scope::Session(session.into()), None).unwrap();
    let mut read: Vec<Value> = n
        .steps
        .iter()
        .map(|s| {
            serde_json::json!({"kind": s.kind, "title": s.title, "timestamp": s.timestamp,
                "ids": s.ids, "details": s.details, "complete": s.complete})
        })
        .collect();
    read.extend(
        n.gaps
            .iter()
            .map(|g| serde_json::json!({"gap": g.kind, "detail": g.detail})),
    );
    read.push(serde_json::json!({"counts": n.counts, "finalState": n.final_state.status}));
    read
}

/// The read models of `journal`, caught up: the session's activity (its model calls and their
/// cost) and its snapshot's cost totals.
fn activity_and_cost(journal: &Journal, session: &str) -> (Value, Value) {
    let models = journal_projections::ReadModels::open(journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let activity = models.view("activity", session).unwrap().model.unwrap();
    let snapshot = models.view("session", session).unwrap().model.unwrap();
    (activity, snapshot["cost"].clone())
}

/// Claude Code rewrites an assistant message as it streams: a transcript imported while it was
/// written holds the message's first records only. Imported again once grown, what changed is
/// recorded as new facts that supersede the stale ones (nothing is rewritten), and the read
/// models and the replay show the final values, as a fresh import of the whole file does; a
/// third import adds nothing.
#[test]
fn a_grown_transcript_imported_again_reads_as_a_fresh_import_of_the_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(claude_file()).unwrap();
    let prefix: String = text.lines().take(268).map(|l| format!("{l}\n")).collect();
    // The message being streamed when the prefix was cut: its last record in the prefix.
    let streamed = prefix
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .rfind(|r| r["type"] == "assistant")
        .unwrap()["message"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let prefix_file = tmp.path().join("cctrace_phase0-investigation_main.jsonl");
    std::fs::write(&prefix_file, &prefix).unwrap();

    let grown = Journal::open(tmp.path().join("grown"), JournalOptions::default()).unwrap();
    let first = import::write(
        &grown,
        &parse(Source::ClaudeCode, &prefix_file),
        &mut |_| {},
    );
    assert_eq!(first.unwrap().revised, 0);
    let second = import::write(
        &grown,
        &parse(Source::ClaudeCode, &claude_file()),
        &mut |_| {},
    )
    .expect("a grown file imports again");
    assert_eq!(
        second.revised, 2,
        "the message's completion and its cost changed: {second:?}"
    );
    let head = grown.head();
    let third = import::write(
        &grown,
        &parse(Source::ClaudeCode, &claude_file()),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((third.events_written, third.revised), (0, 0), "{third:?}");
    assert_eq!(grown.head(), head, "the third import adds nothing");

    // Nothing is rewritten: the earlier state stays, and a revision supersedes it.
    let session = "132b2f66-ee5f-46f6-8904-32d9dc4d36c3";
    let cost_id = format!("claude-code:{session}:{streamed}:cost");
    let output_tokens = |id: &str| {
        let stored = grown.get(id).unwrap().unwrap().envelope;
        let tokens = stored.payload.as_ref().unwrap()["outputTokens"].clone();
        (tokens, stored.supersedes().map(str::to_string))
    };
    assert_eq!(output_tokens(&cost_id), (serde_json::json!(2), None));
    assert_eq!(
        output_tokens(&format!("{cost_id}~rev1")),
        (serde_json::json!(628), Some(cost_id.clone()))
    );

    let fresh = Journal::open(tmp.path().join("fresh"), JournalOptions::default()).unwrap();
    import::write(
        &fresh,
        &parse(Source::ClaudeCode, &claude_file()),
        &mut |_| {},
    )
    .unwrap();

    let (activity, cost) = activity_and_cost(&grown, session);
    let (fresh_activity, fresh_cost) = activity_and_cost(&fresh, session);
    let call = |a: &Value| {
        (
            a["cost"]["byCall"][&streamed].clone(),
            a["modelCalls"][&streamed]["endedTimestamp"].clone(),
        )
    };
    assert_eq!(
        fresh_activity["cost"]["byCall"][&streamed]["outputTokens"], 628,
        "the whole message's usage"
    );
    assert_eq!(
        call(&activity),
        call(&fresh_activity),
        "the model call {streamed}"
    );
    assert_eq!(cost, fresh_cost, "the session's cost totals");
    let (steps, fresh_steps) = (
        steps_as_read(&grown, session),
        steps_as_read(&fresh, session),
    );
    for (i, (step, fresh_step)) in steps.iter().zip(&fresh_steps).enumerate() {
        assert_eq!(step, fresh_step, "the replay's step {i}");
    }
    assert_eq!(steps.len(), fresh_steps.len(), "the replay's steps");
}

/// The events a prefix of `text` (the first `k` JSON lines, or elements of a JSON array) makes
/// that the whole of it makes otherwise (same id, another body), for every prefix.
fn changed_by_growth(source: Source, text: &str) -> Vec<String> {
    let whole = parse_bytes(source, text);
    let by_id: HashMap<&str, &journal_format::Envelope> = whole
        .events
        .iter()
        .map(|e| (e.event_id.as_str(), e))
        .collect();
    let prefixes: Vec<String> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => (1..items.len())
            .map(|k| serde_json::to_string(&items[..k]).unwrap())
            .collect(),
        _ => {
            let lines: Vec<&str> = text.lines().collect();
            (1..lines.len()).map(|k| lines[..k].join("\n")).collect()
        }
    };
    let mut changed = Vec::new();
    let mut compared = 0u64;
    for prefix in prefixes {
        let options = Options::default();
        let parsed = import::parse(
            source,
            "synthetic",
            "synthetic",
            prefix.as_bytes(),
            &options,
            &|_| None,
        );
        // A prefix without what the format needs first (the session's record) makes nothing.
        let Ok(part) = parsed else { continue };
        for e in &part.events {
            match by_id.get(e.event_id.as_str()) {
                Some(w) if *w == e => compared += 1,
                _ => changed.push(e.event_id.clone()),
            }
        }
    }
    assert!(compared > 0, "the prefixes made events to compare");
    changed
}

/// Codex and OpenHands make each event from its own record and the records before it, so a
/// file that grows never changes an event an earlier import made: checked at every prefix of
/// the rollout and of both trajectories. The one exception is a Codex user-role message that
/// ends the file: whether it is a request or injected context is told by the record after it,
/// so it is context until the file grows (and a later import records the request as a
/// revision). (Claude Code does change events as a file grows: the test above.)
#[test]
fn codex_and_openhands_events_never_change_as_their_file_grows() {
    let text = std::fs::read_to_string(codex_file()).unwrap();
    let prompt_line = 1 + lines(&codex_file())
        .iter()
        .position(|r| r["payload"]["role"] == "user" && r.to_string().contains("REDACTED_PROMPT"))
        .unwrap();
    assert_eq!(
        changed_by_growth(Source::Codex, &text),
        [format!(
            "codex:019e9625-802f-7e91-840a-cfe88d14117a:line-{prompt_line}:message"
        )],
        "only the prompt read before its user_message changes"
    );
    for file in openhands_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            changed_by_growth(Source::OpenHands, &text),
            Vec::<String>::new(),
            "{}",
            file.display()
        );
    }
}

/// The events of `parsed` of type `t`, with their payloads.
fn payloads_of<'p>(parsed: &'p Parsed, t: &str) -> Vec<&'p Value> {
    parsed
        .events
        .iter()
        .filter(|e| e.event_type == t)
        .map(|e| e.payload.as_ref().unwrap())
        .collect()
}

/// Codex writes what the person typed as an `event_msg` `user_message` after the user-role
/// message of the model history; the environment and instructions it injects as user-role or
/// developer messages have none, and are context.
#[test]
fn codex_requests_are_what_the_person_typed_and_injected_messages_are_context() {
    let parsed = parse(Source::Codex, &codex_file());
    let requests = payloads_of(&parsed, "turn.submitted");
    let typed: Vec<Value> = lines(&codex_file())
        .into_iter()
        .filter(|r| r["payload"]["type"] == "user_message")
        .map(|r| r["payload"]["message"].clone())
        .collect();
    assert_eq!(
        requests
            .iter()
            .map(|p| p["input"][0]["text"].clone())
            .collect::<Vec<_>>(),
        typed
    );
    let context = payloads_of(&parsed, "context.resolved");
    let kinds: Vec<(&str, &str)> = context
        .iter()
        .map(|p| (p["kind"].as_str().unwrap(), p["role"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("instructions", "developer"), ("injected", "user")]);
    assert!(context[1]["text"]
        .as_str()
        .unwrap()
        .starts_with("<environment_context>"));

    // A session of many prompts: each prompt is one request, each injected message context.
    let rollout = codex_session_of_prompts(&["first\n  indented", "second"]);
    let parsed = parse_bytes(Source::Codex, &rollout);
    assert_eq!(
        (parsed.summary.requests, parsed.summary.context_messages),
        (2, 2)
    );
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), JournalOptions::default()).unwrap();
    import::write(&journal, &parsed, &mut |_| {}).unwrap();
    let n = journal_replay::load(&journal, &Scope::Session("s1".into()), None).unwrap();
    assert_eq!(n.requested, ["first\n  indented", "second"]);
    assert_eq!(n.counts.context, 2);
    let text = journal_replay::text::render(&n, journal_replay::text::Colour::Plain);
    assert!(
        text.contains("  requested: first\n               indented\n"),
        "a continuation line keeps its indentation, under the first line: {text}"
    );
    assert_eq!(
        text.matches("  context     injected: <environment_context>")
            .count(),
        2,
        "{text}"
    );
}

/// A Codex rollout of session `s1` in which Codex injects an environment message before each
/// of `prompts`.
fn codex_session_of_prompts(prompts: &[&str]) -> String {
    let mut lines = vec![
        serde_json::json!({"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s1"}}),
    ];
    for (i, prompt) in prompts.iter().enumerate() {
        let ts = format!("2026-01-01T00:00:{:02}Z", i + 1);
        let user = |text: &str| serde_json::json!({"timestamp": ts, "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}});
        lines.push(user(
            "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>",
        ));
        lines.push(user(prompt));
        lines.push(serde_json::json!({"timestamp": ts, "type": "event_msg", "payload": {"type": "user_message", "message": prompt}}));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Claude Code writes meta messages, a local command's output and the marker of an
/// interruption as user messages: context, not prompts, and no new turn.
#[test]
fn claude_code_meta_command_output_and_interruptions_are_context() {
    let record = |uuid: &str, parent: &str, content: &str, extra: &str| {
        format!(
            r#"{{"type":"user","uuid":"{uuid}","parentUuid":{parent},"sessionId":"s1","timestamp":"2026-01-06T09:00:00.000Z",{extra}"message":{{"role":"user","content":{content}}}}}"#
        )
    };
    let lines = [
        record("u1", "null", r#""fix the\n  parser""#, ""),
        record(
            "u2",
            "\"u1\"",
            r#""Caveat: the messages below were generated by the user""#,
            r#""isMeta":true,"#,
        ),
        record(
            "u3",
            "\"u2\"",
            r#""<command-name>/model</command-name>""#,
            "",
        ),
        record(
            "u4",
            "\"u3\"",
            r#""<local-command-stdout>Set model to opus</local-command-stdout>""#,
            "",
        ),
        record(
            "u5",
            "\"u4\"",
            r#"[{"type":"text","text":"[Request interrupted by user]"}]"#,
            "",
        ),
        record(
            "u6",
            "\"u5\"",
            r#""<bash-stdout>ok</bash-stdout><bash-stderr></bash-stderr>""#,
            "",
        ),
    ];
    let parsed = parse_bytes(Source::ClaudeCode, &lines.join("\n"));
    let s = &parsed.summary;
    assert_eq!((s.requests, s.turns, s.context_messages), (2, 2, 4));
    let kinds: Vec<&str> = payloads_of(&parsed, "context.resolved")
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["meta", "command_output", "interruption", "command_output"]
    );
}

/// OpenHands' system prompt and the environment's messages are context; the user's messages
/// are the requests.
#[test]
fn openhands_system_and_environment_messages_are_context() {
    let mut events: Vec<Value> =
        serde_json::from_slice(&std::fs::read(&openhands_files()[1]).unwrap()).unwrap();
    let at = events[0]["timestamp"].clone();
    events.insert(0, serde_json::json!({"id": 100, "timestamp": at, "source": "agent", "action": "system", "message": "You are OpenHands agent", "args": {"content": "You are OpenHands agent", "tools": [], "openhands_version": "0.40.0"}}));
    events.insert(1, serde_json::json!({"id": 101, "timestamp": at, "source": "environment", "action": "message", "message": "The workspace is ready", "args": {"content": "The workspace is ready"}}));
    let text = serde_json::to_string_pretty(&events).unwrap();
    let parsed = parse_bytes(Source::OpenHands, &text);
    let (expected, _) = openhands_expected(&openhands_files()[1]);
    assert_eq!(parsed.summary.requests, expected.requests);
    assert_eq!(parsed.summary.context_messages, 2);
    let kinds: Vec<&str> = payloads_of(&parsed, "context.resolved")
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["system_prompt", "environment"]);
    assert!(parsed.summary.unknown_kinds.is_empty());
}
