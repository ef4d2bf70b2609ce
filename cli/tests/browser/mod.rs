//! A headless Chromium driven through the DevTools protocol (JSON over one WebSocket, with
//! `tungstenite`): launch Debian's `chromium` with a throwaway profile, attach to its page,
//! navigate, evaluate script, click where an element is, take screenshots, and keep every
//! network request the page made. Network access other than the loopback is refused by the
//! browser's flags; the tests check the requests anyway.
#![allow(dead_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "a browser test waits for a page in real time"
)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// Debian's Chromium, as `.ci/run` installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A browser with one page; killed when dropped.
pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// Every event the browser sent, in order.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where screenshots go: `target/screenshots/`.
pub fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    /// Starts Chromium headless, `width` × `height`, and attaches to its page with the page,
    /// runtime and network domains on.
    pub fn launch(width: u32, height: u32) -> Browser {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: install Debian's `chromium` package (.ci/run does)"
        );
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--proxy-bypass-list=127.0.0.1",
                "--remote-debugging-port=0",
                "--hide-scrollbars",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let endpoint = loop {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "chromium exited");
            if let Some(at) = line.find("ws://") {
                break line[at..].trim().to_string();
            }
        };
        // Keep reading its standard error, so that a full pipe never stalls it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        let port = endpoint
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let pages: Value = serde_json::from_str(
            &crate::serving::get(&format!("http://127.0.0.1:{port}/json/list"), None).body,
        )
        .unwrap();
        let page = pages
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "page")
            .expect("a page")["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .to_string();
        let (ws, _) = tungstenite::connect(page.as_str()).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        let mut browser = Browser {
            child,
            ws,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        for domain in ["Page.enable", "Runtime.enable", "Network.enable"] {
            browser.call(domain, json!({}));
        }
        browser
    }

    /// Sends a command and waits for its answer (keeping the events that come before it).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(message)).unwrap();
        loop {
            let Message::Text(text) = self.ws.read().unwrap() else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str()).unwrap();
            if value["id"] == id {
                assert!(value.get("error").is_none(), "{method}: {value}");
                return value["result"].clone();
            }
            self.events.push(value);
        }
    }

    /// Opens `url` and waits for its load event.
    pub fn navigate(&mut self, url: &str) {
        let seen = self.events.len();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for_event("Page.loadEventFired", seen);
    }

    /// Waits for an event named `method` after the first `seen` events.
    pub fn wait_for_event(&mut self, method: &str, seen: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.events[seen.min(self.events.len())..]
            .iter()
            .any(|e| e["method"] == method)
        {
            assert!(Instant::now() < deadline, "no {method} in 30 s");
            // A cheap command lets the events queued before its answer in.
            self.call("Runtime.evaluate", json!({"expression": "0"}));
        }
    }

    /// The value of a script expression (awaited when it is a promise).
    pub fn eval(&mut self, expression: &str) -> Value {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            answer.get("exceptionDetails").is_none(),
            "{expression}: {answer}"
        );
        answer["result"]["value"].clone()
    }

    /// Waits until `expression` is true; how long it took.
    pub fn wait_until(&mut self, expression: &str, limit: Duration) -> Duration {
        let started = Instant::now();
        loop {
            if self.eval(expression) == json!(true) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "not true within {limit:?}: {expression}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Clicks the middle of the element `selector` finds, as a mouse would (scrolled into
    /// view first).
    pub fn click(&mut self, selector: &str) {
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center'}});
               const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            sel = json!(selector)
        ));
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Saves a PNG of the whole page as `target/screenshots/{name}.png`.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        );
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        let path = screenshots_dir().join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// Every URL the page asked for (`Network.requestWillBeSent`).
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_string))
            .collect()
    }
}
