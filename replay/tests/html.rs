//! The HTML replay: one self-contained file (the review app's session page, every step on it)
//! that renders every step in headless Chromium with no network, escapes what it shows, marks
//! approvals, gaps, incidents, observed and inferred steps, and draws a timeline whose bars
//! link to their steps.

use std::path::Path;
use std::process::Command;

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::{Envelope, Provenance};
use journal_projections::workload;
use journal_replay::{html, load, Scope};

const CHROMIUM: &str = "/usr/bin/chromium";

fn journal(dir: &Path, events: Vec<Envelope>) -> Journal {
    let journal = Journal::open(dir, Options::default()).unwrap();
    journal
        .append_batch_blocking(events, AppendOptions::default())
        .unwrap();
    journal
}

/// The DOM Chromium builds from `file`, with every network request refused.
fn dump_dom(file: &Path) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's `chromium` package (.ci/run does)"
    );
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_html_replay_renders_every_step_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let mut events = workload::generate(4, 1, 400);
    // Something to escape, an inferred step, and an approval never resolved.
    let mut hostile = Envelope::new("tool.started", "hostile", "2026-05-11T23:00:00Z");
    hostile.session_id = Some("sess_00000".into());
    hostile.tool_call_id = Some("c-hostile".into());
    hostile.payload = Some(serde_json::json!({"toolName": "<script>alert(1)</script>"}));
    events.push(hostile);
    let mut inferred = Envelope::new("task.progress", "inferred", "2026-05-11T23:00:01Z");
    inferred.session_id = Some("sess_00000".into());
    inferred.provenance = Some(Provenance::Inferred);
    events.push(inferred);
    let mut approval = Envelope::new("action.required", "pending", "2026-05-11T23:00:02Z");
    approval.session_id = Some("sess_00000".into());
    approval.action_id = Some("a-pending".into());
    events.push(approval);
    let journal = journal(&tmp.path().join("j"), events);
    let n = load(&journal, &Scope::Session("sess_00000".into()), None).unwrap();
    let page = html::render(&n);

    // Self-contained: no script, nothing that could fetch; links only to its own steps.
    for forbidden in ["<script", "src=", "<link", "https://", "@import", "url("] {
        assert!(!page.contains(forbidden), "the page contains {forbidden}");
    }
    assert_eq!(
        page.matches("http://").count(),
        page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
        "the only address is the SVG namespace"
    );
    assert!(page.contains("href=\"#s-"), "the timeline links to steps");
    assert_eq!(
        page.matches("href=").count(),
        page.matches("href=\"#").count()
    );
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let file = tmp.path().join("replay.html");
    std::fs::write(&file, &page).unwrap();

    let dom = dump_dom(&file);
    let rendered = dom.matches("<li class=\"step").count();
    let expected: usize = n.steps.iter().map(|s| 1 + s.children.len()).sum();
    assert_eq!(rendered, expected, "every step is in the rendered DOM");
    assert!(dom.contains("id=\"final\""));
    assert!(
        dom.contains("Final state: <strong>waiting_approval</strong>"),
        "an unresolved approval is never shown completed"
    );
    assert!(dom.contains("class=\"gap\" data-kind=\"approval_unresolved\""));
    assert!(dom.contains("class=\"step inferred"));
    assert!(dom.contains("class=\"step observed approval"));
    assert!(dom.contains("<details><summary>details</summary>"));
    assert!(
        dom.contains("<svg class=\"timeline\""),
        "the timeline is drawn"
    );
    let bars = dom.matches("<rect class=\"bar tool_call").count();
    assert!(
        bars > 0 && bars as u64 >= n.counts.tool_calls,
        "a bar per tool call (and per call a subagent made)"
    );
    // Event ids are shown.
    assert!(dom.contains("events hostile"));
    assert!(
        !dom.contains("<script>alert"),
        "the hostile text stays text"
    );
}
