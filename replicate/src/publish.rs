//! The replicate task: reads a journal's committed frames in position order and publishes one
//! JetStream message per event, carrying its stored frame, with headers naming the journal,
//! the position, the chain link and the event id, and `Nats-Msg-Id` = `<journal id>:<position>`
//! so that a publish repeated after a lost acknowledgement is dropped by JetStream.
//!
//! Publishes are pipelined (at most `in_flight` unacknowledged) and acknowledged in order;
//! the last acknowledged position is kept in the journal's directory (`replicate.<STREAM>.cursor`) and
//! replication resumes after it, first reading back what the stream already holds past it (a
//! publish acknowledged but not yet noted), so a restart publishes nothing twice. When
//! JetStream is unavailable the task reports it in its [`Progress`] and retries with backoff.
//! It only reads the journal (opened read-only beside its writer, or shared with it): appends
//! never wait for it.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::time::Duration;

use async_nats::jetstream::context::{PublishAckFuture, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use journal_engine::{Chain, Journal};
use journal_format::{EventIds, Position};
use tokio::sync::watch;

use crate::cursor::{Acked, Cursor};
use crate::stream::{ensure, StreamLimits};
use crate::{connect, nats, subject_for, Error, Result};
use crate::{HEADER_EVENT_ID, HEADER_HASH, HEADER_JOURNAL, HEADER_POSITION};

/// How replication runs.
#[derive(Clone, Debug)]
pub struct ReplicateOptions {
    /// The NATS server(s), `nats://HOST:PORT[,nats://...]`.
    pub url: String,
    /// The JetStream stream (created when missing).
    pub stream: String,
    /// Events go to subject `<prefix>.<journal id>`.
    pub subject_prefix: String,
    /// How the stream is made when missing.
    pub limits: StreamLimits,
    /// The most publishes awaiting their acknowledgement.
    pub in_flight: usize,
    /// Stop once this position is acknowledged (`None`: follow the journal for ever).
    pub until: Option<u64>,
}

impl ReplicateOptions {
    /// Replication of a journal to `url`, into stream `stream`, with the defaults.
    #[must_use]
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> ReplicateOptions {
        ReplicateOptions {
            url: url.into(),
            stream: stream.into(),
            subject_prefix: "journal".into(),
            limits: StreamLimits::default(),
            in_flight: 512,
            until: None,
        }
    }
}

/// How far replication got, for status reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The last position JetStream acknowledged.
    pub acked: u64,
    /// The journal's head when last looked at.
    pub head: u64,
    /// Why the last attempt failed, while retrying; `None` once publishing again.
    pub error: Option<String>,
}

/// The longest wait between attempts while JetStream is unavailable.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often, at most, the cursor is written while publishing goes on.
const CURSOR_EVERY_NS: i64 = 100_000_000;
/// The most frames read from the journal at a time.
const READ_FRAMES: u64 = 4_096;

/// Replicates `journal` as `options` says, reporting in `progress`. Returns once
/// `options.until` is acknowledged; without it, runs until an error that retrying cannot
/// mend (the journal's, or the cursor file's).
///
/// # Errors
/// [`Error::Journal`] or [`Error::Io`]; NATS errors are retried, not returned.
pub async fn replicate(
    journal: Journal,
    options: ReplicateOptions,
    progress: watch::Sender<Progress>,
) -> Result<()> {
    let id = journal.id()?.to_string();
    let subject = subject_for(&options.subject_prefix, &id);
    let cursor = Cursor::new(journal.dir(), &options.stream);
    let client = connect(&options.url).await?;
    let task = Task {
        journal: &journal,
        options: &options,
        id: &id,
        subject: &subject,
        cursor: &cursor,
        progress: &progress,
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        match task.session(&client).await {
            Ok(()) => return Ok(()),
            Err(e @ (Error::Nats(_) | Error::BadMessage { .. })) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "replication interrupted");
                progress.send_modify(|p| p.error = Some(e.to_string()));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => return Err(e),
        }
    }
}

/// One replication's fixed parts.
struct Task<'a> {
    journal: &'a Journal,
    options: &'a ReplicateOptions,
    id: &'a str,
    subject: &'a str,
    cursor: &'a Cursor,
    progress: &'a watch::Sender<Progress>,
}

/// One frame read for publishing.
struct Outgoing {
    position: u64,
    hash: String,
    event_id: String,
    frame: Bytes,
}

