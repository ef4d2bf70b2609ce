//! The read-model rebuild workload: how fast every projection is rebuilt from the log, and its
//! peak memory, against a plain sequential read of the same log in the same run.
//!
//! The journal is a generated multi-session agent workload
//! (`journal_projections::workload::generate`). Each measured phase runs in a child process of
//! its own so that its peak resident memory (`VmHWM`) is its own: `read` (every event read and
//! decoded, unverified: the floor a rebuild cannot beat), `rebuild` (every projection rebuilt
//! from scratch into a fresh store, one thread, by partition as `ReadModels` does by default)
//! and `rebuild-one-pass` (the same by the workers' ordinary catch-up,
//! `ReadModels::without_partitions`: the build before partitions, each worker reading the whole
//! log with every stream's state held at once).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use journal_engine::{AppendOptions, Chain, Journal, Options};
use journal_format::Position;
use journal_projections::{workload, ReadModels};
use serde_json::{json, Value};

use super::{run_child, Context, Res, Section};

/// The peak resident memory of this process, in KiB (0 where `/proc` does not say).
#[must_use]
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// One phase in a child process: `rebuild-phase read|rebuild DIR`.
///
/// # Errors
/// The journal's or the read models' errors, or an unknown phase.
pub fn phase_child(args: &[String]) -> Res<Value> {
    let phase = args.first().ok_or("rebuild-phase needs a phase")?.clone();
    let dir = PathBuf::from(args.get(1).ok_or("rebuild-phase needs a directory")?);
    if phase == "build" {
        // For profiling: `compare --child rebuild-phase build DIR EVENTS` leaves the workload's
        // journal in DIR, then `... rebuild-phase rebuild DIR` runs the rebuild alone.
        let events = args
            .get(2)
            .ok_or("build needs a number of events")?
            .parse()?;
        let n = build(&dir, events)?;
        return Ok(json!({"phase": phase, "events": n}));
    }
    let journal = Journal::open(&dir, Options::default())?;
    let head = journal.head().position.0;
    // A store left by an earlier run (of a phase run alone, for a profiler) is deleted before
    // the clock starts: the rebuild starts from none, and its deletion is not the rebuild's.
    let store = dir.join("bench-projections.redb");
    let _ = std::fs::remove_file(&store);
    let start = Instant::now();
    match phase.as_str() {
        "read" => {
            let mut n = 0u64;
            for e in journal.read(Position(1), None, Chain::Unverified) {
                n += u64::from(!e?.envelope.event_id.is_empty());
            }
            if n != head {
                return Err(format!("read {n} events of {head}").into());
            }
        }
        "rebuild" | "rebuild-one-pass" => {
            let mut models = ReadModels::open_at(&journal, &store)?;
            if phase == "rebuild-one-pass" {
                // The build before partitions: every stream's state held at once.
                models = models.without_partitions();
            } else if let Some(n) = args.get(2) {
                // For measuring the passes' trade of speed for memory, and the copies' of speed
                // for scratch space:
                // `compare --child rebuild-phase rebuild DIR EVENTS_PER_PARTITION [COPY_BYTES_MAX]`.
                models = models.with_partition_events(n.parse()?);
                if let Some(bytes) = args.get(3) {
                    models = models.with_copy_bytes_max(bytes.parse()?);
                }
            }
            models.catch_up(&mut |_, _, _| {})?;
            let at = models.freshness("state")?.position;
            if at != head {
                return Err(format!("rebuilt to {at}, head {head}").into());
            }
        }
        other => return Err(format!("unknown phase {other}").into()),
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(json!({
        "phase": phase,
        "events": head,
        "seconds": seconds,
        "eventsPerSec": head as f64 / seconds,
        "peakRssMiB": peak_rss_kib() as f64 / 1024.0,
    }))
}

fn build(dir: &Path, events: usize) -> Res<usize> {
    let journal = super::buffered_journal(dir)?;
    let generated = workload::generate(42, sessions(events), events);
    let n = generated.len();
    for chunk in generated.chunks(1000) {
        journal.append_batch_blocking(chunk, AppendOptions::default())?;
    }
    journal.close();
    Ok(n)
}

fn sessions(events: usize) -> usize {
    (events / 5000).max(1)
}

/// Runs the rebuild workload.
///
/// # Errors
/// The journal's or the read models' errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let events = usize::try_from(ctx.events_or(2_000, 1_000_000))?;
    let dir = ctx.fresh_dir("rebuild")?;
    let n = build(&dir, events)?;
    let read = run_child(ctx, &["rebuild-phase", "read"], &dir)?;
    let rebuild = run_child(ctx, &["rebuild-phase", "rebuild"], &dir)?;
    let one_pass = run_child(ctx, &["rebuild-phase", "rebuild-one-pass"], &dir)?;
    std::fs::remove_dir_all(&dir)?;
    let per_s = |v: &Value| v["eventsPerSec"].as_f64().unwrap_or(0.0);
    let ratio = per_s(&rebuild) / per_s(&read);
    let mut text = String::new();
    writeln!(
        text,
        "{:<26} {:>10} {:>9} {:>12} {:>9} {:>7}",
        "rebuild", "events", "seconds", "events/s", "peak MiB", "×read"
    )?;
    for (name, row, r) in [
        ("read (baseline)", &read, 1.0),
        ("rebuild, both projections", &rebuild, ratio),
        (
            "rebuild, ordinary catch-up",
            &one_pass,
            per_s(&one_pass) / per_s(&read),
        ),
    ] {
        writeln!(
            text,
            "{name:<26} {:>10} {:>9.2} {:>12.0} {:>9.1} {r:>7.2}",
            row["events"],
            row["seconds"].as_f64().unwrap_or(0.0),
            per_s(row),
            row["peakRssMiB"].as_f64().unwrap_or(0.0),
        )?;
    }
    Ok(Section {
        name: "rebuild",
        text,
        json: json!({"events": n, "sessions": sessions(events), "read": read, "rebuild": rebuild, "rebuildOnePass": one_pass, "rebuildToRead": ratio}),
    })
}
