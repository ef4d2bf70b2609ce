//! The routes of `journal serve` for reviewers and tools, through a real server process on a
//! journal made by `journal demo` with a real Claude Code session imported into it: the
//! replay (equal to what `journal replay` prints), the evidence pack (the files
//! `journal export evidence` writes, as one tar archive), the schemas (`journal schema`), and
//! the OpenAPI document: OpenAPI 3.1 whose every `$ref` resolves, whose operations are
//! exactly the routes served, and whose schemas the answers validate against.

mod common;
mod serving;

use std::path::Path;
use std::time::Duration;

use common::journal;
use serde_json::{json, Value};
use serving::Server;

/// An answer: status, content type, content disposition, body.
struct Answer {
    status: u16,
    content_type: String,
    disposition: Option<String>,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The error's `kind` (or `rule`), asserting the status.
    fn refused(&self, status: u16) -> String {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        let error = &self.json()["error"];
        error["kind"]
            .as_str()
            .or(error["rule"].as_str())
            .unwrap()
            .to_string()
    }
}

fn request(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> Answer {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let mut builder = ureq::http::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        builder = builder.header("Authorization", format!("Bearer {t}"));
    }
    let response = match body {
        Some(b) => agent.run(
            builder
                .header("Content-Type", "application/json")
                .body(b.to_string())
                .unwrap(),
        ),
        None => agent.run(builder.body(()).unwrap()),
    };
    let mut response = response.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let content_type = header("content-type").unwrap_or_default();
    let disposition = header("content-disposition");
    Answer {
        status: response.status().as_u16(),
        content_type,
        disposition,
        body: response
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_vec()
            .unwrap(),
    }
}

fn get(url: &str, token: Option<&str>) -> Answer {
    request("GET", url, token, None)
}

fn create_token(dir: &Path, scopes: &str, sessions: Option<&str>) -> String {
    let mut cmd = journal(dir);
    cmd.args(["token", "create", "--scope", scopes]);
    if let Some(s) = sessions {
        cmd.args(["--sessions", s]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    created["token"].as_str().unwrap().to_string()
}

/// Runs `journal ARGS` on `dir` (the server is not running); its standard output.
fn run(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = journal(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A journal with the demo's workload (sessions, tasks, runs) and a real Claude Code session
/// (subagents, tool calls, blobs) imported; the Claude Code session's id.
fn realistic(dir: &Path) -> String {
    run(dir, &["demo", "--out", dir.to_str().unwrap()]);
    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs/claude-code");
    let file = logs.join("cctrace_phase0-investigation_main.jsonl");
    let blobs = logs.join("cctrace_file-history");
    let out = run(
        dir,
        &[
            "import",
            "claude-code",
            file.to_str().unwrap(),
            "--blobs",
            blobs.to_str().unwrap(),
            "--json",
        ],
    );
    let imported: Value = serde_json::from_slice(&out).unwrap();
    imported["sessions"][0].as_str().unwrap().to_string()
}

/// A task and a run of the demo's workload: `(session, task, run)`.
fn a_task_and_run(dir: &Path) -> (String, String, String) {
    let out = run(dir, &["read", "--type", "task.", "--limit", "1000"]);
    for line in String::from_utf8(out).unwrap().lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        if let (Some(s), Some(t), Some(r)) = (
            e["sessionId"].as_str(),
            e["taskId"].as_str(),
            e["runId"].as_str(),
        ) {
            return (s.into(), t.into(), r.into());
        }
    }
    panic!("the demo has no task event with a run");
}

/// A validator of `component` of the OpenAPI document (its `$ref`s resolve in the document).
fn validator(doc: &Value, component: &str) -> jsonschema::Validator {
    let mut root = doc.clone();
    root["$ref"] = json!(format!("#/components/schemas/{component}"));
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&root)
        .unwrap_or_else(|e| panic!("{component}: {e}"))
}

fn assert_valid(doc: &Value, component: &str, value: &Value) {
    let v = validator(doc, component);
    let errors: Vec<String> = v
        .iter_errors(value)
        .take(5)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{component}: the answer does not validate: {errors:#?}"
    );
}

#[test]
fn replay_answers_what_journal_replay_prints_in_each_format() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let session = realistic(&dir);
    let (_, task, run_id) = a_task_and_run(&dir);
    let cli = |args: &[&str]| run(&dir, args);
    let json_cli = cli(&["replay", "session", &session, "--format", "json"]);
    let text_cli = cli(&["replay", "session", &session, "--format", "text"]);
    let html_cli = cli(&["replay", "session", &session, "--format", "html"]);
    let at_cli = cli(&[
        "replay", "session", &session, "--at", "7000", "--format", "json",
    ]);
    let task_cli = cli(&["replay", "task", &task, "--format", "json"]);
    let run_cli = cli(&["replay", "run", &run_id, "--format", "json"]);
    let reader = create_token(&dir, "read", None);
    let server = Server::start(&dir, &[]);
    let replay = |path: &str| get(&server.url(&format!("/v1/replay/{path}")), Some(&reader));

    let json = replay(&format!("session/{session}"));
    assert_eq!(json.status, 200);
    assert_eq!(json.content_type, "application/json");
    let narrative = json.json();
    assert_eq!(
        narrative,
        serde_json::from_slice::<Value>(&json_cli).unwrap()
    );
    assert!(narrative["counts"]["subagents"].as_u64().unwrap() > 0);
    let schema = get(&server.url("/v1/schema/replay.narrative"), Some(&reader)).json();
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&narrative)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    let text = replay(&format!("session/{session}?format=text"));
    assert_eq!(text.content_type, "text/plain; charset=utf-8");
    assert_eq!(text.text(), String::from_utf8(text_cli).unwrap());
    let html = replay(&format!("session/{session}?format=html"));
    assert_eq!(html.content_type, "text/html; charset=utf-8");
    assert_eq!(html.body, html_cli);
    let at = replay(&format!("session/{session}?format=json&at=7000"));
    assert_eq!(at.json(), serde_json::from_slice::<Value>(&at_cli).unwrap());
    assert_eq!(at.json()["asOf"], 7000);
    let task_answer = replay(&format!("task/{task}"));
    assert_eq!(
        task_answer.json(),
        serde_json::from_slice::<Value>(&task_cli).unwrap()
    );
    let run_answer = replay(&format!("run/{run_id}"));
    assert_eq!(
        run_answer.json(),
        serde_json::from_slice::<Value>(&run_cli).unwrap()
    );
}

