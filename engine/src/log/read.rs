//! Reading events back: position ranges streamed in bounded memory, single events by location,
//! and the filtered reads built on the index.

use std::sync::Arc;

use journal_format::{
    ChainHash, Envelope, FrameHeader, Located, Location, Position, SegmentId, StoredEvent,
    StoredPayload, FRAME_BODY_LEN_MAX, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN,
};

use crate::error::{Error, Result};
use crate::log::map::Log;
use crate::log::scan::{FrameScanner, LinksAhead, Stop};
use crate::log::segment::Segment;

/// Whether a read checks the hash chain as well as each frame's checksums (which every read
/// checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chain {
    /// Each link group's chain link is checked before any of its events is handed out.
    Verified,
    /// Checksums only: the faster read, for a reader that trusts the chain or checks it
    /// elsewhere (`verify`).
    Unverified,
}

impl Chain {
    /// Whether the chain is checked.
    #[must_use]
    pub fn verified(self) -> bool {
        self == Chain::Verified
    }
}

/// A frame read from the log, before its body is decoded.
#[derive(Debug)]
pub(crate) struct RawFrame<'a> {
    pub segment: SegmentId,
    pub offset: u64,
    pub header: FrameHeader,
    pub body: &'a [u8],
    /// The whole frame: the header's bytes, then `body`.
    pub frame: &'a [u8],
}

fn corruption(segment: SegmentId, offset: u64, position: Position, detail: String) -> Error {
    Error::Corruption {
        segment,
        offset,
        position: Some(position),
        detail,
    }
}

/// A position in the log being read frame by frame, within one segment.
#[derive(Debug)]
pub(crate) struct Cursor {
    segment: Arc<Segment>,
    last_position: Position,
    scanner: FrameScanner,
    expected: Position,
    /// The link the last frame read stores (the segment's previous link before its first).
    prev: Option<ChainHash>,
    /// Whether the next frame continues the group of the last one read: its group was checked
    /// when it began (ahead), or began before this cursor did.
    group_open: bool,
    verify_chain: bool,
    /// Up to which position groups are checked ahead, a chunk of groups at a time on several
    /// threads.
    look_ahead: Position,
    ahead: LinksAhead,
}

impl Cursor {
    /// A cursor at `position` (which must exist). From a segment's start, every group is checked
    /// from the segment's previous link. From a frame inside the segment (its nearest sparse
    /// entry), the link before is not known: the frames up to the first that ends a group are
    /// checked only for storing one link, and every group after them fully.
    pub(crate) fn open(log: &Log, position: Position, chain: Chain) -> Result<Cursor> {
        let verify_chain = chain.verified();
        let Some(segment) = log.segment_of(position) else {
            let otherwise = Error::InvalidInput(format!("position {position} is not in the log"));
            return Err(log.missing(position, otherwise));
        };
        let (start, expected, state) = segment.seek(SEGMENT_HEADER_LEN as u64, position);
        let at_start = start == SEGMENT_HEADER_LEN as u64;
        let prev = at_start.then_some(segment.prev_hash);
        let scanner = FrameScanner::new(
            Arc::clone(&segment.file),
            segment.id,
            start,
            state.end_offset,
        );
        Ok(Cursor {
            segment,
            last_position: state.last_position,
            scanner,
            expected,
            prev,
            group_open: !at_start,
            verify_chain,
            look_ahead: state.last_position,
            ahead: LinksAhead::default(),
        })
    }

    /// Has the cursor check no groups ahead of its reads that start past position `until`
    /// ([`FrameScanner::links_ahead`]), when it verifies the chain: a reader of a few events
    /// hashes no more than their groups.
    pub(crate) fn look_ahead(mut self, until: Position) -> Cursor {
        self.look_ahead = until;
        self
    }

