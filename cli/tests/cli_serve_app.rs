//! The review app in a real browser: headless Chromium, driven through the DevTools protocol,
//! against a real `journal serve` over the demo's sessions and the imported fixtures of
//! `testdata/agent-logs/`. It opens the sessions list, filters it to failed sessions, opens
//! one, expands a tool call, follows a timeline bar to its step, moves time travel and sees
//! the state change, appends events over HTTP and sees them appear within a second, and checks
//! that every request the page made went to the server. Screenshots of each page go to
//! `target/screenshots/`.
#![allow(
    clippy::disallowed_methods,
    reason = "a browser test waits for a page in real time"
)]

mod browser;
mod common;
mod serving;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use browser::Browser;
use common::{journal, ok};
use serving::{post, Server};

/// The demo's journal with the fixtures of every importer imported into it.
fn demo_with_imports(dir: &Path) {
    ok(journal(dir)
        .args(["demo", "--out"])
        .arg(dir)
        .output()
        .unwrap());
    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs");
    for (runtime, path) in [
        ("codex", "codex"),
        (
            "claude-code",
            "claude-code/cctrace_phase0-investigation_main.jsonl",
        ),
        ("openhands", "openhands"),
    ] {
        ok(journal(dir)
            .args(["import", runtime])
            .arg(logs.join(path))
            .output()
            .unwrap());
    }
}

fn text(b: &mut Browser, selector: &str) -> String {
    b.eval(&format!(
        "(document.querySelector({}) || {{}}).textContent || ''",
        json!(selector)
    ))
    .as_str()
    .unwrap_or_default()
    .to_string()
}

