//! The timeline picture of a page of steps, as SVG: one lane per kind of work (turns, tasks,
//! model calls, tool calls, subagents and what ran inside them, approvals, gaps and
//! incidents), calls as bars as long as they lasted (packed into rows where they overlap),
//! approvals, lifecycle changes, gaps and incidents as markers. Each bar and marker links to
//! its step's anchor (`#s-POSITION`) and names it in its tooltip.

use std::collections::BTreeMap;

use journal_format::time_fmt::parse_rfc3339_ns;
use maud::{html, Markup};
use serde_json::Value;

use super::fmt;
use crate::narrative::{Evidence, Gap, Step};

/// The width of the lanes' labels, in SVG units.
const LABEL_WIDTH: f64 = 118.0;
/// The width of the plot.
const PLOT_WIDTH: f64 = 1000.0;
/// The height of one row of a lane.
const ROW_HEIGHT: f64 = 16.0;
/// The most rows a lane packs overlapping bars into (more overlap the last row).
const ROWS_MAX: usize = 6;

/// The lanes, top to bottom.
const LANES: [(&str, &str); 7] = [
    ("turns", "turns"),
    ("tasks", "tasks, attempts"),
    ("model", "model calls"),
    ("tools", "tool calls"),
    ("subagents", "subagents"),
    ("approvals", "approvals, pauses"),
    ("problems", "gaps, incidents"),
];

/// One thing drawn: a bar from `start` to `end` (a marker when they are equal).
struct Item {
    lane: &'static str,
    start: f64,
    end: f64,
    anchor: u64,
    class: String,
    tip: String,
    marker: bool,
}

/// The lane a step is drawn in, at nesting `depth`; `None` for what is not drawn (a turn's
/// start and end: the turn's bar runs from its request to the next).
fn lane_of(step: &Step, depth: usize) -> Option<&'static str> {
    let kind = step.kind.as_str();
    Some(match kind {
        _ if depth > 0 && kind != "approval" => "subagents",
        "request" if super::session::is_turn(step) => "turns",
        "request" | "attempt" | "completion" | "lifecycle" | "checkpoint" | "evidence" => "tasks",
        "model_call" => "model",
        "tool_call" | "process" => "tools",
        "subagent" => "subagents",
        "approval" | "permission" => "approvals",
        "error" => "problems",
        _ => return None,
    })
}

/// The latest producer time among a step's joined events (its result, decision, end).
fn end_time(step: &Step) -> Option<i128> {
    let Value::Object(details) = &step.details else {
        return None;
    };
    details
        .values()
        .filter_map(|part| part.get("timestamp").and_then(Value::as_str))
        .filter_map(|t| parse_rfc3339_ns(t).ok())
        .max()
}

fn failed(step: &Step) -> bool {
    step.title.ends_with("— failed") || step.title.contains(" failed")
}

/// The class of a step's bar: its kind, and failed, open or inferred.
fn class_of(step: &Step) -> String {
    let mut class = format!("bar {}", step.kind);
    if failed(step) {
        class.push_str(" failed");
    } else if !step.complete {
        class.push_str(" open");
    }
    if step.evidence == Evidence::Inferred {
        class.push_str(" inferred");
    }
    class
}

/// The items of `steps` (and of the steps nested under them), with times in nanoseconds; a
/// step whose time does not parse is drawn at `last`, the latest time seen before it.
fn items(steps: &[Step], depth: usize, last: &mut f64, out: &mut Vec<Item>) {
    for step in steps {
        let start = parse_rfc3339_ns(&step.timestamp).map_or(*last, |t| t as f64);
        *last = start.max(*last);
        let end = end_time(step).map_or(start, |t| (t as f64).max(start));
        let anchor = step.positions.first().copied().unwrap_or(0);
        if let Some(lane) = lane_of(step, depth) {
            let marker = matches!(lane, "tasks" | "approvals" | "problems");
            let duration = (end > start).then(|| fmt::duration_ms(((end - start) / 1e6) as u64));
            let tip = match duration {
                Some(d) => format!("#{anchor} {}: {} ({d})", step.kind, step.title),
                None => format!("#{anchor} {}: {}", step.kind, step.title),
            };
            out.push(Item {
                lane,
                start,
                end,
                anchor,
                class: class_of(step),
                tip,
                marker,
            });
        }
        items(&step.children, depth + 1, last, out);
    }
}

/// Turns as bars from each request to the next (the last to the end of the page).
fn stretch_turns(items: &mut [Item], end: f64) {
    let starts: Vec<f64> = items
        .iter()
        .filter(|i| i.lane == "turns")
        .map(|i| i.start)
        .collect();
    let mut next = starts.iter().skip(1);
    for item in items.iter_mut().filter(|i| i.lane == "turns") {
        item.end = next.next().copied().unwrap_or(end).max(item.start);
        item.marker = false;
        item.class = "bar turn".into();
    }
}