#[test]
fn replay_refuses_a_bad_kind_format_or_token_and_404s_an_unknown_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let session = realistic(&dir);
    let (demo_session, task, _) = a_task_and_run(&dir);
    let reader = create_token(&dir, "read", None);
    let appender = create_token(&dir, "append", None);
    let prefix = &session[..8];
    let limited = create_token(&dir, "read", Some(prefix));
    let server = Server::start(&dir, &[]);
    let replay =
        |path: &str, token: Option<&str>| get(&server.url(&format!("/v1/replay/{path}")), token);
    let ok = Some(reader.as_str());
    assert_eq!(replay("bogus/x", ok).refused(400), "bad_request");
    let bad_format = replay(&format!("session/{session}?format=pdf"), ok);
    assert_eq!(bad_format.refused(400), "bad_request");
    let bad_query = replay(&format!("session/{session}?at=-1"), ok);
    assert_eq!(bad_query.refused(400), "bad_request");
    assert_eq!(
        replay("session/no-such-session", ok).refused(404),
        "not_found"
    );
    // Before its first event, nothing is recorded about the session.
    assert_eq!(
        replay(&format!("session/{session}?at=1"), ok).refused(404),
        "not_found"
    );
    assert_eq!(
        replay(&format!("session/{session}"), None).refused(401),
        "unauthorized"
    );
    let appender = Some(appender.as_str());
    assert_eq!(
        replay(&format!("session/{session}"), appender).refused(403),
        "forbidden"
    );
    // A token limited to sessions: its own session, and nothing else.
    let limited = Some(limited.as_str());
    assert_eq!(replay(&format!("session/{session}"), limited).status, 200);
    assert_eq!(
        replay(&format!("session/{demo_session}"), limited).refused(403),
        "forbidden"
    );
    assert_eq!(
        replay(&format!("task/{task}"), limited).refused(403),
        "forbidden"
    );
}

/// Extracts a tar archive into `into` with the system's `tar`.
fn untar(archive: &[u8], into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    let file = into.join("pack.tar");
    std::fs::write(&file, archive).unwrap();
    let status = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&file)
        .arg("-C")
        .arg(into)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_file(file).unwrap();
}

