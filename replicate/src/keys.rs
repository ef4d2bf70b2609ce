//! An encrypted source's key store, shipped beside its frames so that its replica reads with
//! the same master key, and forgets what the source forgot.
//!
//! The replicate task publishes the source's key store ([`Journal::key_store_copy`]: the data
//! keys wrapped by the master key, which never travels) to a companion stream
//! `<STREAM>_KEYS`, subject `<prefix>-keys.<journal id>`, keeping only the latest message. It
//! reads the store after the frames it is about to publish (a data key is in the store before
//! any event sealed under it is committed, and a redaction destroys keys before its fact is
//! appended), publishes it when it changed, and gives each frame's message a `Journal-Keys`
//! header: the companion stream's sequence of a store that holds every key the frame needs.
//! The follower installs the latest store ([`Journal::install_key_store`]) before it stores a
//! frame whose header is past the store it installed: a replica holds a key before the events
//! sealed under it, and loses it (its old store overwritten) before the fact that redacts them.

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use journal_engine::Journal;

use crate::stream::StreamLimits;
use crate::{nats, Error, Result};

/// The header naming the companion stream's sequence of the key store a frame needs.
pub const HEADER_KEYS: &str = "Journal-Keys";

/// The companion stream of `stream`, holding its journal's key store.
#[must_use]
pub fn keys_stream(stream: &str) -> String {
    format!("{stream}_KEYS")
}

/// The subject a journal's key store is published on.
fn keys_subject(prefix: &str, journal_id: &str) -> String {
    format!("{prefix}-keys.{journal_id}")
}

/// The replicate task's side: publishes the source's store when it changed.
pub(crate) struct Shipper {
    stream: String,
    subject: String,
    /// The store last published, and its sequence in the companion stream.
    shipped: Option<(Vec<u8>, u64)>,
}

impl Shipper {
    pub(crate) fn new(stream: &str, prefix: &str, journal_id: &str) -> Shipper {
        Shipper {
            stream: keys_stream(stream),
            subject: keys_subject(prefix, journal_id),
            shipped: None,
        }
    }

    /// The companion stream's sequence of a store holding every key of the frames read
    /// before this call, published (and acknowledged) first when the store changed; `None`
    /// for a journal that is not encrypted.
    pub(crate) async fn ship(
        &mut self,
        js: &jetstream::Context,
        journal: &Journal,
        limits: &StreamLimits,
    ) -> Result<Option<u64>> {
        // Read off the runtime's threads: a store being replaced is read again after a pause.
        let source = journal.clone();
        let copied = tokio::task::spawn_blocking(move || source.key_store_copy())
            .await
            .map_err(|e| journal_engine::Error::Internal(format!("reading the key store: {e}")))?;
        let Some(store) = copied? else {
            return Ok(None);
        };
        if let Some((shipped, sequence)) = &self.shipped {
            if *shipped == store {
                return Ok(Some(*sequence));
            }
        }
        self.ensure(js, limits).await?;
        let ack = js
            .publish(self.subject.clone(), Bytes::from(store.clone()))
            .await
            .map_err(|e| nats("publishing the key store", e))?
            .await
            .map_err(|e| nats("publishing the key store", e))?;
        self.shipped = Some((store, ack.sequence));
        Ok(Some(ack.sequence))
    }

    /// The companion stream, created when missing: one message per subject, so a store
    /// replaced by a later one (without the keys a redaction destroyed) is deleted.
    async fn ensure(&self, js: &jetstream::Context, limits: &StreamLimits) -> Result<()> {
        let config = stream::Config {
            name: self.stream.clone(),
            subjects: vec![self.subject.clone()],
            num_replicas: limits.replicas,
            max_messages_per_subject: 1,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        js.get_or_create_stream(config)
            .await
            .map_err(|e| nats(&format!("creating stream {}", self.stream), e))?;
        Ok(())
    }
}

/// Installs the latest store of `stream`'s companion into `replica` and gives its sequence,
/// which must be at least `needed` (the header of the frame about to be stored).
pub(crate) async fn install_latest(
    js: &jetstream::Context,
    stream: &str,
    replica: &Journal,
    needed: u64,
) -> Result<u64> {
    let name = keys_stream(stream);
    let companion = js
        .get_stream(&name)
        .await
        .map_err(|e| nats(&format!("opening stream {name}"), e))?;
    let info = companion
        .get_info()
        .await
        .map_err(|e| nats(&format!("reading stream {name}"), e))?;
    let subject = info
        .config
        .subjects
        .first()
        .cloned()
        .ok_or_else(|| Error::Nats(format!("stream {name} takes no subject")))?;
    let message = companion
        .get_last_raw_message_by_subject(&subject)
        .await
        .map_err(|e| nats(&format!("reading the key store in stream {name}"), e))?;
    if message.sequence < needed {
        return Err(Error::Nats(format!(
            "stream {name} holds key store {} and a frame needs {needed} or later",
            message.sequence
        )));
    }
    replica.install_key_store(&message.payload)?;
    Ok(message.sequence)
}