    /// The next frame of this segment, or `None` past the segment's last committed position.
    pub(crate) fn next_frame(&mut self) -> Result<Option<RawFrame<'_>>> {
        self.next_frame_checking(true)
    }

    /// The position of the frame [`Cursor::next_frame`] reads next.
    pub(crate) fn expected(&self) -> Position {
        self.expected
    }

    /// As [`Cursor::next_frame`]; with `check_body` false and the chain not verified, the
    /// body's checksum is not checked, for a frame the caller steps over unread. Its header is
    /// checked, and its position must still be the one expected.
    fn next_frame_checking(&mut self, check_body: bool) -> Result<Option<RawFrame<'_>>> {
        let expected = self.expected;
        if expected > self.last_position {
            return Ok(None);
        }
        let id = self.segment.id;
        let offset = self.scanner.offset();
        let check_body = check_body || self.verify_chain;
        if let (true, false, Some(prev)) = (self.verify_chain, self.group_open, self.prev) {
            self.ahead
                .refill(&mut self.scanner, prev, self.look_ahead)?;
        }
        // A frame checked ahead has its body checked there; should `held` not vouch for it
        // below, its body is checked then.
        let vouched = self.verify_chain && self.prev.is_some() && self.ahead.next_at(offset);
        let frame = match self.scanner.next_frame(check_body && !vouched)? {
            Ok(frame) => frame,
            Err(Stop::End) => {
                return Err(corruption(
                    id,
                    offset,
                    expected,
                    "segment ends before its last position".into(),
                ))
            }
            Err(Stop::Zeroed) => {
                return Err(corruption(
                    id,
                    offset,
                    expected,
                    "zeroed bytes where a frame belongs".into(),
                ))
            }
            Err(Stop::Damaged(e)) => return Err(corruption(id, offset, expected, e.to_string())),
        };
        if frame.header.meta.position != expected {
            return Err(corruption(
                id,
                frame.offset,
                expected,
                format!("frame holds position {}", frame.header.meta.position),
            ));
        }
        if let (true, Some(prev)) = (self.verify_chain, self.prev) {
            let judged = self.ahead.judge(
                frame.offset,
                expected,
                prev,
                frame.header.hash,
                self.group_open,
            );
            // A frame not found to hold ahead has its body checked here, before anything else
            // is said of it.
            if vouched && judged != Ok(true) {
                frame
                    .header
                    .check_body(frame.body)
                    .map_err(|e| corruption(id, frame.offset, expected, e.to_string()))?;
            }
            if let Err(f) = judged {
                return Err(corruption(
                    id,
                    f.offset,
                    f.position.unwrap_or(expected),
                    f.detail,
                ));
            }
        }
        self.prev = Some(frame.header.hash);
        self.group_open = !frame.header.meta.flags.is_link_end();
        self.expected = expected.next();
        Ok(Some(RawFrame {
            segment: id,
            offset: frame.offset,
            header: frame.header,
            body: frame.body,
            frame: frame.frame,
        }))
    }
}