impl Task<'_> {
    /// Publishes from the cursor on until `until` or the first NATS error.
    async fn session(&self, client: &async_nats::Client) -> Result<()> {
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(5))
            .max_ack_inflight(self.options.in_flight.max(1))
            .build(client.clone());
        let stream = ensure(
            &js,
            &self.options.stream,
            self.subject,
            &self.options.limits,
        )
        .await?;
        let mut acked = self.resume(&stream).await?;
        self.cursor.store(acked)?;
        self.progress.send_modify(|p| {
            p.acked = acked.position;
            p.error = None;
        });
        let mut noted_ns = self.journal.clock().now_unix_ns();
        let mut pending: VecDeque<(u64, PublishAckFuture)> = VecDeque::new();
        let mut sent = acked.position;
        let mut head_rx = self.journal.watch_head();
        loop {
            // A journal another process writes (opened read-only) learns its head here.
            let head = self.journal.refresh()?.position.0;
            if self.options.until.is_some_and(|u| acked.position >= u) {
                self.cursor.store(acked)?;
                self.progress.send_modify(|p| {
                    p.acked = acked.position;
                    p.head = head;
                });
                return Ok(());
            }
            if sent < head {
                for out in self.read(sent + 1, head)? {
                    if pending.len() >= self.options.in_flight.max(1) {
                        self.settle_one(&mut pending, &mut acked).await?;
                    }
                    let position = out.position;
                    pending.push_back((position, self.publish(&js, out).await?));
                    sent = position;
                }
            } else if let Some(_front) = pending.front() {
                self.settle_one(&mut pending, &mut acked).await?;
            } else {
                self.cursor.store(acked)?;
                self.progress.send_modify(|p| {
                    p.acked = acked.position;
                    p.head = head;
                });
                let wait = if self.journal.is_read_only() { 20 } else { 200 };
                let _ = tokio::time::timeout(Duration::from_millis(wait), head_rx.changed()).await;
                continue;
            }
            let now = self.journal.clock().now_unix_ns();
            if now - noted_ns >= CURSOR_EVERY_NS {
                noted_ns = now;
                self.cursor.store(acked)?;
                self.progress.send_modify(|p| {
                    p.acked = acked.position;
                    p.head = head;
                });
            }
        }
    }

    /// Waits for the oldest publish's acknowledgement and moves `acked` past it.
    async fn settle_one(
        &self,
        pending: &mut VecDeque<(u64, PublishAckFuture)>,
        acked: &mut Acked,
    ) -> Result<()> {
        let Some((position, ack)) = pending.pop_front() else {
            return Ok(());
        };
        let ack = ack
            .await
            .map_err(|e| nats(&format!("publishing position {position}"), e))?;
        *acked = Acked {
            position,
            sequence: ack.sequence,
        };
        Ok(())
    }

    /// Sends one event's message; its acknowledgement comes later.
    async fn publish(&self, js: &jetstream::Context, out: Outgoing) -> Result<PublishAckFuture> {
        let message = PublishMessage::build()
            .message_id(format!("{}:{}", self.id, out.position))
            .header(HEADER_JOURNAL, self.id)
            .header(HEADER_POSITION, out.position.to_string().as_str())
            .header(HEADER_HASH, out.hash.as_str())
            .header(HEADER_EVENT_ID, out.event_id.as_str())
            .payload(out.frame);
        js.send_publish(self.subject.to_string(), message)
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::MaxPayloadExceeded => Error::BadMessage {
                    sequence: 0,
                    reason: format!(
                        "position {} is larger than the server takes: {e}",
                        out.position
                    ),
                },
                _ => nats(&format!("publishing position {}", out.position), e),
            })
    }

    /// The frames `from..=to`, at most [`READ_FRAMES`] of them.
    fn read(&self, from: u64, to: u64) -> Result<Vec<Outgoing>> {
        let to = to.min(from + READ_FRAMES - 1);
        let mut out = Vec::with_capacity((to + 1 - from) as usize);
        self.journal.scan(
            Position(from),
            Some(Position(to)),
            Chain::Unverified,
            |record| {
                let event_id = EventIds::from_msgpack(record.body)
                    .ok()
                    .and_then(|ids| ids.event_id)
                    .unwrap_or_default()
                    .to_string();
                out.push(Outgoing {
                    position: record.position.0,
                    hash: record.hash.to_hex().to_string(),
                    event_id,
                    frame: Bytes::copy_from_slice(record.frame),
                });
                Ok(ControlFlow::Continue(()))
            },
        )?;
        Ok(out)
    }

    /// Where to go on from: the cursor, moved past the messages the stream holds after it
    /// (acknowledged before a crash let the cursor note them). It reads them by sequence from
    /// the cursor's and stops at the first that is not this journal's next position.
    async fn resume(&self, stream: &stream::Stream) -> Result<Acked> {
        let mut acked = self.cursor.load()?;
        let last = stream
            .get_info()
            .await
            .map_err(|e| nats("reading the stream's state", e))?
            .state
            .last_sequence;
        while acked.sequence < last {
            let sequence = acked.sequence + 1;
            let message = match stream.get_raw_message(sequence).await {
                Ok(m) => m,
                // Removed (limits), or not there: what follows is not known to continue.
                Err(_) => break,
            };
            let header = |name: &str| {
                message
                    .headers
                    .get(name)
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default()
            };
            if message.subject.as_str() != self.subject {
                acked.sequence = sequence;
                continue;
            }
            if header(HEADER_JOURNAL) != self.id
                || header(HEADER_POSITION).parse::<u64>().ok() != Some(acked.position + 1)
            {
                break;
            }
            acked = Acked {
                position: acked.position + 1,
                sequence,
            };
        }
        Ok(acked)
    }
}
