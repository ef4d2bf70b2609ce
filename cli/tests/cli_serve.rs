//! `journal serve` over loopback: a real server process (`serving/`), driven by a small HTTP
//! client. Every route's success and refusal, auth, the event stream's resume, shutdown
//! on SIGTERM, and a SIGKILL under 16 appending clients.

mod common;
mod serving;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::journal;
use serde_json::{json, Value};
use serving::{agent, answer, create_token, event, events, get, head, post, Server};

#[test]
fn serve_appends_a_batch_and_reads_it_back_in_pages() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let health = get(&server.url("/healthz"), None);
    assert_eq!(
        (health.status, health.json()["ok"].clone()),
        (200, json!(true))
    );

    let acks = post(&server.url("/v1/events"), None, &events("e", "s1", 0..3));
    assert_eq!(acks.status, 200, "{}", acks.body);
    let acks = acks.lines();
    assert_eq!(acks.len(), 3);
    assert_eq!(acks[2]["position"], 3);
    assert_eq!(acks[2]["streamVersion"], 3);
    assert_eq!(acks[2]["eventId"], "e2");
    assert!(acks[0]["hash"].as_str().unwrap().len() == 64);

    // A JSON array is one batch too, answered with an array; a repeated id is a duplicate.
    let array = format!("[{},{}]", event("e2", "s1"), event("e3", "s1"));
    let acks = post(&server.url("/v1/events"), None, &array);
    assert_eq!(acks.status, 200, "{}", acks.body);
    let acks = acks.json();
    assert_eq!(acks[0]["duplicate"], true);
    assert_eq!(acks[0]["position"], 3);
    assert_eq!(acks[1]["position"], 4);

    // Pages: the Link header names the next one.
    let page = get(&server.url("/v1/events?limit=3&session=s1"), None);
    assert_eq!(page.status, 200);
    let lines = page.lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["eventId"], "e0");
    let link = page.link.clone().unwrap();
    assert!(
        link.contains("from=4") && link.contains("rel=\"next\""),
        "{link}"
    );
    let next = link.trim_start_matches('<').split('>').next().unwrap();
    let page = get(&server.url(next), None);
    let lines = page.lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["position"], 4);
    // The last page points past the head: polling it later answers only new events.
    assert!(page.link.unwrap().contains("from=5"));
    let empty = get(&server.url("/v1/events?from=5"), None);
    assert_eq!((empty.status, empty.body.as_str()), (200, ""));
    let bad = get(&server.url("/v1/events?limit=0"), None);
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["kind"], "bad_request");
    let bad = get(&server.url("/v1/events?from=x"), None);
    assert_eq!(bad.status, 400);
    // A misspelt filter is refused, not ignored (which would answer every event).
    let bad = get(&server.url("/v1/events?sesion=s1"), None);
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("sesion"), "{}", bad.body);

    let status = get(&server.url("/v1/status"), None);
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["headPosition"], 4);
    assert!(status.json()["projections"].is_array());
    let digest = get(&server.url("/v1/digest"), None).json();
    assert_eq!(digest["position"], 4);
    let verify = get(&server.url("/v1/verify"), None);
    assert_eq!(verify.status, 200);
    assert_eq!(verify.json()["ok"], true, "{}", verify.body);
    let with_digest = get(
        &server.url(&format!(
            "/v1/verify?digest=4:{}",
            digest["hash"].as_str().unwrap()
        )),
        None,
    );
    assert_eq!(with_digest.json()["ok"], true);
    let bad_digest = get(&server.url("/v1/verify?digest=nope"), None);
    assert_eq!(bad_digest.status, 400);

    let missing = get(&server.url("/v1/nothing"), None);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["kind"], "not_found");

    let metrics = get(&server.url("/metrics"), None);
    assert_eq!(metrics.status, 200);
    for line in [
        "journal_appends_total 2",
        "journal_appended_events_total 5",
        "journal_subscribers 0",
        "journal_head_position 4",
        "journal_refusals_total{reason=\"bad_request\"} 4",
    ] {
        assert!(metrics.body.contains(line), "{line} in\n{}", metrics.body);
    }
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("without authentication"), "{stderr}");
}