/// Walks frames `from..=to` in position order and calls `f` with each until it returns
/// `false`, checking checksums always and chain links when `chain` says so.
pub(crate) fn for_each_frame(
    log: &Log,
    from: Position,
    to: Position,
    chain: Chain,
    f: &mut dyn FnMut(RawFrame<'_>) -> Result<bool>,
) -> Result<()> {
    for_each_selected_frame(log, from, to, chain, &mut |_| true, f)
}

/// As [`for_each_frame`], calling `f` only with the frames whose position `select` accepts.
/// Unless the chain is verified (which needs every body), the bodies of the other frames in
/// `from..=to` are stepped over without their checksums checked: nothing reads them. Their
/// headers are checked, and each must hold the position expected, so a damaged or misplaced
/// frame is still found.
pub(crate) fn for_each_selected_frame(
    log: &Log,
    from: Position,
    to: Position,
    chain: Chain,
    select: &mut dyn FnMut(Position) -> bool,
    f: &mut dyn FnMut(RawFrame<'_>) -> Result<bool>,
) -> Result<()> {
    let mut next = from.max(Position::FIRST);
    while next <= to {
        let opened_at = next;
        let mut cursor = Cursor::open(log, next, chain)?.look_ahead(to);
        loop {
            let expected = cursor.expected();
            let in_range = expected >= next;
            let wanted = in_range && select(expected);
            // Frames before `from` (from the segment's start or its nearest sparse entry) are
            // checked as they always were: reading the head at open checks the frames before it
            // that way. Only frames in range that `select` refuses are stepped over unchecked.
            let Some(raw) = cursor.next_frame_checking(wanted || !in_range)? else {
                break;
            };
            let position = raw.header.meta.position;
            if position >= next {
                if wanted && !f(raw)? {
                    return Ok(());
                }
                next = position.next();
            }
            if next > to {
                return Ok(());
            }
        }
        if next == opened_at {
            return Err(Error::InvalidInput(format!(
                "position {next} is not in the log"
            )));
        }
    }
    Ok(())
}

/// A stored event as the log holds it, before its body is decoded: the fields the journal
/// assigned (from the frame header) and the body's MessagePack bytes, checksum-checked and, when
/// the read verifies the chain, chain-checked. For readers that need only some events decoded,
/// or none (copying, hashing, counting), see [`crate::Journal::scan`].
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The global, gapless position.
    pub position: Position,
    /// The journal's clock at append, nanoseconds since the Unix epoch (UTC).
    pub recorded_at_ns: i64,
    /// The 1-based index of the event within its stream.
    pub stream_version: u64,
    /// The event's link in the hash chain.
    pub hash: ChainHash,
    /// The stored body: the envelope as MessagePack (`docs/FORMAT.md`).
    pub body: &'a [u8],
    /// The whole frame as the log holds it: its header's bytes, then `body`
    /// (`docs/FORMAT.md`). A copy of it, checked again by [`Record::from_frame`], stands for
    /// the frame, as a build's later passes read the copies its first pass made.
    pub frame: &'a [u8],
    /// The segment holding the frame.
    pub segment: SegmentId,
    /// The frame's byte offset in that segment.
    pub offset: u64,
}

impl<'a> Record<'a> {
    /// The record of `frame`, a copy of the bytes of the frame at `at` (as [`Record::frame`]
    /// gives them), which must hold the event at `position`: checked as
    /// [`FrameReader::read`] checks a frame it reads (its length, its header's and body's
    /// checksums and its position), not its chain link. The bytes are the caller's, not the
    /// log's: any failure is the copy's, and the log is not said to be corrupt.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `position` and `at` and what does not match.
    pub fn from_frame(frame: &'a [u8], at: FrameAt, position: Position) -> Result<Record<'a>> {
        check_frame(frame, at, position)
            .map(|raw| raw.record())
            .map_err(|mismatch| {
                Error::InvalidInput(format!(
                    "the copy of the frame of position {position} (segment {} at {}) {}",
                    at.location.segment,
                    at.location.offset,
                    mismatch.what(frame.len(), at, position)
                ))
            })
    }

    /// Decodes the body into a stored event.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming the segment, offset and position when the body, whose
    /// checksum matched, is not a valid envelope.
    pub fn decode(&self) -> Result<StoredEvent> {
        let envelope = Envelope::from_msgpack(self.body).map_err(|e| self.corruption(&e))?;
        Ok(StoredEvent {
            position: self.position,
            recorded_at_ns: self.recorded_at_ns,
            stream_version: self.stream_version,
            hash: self.hash,
            envelope,
        })
    }

    /// [`Record::decode`] into `event`, which it replaces entirely, reusing the buffers of its
    /// envelope's strings ([`Envelope::decode_msgpack`]): for a caller that handles one event at
    /// a time. On an error, `event` holds no meaningful event.
    ///
    /// # Errors
    /// As [`Record::decode`].
    pub fn decode_into(&self, event: &mut StoredEvent) -> Result<()> {
        self.header_into(event);
        event
            .envelope
            .decode_msgpack(self.body)
            .map_err(|e| self.corruption(&e))
    }

    /// [`Record::decode_into`], leaving the payload in its stored form, checked
    /// ([`Envelope::decode_msgpack_deferring_payload`](journal_format::Envelope::decode_msgpack_deferring_payload)):
    /// `event.envelope.payload` is `None`, and the payload is returned, borrowing the record's
    /// body.
    ///
    /// # Errors
    /// As [`Record::decode`].
    pub fn decode_into_deferring_payload(
        &self,
        event: &mut StoredEvent,
    ) -> Result<Option<StoredPayload<'a>>> {
        self.header_into(event);
        event
            .envelope
            .decode_msgpack_deferring_payload(self.body)
            .map_err(|e| self.corruption(&e))
    }

    /// Where the record's frame sits, to read it back alone later ([`FrameReader`]).
    #[must_use]
    pub fn location(&self) -> FrameAt {
        // A body is at most `FRAME_BODY_LEN_MAX` (16 MiB), so the frame's length fits.
        let len = FRAME_HEADER_LEN + self.body.len();
        FrameAt {
            location: Location::new(self.segment, self.offset),
            len: u32::try_from(len).unwrap_or(u32::MAX),
        }
    }

    /// Sets `event`'s journal-assigned fields to the record's.
    fn header_into(&self, event: &mut StoredEvent) {
        event.position = self.position;
        event.recorded_at_ns = self.recorded_at_ns;
        event.stream_version = self.stream_version;
        event.hash = self.hash;
    }

    fn corruption(&self, error: &journal_format::EnvelopeError) -> Error {
        Error::Corruption {
            segment: self.segment,
            offset: self.offset,
            position: Some(self.position),
            detail: error.to_string(),
        }
    }
}

/// Where a frame sits in the log: its segment, its byte offset there and its length (header
/// and body), as [`Record::location`] gives it. A reader that noted the frames it will want
/// reads each back alone, through [`FrameReader`], instead of stepping through the frames
/// between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameAt {
    /// Where the frame lies.
    pub location: Location,
    /// The frame's length: [`FRAME_HEADER_LEN`] plus its body's.
    pub len: u32,
}

