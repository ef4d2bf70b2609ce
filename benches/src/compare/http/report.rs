//! The http workload's tables, in the comparison's style, and its targets with whether each
//! holds.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use super::stream::{self, SUBSCRIBERS};
use super::{Cell, TARGET_LAG_P99, TARGET_SHARE};
use crate::compare::stats::{median, Latency};
use crate::compare::{ms, Res};

/// Writes a line per side of each cell; answers the cells as JSON.
pub(super) fn cells(text: &mut String, cells: &[Cell]) -> Res<Value> {
    writeln!(
        text,
        "{:>5} {:>7} {:<10} {:>9} {:>11} {:>8} {:>8} {:>8} {:>7} {:>12}",
        "batch",
        "clients",
        "side",
        "events",
        "events/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "CPU µs",
        "×in-process"
    )?;
    let mut out = Vec::new();
    for cell in cells {
        let share = cell.http.events_per_s / cell.local.events_per_s;
        let mut sides = serde_json::Map::new();
        for (side, f) in [("http", &cell.http), ("in-process", &cell.local)] {
            let to_local = f.events_per_s / cell.local.events_per_s;
            writeln!(
                text,
                "{:>5} {:>7} {side:<10} {:>9} {:>11.0} {:>8.3} {:>8.3} {:>8.3} {:>7.2} {to_local:>12.2}",
                cell.batch,
                cell.clients,
                cell.events,
                f.events_per_s,
                ms(f.latency.p50),
                ms(f.latency.p99),
                ms(f.latency.max),
                f.cpu_us_per_event,
            )?;
            sides.insert(
                side.into(),
                json!({
                    "eventsPerSec": f.events_per_s,
                    "p50Ms": ms(f.latency.p50),
                    "p99Ms": ms(f.latency.p99),
                    "maxMs": ms(f.latency.max),
                    "cpuUsPerEvent": f.cpu_us_per_event,
                }),
            );
        }
        out.push(json!({
            "batch": cell.batch,
            "clients": cell.clients,
            "events": cell.events,
            "httpShare": share,
            "sides": Value::Object(sides),
        }));
    }
    Ok(Value::Array(out))
}

/// One round of the event stream, summarised.
pub(super) struct Stream {
    events: u64,
    produced_per_s: f64,
    delivered_per_s: f64,
    lag: Latency,
    complete: usize,
    problems: Vec<String>,
}

impl Stream {
    /// Summarises a trial (its lags sorted in place).
    pub(super) fn of(mut trial: stream::Trial) -> Stream {
        trial.lags_us.sort_unstable();
        let at = |q: f64| {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a rank within the slice"
            )]
            let i = ((trial.lags_us.len().saturating_sub(1)) as f64 * q).round() as usize;
            Duration::from_micros(trial.lags_us.get(i).copied().unwrap_or_default().into())
        };
        Stream {
            events: trial.events,
            produced_per_s: trial.produced_per_s,
            delivered_per_s: trial.delivered as f64 / trial.window.as_secs_f64().max(1e-9),
            lag: Latency {
                p50: at(0.5),
                p99: at(0.99),
                max: at(1.0),
            },
            complete: trial.complete,
            problems: trial.problems,
        }
    }
}

/// The event stream over the rounds, a side: medians, and the fewest complete subscribers.
struct Side {
    events: u64,
    produced_per_s: f64,
    delivered_per_s: f64,
    lag: Latency,
    complete: usize,
}

impl Side {
    fn of(rounds: &[Stream]) -> Side {
        let per =
            |f: &dyn Fn(&Stream) -> f64| median(&mut rounds.iter().map(f).collect::<Vec<_>>());
        let lag = |f: &dyn Fn(&Latency) -> Duration| {
            Duration::from_secs_f64(per(&|s| f(&s.lag).as_secs_f64()))
        };
        Side {
            events: rounds.first().map_or(0, |s| s.events),
            produced_per_s: per(&|s| s.produced_per_s),
            delivered_per_s: per(&|s| s.delivered_per_s),
            lag: Latency {
                p50: lag(&|l| l.p50),
                p99: lag(&|l| l.p99),
                max: lag(&|l| l.max),
            },
            complete: rounds.iter().map(|s| s.complete).min().unwrap_or_default(),
        }
    }

    fn json(&self) -> Value {
        json!({
            "events": self.events,
            "producedPerSec": self.produced_per_s,
            "deliveredPerSec": self.delivered_per_s,
            "lagP50Ms": ms(self.lag.p50),
            "lagP99Ms": ms(self.lag.p99),
            "lagMaxMs": ms(self.lag.max),
            "completeSubscribers": self.complete,
        })
    }
}

