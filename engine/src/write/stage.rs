//! Staging: one request checked (duplicates, repeats inside it, the expected stream version)
//! and framed into the group's staging buffer, each link group linked as soon as it ends.
//! Nothing of a request that fails stays staged.

// foldhash, not std's SipHash: the writer looks up and inserts event ids and stream keys in
// these maps several times per event, on the commit path, where SipHash was one of the largest
// costs of an append. Its seed is random per process, as std's is.
use foldhash::{HashMap, HashMapExt};
use journal_format::frame::{encode_unlinked, link_group, LINK_GROUP_BYTES};
use journal_format::{
    ByteOffset, FooterEntry, FrameFlags, FrameMeta, Located, Location, Position, FRAME_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::log::entries::IndexEntry;
use crate::log::SPARSE_INTERVAL_BYTES;
use crate::strings::Strings;

use crate::keys::Keys;
use crate::write::answer::same_body;
use crate::write::answer::{Appended, Committed, Stored};
use crate::write::{unstage, Mark, PreparedEvent, Staged, Writer};

impl Writer {
    /// The current version of a stream, counting what is staged. A stream not written since
    /// open is read from the index, which holds everything before open once the backlog open
    /// left it is indexed (`index_complete_at`, waited for before anything is staged).
    pub(super) fn stream_version(&self, key: &str) -> Result<u64> {
        if let Some(v) = self.streams.get(key) {
            return Ok(*v);
        }
        match &self.view {
            Some(view) => view.stream_head(key),
            None => self.lookup.stream_head(key),
        }
    }

    /// Renews the index view when the indexer has moved past it, and forgets the recent ids
    /// the new view holds. Every id committed since open is in `recent` or in `view`: an id
    /// leaves `recent` only once a view that reflects its position is in place. (Keeping a view
    /// longer saves a redb read transaction per commit but pins the pages the index frees
    /// meanwhile: the index file grew several times over when it was kept for 256 commits.)
    pub(super) fn refresh_view(&mut self) -> Result<()> {
        let stale = self
            .view
            .as_ref()
            .is_none_or(|v| v.indexed() < self.progress.position());
        if stale {
            let view = self.lookup.view()?;
            let indexed = view.indexed();
            self.recent.forget_through(indexed);
            self.view = Some(view);
        }
        Ok(())
    }

    /// The originals of the event ids of a request that are already stored (or staged), by the
    /// event's index in the request.
    ///
    /// An id found is a duplicate only when its event's body is the stored one (the body holds
    /// only what the caller gave: the journal's fields are in the frame header); otherwise the
    /// request is refused with [`Error::IdReused`]. Only an id found reads a stored frame: a
    /// new id costs nothing more than its lookups.
    fn originals(
        &self,
        events: &[PreparedEvent],
        bodies: &[u8],
        staged: &Staged,
    ) -> Result<Vec<Option<Appended>>> {
        let mut out = Vec::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            if event.id_assigned {
                out.push(None);
                continue;
            }
            let id = &*event.event_id;
            let written = if id > self.greatest_id.as_str() {
                None
            } else {
                self.recent.get(id).copied()
            };
            let body = bodies.get(event.body.clone()).unwrap_or_default();
            let (committed, same) = match written {
                Some(committed) => (committed, self.stored_body_is(&committed, staged, body)?),
                None => match self.indexed(id)? {
                    Some((committed, frame)) => {
                        let stored = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
                        (committed, same_body(stored, body, self.keys.as_deref()))
                    }
                    None => {
                        out.push(None);
                        continue;
                    }
                },
            };
            if !same {
                return Err(Error::IdReused {
                    event_id: id.to_string(),
                    index,
                    position: Some(committed.position),
                });
            }
            out.push(Some(committed.answer(&event.event_id, Stored::Before)));
        }
        Ok(out)
    }

    /// The stored event with this id, by the index (its read view when there is one): what a
    /// duplicate is answered, from its frame's header, and the frame.
    fn indexed(&self, id: &str) -> Result<Option<(Committed, Vec<u8>)>> {
        let found = match &self.view {
            Some(view) => view.event(id)?,
            None => self.lookup.event(id)?,
        };
        let Some(at) = found else {
            return Ok(None);
        };
        let (header, frame) = crate::log::read::read_frame_at(&self.log, at)?;
        let committed = Committed {
            position: at.position,
            hash: header.hash,
            stream_version: header.meta.stream_version,
            recorded_at_ns: header.meta.recorded_at_ns,
            location: at.location,
        };
        Ok(Some((committed, frame)))
    }

    /// Whether the event `committed` describes (one of the recent ids) has `body`
    /// ([`same_body`]): its frame is read from the staging area when it is not written yet
    /// (staged by an earlier request of this group), else from its segment (written, if perhaps
    /// not yet synced or published).
    fn stored_body_is(&self, committed: &Committed, staged: &Staged, body: &[u8]) -> Result<bool> {
        let staged_from = self.end().end_offset;
        let Location { segment, offset } = committed.location;
        if segment == self.tail.id && offset >= staged_from {
            let frame = usize::try_from(offset - staged_from)
                .ok()
                .and_then(|at| staged.buf.get(at..));
            let stored = frame.map(journal_format::frame::decode_frame);
            return match stored {
                Some(Ok((header, stored))) if header.meta.position == committed.position => {
                    Ok(same_body(stored, body, self.keys.as_deref()))
                }
                _ => Err(Error::Internal(format!(
                    "event at position {} is not staged where the writer noted it",
                    committed.position
                ))),
            };
        }
        let (_, frame) = crate::log::read::read_frame_at(
            &self.log,
            Located {
                position: committed.position,
                location: committed.location,
            },
        )?;
        let stored = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
        Ok(same_body(stored, body, self.keys.as_deref()))
    }

    /// Checks one request and frames its new events into `staged`. On error nothing of the
    /// request is staged. The ids of the events it frames are copied into their index entries.
    pub(super) fn stage(
        &mut self,
        events: &[PreparedEvent],
        bodies: &[u8],
        ids: &Strings,
        expected: Option<u64>,
        staged: &mut Staged,
    ) -> Result<Vec<Appended>> {
        let originals = self.originals(events, bodies, staged)?;
        let Sorted { mut answers, new } =
            sort_new(events, bodies, originals, self.keys.as_deref())?;
        if let (Some(expected), Some((first, _))) = (expected, new.first()) {
            let key = events
                .get(*first)
                .map(|e| ids.get(e.stream_key))
                .unwrap_or_default();
            let actual = self.stream_version(key)?;
            if actual != expected {
                return Err(Error::Conflict {
                    stream: key.to_string(),
                    expected,
                    actual,
                });
            }
        }
        // Versions are decided before anything is framed, so that a failed index read leaves
        // nothing of this request in `staged`.
        let (stream_updates, versions) = self.versions(events, ids, &new)?;
        let now = self.clock.now_unix_ns().max(self.last_recorded_ns);
        let rollback = Mark {
            buf: staged.buf.len(),
            entries: staged.entries.len(),
            sparse: staged.sparse.len(),
            next_position: staged.next_position,
            prev_hash: staged.prev_hash,
        };
        let request = Request {
            events,
            bodies,
            ids,
            versions: &versions,
            now,
        };
        if let Err(e) = self.frame_new(&request, &new, &mut answers, staged) {
            unstage(staged, &mut self.recent, rollback);
            return Err(e);
        }
        answer_repeats(&new, &mut answers);
        // Every event was answered above (framed, duplicate or repeat); a request with one left
        // unanswered is refused whole, like any other failed request.
        let Some(answers) = answers.into_iter().collect::<Option<Vec<_>>>() else {
            debug_assert!(false, "an event of a request was left unanswered");
            unstage(staged, &mut self.recent, rollback);
            return Err(Error::Internal("event left unanswered".into()));
        };
        for (key, version) in stream_updates {
            // A key is copied once per stream since open.
            match self.streams.get_mut(key) {
                Some(current) => *current = version,
                None => {
                    self.streams.insert(key.to_owned(), version);
                }
            }
        }
        self.last_recorded_ns = now;
        Ok(answers)
    }

    /// Each new event's stream version, by its index in the request (0 for those not framed:
    /// duplicates and repeats; versions start at 1), and the request's last version of each
    /// stream, merged into `self.streams` only if the request succeeds.
    fn versions<'r>(
        &self,
        events: &[PreparedEvent],
        ids: &'r Strings,
        new: &[(usize, Option<usize>)],
    ) -> Result<(HashMap<&'r str, u64>, Vec<u64>)> {
        // Keyed by the request's own strings, and sized for up to 64 streams at once: a map of
        // owned keys grown from empty costs allocations and rehashing per event.
        let mut stream_updates: HashMap<&str, u64> = HashMap::with_capacity(new.len().min(64));
        let mut versions: Vec<u64> = vec![0; events.len()];
        for (i, repeat) in new {
            let Some(event) = events.get(*i).filter(|_| repeat.is_none()) else {
                continue;
            };
            let key = ids.get(event.stream_key);
            let version = match stream_updates.get_mut(key) {
                Some(version) => {
                    *version += 1;
                    *version
                }
                None => {
                    let version = self.stream_version(key)? + 1;
                    stream_updates.insert(key, version);
                    version
                }
            };
            if let Some(slot) = versions.get_mut(*i) {
                *slot = version;
            }
        }
        Ok((stream_updates, versions))
    }

    /// Frames the request's new events (those of `new` that repeat none before them) into
    /// `staged`, each link group linked as soon as it ends, and answers them in `answers`. On
    /// error the caller takes back what was staged.
    fn frame_new(
        &mut self,
        request: &Request<'_>,
        new: &[(usize, Option<usize>)],
        answers: &mut [Option<Appended>],
        staged: &mut Staged,
    ) -> Result<()> {
        let last_new = new
            .iter()
            .rev()
            .find(|(_, repeat)| repeat.is_none())
            .map(|(i, _)| *i);
        let tail_end = self.end();
        // Room for the whole request at once (at most its bodies and a header for each): a
        // buffer grown frame by frame is copied at each doubling.
        staged
            .buf
            .reserve(request.bodies.len() + new.len() * FRAME_HEADER_LEN);
        // At most every id of the request (duplicates' too): its keys and ids, and its event ids.
        let id_bytes = request.ids.len()
            + request
                .events
                .iter()
                .map(|e| e.event_id.len())
                .sum::<usize>();
        staged.entries.reserve(new.len(), id_bytes);
        // The link group being framed: where its first frame starts in `staged.buf`, and its
        // events, answered once the group is linked. The request's last framed event ends its
        // group, so no group is left open past the request.
        let mut group = Group {
            start: staged.buf.len(),
            events: Vec::new(),
        };
        for (i, repeat) in new {
            if repeat.is_some() {
                continue;
            }
            let ends = Ends {
                batch: Some(*i) == last_new,
                write_at: tail_end.end_offset,
                last_sparse: tail_end.last_sparse_offset,
            };
            let ends_group = self.frame_one(request, *i, &ends, &mut group, staged)?;
            if ends_group {
                self.link(request, &mut group, answers, staged)?;
            }
        }
        debug_assert!(
            group.events.is_empty(),
            "a request left a link group unlinked"
        );
        Ok(())
    }

    /// Frames event `i` of the request into `staged` (unlinked), with its sparse and index
    /// entries, and adds it to `group`. Returns whether it ends its link group.
    fn frame_one(
        &mut self,
        request: &Request<'_>,
        i: usize,
        ends: &Ends,
        group: &mut Group,
        staged: &mut Staged,
    ) -> Result<bool> {
        // Every event framed here was given a version (from 1).
        let version = request.versions.get(i).copied().filter(|v| *v > 0);
        let (Some(event), Some(version)) = (request.events.get(i), version) else {
            debug_assert!(false, "event {i} of a request is framed without a version");
            return Err(Error::Internal(format!(
                "event {i} of the request has no stream version"
            )));
        };
        let frame_len = FRAME_HEADER_LEN + event.body.len();
        let ends_group =
            ends.batch || (staged.buf.len() - group.start + frame_len) as u64 >= LINK_GROUP_BYTES;
        let mut flags = FrameFlags::NONE;
        if staged.buf.is_empty() {
            flags = flags.with(FrameFlags::FIRST_IN_WRITE);
        }
        if ends.batch {
            flags = flags.with(FrameFlags::END_OF_BATCH);
        }
        if ends_group {
            flags = flags.with(FrameFlags::LINK_END);
        }
        let position = staged.next_position;
        let offset = ends.write_at + staged.buf.len() as u64;
        let meta = FrameMeta {
            position,
            recorded_at_ns: request.now,
            stream_version: version,
            flags,
        };
        let body = request.bodies.get(event.body.clone()).ok_or_else(|| {
            Error::Internal(format!(
                "event {} names body bytes {:?} of {}",
                event.event_id,
                event.body,
                request.bodies.len()
            ))
        })?;
        encode_unlinked(&mut staged.buf, &meta, body)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let last_sparse = staged
            .sparse
            .last()
            .map(|e| e.offset.0)
            .or(ends.last_sparse);
        if last_sparse.is_none_or(|o| offset >= o + SPARSE_INTERVAL_BYTES) {
            staged.sparse.push(FooterEntry {
                position,
                offset: ByteOffset(offset),
            });
        }
        staged.next_position = position.next();
        if *event.event_id > *self.greatest_id {
            // Left as it is should the request fail: an upper bound stays one.
            self.greatest_id.clear();
            self.greatest_id.push_str(&event.event_id);
        }
        group.events.push((i, position, version, offset));
        let ids = request.ids;
        staged.entries.push_with_leaf(
            &IndexEntry {
                position,
                event_id: &event.event_id,
                stream_key: ids.get(event.stream_key),
                stream_version: version,
                task: event.task.map(|id| ids.get(id)),
                run: event.run.map(|id| ids.get(id)),
                location: Location::new(self.tail.id, offset),
                end_offset: offset + frame_len as u64,
            },
            event.leaf,
        );
        Ok(ends_group)
    }

    /// Links the frames of `group` (the last ones staged), remembers its events as recent and
    /// answers them, and starts the next group after it.
    fn link(
        &mut self,
        request: &Request<'_>,
        group: &mut Group,
        answers: &mut [Option<Appended>],
        staged: &mut Staged,
    ) -> Result<()> {
        let linked = staged
            .buf
            .get_mut(group.start..)
            .ok_or(journal_format::FormatError::Truncated {
                needed: group.start as u64,
                available: 0,
            })
            .and_then(|frames| link_group(frames, &staged.prev_hash));
        let link = linked.map_err(|e| {
            debug_assert!(false, "a link group framed here does not link: {e}");
            Error::Internal(format!("cannot link the frames of a commit: {e}"))
        })?;
        staged.prev_hash = link;
        for (j, position, stream_version, offset) in group.events.drain(..) {
            let committed = Committed {
                position,
                hash: link,
                stream_version,
                recorded_at_ns: request.now,
                location: Location::new(self.tail.id, offset),
            };
            if let Some(event) = request.events.get(j) {
                self.recent.push(&event.event_id, committed);
                if let Some(slot) = answers.get_mut(j) {
                    *slot = Some(committed.answer(&event.event_id, Stored::Now));
                }
            }
        }
        group.start = staged.buf.len();
        Ok(())
    }
}