#[test]
fn a_bad_third_line_is_refused_naming_it_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ok = post(&server.url("/v1/events"), None, &events("a", "s1", 0..1));
    assert_eq!(ok.status, 200);
    let body = format!(
        "{}{}{{\"type\":\"session.created\",\"eventId\":\"x\"}}\n{}",
        event("b1", "s1") + "\n",
        event("b2", "s1") + "\n",
        event("b4", "s1") + "\n",
    );
    let refused = post(&server.url("/v1/events"), None, &body);
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error = &refused.json()["error"];
    assert_eq!(error["kind"], "invalid_event");
    assert_eq!(error["line"], 3);
    assert!(
        error["message"].as_str().unwrap().starts_with("line 3: "),
        "{error}"
    );
    // Not JSON at all.
    let refused = post(&server.url("/v1/events"), None, "{\"type\":\n");
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"]["line"], 1);
    let refused = post(&server.url("/v1/events"), None, "\n\n");
    assert_eq!(refused.status, 400);
    assert_eq!(head(&server), 1, "nothing of a refused batch is written");
    let all = get(&server.url("/v1/events"), None).lines();
    assert_eq!(all.len(), 1);
    drop(server);
    let out = journal(dir.path()).arg("read").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn strict_mode_refuses_what_the_schema_does_not_allow() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--strict"]);
    let vendor =
        r#"{"type":"vendor.acme.deploy","eventId":"v1","timestamp":"2026-11-22T10:00:00Z"}"#;
    let body = format!("{}\n{vendor}\n", event("ok", "s1"));
    let refused = post(&server.url("/v1/events"), None, &body);
    assert_eq!(refused.status, 400, "{}", refused.body);
    let error = &refused.json()["error"];
    assert_eq!(error["line"], 2);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("agentruntime-event.schema.json"),
        "{error}"
    );
    assert_eq!(head(&server), 0);
}

#[test]
fn an_expected_version_conflict_is_409_with_the_actual_version() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    assert_eq!(
        post(&server.url("/v1/events"), None, &events("c", "s1", 0..2)).status,
        200
    );
    let conflict = post(
        &server.url("/v1/events?expectedVersion=5"),
        None,
        &events("d", "s1", 0..1),
    );
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    let error = &conflict.json()["error"];
    assert_eq!(error["kind"], "conflict");
    assert_eq!(error["actualVersion"], 2);
    assert_eq!(error["expectedVersion"], 5);
    let by_header = answer(
        agent()
            .post(server.url("/v1/events"))
            .header("If-Match", "\"2\"")
            .send(events("d", "s1", 0..1)),
    );
    assert_eq!(by_header.status, 200, "{}", by_header.body);
    assert_eq!(by_header.lines()[0]["streamVersion"], 3);
    let stale = answer(
        agent()
            .post(server.url("/v1/events"))
            .header("If-Match", "2")
            .send(events("f", "s1", 0..1)),
    );
    assert_eq!(stale.status, 409);
    assert_eq!(stale.json()["error"]["actualVersion"], 3);
    let disagree = answer(
        agent()
            .post(server.url("/v1/events?expectedVersion=3"))
            .header("If-Match", "4")
            .send(events("f", "s1", 0..1)),
    );
    assert_eq!(disagree.status, 400);
    assert_eq!(head(&server), 3);
}

#[test]
fn oversize_input_is_413_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    // An event over the 1 MiB event size limit, on line 2.
    let big = json!({
        "type": "vendor.x.blob",
        "eventId": "big",
        "timestamp": "2026-05-11T10:00:00Z",
        "sessionId": "s1",
        "payload": {"text": "x".repeat(2 << 20)},
    })
    .to_string();
    let body = format!("{}\n{big}\n", event("small", "s1"));
    let refused = post(&server.url("/v1/events"), None, &body);
    assert_eq!(
        refused.status,
        413,
        "{}",
        &refused.body[..200.min(refused.body.len())]
    );
    let error = &refused.json()["error"];
    assert_eq!(error["kind"], "too_large");
    assert_eq!(error["line"], 2);
    // More events than a batch holds: refused at the line past the limit.
    let many = events("m", "s1", 0..10_001);
    let refused = post(&server.url("/v1/events"), None, &many);
    assert_eq!(refused.status, 413);
    let error = &refused.json()["error"];
    assert_eq!(error["line"], 10_001);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("batch length (events) is 10001, over the limit of 10000"),
        "{error}"
    );
    // A body over the body limit (twice the batch byte limit and a mebibyte) is refused by
    // its Content-Length, before it is read.
    let addr = server.base.trim_start_matches("http://");
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    write!(
        socket,
        "POST /v1/events HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 40000000\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("\"kind\":\"too_large\""), "{response}");
    assert_eq!(head(&server), 0);
    let metrics = get(&server.url("/metrics"), None).body;
    assert!(
        metrics.contains("journal_refusals_total{reason=\"too_large\"} 3"),
        "{metrics}"
    );
}