/// The event stream over HTTP, as the targets need it, and both sides as JSON.
pub(super) struct StreamSummary {
    lag_p99: Duration,
    complete: usize,
    pub(super) json: Value,
}

/// Writes the event stream's line for each side (medians of the rounds; the fewest complete
/// subscribers of any round) and the first problem seen (the JSON keeps a few).
pub(super) fn streams(text: &mut String, http: &[Stream], local: &[Stream]) -> Res<StreamSummary> {
    writeln!(
        text,
        "\n{:<10} {:>11} {:>7} {:>7} {:>10} {:>11} {:>10} {:>10} {:>10} {:>9}",
        "stream",
        "subscribers",
        "rate/s",
        "events",
        "produced/s",
        "delivered/s",
        "lag p50 ms",
        "lag p99 ms",
        "lag max ms",
        "complete"
    )?;
    let sides = [("http", Side::of(http)), ("in-process", Side::of(local))];
    for (name, side) in &sides {
        writeln!(
            text,
            "{name:<10} {SUBSCRIBERS:>11} {:>7} {:>7} {:>10.0} {:>11.0} {:>10.3} {:>10.3} {:>10.3} {:>9}",
            stream::RATE,
            side.events,
            side.produced_per_s,
            side.delivered_per_s,
            ms(side.lag.p50),
            ms(side.lag.p99),
            ms(side.lag.max),
            format!("{}/{SUBSCRIBERS}", side.complete),
        )?;
    }
    let mut problems = serde_json::Map::new();
    for ((name, side), rounds) in sides.iter().zip([http, local]) {
        let seen: Vec<&String> = rounds.iter().flat_map(|s| &s.problems).collect();
        if let Some(first) = seen.first() {
            let short = SUBSCRIBERS - side.complete;
            writeln!(
                text,
                "  {name}: {short} subscribers short (the worst round); first: {first}"
            )?;
        }
        problems.insert((*name).into(), json!(seen));
    }
    let [(_, over_http), (_, in_process)] = &sides;
    Ok(StreamSummary {
        lag_p99: over_http.lag.p99,
        complete: over_http.complete,
        json: json!({
            "subscribers": SUBSCRIBERS,
            "ratePerSec": stream::RATE,
            "http": over_http.json(),
            "in-process": in_process.json(),
            "problems": Value::Object(problems),
        }),
    })
}

/// Writes the targets, each with what was measured and whether it holds; answers them
/// as JSON.
pub(super) fn targets(
    text: &mut String,
    cells: &[Cell],
    stream: Option<&StreamSummary>,
) -> Res<Value> {
    let share = cells
        .iter()
        .find(|c| (c.batch, c.clients) == (1, 64))
        .map(|c| c.http.events_per_s / c.local.events_per_s);
    let not_measured = || "not measured".to_string();
    let rows = [
        (
            format!("64 clients, batch 1: ≥ {TARGET_SHARE:.2} × in-process (64 threads)"),
            share.map_or_else(not_measured, |s| format!("{s:.2} ×")),
            share.is_some_and(|s| s >= TARGET_SHARE),
        ),
        (
            format!(
                "{SUBSCRIBERS} subscribers at {} events/s: every event, no gap",
                stream::RATE
            ),
            stream.map_or_else(not_measured, |s| {
                format!("{}/{SUBSCRIBERS} complete", s.complete)
            }),
            stream.is_some_and(|s| s.complete == SUBSCRIBERS),
        ),
        (
            format!("the same: p99 lag < {} ms", TARGET_LAG_P99.as_millis()),
            stream.map_or_else(not_measured, |s| format!("{:.3} ms", ms(s.lag_p99))),
            stream.is_some_and(|s| s.lag_p99 < TARGET_LAG_P99),
        ),
    ];
    writeln!(text, "\n{:<62} {:>16} {:>5}", "target", "measured", "holds")?;
    let mut out = Vec::new();
    for (target, measured, holds) in rows {
        let yes = if holds { "yes" } else { "NO" };
        writeln!(text, "{target:<62} {measured:>16} {yes:>5}")?;
        out.push(json!({"target": target, "measured": measured, "holds": holds}));
    }
    Ok(Value::Array(out))
}

/// Writes what the columns mean.
pub(super) fn notes(text: &mut String, rounds: usize) -> Res<()> {
    writeln!(
        text,
        "Both sides durable, the append workload's events (JSON Lines over HTTP); a latency is a \
         request's (http) or an append's (in-process); CPU µs is the process's CPU time inside \
         the clock per event, the server's and its clients' together over HTTP; the lag runs \
         from the producer sending an event's request to the event's `id:` reaching a \
         subscriber; medians of {rounds} rounds."
    )?;
    Ok(())
}
