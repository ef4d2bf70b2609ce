//! A session's page (or a run's, a task's): a header with its state, freshness, numbers and
//! the chain's head; its tasks, attempts, decisions and approvals; gaps and incidents linking
//! to their steps; the timeline picture; and the narrative turn by turn, paged. In the app it
//! also has the time-travel control, the evidence pack's link and the live refresh.

use std::collections::BTreeMap;

use journal_projections::state::ActionState;
use journal_projections::StreamState;
use maud::{html, Markup};
use serde_json::Value;

use super::layout::{self, Assets};
use super::steps::{self, Links};
use super::{fmt, timeline};
use crate::narrative::{Evidence, Narrative, Scope, Step};

/// Up to this many tasks (or approvals) are shown open; more are collapsed.
const TASKS_OPEN_MAX: usize = 6;

/// Whether a step is a person's request for a turn (not a task's objective).
pub(crate) fn is_turn(step: &Step) -> bool {
    step.kind == "request" && step.title.starts_with("turn submitted")
}

/// The steps a page of the narrative shows.
pub const STEPS_PER_PAGE: usize = 300;

/// How current the read models behind the header are.
#[derive(Clone, Debug)]
pub struct Badge {
    /// `fresh`, `stale`, `behind`, `unknown`, `rebuilding` or `faulted`.
    pub state: String,
    /// Events they do not reflect yet.
    pub lag_events: u64,
    /// How long the oldest of those has been in the log.
    pub lag_ms: u64,
}

/// The chain's head and how far it verified.
#[derive(Clone, Debug)]
pub struct Chain {
    /// The head's position.
    pub position: u64,
    /// The head's chain link, hex.
    pub hash: String,
    /// What the last verification found.
    pub verified: Verified,
}

/// What the last verification of the journal found.
#[derive(Clone, Debug)]
pub enum Verified {
    /// Every link, checksum and index entry held up to this position.
    UpTo(u64),
    /// It found a problem.
    Failed(String),
    /// Not verified yet (a verification is under way).
    Pending,
}

/// What the app adds to a page: its address, time travel, live refresh.
#[derive(Clone, Debug)]
pub struct Served<'a> {
    /// The page's path, `/sessions/ID`.
    pub path: &'a str,
    /// The session's id (for the evidence pack and the live stream).
    pub session: &'a str,
    /// The position asked for (`?at=`), if any.
    pub at: Option<u64>,
    /// The last position of the session (the time-travel control's end).
    pub last_position: u64,
    /// The read models' freshness.
    pub freshness: Option<Badge>,
    /// The chain's head.
    pub chain: Option<Chain>,
    /// The page of the narrative shown (from 0).
    pub page: usize,
}

/// A page of a narrative.
#[derive(Clone, Debug)]
pub struct SessionPage<'a> {
    /// The narrative.
    pub narrative: &'a Narrative,
    /// The rules' state as of the same position (tasks, attempts, approvals), when known.
    pub state: Option<&'a StreamState>,
    /// The runtime that wrote it, when known.
    pub runtime: Option<&'a str>,
    /// The app's parts; `None` for a file on its own (every step on one page).
    pub served: Option<Served<'a>>,
}

fn failed(step: &Step) -> bool {
    step.title.ends_with("— failed")
}

/// Token and cost totals of the narrative's `cost` steps (revisions already folded).
fn cost(steps: &[Step]) -> (Option<u64>, Option<f64>) {
    let mut tokens = None;
    let mut usd = None;
    for s in steps.iter().filter(|s| s.kind == "cost") {
        let p = s.details.get("payload");
        let n = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_u64);
        if n("inputTokens").is_some() || n("outputTokens").is_some() {
            let t = n("inputTokens").unwrap_or(0) + n("outputTokens").unwrap_or(0);
            tokens = Some(tokens.unwrap_or(0) + t);
        }
        if let Some(c) = p.and_then(|p| p.get("costUsd")).and_then(Value::as_f64) {
            usd = Some(usd.unwrap_or(0.0) + c);
        }
    }
    (tokens, usd)
}

/// The page each position's step is on.
fn pages_by_position(steps: &[Step], per_page: usize) -> BTreeMap<u64, (usize, u64)> {
    fn add(step: &Step, page: usize, anchor: u64, out: &mut BTreeMap<u64, (usize, u64)>) {
        for p in &step.positions {
            out.insert(*p, (page, anchor));
        }
        for c in &step.children {
            add(c, page, c.positions.first().copied().unwrap_or(anchor), out);
        }
    }
    let mut out = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        add(
            s,
            i / per_page.max(1),
            s.positions.first().copied().unwrap_or(0),
            &mut out,
        );
    }
    out
}

