//! Appending frames copied from another journal: a replica that follows its source stores each
//! of the source's frames at the position it had there, with the same fields and the same
//! chain, so that both journals give the same digest at every position; and the key store an
//! encrypted source ships with its frames, taken whole as the replica's own.

use std::sync::Arc;

use journal_format::frame::{decode_frame, peek_position};
use journal_format::merkle::leaf_hash;
use journal_format::{EventIds, Position, FRAME_HEADER_LEN};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::strings::Strings;
use crate::write::verbatim::Verbatim;
use crate::write::{Appended, Command, PreparedEvent, WriteRequest};

impl Journal {
    /// Appends `frames`, stored frames copied from another journal back to back (each a
    /// header and its body, exactly as that journal stored them), at the positions they hold.
    ///
    /// Every frame's checksums are checked; the first must hold the position after this
    /// journal's head, each next one the position after it, each its stream's next version;
    /// each link group's link is computed here from this journal's head and must be the one
    /// the frames store. The frames must end a batch (their last frame `END_OF_BATCH`). The
    /// request is atomic: on any refusal nothing of it is written. Durable when this returns,
    /// as an append is.
    ///
    /// # Errors
    /// [`Error::FrameRefused`] naming the first frame that does not continue the log (a damaged
    /// frame, a gap, a repeat, a link that does not chain); [`Error::ReadOnly`]; what an append
    /// can fail with.
    pub async fn append_frames(&self, frames: &[u8]) -> Result<Vec<Appended>> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = self.inner.poison.cause() {
            return Err(Error::Poisoned(cause));
        }
        let (events, bodies, ids, verbatim) = split_frames(frames, self.inner.options.tree)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.send(Command::Write(WriteRequest {
            events,
            bodies,
            ids,
            expected_version: None,
            verbatim: Some(verbatim),
            reply,
        }))?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

impl Journal {
    /// This journal's key store as it ships to replicas (JSON, the data keys wrapped by the
    /// master key, which never travels); `None` when the journal is not encrypted. Read from
    /// the directory, so a journal opened read-only beside its writer, without the master key,
    /// gives the writer's latest store.
    ///
    /// # Errors
    /// [`Error::Keys`] when no whole store can be read (read again a few times first: the
    /// writer may be replacing it); I/O errors.
    pub fn key_store_copy(&self) -> Result<Option<Vec<u8>>> {
        let storage = &*self.inner.options.storage;
        let mut attempt = 0;
        loop {
            match crate::keys::store::copy(storage, &self.inner.dir) {
                Err(e) if attempt < 4 => {
                    tracing::debug!(error = %e, "the key store is being replaced; reading again");
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// Takes `copy`, the key store of the source this journal is a replica of
    /// ([`Journal::key_store_copy`]), as its own, durably: the store replaced whole, the old
    /// copy overwritten with zeros, so that the keys the source destroyed are gone here too.
    /// The replica needs no master key for it. Opened with one over a key store it already
    /// had, it reads with the new keys at once; the first store installed is read from the
    /// next open.
    ///
    /// # Errors
    /// [`Error::Keys`] when `copy` is not a whole key store; [`Error::InvalidInput`] when it is
    /// wrapped by another master key than the one this journal was opened with;
    /// [`Error::ReadOnly`]; I/O errors.
    pub fn install_key_store(&self, copy: &[u8]) -> Result<()> {
        if self.is_read_only() {
            return Err(Error::ReadOnly);
        }
        let mut file = crate::keys::store::parse_copy(copy)?;
        file.pending.clear();
        match &self.inner.keys {
            Some(keys) => keys.adopt(file),
            None => crate::keys::store::replace(
                &*self.inner.options.storage,
                &self.inner.dir,
                &file,
                &mut |_| {},
            ),
        }
    }
}

/// Copied frames split into what the writer stages: each event's ids and body, and its stored
/// fields and link.
type Split = (Vec<PreparedEvent>, Vec<u8>, Strings, Vec<Verbatim>);

/// Splits `frames` into events, checking each frame's checksums and that the last ends a batch;
/// hashes each body as a Merkle leaf when `hash_leaves`.
fn split_frames(frames: &[u8], hash_leaves: bool) -> Result<Split> {
    let mut events = Vec::new();
    let mut bodies = Vec::with_capacity(frames.len());
    let mut ids = Strings::default();
    let mut verbatim = Vec::new();
    let mut rest = frames;
    while !rest.is_empty() {
        let claimed = peek_position(rest).unwrap_or(Position::ZERO);
        let (header, body) = decode_frame(rest).map_err(|e| Error::FrameRefused {
            position: claimed,
            reason: format!("the frame is damaged: {e}"),
        })?;
        let position = header.meta.position;
        let event_ids = EventIds::from_msgpack(body).map_err(|e| Error::FrameRefused {
            position,
            reason: format!("its body is not a stored event: {e}"),
        })?;
        let (kind, id) = event_ids.stream_key_parts();
        let stream_key = ids.push_joined(&[kind, id]);
        let task = event_ids.task_id.map(|id| ids.push(id));
        let run = event_ids.run_id.map(|id| ids.push(id));
        let start = bodies.len();
        bodies.extend_from_slice(body);
        events.push(PreparedEvent {
            body: start..bodies.len(),
            event_id: Arc::from(event_ids.event_id.unwrap_or_default()),
            id_assigned: false,
            stream_key,
            task,
            run,
            leaf: hash_leaves.then(|| leaf_hash(body)),
        });
        verbatim.push(Verbatim {
            meta: header.meta,
            link: header.hash,
        });
        rest = rest
            .get(FRAME_HEADER_LEN + body.len()..)
            .unwrap_or_default();
    }
    if let Some(last) = verbatim.last() {
        if !last.meta.flags.is_end_of_batch() {
            return Err(Error::FrameRefused {
                position: last.meta.position,
                reason: "the copied frames end inside a batch: the rest of it must come with them"
                    .into(),
            });
        }
    }
    Ok((events, bodies, ids, verbatim))
}
