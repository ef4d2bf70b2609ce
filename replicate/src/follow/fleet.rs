//! Fleet review: several source journals' streams gathered into one journal. Each event is
//! appended anew (the fleet journal has its own positions and chain) with an `origin` field
//! naming its source journal, its position and link there; the event without that field
//! encodes to the source's stored body, so its inclusion in the source's tree, and so in the
//! source's digest, can be proved ([`Origin::source_body`]). A redelivered event is stored once
//! (its id and body are the same). Each source has its own durable consumer, whose
//! acknowledgements say where to go on from.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::{self, Message};
use futures_util::{FutureExt, StreamExt};
use journal_engine::{AppendOptions, Journal};
use journal_format::frame::decode_frame;
use journal_format::{Envelope, StoredEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{header, FollowOptions, FollowProgress, BACKOFF_MAX};
use crate::stream::existing;
use crate::{connect, nats, Error, Result, HEADER_HASH, HEADER_JOURNAL, HEADER_POSITION};

/// The field of a fleet journal's event that names where it comes from.
pub const ORIGIN_FIELD: &str = "origin";

/// Where an event of a fleet journal comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The source journal's id.
    pub journal: String,
    /// The event's position there.
    pub position: u64,
    /// The event's chain link there (hex).
    pub hash: String,
}

impl Origin {
    /// The origin a fleet journal's event carries, if any.
    #[must_use]
    pub fn of(event: &StoredEvent) -> Option<Origin> {
        let value = event.envelope.extra.get(ORIGIN_FIELD)?;
        serde_json::from_value(value.clone()).ok()
    }

    /// The body the event had in its source: the event without its origin, encoded as the
    /// journal stores bodies. Its leaf hash is the source tree's leaf at `position`, which the
    /// source's inclusion proof ties to the source's digest.
    ///
    /// # Errors
    /// [`Error::Journal`] when the event cannot be encoded.
    pub fn source_body(event: &StoredEvent) -> Result<Vec<u8>> {
        let mut envelope = event.envelope.clone();
        envelope.extra.remove(ORIGIN_FIELD);
        let mut body = Vec::new();
        envelope.write_msgpack(&mut body).map_err(|source| {
            journal_engine::Error::InvalidEvent {
                index: None,
                source,
            }
        })?;
        Ok(body)
    }
}

/// Gathers the streams of `options.streams` into `journal`, one task per source, until every
/// source reached `options.until` events (for ever without it).
///
/// # Errors
/// [`Error::BadMessage`] for a message that is not a stored frame with its headers; what the
/// journal's append refuses.
pub async fn follow_fleet(
    journal: Journal,
    options: FollowOptions,
    progress: watch::Sender<FollowProgress>,
) -> Result<()> {
    let client = connect(&options.url).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for stream in options.streams.clone() {
        let (journal, options, client) = (journal.clone(), options.clone(), client.clone());
        tasks.spawn(async move { source_task(&journal, &options, &stream, &client).await });
    }
    while let Some(done) = tasks.join_next().await {
        let result = done.map_err(|e| Error::Nats(format!("a source's task failed: {e}")))?;
        if let Err(e) = result {
            tasks.abort_all();
            return Err(e);
        }
        progress.send_modify(|p| p.head = journal.head().position.0);
    }
    Ok(())
}

/// One source, retried with backoff while JetStream is unavailable.
async fn source_task(
    journal: &Journal,
    options: &FollowOptions,
    stream: &str,
    client: &async_nats::Client,
) -> Result<()> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match source_session(journal, options, stream, client).await {
            Ok(()) => return Ok(()),
            Err(Error::Nats(e)) => {
                tracing::warn!(stream, error = %e, retry_in = ?backoff, "fleet source interrupted");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Appends the source's events as they come, a batch of those waiting at a time, and
/// acknowledges them once durable.
async fn source_session(
    journal: &Journal,
    options: &FollowOptions,
    stream_name: &str,
    client: &async_nats::Client,
) -> Result<()> {
    let js = jetstream::new(client.clone());
    let stream = existing(&js, stream_name).await?;
    let name = format!("{}-{stream_name}", options.consumer);
    let consumer = stream
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                deliver_policy: DeliverPolicy::All,
                // Each message acknowledged on its own: a message lost on the way when a NATS
                // node dies stays pending and comes again after its ack wait, where
                // acknowledging a later one would have acknowledged it too (and lost it).
                ack_policy: AckPolicy::Explicit,
                // A batch is durable within milliseconds: one lost comes again soon.
                ack_wait: Duration::from_secs(5),
                max_ack_pending: 100_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| nats(&format!("creating consumer {name}"), e))?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(500)
        .messages()
        .await
        .map_err(|e| nats("pulling messages", e))?;
    let mut last_position = 0;
    loop {
        if options.until.is_some_and(|u| last_position >= u) {
            // Done once nothing delivered awaits its acknowledgement (a message lost on the
            // way comes again).
            let info = consumer
                .get_info()
                .await
                .map_err(|e| nats(&format!("reading consumer {name}"), e))?;
            if info.num_ack_pending == 0 {
                return Ok(());
            }
        }
        let mut events = Vec::new();
        let mut taken = Vec::new();
        while events.len() < 500 {
            let next = if taken.is_empty() {
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
            let (event, position) = with_origin(&message)?;
            events.push(event);
            last_position = position;
            taken.push(message);
        }
        journal
            .append_batch(events, AppendOptions::default())
            .await?;
        // The last acknowledgement waits for the server's answer: it handles them in order,
        // so every one of the batch is in when it answers.
        if let Some((last, before)) = taken.split_last() {
            for message in before {
                message.ack().await.map_err(|e| nats("acknowledging", e))?;
            }
            last.double_ack()
                .await
                .map_err(|e| nats("acknowledging", e))?;
        }
    }
}

/// The message's event with its origin, and its source position.
fn with_origin(message: &Message) -> Result<(Envelope, u64)> {
    let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
    let bad = |reason: String| Error::BadMessage { sequence, reason };
    let origin = Origin {
        journal: header(message, HEADER_JOURNAL)
            .ok_or_else(|| bad(format!("no {HEADER_JOURNAL} header")))?
            .to_string(),
        position: header(message, HEADER_POSITION)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| bad(format!("no {HEADER_POSITION} header")))?,
        hash: header(message, HEADER_HASH)
            .ok_or_else(|| bad(format!("no {HEADER_HASH} header")))?
            .to_string(),
    };
    let (frame, body) =
        decode_frame(&message.payload).map_err(|e| bad(format!("a damaged frame: {e}")))?;
    if frame.meta.position.0 != origin.position || frame.hash.to_hex() != origin.hash.as_str() {
        return Err(bad(
            "its headers do not say what its frame holds (position, link)".into(),
        ));
    }
    let mut event =
        Envelope::from_msgpack(body).map_err(|e| bad(format!("not a stored event: {e}")))?;
    let value = serde_json::to_value(&origin).map_err(|e| bad(e.to_string()))?;
    event.extra.insert(ORIGIN_FIELD.to_string(), value);
    Ok((event, origin.position))
}