/// Reads frames back one at a time from locations noted earlier ([`FrameAt`]), into a buffer
/// it reuses; made by [`crate::Journal::frame_reader`].
///
/// By default each frame costs one positioned read of its own bytes. With a read-ahead
/// ([`FrameReader::with_read_ahead`]), a read that misses fetches the frame and the bytes after
/// it up to the read-ahead's length (the frame alone when it is longer; never past the
/// segment's committed frames), and the frames that follow within them are served from the
/// buffer: for a reader going forward through locations close together, as a build's pass
/// over one partition's frames is, a system call per many frames instead of one per frame.
///
/// Each frame is checked as a scan checks it (its header's and body's checksums; not its chain
/// link, which needs the frame before it), and must hold the position the caller expects there.
pub struct FrameReader {
    log: Arc<Log>,
    /// The segment of the last frame read: locations noted in log order mostly share it.
    segment: Option<Arc<Segment>>,
    /// **Invariant:** the bytes of `segment` from `buf_offset` on, as committed when they were
    /// read (emptied when `segment` changes or a read fails). Committed frames never change,
    /// so a frame inside them is the frame on disk.
    buf: Vec<u8>,
    /// Where `buf`'s bytes start in `segment`.
    buf_offset: u64,
    /// The fewest bytes a read that misses fetches (0: the frame alone).
    read_ahead: usize,
}

impl std::fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the buffer's bytes: up to the read-ahead's worth of them.
        f.debug_struct("FrameReader")
            .field("segment", &self.segment.as_ref().map(|s| s.id))
            .field("buf_offset", &self.buf_offset)
            .field("buf_len", &self.buf.len())
            .field("read_ahead", &self.read_ahead)
            .finish_non_exhaustive()
    }
}

impl FrameReader {
    pub(crate) fn new(log: Arc<Log>) -> FrameReader {
        FrameReader {
            log,
            segment: None,
            buf: Vec::new(),
            buf_offset: 0,
            read_ahead: 0,
        }
    }

    /// This reader, fetching at least `bytes` with each read that misses its buffer (capped at
    /// [`FrameReader::READ_AHEAD_MAX`]), for a caller that reads forward through frames close
    /// together. A caller reading frames far apart should keep the default (none): each miss
    /// would copy `bytes` for one frame.
    #[must_use]
    pub fn with_read_ahead(mut self, bytes: usize) -> FrameReader {
        self.read_ahead = bytes.min(Self::READ_AHEAD_MAX);
        self
    }

