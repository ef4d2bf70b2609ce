//! Helpers of the tests that run a real `journal serve` (the built binary on `127.0.0.1:0`, its
//! bound address read from its first line of output): starting and stopping it, reading its
//! log, and a small HTTP client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::journal;

/// A running `journal serve`; killed when dropped. Its standard error is read as it comes (so
/// that a full pipe never stalls it) and kept.
pub struct Server {
    child: Child,
    pub base: String,
    /// `host:port`.
    pub addr: String,
    log: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(dir: &Path, args: &[&str]) -> Server {
        Server::start_with(dir, args, "http")
    }

    /// Starts a server whose URLs have `scheme` (`https` with `--tls-cert`).
    pub fn start_with(dir: &Path, args: &[&str], scheme: &str) -> Server {
        let mut child = journal(dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let kept = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                kept.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let listening: Value = serde_json::from_str(&first)
            .unwrap_or_else(|e| panic!("first line {first:?}: {e}; log: {}", log.lock().unwrap()));
        let addr = listening["listening"].as_str().unwrap().to_string();
        Server {
            child,
            base: format!("{scheme}://{addr}"),
            addr,
            log,
            reader: Some(reader),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What the server has written to standard error so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Sends SIGTERM; the exit code and standard error.
    pub fn terminate(mut self) -> (Option<i32>, String) {
        self.signal("-TERM");
        let status = wait(&mut self.child, Duration::from_secs(20));
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status.code(), self.log())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` to exit, for about `limit` (counted in sleeps: tests read no clock).
pub fn wait(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let step = Duration::from_millis(20);
    for _ in 0..=limit.as_millis() / step.as_millis() {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(step);
    }
    panic!("the server did not exit in time");
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// A response's status, headers we look at, and body.
pub struct Answer {
    pub status: u16,
    pub link: Option<String>,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn lines(&self) -> Vec<Value> {
        self.body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

pub fn answer(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let mut response = response.unwrap();
    Answer {
        status: response.status().as_u16(),
        link: response
            .headers()
            .get("link")
            .map(|v| v.to_str().unwrap().to_string()),
        body: response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap(),
    }
}

pub fn get(url: &str, token: Option<&str>) -> Answer {
    let mut request = agent().get(url);
    if let Some(t) = token {
        request = request.header("Authorization", format!("Bearer {t}"));
    }
    answer(request.call())
}

pub fn post(url: &str, token: Option<&str>, body: &str) -> Answer {
    let mut request = agent().post(url);
    if let Some(t) = token {
        request = request.header("Authorization", format!("Bearer {t}"));
    }
    answer(request.send(body))
}

pub fn event(id: &str, session: &str) -> String {
    json!({
        "type": "session.created",
        "eventId": id,
        "timestamp": "2026-05-11T10:00:00Z",
        "sessionId": session,
    })
    .to_string()
}

/// `n` events of session `session`, ids `{prefix}{i}`, as JSON Lines.
pub fn events(prefix: &str, session: &str, range: std::ops::Range<usize>) -> String {
    range
        .map(|i| event(&format!("{prefix}{i}"), session) + "\n")
        .collect()
}

/// The head position, by `/v1/digest`.
pub fn head(server: &Server) -> u64 {
    get(&server.url("/v1/digest"), None).json()["position"]
        .as_u64()
        .unwrap()
}

/// Creates a token with `journal token create`; the token.
pub fn create_token(dir: &Path, args: &[&str]) -> String {
    let out = journal(dir)
        .args(["token", "create"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    created["token"].as_str().unwrap().to_string()
}

/// Reads what is left of a response from `stream` until the server closes it or `limit`
/// passes; the bytes read.
pub fn read_to_close(stream: &mut std::net::TcpStream, limit: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    out
}
