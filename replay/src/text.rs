//! The narrative as text for a terminal: one line per step with its position, time, evidence
//! and title, then the gaps and the final state. Colour only when asked (on a terminal).
//! Multi-line text (a request typed over several lines) keeps its lines and their indentation:
//! each continuation line is indented to where the first line's text starts. Context the
//! runtime injected is one line per step, of kind `context`; its text is in the JSON and HTML
//! forms.

use std::fmt::Write as _;

use crate::narrative::{Evidence, Narrative, Scope};

/// Whether the text carries colours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    /// ANSI colours, for a terminal.
    Ansi,
    /// Plain text.
    Plain,
}

impl Colour {
    fn paint(self, code: &str, text: &str) -> String {
        match self {
            Colour::Ansi => format!("\x1b[{code}m{text}\x1b[0m"),
            Colour::Plain => text.to_string(),
        }
    }
}

/// Renders `narrative`, in `colour`.
#[must_use]
pub fn render(narrative: &Narrative, colour: Colour) -> String {
    let mut out = String::new();
    heading(&mut out, narrative, colour);
    steps(&mut out, narrative, colour);
    gaps(&mut out, narrative, colour);
    ending(&mut out, narrative, colour);
    out
}

/// What the replay is of, as of which position, and what was requested.
fn heading(out: &mut String, narrative: &Narrative, colour: Colour) {
    let (kind, id) = match &narrative.scope {
        Scope::Run(id) => ("run", id),
        Scope::Task(id) => ("task", id),
        Scope::Session(id) => ("session", id),
    };
    let _ = writeln!(
        out,
        "{} {id}, as of position {}",
        colour.paint("1", &format!("Replay of {kind}")),
        narrative.as_of
    );
    for r in &narrative.requested {
        let _ = writeln!(out, "  requested: {}", hanging(r, "  requested: ".len()));
    }
    let _ = writeln!(out);
}

/// One line per step, and one per child of a step.
fn steps(out: &mut String, narrative: &Narrative, colour: Colour) {
    for s in &narrative.steps {
        let position = s.positions.first().copied().unwrap_or(0);
        let mark = match (s.evidence, s.complete) {
            (Evidence::Inferred, _) => colour.paint("35", "inferred"),
            (Evidence::Observed, false) => colour.paint("33", "open    "),
            (Evidence::Observed, true) => colour.paint("32", "observed"),
        };
        // The title starts after the position, the time, the 8-wide mark and the kind.
        let plain = format!("#{position:<8} {}  {:8}  {:<11} ", s.timestamp, "", s.kind);
        let _ = writeln!(
            out,
            "#{position:<8} {}  {mark}  {:<11} {}",
            s.timestamp,
            s.kind,
            hanging(&s.title, plain.chars().count())
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
}

/// `text` with every line after the first indented by `width` spaces, so that continuation
/// lines start under the first line's text and keep their own indentation after that. Line
/// ends are normalised to `\n`; a trailing line end is dropped.
fn hanging(text: &str, width: usize) -> String {
    let mut lines = text.trim_end_matches(['\n', '\r']).lines();
    let mut out = lines.next().unwrap_or("").to_string();
    for line in lines {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&" ".repeat(width));
            out.push_str(line);
        }
    }
    out
}

fn gaps(out: &mut String, narrative: &Narrative, colour: Colour) {
    if narrative.gaps.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{}", colour.paint("31;1", "Gaps"));
    for g in &narrative.gaps {
        let _ = writeln!(
            out,
            "  {} at {:?}: {}",
            colour.paint("31", &g.kind),
            g.positions,
            g.detail
        );
    }
}

/// The final state with its outcome, the incidents, and the counts.
fn ending(out: &mut String, narrative: &Narrative, colour: Colour) {
    let f = &narrative.final_state;
    let evidence = match f.evidence {
        Evidence::Observed => "observed",
        Evidence::Inferred => "inferred",
    };
    let _ = writeln!(
        out,
        "\n{} {} ({evidence}): {}",
        colour.paint("1", "Final state:"),
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
            colour.paint("31", "incident"),
            i.position,
            i.event_id,
            i.message
        );
    }
    let c = &narrative.counts;
    let _ = writeln!(
        out,
        "{} events, {} steps: {} requests, {} context, {} model calls, {} tool calls ({} without a result), {} approvals, {} subagents, {} compactions, {} gaps",
        c.events, c.steps, narrative.requested.len(), c.context, c.model_calls, c.tool_calls, c.open_calls, c.approvals, c.subagents, c.compactions, c.gaps
    );
}

#[cfg(test)]
mod tests {
    use super::hanging;

    #[test]
    fn continuation_lines_keep_their_indentation_under_the_first_line() {
        let text = "fix this:\n  - the parser\n\n    fn main() {}\n";
        assert_eq!(
            hanging(text, 4),
            "fix this:\n      - the parser\n\n        fn main() {}"
        );
        assert_eq!(hanging("one line", 4), "one line");
    }
}
