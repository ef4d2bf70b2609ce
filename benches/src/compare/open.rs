//! The open workload: the time to open a journal after a crash, for 1,000 events and for
//! 1,000,000 (`--events`), and their ratio. A crash is a child process that opens the journal,
//! appends a batch of 100 events, and leaves with `std::process::exit` once the batch is
//! acknowledged: no close, the index behind the log, as after a kill. The parent then times
//! `Journal::open` (recovery, the index check and catch-up), and, for reference, an open after
//! the clean close that follows. At least `OPEN_ROUNDS_MIN` rounds, whatever `--rounds` says.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use journal_engine::{AppendOptions, Journal, Options};
use serde_json::json;

use super::stats::median_duration;
use super::{built_journal, ms, run_child, Context, Res, Section};

/// The fewest rounds of each open timed. An open after a crash reads the filler's zeros after
/// the last frame, as many as the child's filler wrote before it left (up to 2 MiB), which
/// varies from round to round: a median of 3 rounds is too noisy to compare the two sizes.
const OPEN_ROUNDS_MIN: usize = 9;

/// The child of a crash: open, append 100 events, print the head, exit without closing.
///
/// # Errors
/// The journal's errors (on success it does not return).
pub fn crash_append_child(args: &[String]) -> Res<serde_json::Value> {
    let dir = PathBuf::from(args.first().ok_or("crash-append needs a directory")?);
    let journal = Journal::open(&dir, Options::default())?;
    let head = journal.head().position.0;
    let base = 3_000_000_000 + head;
    journal.append_batch_blocking(
        (base..base + 100)
            .map(crate::workload_event)
            .collect::<Vec<_>>(),
        AppendOptions::default(),
    )?;
    println!("{}", json!({"head": journal.head().position.0}));
    std::io::stdout().flush()?;
    // The crash: no close, no destructors; the index thread is stopped wherever it is.
    std::process::exit(0);
}

fn open_times(ctx: &Context, events: u64) -> Res<(u64, Duration, Duration)> {
    let dir = built_journal(ctx, events)?;
    let mut crashed = Vec::new();
    let mut clean = Vec::new();
    let mut head = 0;
    for _ in 0..ctx.rounds.max(OPEN_ROUNDS_MIN) {
        run_child(ctx, &["crash-append"], &dir)?;
        let t = Instant::now();
        let journal = Journal::open(&dir, Options::default())?;
        crashed.push(t.elapsed());
        head = journal.head().position.0;
        journal.close();
        let t = Instant::now();
        let journal = Journal::open(&dir, Options::default())?;
        clean.push(t.elapsed());
        journal.close();
    }
    Ok((
        head,
        median_duration(&mut crashed),
        median_duration(&mut clean),
    ))
}

/// Runs the open workload.
///
/// # Errors
/// The journal's errors, or a crash child that fails.
pub fn run(ctx: &Context) -> Res<Section> {
    let large = ctx.events_or(20_000, 1_000_000);
    let (small_head, small_crash, small_clean) = open_times(ctx, 1_000)?;
    let (large_head, large_crash, large_clean) = open_times(ctx, large)?;
    let ratio = large_crash.as_secs_f64() / small_crash.as_secs_f64();
    let clean_ratio = large_clean.as_secs_f64() / small_clean.as_secs_f64();
    let mut text = String::new();
    writeln!(
        text,
        "{:<24} {:>12} {:>12} {:>12}",
        "open", "events", "crash ms", "clean ms"
    )?;
    for (name, head, crash, clean) in [
        ("small", small_head, small_crash, small_clean),
        ("large", large_head, large_crash, large_clean),
    ] {
        writeln!(
            text,
            "{name:<24} {head:>12} {:>12.2} {:>12.2}",
            ms(crash),
            ms(clean)
        )?;
    }
    writeln!(
        text,
        "{:<24} {:>12} {ratio:>12.2} {clean_ratio:>12.2}",
        "large ÷ small", ""
    )?;
    Ok(Section {
        name: "open",
        text,
        json: json!({
            "rounds": ctx.rounds.max(OPEN_ROUNDS_MIN),
            "small": {"events": small_head, "crashMs": ms(small_crash), "cleanMs": ms(small_clean)},
            "large": {"events": large_head, "crashMs": ms(large_crash), "cleanMs": ms(large_clean)},
            "crashRatio": ratio,
            "cleanRatio": clean_ratio,
        }),
    })
}
