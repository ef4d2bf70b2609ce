//! `journal serve` against hostile and slow clients, over loopback with raw `TcpStream`s where
//! a normal client would not send such bytes: malformed JSON, a wrong content type, invalid
//! UTF-8, an oversized body and oversized headers, `..` and `%00` path segments, huge query
//! values, a slowloris head and a trickling body, too many subscribers and too many
//! connections. Each is refused with the right status, writes nothing (the head position is
//! unchanged), and the server answers `/healthz` afterwards.

mod common;
mod serving;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use serving::{events, get, head, post, read_to_close, Server};

/// A response read off a raw connection.
#[derive(Debug)]
struct Raw {
    status: u16,
    /// The head's lines after the status line, lower-cased.
    headers: String,
    body: String,
}

impl Raw {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.status, self.body))
    }

    fn kind(&self) -> String {
        self.json()["error"]["kind"].as_str().unwrap().to_string()
    }
}

/// Parses a response's bytes; status 0 when the server closed without one.
fn parse(bytes: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Raw {
        status,
        headers: lines.collect::<Vec<_>>().join("\n").to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// Sends `request` on a new connection and reads until the server closes it.
fn raw(server: &Server, request: &[u8]) -> Raw {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    // A server that closes early (a head too large) may reset the rest of the write.
    let _ = stream.write_all(request);
    parse(&read_to_close(&mut stream, Duration::from_secs(10)))
}

/// A request with `Connection: close`, its head lines given, and `body`.
fn request(line: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{line}\r\nHost: localhost\r\nConnection: close\r\n");
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    if !body.is_empty() {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// The server is still there, and its journal still at `position`.
fn unharmed(server: &Server, position: u64) {
    let health = get(&server.url("/healthz"), None);
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(head(server), position, "nothing was written");
}

/// A server with one event appended (head 1).
fn started(args: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), args);
    let ok = post(&server.url("/v1/events"), None, &events("e", "s1", 0..1));
    assert_eq!(ok.status, 200, "{}", ok.body);
    (dir, server)
}

fn metrics(server: &Server) -> String {
    get(&server.url("/metrics"), None).body
}

#[test]
fn malformed_json_and_invalid_utf8_are_400_naming_the_line() {
    let (_dir, server) = started(&[]);
    let ndjson = "Content-Type: application/x-ndjson";
    let malformed = raw(
        &server,
        &request("POST /v1/events HTTP/1.1", &[ndjson], b"{\"type\":"),
    );
    assert_eq!(
        (malformed.status, malformed.kind()),
        (400, "invalid_event".into())
    );
    assert_eq!(malformed.json()["error"]["line"], 1);

    let mut body = events("u", "s1", 0..1).into_bytes();
    body.extend_from_slice(b"{\"type\":\"session.created\",\"eventId\":\"\xff\xfe\"}\n");
    let invalid = raw(
        &server,
        &request("POST /v1/events HTTP/1.1", &[ndjson], &body),
    );
    assert_eq!(
        (invalid.status, invalid.kind()),
        (400, "invalid_event".into())
    );
    assert_eq!(invalid.json()["error"]["line"], 2, "{}", invalid.body);

    let not_json = raw(
        &server,
        &request("POST /v1/events HTTP/1.1", &[ndjson], b"\x00\x01\x02\x03"),
    );
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    let array = raw(
        &server,
        &request(
            "POST /v1/events HTTP/1.1",
            &["Content-Type: application/json"],
            b"[{\"type\":",
        ),
    );
    assert_eq!((array.status, array.kind()), (400, "invalid_event".into()));
    let command = raw(
        &server,
        &request(
            "POST /v1/commands/create_task HTTP/1.1",
            &["Content-Type: application/json"],
            b"{\"sessionId\":",
        ),
    );
    assert_eq!(command.status, 422, "{}", command.body);
    assert_eq!(command.json()["error"]["rule"], "invalid_arguments");
    unharmed(&server, 1);
}

#[test]
fn a_wrong_content_type_is_415_naming_the_expected_types() {
    let (_dir, server) = started(&[]);
    let body = events("w", "s1", 0..1);
    for (path, content_type) in [
        ("/v1/events", "application/x-www-form-urlencoded"),
        ("/v1/events", "text/html; charset=utf-8"),
        ("/v1/events", "multipart/form-data; boundary=x"),
        ("/v1/commands/create_task", "text/plain"),
    ] {
        let refused = raw(
            &server,
            &request(
                &format!("POST {path} HTTP/1.1"),
                &[&format!("Content-Type: {content_type}")],
                body.as_bytes(),
            ),
        );
        assert_eq!(refused.status, 415, "{content_type}: {}", refused.body);
        let error = &refused.json()["error"];
        assert_eq!(error["kind"], "unsupported_media_type");
        assert_eq!(
            error["expected"],
            serde_json::json!([
                "application/x-ndjson",
                "application/jsonl",
                "application/json"
            ])
        );
        assert!(
            refused
                .headers
                .contains("accept: application/x-ndjson, application/jsonl, application/json"),
            "{}",
            refused.headers
        );
    }
    // The types it takes, with parameters and in any case.
    for content_type in ["application/x-ndjson; charset=utf-8", "Application/JSONL"] {
        let ok = raw(
            &server,
            &request(
                "POST /v1/events HTTP/1.1",
                &[&format!("Content-Type: {content_type}")],
                events("w", "s1", 0..1).as_bytes(),
            ),
        );
        assert_eq!(ok.status, 200, "{content_type}: {}", ok.body);
    }
    assert!(
        metrics(&server).contains("journal_refusals_total{reason=\"unsupported_media_type\"} 4")
    );
    unharmed(&server, 2);
}

#[test]
fn an_oversized_body_is_413_without_being_read() {
    let (_dir, server) = started(&[]);
    // Declared: refused by its Content-Length, though not one byte of it is sent.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .write_all(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1099511627776\r\n\r\n")
        .unwrap();
    let declared = parse(&read_to_close(&mut stream, Duration::from_secs(10)));
    assert_eq!(
        (declared.status, declared.kind()),
        (413, "too_large".into())
    );
    // Chunked, no length declared: cut once past the limit (4 MiB for a command).
    let mut body = Vec::new();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..5 {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(&chunk);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let mut chunked = request(
        "POST /v1/commands/create_task HTTP/1.1",
        &["Transfer-Encoding: chunked"],
        b"",
    );
    chunked.extend_from_slice(&body);
    let refused = raw(&server, &chunked);
    assert_eq!((refused.status, refused.kind()), (413, "too_large".into()));
    unharmed(&server, 1);
}

#[test]
fn oversized_headers_are_431_and_huge_query_values_414() {
    let (_dir, server) = started(&[]);
    let big = "a".repeat(20_000);
    let headers = raw(
        &server,
        &request("GET /healthz HTTP/1.1", &[&format!("X-Big: {big}")], b""),
    );
    assert_eq!(
        (headers.status, headers.kind()),
        (431, "headers_too_large".into())
    );
    // Past the head hyper reads at all: a bare 431, and the connection closed.
    let huge = "a".repeat(200_000);
    let head_too_large = raw(
        &server,
        &request("GET /healthz HTTP/1.1", &[&format!("X-Big: {huge}")], b""),
    );
    assert_eq!(head_too_large.status, 431);
    // Many small headers: over hyper's count of 100, or over the bytes.
    let many: Vec<String> = (0..200).map(|i| format!("X-H{i}: {i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(
        raw(&server, &request("GET /healthz HTTP/1.1", &many, b"")).status,
        431
    );

    let query = raw(
        &server,
        &request(&format!("GET /v1/events?session={big} HTTP/1.1"), &[], b""),
    );
    assert_eq!((query.status, query.kind()), (414, "uri_too_long".into()));
    let value = "s".repeat(100_000);
    let huge_query = raw(
        &server,
        &request(
            &format!("GET /v1/events?session={value} HTTP/1.1"),
            &[],
            b"",
        ),
    );
    assert_eq!(huge_query.status, 414, "{huge_query:?}");
    // A huge query on an append: refused before the body is looked at.
    let append = raw(
        &server,
        &request(
            &format!("POST /v1/events?expectedVersion={value} HTTP/1.1"),
            &[],
            events("q", "s1", 0..1).as_bytes(),
        ),
    );
    assert_eq!(append.status, 414);
    let text = metrics(&server);
    assert!(
        text.contains("journal_refusals_total{reason=\"headers_too_large\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("journal_refusals_total{reason=\"uri_too_long\"} 1"),
        "{text}"
    );
    unharmed(&server, 1);
}

#[test]
fn dot_dot_and_nul_path_segments_read_no_file() {
    let (_dir, server) = started(&[]);
    for path in [
        "/../../../../etc/passwd",
        "/v1/../../etc/passwd",
        "/v1/%2e%2e/%2e%2e/etc/passwd",
        "/v1/models/session/..",
        "/v1/models/..%2f..%2f..%2fetc%2fpasswd/x",
        "/v1/models/session/a%00b",
        "/v1/models/%00/%00",
        "/healthz%00",
        "/v1/events/%00",
    ] {
        let answer = raw(&server, &request(&format!("GET {path} HTTP/1.1"), &[], b""));
        assert!(
            [400, 404].contains(&answer.status),
            "{path}: {} {}",
            answer.status,
            answer.body
        );
        assert!(
            answer.json()["error"]["kind"].is_string(),
            "{path}: {}",
            answer.body
        );
        assert!(!answer.body.contains("root:"), "{path}: {}", answer.body);
    }
    let post = raw(
        &server,
        &request(
            "POST /v1/events/../events HTTP/1.1",
            &[],
            events("p", "s1", 0..1).as_bytes(),
        ),
    );
    assert!([400, 404, 405].contains(&post.status), "{post:?}");
    unharmed(&server, 1);
}

/// Whether the server closed `stream` within `limit`: a read ends (or fails as reset) rather
/// than time out.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_slowloris_head_and_an_idle_connection_are_closed_after_the_read_timeout() {
    let (_dir, server) = started(&["--read-timeout-ms", "500"]);
    // One byte every 200 ms of a head that never ends.
    let mut slow = TcpStream::connect(&server.addr).unwrap();
    let mut writer = slow.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for b in b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
            if writer.write_all(&[*b]).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    });
    // A connection that says nothing at all (half-open, as far as the server can tell).
    let mut idle = TcpStream::connect(&server.addr).unwrap();
    // Meanwhile the server answers others.
    unharmed(&server, 1);
    assert!(
        closed_within(&mut slow, Duration::from_secs(8)),
        "the slowloris is cut"
    );
    assert!(
        closed_within(&mut idle, Duration::from_secs(8)),
        "the idle connection is closed"
    );
    assert!(
        trickle.join().unwrap(),
        "the slow writer saw its connection closed"
    );
    unharmed(&server, 1);
    // Logged with why (by a thread of its own: the lines may come a little later).
    let logged = (0..50).any(|_| {
        let log = server.log();
        let n = log
            .matches("connection closed: read header from client timeout")
            .count();
        if n < 2 {
            std::thread::sleep(Duration::from_millis(100));
        }
        n >= 2
    });
    assert!(logged, "{}", server.log());
}

#[test]
fn a_trickling_body_is_cut_with_408() {
    let (_dir, server) = started(&["--read-timeout-ms", "500"]);
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .write_all(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 400\r\n\r\n{")
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..20 {
            if writer.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let answer = parse(&read_to_close(&mut stream, Duration::from_secs(8)));
    assert_eq!(
        (answer.status, answer.kind()),
        (408, "timeout".into()),
        "{answer:?}"
    );
    assert!(
        answer.headers.contains("connection: close"),
        "{}",
        answer.headers
    );
    assert!(answer.body.contains("--read-timeout-ms"), "{}", answer.body);
    drop(stream);
    trickle.join().unwrap();
    assert!(metrics(&server).contains("journal_refusals_total{reason=\"timeout\"} 1"));
    unharmed(&server, 1);
}

/// Opens an event stream on a raw connection; its response head's status.
fn subscribe(server: &Server) -> (u16, TcpStream, String) {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .write_all(b"GET /v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let parsed = parse(&head);
    let mut body = String::new();
    if parsed.status != 200 {
        let length = parsed
            .headers
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut bytes = vec![0u8; length];
        stream.read_exact(&mut bytes).unwrap();
        body = String::from_utf8(bytes).unwrap();
    }
    (parsed.status, stream, body)
}

#[test]
fn a_subscriber_over_the_cap_is_503_naming_it() {
    let (_dir, server) = started(&["--max-subscribers", "2", "--heartbeat-ms", "100"]);
    let (first, first_stream, _) = subscribe(&server);
    let (second, _second_stream, _) = subscribe(&server);
    assert_eq!((first, second), (200, 200));
    let (third, _third_stream, body) = subscribe(&server);
    assert_eq!(third, 503, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["kind"], "too_many_subscribers");
    assert_eq!(error["error"]["maxSubscribers"], 2);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-subscribers"));
    let text = metrics(&server);
    assert!(
        text.contains("journal_refusals_total{reason=\"too_many_subscribers\"} 1"),
        "{text}"
    );
    assert!(text.contains("journal_subscribers 2"), "{text}");
    // A subscriber that leaves gives its place back (once a heartbeat finds it gone).
    drop(first_stream);
    let mut again = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let (status, stream, _) = subscribe(&server);
        if status == 200 {
            again = status;
            drop(stream);
            break;
        }
    }
    assert_eq!(again, 200, "a place is free again");
    unharmed(&server, 1);
}

#[test]
fn connections_over_the_cap_are_503_and_closed() {
    let (_dir, server) = started(&["--max-connections", "3"]);
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    // The server has accepted the three once it refuses a fourth.
    let mut refused = None;
    for _ in 0..50 {
        let answer = raw(&server, &request("GET /healthz HTTP/1.1", &[], b""));
        if answer.status == 503 {
            refused = Some(answer);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = refused.expect("a connection over the cap is refused");
    assert_eq!(refused.kind(), "too_many_connections");
    assert!(
        refused.body.contains("--max-connections"),
        "{}",
        refused.body
    );
    drop(held);
    // The places come back as soon as the server sees the connections closed.
    let mut healthy = false;
    for _ in 0..50 {
        if raw(&server, &request("GET /healthz HTTP/1.1", &[], b"")).status == 200 {
            healthy = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(healthy);
    assert!(metrics(&server).contains("journal_refusals_total{reason=\"too_many_connections\"}"));
    unharmed(&server, 1);
}
