//! The narrative as text for a terminal: one line per step with its position, time, evidence
//! and title, then the gaps and the final state. Colour only when asked (on a terminal).

use std::fmt::Write as _;

use crate::narrative::{Evidence, Narrative, Scope};

fn paint(colour: bool, code: &str, text: &str) -> String {
    if colour {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// Renders `narrative`; `colour` adds ANSI colours.
#[must_use]
pub fn render(narrative: &Narrative, colour: bool) -> String {
    let mut out = String::new();
    let (kind, id) = match &narrative.scope {
        Scope::Run(id) => ("run", id),
        Scope::Task(id) => ("task", id),
        Scope::Session(id) => ("session", id),
    };
    let _ = writeln!(
        out,
        "{} {id}, as of position {}",
        paint(colour, "1", &format!("Replay of {kind}")),
        narrative.as_of
    );
    for r in &narrative.requested {
        let _ = writeln!(out, "  requested: {r}");
    }
    let _ = writeln!(out);
    for s in &narrative.steps {
        let position = s.positions.first().copied().unwrap_or(0);
        let mark = match (s.evidence, s.complete) {
            (Evidence::Inferred, _) => paint(colour, "35", "inferred"),
            (Evidence::Observed, false) => paint(colour, "33", "open    "),
            (Evidence::Observed, true) => paint(colour, "32", "observed"),
        };
        let _ = writeln!(
            out,
            "#{position:<8} {}  {mark}  {:<11} {}",
            s.timestamp, s.kind, s.title
        );
        for c in &s.children {
            let _ = writeln!(
                out,
                "    #{:<6} {}  {}",
                c.positions.first().copied().unwrap_or(0),
                c.timestamp,
                c.title
            );
        }
    }
    if !narrative.gaps.is_empty() {
        let _ = writeln!(out, "\n{}", paint(colour, "31;1", "Gaps"));
        for g in &narrative.gaps {
            let _ = writeln!(
                out,
                "  {} at {:?}: {}",
                paint(colour, "31", &g.kind),
                g.positions,
                g.detail
            );
        }
    }
    let f = &narrative.final_state;
    let evidence = match f.evidence {
        Evidence::Observed => "observed",
        Evidence::Inferred => "inferred",
    };
    let _ = writeln!(
        out,
        "\n{} {} ({evidence}): {}",
        paint(colour, "1", "Final state:"),
        f.status,
        f.why
    );
    if let Some(outcome) = &f.outcome {
        let _ = writeln!(out, "Outcome: {outcome}");
    }
    for i in &narrative.incidents {
        let _ = writeln!(
            out,
            "{} at #{} ({}): {}",
            paint(colour, "31", "incident"),
            i.position,
            i.event_id,
            i.message
        );
    }
    let c = &narrative.counts;
    let _ = writeln!(
        out,
        "{} events, {} steps: {} model calls, {} tool calls ({} without a result), {} approvals, {} subagents, {} compactions, {} gaps",
        c.events, c.steps, c.model_calls, c.tool_calls, c.open_calls, c.approvals, c.subagents, c.compactions, c.gaps
    );
    out
}
