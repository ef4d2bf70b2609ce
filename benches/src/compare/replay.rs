//! The replay workload: the time to replay one session (about 100,000 events by default) in
//! each format, against reading the same session's events through the index in the same run.
//! Each figure is the median over the rounds.

use std::fmt::Write as _;
use std::time::Instant;

use journal_engine::{AppendOptions, Filter};
use journal_projections::workload;
use journal_replay::{html, narrative, text, Scope};
use serde_json::json;

use super::{Context, Res, Section};

fn median_ms(rounds: usize, mut f: impl FnMut() -> Res<usize>) -> Res<(f64, usize)> {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        size = f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((super::stats::median(&mut times), size))
}

/// Runs the replay workload.
///
/// # Errors
/// The journal's or replay's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let events = usize::try_from(ctx.events_or(2_000, 100_000))?;
    let dir = ctx.fresh_dir("replay")?;
    let journal = super::buffered_journal(&dir)?;
    let generated = workload::generate(7, 1, events);
    let n = generated.len();
    for chunk in generated.chunks(1000) {
        journal.append_batch_blocking(chunk, AppendOptions::default())?;
    }
    let session = "sess_00000".to_string();
    let scope = Scope::Session(session.clone());
    let rounds = ctx.rounds;
    let (read_ms, _) = median_ms(rounds, || {
        Ok(journal
            .query(Filter {
                session: Some(session.clone()),
                ..Filter::default()
            })?
            .count())
    })?;
    let stored = journal_replay::events(&journal, &scope)?;
    let head = journal.head().position.0;
    let (build_ms, steps) = median_ms(rounds, || {
        Ok(narrative::build(&scope, &stored, None, head).steps.len())
    })?;
    let (load_ms, _) = median_ms(rounds, || {
        Ok(journal_replay::load(&journal, &scope, None)?.steps.len())
    })?;
    let built = journal_replay::load(&journal, &scope, None)?;
    let (text_ms, text_bytes) = median_ms(rounds, || {
        Ok(text::render(&built, text::Colour::Plain).len())
    })?;
    let (json_ms, json_bytes) = median_ms(rounds, || Ok(serde_json::to_vec(&built)?.len()))?;
    let (html_ms, html_bytes) = median_ms(rounds, || Ok(html::render(&built).len()))?;
    journal.close();
    std::fs::remove_dir_all(&dir)?;
    let mut out = String::new();
    writeln!(out, "one session of {n} events, {steps} steps")?;
    writeln!(
        out,
        "{:<36} {:>10} {:>12} {:>7}",
        "replay", "ms", "bytes", "×read"
    )?;
    let rows = [
        ("read the session's events", read_ms, 0),
        ("build the narrative (no I/O)", build_ms, 0),
        ("load: read + build + judge", load_ms, 0),
        (
            "replay, text (load + render)",
            load_ms + text_ms,
            text_bytes,
        ),
        (
            "replay, json (load + render)",
            load_ms + json_ms,
            json_bytes,
        ),
        (
            "replay, html (load + render)",
            load_ms + html_ms,
            html_bytes,
        ),
    ];
    for (name, ms, bytes) in rows {
        writeln!(
            out,
            "{name:<36} {ms:>10.1} {bytes:>12} {:>7.2}",
            ms / read_ms
        )?;
    }
    Ok(Section {
        name: "replay",
        text: out,
        json: json!({
            "events": n, "steps": steps, "readMs": read_ms, "buildMs": build_ms, "loadMs": load_ms,
            "textMs": load_ms + text_ms, "jsonMs": load_ms + json_ms, "htmlMs": load_ms + html_ms,
            "textBytes": text_bytes, "jsonBytes": json_bytes, "htmlBytes": html_bytes,
        }),
    })
}
