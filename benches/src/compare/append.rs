//! The append workload: the same events through every engine of [`Kind::ALL`], for batch sizes
//! 1, 100 and 1000 and 1 and 8 producers. Within a cell the engines run in turn, round after
//! round, each in a fresh directory; each figure is the median over the rounds.

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::engines::{Batch, Engine, Kind};
use super::stats::{median, Latency};
use super::{dir_bytes, ms, Context, Res, Section};

/// The batch sizes measured.
pub const BATCHES: [u64; 3] = [1, 100, 1000];
/// The producer counts measured.
pub const PRODUCERS: [u64; 2] = [1, 8];

/// One engine's trial of one cell: one round's appends, in a fresh directory.
#[derive(Clone, Debug)]
pub(super) struct Trial {
    events: u64,
    elapsed: Duration,
    /// The process's CPU time inside the clock, every thread's (the engine's own threads, the
    /// producers').
    cpu: Duration,
    latencies: Vec<Duration>,
    msgpack_bytes: u64,
    disk_bytes: u64,
    log_bytes: u64,
}

/// Events in a cell: `--events` (default 50,000; 2,000 quick) for batches of 100 and more, a
/// twentieth of that for single-event batches (each costs a sync), and at least one batch per
/// producer.
fn cell_events(ctx: &Context, batch: u64, producers: u64) -> u64 {
    let base = ctx.events_or(2_000, 50_000);
    let events = if batch == 1 { base / 20 } else { base };
    let per_producer = (events / producers / batch).max(1) * batch;
    per_producer * producers
}

impl Trial {
    /// A trial timed elsewhere (the http workload's clients), with no byte counts.
    pub(super) fn timed(
        events: u64,
        elapsed: Duration,
        cpu: Duration,
        latencies: Vec<Duration>,
    ) -> Trial {
        Trial {
            events,
            elapsed,
            cpu,
            latencies,
            msgpack_bytes: 0,
            disk_bytes: 0,
            log_bytes: 0,
        }
    }
}