    /// The largest read-ahead a reader takes.
    pub const READ_AHEAD_MAX: usize = 16 * 1024 * 1024;

    /// The frame at `at`, which must hold the event at `position`, checked.
    ///
    /// # Errors
    /// - [`Error::InvalidInput`] when `position` is past the head, `at` names a segment the log
    ///   lacks or a span that cannot be a committed frame of it, or the frame there holds
    ///   another position or has another length;
    /// - [`Error::Corruption`] naming the segment, offset and position when the frame's header
    ///   or body does not match its checksum (for a location taken from
    ///   [`Record::location`]; an offset that is not a frame's start also fails the header's
    ///   checksum);
    /// - [`Error::Io`] when the read fails.
    pub fn read(&mut self, at: FrameAt, position: Position) -> Result<Record<'_>> {
        if position == Position::ZERO || position > self.log.head().position {
            return Err(Error::InvalidInput(format!(
                "position {position} is not in the log"
            )));
        }
        let segment = match &self.segment {
            Some(segment) if segment.id == at.location.segment => Arc::clone(segment),
            _ => {
                let segment = self.log.segment(at.location.segment).ok_or_else(|| {
                    self.log.missing(
                        position,
                        Error::InvalidInput(format!(
                            "segment {} is not in the log (looking for position {position})",
                            at.location.segment
                        )),
                    )
                })?;
                self.segment = Some(Arc::clone(&segment));
                // The buffer held another segment's bytes.
                self.buf.clear();
                segment
            }
        };
        let len = at.len as usize;
        let end = at.location.offset.saturating_add(u64::from(at.len));
        let committed_end = segment.end().end_offset;
        // A location the log does not hold is refused before anything is read or allocated
        // for it: no frame is shorter than its header or longer than the largest body allows,
        // and none ends past the segment's committed frames.
        if len < FRAME_HEADER_LEN
            || at.len > FRAME_HEADER_LEN as u32 + FRAME_BODY_LEN_MAX
            || end > committed_end
        {
            return Err(Error::InvalidInput(format!(
                "segment {} holds no frame of {len} bytes at {} (looking for position {position})",
                at.location.segment, at.location.offset
            )));
        }
        // Without a read-ahead, every read goes to the file, as the default promises.
        let buffered_end = self.buf_offset + self.buf.len() as u64;
        if self.read_ahead == 0 || at.location.offset < self.buf_offset || end > buffered_end {
            // A miss: fetch the frame, and the read-ahead's worth of committed bytes after it.
            let fetch = u64::try_from(len.max(self.read_ahead))
                .unwrap_or(u64::MAX)
                .min(committed_end - at.location.offset);
            let fetch = usize::try_from(fetch).unwrap_or(len);
            let mut fetched = self.fetch(&segment, at.location.offset, fetch);
            if fetched.is_err() && fetch > len {
                // A failure past the frame (a bad block further on) must not fail the frame:
                // read it alone, and report that read's error if it fails too.
                fetched = self.fetch(&segment, at.location.offset, len);
            }
            fetched.map_err(Error::io_with(|| {
                format!(
                    "reading {len} bytes of segment {} at {} (looking for position {position})",
                    at.location.segment, at.location.offset
                )
            }))?;
        }
        debug_assert!(
            at.location.offset >= self.buf_offset && end <= self.buf_offset + self.buf.len() as u64
        );
        let start = usize::try_from(at.location.offset - self.buf_offset).unwrap_or(usize::MAX);
        let frame = self
            .buf
            .get(start..start.saturating_add(len))
            .ok_or_else(|| {
                // Unreachable (asserted above): a miss fetched the frame, a hit found it inside.
                Error::Internal(format!(
                "the frame reader's buffer (segment {} from {}, {} bytes) lacks the frame at {} \
                 (looking for position {position})",
                at.location.segment,
                self.buf_offset,
                self.buf.len(),
                at.location.offset
            ))
            })?;
        match check_frame(frame, at, position) {
            Ok(raw) => Ok(raw.record()),
            // The bytes are the log's: a checksum that fails is the log's corruption.
            Err(Mismatch::Header(e) | Mismatch::Body(e)) => Err(corruption(
                at.location.segment,
                at.location.offset,
                position,
                e.to_string(),
            )),
            Err(mismatch) => Err(Error::InvalidInput(format!(
                "segment {} at {} {}",
                at.location.segment,
                at.location.offset,
                mismatch.what(frame.len(), at, position)
            ))),
        }
    }

    /// Fills the buffer with `len` bytes of `segment` from `offset`; on an error the buffer is
    /// left empty, so that nothing stale is served.
    fn fetch(&mut self, segment: &Segment, offset: u64, len: usize) -> std::io::Result<()> {
        self.buf.resize(len, 0);
        self.buf_offset = offset;
        let read = segment.file.read_exact_at(&mut self.buf, offset);
        if read.is_err() {
            self.buf.clear();
        }
        read
    }
}

