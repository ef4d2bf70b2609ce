//! Committing a group: the staged frames written with one `write`, synced (in line, or by the
//! syncer), published and answered; segment rolls and seals; the head record kept up to date;
//! and the poisoning rule on a failed write or sync.

use std::sync::atomic::Ordering;
use std::sync::Arc;

// foldhash, not std's SipHash: the writer looks up and inserts event ids and stream keys in
// these maps several times per event, on the commit path, where SipHash was one of the largest
// costs of an append. Its seed is random per process, as std's is.
use journal_format::{ChainHash, Position, SegmentId, SEGMENT_HEADER_LEN};

use crate::error::{Error, Result};
use crate::log::entries::IndexBatch;
use crate::log::segment::{self, SEGMENTS_DIR};
use crate::log::SegmentEnd;
use crate::options::Durability;
use crate::storage::OpenMode;
use crate::write::syncer::Written;

use crate::write::{
    Command, Staged, Writer, HAND_OVER_BYTES, HEAD_RECORD_INTERVAL, INDEX_BACKLOG_WAIT,
    STAGED_BYTES, STAGED_BYTES_KEPT,
};

impl Writer {
    /// Has the filler zero-fill the tail segment ahead of its frames, through a handle of its
    /// own. Best effort: without it (the handle cannot be opened), commits extend the file.
    pub(crate) fn fill_tail(&self) {
        let Some(filler) = &self.filler else {
            return;
        };
        let path = self.dir.join(SEGMENTS_DIR).join(self.tail.id.file_name());
        match self.storage.open(&path, OpenMode::ReadWrite) {
            Ok(file) => {
                let end = self.end().end_offset;
                let sync = self.durability == Durability::Durable;
                filler.attach(file, end, self.limits.segment_bytes_max, sync);
            }
            Err(e) => tracing::warn!(
                error = %e,
                segment = %self.tail.id,
                "cannot open the tail segment for the filler; commits extend it"
            ),
        }
    }

    /// Stops the filler on the tail segment, cuts the zero-filled space after the tail's
    /// frames, and syncs the new length.
    pub(super) fn trim_preallocated(&mut self) -> Result<()> {
        if let Some(filler) = &self.filler {
            filler.detach();
        }
        let end = self.end().end_offset;
        let len = self.tail.file.len().map_err(Error::io_with(|| {
            format!("reading the length of segment {}", self.tail.id)
        }))?;
        if len > end {
            self.tail.file.set_len(end).map_err(Error::io_with(|| {
                format!("trimming segment {}", self.tail.id)
            }))?;
            self.tail.file.sync_data().map_err(Error::io_with(|| {
                format!("syncing segment {}", self.tail.id)
            }))?;
        }
        Ok(())
    }

    /// Records the end of the tail's frames in the head record. Only called when they are all
    /// synced (after a seal, a sync, or at close). A failure is logged: the head record is
    /// evidence, and an older record is still true.
    pub(super) fn record_head(&self) {
        let end = self.end();
        if let Err(e) = self.head_file.record(end.last_position, end.last_hash) {
            tracing::warn!(error = %e, "cannot update the head record");
        }
    }

    pub(super) fn sync_if_needed(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        let result = self
            .tail
            .file
            .sync_data()
            .map_err(Error::io("syncing the tail segment"));
        match result {
            Ok(()) => {
                self.unsynced = false;
                Ok(())
            }
            Err(e) => {
                self.poison(&e);
                Err(e)
            }
        }
    }

    fn poison(&self, cause: &Error) {
        self.publisher.poison(cause);
    }

    /// Where the frames written to the tail end: past what the syncer has yet to publish.
    pub(super) fn end(&self) -> SegmentEnd {
        let published = self.tail.end();
        match self.ahead {
            Some(ahead) if ahead.end_offset > published.end_offset => ahead,
            _ => published,
        }
    }

    /// Waits until the syncer has published every group handed to it; then
    /// [`Error::Poisoned`] if a sync (the syncer's or any other) failed.
    pub(super) fn settle(&self) -> Result<()> {
        if let Some(syncer) = &self.syncer {
            syncer.drain();
        }
        match self.poison.cause() {
            Some(cause) => Err(Error::Poisoned(cause)),
            None => Ok(()),
        }
    }

