//! The narrative as one self-contained HTML file: a timeline with collapsible details (tool
//! arguments and output), approval, gap and incident markers, observed and inferred steps styled
//! apart, context the runtime injected labelled and collapsed (never among the requests), and
//! the event ids shown. No script and nothing loaded from anywhere: the styles are
//! inline and a Content-Security-Policy forbids every fetch, so the file opens the same offline.

use std::fmt::Write as _;

use crate::narrative::{Evidence, Narrative, Scope, Step};

/// Escapes text for HTML content and attribute values.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1d1d1f; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
.meta { color: #555; }
ol.timeline { list-style: none; padding: 0; border-left: 3px solid #ccd; }
li.step { margin: 0 0 .6em 0; padding: .3em .8em; position: relative; }
li.step::before { content: ""; position: absolute; left: -9px; top: .75em; width: 12px; height: 12px;
  border-radius: 50%; background: #6a7; }
li.inferred { font-style: italic; background: #f6f0fa; }
li.inferred::before { background: #a6c; }
li.open::before { background: #e90; }
li.approval { border-left: 4px solid #36c; }
.pos { font-family: ui-monospace, monospace; color: #666; }
.kind { display: inline-block; min-width: 7em; font-weight: 600; }
.badge { font-size: .8em; padding: 0 .4em; border-radius: .6em; margin-left: .4em; }
.badge.observed { background: #e3f3e6; } .badge.inferred { background: #efe3f6; }
.badge.open { background: #fdeccc; }
.ids { font-family: ui-monospace, monospace; font-size: .8em; color: #666; }
details pre { background: #f4f4f6; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
.gap, .incident { border-left: 4px solid #c33; background: #fbeaea; padding: .3em .8em; margin: .3em 0; }
.final { font-size: 1.1em; padding: .6em .8em; background: #eef; }
.title { display: inline-block; vertical-align: top; white-space: pre-wrap; }
ul.requested li { white-space: pre-wrap; }
li.context { color: #666; font-size: .9em; background: #f7f7f7; }
li.context > .kind { font-weight: 400; }
"#;

/// The text of a context step, as the runtime wrote it.
fn context_text(s: &Step) -> Option<&str> {
    if s.kind != "context" {
        return None;
    }
    s.details
        .pointer("/payload/text")
        .and_then(serde_json::Value::as_str)
}

fn step_html(out: &mut String, s: &Step) {
    let position = s.positions.first().copied().unwrap_or(0);
    let (class, badge) = match (s.evidence, s.complete) {
        (Evidence::Inferred, _) => ("inferred", "inferred"),
        (Evidence::Observed, false) => ("open", "open"),
        (Evidence::Observed, true) => ("observed", "observed"),
    };
    let _ = write!(
        out,
        "<li class=\"step {class} {}\" data-kind=\"{}\" data-positions=\"{}\"><span class=\"pos\">#{position}</span> <span class=\"meta\">{}</span> <span class=\"kind\">{}</span><span class=\"title\">{}</span><span class=\"badge {badge}\">{badge}</span>",
        escape(&s.kind),
        escape(&s.kind),
        s.positions
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        escape(&s.timestamp),
        escape(&s.kind),
        escape(&s.title),
    );
    let _ = write!(
        out,
        "<div class=\"ids\">events {} · producer {} · recorded {}",
        escape(&s.event_ids.join(", ")),
        escape(s.producer.as_deref().unwrap_or("not recorded")),
        escape(&s.recorded_at)
    );
    for (k, v) in &s.ids {
        let _ = write!(out, " · {}={}", escape(k), escape(v));
    }
    out.push_str("</div>");
    if s.details.as_object().is_some_and(|d| !d.is_empty()) {
        let details = serde_json::to_string_pretty(&s.details).unwrap_or_default();
        // Context shows its text as written, collapsed; other steps their details as JSON.
        let (label, shown) = match context_text(s) {
            Some(text) => ("context", text.to_string()),
            None => ("details", details),
        };
        let _ = write!(
            out,
            "<details><summary>{label}</summary><pre>{}</pre></details>",
            escape(&shown)
        );
    }
    if !s.children.is_empty() {
        out.push_str("<ol class=\"timeline\">");
        for c in &s.children {
            step_html(out, c);
        }
        out.push_str("</ol>");
    }
    out.push_str("</li>\n");
}

/// Renders `narrative` as a complete HTML document.
#[must_use]
pub fn render(narrative: &Narrative) -> String {
    let (kind, id) = match &narrative.scope {
        Scope::Run(id) => ("run", id),
        Scope::Task(id) => ("task", id),
        Scope::Session(id) => ("session", id),
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
<title>Replay of {kind} {}</title><style>{STYLE}</style></head><body>\n",
        escape(id)
    );
    let _ = writeln!(
        out,
        "<h1>Replay of {kind} <code>{}</code></h1><p class=\"meta\">as of position {}; {} events, {} steps, {} requests, {} context, {} gaps</p>",
        escape(id),
        narrative.as_of,
        narrative.counts.events,
        narrative.counts.steps,
        narrative.requested.len(),
        narrative.counts.context,
        narrative.counts.gaps
    );
    let f = &narrative.final_state;
    let evidence = match f.evidence {
        Evidence::Observed => "observed",
        Evidence::Inferred => "inferred",
    };
    let _ = writeln!(
        out,
        "<p class=\"final\" id=\"final\">Final state: <strong>{}</strong> ({evidence}){}: {}</p>",
        escape(&f.status),
        f.outcome
            .as_ref()
            .map(|o| format!(", outcome <strong>{}</strong>", escape(o)))
            .unwrap_or_default(),
        escape(&f.why)
    );
    if !narrative.requested.is_empty() {
        out.push_str("<h2>Requested</h2><ul class=\"requested\">");
        for r in &narrative.requested {
            let _ = write!(out, "<li>{}</li>", escape(r));
        }
        out.push_str("</ul>\n");
    }
    if !narrative.gaps.is_empty() || !narrative.incidents.is_empty() {
        out.push_str("<h2>Gaps and incidents</h2>\n");
        for g in &narrative.gaps {
            let _ = writeln!(
                out,
                "<div class=\"gap\" data-kind=\"{}\"><strong>{}</strong> at {:?}: {} <span class=\"ids\">{}</span></div>",
                escape(&g.kind),
                escape(&g.kind),
                g.positions,
                escape(&g.detail),
                escape(&g.event_ids.join(", "))
            );
        }
        for i in &narrative.incidents {
            let _ = writeln!(
                out,
                "<div class=\"incident\"><strong>incident</strong> at #{}: {} <span class=\"ids\">{}</span></div>",
                i.position,
                escape(&i.message),
                escape(&i.event_id)
            );
        }
    }
    out.push_str("<h2>Timeline</h2>\n<ol class=\"timeline\" id=\"timeline\">\n");
    for s in &narrative.steps {
        step_html(&mut out, s);
    }
    out.push_str("</ol>\n</body></html>\n");
    out
}