/// Appends `events` through `kind` in batches of `batch` from `producers` threads, timed.
pub(super) fn trial(
    ctx: &Context,
    kind: Kind,
    batch: u64,
    producers: u64,
    events: u64,
) -> Res<Trial> {
    let dir = ctx.fresh_dir(&format!("append-{}", kind.name()))?;
    let per_producer = events / producers;
    // Events are built (and for the peers encoded) before the clock starts.
    let mut work: Vec<Vec<Batch>> = Vec::new();
    let mut msgpack_bytes = 0;
    for p in 0..producers {
        let base = p * 1_000_000_000;
        let mut batches = Vec::new();
        for b in 0..per_producer / batch {
            let keys = (base + b * batch..base + (b + 1) * batch).collect();
            let built = kind.batch(keys, ctx.ids)?;
            msgpack_bytes += built.msgpack_bytes;
            batches.push(built);
        }
        work.push(batches);
    }
    let frame_bytes = msgpack_bytes + events * journal_format::FRAME_HEADER_LEN as u64;
    let engine: Box<dyn Engine> = kind.open(&dir, usize::try_from(producers)?, frame_bytes)?;
    let barrier = Barrier::new(usize::try_from(producers)? + 1);
    let (elapsed, cpu, latencies) = std::thread::scope(|scope| -> Res<_> {
        let handles: Vec<_> = work
            .into_iter()
            .enumerate()
            .map(|(producer, batches)| {
                let (engine, barrier) = (&*engine, &barrier);
                // The batches are handed back, to be freed after the clock: what a batch
                // costs to free is the caller's, not the engine's.
                scope.spawn(move || -> Res<(Vec<Duration>, Vec<Batch>)> {
                    let mut latencies = Vec::with_capacity(batches.len());
                    barrier.wait();
                    for batch in &batches {
                        let t = Instant::now();
                        engine.append(producer, batch)?;
                        latencies.push(t.elapsed());
                    }
                    Ok((latencies, batches))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cpu_start = process_cpu();
        let mut latencies = Vec::new();
        let mut spent = Vec::new();
        for h in handles {
            let (l, batches) = h.join().map_err(|_| "a producer panicked")??;
            latencies.extend(l);
            spent.push(batches);
        }
        let elapsed = start.elapsed();
        let cpu = process_cpu().saturating_sub(cpu_start);
        drop(spent);
        Ok((elapsed, cpu, latencies))
    })?;
    engine.close()?;
    let disk_bytes = dir_bytes(&dir);
    let log_bytes = if kind == Kind::Journal {
        dir_bytes(&dir.join("journal").join("segments"))
    } else {
        disk_bytes
    };
    std::fs::remove_dir_all(&dir)?;
    Ok(Trial {
        events,
        elapsed,
        cpu,
        latencies,
        msgpack_bytes,
        disk_bytes,
        log_bytes,
    })
}

/// The CPU time the process has used so far, every thread's (exited ones' too).
pub(super) fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or_default(),
        u32::try_from(t.tv_nsec).unwrap_or_default(),
    )
}

/// The medians of one engine's trials of a cell.
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct Figures {
    pub(super) events_per_s: f64,
    mb_per_s: f64,
    pub(super) latency: Latency,
    bytes_per_event: f64,
    log_bytes_per_event: f64,
    msgpack_bytes_per_event: f64,
    pub(super) cpu_us_per_event: f64,
}

/// The medians of `trials`' figures.
pub(super) fn figures(trials: &[Trial]) -> Figures {
    let per = |f: &dyn Fn(&Trial) -> f64| median(&mut trials.iter().map(f).collect::<Vec<_>>());
    let lat = |f: &dyn Fn(&Latency) -> Duration| {
        let mut all: Vec<f64> = trials
            .iter()
            .map(|r| f(&Latency::of(&mut r.latencies.clone())).as_secs_f64())
            .collect();
        Duration::from_secs_f64(median(&mut all))
    };
    Figures {
        events_per_s: per(&|r| r.events as f64 / r.elapsed.as_secs_f64()),
        mb_per_s: per(&|r| r.msgpack_bytes as f64 / r.elapsed.as_secs_f64() / 1e6),
        latency: Latency {
            p50: lat(&|l| l.p50),
            p99: lat(&|l| l.p99),
            max: lat(&|l| l.max),
        },
        bytes_per_event: per(&|r| r.disk_bytes as f64 / r.events as f64),
        log_bytes_per_event: per(&|r| r.log_bytes as f64 / r.events as f64),
        msgpack_bytes_per_event: per(&|r| r.msgpack_bytes as f64 / r.events as f64),
        cpu_us_per_event: per(&|r| r.cpu.as_secs_f64() * 1e6 / r.events as f64),
    }
}

/// Runs the append workload.
///
/// # Errors
/// Any engine's error.
pub fn run(ctx: &Context) -> Res<Section> {
    let mut text = String::new();
    writeln!(
        text,
        "{:>5} {:>4} {:<8} {:>11} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>9} {:>7}",
        "batch",
        "prod",
        "engine",
        "events/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "B/event",
        "×bound",
        "×journal",
        "p99×bound",
        "CPU µs"
    )?;
    let mut cells = Vec::new();
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| ctx.engines.is_empty() || ctx.engines.contains(k))
        .collect();
    for producers in PRODUCERS {
        for batch in BATCHES {
            if !ctx.cells.is_empty() && !ctx.cells.contains(&(batch, producers)) {
                continue;
            }
            let cell = Cell {
                batch,
                producers,
                events: cell_events(ctx, batch, producers),
            };
            let all = cell.measure(ctx, &kinds)?;
            cells.push(cell.report(&mut text, &kinds, &all)?);
        }
    }
    writeln!(
        text,
        "MB/s counts MessagePack bytes; B/event is everything the engine left on disk (the \
         journal's log alone: see logBytesPerEvent in the JSON); CPU µs is the process's CPU \
         time inside the clock (every thread's, the kernel's work for it included) per event; \
         medians of {} rounds.",
        ctx.rounds
    )?;
    Ok(Section {
        name: "append",
        text,
        json: json!({ "rounds": ctx.rounds, "cells": cells }),
    })
}

/// A cell of the workload: a batch size, a producer count, and how many events.
struct Cell {
    batch: u64,
    producers: u64,
    events: u64,
}

impl Cell {
    /// The figures of each of `kinds`, from `ctx.rounds` trials each, the engines in turn
    /// within each round.
    fn measure(&self, ctx: &Context, kinds: &[Kind]) -> Res<Vec<Figures>> {
        let Cell {
            batch,
            producers,
            events,
        } = *self;
        let mut trials: Vec<Vec<Trial>> = vec![Vec::new(); kinds.len()];
        for _ in 0..ctx.rounds {
            for (i, &kind) in kinds.iter().enumerate() {
                let trial = trial(ctx, kind, batch, producers, events)
                    .map_err(|e| format!("{} batch {batch} × {producers}: {e}", kind.name()))?;
                if let Some(slot) = trials.get_mut(i) {
                    slot.push(trial);
                }
            }
        }
        Ok(trials.iter().map(|t| figures(t)).collect())
    }

    /// Writes a line per engine to `text`, with its ratios to the bound and to the journal;
    /// returns the cell as JSON.
    fn report(&self, text: &mut String, kinds: &[Kind], all: &[Figures]) -> Res<Value> {
        let Cell {
            batch,
            producers,
            events,
        } = *self;
        let of = |kind: Kind| {
            kinds
                .iter()
                .position(|k| *k == kind)
                .and_then(|i| all.get(i).copied())
                .unwrap_or_default()
        };
        let (bound, journal) = (of(Kind::Bound), of(Kind::Journal));
        let mut engines = serde_json::Map::new();
        for (kind, f) in kinds.iter().zip(all) {
            let to_bound = f.events_per_s / bound.events_per_s;
            let to_journal = f.events_per_s / journal.events_per_s;
            let p99_to_bound = f.latency.p99.as_secs_f64() / bound.latency.p99.as_secs_f64();
            writeln!(
                text,
                "{batch:>5} {producers:>4} {:<8} {:>11.0} {:>7.1} {:>8.3} {:>8.3} {:>8.3} {:>7.0} {:>7.2} {:>8.2} {:>9.2} {:>7.2}",
                kind.name(),
                f.events_per_s,
                f.mb_per_s,
                ms(f.latency.p50),
                ms(f.latency.p99),
                ms(f.latency.max),
                f.bytes_per_event,
                to_bound,
                to_journal,
                p99_to_bound,
                f.cpu_us_per_event,
            )?;
            engines.insert(
                kind.name().into(),
                json!({
                    "eventsPerSec": f.events_per_s,
                    "mbPerSec": f.mb_per_s,
                    "p50Ms": ms(f.latency.p50),
                    "p99Ms": ms(f.latency.p99),
                    "maxMs": ms(f.latency.max),
                    "bytesOnDiskPerEvent": f.bytes_per_event,
                    "logBytesPerEvent": f.log_bytes_per_event,
                    "ratioToBound": to_bound,
                    "ratioToJournal": to_journal,
                    "p99RatioToBound": p99_to_bound,
                    "cpuUsPerEvent": f.cpu_us_per_event,
                }),
            );
        }
        Ok(json!({
            "batch": batch,
            "producers": producers,
            "events": events,
            "msgpackBytesPerEvent": all.first().map_or(0.0, |f| f.msgpack_bytes_per_event),
            "engines": Value::Object(engines),
        }))
    }
}
