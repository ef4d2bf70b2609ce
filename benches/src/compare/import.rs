//! The import workload: how fast a real agent session becomes journal events, on the largest
//! shared file (the Claude Code transcript in `testdata/agent-logs/`), against two
//! baselines in the same run: parsing the same lines as JSON and nothing else (the floor any
//! importer pays), and appending the already-mapped events (the journal's share).
//!
//! Each round imports into a fresh journal with the durable default, so every event is
//! written; the median round is reported.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use journal_engine::{Journal, Options};
use journal_replay::import::{self, Options as ImportOptions, Source, Summary};
use serde_json::{json, Value};

use super::{ms, stats, Context, Res, Section};

/// The largest shared agent session, and the directory of its file-history backups.
fn shared_file() -> Res<(PathBuf, PathBuf)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/agent-logs/claude-code");
    let file = dir.join("cctrace_phase0-investigation_main.jsonl");
    if !file.is_file() {
        return Err(format!(
            "the test data is missing: expected {} (`testdata/` in the repository)",
            file.display()
        )
        .into());
    }
    Ok((file, dir.join("cctrace_file-history")))
}

/// The median time of each phase of an import.
struct Phases {
    /// Parsing every line as JSON, nothing else.
    json: Duration,
    /// Mapping the file to events.
    map: Duration,
    /// Appending the mapped events.
    append: Duration,
    /// The whole import: read, map, store blobs, append.
    full: Duration,
}

/// Parses every line of `bytes` as JSON; returns how many are objects.
fn json_parse(bytes: &[u8]) -> Res<u64> {
    let mut n = 0u64;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line)?;
        n += u64::from(v.is_object());
    }
    Ok(n)
}

/// Times each phase of importing `file` (its `bytes`) `rounds` times, each round into fresh
/// journals; the medians, and the import's summary.
fn time_phases(
    ctx: &Context,
    file: &Path,
    bytes: &[u8],
    options: &ImportOptions,
    rounds: usize,
) -> Res<(Phases, Summary)> {
    let mut json_only = Vec::new();
    let mut parse = Vec::new();
    let mut append = Vec::new();
    let mut full = Vec::new();
    let mut summary = None;
    for round in 0..rounds {
        let t = Instant::now();
        let n = json_parse(bytes)?;
        json_only.push(t.elapsed());
        std::hint::black_box(n);

        let t = Instant::now();
        let parsed = import::parse_file(Source::ClaudeCode, file, options)?;
        parse.push(t.elapsed());

        let dir = ctx.fresh_dir(&format!("import-append-{round}"))?;
        let journal = Journal::open(&dir, Options::default())?;
        let t = Instant::now();
        import::write(&journal, &parsed, &mut |_| {})?;
        append.push(t.elapsed());
        journal.close();
        std::fs::remove_dir_all(&dir)?;

        let dir = ctx.fresh_dir(&format!("import-full-{round}"))?;
        let journal = Journal::open(&dir, Options::default())?;
        let t = Instant::now();
        let parsed = import::parse_file(Source::ClaudeCode, file, options)?;
        let written = import::write(&journal, &parsed, &mut |_| {})?;
        full.push(t.elapsed());
        journal.close();
        std::fs::remove_dir_all(&dir)?;
        if written.events_written != parsed.events.len() as u64 {
            return Err("an import into a fresh journal skipped events".into());
        }
        summary = Some(parsed.summary);
    }
    let summary = summary.ok_or("no round ran")?;
    let median = |v: &mut Vec<Duration>| stats::median_duration(v);
    let phases = Phases {
        json: median(&mut json_only),
        map: median(&mut parse),
        append: median(&mut append),
        full: median(&mut full),
    };
    Ok((phases, summary))
}

/// Runs the import workload.
///
/// # Errors
/// The importer's or the journal's errors, or missing shared data.
pub fn run(ctx: &Context) -> Res<Section> {
    let (file, blobs) = shared_file()?;
    let bytes = std::fs::read(&file)?;
    // The file is small: more rounds than the other workloads, for a stable median.
    let rounds = if ctx.quick { 1 } else { ctx.rounds.max(1) * 5 };
    let options = ImportOptions {
        blobs_dir: Some(blobs),
        ..ImportOptions::default()
    };
    let (phases, summary) = time_phases(ctx, &file, &bytes, &options, rounds)?;
    let records = summary.records as f64;
    let events = summary.events as f64;
    let per_s = |d: Duration, n: f64| n / d.as_secs_f64();
    let mut text = String::new();
    writeln!(
        text,
        "import of {} ({} records, {} events, {:.1} MB), median of {rounds} rounds",
        file.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        summary.records,
        summary.events,
        bytes.len() as f64 / 1e6
    )?;
    writeln!(
        text,
        "{:<34} {:>10} {:>12} {:>12} {:>9}",
        "phase", "ms", "records/s", "events/s", "×json"
    )?;
    for (name, d) in [
        ("JSON parse only (baseline)", phases.json),
        ("map to events", phases.map),
        ("append the mapped events", phases.append),
        ("whole import (durable)", phases.full),
    ] {
        writeln!(
            text,
            "{name:<34} {:>10.2} {:>12.0} {:>12.0} {:>9.2}",
            ms(d),
            per_s(d, records),
            per_s(d, events),
            d.as_secs_f64() / phases.json.as_secs_f64(),
        )?;
    }
    Ok(Section {
        name: "import",
        text,
        json: json!({
            "file": file.display().to_string(),
            "bytes": bytes.len(),
            "records": summary.records,
            "events": summary.events,
            "rounds": rounds,
            "jsonParseMs": ms(phases.json),
            "mapMs": ms(phases.map),
            "appendMs": ms(phases.append),
            "importMs": ms(phases.full),
            "importRecordsPerSec": per_s(phases.full, records),
            "importEventsPerSec": per_s(phases.full, events),
            "importToJsonParse": phases.full.as_secs_f64() / phases.json.as_secs_f64(),
        }),
    })
}
