//! Staging frames copied from another journal, as a replica does: each frame framed again from
//! the fields and body its source stored, at the position it had there, and each link group's
//! link computed here and compared with the one the source stored. A frame that does not
//! continue this log (its position, its stream's version, its recorded time, its link) refuses
//! the whole request, naming its position: nothing is patched over.

use foldhash::{HashMap, HashMapExt};
use journal_format::frame::{encode_unlinked, link_group};
use journal_format::{
    ByteOffset, ChainHash, FooterEntry, FrameMeta, Location, Position, FRAME_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::log::entries::IndexEntry;
use crate::log::SPARSE_INTERVAL_BYTES;
use crate::strings::Strings;
use crate::write::answer::{Appended, Committed, Stored};
use crate::write::{unstage, Mark, PreparedEvent, Staged, Writer};

/// The stored fields of one copied frame: its header's fields and the link its group stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verbatim {
    pub meta: FrameMeta,
    pub link: ChainHash,
}

/// A copied frame that does not continue the log.
fn refused(position: Position, reason: String) -> Error {
    Error::FrameRefused { position, reason }
}

impl Writer {
    /// Checks and frames a request of copied frames into `staged`; on error nothing of it
    /// stays staged.
    pub(super) fn stage_verbatim(
        &mut self,
        events: &[PreparedEvent],
        bodies: &[u8],
        ids: &Strings,
        verbatim: &[Verbatim],
        staged: &mut Staged,
    ) -> Result<Vec<Appended>> {
        let rollback = Mark {
            buf: staged.buf.len(),
            entries: staged.entries.len(),
            sparse: staged.sparse.len(),
            next_position: staged.next_position,
            prev_hash: staged.prev_hash,
        };
        // What framing moves before a later frame may be refused: restored with the rest.
        let last_recorded_ns = self.last_recorded_ns;
        let greatest_id = self.greatest_id.clone();
        let mut versions: HashMap<&str, u64> = HashMap::with_capacity(64);
        match self.frame_verbatim(events, bodies, ids, verbatim, &mut versions, staged) {
            Ok(answers) => {
                for (key, version) in versions {
                    self.streams.insert(key.to_owned(), version);
                }
                Ok(answers)
            }
            Err(e) => {
                unstage(staged, &mut self.recent, rollback);
                self.last_recorded_ns = last_recorded_ns;
                self.greatest_id = greatest_id;
                Err(e)
            }
        }
    }

