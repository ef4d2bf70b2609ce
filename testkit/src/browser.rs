//! A headless Chromium driven through the DevTools protocol (JSON over one WebSocket, with
//! `tungstenite`): Debian's `chromium` launched with a throwaway profile, its page attached;
//! navigate, time a page load, evaluate script, click where an element is, take screenshots,
//! and keep every event the browser sent (so every network request the page made). Network
//! access other than the loopback is refused by the browser's flags.
#![allow(
    clippy::disallowed_methods,
    reason = "a browser is waited for in real time"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::Res;

/// Debian's Chromium, as `.ci/run` installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long a command or an awaited event may take.
const PATIENCE: Duration = Duration::from_secs(120);

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

/// What the browser timed of one page load, in milliseconds from the navigation's start.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageTimes {
    /// The last byte of the answer.
    pub response_end: f64,
    /// The first text or picture painted, when the browser reported it.
    pub first_paint: Option<f64>,
    /// The load event's end: the page parsed, laid out, its assets and script run.
    pub loaded: f64,
}

/// Whether Chromium is installed where [`Browser::launch`] looks.
#[must_use]
pub fn installed() -> bool {
    Path::new(CHROMIUM).exists()
}

impl Browser {
    /// Starts Chromium headless, `width` × `height`, and attaches to its page with the page,
    /// runtime and network domains on.
    ///
    /// # Errors
    /// Chromium is not installed, does not start, or its DevTools endpoint does not answer.
    pub fn launch(width: u32, height: u32) -> Res<Browser> {
        if !installed() {
            return Err(format!(
                "{CHROMIUM} is missing: install Debian's `chromium` package (.ci/run does)"
            )
            .into());
        }
        let profile = tempfile::tempdir()?;
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
            .spawn()?;
        let ws = match attach(&mut child) {
            Ok(ws) => ws,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let mut browser = Browser {
            child,
            ws,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        for domain in ["Page.enable", "Runtime.enable", "Network.enable"] {
            browser.call(domain, json!({}))?;
        }
        Ok(browser)
    }

    /// Sends a command and waits for its answer (keeping the events that come before it).
    ///
    /// # Errors
    /// The connection's, or the browser's answer to the command.
    pub fn call(&mut self, method: &str, params: Value) -> Res<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(message))?;
        loop {
            let Message::Text(text) = self.ws.read()? else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str())?;
            if value["id"] == id {
                if let Some(e) = value.get("error") {
                    return Err(format!("DevTools {method}: {e}").into());
                }
                return Ok(value["result"].clone());
            }
            self.events.push(value);
        }
    }

    /// Opens `url` and waits for its load event.
    ///
    /// # Errors
    /// The browser's, or no load event in time.
    pub fn navigate(&mut self, url: &str) -> Res<()> {
        let seen = self.events.len();
        self.call("Page.navigate", json!({"url": url}))?;
        self.wait_for_event("Page.loadEventFired", seen)
    }

    /// Opens `url`, waits for its load event, and reads the browser's timings of it.
    ///
    /// # Errors
    /// The browser's.
    pub fn load(&mut self, url: &str) -> Res<PageTimes> {
        self.navigate(url)?;
        let v = self.eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0];
               const p = performance.getEntriesByName('first-contentful-paint')[0];
               return [n.responseEnd, p ? p.startTime : null, n.loadEventEnd || performance.now()]; })()",
        )?;
        let at = |i: usize| v.get(i).and_then(Value::as_f64).unwrap_or(0.0);
        Ok(PageTimes {
            response_end: at(0),
            first_paint: v.get(1).and_then(Value::as_f64),
            loaded: at(2),
        })
    }

    /// Waits for an event named `method` after the first `seen` events.
    ///
    /// # Errors
    /// The browser's, or none in time.
    pub fn wait_for_event(&mut self, method: &str, seen: usize) -> Res<()> {
        let deadline = Instant::now() + PATIENCE;
        while !self
            .events
            .get(seen.min(self.events.len())..)
            .unwrap_or_default()
            .iter()
            .any(|e| e["method"] == method)
        {
            if Instant::now() > deadline {
                return Err(format!("no {method} in {PATIENCE:?}").into());
            }
            // A cheap command lets the events queued before its answer in.
            self.call("Runtime.evaluate", json!({"expression": "0"}))?;
        }
        Ok(())
    }

    /// The value of a script expression (awaited when it is a promise).
    ///
    /// # Errors
    /// The browser's, or the script's exception.
    pub fn eval(&mut self, expression: &str) -> Res<Value> {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(exception) = answer.get("exceptionDetails") {
            return Err(format!("{expression}: {exception}").into());
        }
        Ok(answer["result"]["value"].clone())
    }

    /// Waits until `expression` is true; how long it took.
    ///
    /// # Errors
    /// The browser's, or not true within `limit`.
    pub fn wait_until(&mut self, expression: &str, limit: Duration) -> Res<Duration> {
        let started = Instant::now();
        loop {
            if self.eval(expression)? == json!(true) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > limit {
                return Err(format!("not true within {limit:?}: {expression}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Clicks the middle of the element `selector` finds, as a mouse would (scrolled into
    /// view first).
    ///
    /// # Errors
    /// The browser's, or no such element.
    pub fn click(&mut self, selector: &str) -> Res<()> {
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center'}});
               const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            sel = json!(selector)
        ))?;
        let (Some(x), Some(y)) = (at[0].as_f64(), at[1].as_f64()) else {
            return Err(format!("no place to click for {selector}: {at}").into());
        };
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )?;
        }
        Ok(())
    }

    /// Saves a PNG of the page as `{dir}/{name}.png`.
    ///
    /// # Errors
    /// The browser's, or writing the file.
    pub fn screenshot(&mut self, dir: &Path, name: &str) -> Res<PathBuf> {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        )?;
        let data = shot["data"].as_str().ok_or("a screenshot without data")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(data)?;
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes)?;
        Ok(path)
    }

    /// Every URL the page asked for (`Network.requestWillBeSent`).
    #[must_use]
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_string))
            .collect()
    }
}