/// Links to steps by position, on whichever page they are.
struct Anchors<'a> {
    pages: BTreeMap<u64, (usize, u64)>,
    served: Option<&'a Served<'a>>,
}

impl Anchors<'_> {
    fn href(&self, position: u64) -> String {
        let (page, anchor) = self.pages.get(&position).copied().unwrap_or((0, position));
        match self.served {
            Some(s) if s.page != page => {
                let at = s.at.map(|a| format!("&at={a}")).unwrap_or_default();
                format!("{}?page={page}{at}#s-{anchor}", s.path)
            }
            _ => format!("#s-{anchor}"),
        }
    }
}

fn state_word(narrative: &Narrative) -> &str {
    narrative
        .final_state
        .outcome
        .as_deref()
        .filter(|o| *o == "unverified")
        .unwrap_or(&narrative.final_state.status)
}

fn header(p: &SessionPage<'_>, anchors: &Anchors<'_>) -> Markup {
    let n = p.narrative;
    let steps = &n.steps;
    let (tokens, usd) = cost(steps);
    let first = steps.first().map(|s| s.timestamp.as_str());
    let last = steps.last().map(|s| s.timestamp.as_str());
    let duration = first.zip(last).and_then(|(a, b)| fmt::between_ms(a, b));
    let turns = steps.iter().filter(|s| is_turn(s)).count() as u64;
    let failures = steps.iter().filter(|s| failed(s)).count() as u64;
    let pending = steps
        .iter()
        .filter(|s| s.kind == "approval" && !s.complete)
        .count() as u64;
    let numbers: [(&str, String, bool); 12] = [
        (
            "started",
            first.map(fmt::time).unwrap_or_else(|| "—".into()),
            false,
        ),
        (
            "last activity",
            last.map(fmt::time).unwrap_or_else(|| "—".into()),
            false,
        ),
        (
            "duration",
            duration.map(fmt::duration_ms).unwrap_or_else(|| "—".into()),
            false,
        ),
        ("events", fmt::count(n.counts.events), false),
        ("turns", fmt::count(turns), false),
        ("tool calls", fmt::count(n.counts.tool_calls), false),
        ("failures", fmt::count(failures), failures > 0),
        (
            "open calls",
            fmt::count(n.counts.open_calls),
            n.counts.open_calls > 0,
        ),
        ("pending approvals", fmt::count(pending), pending > 0),
        ("gaps", fmt::count(n.counts.gaps), n.counts.gaps > 0),
        (
            "tokens",
            tokens.map(fmt::count).unwrap_or_else(|| "unknown".into()),
            false,
        ),
        (
            "cost",
            usd.map(fmt::usd).unwrap_or_else(|| "unknown".into()),
            false,
        ),
    ];
    let f = &n.final_state;
    html! {
        div.card {
            h1 { (scope_words(&n.scope).0) " " code { (scope_words(&n.scope).1) } }
            p {
                span class=(format!("state {}", state_word(n))) data-state=(state_word(n)) { (state_word(n).replace('_', " ")) }
                " "
                @if let Some(runtime) = p.runtime { span.muted { "runtime " (runtime) " · " } }
                span.muted { "as of position " (n.as_of) }
                @if let Some(s) = &p.served { (badges(s)) }
            }
            p.final id="final" {
                "Final state: " strong { (f.status) }
                " (" (match f.evidence { Evidence::Observed => "observed", Evidence::Inferred => "inferred" }) ")"
                @if let Some(o) = &f.outcome { ", outcome " strong { (o) } }
                ": " (f.why)
                @if let Some(pos) = f.event_id.as_ref().and_then(|id| position_of(steps, id)) {
                    " " a href=(anchors.href(pos)) { "#" (pos) }
                }
            }
            dl.numbers {
                @for (label, value, bad) in &numbers {
                    div { dt { (label) } dd class=[bad.then_some("bad")] { (value) } }
                }
            }
        }
    }
}

/// The freshness badge, the chain's head and the live marker.
fn badges(s: &Served<'_>) -> Markup {
    html! {
        @if let Some(b) = &s.freshness {
            " · read models "
            span class=(format!("state {}", b.state)) data-freshness=(b.state) title="how current the read models behind the numbers are" {
                (b.state)
                @if b.lag_events > 0 { " · " (fmt::count(b.lag_events)) " events, " (fmt::duration_ms(b.lag_ms)) " behind" }
            }
        }
        @if let Some(c) = &s.chain {
            " · head " code title=(c.hash) { "#" (c.position) " " (c.hash.get(..12).unwrap_or(&c.hash)) "…" }
            " "
            @match &c.verified {
                Verified::UpTo(p) => span.state.ok data-verified="yes" { "chain verified to #" (p) },
                Verified::Failed(m) => span.state.failed data-verified="no" title=(m) { "chain did not verify" },
                Verified::Pending => span.state.unknown data-verified="pending" { "verifying" },
            }
        }
        @if s.at.is_none() { " " span.live id="live-status" { "" } }
    }
}

