//! The http workload's append cells over HTTP: each client holds one keep-alive connection
//! and posts its batches (JSON Lines of the append workload's events) one after another,
//! waiting for each acknowledgement, as an in-process producer thread waits for its append.

use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;

use super::client::Client;
use super::server::Served;
use crate::compare::append::{process_cpu, Trial};
use crate::compare::{Context, Res};
use crate::{workload_event_with, Ids};

/// The worker threads of the clients' runtime: one per core, the clients being tasks.
pub(super) const CLIENT_WORKERS: usize = 2;

/// A runtime for the clients, apart from the server's.
///
/// # Errors
/// The runtime's error.
pub(super) fn client_runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CLIENT_WORKERS)
        .thread_name("client")
        .enable_all()
        .build()?)
}

/// The workload events `keys` as JSON Lines, each line an event's JSON form.
///
/// # Errors
/// An event that does not serialize (a bug in the workload).
pub(super) fn json_lines(keys: Range<u64>, ids: Ids) -> Res<Vec<u8>> {
    let mut out = Vec::new();
    for key in keys {
        serde_json::to_writer(&mut out, &workload_event_with(key, ids).to_json_value())?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Appends `events` over HTTP in batches of `batch` from `clients` connections, timed, into a
/// fresh server.
///
/// # Errors
/// The server's refusal or a connection's error.
pub(super) fn trial(ctx: &Context, batch: u64, clients: u64, events: u64) -> Res<Trial> {
    let dir = ctx.fresh_dir("http-append")?;
    let per_client = events / clients;
    // Bodies are built before the clock, as the append workload builds its events.
    let mut work: Vec<Vec<Bytes>> = Vec::new();
    for c in 0..clients {
        let base = c * 1_000_000_000;
        let bodies = (0..per_client / batch)
            .map(|b| json_lines(base + b * batch..base + (b + 1) * batch, ctx.ids).map(Bytes::from))
            .collect::<Res<Vec<_>>>()?;
        work.push(bodies);
    }
    let served = Served::start(&dir.join("journal"))?;
    let timed = client_runtime()?.block_on(post_all(served.addr, work, batch));
    served.stop()?;
    let (elapsed, cpu, latencies) = timed?;
    std::fs::remove_dir_all(&dir)?;
    Ok(Trial::timed(events, elapsed, cpu, latencies))
}

/// What a cell's clock measured: the elapsed time, the process's CPU time (the server's and
/// the clients'), each request's latency.
type Timed = (Duration, Duration, Vec<Duration>);

/// Connects a client per list of bodies, then starts them together and posts every body.
async fn post_all(addr: std::net::SocketAddr, work: Vec<Vec<Bytes>>, batch: u64) -> Res<Timed> {
    let mut clients = Vec::with_capacity(work.len());
    for _ in &work {
        clients.push(Client::connect(addr).await?);
    }
    let (go, ready) = watch::channel(false);
    let tasks: Vec<_> = clients
        .into_iter()
        .zip(work)
        .map(|(client, bodies)| tokio::spawn(post(client, bodies, batch, ready.clone())))
        .collect();
    let start = Instant::now();
    let cpu_start = process_cpu();
    go.send(true)?;
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_start);
    Ok((elapsed, cpu, latencies))
}

/// One client's posts once `go` turns true: each request's latency, every acknowledgement
/// counted.
async fn post(
    mut client: Client,
    bodies: Vec<Bytes>,
    batch: u64,
    mut go: watch::Receiver<bool>,
) -> Res<Vec<Duration>> {
    go.wait_for(|g| *g).await?;
    let mut latencies = Vec::with_capacity(bodies.len());
    for body in bodies {
        let t = Instant::now();
        let acks = client.append(body).await?;
        latencies.push(t.elapsed());
        let lines = acks.iter().filter(|b| **b == b'\n').count() as u64;
        if lines != batch {
            return Err(format!("{lines} acknowledgements for a batch of {batch}").into());
        }
    }
    Ok(latencies)
}
