//! The replicate task: reads a journal's committed frames in position order and publishes one
//! JetStream message per event, carrying its stored frame, with headers naming the journal,
//! the position, the chain link and the event id, and `Nats-Msg-Id` = `<journal id>:<position>`
//! so that a publish repeated after a lost acknowledgement is dropped by JetStream.
//!
//! Publishes are pipelined (at most `in_flight` unacknowledged) and acknowledged in order;
//! the last acknowledged position is kept in the journal's directory (`replicate.<STREAM>.cursor`).
//! When JetStream is unavailable the task reports it in its [`Progress`] and retries with
//! backoff. It only reads the journal (opened read-only beside its writer, or shared with it):
//! appends never wait for it.
//!
//! # The stream's order is the journal's
//!
//! A follower stores position N only right after N - 1, so the stream must hold this journal's
//! messages in position order. Pipelining alone does not give that: when a node dies, the
//! publishes it had not yet committed are lost while the ones sent after the client
//! reconnected are stored, and republishing the lost ones would store them after later
//! positions. So every publish carries `Nats-Expected-Last-Sequence`: the stream sequence the
//! previous position was (or will be) stored at, and the server stores the message only when
//! that is the stream's last sequence. The stream takes this journal's subject alone (checked
//! when opened), so position N is stored at sequence `s + (N - p)` after the stream's last
//! message of this journal, position `p` at `s`; a publish whose predecessor was lost is
//! refused, and every one after it too. The first failed acknowledgement ends the window;
//! replication then starts again from the stream's last message of this journal (read back,
//! not taken from the cursor), in order. Under any interleaving of lost, late and repeated
//! publishes the stream can only grow by the next position.

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use journal_engine::{Chain, Journal};
use journal_format::{EventIds, Position};
use tokio::sync::watch;

use crate::cursor::{Acked, Cursor, Notes};
use crate::keys::{Shipper, HEADER_KEYS};
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

