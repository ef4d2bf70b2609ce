//! Event-stream delivery: [`SUBSCRIBERS`] subscribers follow the log while one producer
//! appends at [`RATE`] events a second, over HTTP (`http.rs`: `GET /v1/events/stream`, the
//! producer on its own connection) and in process (`local.rs`: `Journal::subscribe`, the
//! producer calling `append_batch`). Each subscriber checks that the positions it receives
//! follow one another from the first with no gap, and notes each event's lag: the time from the
//! moment the producer sent (or made) the append to the event reaching the subscriber (the send
//! time is kept by position in this process, so a subscriber need not parse the event).

pub mod http;
pub mod local;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

use crate::compare::Res;

/// How many subscribers follow the stream.
pub const SUBSCRIBERS: usize = 100;
/// The producer's rate, in events a second.
pub const RATE: u64 = 10_000;
/// How often the producer appends what is due: at [`RATE`], ten events a batch.
const TICK: Duration = Duration::from_millis(1);
/// The most events the producer appends at once when it has fallen behind (the server takes
/// at most 10,000 a request).
const BATCH_MAX: usize = 1000;
/// How long after the last append the subscribers are given to receive the rest.
const DRAIN: Duration = Duration::from_secs(10);
/// How many problems (gaps, early ends) a trial keeps to report.
const PROBLEMS_KEPT: usize = 5;

/// One trial of the stream: what every subscriber received, and when.
pub struct Trial {
    /// Events appended.
    pub events: u64,
    /// The producer's rate as achieved: events over the time it took to append them.
    pub produced_per_s: f64,
    /// Events received, every subscriber's, counted while in order.
    pub delivered: u64,
    /// From the first append to the last arrival at any subscriber.
    pub window: Duration,
    /// Subscribers that received every event, in order, without a gap.
    pub complete: usize,
    /// Every arrival's lag, in microseconds.
    pub lags_us: Vec<u32>,
    /// The first few problems: gaps, streams that ended early, deadlines missed.
    pub problems: Vec<String>,
}

impl Trial {
    /// Gathers the subscribers' records after the producer took `produced` for `events`.
    fn gather(events: u64, produced: Duration, first_send: u64, records: Vec<Record>) -> Trial {
        let mut trial = Trial {
            events,
            produced_per_s: events as f64 / produced.as_secs_f64(),
            delivered: 0,
            window: Duration::ZERO,
            complete: 0,
            lags_us: Vec::new(),
            problems: Vec::new(),
        };
        let mut last_arrival = first_send;
        for r in records {
            trial.delivered += r.received;
            trial.complete += usize::from(r.problem.is_none() && r.received == events);
            last_arrival = last_arrival.max(r.last_arrival_ns);
            trial.lags_us.extend(r.lags_us);
            if let Some(p) = r.problem.filter(|_| trial.problems.len() < PROBLEMS_KEPT) {
                trial.problems.push(p);
            }
        }
        trial.window = Duration::from_nanos(last_arrival.saturating_sub(first_send));
        trial
    }
}

/// When the producer sent each event (by position - 1), in nanoseconds since `origin`.
struct SendTimes {
    origin: Instant,
    at: Vec<AtomicU64>,
}

impl SendTimes {
    fn new(events: u64) -> SendTimes {
        SendTimes {
            origin: Instant::now(),
            at: (0..events).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// When the subscribers must have received every event: the producer's time at [`RATE`],
    /// and [`DRAIN`].
    fn deadline(&self) -> tokio::time::Instant {
        let events = self.at.len() as f64;
        tokio::time::Instant::now() + Duration::from_secs_f64(events / RATE as f64) + DRAIN
    }
}

/// Where the producer appends: the server over HTTP, or the journal in process.
trait Sink {
    /// Appends events `from..to` (0-based; their positions are `from + 1..=to`) and checks
    /// that they were stored at those positions.
    async fn append(&mut self, from: usize, to: usize) -> Res<()>;
}

/// Appends `events` events into `sink` at [`RATE`]: every [`TICK`], what is due so far, in one
/// batch (of at most [`BATCH_MAX`]), its send time noted for each event. Answers the time it
/// took.
async fn produce(sink: &mut impl Sink, events: usize, times: &SendTimes) -> Res<Duration> {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut sent = 0;
    while sent < events {
        tick.tick().await;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count of events due, far below usize::MAX"
        )]
        let due = ((start.elapsed().as_secs_f64() * RATE as f64) as usize)
            .min(events)
            .min(sent + BATCH_MAX);
        if due <= sent {
            continue;
        }
        let now = times.now_ns();
        for at in times.at.get(sent..due).unwrap_or_default() {
            at.store(now, Ordering::Release);
        }
        sink.append(sent, due).await?;
        sent = due;
    }
    Ok(start.elapsed())
}

/// What one subscriber received: how many events in order, each one's lag, and the first
/// problem (a gap, an early end, the deadline).
struct Record {
    received: u64,
    last_arrival_ns: u64,
    lags_us: Vec<u32>,
    problem: Option<String>,
    events: u64,
    times: Arc<SendTimes>,
}

impl Record {
    fn new(events: u64, times: Arc<SendTimes>) -> Record {
        Record {
            received: 0,
            last_arrival_ns: 0,
            lags_us: Vec::with_capacity(usize::try_from(events).unwrap_or_default()),
            problem: None,
            events,
            times,
        }
    }

    /// Whether the subscriber is done: every event received, or a problem met.
    fn done(&self) -> bool {
        self.received >= self.events || self.problem.is_some()
    }

    /// The event at `position` arrived: the next one due, or a gap.
    fn arrived(&mut self, position: u64) {
        let expected = self.received + 1;
        if position != expected || position > self.events {
            return self.fail(format!("position {position} where {expected} was due"));
        }
        let now = self.times.now_ns();
        let sent = usize::try_from(position - 1)
            .ok()
            .and_then(|i| self.times.at.get(i))
            .map_or(now, |at| at.load(Ordering::Acquire));
        let lag_us = now.saturating_sub(sent) / 1000;
        self.lags_us.push(u32::try_from(lag_us).unwrap_or(u32::MAX));
        self.received = position;
        self.last_arrival_ns = now;
    }

    /// Notes the subscriber's first problem; it stops reading.
    fn fail(&mut self, why: String) {
        if self.problem.is_none() {
            self.problem = Some(format!(
                "a subscriber, after {} of {} events: {why}",
                self.received, self.events
            ));
        }
    }
}