#[test]
fn a_reviewer_filters_opens_travels_and_watches_a_session_live() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    demo_with_imports(&dir);
    let server = Server::start(&dir, &[]);
    let mut b = Browser::launch(1400, 1000);

    // The sessions list: the demo's and the imported sessions, newest activity first.
    b.navigate(&server.url("/"));
    let rows = b.eval("document.querySelectorAll('table.sessions tbody tr').length");
    assert!(
        rows.as_u64().unwrap() >= 8,
        "rows: {rows} at {}: {}",
        b.eval("location.href"),
        b.eval("document.body.innerText.slice(0, 300)")
    );
    let imported = b.eval(
        "[...document.querySelectorAll('select[name=imported] option')].map(o => o.value).join(',')",
    );
    assert_eq!(imported, json!(",claude_code,codex,openhands"));
    b.screenshot("app-sessions");

    // Filter to failed (the checkbox submits the form by itself).
    b.click("input[name=failed]");
    b.wait_until(
        "location.search.includes('failed=1')",
        Duration::from_secs(10),
    );
    b.wait_until(
        "document.readyState === 'complete'",
        Duration::from_secs(10),
    );
    let failed = b.eval(
        "[...document.querySelectorAll('table.sessions tbody tr')].map(r => r.dataset.state === 'failed' ? 'failed' : r.dataset.failures)",
    );
    let failed = failed.as_array().unwrap();
    assert!(!failed.is_empty() && (failed.len() as u64) < rows.as_u64().unwrap());
    assert!(
        failed.iter().all(|f| f.as_str().unwrap() != "0"),
        "{failed:?}"
    );
    b.screenshot("app-sessions-failed");

    // Open the first failed session.
    let seen = b.events().len();
    b.click("table.sessions tbody tr td.id a");
    b.wait_for_event("Page.loadEventFired", seen);
    assert!(b
        .eval("location.pathname")
        .as_str()
        .unwrap()
        .starts_with("/sessions/"));
    assert!(text(&mut b, "h1").starts_with("Session"));
    let head_state = b.eval("document.querySelector('[data-state]').dataset.state");
    let head_events = text(&mut b, "dl.numbers div:nth-child(4) dd");
    // The first page asked for starts the chain's verification; a later one shows it.
    let page = b.eval("location.href").as_str().unwrap().to_string();
    let verified = "document.querySelector('[data-verified]').dataset.verified";
    for _ in 0..80 {
        if b.eval(verified) != json!("pending") {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        b.navigate(&page);
    }
    assert_eq!(b.eval(verified), json!("yes"));

    // Expand a tool call's output.
    let details = "li.step.tool_call details[id^=out-]";
    assert_eq!(
        b.eval(&format!("document.querySelector('{details}').open")),
        json!(false)
    );
    b.click(&format!("{details} > summary"));
    assert_eq!(
        b.eval(&format!("document.querySelector('{details}').open")),
        json!(true)
    );
    b.screenshot("app-session");

    // Follow a timeline bar to its step.
    let bar = "svg.timeline a:has(rect.bar.tool_call)";
    let href = b.eval(&format!(
        "document.querySelector('{bar}').getAttribute('href')"
    ));
    b.click(&format!("{bar} rect"));
    b.wait_until(&format!("location.hash === {href}"), Duration::from_secs(5));
    let target = b.eval("document.querySelector(':target').id");
    assert_eq!(
        format!("#{}", target.as_str().unwrap()),
        href.as_str().unwrap()
    );
    b.screenshot("app-session-step");

    // Time travel: to the session's first position; the state is what it was then.
    let first = b.eval("document.querySelector('input[name=at]').min");
    let seen = b.events().len();
    b.eval(&format!(
        "(() => {{ const r = document.querySelector('input[name=at]'); r.value = {first};
           r.dispatchEvent(new Event('change')); return true; }})()"
    ));
    b.wait_for_event("Page.loadEventFired", seen);
    assert!(b.eval("location.search").as_str().unwrap().contains("at="));
    let then_state = b.eval("document.querySelector('[data-state]').dataset.state");
    let then_events = text(&mut b, "dl.numbers div:nth-child(4) dd");
    assert_eq!(
        then_events, "1",
        "as of its first position the session had one event"
    );
    assert_ne!(then_events, head_events);
    assert_ne!(then_state, head_state, "the state changes with time travel");
    b.screenshot("app-session-travel");

    // Live: a session being written shows its new events within a second.
    let append = |lines: &[Value]| {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let a = post(&server.url("/v1/events"), None, &body);
        assert_eq!(a.status, 200, "{}", a.body);
    };
    append(&[
        json!({"type": "session.started", "eventId": "live-1", "timestamp": "2026-05-11T10:00:00Z", "sessionId": "live"}),
        json!({"type": "turn.submitted", "eventId": "live-2", "timestamp": "2026-05-11T10:00:01Z", "sessionId": "live", "turnId": "t1",
               "payload": {"input": [{"type": "text", "text": "count the zebras"}]}}),
    ]);
    b.navigate(&server.url("/sessions/live"));
    b.wait_until(
        "document.getElementById('live-status').textContent === 'live'",
        Duration::from_secs(10),
    );
    append(&[
        json!({"type": "tool.started", "eventId": "live-3", "timestamp": "2026-05-11T10:00:02Z",
        "sessionId": "live", "turnId": "t1", "toolCallId": "c1", "payload": {"toolName": "zebra_counter"}}),
    ]);
    let took = b.wait_until(
        "document.body.textContent.includes('zebra_counter called')",
        Duration::from_secs(1),
    );
    eprintln!("a live event appeared in the page {took:?} after it was appended");
    b.wait_until(
        "document.querySelector('[data-freshness]').dataset.freshness === 'fresh'",
        Duration::from_secs(5),
    );
    b.screenshot("app-session-live");

    // Every request went to the server.
    let requests = b.requests();
    assert!(requests.len() > 10, "{requests:?}");
    let elsewhere: Vec<&String> = requests
        .iter()
        .filter(|u| !u.starts_with(&server.base) && !u.starts_with("about:"))
        .collect();
    assert!(elsewhere.is_empty(), "requests elsewhere: {elsewhere:?}");
}

/// What a test sees of an answer: the status, the `Set-Cookie` and `Location` headers, and the
/// body.
type Seen = (u16, String, String, String);

/// An agent that follows no redirect, so that a test sees the `303` and its `Location`.
fn no_redirects() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

fn seen(mut response: ureq::http::Response<ureq::Body>) -> Seen {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    let (set_cookie, location) = (header("set-cookie"), header("location"));
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap();
    (status, set_cookie, location, body)
}

