//! A headless Chromium for the app workload, driven through the DevTools protocol (JSON over
//! one WebSocket): it opens a page and reports the browser's own timings of it (navigation
//! timing and first contentful paint). Debian's `/usr/bin/chromium`; the workload leaves the
//! browser's figures out when it is not installed.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use super::Res;

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A browser with one page; killed when dropped.
pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    events: Vec<Value>,
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

impl Browser {
    /// Starts Chromium headless, when it is installed.
    ///
    /// # Errors
    /// Chromium does not start or its DevTools endpoint does not answer.
    pub fn launch() -> Res<Option<Browser>> {
        if !Path::new(CHROMIUM).exists() {
            return Ok(None);
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
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--proxy-bypass-list=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1400,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stderr = BufReader::new(child.stderr.take().ok_or("no stderr")?);
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
        let addr = format!("127.0.0.1:{port}").parse()?;
        let (_, list) = super::app::get(addr, "/json/list")?;
        let pages: Value = serde_json::from_slice(&list)?;
        let page = pages
            .as_array()
            .and_then(|p| p.iter().find(|p| p["type"] == "page"))
            .and_then(|p| p["webSocketDebuggerUrl"].as_str())
            .ok_or("chromium lists no page")?
            .to_string();
        let (ws, _) = tungstenite::connect(page.as_str())?;
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(120)))?;
        }
        let mut browser = Browser {
            child,
            ws,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        browser.call("Page.enable", json!({}))?;
        Ok(Some(browser))
    }

    /// Opens `url`, waits for its load event, and reads the browser's timings of it.
    ///
    /// # Errors
    /// The browser's.
    pub fn load(&mut self, url: &str) -> Res<PageTimes> {
        self.events.clear();
        self.call("Page.navigate", json!({"url": url}))?;
        while !self
            .events
            .iter()
            .any(|e| e["method"] == "Page.loadEventFired")
        {
            let Message::Text(text) = self.ws.read()? else {
                continue;
            };
            self.events.push(serde_json::from_str(text.as_str())?);
        }
        let times = self.call(
            "Runtime.evaluate",
            json!({"returnByValue": true, "expression":
                "(() => { const n = performance.getEntriesByType('navigation')[0];
                   const p = performance.getEntriesByName('first-contentful-paint')[0];
                   return [n.responseEnd, p ? p.startTime : null, n.loadEventEnd || performance.now()]; })()"}),
        )?;
        let v = &times["result"]["value"];
        let at = |i: usize| v.get(i).and_then(Value::as_f64).unwrap_or(0.0);
        Ok(PageTimes {
            response_end: at(0),
            first_paint: v.get(1).and_then(Value::as_f64),
            loaded: at(2),
        })
    }

    fn call(&mut self, method: &str, params: Value) -> Res<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params});
        self.ws.send(Message::text(message.to_string()))?;
        self.answer(id)
    }

    fn answer(&mut self, id: u64) -> Res<Value> {
        loop {
            let Message::Text(text) = self.ws.read()? else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str())?;
            if value["id"] == id {
                if let Some(e) = value.get("error") {
                    return Err(format!("DevTools: {e}").into());
                }
                return Ok(value["result"].clone());
            }
            self.events.push(value);
        }
    }
}
