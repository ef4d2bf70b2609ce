//! The read-model rebuild workload: how fast every projection is rebuilt from the log, and its
//! peak memory, against a plain sequential read of the same log in the same run.
//!
//! ```sh
//! cargo run --release -p journal-benches --bin rebuild -- --events 1000000 [--dir DIR]
//! ```
//!
//! The journal is built first (a generated multi-session agent workload); then each measured
//! phase runs in a child process of its own so that its peak resident memory (`VmHWM`) is its
//! own: `read` (every event read and decoded, unverified: the floor a rebuild cannot beat) and
//! `rebuild` (every projection rebuilt from scratch into a fresh store, one thread).

#![allow(clippy::disallowed_methods)] // A measurement tool reads the wall clock by design.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use journal_engine::{AppendOptions, Durability, Journal, Options};
use journal_format::Position;
use journal_projections::{workload, ReadModels};
use serde_json::{json, Value};

fn peak_rss_kib() -> u64 {
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

fn child(phase: &str, dir: &Path) -> Value {
    let journal = Journal::open(dir, Options::default()).expect("open");
    let head = journal.head().position.0;
    let start = Instant::now();
    match phase {
        "read" => {
            let mut n = 0u64;
            for e in journal.read(Position(1), None, false) {
                let e = e.expect("read");
                n += u64::from(!e.envelope.event_id.is_empty());
            }
            assert_eq!(n, head);
        }
        "rebuild" => {
            let store = dir.join("bench-projections.redb");
            let _ = std::fs::remove_file(&store);
            let models = ReadModels::open_at(&journal, &store).expect("store");
            models.catch_up(&mut |_, _, _| {}).expect("rebuild");
            assert_eq!(models.freshness("state").expect("freshness").position, head);
        }
        other => panic!("unknown phase {other}"),
    }
    let seconds = start.elapsed().as_secs_f64();
    json!({
        "phase": phase,
        "events": head,
        "seconds": seconds,
        "eventsPerSec": head as f64 / seconds,
        "peakRssMiB": peak_rss_kib() as f64 / 1024.0,
    })
}

fn build(dir: &Path, events: usize) -> usize {
    let journal = Journal::open(
        dir,
        Options {
            durability: Durability::Buffered {
                sync_interval: std::time::Duration::from_millis(200),
            },
            ..Options::default()
        },
    )
    .expect("open");
    let sessions = (events / 5000).max(1);
    let generated = workload::generate(42, sessions, events);
    let n = generated.len();
    let mut batch = Vec::with_capacity(1000);
    for e in generated {
        batch.push(e);
        if batch.len() == 1000 {
            journal
                .append_batch_blocking(std::mem::take(&mut batch), AppendOptions::default())
                .expect("append");
        }
    }
    if !batch.is_empty() {
        journal
            .append_batch_blocking(batch, AppendOptions::default())
            .expect("append");
    }
    journal.close();
    n
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut events = 1_000_000usize;
    let mut dir: Option<PathBuf> = None;
    let mut keep: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--child" => {
                let phase = args.next().expect("phase");
                let dir = PathBuf::from(args.next().expect("dir"));
                println!("{}", child(&phase, &dir));
                return;
            }
            "--events" => {
                events = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--events N")
            }
            "--dir" => dir = args.next().map(PathBuf::from),
            // Build the journal at DIR and keep it (or reuse it when it is there): for profiling
            // a phase alone with `--child PHASE DIR`.
            "--journal" => keep = args.next().map(PathBuf::from),
            other => {
                eprintln!("rebuild: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let tmp = tempfile::tempdir_in(dir.unwrap_or_else(|| PathBuf::from("."))).expect("tempdir");
    let jdir = keep.unwrap_or_else(|| tmp.path().join("journal"));
    let t = Instant::now();
    let n = if jdir.join("segments").is_dir() {
        let journal = Journal::open(&jdir, Options::default()).expect("open");
        let head = journal.head().position.0;
        journal.close();
        usize::try_from(head).unwrap_or(usize::MAX)
    } else {
        build(&jdir, events)
    };
    println!(
        "built a journal of {n} events ({} sessions) in {:.1} s",
        (events / 5000).max(1),
        t.elapsed().as_secs_f64()
    );
    let exe = std::env::current_exe().expect("exe");
    let run = |phase: &str| -> Value {
        let out = Command::new(&exe)
            .args(["--child", phase])
            .arg(&jdir)
            .output()
            .expect("child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("child output")
    };
    let read = run("read");
    let rebuild = run("rebuild");
    let ratio = rebuild["eventsPerSec"].as_f64().unwrap_or(0.0)
        / read["eventsPerSec"].as_f64().unwrap_or(1.0);
    println!(
        "\n{:<10} {:>10} {:>10} {:>14} {:>12} {:>14}",
        "phase", "events", "seconds", "events/s", "peak MiB", "ratio to read"
    );
    for (row, r) in [(&read, 1.0), (&rebuild, ratio)] {
        println!(
            "{:<10} {:>10} {:>10.2} {:>14.0} {:>12.1} {:>14.2}",
            row["phase"].as_str().unwrap_or("?"),
            row["events"],
            row["seconds"].as_f64().unwrap_or(0.0),
            row["eventsPerSec"].as_f64().unwrap_or(0.0),
            row["peakRssMiB"].as_f64().unwrap_or(0.0),
            r
        );
    }
    println!(
        "\n{}",
        json!({"read": read, "rebuild": rebuild, "rebuildToRead": ratio})
    );
}