#[test]
fn tokens_gate_every_route_by_scope_and_session_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let appender = create_token(dir.path(), &["--scope", "append"]);
    let acme_reader = create_token(dir.path(), &["--scope", "read", "--sessions", "acme-"]);
    let acme_writer = create_token(
        dir.path(),
        &["--scope", "append,command", "--sessions", "acme-"],
    );
    let admin = create_token(dir.path(), &["--scope", "admin"]);
    let file = dir.path().join("tokens.json");
    let text = std::fs::read_to_string(&file).unwrap();
    for token in [&appender, &acme_reader, &admin] {
        assert!(!text.contains(token.as_str()), "only hashes are stored");
    }
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let out = journal(dir.path())
        .args(["token", "list"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);

    // The tokens file in the journal directory is picked up without --tokens.
    let server = Server::start(dir.path(), &[]);
    let url = server.url("/v1/events");
    let none = post(&url, None, &events("e", "acme-1", 0..1));
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["error"]["kind"], "unauthorized");
    assert_eq!(
        post(&url, Some("jt_nope"), &events("e", "acme-1", 0..1)).status,
        401
    );
    let wrong_scope = post(&url, Some(&acme_reader), &events("e", "acme-1", 0..1));
    assert_eq!(wrong_scope.status, 403);
    assert_eq!(wrong_scope.json()["error"]["kind"], "forbidden");
    assert_eq!(
        post(&url, Some(&appender), &events("e", "acme-1", 0..1)).status,
        200
    );
    assert_eq!(
        post(&url, Some(&appender), &events("o", "other", 0..1)).status,
        200
    );
    // A token limited to `acme-` appends only to those sessions.
    let other = post(&url, Some(&acme_writer), &events("p", "other", 0..1));
    assert_eq!(other.status, 403, "{}", other.body);
    assert_eq!(
        post(&url, Some(&acme_writer), &events("p", "acme-2", 0..1)).status,
        200
    );

    assert_eq!(get(&url, None).status, 401);
    assert_eq!(get(&url, Some(&appender)).status, 403);
    assert_eq!(
        get(&format!("{url}?session=other"), Some(&acme_reader)).status,
        403
    );
    assert_eq!(
        get(&url, Some(&acme_reader)).status,
        403,
        "a limited token names a session"
    );
    let mine = get(&format!("{url}?session=acme-1"), Some(&acme_reader));
    assert_eq!(mine.status, 200);
    assert_eq!(mine.lines().len(), 1);
    assert_eq!(get(&url, Some(&admin)).lines().len(), 3);
    let stream = server.url("/v1/events/stream?session=other");
    assert_eq!(get(&stream, Some(&acme_reader)).status, 403);
    let model = server.url("/v1/models/session/other");
    assert_eq!(get(&model, Some(&acme_reader)).status, 403);
    assert_eq!(
        get(&server.url("/v1/models/task/t1"), Some(&acme_reader)).status,
        403
    );
    // Waits for the read models to reach the three events appended, so the session is known.
    let known = server.url("/v1/models/session/acme-1?minPosition=3&timeoutMs=10000");
    assert_eq!(get(&known, Some(&acme_reader)).status, 200);
    let command = server.url("/v1/commands/create_task");
    let refused = post(
        &command,
        Some(&acme_writer),
        r#"{"sessionId":"other","taskId":"t1"}"#,
    );
    assert_eq!(refused.status, 403);
    assert_eq!(
        post(
            &command,
            Some(&acme_writer),
            r#"{"sessionId":"acme-3","taskId":"t1"}"#
        )
        .status,
        200
    );
    assert_eq!(
        post(
            &command,
            Some(&appender),
            r#"{"sessionId":"x","taskId":"t1"}"#
        )
        .status,
        403
    );

    assert_eq!(get(&server.url("/metrics"), Some(&acme_reader)).status, 403);
    assert_eq!(
        get(&server.url("/v1/verify"), Some(&acme_reader)).status,
        403
    );
    assert_eq!(get(&server.url("/metrics"), Some(&admin)).status, 200);
    assert_eq!(
        get(&server.url("/v1/status"), Some(&acme_reader)).status,
        200
    );
    assert_eq!(get(&server.url("/healthz"), None).status, 200);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("authentication on: 4 token(s)"), "{stderr}");

    // A revoked token is refused by the next server.
    let list = journal(dir.path())
        .args(["token", "list"])
        .output()
        .unwrap();
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let id = first["id"].as_str().unwrap();
    let out = journal(dir.path())
        .args(["token", "revoke", id])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = journal(dir.path())
        .args(["token", "revoke", id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let server = Server::start(dir.path(), &[]);
    assert_eq!(
        post(
            &server.url("/v1/events"),
            Some(&appender),
            &events("z", "s", 0..1)
        )
        .status,
        401
    );
}

#[test]
fn a_non_loopback_address_without_tokens_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = journal(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without a tokens file"),
        "{stderr}"
    );
    assert!(!dir.path().join("segments").exists(), "nothing is created");
    // A tokens file that is not there is refused, not taken for one without tokens.
    let out = journal(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!dir.path().join("segments").exists(), "nothing is created");
}