#[test]
fn evidence_is_the_pack_journal_export_writes_as_one_tar_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let session = realistic(&dir);
    let (demo_session, _, _) = a_task_and_run(&dir);
    let exported = tmp.path().join("exported");
    run(
        &dir,
        &[
            "export",
            "evidence",
            "--session",
            &session,
            "--out",
            exported.to_str().unwrap(),
        ],
    );
    let reader = create_token(&dir, "read", None);
    let limited = create_token(&dir, "read", Some(&session[..8]));
    let server = Server::start(&dir, &[]);
    let pack = get(
        &server.url(&format!("/v1/evidence/{session}")),
        Some(&reader),
    );
    assert_eq!(pack.status, 200);
    assert_eq!(pack.content_type, "application/x-tar");
    let stem = format!("evidence-{session}");
    assert_eq!(
        pack.disposition.as_deref(),
        Some(format!("attachment; filename=\"{stem}.tar\"").as_str())
    );
    let unpacked = tmp.path().join("unpacked");
    untar(&pack.body, &unpacked);
    let served = common::snapshot(&unpacked.join(&stem));
    let written = common::snapshot(&exported);
    common::assert_same(&served, &written, "the served pack");
    let manifest: Value = serde_json::from_slice(&served["MANIFEST.json"]).unwrap();
    assert_eq!(manifest["exported"]["session"], session.as_str());
    let blobs = served.keys().filter(|k| k.starts_with("blobs/")).count() as u64;
    assert_eq!(Some(blobs), manifest["exported"]["blobs"].as_u64());
    assert!(blobs >= 10, "the imported file history's blobs: {blobs}");

    let evidence =
        |id: &str, token: Option<&str>| get(&server.url(&format!("/v1/evidence/{id}")), token);
    assert_eq!(
        evidence("no-such-session", Some(&reader)).refused(404),
        "not_found"
    );
    assert_eq!(evidence(&session, None).refused(401), "unauthorized");
    assert_eq!(evidence(&session, Some(&limited)).status, 200);
    assert_eq!(
        evidence(&demo_session, Some(&limited)).refused(403),
        "forbidden"
    );
    // A session id that is no file name: the archive's names are made safe.
    let odd = evidence("../etc/passwd", Some(&reader));
    assert_eq!(odd.refused(404), "not_found");
}

#[test]
fn schemas_are_what_journal_schema_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let list = String::from_utf8(run(&dir, &["schema", "--list"])).unwrap();
    let event: Value = serde_json::from_slice(&run(&dir, &["schema", "event"])).unwrap();
    let command: Value =
        serde_json::from_slice(&run(&dir, &["schema", "command.create_task"])).unwrap();
    let reader = create_token(&dir, "read", None);
    let server = Server::start(&dir, &[]);
    let names = get(&server.url("/v1/schema"), Some(&reader)).json();
    let names: Vec<&str> = names["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(names, list.lines().collect::<Vec<_>>());
    assert!(names.contains(&"model.checklist"));
    let one = |name: &str| get(&server.url(&format!("/v1/schema/{name}")), Some(&reader));
    assert_eq!(one("event").json(), event);
    assert_eq!(one("command.create_task").json(), command);
    assert_eq!(one("no.such.schema").refused(404), "not_found");
    assert_eq!(
        get(&server.url("/v1/schema"), None).refused(401),
        "unauthorized"
    );
}

/// Every `$ref` in `value`, with where it is.
fn refs(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(target)) => out.push((at.to_string(), target.to_string())),
                    _ => refs(v, &format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refs(v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn document(server: &Server) -> Value {
    let answer = get(&server.url("/openapi.json"), None);
    assert_eq!(answer.status, 200, "the document needs no token");
    assert_eq!(answer.content_type, "application/json");
    answer.json()
}

#[test]
fn the_openapi_document_is_openapi_3_1_and_every_ref_resolves() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let _ = create_token(&dir, "read", None);
    let server = Server::start(&dir, &[]);
    let doc = document(&server);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"],
        json!({"type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearer"]["description"]})
    );
    let mut found = Vec::new();
    refs(&doc, "#", &mut found);
    assert!(found.len() > 100, "{} refs", found.len());
    for (at, target) in &found {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: {target} is not inside the document"));
        assert!(
            doc.pointer(pointer).is_some(),
            "{at}: {target} does not resolve"
        );
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "event",
        "command.create_task",
        "model.task",
        "model.session",
        "replay.narrative",
        "StoredEvent",
        "Error",
    ] {
        assert!(schemas.contains_key(name), "{name}");
    }
    // Every component is a JSON Schema (2020-12) that compiles.
    for name in schemas.keys() {
        validator(&doc, name);
    }
    // Each operation: an id, its responses; those behind a token name the scheme and 401.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.contains_key("200"), "{method} {path}");
            if op.get("security").is_some() {
                assert!(responses.contains_key("401"), "{method} {path}");
                assert!(responses.contains_key("403"), "{method} {path}");
            }
        }
    }
}