/// Reads the DevTools endpoint Chromium prints, then attaches to its page.
fn attach(child: &mut Child) -> Res<WebSocket<MaybeTlsStream<TcpStream>>> {
    let mut stderr = BufReader::new(child.stderr.take().ok_or("chromium has no stderr")?);
    let mut line = String::new();
    let endpoint = loop {
        line.clear();
        if stderr.read_line(&mut line)? == 0 {
            return Err("chromium exited before its DevTools endpoint was up".into());
        }
        if let Some(at) = line.find("ws://") {
            break line.get(at..).unwrap_or_default().trim().to_string();
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
        .unwrap_or_default()
        .to_string();
    let pages: Value = serde_json::from_slice(&get(&format!("127.0.0.1:{port}"), "/json/list")?)?;
    let page = pages
        .as_array()
        .and_then(|p| p.iter().find(|p| p["type"] == "page"))
        .and_then(|p| p["webSocketDebuggerUrl"].as_str())
        .ok_or("chromium lists no page")?
        .to_string();
    let (ws, _) = tungstenite::connect(page.as_str())?;
    if let MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(PATIENCE))?;
    }
    Ok(ws)
}

/// The body of `GET path` from `addr`: as long as its `Content-Length` says (Chromium keeps
/// the connection open), or to the connection's end.
fn get(addr: &str, path: &str) -> Res<Vec<u8>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        if let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(answer.get(..split).unwrap_or_default())
                .to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let body = split + 4;
            if let Some(end) = length.map(|length| body + length) {
                if answer.len() >= end {
                    return Ok(answer.get(body..end).unwrap_or_default().to_vec());
                }
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            let split = answer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .ok_or_else(|| format!("GET {path}: the connection closed inside the head"))?;
            return Ok(answer.get(split + 4..).unwrap_or_default().to_vec());
        }
        answer.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
}
