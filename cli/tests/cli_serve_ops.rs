//! `journal serve`'s operations, through a real server process: a token revoked with `journal
//! token revoke` is refused by the running server within about a second, and SIGHUP reads the
//! tokens file again without stopping it; `--log-format json` logs each request as a JSON
//! object with its method, path, status and latency, and never the token or a query value;
//! `--tls-cert`/`--tls-key` serve HTTPS (a certificate made at test time), and one without the
//! other is refused at start.

mod common;
mod serving;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::journal;
use serde_json::Value;
use serving::{get, Server};

/// Creates a token; the token and its id.
fn token(dir: &Path, scope: &str) -> (String, String) {
    let out = journal(dir)
        .args(["token", "create", "--scope", scope])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        created["token"].as_str().unwrap().to_string(),
        created["id"].as_str().unwrap().to_string(),
    )
}

/// Polls `/v1/status` with `token` every 100 ms until it is answered `status`; how many polls
/// that took, or `None` after about 5 s.
fn until_status(server: &Server, token: &str, status: u16) -> Option<usize> {
    (0..50).find(|_| {
        let seen = get(&server.url("/v1/status"), Some(token)).status == status;
        if !seen {
            std::thread::sleep(Duration::from_millis(100));
        }
        seen
    })
}

#[test]
fn a_revoked_token_is_refused_by_the_running_server_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let (revoked, revoked_id) = token(dir.path(), "read");
    let (kept, _) = token(dir.path(), "read");
    let server = Server::start(dir.path(), &[]);
    assert_eq!(get(&server.url("/v1/status"), Some(&revoked)).status, 200);

    let out = journal(dir.path())
        .args(["token", "revoke", &revoked_id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let polls = until_status(&server, &revoked, 401).expect("the revoked token is refused");
    assert!(polls <= 30, "refused after {polls} polls of 100 ms");
    assert_eq!(get(&server.url("/v1/status"), Some(&kept)).status, 200);

    // A token created while the server runs is taken too.
    let (added, _) = token(dir.path(), "read");
    until_status(&server, &added, 200).expect("the new token is accepted");

    // SIGHUP reads the file again, and does not stop the server.
    server.signal("-HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&server.url("/healthz"), None).status, 200);
    assert_eq!(get(&server.url("/v1/status"), Some(&kept)).status, 200);
    assert_eq!(get(&server.url("/v1/status"), Some(&revoked)).status, 401);

    // A tokens file that is gone refuses every token rather than keep the old ones.
    std::fs::remove_file(dir.path().join("tokens.json")).unwrap();
    until_status(&server, &kept, 401).expect("no token is accepted without the file");
    let (code, log) = server.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("read again: 1 token(s) accepted"), "{log}");
    assert!(log.contains("is gone; every token is refused"), "{log}");
}

/// The log's lines that parse as JSON objects; panics on a line that does not.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{log}")))
        .collect()
}

#[test]
fn log_format_json_logs_each_request_with_its_fields_and_never_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, _) = token(dir.path(), "read");
    let server = Server::start(dir.path(), &["--log-format", "json"]);
    let secret_query = "s3cr3t-session-value";
    let read = get(
        &server.url(&format!("/v1/events?session={secret_query}")),
        Some(&reader),
    );
    assert_eq!(read.status, 200, "{}", read.body);
    let wrong = "jt_0123456789abcdef-not-a-token";
    assert_eq!(get(&server.url("/v1/status"), Some(wrong)).status, 401);

    let (code, log) = server.terminate();
    assert_eq!(code, Some(0), "{log}");
    let lines = json_lines(&log);
    let request = lines
        .iter()
        .find(|l| l["message"] == "request" && l["path"] == "/v1/events")
        .unwrap_or_else(|| panic!("no request line in\n{log}"));
    assert_eq!(request["method"], "GET");
    assert_eq!(request["status"], 200);
    assert_eq!(request["target"], "journal::request");
    assert_eq!(request["level"], "INFO");
    assert!(request["latency_ms"].as_f64().unwrap() >= 0.0, "{request}");
    assert!(request["timestamp"].is_string(), "{request}");
    assert!(request["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    let refused = lines
        .iter()
        .find(|l| l["message"] == "refused")
        .unwrap_or_else(|| panic!("no refused line in\n{log}"));
    assert_eq!(
        (&refused["path"], &refused["status"], &refused["refused"]),
        (
            &Value::from("/v1/status"),
            &Value::from(401),
            &Value::from("unauthorized")
        )
    );
    assert!(
        refused["reason"].as_str().unwrap().contains("not known"),
        "{refused}"
    );
    // The start and stop notes are JSON too.
    assert!(lines.iter().any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("listening on http://"))));
    for secret in [reader.as_str(), wrong, secret_query] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
}

/// A CA and a certificate it signed for `localhost` and 127.0.0.1: (CA certificate DER,
/// certificate PEM, key PEM).
fn certificate() -> (Vec<u8>, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    (
        ca_cert.der().to_vec(),
        leaf_cert.pem(),
        leaf_key.serialize_pem(),
    )
}

/// `GET path` over TLS to `addr`, trusting `ca` only; the response as text.
fn https_get(addr: &str, ca: &[u8], path: &str) -> String {
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut response = Vec::new();
    // A peer that closes without close_notify ends the read with an error after the response.
    let _ = tls.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[test]
fn tls_serves_https_with_the_given_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert_pem, key_pem) = certificate();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&key, key_pem).unwrap();
    let journal_dir = dir.path().join("journal");
    let server = Server::start_with(
        &journal_dir,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        "https",
    );
    let response = https_get(&server.addr, &ca, "/healthz");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("\"ok\":true"), "{response}");
    // Plain HTTP on the TLS port gets no answer, and the server goes on.
    let mut plain = TcpStream::connect(&server.addr).unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let answer = serving::read_to_close(&mut plain, Duration::from_secs(5));
    assert!(!String::from_utf8_lossy(&answer).contains("\"ok\":true"));
    assert!(https_get(&server.addr, &ca, "/healthz").starts_with("HTTP/1.1 200 OK\r\n"));
    let (code, log) = server.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("TLS on: certificate"), "{log}");
    assert!(log.contains("listening on https://"), "{log}");
}

#[test]
fn tls_flags_are_refused_at_start_when_incomplete_or_unusable() {
    let dir = tempfile::tempdir().unwrap();
    let journal_dir = dir.path().join("journal");
    let (_, cert_pem, _) = certificate();
    let cert = dir.path().join("cert.pem");
    std::fs::write(&cert, cert_pem).unwrap();
    let start = |args: &[&str]| {
        journal(&journal_dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap()
    };
    let cert_only = start(&["--tls-cert", cert.to_str().unwrap()]);
    assert_eq!(cert_only.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&cert_only.stderr);
    assert!(
        stderr.contains("--tls-cert and --tls-key go together"),
        "{stderr}"
    );
    let key_only = start(&["--tls-key", cert.to_str().unwrap()]);
    assert_eq!(key_only.status.code(), Some(2));
    // A key file that holds no key.
    let no_key = start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        cert.to_str().unwrap(),
    ]);
    assert_eq!(no_key.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&no_key.stderr);
    assert!(
        stderr.contains("TLS private key") && stderr.contains("cert.pem"),
        "{stderr}"
    );
    let missing = start(&[
        "--tls-cert",
        "/nonexistent/cert.pem",
        "--tls-key",
        "/nonexistent/key.pem",
    ]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/cert.pem"));
    // Refused before anything is opened: no journal was created.
    assert!(!journal_dir.exists());
}
