//! The replicate workload, on a local three-node JetStream cluster (`nats-server` processes,
//! streams of three replicas): events replicated per second by the replicate task against
//! `async-nats` publishing the same stored frames with the same headers, message ids and
//! acknowledgement window in the same run; the replica's lag (p50, p99) while the source
//! appends 10,000 events/s and a follower builds the replica; and the journal's own append rate
//! with replication running against without it.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage, stream};
use bytes::Bytes;
use journal_engine::{AppendOptions, Chain, Journal, Options};
use journal_format::Position;
use journal_replicate::local_cluster::Cluster;
use journal_replicate::{FollowOptions, FollowProgress, ReplicateOptions, StreamLimits};
use serde_json::json;
use tokio::sync::watch;

use super::stats::median;
use super::{Context, Res, Section};

/// The acknowledgement window both publishers use.
const IN_FLIGHT: usize = 512;
/// The paced source rate of the lag measurement.
const PACED_PER_S: u64 = 10_000;

/// Runs the replicate workload.
///
/// # Errors
/// The journal's, JetStream's or the runtime's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let events = ctx.events_or(5_000, 100_000);
    let source_dir = ctx.fresh_dir("replicate-source")?;
    let source = Journal::open(&source_dir, Options::default())?;
    fill(&source, events)?;
    let (mut raw, mut replicated) = (Vec::new(), Vec::new());
    for round in 0..ctx.rounds.max(1) {
        let name = |kind: &str| format!("BENCH_{kind}_{round}");
        raw.push(rt.block_on(raw_publish(&url, &source, events, &name("RAW")))?);
        // One stream name every round: the source's subject can be in one stream only.
        replicated.push(rt.block_on(replicate_all(&url, &source, events, "BENCH_REP"))?);
        eprintln!(
            "compare: replicate round {round}: raw {:.0}, replicate {:.0} ev/s",
            raw[round], replicated[round]
        );
    }
    let (raw, replicated) = (median(&mut raw), median(&mut replicated));
    let seconds = if ctx.quick { 1 } else { 5 };
    let lag = rt.block_on(paced_lag(ctx, &url, seconds))?;
    let (without, with) = rt.block_on(appends_beside(ctx, &url))?;
    source.close();
    std::fs::remove_dir_all(&source_dir)?;
    drop(cluster);
    let mut text = String::new();
    writeln!(
        text,
        "three nats-server nodes, streams of 3 replicas, {events} events"
    )?;
    writeln!(
        text,
        "replicate {replicated:.0} ev/s; raw async-nats {raw:.0} ev/s; ×raw {:.3}",
        replicated / raw
    )?;
    writeln!(
        text,
        "replica lag at {PACED_PER_S} ev/s: p50 {:.1} ms, p99 {:.1} ms ({} samples)",
        lag.0, lag.1, lag.2
    )?;
    writeln!(
        text,
        "appends (batch 100): {without:.0} ev/s without replication, {with:.0} with; ×without {:.3}",
        with / without
    )?;
    Ok(Section {
        name: "replicate",
        text,
        json: json!({
            "events": events, "replicate_events_per_s": replicated,
            "raw_events_per_s": raw, "ratio_to_raw": replicated / raw,
            "lag_p50_ms": lag.0, "lag_p99_ms": lag.1, "lag_samples": lag.2,
            "append_without_events_per_s": without, "append_with_events_per_s": with,
            "append_ratio": with / without,
        }),
    })
}

/// Appends `events` events in batches of 100.
fn fill(journal: &Journal, events: u64) -> Res<()> {
    let all: Vec<_> = (0..events).map(crate::workload_event).collect();
    for batch in all.chunks(100) {
        journal.append_batch_blocking(batch.to_vec(), AppendOptions::default())?;
    }
    Ok(())
}

/// The stored frames of `1..=events`.
fn frames(journal: &Journal, events: u64) -> Res<Vec<(u64, String, Bytes)>> {
    let mut out = Vec::with_capacity(events as usize);
    journal.scan(
        Position::FIRST,
        Some(Position(events)),
        Chain::Unverified,
        |r| {
            out.push((
                r.position.0,
                r.hash.to_hex().to_string(),
                Bytes::copy_from_slice(r.frame),
            ));
            Ok(ControlFlow::Continue(()))
        },
    )?;
    Ok(out)
}

/// A stream of three replicas taking `subject`, made fresh.
async fn fresh_stream(js: &jetstream::Context, name: &str, subject: &str) -> Res<()> {
    let _ = js.delete_stream(name).await;
    let config = stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        num_replicas: 3,
        ..Default::default()
    };
    for _ in 0..180 {
        if js.get_or_create_stream(config.clone()).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("JetStream did not create stream {name} within 90 s").into())
}

/// `async-nats` publishing the frames read beforehand, as the replicate task does (headers,
/// message id, [`IN_FLIGHT`] acknowledgements outstanding, awaited in order): events/s.
async fn raw_publish(url: &str, source: &Journal, events: u64, name: &str) -> Res<f64> {
    let client = journal_replicate::connect(url).await?;
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(IN_FLIGHT)
        .build(client);
    let subject = format!("{name}.events");
    fresh_stream(&js, name, &subject).await?;
    let id = source.id()?.to_string();
    let started = Instant::now();
    let frames = frames(source, events)?;
    let mut pending = std::collections::VecDeque::new();
    for (position, hash, frame) in frames {
        if pending.len() >= IN_FLIGHT {
            if let Some(ack) = pending.pop_front() {
                let ack: jetstream::context::PublishAckFuture = ack;
                ack.await?;
            }
        }
        let message = PublishMessage::build()
            .message_id(format!("{id}:{position}"))
            .header(journal_replicate::HEADER_JOURNAL, id.as_str())
            .header(
                journal_replicate::HEADER_POSITION,
                position.to_string().as_str(),
            )
            .header(journal_replicate::HEADER_HASH, hash.as_str())
            .payload(frame);
        pending.push_back(js.send_publish(subject.clone(), message).await?);
    }
    for ack in pending {
        ack.await?;
    }
    Ok(events as f64 / started.elapsed().as_secs_f64())
}

