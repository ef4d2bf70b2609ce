//! The http workload: `journal serve` over loopback HTTP, side by side with the in-process
//! journal in the same run, against the targets of the issue that brought the server.
//!
//! - **Appends**: 1, 16 and 64 keep-alive clients posting batches of 1 and 100 events (JSON
//!   Lines, `POST /v1/events`) to a server in this process (`server.rs`), against the append
//!   workload's in-process journal with as many producer threads and the same events; both
//!   durable, each trial in a fresh directory, the two sides taking turns round after round.
//! - **Event stream**: 100 subscribers following `GET /v1/events/stream` while one producer
//!   appends 10,000 events a second (`stream/`): the rate delivered, the lag, and whether every
//!   subscriber received every event without a gap; against 100 in-process subscriptions
//!   (`Journal::subscribe`) to the same appends.
//!
//! The clients run in this process too, on a runtime of their own: their CPU counts against
//! the server's on the same cores, as it would for clients on the same machine.

pub mod appends;
pub mod client;
mod report;
pub mod server;
pub mod stream;

use std::time::Duration;

use serde_json::json;

use super::append::{self, figures, Figures};
use super::engines::Kind;
use super::{Context, Res, Section};

/// The batch sizes measured.
pub const BATCHES: [u64; 2] = [1, 100];
/// The client counts measured (and the in-process producer threads they are compared with).
pub const CLIENTS: [u64; 3] = [1, 16, 64];
/// The target: 64 clients at batch 1 reach this share of the in-process journal's
/// events/s with 64 producer threads.
pub const TARGET_SHARE: f64 = 0.7;
/// The target for the event stream: every subscriber's p99 lag under this.
pub const TARGET_LAG_P99: Duration = Duration::from_millis(50);

/// Events in an append cell: `--events` (default 50,000; 2,000 quick) at batch 100, a fifth
/// of that at batch 1, and at least one batch per client.
fn cell_events(ctx: &Context, batch: u64, clients: u64) -> u64 {
    let base = ctx.events_or(2_000, 50_000);
    let events = if batch == 1 { base / 5 } else { base };
    (events / clients / batch).max(1) * batch * clients
}

/// Events the stream's producer appends: `--events` (default 50,000, five seconds at 10,000
/// a second; 2,000 quick).
fn stream_events(ctx: &Context) -> u64 {
    ctx.events_or(2_000, 50_000).max(1)
}

/// A cell's figures: over HTTP, and in process.
struct Cell {
    batch: u64,
    clients: u64,
    events: u64,
    http: Figures,
    local: Figures,
}

/// Measures one append cell: `ctx.rounds` trials a side, the sides in turn (which goes first
/// alternating round by round).
fn measure_cell(ctx: &Context, batch: u64, clients: u64) -> Res<Cell> {
    let events = cell_events(ctx, batch, clients);
    let (mut http, mut local) = (Vec::new(), Vec::new());
    for round in 0..ctx.rounds {
        let named = |side: &str, e: Box<dyn std::error::Error + Send + Sync>| {
            format!("http cell batch {batch} × {clients}, {side}: {e}")
        };
        let over_http =
            || appends::trial(ctx, batch, clients, events).map_err(|e| named("http", e));
        let in_process = || {
            append::trial(ctx, Kind::Journal, batch, clients, events)
                .map_err(|e| named("in-process", e))
        };
        if round % 2 == 0 {
            http.push(over_http()?);
            local.push(in_process()?);
        } else {
            local.push(in_process()?);
            http.push(over_http()?);
        }
    }
    Ok(Cell {
        batch,
        clients,
        events,
        http: figures(&http),
        local: figures(&local),
    })
}

/// Measures the event stream: `ctx.rounds` trials a side, the sides in turn.
fn measure_streams(ctx: &Context) -> Res<(Vec<report::Stream>, Vec<report::Stream>)> {
    let events = stream_events(ctx);
    let (mut http, mut local) = (Vec::new(), Vec::new());
    for round in 1..=ctx.rounds {
        let trial = stream::http::trial(ctx, events)
            .map_err(|e| format!("event stream over http, round {round}: {e}"))?;
        http.push(report::Stream::of(trial));
        let trial = stream::local::trial(ctx, events)
            .map_err(|e| format!("event stream in process, round {round}: {e}"))?;
        local.push(report::Stream::of(trial));
    }
    Ok((http, local))
}

/// Runs the http workload.
///
/// # Errors
/// The server's, a client's or the journal's error.
pub fn run(ctx: &Context) -> Res<Section> {
    // `--cell` picks what to profile: append cells, the event stream (`--cell stream`), or both.
    let all = ctx.cells.is_empty() && !ctx.stream_cell;
    let mut cells = Vec::new();
    for clients in CLIENTS {
        for batch in BATCHES {
            if all || ctx.cells.contains(&(batch, clients)) {
                cells.push(measure_cell(ctx, batch, clients)?);
            }
        }
    }
    let streams = if all || ctx.stream_cell {
        Some(measure_streams(ctx)?)
    } else {
        None
    };
    let mut text = String::new();
    let cells_json = report::cells(&mut text, &cells)?;
    let stream = match &streams {
        Some((http, local)) => Some(report::streams(&mut text, http, local)?),
        None => None,
    };
    let targets = report::targets(&mut text, &cells, stream.as_ref())?;
    report::notes(&mut text, ctx.rounds)?;
    Ok(Section {
        name: "http",
        text,
        json: json!({
            "rounds": ctx.rounds,
            "cells": cells_json,
            "stream": stream.map(|s| s.json),
            "targets": targets,
        }),
    })
}