#[test]
fn commands_run_and_a_refusal_is_422_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let created = post(
        &server.url("/v1/commands/create_task"),
        None,
        r#"{"sessionId":"s1","taskId":"t1"}"#,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    assert_eq!(created.json()["events"][0]["type"], "task.created");
    let refused = post(
        &server.url("/v1/commands/complete_task"),
        None,
        r#"{"sessionId":"s1","taskId":"t1"}"#,
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.json()["error"]["rule"], "completion_not_accepted");
    for (name, body) in [
        ("create_task", "{not json"),
        ("create_task", "[1]"),
        ("create_task", ""),
        ("no_such_command", "{}"),
    ] {
        let refused = post(&server.url(&format!("/v1/commands/{name}")), None, body);
        assert_eq!(refused.status, 422, "{name} {body}");
        assert_eq!(refused.json()["error"]["rule"], "invalid_arguments");
    }
    assert_eq!(head(&server), 1);

    // Read models: read your own write with minPosition; 404 when nothing is recorded.
    let task = get(
        &server.url("/v1/models/task/t1?minPosition=1&timeoutMs=5000"),
        None,
    );
    assert_eq!(task.status, 200, "{}", task.body);
    assert_eq!(task.json()["freshness"]["position"], 1);
    assert!(task.json()["model"].is_object());
    let session = get(&server.url("/v1/models/session/s1"), None);
    assert_eq!(session.status, 200);
    let history = get(&server.url("/v1/models/history/s1"), None);
    assert_eq!(history.status, 200);
    assert_eq!(
        history.json()["model"]["events"].as_array().unwrap().len(),
        1
    );
    let missing = get(&server.url("/v1/models/task/nope"), None);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["kind"], "not_found");
    let unknown = get(&server.url("/v1/models/nonsense/x"), None);
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["kind"], "unknown_model");
    let behind = get(
        &server.url("/v1/models/task/t1?minPosition=99&timeoutMs=100"),
        None,
    );
    assert_eq!(behind.status, 200);
    assert_eq!(behind.json()["freshness"]["state"], "behind");
}

/// An event stream read line by line.
struct Stream {
    reader: BufReader<ureq::BodyReader<'static>>,
}

impl Stream {
    fn open(url: &str, last_event_id: Option<u64>) -> Stream {
        let mut request = agent().get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.call().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "text/event-stream"
        );
        Stream {
            reader: BufReader::new(response.into_body().into_reader()),
        }
    }

    /// The next event's id and data, or a comment (`Err`); `None` at the end.
    fn next(&mut self) -> Option<Result<(u64, Value), String>> {
        let mut id = None;
        let mut data = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap() == 0 {
                return None;
            }
            let line = line.trim_end_matches('\n');
            if line.is_empty() {
                if let (Some(id), Some(data)) = (id, data.take()) {
                    return Some(Ok((id, data)));
                }
                continue;
            }
            if let Some(comment) = line.strip_prefix(':') {
                return Some(Err(comment.trim().to_string()));
            }
            if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim().parse().unwrap());
            } else if let Some(v) = line.strip_prefix("data:") {
                data = Some(serde_json::from_str(v.trim()).unwrap());
            }
        }
    }

    /// The next `n` events' positions, skipping heartbeats.
    fn positions(&mut self, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.next() {
                Some(Ok((id, data))) => {
                    assert_eq!(data["position"], id);
                    out.push(id);
                }
                Some(Err(comment)) if comment == "heartbeat" => {}
                other => panic!("expected an event, got {other:?}"),
            }
        }
        out
    }
}