/// The row of each item in its lane: the first whose last bar ended before it starts.
fn pack(items: &[Item], scale: f64) -> (Vec<usize>, BTreeMap<&'static str, usize>) {
    let mut ends: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let rows = items
        .iter()
        .map(|item| {
            let lane = ends.entry(item.lane).or_default();
            let free = lane.iter().position(|e| *e <= item.start);
            let row = match free {
                Some(r) => r,
                None if lane.len() < ROWS_MAX => {
                    lane.push(f64::MIN);
                    lane.len() - 1
                }
                None => ROWS_MAX - 1,
            };
            if let Some(e) = lane.get_mut(row) {
                *e = item.end.max(item.start + 3.0 / scale);
            }
            row
        })
        .collect();
    let heights = ends.into_iter().map(|(k, v)| (k, v.len().max(1))).collect();
    (rows, heights)
}

/// The SVG timeline of `steps`, with `gaps` and `incidents` (by position) marked where their
/// steps are.
#[must_use]
pub(crate) fn render(steps: &[Step], gaps: &[Gap], incident_positions: &[u64]) -> Markup {
    let mut all = Vec::new();
    let mut last = 0.0;
    items(steps, 0, &mut last, &mut all);
    if all.is_empty() {
        return html! { p.muted { "Nothing on this page to draw." } };
    }
    let t0 = all.iter().map(|i| i.start).fold(f64::MAX, f64::min);
    let t1 = all.iter().map(|i| i.end).fold(f64::MIN, f64::max);
    stretch_turns(&mut all, t1);
    let start_of: BTreeMap<u64, f64> = all.iter().map(|i| (i.anchor, i.start)).collect();
    let problems = gaps
        .iter()
        .filter_map(|g| Some((g.positions.first().copied()?, "mark gap", g.detail.as_str())))
        .chain(
            incident_positions
                .iter()
                .map(|p| (*p, "mark incident", "incident")),
        );
    let mut marks = Vec::new();
    for (position, class, tip) in problems {
        if let Some(start) = start_of.get(&position) {
            marks.push(Item {
                lane: "problems",
                start: *start,
                end: *start,
                anchor: position,
                class: class.into(),
                tip: format!("#{position} {tip}"),
                marker: true,
            });
        }
    }
    all.extend(marks);
    let span = (t1 - t0).max(1.0);
    let scale = PLOT_WIDTH / span;
    let (rows, heights) = pack(&all, scale);
    let mut top = BTreeMap::new();
    let mut y = 22.0;
    for (lane, _) in LANES {
        top.insert(lane, y);
        y += heights.get(lane).copied().unwrap_or(1) as f64 * ROW_HEIGHT + 6.0;
    }
    let height = y + 4.0;
    let x = |t: f64| LABEL_WIDTH + (t - t0) * scale;
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| {
            let t = t0 + span * f64::from(i) / 4.0;
            let label = if span > 1e6 {
                fmt::duration_ms(((t - t0) / 1e6) as u64)
            } else {
                String::new()
            };
            (x(t), label)
        })
        .collect();
    html! {
        div.timeline-wrap {
            svg.timeline xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {} {height:.0}", LABEL_WIDTH + PLOT_WIDTH + 10.0)) role="img" aria-label="timeline of the steps on this page" {
                @for (i, (x_tick, label)) in ticks.iter().enumerate() {
                    @let anchor = match i { 0 => "start", 4 => "end", _ => "middle" };
                    text.axis x=(format!("{x_tick:.1}")) y="12" text-anchor=(anchor) { (label) }
                }
                @for (lane, label) in LANES {
                    @let y = top.get(lane).copied().unwrap_or(0.0);
                    @let h = heights.get(lane).copied().unwrap_or(1) as f64 * ROW_HEIGHT;
                    rect.lane x=(format!("{LABEL_WIDTH}")) y=(format!("{y:.1}")) width=(format!("{PLOT_WIDTH}")) height=(format!("{h:.1}")) {}
                    text.lane-label x="4" y=(format!("{:.1}", y + 12.0)) { (label) }
                }
                @for (item, row) in all.iter().zip(&rows) {
                    @let y = top.get(item.lane).copied().unwrap_or(0.0) + *row as f64 * ROW_HEIGHT;
                    a href=(format!("#s-{}", item.anchor)) {
                        title { (item.tip) }
                        @if item.marker {
                            @let cx = x(item.start);
                            path class=(item.class.replace("bar ", "mark ")) d=(format!("M{:.1} {:.1} l5 6 l-5 6 l-5 -6 z", cx, y + 2.0)) {}
                        } @else {
                            // A unit less, so that bars end to end in a row stay apart.
                            @let w = ((item.end - item.start) * scale - 1.0).max(3.0);
                            rect class=(item.class) x=(format!("{:.1}", x(item.start))) y=(format!("{:.1}", y + 2.0)) width=(format!("{w:.1}")) height=(format!("{:.1}", ROW_HEIGHT - 4.0)) rx="2" {}
                        }
                    }
                }
            }
        }
    }
}