/// The first wait between attempts while JetStream is unavailable.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
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
    let mut backoff = BACKOFF_MIN;
    loop {
        let before = progress.borrow().acked;
        match task.session(&client).await {
            Ok(()) => return Ok(()),
            Err(e @ (Error::Nats(_) | Error::BadMessage { .. })) => {
                if progress.borrow().acked > before {
                    // The last attempt published: the server was back.
                    backoff = BACKOFF_MIN;
                }
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

/// A publish's acknowledgement to come.
type AckFuture =
    Pin<Box<dyn Future<Output = std::result::Result<PublishAck, PublishError>> + Send>>;

/// The position acknowledged by `ack`, and where the stream stored it.
fn settled(position: u64, ack: std::result::Result<PublishAck, PublishError>) -> Result<Acked> {
    let ack = ack.map_err(|e| nats(&format!("publishing position {position}"), e))?;
    Ok(Acked {
        position,
        sequence: ack.sequence,
    })
}

/// The publishes of a session: those awaiting their acknowledgement (in position order), the
/// last acknowledged, the stream sequence the next publish expects last, the last position sent.
struct Window {
    pending: VecDeque<(u64, AckFuture)>,
    acked: Acked,
    last_sequence: u64,
    sent: u64,
}

impl Window {
    /// Waits for the oldest publish's acknowledgement and moves `acked` past it.
    async fn settle_one(&mut self) -> Result<()> {
        if let Some((position, ack)) = self.pending.pop_front() {
            self.acked = settled(position, ack.await)?;
        }
        Ok(())
    }

    /// Takes the oldest publish's acknowledgement if it comes before the head moves or
    /// `wait` passes.
    async fn settle_or_wait(
        &mut self,
        head_rx: &mut watch::Receiver<journal_engine::Head>,
        wait: Duration,
    ) -> Result<()> {
        let Some((_, front)) = self.pending.front_mut() else {
            return Ok(());
        };
        let ack = tokio::select! {
            biased;
            ack = front => Some(ack),
            _ = head_rx.changed() => None,
            () = tokio::time::sleep(wait) => None,
        };
        if let Some(ack) = ack {
            let position = self.pending.pop_front().map_or(0, |(p, _)| p);
            self.acked = settled(position, ack)?;
        }
        Ok(())
    }
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
        let (acked, last_sequence) = self.resume(&stream).await?;
        self.cursor.store(acked)?;
        let mut notes = Notes::new(self.cursor.clone(), acked);
        self.progress.send_modify(|p| {
            p.acked = acked.position;
            p.error = None;
        });
        let mut noted_ns = self.journal.clock().now_unix_ns();
        let mut window = Window {
            pending: VecDeque::new(),
            acked,
            last_sequence,
            sent: acked.position,
        };
        let mut head_rx = self.journal.watch_head();
        let mut shipper = Shipper::new(&self.options.stream, &self.options.subject_prefix, self.id);
        let wait = Duration::from_millis(if self.journal.is_read_only() { 20 } else { 200 });
        loop {
            // A journal another process writes (opened read-only) learns its head here.
            let head = self.journal.refresh()?.position.0;
            let acked = window.acked;
            let done = self.options.until.is_some_and(|u| acked.position >= u);
            if done {
                notes.flush(acked).await?;
            }
            let now = self.journal.clock().now_unix_ns();
            if done || now - noted_ns >= CURSOR_EVERY_NS {
                noted_ns = now;
                notes.note(acked)?;
                self.progress.send_modify(|p| {
                    p.acked = acked.position;
                    p.head = head;
                });
            }
            if done {
                return Ok(());
            }
            if window.sent < head {
                self.publish_frames(&js, &mut shipper, &mut window, head)
                    .await?;
            } else if !window.pending.is_empty() {
                // The oldest acknowledgement or the head moving, whichever comes first: new
                // frames go out while earlier ones await theirs.
                window.settle_or_wait(&mut head_rx, wait).await?;
            } else {
                let _ = tokio::time::timeout(wait, head_rx.changed()).await;
            }
        }
    }

    /// Publishes the frames after the window's last sent up to `head` (a read's worth), each
    /// naming the key store it needs, read after them.
    async fn publish_frames(
        &self,
        js: &jetstream::Context,
        shipper: &mut Shipper,
        window: &mut Window,
        head: u64,
    ) -> Result<()> {
        let frames = self.read(window.sent + 1, head)?;
        // Read after the frames: it holds every key they are sealed under.
        let keys = shipper.ship(js, self.journal, &self.options.limits).await?;
        for out in frames {
            if window.pending.len() >= self.options.in_flight.max(1) {
                window.settle_one().await?;
            }
            let position = out.position;
            let ack = self.publish(js, out, window.last_sequence, keys).await?;
            window.pending.push_back((position, ack));
            window.last_sequence += 1;
            window.sent = position;
        }
        Ok(())
    }

    /// Sends one event's message, to be stored only when the stream's last sequence is
    /// `last_sequence` (the previous position's), naming the key store it needs (`keys`, for
    /// an encrypted journal); its acknowledgement comes later.
    async fn publish(
        &self,
        js: &jetstream::Context,
        out: Outgoing,
        last_sequence: u64,
        keys: Option<u64>,
    ) -> Result<AckFuture> {
        let mut message = PublishMessage::build();
        if let Some(keys) = keys {
            message = message.header(HEADER_KEYS, keys.to_string().as_str());
        }
        let message = message
            .message_id(format!("{}:{}", self.id, out.position))
            .expected_last_sequence(last_sequence)
            .header(HEADER_JOURNAL, self.id)
            .header(HEADER_POSITION, out.position.to_string().as_str())
            .header(HEADER_HASH, out.hash.as_str())
            .header(HEADER_EVENT_ID, out.event_id.as_str())
            .payload(out.frame);
        js.send_publish(self.subject.to_string(), message)
            .await
            .map(IntoFuture::into_future)
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

    /// Where to go on from, and the stream's last sequence (what the next publish expects):
    /// the stream's last message of this journal, which in a stream filled in order is its
    /// highest acknowledged position. It is read back rather than taken from the cursor, which
    /// lags what was acknowledged before a crash, and may be ahead of a stream that lost
    /// acknowledged messages (then they are published again, in order).
    async fn resume(&self, stream: &stream::Stream) -> Result<(Acked, u64)> {
        let cursor = self.cursor.load()?;
        let last_sequence = stream
            .get_info()
            .await
            .map_err(|e| nats("reading the stream's state", e))?
            .state
            .last_sequence;
        let message = match stream.get_last_raw_message_by_subject(self.subject).await {
            Ok(message) => message,
            // A new stream, or one whose messages all went (limits): from the first position
            // into an empty one, after the cursor into one that held them.
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
                let acked = if last_sequence == 0 {
                    Acked::default()
                } else {
                    Acked {
                        position: cursor.position,
                        sequence: last_sequence,
                    }
                };
                return Ok((acked, last_sequence));
            }
            Err(e) => return Err(nats("reading the stream's last message", e)),
        };
        let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_string());
        let position = header(HEADER_POSITION)
            .and_then(|p| p.parse::<u64>().ok())
            .filter(|_| header(HEADER_JOURNAL).as_deref() == Some(self.id))
            .ok_or_else(|| Error::BadMessage {
                sequence: message.sequence,
                reason: format!(
                    "the last message on {} does not name this journal and a position",
                    self.subject
                ),
            })?;
        if position < cursor.position {
            tracing::warn!(
                stream = %self.options.stream,
                held = position,
                noted = cursor.position,
                "the stream lost acknowledged messages: publishing them again"
            );
        }
        let acked = Acked {
            position,
            sequence: message.sequence,
        };
        Ok((acked, last_sequence))
    }
}