/// The replicate task from position 1 to `events` into a fresh stream: events/s.
async fn replicate_all(url: &str, source: &Journal, events: u64, name: &str) -> Res<f64> {
    let client = journal_replicate::connect(url).await?;
    let js = jetstream::new(client);
    // Made before the clock starts, as the raw publisher's is.
    let subject = journal_replicate::subject_for("journal", source.id()?);
    fresh_stream(&js, name, &subject).await?;
    let _ = std::fs::remove_file(source.dir().join(format!("replicate.{name}.cursor")));
    let mut options = ReplicateOptions::new(url, name);
    options.limits = StreamLimits {
        replicas: 3,
        ..StreamLimits::default()
    };
    options.in_flight = IN_FLIGHT;
    options.until = Some(events);
    let (tx, _rx) = watch::channel(Default::default());
    let started = Instant::now();
    journal_replicate::replicate(source.clone(), options, tx).await?;
    Ok(events as f64 / started.elapsed().as_secs_f64())
}

/// The replica's lag while the source appends [`PACED_PER_S`] events/s (batches of 100 every
/// 10 ms) for `seconds`, replicated and followed: p50 and p99 in ms, and the sample count.
async fn paced_lag(ctx: &Context, url: &str, seconds: u64) -> Res<(f64, f64, usize)> {
    let (src_dir, rep_dir) = (ctx.fresh_dir("lag-source")?, ctx.fresh_dir("lag-replica")?);
    let source = Journal::open(&src_dir, Options::default())?;
    let replica = Journal::open(&rep_dir, Options::default())?;
    // The stream exists before the follower starts, so that no sample waits for its retries.
    let js = jetstream::new(journal_replicate::connect(url).await?);
    let subject = journal_replicate::subject_for("journal", source.id()?);
    fresh_stream(&js, "BENCH_LAG", &subject).await?;
    let mut options = ReplicateOptions::new(url, "BENCH_LAG");
    options.limits.replicas = 3;
    let (tx, _rx) = watch::channel(Default::default());
    let publisher = tokio::spawn(journal_replicate::replicate(source.clone(), options, tx));
    let total = PACED_PER_S * seconds;
    let mut follow = FollowOptions::new(url, vec!["BENCH_LAG".into()]);
    follow.until = Some(total);
    let (ftx, mut frx) = watch::channel(FollowProgress::default());
    let follower = tokio::spawn(journal_replicate::follow(replica.clone(), follow, ftx));
    let sampler = tokio::spawn(async move {
        let mut lags = Vec::new();
        while frx.changed().await.is_ok() {
            let lag = frx.borrow().lag_ns;
            if lag > 0 {
                lags.push(lag as f64 / 1e6);
            }
        }
        lags
    });
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let all: Vec<_> = (0..total).map(crate::workload_event).collect();
    for batch in all.chunks(100) {
        tick.tick().await;
        source
            .append_batch(batch.to_vec(), AppendOptions::default())
            .await?;
    }
    tokio::time::timeout(Duration::from_secs(120), follower).await???;
    publisher.abort();
    let mut lags = sampler.await?;
    lags.sort_by(f64::total_cmp);
    let at = |q: f64| {
        lags.get(((lags.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let figures = (at(0.5), at(0.99), lags.len());
    source.close();
    replica.close();
    std::fs::remove_dir_all(&src_dir)?;
    std::fs::remove_dir_all(&rep_dir)?;
    Ok(figures)
}

/// Appends (batch 100, one producer, durable) without and with a replicate task running on
/// the same journal, taking turns: medians of events/s.
async fn appends_beside(ctx: &Context, url: &str) -> Res<(f64, f64)> {
    let events = ctx.events_or(5_000, 100_000);
    let all: Vec<_> = (0..events).map(crate::workload_event).collect();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 0..ctx.rounds.max(1) {
        for replicated in [round % 2 == 0, round % 2 == 1] {
            let dir = ctx.fresh_dir("append-beside")?;
            let journal = Journal::open(&dir, Options::default())?;
            let task = replicated.then(|| {
                let mut options = ReplicateOptions::new(url, format!("BENCH_BESIDE_{round}"));
                options.limits.replicas = 3;
                let (tx, _rx) = watch::channel(Default::default());
                tokio::spawn(journal_replicate::replicate(journal.clone(), options, tx))
            });
            let started = Instant::now();
            for batch in all.chunks(100) {
                journal
                    .append_batch(batch.to_vec(), AppendOptions::default())
                    .await?;
            }
            let rate = events as f64 / started.elapsed().as_secs_f64();
            if let Some(task) = task {
                task.abort();
                with.push(rate);
            } else {
                without.push(rate);
            }
            journal.close();
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok((median(&mut without), median(&mut with)))
}