/// `path` with each `{param}` given a value.
fn concrete(path: &str) -> String {
    path.replace("{kind}", "session")
        .replace("{name}", "event")
        .replace("{id}", "no-such-id")
        .replace("{eventId}", "no-such-event")
        .replace("{session}", "no-such-session")
}

#[test]
fn the_document_lists_exactly_the_routes_served() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let admin = create_token(&dir, "admin", None);
    let server = Server::start(&dir, &[]);
    let doc = document(&server);
    let methods = ["get", "post", "put", "patch", "delete"];
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let documented = item.as_object().unwrap();
        for method in methods {
            // A stream would not end: ask for nothing after position 0.
            let query = if path == "/v1/events/stream" {
                "?from=1&to=0"
            } else {
                ""
            };
            let url = server.url(&format!("{}{query}", concrete(path)));
            let body = (method != "get").then_some("{}");
            let answer = request(&method.to_uppercase(), &url, Some(&admin), body);
            if documented.contains_key(method) {
                operations += 1;
                assert_ne!(
                    answer.status, 405,
                    "{method} {path} is documented, not served"
                );
                let fallback = answer.status == 404
                    && answer.json()["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("no such route"));
                assert!(!fallback, "{method} {path} is documented, not served");
            } else {
                assert_eq!(
                    answer.status, 405,
                    "{method} {path} is served, not documented"
                );
            }
        }
    }
    assert_eq!(operations, 18);
    // A path the document does not list is not served.
    let unknown = get(&server.url("/v1/nothing"), Some(&admin));
    assert_eq!(unknown.refused(404), "not_found");
}

/// The answers of the read routes validate against the schemas the document gives them.
#[test]
fn answers_validate_against_the_document() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let session = realistic(&dir);
    let (demo_session, task, run_id) = a_task_and_run(&dir);
    let admin = create_token(&dir, "admin", None);
    let server = Server::start(&dir, &[]);
    let doc = document(&server);
    let token = Some(admin.as_str());
    // The validators check: a wrong answer is refused.
    assert!(!validator(&doc, "Digest").is_valid(&json!({"position": "one", "hash": "x"})));
    assert!(!validator(&doc, "StoredEvent").is_valid(&json!({"type": "session.created"})));
    let json = |path: &str| {
        let answer = get(&server.url(path), token);
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        answer.json()
    };
    assert_valid(&doc, "Digest", &json("/v1/digest"));
    assert_valid(&doc, "Status", &json("/v1/status"));
    assert_valid(&doc, "VerifyReport", &json("/v1/verify"));
    assert_valid(&doc, "Health", &json("/healthz"));
    assert_valid(&doc, "SchemaNames", &json("/v1/schema"));
    let replay = json(&format!("/v1/replay/session/{session}"));
    assert_valid(&doc, "replay.narrative", &replay);
    let minimum = "?minPosition=1&timeoutMs=20000";
    for (kind, id) in [
        ("session", demo_session.as_str()),
        ("session", session.as_str()),
        ("task", task.as_str()),
        ("run", run_id.as_str()),
        ("checklist", session.as_str()),
        ("queue", demo_session.as_str()),
        ("evidence", session.as_str()),
        ("ecosystem", demo_session.as_str()),
        ("resume", demo_session.as_str()),
        ("history", session.as_str()),
        ("state", demo_session.as_str()),
        ("activity", session.as_str()),
    ] {
        let answer = json(&format!("/v1/models/{kind}/{id}{minimum}"));
        assert_valid(&doc, "ModelAnswer", &answer);
        assert_valid(&doc, &format!("model.{kind}"), &answer["model"]);
    }
    let page = get(
        &server.url(&format!("/v1/events?session={session}&limit=1000")),
        token,
    );
    let stored = validator(&doc, "StoredEvent");
    for line in page.text().lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        assert!(stored.is_valid(&event), "{line}");
    }
    let created = request(
        "POST",
        &server.url("/v1/commands/create_task"),
        token,
        Some(r#"{"sessionId":"api-s1","taskId":"api-t1","title":"checked"}"#),
    );
    assert_eq!(created.status, 200, "{}", created.text());
    assert_valid(&doc, "CommandResult", &created.json());
    let appended = request(
        "POST",
        &server.url("/v1/events"),
        token,
        Some(
            r#"[{"type":"session.created","eventId":"api-e1","timestamp":"2026-05-11T10:00:00Z","sessionId":"api-s2"}]"#,
        ),
    );
    assert_eq!(appended.status, 200, "{}", appended.text());
    assert_valid(&doc, "Acks", &appended.json());
    let refused = get(&server.url("/v1/replay/bogus/x"), token);
    assert_valid(&doc, "Error", &refused.json());
}