/// How a frame's bytes fail [`check_frame`].
enum Mismatch {
    /// Shorter than a header, or not the length the location gives.
    Length,
    /// The header does not decode (its checksum, first).
    Header(journal_format::FormatError),
    /// The frame holds another position, or says it has another length.
    Holds { position: Position, len: u64 },
    /// The body does not match its checksum.
    Body(journal_format::FormatError),
}

impl Mismatch {
    /// What failed, for a frame of `len` bytes expected at `at`, holding `expected`.
    fn what(&self, len: usize, at: FrameAt, expected: Position) -> String {
        match self {
            Mismatch::Length if len < FRAME_HEADER_LEN => {
                format!("is {len} bytes, shorter than a frame's header ({FRAME_HEADER_LEN} bytes)")
            }
            Mismatch::Length => format!("is {len} bytes, not the frame's {} bytes", at.len),
            Mismatch::Header(e) | Mismatch::Body(e) => format!("fails its check: {e}"),
            Mismatch::Holds { position, len } => format!(
                "holds position {position} in {len} bytes, not position {expected} in {}",
                at.len
            ),
        }
    }
}

/// Checks that `frame` is the whole frame at `at` and holds the event at `position`: its
/// length, its header's checksum, its position and length, its body's checksum.
fn check_frame(
    frame: &[u8],
    at: FrameAt,
    position: Position,
) -> std::result::Result<RawFrame<'_>, Mismatch> {
    let (header_bytes, body) = match frame.split_at_checked(FRAME_HEADER_LEN) {
        Some(parts) if u64::try_from(frame.len()).ok() == Some(u64::from(at.len)) => parts,
        _ => return Err(Mismatch::Length),
    };
    let header = FrameHeader::decode(header_bytes).map_err(Mismatch::Header)?;
    if header.meta.position != position || header.frame_len() != u64::from(at.len) {
        return Err(Mismatch::Holds {
            position: header.meta.position,
            len: header.frame_len(),
        });
    }
    header.check_body(body).map_err(Mismatch::Body)?;
    Ok(RawFrame {
        segment: at.location.segment,
        offset: at.location.offset,
        header,
        body,
        frame,
    })
}

impl<'a> RawFrame<'a> {
    /// The frame as a public [`Record`].
    pub(crate) fn record(&self) -> Record<'a> {
        Record {
            position: self.header.meta.position,
            recorded_at_ns: self.header.meta.recorded_at_ns,
            stream_version: self.header.meta.stream_version,
            hash: self.header.hash,
            body: self.body,
            frame: self.frame,
            segment: self.segment,
            offset: self.offset,
        }
    }
}

/// Decodes a raw frame into a stored event.
pub(crate) fn decode(raw: &RawFrame<'_>) -> Result<StoredEvent> {
    raw.record().decode()
}

/// Reads the frame at a known location and checks that it holds the position noted with it.
pub(crate) fn read_at(log: &Log, at: Located) -> Result<StoredEvent> {
    let (header, frame) = read_frame_at(log, at)?;
    let Location { segment, offset } = at.location;
    let body = frame.get(FRAME_HEADER_LEN..).unwrap_or_default();
    decode(&RawFrame {
        segment,
        offset,
        header,
        body,
        frame: &frame,
    })
}

