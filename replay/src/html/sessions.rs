//! The sessions list: one row per session with its runtime, state, times, numbers, tokens and
//! cost, newest activity first; a search (id, title, runtime) and filters (failed, waiting for
//! approval, open calls, incidents, imported from a runtime) in a form that works without
//! script, and pages.

use maud::{html, Markup};

use super::fmt;
use super::layout::{self, Assets};
use super::session::Badge;

/// What the list shows of a session.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionRow {
    /// The session's id.
    pub id: String,
    /// Its first request, when one was recorded.
    pub title: Option<String>,
    /// The runtime that wrote it (`runtimeId`), or the one it was imported from.
    pub runtime: Option<String>,
    /// The runtime it was imported from (`nativeNs`: `codex`, `claude_code`, `openhands`).
    pub imported_from: Option<String>,
    /// Where it stands: `failed`, `waiting_approval`, `running`, `completed`, ... or `unknown`.
    pub state: String,
    /// The producer's time of its first event.
    pub started: Option<String>,
    /// The producer's time of its newest event.
    pub last_activity: Option<String>,
    /// The position of its newest event (the order of last activity when times are equal).
    pub last_position: u64,
    /// Events.
    pub events: u64,
    /// Turns (requests).
    pub turns: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Failed tool and model calls, tasks and runtime errors.
    pub failures: u64,
    /// Tool calls without a result.
    pub open_calls: u64,
    /// Approvals required and not resolved.
    pub pending_approvals: u64,
    /// Facts that broke a rule.
    pub incidents: u64,
    /// Input and output tokens, when recorded.
    pub tokens: Option<u64>,
    /// Cost in US dollars, when recorded.
    pub cost_usd: Option<f64>,
}

/// The search and filters of the list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Words every one of which the id, the title or the runtime contains (case-insensitive).
    pub q: String,
    /// Only sessions with a failure.
    pub failed: bool,
    /// Only sessions waiting for an approval.
    pub approval: bool,
    /// Only sessions with open calls.
    pub open: bool,
    /// Only sessions with incidents.
    pub incidents: bool,
    /// Only sessions imported from this runtime (empty: any).
    pub imported: String,
}

impl SessionRow {
    /// The duration from its first event to its newest, in milliseconds.
    #[must_use]
    pub fn duration_ms(&self) -> Option<u64> {
        fmt::between_ms(self.started.as_deref()?, self.last_activity.as_deref()?)
    }

    /// Whether the row passes `filter`.
    #[must_use]
    pub fn matches(&self, filter: &ListFilter) -> bool {
        let text = || {
            format!(
                "{} {} {}",
                self.id,
                self.title.as_deref().unwrap_or(""),
                self.runtime.as_deref().unwrap_or("")
            )
            .to_lowercase()
        };
        (!filter.failed || self.failures > 0 || self.state == "failed")
            && (!filter.approval || self.pending_approvals > 0)
            && (!filter.open || self.open_calls > 0)
            && (!filter.incidents || self.incidents > 0)
            && (filter.imported.is_empty()
                || self.imported_from.as_deref() == Some(filter.imported.as_str()))
            && (filter.q.trim().is_empty() || {
                let text = text();
                filter
                    .q
                    .to_lowercase()
                    .split_whitespace()
                    .all(|w| text.contains(w))
            })
    }
}

/// A page of the list.
#[derive(Clone, Debug)]
pub struct SessionsPage<'a> {
    /// The rows of this page.
    pub rows: Vec<&'a SessionRow>,
    /// Sessions that pass the filter.
    pub matching: usize,
    /// Sessions in all.
    pub total: usize,
    /// This page (from 0).
    pub page: usize,
    /// Rows a page.
    pub per_page: usize,
    /// The filter.
    pub filter: &'a ListFilter,
    /// The runtimes sessions were imported from, for the filter's choice.
    pub imported: Vec<String>,
    /// How current the rows are.
    pub freshness: Option<Badge>,
}

/// The list's query string for `filter` at `page`.
fn query(filter: &ListFilter, page: usize) -> String {
    let mut parts = Vec::new();
    if !filter.q.is_empty() {
        parts.push(format!("q={}", encode(&filter.q)));
    }
    for (on, name) in [
        (filter.failed, "failed"),
        (filter.approval, "approval"),
        (filter.open, "open"),
        (filter.incidents, "incidents"),
    ] {
        if on {
            parts.push(format!("{name}=1"));
        }
    }
    if !filter.imported.is_empty() {
        parts.push(format!("imported={}", encode(&filter.imported)));
    }
    parts.push(format!("page={page}"));
    format!("?{}", parts.join("&"))
}

/// Percent-encodes a path segment or a query value.
#[must_use]
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn filters(p: &SessionsPage<'_>) -> Markup {
    let f = p.filter;
    html! {
        form.filters.card method="get" action="/" data-autosubmit {
            input type="search" name="q" value=(f.q) placeholder="search id, title, runtime" aria-label="search";
            label { input type="checkbox" name="failed" value="1" checked[f.failed]; " failed" }
            label { input type="checkbox" name="approval" value="1" checked[f.approval]; " waiting for approval" }
            label { input type="checkbox" name="open" value="1" checked[f.open]; " open calls" }
            label { input type="checkbox" name="incidents" value="1" checked[f.incidents]; " incidents" }
            label { "imported from "
                select name="imported" {
                    option value="" selected[f.imported.is_empty()] { "any runtime" }
                    @for r in &p.imported { option value=(r) selected[f.imported == *r] { (r) } }
                }
            }
            button type="submit" { "Filter" }
            @if *f != ListFilter::default() { a.button href="/" { "Clear" } }
        }
    }
}

