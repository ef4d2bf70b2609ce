//! The narrative turn by turn: steps grouped from one request to the next, each with its time,
//! kind, title, duration and evidence; a tool call with its arguments and its output
//! collapsed (a large output a link to its blob, loaded in place by the app's script); a
//! subagent with the steps it ran nested under it; and each step's event ids, positions and
//! producer one click away. Every step is an anchor, `#s-POSITION` (its first event's).

use maud::{html, Markup};
use serde_json::Value;

use super::fmt;
use crate::narrative::{Evidence, Step};

/// Where a step's large output can be fetched: `Some("/blobs/")` in the app; `None` in a file
/// on its own, which names the blob instead.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Links<'a> {
    pub blobs: Option<&'a str>,
}

/// Steps grouped into turns: a turn starts at each request a person made (`turn.submitted`);
/// steps before the first are a group of their own.
pub(crate) fn turns(steps: &[Step], first_turn: usize, links: Links<'_>) -> Markup {
    let mut groups: Vec<&[Step]> = Vec::new();
    let mut start = 0;
    for (i, step) in steps.iter().enumerate() {
        if super::session::is_turn(step) && i > start {
            groups.push(steps.get(start..i).unwrap_or_default());
            start = i;
        }
    }
    groups.push(steps.get(start..).unwrap_or_default());
    let mut number = first_turn;
    html! {
        @for group in groups.iter().filter(|g| !g.is_empty()) {
            @let opens = group.first().is_some_and(super::session::is_turn);
            section.turn {
                h3 {
                    @if opens {
                        ({ number += 1; format!("Turn {number}") })
                    } @else {
                        "Before the next request"
                    }
                    " · " (group.len()) " steps"
                }
                ol.steps { @for step in *group { (step_item(step, links)) } }
            }
        }
    }
}

fn failed(step: &Step) -> bool {
    step.title.ends_with("— failed")
        || step
            .details
            .pointer("/result/type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with(".failed"))
}

/// The milliseconds from a step's first event to its last joined one.
fn duration(step: &Step) -> Option<u64> {
    let Value::Object(details) = &step.details else {
        return None;
    };
    details
        .values()
        .filter_map(|part| part.get("timestamp").and_then(Value::as_str))
        .filter_map(|t| fmt::between_ms(&step.timestamp, t))
        .max()
}

/// The step's classes and its badge.
fn classes(step: &Step) -> (String, &'static str) {
    let (evidence, badge) = match (step.evidence, step.complete) {
        (Evidence::Inferred, _) => ("inferred", "inferred"),
        (Evidence::Observed, false) => ("open", "open"),
        (Evidence::Observed, true) => ("observed", "observed"),
    };
    let mut class = format!("step {evidence} {}", step.kind);
    if failed(step) {
        class.push_str(" failed");
    }
    (class, badge)
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// A blob reference (`blake3:<hex>`) a step carries for its output, if any.
fn output_ref(step: &Step) -> Option<&str> {
    [
        "/result/outputRef",
        "/outputRef",
        "/result/payload/outputRef",
        "/payload/outputRef",
    ]
    .into_iter()
    .filter_map(|p| step.details.pointer(p).and_then(Value::as_str))
    .find(|r| r.starts_with("blake3:"))
}

/// A tool call's (or process's, subagent's) arguments and output, collapsed.
fn call_parts(step: &Step, pos: u64, links: Links<'_>) -> Markup {
    let arguments = step
        .details
        .pointer("/arguments/payload")
        .or_else(|| step.details.get("payload"));
    let output = step.details.pointer("/result/payload");
    html! {
        @if let Some(args) = arguments {
            details id=(format!("args-{pos}")) { summary { "arguments" } pre { (pretty(args)) } }
        }
        @if output.is_some() || output_ref(step).is_some() {
            details id=(format!("out-{pos}")) {
                summary { "output" }
                @if let Some(out) = output { pre { (pretty(out)) } }
                @if let Some(reference) = output_ref(step) {
                    @match links.blobs {
                        Some(base) => a data-blob href=(format!("{base}{reference}")) { "the whole output (" (reference) ")" },
                        None => p.muted { "The whole output is blob " code { (reference) } " in the journal's blob store." },
                    }
                }
            }
        }
    }
}

/// What a step carried, collapsed: context as the runtime wrote it, a call's arguments and
/// output, anything else as JSON.
fn body(step: &Step, pos: u64, links: Links<'_>) -> Markup {
    if matches!(step.kind.as_str(), "tool_call" | "process" | "subagent") {
        return call_parts(step, pos, links);
    }
    let context = (step.kind == "context")
        .then(|| {
            step.details
                .pointer("/payload/text")
                .and_then(Value::as_str)
        })
        .flatten();
    let empty = step
        .details
        .as_object()
        .is_none_or(serde_json::Map::is_empty);
    html! {
        @if let Some(text) = context {
            details { summary { "context" } pre { (text) } }
        } @else if !empty {
            details { summary { "details" } pre { (pretty(&step.details)) } }
        }
    }
}

/// One step, with the steps nested under it.
pub(crate) fn step_item(step: &Step, links: Links<'_>) -> Markup {
    let pos = step.positions.first().copied().unwrap_or(0);
    let (class, badge) = classes(step);
    let positions: Vec<String> = step.positions.iter().map(u64::to_string).collect();
    html! {
        li class=(class) id=(format!("s-{pos}")) data-kind=(step.kind) data-positions=(positions.join(" ")) {
            div.line {
                a.pos href=(format!("#s-{pos}")) { "#" (pos) }
                span.meta title=(step.timestamp) { (fmt::clock(&step.timestamp)) }
                span.kind { (step.kind.replace('_', " ")) }
                span.title { (step.title) }
                @if let Some(ms) = duration(step) { span.dur { (fmt::duration_ms(ms)) } }
                span class=(format!("badge {badge}")) { (badge) }
                @if failed(step) { span.badge.failed { "failed" } }
            }
            (body(step, pos, links))
            details.ids-box id=(format!("ids-{pos}")) {
                summary { "events " (positions.iter().map(|p| format!("#{p}")).collect::<Vec<_>>().join(" ")) }
                div.ids {
                    "events " (step.event_ids.join(", "))
                    " · producer " (step.producer.as_deref().unwrap_or("not recorded"))
                    " · at " (step.timestamp)
                    " · recorded " (step.recorded_at)
                    @for (k, v) in &step.ids { " · " (k) "=" (v) }
                }
            }
            @if !step.children.is_empty() {
                ol.steps { @for child in &step.children { (step_item(child, links)) } }
            }
        }
    }
}