/// Reads the whole frame (header, then body) at a known location, checks both checksums and
/// that it holds the position noted with it, and returns it undecoded with its header.
pub(crate) fn read_frame_at(log: &Log, at: Located) -> Result<(FrameHeader, Vec<u8>)> {
    let Located {
        position,
        location: Location { segment, offset },
    } = at;
    let seg = log.segment(segment).ok_or_else(|| {
        log.missing(
            position,
            Error::Index(format!(
                "index points at segment {segment}, which the log lacks"
            )),
        )
    })?;
    let mut header_bytes = [0u8; FRAME_HEADER_LEN];
    seg.file
        .read_exact_at(&mut header_bytes, offset)
        .map_err(Error::io_with(|| {
            format!("reading segment {segment} at {offset}")
        }))?;
    let header = FrameHeader::decode(&header_bytes)
        .map_err(|e| corruption(segment, offset, position, e.to_string()))?;
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + header.body_len() as usize);
    frame.extend_from_slice(&header_bytes);
    frame.resize(FRAME_HEADER_LEN + header.body_len() as usize, 0);
    let (_, body) = frame.split_at_mut(FRAME_HEADER_LEN);
    seg.file
        .read_exact_at(body, offset + FRAME_HEADER_LEN as u64)
        .map_err(Error::io_with(|| {
            format!("reading segment {segment} at {offset}")
        }))?;
    let (_, body) = frame.split_at(FRAME_HEADER_LEN);
    header
        .check_body(body)
        .map_err(|e| corruption(segment, offset, position, e.to_string()))?;
    if header.meta.position != position {
        return Err(Error::Index(format!(
            "index says position {position} is at segment {segment} offset {offset}, which holds {}",
            header.meta.position
        )));
    }
    Ok((header, frame))
}

/// Reads one event by position, through the segments' sparse indexes.
pub(crate) fn read_position(log: &Log, position: Position) -> Result<StoredEvent> {
    let mut found = None;
    for_each_frame(log, position, position, Chain::Unverified, &mut |raw| {
        found = Some(decode(&raw)?);
        Ok(false)
    })?;
    found.ok_or_else(|| Error::InvalidInput(format!("position {position} is not in the log")))
}

/// An iterator over stored events `from..=to`, streamed frame by frame in bounded memory.
#[derive(Debug)]
pub struct EventIter {
    log: Arc<Log>,
    next: Position,
    to: Position,
    chain: Chain,
    cursor: Option<Cursor>,
    opened_at: Position,
    failed: bool,
    /// Opens each event's sealed content, in an encrypted journal.
    keys: Option<Arc<crate::keys::Keys>>,
}

impl EventIter {
    /// The iterator opening each event's sealed content with `keys`.
    pub(crate) fn with_keys(mut self, keys: Option<Arc<crate::keys::Keys>>) -> EventIter {
        self.keys = keys;
        self
    }

    pub(crate) fn new(log: Arc<Log>, from: Position, to: Position, chain: Chain) -> EventIter {
        EventIter {
            log,
            next: from.max(Position::FIRST),
            to,
            chain,
            cursor: None,
            opened_at: Position::ZERO,
            failed: false,
            keys: None,
        }
    }

    fn advance(&mut self) -> Result<Option<StoredEvent>> {
        loop {
            if self.next > self.to {
                return Ok(None);
            }
            if self.cursor.is_none() {
                self.cursor =
                    Some(Cursor::open(&self.log, self.next, self.chain)?.look_ahead(self.to));
                self.opened_at = self.next;
            }
            let Some(cursor) = self.cursor.as_mut() else {
                return Ok(None);
            };
            match cursor.next_frame()? {
                Some(raw) if raw.header.meta.position < self.next => {}
                Some(raw) => {
                    let mut event = decode(&raw)?;
                    if let Some(keys) = &self.keys {
                        keys.open(&mut event)?;
                    }
                    self.next = event.position.next();
                    return Ok(Some(event));
                }
                None => {
                    self.cursor = None;
                    if self.next == self.opened_at {
                        // The segment holding `next` has nothing at or after it: the log ends.
                        return Ok(None);
                    }
                }
            }
        }
    }
}

impl Iterator for EventIter {
    type Item = Result<StoredEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.advance() {
            Ok(event) => event.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