/// `GET url` with `cookie` (and no bearer header), without following a redirect.
fn get_with_cookie(url: &str, cookie: Option<&str>) -> Seen {
    let mut request = no_redirects().get(url);
    if let Some(c) = cookie {
        request = request.header("Cookie", c);
    }
    seen(request.call().unwrap())
}

/// Posts the sign-in form (`token`, `next`), as from `origin` when given, without following
/// the redirect.
fn sign_in(url: &str, token: &str, next: &str, origin: Option<&str>) -> Seen {
    let mut request = no_redirects()
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded");
    if let Some(o) = origin {
        request = request.header("Origin", o);
    }
    let body = format!(
        "token={}&next={}",
        token.replace('+', "%2B"),
        next.replace('/', "%2F")
    );
    seen(request.send(body).unwrap())
}

#[test]
fn with_tokens_a_browser_signs_in_with_a_cookie_that_only_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let reader = serving::create_token(dir, &["--scope", "read"]);
    let appender = serving::create_token(dir, &["--scope", "append"]);
    let server = Server::start(dir, &[]);
    let event = json!({"type": "session.started", "eventId": "c-1",
        "timestamp": "2026-05-11T10:00:00Z", "sessionId": "cookie-s"});
    assert_eq!(
        serving::post(
            &server.url("/v1/events"),
            Some(&appender),
            &event.to_string()
        )
        .status,
        200
    );

    // Without a token, a page answers the sign-in form.
    let (status, _, _, body) = get_with_cookie(&server.url("/sessions/cookie-s"), None);
    assert_eq!(status, 401);
    assert!(body.contains("action=\"/signin\"") && body.contains("value=\"/sessions/cookie-s\""));
    // A token without `read`, or an unknown one, is refused and sets no cookie.
    let signin = server.url("/signin");
    for token in [appender.as_str(), "jt_unknown"] {
        let (status, cookie, _, _) = sign_in(&signin, token, "/", None);
        assert_eq!((status, cookie.as_str()), (401, ""));
    }
    // A token in the URL is refused (the browser would keep it in its history), and so is a
    // sign-in posted from another site's page.
    let (status, cookie, _, body) =
        get_with_cookie(&server.url(&format!("/signin?token={reader}")), None);
    assert_eq!((status, cookie.as_str()), (400, ""), "{body}");
    assert!(body.contains("history"), "{body}");
    let (status, cookie, _, _) = sign_in(&signin, &reader, "/", Some("http://elsewhere.example"));
    assert_eq!((status, cookie.as_str()), (403, ""));
    // A reading token sets the cookie and goes back to the page, never to another site.
    let own = server.url("");
    let own = own.trim_end_matches('/');
    let (status, cookie, location, _) = sign_in(&signin, &reader, "/sessions/cookie-s", Some(own));
    assert_eq!((status, location.as_str()), (303, "/sessions/cookie-s"));
    assert_eq!(
        cookie,
        format!("journal_token={reader}; Path=/; HttpOnly; SameSite=Strict")
    );
    let (_, _, location, _) = sign_in(&signin, &reader, "//elsewhere.example/", None);
    assert_eq!(location, "/");
    assert!(!server.log().contains(&reader), "the token is never logged");

    // The cookie reads pages and the API's GET routes, with the token's scope.
    let jar = format!("journal_token={reader}");
    let (status, _, _, body) = get_with_cookie(&server.url("/sessions/cookie-s"), Some(&jar));
    assert_eq!(status, 200);
    assert!(body.contains("Session <code>cookie-s</code>"));
    assert_eq!(get_with_cookie(&server.url("/"), Some(&jar)).0, 200);
    assert_eq!(
        get_with_cookie(&server.url("/v1/status"), Some(&jar)).0,
        200
    );
    assert_eq!(get_with_cookie(&server.url("/metrics"), Some(&jar)).0, 403);
    // ... and nothing else: a POST with the cookie alone is unauthenticated.
    let agent = serving::agent();
    let posted = serving::answer(
        agent
            .post(server.url("/v1/events"))
            .header("Cookie", &jar)
            .send(
                json!({"type": "session.started", "eventId": "c-2",
                "timestamp": "2026-05-11T10:00:01Z", "sessionId": "cookie-s"})
                .to_string(),
            ),
    );
    assert_eq!(posted.status, 401, "{}", posted.body);
}
