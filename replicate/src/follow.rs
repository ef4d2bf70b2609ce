//! Following: a replica built from a stream that `replicate` fills, through a durable pull
//! consumer. Each message's frame is stored at the position it holds with
//! [`Journal::append_frames`], so the replica has the source's positions and hash chain and
//! gives the same digest; a gap, a damaged frame or a link that does not chain stops the
//! follower with that position (nothing is patched over). Messages are acknowledged after
//! their frames are durable; the replica's head, not the consumer, says where to go on from.
//!
//! A position past the next one is not yet a gap: when a NATS node dies, messages the consumer
//! had sent to the follower through it are lost on the way, and the consumer, which counts them
//! as delivered, goes on with later ones (redelivering the lost ones only after their ack
//! wait). So the follower first reads the stream at the sequence after its head's message: when
//! the next position is there, the deliveries were lost and following starts again from it; only
//! when the stream does not hold it there is the gap refused. The replicate task stores each
//! position right after the previous one (`publish.rs`), so where the next position must be is
//! known.
//!
//! [`follow_fleet`] gathers several sources into one journal instead: each event appended
//! anew with its [`Origin`] (source journal, position, link) as an extra field.

mod fleet;

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, Message};
use futures_util::{FutureExt, StreamExt};
use journal_engine::Journal;
use journal_format::frame::FrameHeader;
use journal_format::{Position, FRAME_HEADER_LEN};
use tokio::sync::watch;

use crate::keys::{install_latest, HEADER_KEYS};
use crate::stream::existing;
use crate::{connect, nats, Error, Result, HEADER_JOURNAL, HEADER_POSITION};

pub use fleet::{follow_fleet, Origin};

/// How following runs.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The NATS server(s).
    pub url: String,
    /// The stream(s) to follow: one for a replica, one per source for a fleet journal.
    pub streams: Vec<String>,
    /// The durable consumer's name.
    pub consumer: String,
    /// About how many bytes of frames are stored in one append.
    pub batch_bytes: usize,
    /// Stop once the replica's head reaches this position (`None`: for ever).
    pub until: Option<u64>,
}

impl FollowOptions {
    /// Following `streams` at `url`, with the defaults.
    #[must_use]
    pub fn new(url: impl Into<String>, streams: Vec<String>) -> FollowOptions {
        FollowOptions {
            url: url.into(),
            streams,
            consumer: "journal-follow".into(),
            batch_bytes: 1 << 20,
            until: None,
        }
    }
}

/// How far a follower got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FollowProgress {
    /// The replica's head.
    pub head: u64,
    /// How long after its source recorded it the last stored event was durable here, in
    /// nanoseconds (the two clocks' difference included).
    pub lag_ns: i64,
    /// Why the last attempt failed, while retrying.
    pub error: Option<String>,
}

/// The file in a replica's directory naming the journal it follows.
const SOURCE_FILE: &str = "REPLICA_OF";
/// The longest wait between attempts while JetStream is unavailable.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Builds `replica` from the stream `options.streams[0]`, reporting in `progress`. Returns
/// once `options.until` is reached; otherwise runs until a refusal.
///
/// # Errors
/// [`Error::Journal`] with [`journal_engine::Error::FrameRefused`] naming the position of a
/// frame that does not continue the replica (a gap, damage, a broken link);
/// [`Error::BadMessage`] for a message of another journal or without its headers.
pub async fn follow(
    replica: Journal,
    options: FollowOptions,
    progress: watch::Sender<FollowProgress>,
) -> Result<()> {
    let stream = options
        .streams
        .first()
        .ok_or_else(|| Error::Nats("no stream to follow".into()))?
        .clone();
    let client = connect(&options.url).await?;
    let mut backoff = Duration::from_millis(100);
    let mut resume = None;
    loop {
        match session(&replica, &options, &stream, &client, &progress, &mut resume).await {
            Ok(()) => return Ok(()),
            Err(Error::Nats(e)) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "following interrupted");
                progress.send_modify(|p| p.error = Some(e));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => return Err(e),
        }
    }
}

/// A durable pull consumer of `stream` delivering from `start`, replacing one of that name.
pub(crate) async fn consumer_from(
    js: &jetstream::Context,
    stream: &str,
    name: &str,
    start: u64,
) -> Result<jetstream::consumer::Consumer<pull::Config>> {
    let stream = existing(js, stream).await?;
    // Whatever the consumer acknowledged, the replica's head decides where to go on from.
    let _ = stream.delete_consumer(name).await;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(name.to_string()),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start.max(1),
            },
            ack_policy: AckPolicy::All,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 100_000,
            ..Default::default()
        })
        .await
        .map_err(|e| nats(&format!("creating consumer {name}"), e))
}

/// Where the replica's head is in the stream, as a session left it.
#[derive(Clone, Copy, Debug)]
struct Resume {
    /// The replica's head.
    head: u64,
    /// The stream sequence after the message that brought the head.
    next_sequence: u64,
}