fn scope_words(scope: &Scope) -> (&'static str, &str) {
    match scope {
        Scope::Run(id) => ("Run", id),
        Scope::Task(id) => ("Task", id),
        Scope::Session(id) => ("Session", id),
    }
}

fn position_of(steps: &[Step], event_id: &str) -> Option<u64> {
    steps.iter().find_map(|s| {
        s.event_ids
            .iter()
            .position(|e| e == event_id)
            .and_then(|i| s.positions.get(i).copied())
            .or_else(|| position_of(&s.children, event_id))
    })
}

fn action_row(a: &ActionState, anchors: &Anchors<'_>) -> Markup {
    html! {
        tr {
            td { code { (a.action_id) } }
            td { (a.action_type.as_deref().unwrap_or("—")) }
            td { a href=(anchors.href(a.required_at_position)) { "#" (a.required_at_position) } }
            td { span class=(format!("state {}", a.decision.as_deref().unwrap_or("waiting_approval"))) { (a.decision.as_deref().unwrap_or("waiting")) } }
            td { (a.decided_by.as_deref().unwrap_or("—")) }
            td { @if let Some(p) = a.resolved_at_position { a href=(anchors.href(p)) { "#" (p) } } @else { "—" } }
        }
    }
}

/// Tasks with their attempts, decision and evidence; then approvals, who decided and when.
fn tasks(state: &StreamState, anchors: &Anchors<'_>) -> Markup {
    html! {
        @if !state.tasks.is_empty() {
            details.card.tasks #tasks open[state.tasks.len() <= TASKS_OPEN_MAX] {
            summary { h2 { "Tasks and runs (" (state.tasks.len()) ")" } }
            table {
                tr { th { "task" } th { "state" } th { "outcome" } th { "attempts" } th { "completion decision" } th { "evidence required / present" } }
                @for t in state.tasks.values() {
                    @let outcome = t.outcome.map(|o| word(&o)).unwrap_or_else(|| "—".into());
                    tr {
                        td { code { (t.task_id) } br; span.muted { (t.title.as_deref().or(t.objective.as_deref()).unwrap_or("")) } }
                        td { span class=(format!("state {}", word(&t.lifecycle))) { (word(&t.lifecycle)) } }
                        td { span class=(format!("state {outcome}")) { (outcome) } }
                        td { @for a in &t.attempts {
                            div { code { (a.attempt_id) } " " (a.status) " at " a href=(anchors.href(a.started_at_position)) { "#" (a.started_at_position) }
                                @if let Some(r) = &a.run_id { " · run " code { (r) } } }
                        } }
                        td { @match &t.decision {
                            Some(d) => { (if d.accepted { "accepted" } else { "refused" }) @for r in &d.reasons { div.muted { (r) } } },
                            None => "none recorded",
                        } }
                        td { @match &t.evidence_requirements {
                            Some(req) => { @for a in &req.required_artifacts {
                                div { (if state.artifacts.contains(a) { "✓ " } else { "✗ missing " }) code { (a) } }
                            } @if req.required_artifacts.is_empty() { "none required" } },
                            None => "none declared",
                        } }
                    }
                    @for i in &t.incidents {
                        tr { td colspan="6" { div.incident { "incident at " a href=(anchors.href(i.position)) { "#" (i.position) } ": " (i.message) } } }
                    }
                }
            } }
        }
        @if !state.actions.is_empty() {
            details.card.tasks #approvals open[state.actions.len() <= TASKS_OPEN_MAX] {
            summary { h2 { "Approvals (" (state.actions.len()) ")" } }
            table {
                tr { th { "action" } th { "kind" } th { "required" } th { "decision" } th { "who" } th { "decided" } }
                @for a in state.actions.values() { (action_row(a, anchors)) }
            } }
        }
    }
}

/// A value of the rules' state (a lifecycle, an outcome) as the one word it serialises to.
fn word<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn problems(n: &Narrative, anchors: &Anchors<'_>) -> Markup {
    html! {
        @if !n.gaps.is_empty() || !n.incidents.is_empty() {
            h2 { "Gaps and incidents" }
            @for g in &n.gaps {
                div.gap data-kind=(g.kind) {
                    strong { (g.kind.replace('_', " ")) } " at "
                    @for p in &g.positions { a href=(anchors.href(*p)) { "#" (p) } " " }
                    ": " (g.detail) " " span.ids { (g.event_ids.join(", ")) }
                }
            }
            @for i in &n.incidents {
                div.incident {
                    strong { "incident" } " at " a href=(anchors.href(i.position)) { "#" (i.position) }
                    ": " (i.message) " " span.ids { (i.event_id) }
                }
            }
        }
    }
}

