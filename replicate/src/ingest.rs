//! Ingest: producers on many hosts publish Agent Runtime events (their JSON form, one per
//! message) to NATS subjects; a durable consumer appends them to the journal and acknowledges
//! each message only once its event is durable. A message that is not a valid event goes to a
//! dead-letter subject with the reason in a header, and is acknowledged. A redelivered message
//! is stored once: its event id (the producer's, or `nats:<stream>:<sequence>` when it gives
//! none) makes the second append a duplicate.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::{self, stream, Message};
use futures_util::{FutureExt, StreamExt};
use journal_engine::{AppendOptions, Journal};
use journal_format::Envelope;
use tokio::sync::watch;

use crate::{connect, nats, Error, Result, HEADER_REASON};

/// How ingest runs.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// The NATS server(s).
    pub url: String,
    /// The subjects producers publish to (wildcards allowed).
    pub subject: String,
    /// The stream that takes them (created when missing).
    pub stream: String,
    /// The durable consumer's name.
    pub consumer: String,
    /// Where refused messages go, with their reason in the `Journal-Refused` header.
    pub dead_letter: String,
    /// JetStream copies of each message when the stream is created.
    pub replicas: usize,
    /// Stop once this many events were stored (`None`: for ever).
    pub until: Option<u64>,
}

impl IngestOptions {
    /// Ingest of `subject` at `url`, with the defaults.
    #[must_use]
    pub fn new(url: impl Into<String>, subject: impl Into<String>) -> IngestOptions {
        IngestOptions {
            url: url.into(),
            subject: subject.into(),
            stream: "AGENTS".into(),
            consumer: "journal-ingest".into(),
            dead_letter: "journal.dead".into(),
            replicas: 1,
            until: None,
        }
    }
}

/// The most messages appended in one batch.
const BATCH: usize = 500;

/// Ingests as `options` says, counting stored events in `progress`.
///
/// # Errors
/// [`Error::Journal`] when the journal fails (not for an event it refuses: that one is a dead
/// letter); NATS errors are retried.
pub async fn ingest(
    journal: Journal,
    options: IngestOptions,
    progress: watch::Sender<u64>,
) -> Result<()> {
    let client = connect(&options.url).await?;
    let mut backoff = Duration::from_millis(100);
    loop {
        match session(&journal, &options, &client, &progress).await {
            Ok(()) => return Ok(()),
            Err(Error::Nats(e)) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "ingest interrupted");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The stream producers publish to, created when missing.
pub async fn ensure_stream(
    js: &jetstream::Context,
    options: &IngestOptions,
) -> Result<stream::Stream> {
    js.get_or_create_stream(stream::Config {
        name: options.stream.clone(),
        subjects: vec![options.subject.clone()],
        num_replicas: options.replicas,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| nats(&format!("creating stream {}", options.stream), e))
}

async fn session(
    journal: &Journal,
    options: &IngestOptions,
    client: &async_nats::Client,
    progress: &watch::Sender<u64>,
) -> Result<()> {
    let js = jetstream::new(client.clone());
    let stream = ensure_stream(&js, options).await?;
    let consumer = stream
        .get_or_create_consumer(
            &options.consumer,
            pull::Config {
                durable_name: Some(options.consumer.clone()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| nats(&format!("creating consumer {}", options.consumer), e))?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(BATCH)
        .messages()
        .await
        .map_err(|e| nats("pulling messages", e))?;
    loop {
        if options.until.is_some_and(|u| *progress.borrow() >= u) {
            return Ok(());
        }
        let mut batch = Vec::new();
        while batch.len() < BATCH {
            let next = if batch.is_empty() {
                messages.next().await
            } else {
                match messages.next().now_or_never() {
                    Some(next) => next,
                    None => break,
                }
            };
            let message = next
                .ok_or_else(|| Error::Nats("the consumer's messages ended".into()))?
                .map_err(|e| nats("pulling messages", e))?;
            batch.push(message);
        }
        let stored = store(journal, options, client, batch).await?;
        progress.send_modify(|n| *n += stored);
    }
}

/// Appends the batch's events (one by one when the batch is refused, to find the refused),
/// dead-letters the bad ones, then acknowledges every message. Returns how many were new.
async fn store(
    journal: &Journal,
    options: &IngestOptions,
    client: &async_nats::Client,
    batch: Vec<Message>,
) -> Result<u64> {
    let mut good = Vec::new();
    let mut events = Vec::new();
    for message in batch {
        match parse(&options.stream, &message) {
            Ok(event) => {
                events.push(event);
                good.push(message);
            }
            Err(reason) => dead_letter(options, client, message, reason).await?,
        }
    }
    let mut stored = 0;
    match journal
        .append_batch(events.as_slice(), AppendOptions::default())
        .await
    {
        Ok(answers) => stored += answers.iter().filter(|a| !a.duplicate).count() as u64,
        Err(e) if refuses_event(&e) => {
            for (event, message) in events.into_iter().zip(&good) {
                match journal.append(event).await {
                    Ok(a) => stored += u64::from(!a.duplicate),
                    Err(e) if refuses_event(&e) => {
                        dead_letter(options, client, message.clone(), e.to_string()).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    for message in good {
        message.ack().await.map_err(|e| nats("acknowledging", e))?;
    }
    Ok(stored)
}

/// Whether the journal refused an event for what it is (to be dead-lettered), not failed.
fn refuses_event(e: &journal_engine::Error) -> bool {
    use journal_engine::Error as E;
    matches!(
        e,
        E::InvalidEvent { .. }
            | E::InvalidInput(_)
            | E::IdReused { .. }
            | E::LimitExceeded { .. }
            | E::EventTooLarge { .. }
    )
}

/// The message's event; a message without an event id gets `nats:<stream>:<sequence>`, the
/// same at every delivery.
fn parse(stream: &str, message: &Message) -> std::result::Result<Envelope, String> {
    let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
    let mut assign = || format!("nats:{stream}:{sequence}");
    Envelope::from_json_slice(&message.payload, &mut assign).map_err(|e| e.to_string())
}

/// Publishes the message to the dead-letter subject with `reason`, then acknowledges it.
async fn dead_letter(
    options: &IngestOptions,
    client: &async_nats::Client,
    message: Message,
    reason: String,
) -> Result<()> {
    tracing::warn!(subject = %message.subject, %reason, "event refused, sent to the dead letters");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(HEADER_REASON, reason.as_str());
    headers.insert("Journal-Subject", message.subject.as_str());
    client
        .publish_with_headers(
            options.dead_letter.clone(),
            headers,
            message.payload.clone(),
        )
        .await
        .map_err(|e| nats("publishing a dead letter", e))?;
    client
        .flush()
        .await
        .map_err(|e| nats("publishing a dead letter", e))?;
    message.ack().await.map_err(|e| nats("acknowledging", e))
}