    /// Frames each copied frame after checking that it continues the log, and links each link
    /// group as it ends, comparing its link with the stored one.
    fn frame_verbatim<'r>(
        &mut self,
        events: &[PreparedEvent],
        bodies: &[u8],
        ids: &'r Strings,
        verbatim: &[Verbatim],
        versions: &mut HashMap<&'r str, u64>,
        staged: &mut Staged,
    ) -> Result<Vec<Appended>> {
        let tail_end = self.end();
        let mut answers = Vec::with_capacity(events.len());
        let mut group_start = staged.buf.len();
        let mut group: Vec<(usize, FrameMeta, u64, ChainHash)> = Vec::new();
        for (i, (event, copied)) in events.iter().zip(verbatim).enumerate() {
            let meta = copied.meta;
            let key = ids.get(event.stream_key);
            self.check_continues(&meta, key, versions, staged)?;
            let body = bodies.get(event.body.clone()).ok_or_else(|| {
                Error::Internal(format!("copied frame {i} names bytes it does not have"))
            })?;
            let offset = tail_end.end_offset + staged.buf.len() as u64;
            encode_unlinked(&mut staged.buf, &meta, body)
                .map_err(|e| refused(meta.position, e.to_string()))?;
            self.note_sparse(staged, offset, meta.position, tail_end.last_sparse_offset);
            staged.next_position = meta.position.next();
            staged.entries.push(&IndexEntry {
                position: meta.position,
                event_id: &event.event_id,
                stream_key: key,
                stream_version: meta.stream_version,
                task: event.task.map(|id| ids.get(id)),
                run: event.run.map(|id| ids.get(id)),
                location: Location::new(self.tail.id, offset),
                end_offset: offset + (FRAME_HEADER_LEN + body.len()) as u64,
            });
            versions.insert(key, meta.stream_version);
            self.last_recorded_ns = meta.recorded_at_ns;
            if *event.event_id > *self.greatest_id {
                self.greatest_id.clear();
                self.greatest_id.push_str(&event.event_id);
            }
            group.push((i, meta, offset, copied.link));
            if meta.flags.is_link_end() {
                let link = self.link_copied(staged, group_start, copied)?;
                for (j, meta, offset, stored) in group.drain(..) {
                    if stored != link {
                        return Err(refused(
                            meta.position,
                            "its stored link is not its link group's".into(),
                        ));
                    }
                    let committed = Committed {
                        position: meta.position,
                        hash: link,
                        stream_version: meta.stream_version,
                        recorded_at_ns: meta.recorded_at_ns,
                        location: Location::new(self.tail.id, offset),
                    };
                    if let Some(event) = events.get(j) {
                        self.recent.push(&event.event_id, committed);
                        answers.push(committed.answer(&event.event_id, Stored::Now));
                    }
                }
                group_start = staged.buf.len();
            }
        }
        if !group.is_empty() {
            let last = staged.next_position.0.saturating_sub(1);
            return Err(refused(
                Position(last),
                "the copied frames end inside a link group".into(),
            ));
        }
        Ok(answers)
    }

    /// Refuses a copied frame that does not come next: its position, its stream's version and
    /// its recorded time must continue the log as staged so far.
    fn check_continues(
        &self,
        meta: &FrameMeta,
        key: &str,
        versions: &HashMap<&str, u64>,
        staged: &Staged,
    ) -> Result<()> {
        if meta.position != staged.next_position {
            return Err(refused(
                meta.position,
                format!(
                    "the log's next position is {}: position {} does not follow it (a gap or a repeat)",
                    staged.next_position, meta.position
                ),
            ));
        }
        let current = match versions.get(key) {
            Some(v) => *v,
            None => self.stream_version(key)?,
        };
        if meta.stream_version != current + 1 {
            return Err(refused(
                meta.position,
                format!(
                    "stream {key} is at version {current}: version {} does not follow it",
                    meta.stream_version
                ),
            ));
        }
        if meta.recorded_at_ns < self.last_recorded_ns {
            return Err(refused(
                meta.position,
                "its recorded time is before the log's last one".into(),
            ));
        }
        Ok(())
    }

    /// Adds a sparse entry for the frame at `offset` when it is due.
    fn note_sparse(
        &self,
        staged: &mut Staged,
        offset: u64,
        position: Position,
        tail_sparse: Option<u64>,
    ) {
        let last_sparse = staged.sparse.last().map(|e| e.offset.0).or(tail_sparse);
        if last_sparse.is_none_or(|o| offset >= o + SPARSE_INTERVAL_BYTES) {
            staged.sparse.push(FooterEntry {
                position,
                offset: ByteOffset(offset),
            });
        }
    }

    /// Links the copied group staged from `start` on and compares its link with the one the
    /// source stored (`last`, its last frame's).
    fn link_copied(&self, staged: &mut Staged, start: usize, last: &Verbatim) -> Result<ChainHash> {
        let frames = staged.buf.get_mut(start..).ok_or_else(|| {
            Error::Internal("a copied link group starts past the staged bytes".into())
        })?;
        let link = link_group(frames, &staged.prev_hash)
            .map_err(|e| refused(last.meta.position, e.to_string()))?;
        if link != last.link {
            return Err(refused(
                last.meta.position,
                format!(
                    "its link group does not chain to the log: the link computed here is {}, the frame stores {}",
                    link.to_hex(),
                    last.link.to_hex()
                ),
            ));
        }
        staged.prev_hash = link;
        Ok(link)
    }
}
