//! The app workload: how fast the review app answers and renders. For sessions of 1,000,
//! 10,000 and 100,000 events (each in a journal of its own, served by `journal_server` in this
//! process with its read models caught up), the server's answer time for the session's page
//! (its first screen: the narrative is paged) and Chromium's time to finish rendering it (the
//! load event, and the first contentful paint); then the sessions list of 10,000 sessions, the
//! first answer (which reads the log into the list's rows) and the next ones. Targets
//! (`docs/PERFORMANCE.md`): a 10,000-event session rendered under 1 s, a 100,000-event
//! session's first screen under 1 s, the list of 10,000 sessions under 500 ms.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use journal_engine::AppendOptions;
use journal_projections::workload;
use serde_json::{json, Value};

use super::http::server::Served;
use super::{Context, Res, Section};
use journal_testkit::browser::{self, Browser};

/// `GET path` on `addr` over a connection of its own: how long until the whole answer was
/// read, and its body.
///
/// # Errors
/// I/O errors, or an answer that is not `200`.
pub fn get(addr: SocketAddr, path: &str) -> Res<(Duration, Vec<u8>)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    // Read the head, then the body: as long as `Content-Length` says (a server may keep the
    // connection open), or to the end.
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 << 10];
    let (split, length) = loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(format!("GET {path}: the connection closed before the head ended").into());
        }
        answer.extend_from_slice(buf.get(..n).unwrap_or_default());
        if let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head =
                String::from_utf8_lossy(answer.get(..split).unwrap_or_default()).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            break (split, length);
        }
    };
    match length {
        Some(length) => {
            while answer.len() < split + 4 + length {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                answer.extend_from_slice(buf.get(..n).unwrap_or_default());
            }
        }
        None => {
            stream.read_to_end(&mut answer)?;
        }
    }
    let took = started.elapsed();
    let head = String::from_utf8_lossy(answer.get(..split).unwrap_or_default());
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("GET {path}: {}", head.lines().next().unwrap_or("")).into());
    }
    Ok((took, answer.get(split + 4..).unwrap_or_default().to_vec()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Serves a journal of `events` (made by `make`) and waits for its read models.
fn serve(
    ctx: &Context,
    name: &str,
    events: Vec<journal_format::Envelope>,
) -> Res<(Served, std::path::PathBuf)> {
    let dir = ctx.fresh_dir(name)?;
    let journal = super::buffered_journal(&dir)?;
    for chunk in events.chunks(1000) {
        journal.append_batch_blocking(chunk, AppendOptions::default())?;
    }
    let head = journal.head().position.0;
    journal.close();
    let served = Served::start(&dir)?;
    get(
        served.addr,
        &format!("/v1/models/session/sess_00000?minPosition={head}&timeoutMs=600000"),
    )?;
    Ok((served, dir))
}

/// The answer and render times of `path`: the first answer, the median of the next, the
/// answer's size, and the browser's median timings.
fn measure(
    ctx: &Context,
    served: &Served,
    browser: Option<&mut Browser>,
    path: &str,
) -> Res<Value> {
    let (first, body) = get(served.addr, path).map_err(|e| format!("GET {path}: {e}"))?;
    let mut answers: Vec<f64> = Vec::new();
    for _ in 0..ctx.rounds.max(1) {
        answers.push(ms(get(served.addr, path)?.0));
    }
    let mut figures = json!({
        "firstAnswerMs": ms(first),
        "answerMs": super::stats::median(&mut answers),
        "bytes": body.len(),
    });
    if let Some(b) = browser {
        let url = format!("http://{}{path}", served.addr);
        let (mut paint, mut loaded) = (Vec::new(), Vec::new());
        for _ in 0..ctx.rounds.max(1) {
            let t = b
                .load(&url)
                .map_err(|e| format!("chromium loading {url}: {e}"))?;
            paint.extend(t.first_paint);
            loaded.push(t.loaded);
        }
        if !paint.is_empty() {
            figures["firstPaintMs"] = json!(super::stats::median(&mut paint));
        }
        figures["renderedMs"] = json!(super::stats::median(&mut loaded));
    }
    Ok(figures)
}

/// Runs the app workload.
///
/// # Errors
/// The journal's, the server's or the browser's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let sizes: [usize; 3] = if ctx.quick {
        [300, 1_000, 3_000]
    } else {
        [1_000, 10_000, 100_000]
    };
    let sessions: usize = if ctx.quick { 300 } else { 10_000 };
    let mut browser = browser::installed()
        .then(|| Browser::launch(1400, 1000))
        .transpose()
        .map_err(|e| format!("starting chromium: {e}"))?;
    let mut out = String::new();
    writeln!(
        out,
        "{:<34} {:>10} {:>10} {:>10} {:>11} {:>10}",
        "page", "first ms", "answer ms", "KB", "painted ms", "loaded ms"
    )?;
    let mut rows = Vec::new();
    let line = |out: &mut String, what: String, f: &Value| -> Res<()> {
        let get = |k: &str| f[k].as_f64().map_or("—".to_string(), |v| format!("{v:.0}"));
        writeln!(
            out,
            "{what:<34} {:>10} {:>10} {:>10.0} {:>11} {:>10}",
            get("firstAnswerMs"),
            get("answerMs"),
            f["bytes"].as_f64().unwrap_or(0.0) / 1024.0,
            get("firstPaintMs"),
            get("renderedMs"),
        )?;
        Ok(())
    };
    for size in sizes {
        let (served, dir) = serve(ctx, &format!("app-{size}"), workload::generate(11, 1, size))?;
        let mut f = measure(ctx, &served, browser.as_mut(), "/sessions/sess_00000")
            .map_err(|e| format!("the session of {size} events: {e}"))?;
        f["events"] = json!(size);
        line(&mut out, format!("session of {size} events"), &f)?;
        rows.push(f);
        served.stop()?;
        std::fs::remove_dir_all(&dir)?;
    }
    let (served, dir) = serve(
        ctx,
        "app-list",
        workload::generate(13, sessions, sessions * 10),
    )?;
    let mut list = measure(ctx, &served, browser.as_mut(), "/")?;
    list["sessions"] = json!(sessions);
    line(&mut out, format!("list of {sessions} sessions"), &list)?;
    let mut failed = measure(ctx, &served, None, "/?failed=1&q=sess_000")?;
    failed["sessions"] = json!(sessions);
    line(&mut out, "  filtered: failed, searched".into(), &failed)?;
    served.stop()?;
    std::fs::remove_dir_all(&dir)?;
    if browser.is_none() {
        writeln!(
            out,
            "(no {}: the browser's figures are left out)",
            browser::CHROMIUM
        )?;
    }
    Ok(Section {
        name: "app",
        text: out,
        json: json!({"sessions": rows, "list": list, "listFiltered": failed, "browser": browser.is_some()}),
    })
}