/// The time-travel control: a range over the session's positions and a button (the form
/// works without script; with it, letting go of the range submits).
fn travel(n: &Narrative, s: &Served<'_>) -> Markup {
    let first = n
        .steps
        .first()
        .and_then(|st| st.positions.first())
        .copied()
        .unwrap_or(1);
    let value = s.at.unwrap_or(s.last_position).min(s.last_position);
    html! {
        form.travel.card method="get" action=(s.path) data-autosubmit {
            label for="at" { "Time travel: as of position " }
            output for="at" { (value) }
            input #at type="range" name="at" min=(first) max=(s.last_position.max(first)) value=(value);
            button type="submit" { "Show" }
            @if s.at.is_some() { a.button href=(s.path) { "Back to now" } }
            a.button href=(format!("/v1/evidence/{}", super::encode(s.session))) download { "Download the evidence pack" }
            a.button href=(format!("/v1/replay/session/{}{}", super::encode(s.session), s.at.map(|a| format!("?at={a}")).unwrap_or_default())) { "JSON" }
        }
    }
}

/// The links to the other pages of steps; `page` is the one shown (below `pages`).
fn pager(s: &Served<'_>, page: usize, pages: usize) -> Markup {
    let at = s.at.map(|a| format!("&at={a}")).unwrap_or_default();
    html! {
        @if pages > 1 {
            nav.pages {
                @if page > 0 { a.button href=(format!("{}?page={}{at}", s.path, page - 1)) { "← earlier steps" } }
                span.muted { "page " (page + 1) " of " (pages) " (" (STEPS_PER_PAGE) " steps a page)" }
                @if page + 1 < pages { a.button href=(format!("{}?page={}{at}", s.path, page + 1)) rel="next" { "later steps →" } }
            }
        }
    }
}

/// The page as HTML: the app's when `served`, else a file on its own with every step.
#[must_use]
pub fn render(p: &SessionPage<'_>) -> String {
    let n = p.narrative;
    let per_page = if p.served.is_some() {
        STEPS_PER_PAGE
    } else {
        usize::MAX
    };
    let pages = n
        .steps
        .len()
        .div_ceil(per_page.min(n.steps.len().max(1)))
        .max(1);
    let page = p.served.as_ref().map_or(0, |s| s.page.min(pages - 1));
    let shown = n
        .steps
        .get(page.saturating_mul(per_page)..)
        .unwrap_or_default();
    let shown = shown.get(..per_page.min(shown.len())).unwrap_or_default();
    let anchors = Anchors {
        pages: pages_by_position(&n.steps, per_page),
        served: p.served.as_ref(),
    };
    let turns_before = n
        .steps
        .iter()
        .take(page.saturating_mul(per_page))
        .filter(|s| is_turn(s))
        .count();
    let incident_positions: Vec<u64> = n.incidents.iter().map(|i| i.position).collect();
    let links = Links {
        blobs: p.served.as_ref().map(|_| "/blobs/"),
    };
    let (what, id) = scope_words(&n.scope);
    let live = p
        .served
        .as_ref()
        .filter(|s| s.at.is_none())
        .map(|s| s.session);
    let body = html! {
        @if let Some(s) = &p.served { (travel(n, s)) }
        div #live data-live-session=[live] {
            (header(p, &anchors))
            h2 { "Timeline" @if pages > 1 { span.muted { " · the steps of this page" } } }
            div.card { (timeline::render(shown, &n.gaps, &incident_positions)) }
            (problems(n, &anchors))
            @if let Some(state) = p.state { (tasks(state, &anchors)) }
            @if !n.requested.is_empty() {
                details.card { summary { "Requested (" (n.requested.len()) ")" } ul.requested { @for r in &n.requested { li { (r) } } } }
            }
            h2 { "Narrative" }
            @if let Some(s) = &p.served { (pager(s, page, pages)) }
            (steps::turns(shown, turns_before, links))
            @if let Some(s) = &p.served { (pager(s, page, pages)) }
        }
    };
    let title = format!("{what} {id}");
    let place = match &p.served {
        Some(s) => format!(
            "{what} {id}{}",
            s.at.map(|a| format!(" as of #{a}")).unwrap_or_default()
        ),
        None => format!(
            "replay of {} {id} as of position {}",
            what.to_lowercase(),
            n.as_of
        ),
    };
    let assets = if p.served.is_some() {
        Assets::Served
    } else {
        Assets::Inline
    };
    layout::page(&title, &place, assets, &body)
}