#[test]
fn the_event_stream_resumes_after_last_event_id_without_gap_or_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--heartbeat-ms", "300"]);
    post(&server.url("/v1/events"), None, &events("h", "s1", 0..8));
    post(&server.url("/v1/events"), None, &events("o", "other", 0..2));
    let mut stream = Stream::open(&server.url("/v1/events/stream?from=1&session=s1"), None);
    assert_eq!(stream.positions(5), vec![1, 2, 3, 4, 5]);
    drop(stream);
    post(&server.url("/v1/events"), None, &events("h", "s1", 8..12));
    // Resume: the rest of the history (6, 7, 8, then 11..14 past the other session's 9 and
    // 10), then live events as they are appended, and the stream ends at `to`.
    let mut stream = Stream::open(&server.url("/v1/events/stream?session=s1&to=18"), Some(5));
    assert_eq!(stream.positions(7), vec![6, 7, 8, 11, 12, 13, 14]);
    // Idle: heartbeats.
    assert_eq!(stream.next(), Some(Err("heartbeat".into())));
    let metrics = get(&server.url("/metrics"), None).body;
    assert!(metrics.contains("journal_subscribers 1"), "{metrics}");
    post(&server.url("/v1/events"), None, &events("h", "s1", 12..16));
    assert_eq!(stream.positions(4), vec![15, 16, 17, 18]);
    assert_eq!(stream.next(), Some(Err("end: reached `to`".into())));
    assert_eq!(stream.next(), None);
    let bad = answer(
        agent()
            .get(server.url("/v1/events/stream"))
            .header("Last-Event-ID", "x")
            .call(),
    );
    assert_eq!(bad.status, 400);
}

#[test]
fn a_subscriber_that_falls_behind_is_closed_with_a_comment() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--subscriber-buffer-events", "4"]);
    // Large events, so that the socket's buffers fill and the subscriber's buffer with them.
    let text = "x".repeat(4000);
    for batch in 0..2 {
        let body: String = (batch * 2500..(batch + 1) * 2500)
            .map(|i| {
                json!({"type": "vendor.x.note", "eventId": format!("n{i}"),
                       "timestamp": "2026-05-11T10:00:00Z", "sessionId": "s1",
                       "payload": {"text": text}})
                .to_string()
                    + "\n"
            })
            .collect();
        assert_eq!(post(&server.url("/v1/events"), None, &body).status, 200);
    }
    let mut stream = Stream::open(&server.url("/v1/events/stream?from=1"), None);
    std::thread::sleep(Duration::from_millis(1500));
    let mut last = 0;
    let comment = loop {
        match stream.next() {
            Some(Ok((id, _))) => {
                assert_eq!(id, last + 1, "no gap");
                last = id;
            }
            Some(Err(comment)) => break comment,
            None => panic!("the stream ended without saying why, after {last}"),
        }
    };
    assert!(comment.contains("fell 4 events behind"), "{comment}");
    assert!(last < 5000, "{last}");
    assert_eq!(stream.next(), None);
    let metrics = get(&server.url("/metrics"), None).body;
    assert!(
        metrics.contains("journal_subscribers_dropped_total 1"),
        "{metrics}"
    );
    // Resuming picks up where it stopped.
    let mut stream = Stream::open(&server.url("/v1/events/stream?to=5000"), Some(last));
    assert_eq!(stream.positions(1), vec![last + 1]);
}

#[test]
fn sigterm_closes_streams_and_the_journal_then_opens_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    post(&server.url("/v1/events"), None, &events("t", "s1", 0..3));
    let mut stream = Stream::open(&server.url("/v1/events/stream?from=1"), None);
    assert_eq!(stream.positions(3), vec![1, 2, 3]);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("the journal is closed"), "{stderr}");
    assert_eq!(
        stream.next(),
        Some(Err(
            "closed: the server is shutting down; resume with Last-Event-ID".into()
        ))
    );
    // The lock is released: a writer opens the journal.
    let out =
        common::output_with_stdin(journal(dir.path()).arg("append"), &events("u", "s1", 0..1));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = journal(dir.path()).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["events"], 4);
}