    /// An empty staging area for a write after the tail's last frame: the one the last commit
    /// left in `spare` when there is one, so that its buffer and maps are reused (a large
    /// buffer allocated and freed per commit makes the allocator consolidate freed chunks on
    /// every single append).
    fn new_staged(&mut self) -> Staged {
        let mut staged = self.spare.take().unwrap_or_else(|| Staged {
            buf: Vec::with_capacity(STAGED_BYTES),
            entries: IndexBatch::default(),
            sparse: Vec::new(),
            replies: Vec::new(),
            next_position: Position(0),
            prev_hash: ChainHash::GENESIS,
        });
        self.restage(&mut staged);
        staged
    }

    /// Empties `staged` for a write after the tail's last frame (after a flush or a roll).
    fn restage(&self, staged: &mut Staged) {
        let end = self.end();
        staged.buf.clear();
        staged.entries.clear();
        staged.sparse.clear();
        staged.replies.clear();
        staged.next_position = end.last_position.next();
        staged.prev_hash = end.last_hash;
    }

    /// Keeps `staged` for the next commit, unless a large write grew its buffer past
    /// [`STAGED_BYTES_KEPT`] (then the next commit allocates afresh).
    fn keep_spare(&mut self, staged: Staged) {
        if staged.buf.capacity() <= STAGED_BYTES_KEPT {
            self.spare = Some(staged);
        }
    }

    pub(super) fn commit_group(&mut self, group: Vec<Command>) {
        if let Some(at) = self.index_complete_at {
            // Idempotency and stream versions read the index for everything before this
            // writer's first commit, so nothing is staged until the backlog is indexed.
            if let Err(e) = self.progress.wait_for(at, INDEX_BACKLOG_WAIT) {
                let message = match e {
                    Error::Index(message) => message,
                    other => other.to_string(),
                };
                for cmd in group {
                    match cmd {
                        Command::Write(request) => {
                            let _ = request.reply.send(Err(Error::Index(message.clone())));
                        }
                        Command::Sync(reply) => {
                            let _ = reply.send(self.sync_if_needed());
                        }
                    }
                }
                return;
            }
            self.index_complete_at = None;
        }
        if let Err(e) = self.refresh_view() {
            // Without a view, lookups fall back to fresh transactions; say why once.
            tracing::warn!(error = %e, "cannot renew the index view");
            self.view = None;
        }
        let mut staged = self.new_staged();
        for cmd in group {
            let request = match cmd {
                Command::Write(request) => request,
                Command::Sync(reply) => {
                    let result = self
                        .flush(&mut staged)
                        .and_then(|()| self.settle())
                        .and_then(|()| self.sync_if_needed());
                    self.restage(&mut staged);
                    let _ = reply.send(result);
                    continue;
                }
            };
            if let Some(cause) = self.poison.cause() {
                let _ = request.reply.send(Err(Error::Poisoned(cause)));
                continue;
            }
            let request_bytes = request.frame_bytes();
            let end = self.end().end_offset + staged.buf.len() as u64;
            if end + request_bytes > self.limits.segment_bytes_max
                && end > SEGMENT_HEADER_LEN as u64
            {
                let rolled = self.flush(&mut staged).and_then(|()| self.roll());
                self.restage(&mut staged);
                if let Err(e) = rolled {
                    let _ = request.reply.send(Err(e));
                    continue;
                }
            }
            let staging = match &request.verbatim {
                Some(verbatim) => self.stage_verbatim(
                    &request.events,
                    &request.bodies,
                    &request.ids,
                    verbatim,
                    &mut staged,
                ),
                None => self.stage(
                    &request.events,
                    &request.bodies,
                    &request.ids,
                    request.expected_version,
                    &mut staged,
                ),
            };
            match staging {
                Ok(appended) => staged.replies.push((request.reply, appended)),
                Err(e) => {
                    let _ = request.reply.send(Err(e));
                }
            }
        }
        let _ = self.flush(&mut staged);
        self.keep_spare(staged);
        self.record_head_if_due();
    }