fn row(r: &SessionRow) -> Markup {
    let href = format!("/sessions/{}", encode(&r.id));
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    html! {
        tr data-session=(r.id) data-state=(r.state) data-failures=(r.failures) {
            td.id { a href=(href) title=(r.id) { (r.id) } @if let Some(t) = &r.title { br; span.muted { (t.chars().take(70).collect::<String>()) } } }
            td {
                @match (&r.runtime, &r.imported_from) {
                    (Some(rt), Some(i)) => { (rt) br; span.muted { "imported from " (i) } },
                    (None, Some(i)) => { span.muted { "imported from " } (i) },
                    (Some(rt), None) => (rt),
                    (None, None) => "—",
                }
            }
            td { span class=(format!("state {}", r.state)) { (r.state.replace('_', " ")) } }
            td { (or_dash(r.last_activity.as_deref().map(fmt::time)))
                @if let Some(s) = &r.started { br; span.muted { "started " (fmt::time(s)) } } }
            td.num { (or_dash(r.duration_ms().map(fmt::duration_ms))) }
            td.num { (fmt::count(r.events)) }
            td.num { (fmt::count(r.turns)) }
            td.num { (fmt::count(r.tool_calls)) }
            td.num class=[(r.failures > 0).then_some("bad")] { (fmt::count(r.failures)) }
            td.num class=[(r.open_calls > 0).then_some("warn")] { (fmt::count(r.open_calls)) }
            td.num class=[(r.pending_approvals > 0).then_some("warn")] { (fmt::count(r.pending_approvals)) }
            td.num class=[(r.incidents > 0).then_some("bad")] { (fmt::count(r.incidents)) }
            td.num { (or_dash(r.tokens.map(fmt::count))) }
            td.num { (or_dash(r.cost_usd.map(fmt::usd))) }
        }
    }
}

/// The list page as HTML (the app's: its assets are served).
#[must_use]
pub fn render(p: &SessionsPage<'_>) -> String {
    let pages = p.matching.div_ceil(p.per_page.max(1)).max(1);
    // The page asked for, which a client chooses: any number, past the last page too.
    let page = p.page.min(pages - 1);
    let body = html! {
        h1 { "Sessions" }
        p.muted {
            (fmt::count(p.matching as u64)) " of " (fmt::count(p.total as u64)) " sessions, newest activity first"
            @if let Some(b) = &p.freshness {
                " · read models " span class=(format!("state {}", b.state)) data-freshness=(b.state) { (b.state)
                    @if b.lag_events > 0 { " · " (fmt::count(b.lag_events)) " events behind" } }
            }
        }
        (filters(p))
        div.table-wrap { table.sessions {
            thead { tr {
                th { "session" } th { "runtime" } th { "state" } th { "last activity" }
                th.num { "duration" } th.num { "events" } th.num { "turns" } th.num { "tool calls" }
                th.num { "failures" } th.num { "open calls" } th.num { "approvals pending" }
                th.num { "incidents" } th.num { "tokens" } th.num { "cost" }
            } }
            tbody { @for r in &p.rows { (row(r)) } }
        } }
        @if p.rows.is_empty() { p.card { "No session matches." } }
        nav.pages {
            @if page > 0 { a.button href=(query(p.filter, page - 1)) { "← newer" } }
            span.muted { "page " (page + 1) " of " (pages) }
            @if page + 1 < pages { a.button href=(query(p.filter, page + 1)) rel="next" { "older →" } }
        }
    };
    layout::page("Sessions", "sessions", Assets::Served, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_passes_the_filters_it_meets() {
        let row = SessionRow {
            id: "sess_42".into(),
            title: Some("Fix the Flaky test".into()),
            imported_from: Some("codex".into()),
            failures: 1,
            ..SessionRow::default()
        };
        let f = |f: ListFilter| row.matches(&f);
        assert!(f(ListFilter::default()));
        assert!(f(ListFilter {
            failed: true,
            ..ListFilter::default()
        }));
        assert!(!f(ListFilter {
            approval: true,
            ..ListFilter::default()
        }));
        assert!(f(ListFilter {
            q: "flaky SESS".into(),
            ..ListFilter::default()
        }));
        assert!(!f(ListFilter {
            q: "flaky other".into(),
            ..ListFilter::default()
        }));
        assert!(f(ListFilter {
            imported: "codex".into(),
            ..ListFilter::default()
        }));
        assert!(!f(ListFilter {
            imported: "openhands".into(),
            ..ListFilter::default()
        }));
    }

    #[test]
    fn the_query_string_keeps_the_filter() {
        let filter = ListFilter {
            q: "a b&c".into(),
            failed: true,
            ..ListFilter::default()
        };
        assert_eq!(query(&filter, 2), "?q=a%20b%26c&failed=1&page=2");
        assert_eq!(encode("s 1/é"), "s%201%2F%C3%A9");
    }

    #[test]
    fn a_page_past_the_last_shows_the_last() {
        let filter = ListFilter::default();
        let html = render(&SessionsPage {
            rows: Vec::new(),
            matching: 120,
            total: 120,
            page: usize::MAX,
            per_page: 50,
            filter: &filter,
            imported: Vec::new(),
            freshness: None,
        });
        assert!(html.contains("page 3 of 3"), "{html}");
    }
}