/// A subscriber whose server restarts resumes with `Last-Event-ID` from the new process: the
/// events it had not seen, those appended while the server was down included, with no gap and
/// no duplicate.
#[test]
fn the_event_stream_resumes_across_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    post(&server.url("/v1/events"), None, &events("r", "s1", 0..6));
    let mut stream = Stream::open(&server.url("/v1/events/stream?from=1"), None);
    assert_eq!(stream.positions(4), vec![1, 2, 3, 4]);
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    // Appended while no server runs.
    let out =
        common::output_with_stdin(journal(dir.path()).arg("append"), &events("d", "s1", 0..2));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Server::start(dir.path(), &[]);
    let mut stream = Stream::open(&server.url("/v1/events/stream"), Some(4));
    assert_eq!(stream.positions(4), vec![5, 6, 7, 8]);
    post(&server.url("/v1/events"), None, &events("r", "s1", 6..8));
    assert_eq!(stream.positions(2), vec![9, 10]);
}

/// `n` client threads appending batches of 3 events until `stop` is set or the server is
/// gone (at most 2,000 requests each); every event id answered `200` goes into `acked`.
fn appending_clients(
    url: &str,
    n: usize,
    acked: &Arc<Mutex<BTreeSet<String>>>,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|c| {
            let (url, acked, stop) = (url.to_string(), Arc::clone(acked), Arc::clone(stop));
            std::thread::spawn(move || {
                let agent = agent();
                for i in 0..2000 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let ids: Vec<String> = (0..3).map(|k| format!("k{c}-{i}-{k}")).collect();
                    let body: String = ids
                        .iter()
                        .map(|id| event(id, &format!("s{c}")) + "\n")
                        .collect();
                    let Ok(mut response) = agent.post(&url).send(body) else {
                        return;
                    };
                    if response.status().as_u16() != 200 {
                        continue;
                    }
                    let Ok(text) = response.body_mut().read_to_string() else {
                        return;
                    };
                    let mut acked = acked.lock().unwrap();
                    for line in text.lines() {
                        let ack: Value = serde_json::from_str(line).unwrap();
                        acked.insert(ack["eventId"].as_str().unwrap().to_string());
                    }
                }
            })
        })
        .collect()
}

/// Waits (about 20 s at most) until `acked` holds `n` ids.
fn wait_for_acks(acked: &Mutex<BTreeSet<String>>, n: usize) {
    for _ in 0..1000 {
        if acked.lock().unwrap().len() >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The event ids `journal read` prints.
fn stored_ids(dir: &Path) -> BTreeSet<String> {
    let out = journal(dir).arg("read").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["eventId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn sigterm_while_clients_append_answers_what_it_accepted_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = appending_clients(&server.url("/v1/events"), 4, &acked, &stop);
    wait_for_acks(&acked, 150);
    let (code, stderr) = server.terminate();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(code, Some(0), "{stderr}");
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 150, "{} acknowledged", acked.len());
    let stored = stored_ids(dir.path());
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let out = journal(dir.path()).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn sigkill_while_16_clients_append_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = appending_clients(&server.url("/v1/events"), 16, &acked, &stop);
    wait_for_acks(&acked, 600);
    server.signal("-KILL");
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    drop(server);
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 600, "{} acknowledged", acked.len());

    let restarted = Server::start(dir.path(), &[]);
    let mut stored = BTreeSet::new();
    let mut next = "/v1/events?from=1&limit=1000".to_string();
    loop {
        let page = get(&restarted.url(&next), None);
        assert_eq!(page.status, 200);
        if page.body.is_empty() {
            break;
        }
        for event in page.lines() {
            stored.insert(event["eventId"].as_str().unwrap().to_string());
        }
        let link = page.link.unwrap();
        next = link
            .trim_start_matches('<')
            .split('>')
            .next()
            .unwrap()
            .to_string();
    }
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let verify = get(&restarted.url("/v1/verify"), None);
    assert_eq!(verify.json()["ok"], true, "{}", verify.body);
    let (code, stderr) = restarted.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    let out = journal(dir.path()).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