/// Follows from the replica's head until `until` or the first NATS error, leaving in `resume`
/// where the head is in the stream.
async fn session(
    replica: &Journal,
    options: &FollowOptions,
    stream: &str,
    client: &async_nats::Client,
    progress: &watch::Sender<FollowProgress>,
    resume: &mut Option<Resume>,
) -> Result<()> {
    let js = jetstream::new(client.clone());
    let head = replica.head().position.0;
    // A stream filled by `replicate` holds position N at sequence N, unless the session
    // before saw otherwise.
    let start = match *resume {
        Some(r) if r.head == head => r.next_sequence,
        _ => head + 1,
    };
    let stream_handle = existing(&js, stream).await?;
    let consumer = consumer_from(&js, stream, &options.consumer, start).await?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(1_000)
        .messages()
        .await
        .map_err(|e| nats("pulling messages", e))?;
    progress.send_modify(|p| p.error = None);
    let mut source = std::fs::read_to_string(replica.dir().join(SOURCE_FILE)).ok();
    let mut keys_installed = 0;
    loop {
        let head = replica.head().position.0;
        if options.until.is_some_and(|u| head >= u) {
            return Ok(());
        }
        let next_sequence = match *resume {
            Some(r) if r.head == head => r.next_sequence,
            _ => start,
        };
        let mut batch = Batch::new(head, next_sequence);
        while !batch.complete(options.batch_bytes) {
            // Waits for the first message and for the rest of an unfinished batch; takes the
            // others only while they are there.
            let next = if batch.ends_batch || batch.last.is_none() {
                match messages.next().now_or_never() {
                    Some(next) => next,
                    None if batch.last.is_none() => messages.next().await,
                    None => break,
                }
            } else {
                messages.next().await
            };
            let message = next
                .ok_or_else(|| Error::Nats("the consumer's messages ended".into()))?
                .map_err(|e| nats("pulling messages", e))?;
            let added = check_source(replica, &mut source, &message)
                .and_then(|()| batch.add(replica, message));
            let added = match added {
                Ok(Some(ahead)) => Err(lost_or_gap(&stream_handle, &batch, ahead).await),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = added {
                if matches!(e, Error::Nats(_)) {
                    // Deliveries lost: the batch comes again from the new consumer.
                    return Err(e);
                }
                // The whole batches before the refused message are kept.
                if let Some(whole) = batch.frames.get(..batch.whole).filter(|w| !w.is_empty()) {
                    let ready = batch.keys_needed <= keys_installed
                        || install_latest(&js, stream, replica, batch.keys_needed)
                            .await
                            .is_ok();
                    if ready {
                        let _ = replica.append_frames(whole).await;
                    }
                }
                return Err(e);
            }
        }
        let stored = Resume {
            head: batch.next - 1,
            next_sequence: batch.next_sequence,
        };
        if batch.keys_needed > keys_installed {
            // Before the frames: their keys are there when they are, and the keys a
            // redaction destroyed are gone before its fact is stored.
            keys_installed = install_latest(&js, stream, replica, batch.keys_needed).await?;
        }
        store(replica, batch, progress).await?;
        *resume = Some(stored);
    }
}

/// What a message at `ahead`, past the batch's next position, means: deliveries lost on the
/// way ([`Error::Nats`], retried) when the stream holds the next position where it belongs,
/// otherwise a gap in the stream, refused with the position that came.
async fn lost_or_gap(stream: &jetstream::stream::Stream, batch: &Batch, ahead: u64) -> Error {
    let next = batch.next;
    let sequence = batch.next_sequence;
    match stream.get_raw_message(sequence).await {
        Ok(message) => {
            let held = message
                .headers
                .get(HEADER_POSITION)
                .and_then(|p| p.as_str().parse::<u64>().ok());
            if held == Some(next) {
                return Error::Nats(format!(
                    "position {next} (stream sequence {sequence}) was not delivered and {ahead} was: following again from {next}"
                ));
            }
        }
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
        Err(e) => return nats(&format!("reading message {sequence} of the stream"), e),
    }
    journal_engine::Error::FrameRefused {
        position: Position(ahead),
        reason: format!(
            "a gap: the stream skips from position {} to {ahead}",
            next - 1
        ),
    }
    .into()
}

/// Frames gathered for one append: they continue the replica's head and end a batch.
struct Batch {
    next: u64,
    /// The stream sequence after the last message added (where `next` should be).
    next_sequence: u64,
    /// The key store the frames need (its companion stream sequence; 0: none).
    keys_needed: u64,
    frames: Vec<u8>,
    ends_batch: bool,
    /// How many bytes of `frames` end a batch.
    whole: usize,
    recorded_ns: i64,
    last: Option<Message>,
}

impl Batch {
    fn new(head: u64, next_sequence: u64) -> Batch {
        Batch {
            next: head + 1,
            next_sequence,
            keys_needed: 0,
            frames: Vec::new(),
            ends_batch: true,
            whole: 0,
            recorded_ns: 0,
            last: None,
        }
    }

    fn complete(&self, bytes: usize) -> bool {
        self.ends_batch && self.frames.len() >= bytes
    }

    /// Adds the message's frame, or skips it when the replica holds its position already
    /// with the same link (a redelivery). Gives back a position past the next one, not added,
    /// for [`lost_or_gap`] to judge.
    fn add(&mut self, replica: &Journal, message: Message) -> Result<Option<u64>> {
        let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
        let position = header(&message, HEADER_POSITION)
            .and_then(|p| p.parse::<u64>().ok())
            .ok_or_else(|| Error::BadMessage {
                sequence,
                reason: format!("no {HEADER_POSITION} header"),
            })?;
        let header_bytes = message.payload.get(..FRAME_HEADER_LEN);
        let decoded = header_bytes.map(FrameHeader::decode);
        if position < self.next && position > replica.head().position.0 {
            // Delivered again (a consumer's leader moved) while its first copy waits in this
            // batch, which is checked when appended.
            self.last = Some(message);
            return Ok(None);
        }
        if position < self.next {
            let held = replica.get_position(Position(position))?;
            return match decoded {
                Some(Ok(h)) if h.hash == held.hash => {
                    self.last = Some(message);
                    Ok(None)
                }
                _ => Err(journal_engine::Error::FrameRefused {
                    position: Position(position),
                    reason: "the replica holds this position with another link".into(),
                }
                .into()),
            };
        }
        if position > self.next {
            return Ok(Some(position));
        }
        if let Some(Ok(h)) = decoded {
            self.ends_batch = h.meta.flags.is_end_of_batch();
            self.recorded_ns = h.meta.recorded_at_ns;
        } else {
            // A damaged header: append_frames refuses it with its position.
            self.ends_batch = true;
        }
        self.frames.extend_from_slice(&message.payload);
        if self.ends_batch {
            self.whole = self.frames.len();
        }
        self.next = position + 1;
        self.next_sequence = sequence + 1;
        if let Some(keys) = header(&message, HEADER_KEYS).and_then(|k| k.parse::<u64>().ok()) {
            self.keys_needed = self.keys_needed.max(keys);
        }
        self.last = Some(message);
        Ok(None)
    }
}

/// Stores the batch's frames durably, then acknowledges its last message (and, the consumer
/// acknowledging all, every one before it).
async fn store(
    replica: &Journal,
    batch: Batch,
    progress: &watch::Sender<FollowProgress>,
) -> Result<()> {
    if !batch.frames.is_empty() {
        if let Err(e) = replica.append_frames(&batch.frames).await {
            // The frames before the refused one are stored (when they end a batch), then the
            // refusal is reported.
            if let journal_engine::Error::FrameRefused { position, .. } = &e {
                let before = frames_before(&batch.frames, *position);
                if !before.is_empty() {
                    let _ = replica.append_frames(before).await;
                }
            }
            return Err(e.into());
        }
        let lag = replica.clock().now_unix_ns() - batch.recorded_ns;
        progress.send_modify(|p| {
            p.head = batch.next - 1;
            p.lag_ns = lag;
        });
    }
    if let Some(last) = batch.last {
        last.ack().await.map_err(|e| nats("acknowledging", e))?;
    }
    Ok(())
}

/// The frames of `frames` before the one at `position` (read without checking: those are
/// checked again when appended).
fn frames_before(frames: &[u8], position: Position) -> &[u8] {
    let mut at = 0usize;
    while let Some(rest) = frames.get(at..).filter(|r| r.len() >= FRAME_HEADER_LEN) {
        if journal_format::frame::peek_position(rest) == Some(position) {
            break;
        }
        let len = rest
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .unwrap_or(0) as usize;
        at += FRAME_HEADER_LEN + len;
    }
    frames.get(..at.min(frames.len())).unwrap_or_default()
}

/// A header's value.
pub(crate) fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str())
}

/// Refuses a message of another journal than the one the replica follows (noted at its first).
fn check_source(replica: &Journal, source: &mut Option<String>, message: &Message) -> Result<()> {
    let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
    let id = header(message, HEADER_JOURNAL).ok_or_else(|| Error::BadMessage {
        sequence,
        reason: format!("no {HEADER_JOURNAL} header"),
    })?;
    match source {
        Some(known) if known.trim() == id => Ok(()),
        Some(known) => Err(Error::BadMessage {
            sequence,
            reason: format!(
                "it comes from journal {id}, and this replica follows {}",
                known.trim()
            ),
        }),
        None => {
            let path = replica.dir().join(SOURCE_FILE);
            std::fs::write(&path, id).map_err(|e| Error::Io {
                context: format!("writing {}", path.display()),
                source: e,
            })?;
            *source = Some(id.to_string());
            Ok(())
        }
    }
}