    /// In durable mode, records the published head (every published position is synced) in the
    /// head record once [`HEAD_RECORD_INTERVAL`] of recorded time passed since the last record.
    /// Recorded time, not the clock read again: a seeded clock keeps the simulator's files
    /// the same from run to run.
    fn record_head_if_due(&mut self) {
        if self.durability != Durability::Durable {
            return;
        }
        let interval = i64::try_from(HEAD_RECORD_INTERVAL.as_nanos()).unwrap_or(i64::MAX);
        if self.last_recorded_ns.saturating_sub(self.head_recorded_ns) < interval {
            return;
        }
        self.head_recorded_ns = self.last_recorded_ns;
        let head = self.log.head();
        if let Err(e) = self.head_file.record(head.position, head.hash) {
            tracing::warn!(error = %e, "cannot update the head record");
        }
    }

    /// Writes and (in durable mode) syncs the staged frames, publishes them, and answers.
    fn flush(&mut self, staged: &mut Staged) -> Result<()> {
        let replies = std::mem::take(&mut staged.replies);
        if staged.buf.is_empty() {
            for (reply, answers) in replies {
                let _ = reply.send(Ok(answers));
            }
            return Ok(());
        }
        // At most one write is unsynced in durable mode: the group the syncer holds is synced
        // before these frames are written. Were both unsynced, a power failure could keep this
        // write and lose part of that one, which recovery cannot tell from damage followed by a
        // valid write (it refuses to open: docs/OPERATIONS.md, "Buffered mode and power failures").
        if let Err(e) = self.settle() {
            self.publisher.refuse(replies);
            staged.buf.clear();
            return Err(e);
        }
        let state = self.end();
        let end = state.end_offset + staged.buf.len() as u64;
        if let Some(filler) = &self.filler {
            filler.before_write(end);
        }
        let write = self
            .tail
            .file
            .write_all_at(&staged.buf, state.end_offset)
            .map_err(Error::io_with(|| {
                format!("writing segment {}", self.tail.id)
            }));
        if let (Ok(()), Some(filler)) = (&write, &self.filler) {
            filler.after_write(end, staged.buf.len() as u64);
        }
        if let Err(e) = write {
            self.poison(&e);
            self.publisher.refuse(replies);
            staged.buf.clear();
            return Err(e);
        }
        let last_position = Position(staged.next_position.0 - 1);
        assert!(
            last_position > state.last_position,
            "positions must strictly increase across commits"
        );
        let written = Written {
            segment: Arc::clone(&self.tail),
            end: SegmentEnd {
                end_offset: end,
                last_position,
                last_hash: staged.prev_hash,
                last_sparse_offset: staged
                    .sparse
                    .last()
                    .map(|e| e.offset.0)
                    .or(state.last_sparse_offset),
            },
            sparse: std::mem::take(&mut staged.sparse),
            replies,
            entries: std::mem::take(&mut staged.entries),
        };
        staged.buf.clear();
        if let Durability::Buffered { .. } = self.durability {
            self.unsynced = true;
            self.publisher.publish(written);
            return Ok(());
        }
        // Handed over when the group is large and requests wait: the writer stages them during
        // the sync. Synced here otherwise: a small group's sync is shorter than what a
        // hand-over's wake-ups add on the way to the answer. (The syncer is idle: drained
        // above.)
        if let Some(syncer) = &self.syncer {
            let large = HAND_OVER_BYTES.min(self.limits.batch_bytes_max / 2);
            if written.end.end_offset - state.end_offset >= large
                && self.queued.load(Ordering::SeqCst) > 0
            {
                self.ahead = Some(written.end);
                syncer.hand(written);
                return Ok(());
            }
        }
        self.publisher.sync_and_publish(written)
    }

    /// Seals the tail segment with its footer and starts the next one.
    fn roll(&mut self) -> Result<()> {
        let result = self.try_roll();
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    fn try_roll(&mut self) -> Result<()> {
        self.settle()?;
        self.sync_if_needed()?;
        // The footer goes right after the frames and ends the file: cut the zeros first.
        self.trim_preallocated()?;
        let state = self.tail.seal()?;
        self.record_head();
        let next = segment::create(
            &*self.storage,
            &self.dir,
            SegmentId(self.tail.id.0 + 1),
            state.last_position.next(),
            state.last_hash,
        )?;
        let next = Arc::new(next);
        self.log.push(Arc::clone(&next));
        tracing::debug!(segment = %next.id, "rolled to a new segment");
        self.tail = next;
        self.ahead = None;
        self.fill_tail();
        Ok(())
    }
}
