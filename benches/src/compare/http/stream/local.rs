//! The event stream in process, the baseline of the stream over HTTP: each subscriber a task
//! reading `Journal::subscribe` from the first position, the producer calling
//! `Journal::append_batch` with the same events, on a runtime of the same size.

use std::sync::Arc;

use journal_engine::{AppendOptions, Journal, Options, Subscription};
use journal_format::{Envelope, Position};

use super::{produce, Record, SendTimes, Sink, Trial, SUBSCRIBERS};
use crate::compare::http::appends::client_runtime;
use crate::compare::{Context, Res};
use crate::workload_event_with;

/// Runs one trial of `events` events into a fresh journal.
///
/// # Errors
/// The journal's error.
pub fn trial(ctx: &Context, events: u64) -> Res<Trial> {
    let dir = ctx.fresh_dir("local-stream")?;
    let envelopes: Vec<Envelope> = (0..events)
        .map(|i| workload_event_with(i, ctx.ids))
        .collect();
    let journal = Journal::open(dir.join("journal"), Options::default())?;
    let measured = client_runtime()?.block_on(measure(&journal, envelopes));
    journal.close();
    std::fs::remove_dir_all(&dir)?;
    measured
}

/// Starts every subscriber, then produces and gathers what they received.
async fn measure(journal: &Journal, envelopes: Vec<Envelope>) -> Res<Trial> {
    let events = envelopes.len() as u64;
    let times = Arc::new(SendTimes::new(events));
    let deadline = times.deadline();
    let followers: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| {
            let subscription = journal.subscribe(Position(1));
            let record = Record::new(events, Arc::clone(&times));
            tokio::spawn(follow(subscription, record, deadline))
        })
        .collect();
    let mut sink = Append {
        journal: journal.clone(),
        envelopes,
    };
    let first_send = times.now_ns();
    let count = sink.envelopes.len();
    let produced = produce(&mut sink, count, &times).await?;
    let mut records = Vec::with_capacity(followers.len());
    for follower in followers {
        records.push(follower.await?);
    }
    Ok(Trial::gather(events, produced, first_send, records))
}

/// The journal and the events the producer appends.
struct Append {
    journal: Journal,
    envelopes: Vec<Envelope>,
}

impl Sink for Append {
    async fn append(&mut self, from: usize, to: usize) -> Res<()> {
        let batch = self.envelopes.get(from..to).ok_or("no such events")?;
        let appended = self
            .journal
            .append_batch(batch, AppendOptions::default())
            .await?;
        for (i, a) in appended.iter().enumerate() {
            let due = (from + i + 1) as u64;
            if a.position.0 != due {
                return Err(format!("event {due} stored at position {}", a.position.0).into());
            }
        }
        Ok(())
    }
}

/// Reads one subscription until it has brought every event, ends, or `deadline` passes.
async fn follow(
    mut subscription: Subscription,
    mut record: Record,
    deadline: tokio::time::Instant,
) -> Record {
    while !record.done() {
        match tokio::time::timeout_at(deadline, subscription.next()).await {
            Err(_) => record.fail("the deadline passed".into()),
            Ok(None) => record.fail("the journal closed".into()),
            Ok(Some(Err(e))) => record.fail(format!("reading the log: {e}")),
            Ok(Some(Ok(event))) => record.arrived(event.position.0),
        }
    }
    record
}