/// One request being staged: its events, their bodies and ids, the stream version of each new
/// event (by its index in the request), and the recorded time its frames carry.
struct Request<'r> {
    events: &'r [PreparedEvent],
    bodies: &'r [u8],
    ids: &'r Strings,
    versions: &'r [u64],
    now: i64,
}

/// Where a frame being framed stands: whether it ends its batch, where the staged bytes will
/// be written in the tail, and the tail's last sparse entry before them.
struct Ends {
    batch: bool,
    write_at: u64,
    last_sparse: Option<u64>,
}

/// The link group being framed: where its first frame starts in the staged bytes, and its
/// events (index in the request, position, stream version, frame offset).
struct Group {
    start: usize,
    events: Vec<(usize, Position, u64, u64)>,
}

/// A request's events sorted: each one's answer so far (`Some` for a duplicate of a stored
/// event), and the new ones in order, each with the index of the earlier event of the same
/// request it repeats, if any.
struct Sorted {
    answers: Vec<Option<Appended>>,
    new: Vec<(usize, Option<usize>)>,
}

/// Sorts a request's events given the answers of those already stored (`originals`): a
/// repeated id inside the request is stored once and answered like a duplicate when its bodies
/// are the same ([`same_body`], opened with `keys` in an encrypted journal), and refused
/// ([`Error::IdReused`]) when they differ.
fn sort_new(
    events: &[PreparedEvent],
    bodies: &[u8],
    originals: Vec<Option<Appended>>,
    keys: Option<&Keys>,
) -> Result<Sorted> {
    let mut answers: Vec<Option<Appended>> = Vec::with_capacity(events.len());
    // The request's new ids, to find one repeated inside it. While they come in increasing
    // order (as UUID v7 and counters do) none can repeat an earlier one, and the map is built
    // only when one does not. Sized for the request when built: each growth of a large table
    // copies it.
    let mut within: Option<HashMap<&str, usize>> = None;
    let mut greatest: Option<&str> = None;
    let mut new: Vec<(usize, Option<usize>)> = Vec::with_capacity(events.len());
    for ((i, event), original) in events.iter().enumerate().zip(originals) {
        if let Some(mut a) = original {
            a.duplicate = true;
            answers.push(Some(a));
            continue;
        }
        answers.push(None);
        let id = &*event.event_id;
        if within.is_none() && greatest.is_none_or(|g| id > g) {
            greatest = Some(id);
            new.push((i, None));
            continue;
        }
        let within = within.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity(events.len());
            for (j, _) in &new {
                if let Some(earlier) = events.get(*j) {
                    map.insert(&*earlier.event_id, *j);
                }
            }
            map
        });
        if let Some(first) = within.get(id) {
            let body = |j: usize| events.get(j).and_then(|e| bodies.get(e.body.clone()));
            if !matches!((body(*first), body(i)), (Some(a), Some(b)) if same_body(a, b, keys)) {
                return Err(Error::IdReused {
                    event_id: id.to_string(),
                    index: i,
                    position: None,
                });
            }
            new.push((i, Some(*first)));
        } else {
            within.insert(id, i);
            new.push((i, None));
        }
    }
    Ok(Sorted { answers, new })
}

/// Answers each event that repeats an earlier one of its request as a duplicate of it.
fn answer_repeats(new: &[(usize, Option<usize>)], answers: &mut [Option<Appended>]) {
    for (i, repeat) in new {
        if let Some(first) = repeat {
            let original = answers.get(*first).cloned().flatten();
            if let (Some(slot), Some(mut a)) = (answers.get_mut(*i), original) {
                a.duplicate = true;
                *slot = Some(a);
            }
        }
    }
}
