//! Measures append throughput with durable group commit and the time to open a journal, and
//! prints each figure with its ratio to a baseline measured in the same run.
//!
//! ```text
//! cargo run --release -p journal-benches --bin measure [-- --events N --open-large N --dir DIR]
//! ```
//!
//! - append: events/s and commit latency for 1 and 8 producers at batch sizes 1, 100 and 1000,
//!   against the bound: a preallocated, zero-filled file written with one `write` + `fdatasync`
//!   per batch of the same bytes, on the same disk.
//! - open: the time to open a journal of 1,000 events and of `--open-large` events (default
//!   1,000,000), after a clean close; the ratio of the two.
#![allow(clippy::disallowed_methods)] // A measurement tool reads the wall clock by design.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use journal_benches::workload_event;
use journal_engine::{AppendOptions, Journal, Options};
use serde_json::json;

struct Args {
    events: u64,
    open_large: u64,
    dir: Option<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        events: 20_000,
        open_large: 1_000_000,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--events" => out.events = value()?.parse().map_err(|e| format!("--events: {e}"))?,
            "--open-large" => {
                out.open_large = value()?.parse().map_err(|e| format!("--open-large: {e}"))?
            }
            "--dir" => out.dir = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(out)
}

#[derive(Clone, Copy)]
struct Run {
    events_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

fn summarize(events: u64, elapsed: Duration, mut latencies: Vec<Duration>) -> Run {
    latencies.sort_unstable();
    Run {
        events_per_s: events as f64 / elapsed.as_secs_f64(),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
    }
}

/// The bound: the same bytes per batch written to a preallocated, zero-filled file, one
/// `pwrite` + `fdatasync` per batch; producers take turns under a lock, as a perfect group
/// commit would at best.
fn bound(dir: &Path, producers: u64, batch: u64, events: u64, frame_bytes: usize) -> Run {
    let path = dir.join("bound.dat");
    let total = (events as usize + 1024) * frame_bytes;
    {
        let mut f = std::fs::File::create(&path).expect("create bound file");
        let zeros = vec![0u8; 1 << 20];
        let mut written = 0;
        while written < total {
            f.write_all(&zeros).expect("zero-fill");
            written += zeros.len();
        }
        f.sync_all().expect("sync");
    }
    let file = Arc::new(std::sync::Mutex::new((
        OpenOptions::new().write(true).open(&path).expect("open"),
        0u64,
    )));
    let per_producer = events / producers;
    let buf = vec![0xA5u8; frame_bytes * batch as usize];
    let start = Instant::now();
    let handles: Vec<_> = (0..producers)
        .map(|_| {
            let file = Arc::clone(&file);
            let buf = buf.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                for _ in 0..per_producer / batch {
                    let t = Instant::now();
                    let mut guard = file.lock().expect("lock");
                    let offset = guard.1;
                    guard.0.write_all_at(&buf, offset).expect("write");
                    guard.0.sync_data().expect("fdatasync");
                    guard.1 += buf.len() as u64;
                    drop(guard);
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let latencies: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("join"))
        .collect();
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(&path);
    summarize(per_producer / batch * batch * producers, elapsed, latencies)
}

fn journal_run(dir: &Path, producers: u64, batch: u64, events: u64) -> Run {
    let jdir = dir.join(format!("journal-{producers}-{batch}"));
    let journal = Journal::open(&jdir, Options::default()).expect("open");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let per_producer = events / producers;
    // Events are built before the clock starts, as the bound's bytes are.
    let work: Vec<Vec<Vec<_>>> = (0..producers)
        .map(|p| {
            let base = p * 1_000_000_000;
            (0..per_producer / batch)
                .map(|b| {
                    (0..batch)
                        .map(|k| workload_event(base + b * batch + k))
                        .collect()
                })
                .collect()
        })
        .collect();
    let start = Instant::now();
    let latencies: Vec<Duration> = runtime.block_on(async {
        let tasks: Vec<_> = work
            .into_iter()
            .map(|batches| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    for events in batches {
                        let t = Instant::now();
                        journal
                            .append_batch(events, AppendOptions::default())
                            .await
                            .expect("append");
                        lat.push(t.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("join"));
        }
        all
    });
    let elapsed = start.elapsed();
    journal.close();
    let _ = std::fs::remove_dir_all(&jdir);
    summarize(per_producer / batch * batch * producers, elapsed, latencies)
}

fn build_journal(dir: &Path, events: u64) {
    let journal = Journal::open(dir, Options::default()).expect("open");
    let mut i = 0;
    while i < events {
        let n = 1000.min(events - i);
        journal
            .append_batch_blocking(
                (i..i + n).map(workload_event).collect(),
                AppendOptions::default(),
            )
            .expect("append");
        i += n;
    }
    journal.close();
}

fn open_time(dir: &Path) -> Duration {
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let journal = Journal::open(dir, Options::default()).expect("open");
            let elapsed = t.elapsed();
            journal.close();
            elapsed
        })
        .collect();
    times.sort_unstable();
    times[2]
}

fn main() {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("measure: {e}");
            std::process::exit(2);
        }
    };
    let tmp = tempfile::tempdir_in(args.dir.clone().unwrap_or_else(|| PathBuf::from(".")))
        .expect("tempdir");
    let dir = tmp.path();
    let frame_bytes =
        workload_event(1).to_msgpack().expect("encode").len() + journal_format::FRAME_HEADER_LEN;
    println!(
        "workload: {} bytes per event as MessagePack, {frame_bytes} bytes per frame",
        frame_bytes - 72
    );
    println!(
        "\n{:<10} {:>6} {:>9} {:>14} {:>14} {:>8} {:>10} {:>10}",
        "append",
        "batch",
        "producers",
        "journal ev/s",
        "bound ev/s",
        "ratio",
        "p99 ms",
        "bound p99"
    );
    let mut rows = Vec::new();
    for producers in [1u64, 8] {
        for batch in [1u64, 100, 1000] {
            let events = if batch == 1 {
                args.events / 4
            } else {
                args.events * 5
            }
            .max(batch * producers);
            let b = bound(dir, producers, batch, events, frame_bytes);
            let j = journal_run(dir, producers, batch, events);
            println!(
                "{:<10} {:>6} {:>9} {:>14.0} {:>14.0} {:>8.2} {:>10.2} {:>10.2}",
                "durable",
                batch,
                producers,
                j.events_per_s,
                b.events_per_s,
                j.events_per_s / b.events_per_s,
                j.p99_ms,
                b.p99_ms
            );
            rows.push(json!({
                "batch": batch, "producers": producers,
                "journal": {"eventsPerSec": j.events_per_s, "p50Ms": j.p50_ms, "p99Ms": j.p99_ms},
                "bound": {"eventsPerSec": b.events_per_s, "p50Ms": b.p50_ms, "p99Ms": b.p99_ms},
                "ratioToBound": j.events_per_s / b.events_per_s,
            }));
        }
    }
    let small = dir.join("open-small");
    let large = dir.join("open-large");
    build_journal(&small, 1_000);
    build_journal(&large, args.open_large);
    let t_small = open_time(&small);
    let t_large = open_time(&large);
    println!(
        "\nopen after a clean close: 1,000 events {:.2} ms, {} events {:.2} ms, ratio {:.2}",
        t_small.as_secs_f64() * 1e3,
        args.open_large,
        t_large.as_secs_f64() * 1e3,
        t_large.as_secs_f64() / t_small.as_secs_f64()
    );
    let report = json!({
        "append": rows,
        "open": {"smallEvents": 1000, "smallMs": t_small.as_secs_f64() * 1e3, "largeEvents": args.open_large, "largeMs": t_large.as_secs_f64() * 1e3, "ratio": t_large.as_secs_f64() / t_small.as_secs_f64()},
    });
    println!("\n{report}");
}
