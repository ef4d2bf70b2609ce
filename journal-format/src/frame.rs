//! Frames: one envelope's bytes on disk, with a header holding its length, checksums, the
//! journal-assigned fields and its link in the hash chain. Layout: `docs/FORMAT.md`, "Frame".
//!
//! Two CRC-32 checksums protect a frame: the header checksum covers every other header byte
//! (so a damaged length is caught before it is trusted), the body checksum covers the body.
//!
//! The hash chain links groups of frames, not single frames: a group is a few consecutive frames
//! of one batch (at most about [`LINK_GROUP_BYTES`]), the last flagged [`FrameFlags::LINK_END`]. Its
//! link is BLAKE3, keyed with the previous group's link, of the group's bytes with each header's
//! checksum and link read as zero; every frame of the group stores it. Editing, deleting or
//! reordering any frame changes its group's link and every later one. A group is hashed as one
//! input, which BLAKE3 spreads over SIMD lanes: a link per frame cost about ten times as much
//! (`docs/PERFORMANCE.md`).

use crate::error::FormatError;
use crate::types::{ChainHash, Position};

/// Offset of the header checksum: CRC-32 of header bytes `BODY_LEN_OFFSET..FRAME_HEADER_LEN`.
pub const HEADER_CRC_OFFSET: usize = 0;
/// Offset of the body length (u32).
pub const BODY_LEN_OFFSET: usize = HEADER_CRC_OFFSET + 4;
/// Offset of the body checksum: CRC-32 of the body.
pub const BODY_CRC_OFFSET: usize = BODY_LEN_OFFSET + 4;
/// Offset of the flags (u16).
pub const FLAGS_OFFSET: usize = BODY_CRC_OFFSET + 4;
/// Offset of two reserved bytes, always zero.
pub const RESERVED_OFFSET: usize = FLAGS_OFFSET + 2;
/// Offset of the position (u64).
pub const POSITION_OFFSET: usize = RESERVED_OFFSET + 2;
/// Offset of `recordedAt`, nanoseconds since the Unix epoch (i64).
pub const RECORDED_AT_OFFSET: usize = POSITION_OFFSET + 8;
/// Offset of the stream version (u64).
pub const STREAM_VERSION_OFFSET: usize = RECORDED_AT_OFFSET + 8;
/// Offset of the chain link (32 bytes).
pub const HASH_OFFSET: usize = STREAM_VERSION_OFFSET + 8;
/// The length of a frame header; the body follows it.
pub const FRAME_HEADER_LEN: usize = HASH_OFFSET + 32;

const _: () = assert!(FRAME_HEADER_LEN == 72);
const _: () = assert!(POSITION_OFFSET.is_multiple_of(8) && HASH_OFFSET.is_multiple_of(8));

/// The largest body the format can hold (16 MiB). The engine's configurable event size limit
/// (default 1 MiB) must not exceed it.
pub const FRAME_BODY_LEN_MAX: u32 = 16 * 1024 * 1024;

/// How long a link group grows: the writer ends a group at the first frame that brings
/// it to this many bytes or more (and at the end of every batch), so the frames of a group before
/// its last always hold fewer. A reader refuses a group that breaks this: it bounds what a
/// verifying reader holds before it can check a group.
pub const LINK_GROUP_BYTES: u64 = 64 * 1024;

/// Flag bits of a frame.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameFlags(u16);

impl FrameFlags {
    /// No flags: the frame is followed by more frames of the same batch.
    pub const NONE: FrameFlags = FrameFlags(0);
    /// The frame is the last of an atomic batch. A batch is durable only with this frame.
    pub const END_OF_BATCH: FrameFlags = FrameFlags(1);
    /// The frame is the first of one write (one group commit). Recovery uses it to tell a
    /// torn final write (damage with no later write after it) from damage to synced data.
    pub const FIRST_IN_WRITE: FrameFlags = FrameFlags(2);
    /// The frame is the last of its group: the frames its chain link covers. A frame that ends
    /// its batch always ends its group.
    pub const LINK_END: FrameFlags = FrameFlags(4);
    const KNOWN: u16 = 7;

    /// Both sets of bits.
    #[must_use]
    pub fn with(self, other: FrameFlags) -> FrameFlags {
        FrameFlags(self.0 | other.0)
    }

    /// Whether this frame starts a write.
    #[must_use]
    pub fn is_first_in_write(self) -> bool {
        self.0 & Self::FIRST_IN_WRITE.0 != 0
    }

    /// Whether this frame closes its batch.
    #[must_use]
    pub fn is_end_of_batch(self) -> bool {
        self.0 & Self::END_OF_BATCH.0 != 0
    }

    /// Whether this frame closes its group of linked frames.
    #[must_use]
    pub fn is_link_end(self) -> bool {
        self.0 & Self::LINK_END.0 != 0
    }

    /// The raw bits.
    #[must_use]
    pub fn bits(self) -> u16 {
        self.0
    }
}

/// The journal-assigned fields of a frame, as the writer supplies them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameMeta {
    /// The frame's position.
    pub position: Position,
    /// The journal's clock at append.
    pub recorded_at_ns: i64,
    /// The event's index within its stream, from 1.
    pub stream_version: u64,
    /// Whether the frame closes its batch.
    pub flags: FrameFlags,
}

/// A decoded frame header.
///
/// # Invariants
/// Decoded headers passed their header checksum, have zero reserved bytes, known flags, and
/// `body_len <= FRAME_BODY_LEN_MAX`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    body_len: u32,
    body_crc: u32,
    /// The journal-assigned fields.
    pub meta: FrameMeta,
    /// The frame's link in the hash chain: its group's link, which every frame of the group stores.
    pub hash: ChainHash,
}

#[allow(clippy::indexing_slicing)] // Callers pass a whole header; see `FrameHeader::decode`.
pub(crate) fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&bytes[offset..offset + 2]);
    u16::from_le_bytes(b)
}

#[allow(clippy::indexing_slicing)] // Callers pass a whole header; see `FrameHeader::decode`.
pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}

#[allow(clippy::indexing_slicing)] // Callers pass a whole header; see `FrameHeader::decode`.
pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(b)
}

impl FrameHeader {
    /// The length of the body that follows the header.
    #[must_use]
    pub fn body_len(&self) -> u32 {
        self.body_len
    }

    /// The length of the whole frame, header and body.
    #[must_use]
    pub fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.body_len)
    }

    /// Decodes and checks a header from the first [`FRAME_HEADER_LEN`] bytes of `bytes`.
    ///
    /// # Errors
    /// `Truncated` when fewer bytes are given; `HeaderChecksumMismatch`, `ReservedNotZero`,
    /// `UnknownFlags` or `LengthTooLarge` when the header is damaged.
    #[allow(clippy::indexing_slicing)] // Bounds checked once, at the top.
    pub fn decode(bytes: &[u8]) -> Result<FrameHeader, FormatError> {
        let Some(h) = bytes.get(..FRAME_HEADER_LEN) else {
            return Err(FormatError::Truncated {
                needed: FRAME_HEADER_LEN as u64,
                available: bytes.len() as u64,
            });
        };
        let stored = read_u32(h, HEADER_CRC_OFFSET);
        let computed = crc32fast::hash(&h[BODY_LEN_OFFSET..]);
        if stored != computed {
            return Err(FormatError::HeaderChecksumMismatch { stored, computed });
        }
        if read_u16(h, RESERVED_OFFSET) != 0 {
            return Err(FormatError::ReservedNotZero);
        }
        let flags = read_u16(h, FLAGS_OFFSET);
        if flags & !FrameFlags::KNOWN != 0 {
            return Err(FormatError::UnknownFlags(flags));
        }
        let flags = FrameFlags(flags);
        if flags.is_end_of_batch() && !flags.is_link_end() {
            return Err(FormatError::BatchEndsInsideGroup(flags.0));
        }
        let body_len = read_u32(h, BODY_LEN_OFFSET);
        if body_len > FRAME_BODY_LEN_MAX {
            return Err(FormatError::LengthTooLarge {
                len: u64::from(body_len),
                max: u64::from(FRAME_BODY_LEN_MAX),
            });
        }
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&h[HASH_OFFSET..FRAME_HEADER_LEN]);
        Ok(FrameHeader {
            body_len,
            body_crc: read_u32(h, BODY_CRC_OFFSET),
            meta: FrameMeta {
                position: Position(read_u64(h, POSITION_OFFSET)),
                recorded_at_ns: i64::from_le_bytes(read_u64(h, RECORDED_AT_OFFSET).to_le_bytes()),
                stream_version: read_u64(h, STREAM_VERSION_OFFSET),
                flags,
            },
            hash: ChainHash(hash),
        })
    }

    /// Checks the body against the header's body checksum.
    ///
    /// # Errors
    /// `Truncated` when `body` is shorter than the header says, `BodyChecksumMismatch` when the
    /// checksum differs.
    pub fn check_body(&self, body: &[u8]) -> Result<(), FormatError> {
        if body.len() as u64 != u64::from(self.body_len) {
            return Err(FormatError::Truncated {
                needed: u64::from(self.body_len),
                available: body.len() as u64,
            });
        }
        let computed = crc32fast::hash(body);
        if computed != self.body_crc {
            return Err(FormatError::BodyChecksumMismatch {
                stored: self.body_crc,
                computed,
            });
        }
        Ok(())
    }
}

/// Writes header bytes `BODY_LEN_OFFSET..HASH_OFFSET` into `out` (which starts at offset 4).
fn write_linked_fields(out: &mut [u8], body_len: u32, body_crc: u32, meta: &FrameMeta) {
    let base = BODY_LEN_OFFSET;
    let mut put = |offset: usize, bytes: &[u8]| {
        if let Some(slot) = out.get_mut(offset - base..offset - base + bytes.len()) {
            slot.copy_from_slice(bytes);
        }
    };
    put(BODY_LEN_OFFSET, &body_len.to_le_bytes());
    put(BODY_CRC_OFFSET, &body_crc.to_le_bytes());
    put(FLAGS_OFFSET, &meta.flags.0.to_le_bytes());
    put(RESERVED_OFFSET, &0u16.to_le_bytes());
    put(POSITION_OFFSET, &meta.position.0.to_le_bytes());
    put(RECORDED_AT_OFFSET, &meta.recorded_at_ns.to_le_bytes());
    put(STREAM_VERSION_OFFSET, &meta.stream_version.to_le_bytes());
}

/// The link of a group whose bytes (`zeroed`) hold zeros in place of each header's checksum and
/// link: BLAKE3 keyed with the previous group's link.
fn group_link(prev: &ChainHash, zeroed: &[u8]) -> ChainHash {
    ChainHash(*blake3::keyed_hash(&prev.0, zeroed).as_bytes())
}

/// Zeroes the header checksum and the link of the frame header at the start of `header`: the
/// bytes a group's link covers hold zeros there.
fn zero_unlinked_fields(header: &mut [u8]) {
    for range in [
        HEADER_CRC_OFFSET..BODY_LEN_OFFSET,
        HASH_OFFSET..FRAME_HEADER_LEN,
    ] {
        if let Some(field) = header.get_mut(range) {
            field.fill(0);
        }
    }
}

/// Appends one frame holding `body` to `out`, with its header checksum and chain link zero:
/// [`link_group`] fills both once the frame's group is complete.
///
/// # Errors
/// `LengthTooLarge` when the body is longer than [`FRAME_BODY_LEN_MAX`]; nothing is appended.
pub fn encode_unlinked(
    out: &mut Vec<u8>,
    meta: &FrameMeta,
    body: &[u8],
) -> Result<(), FormatError> {
    let body_len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= FRAME_BODY_LEN_MAX)
        .ok_or(FormatError::LengthTooLarge {
            len: body.len() as u64,
            max: u64::from(FRAME_BODY_LEN_MAX),
        })?;
    let mut header = [0u8; FRAME_HEADER_LEN];
    if let Some(linked) = header.get_mut(BODY_LEN_OFFSET..HASH_OFFSET) {
        write_linked_fields(linked, body_len, crc32fast::hash(body), meta);
    }
    out.reserve(FRAME_HEADER_LEN + body.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
    Ok(())
}

/// Links a group: `group` holds the whole frames of one group as [`encode_unlinked`] wrote them (the
/// last flagged [`FrameFlags::LINK_END`], no other). Computes the group's link from `prev`, the
/// link of the group before, and writes it and the header checksum into every frame. Returns the
/// link.
///
/// # Errors
/// `Truncated` when `group` does not end at the end of a frame; its frames are then left as they
/// were.
pub fn link_group(group: &mut [u8], prev: &ChainHash) -> Result<ChainHash, FormatError> {
    // The frames' starts, checked to tile `group` before anything is written.
    let mut starts = Vec::new();
    let mut at = 0usize;
    while at < group.len() {
        let Some(header) = group.get(at..at.saturating_add(FRAME_HEADER_LEN)) else {
            return Err(FormatError::Truncated {
                needed: (at + FRAME_HEADER_LEN) as u64,
                available: group.len() as u64,
            });
        };
        debug_assert!(
            header.get(..BODY_LEN_OFFSET).is_some_and(is_zeroed)
                && header.get(HASH_OFFSET..).is_some_and(is_zeroed),
            "a frame to link must hold zeros in place of its checksum and link"
        );
        starts.push(at);
        at = at
            .saturating_add(FRAME_HEADER_LEN)
            .saturating_add(read_u32(header, BODY_LEN_OFFSET) as usize);
    }
    if at != group.len() {
        return Err(FormatError::Truncated {
            needed: at as u64,
            available: group.len() as u64,
        });
    }
    let link = group_link(prev, group);
    for start in starts {
        if let Some(header) = group.get_mut(start..start + FRAME_HEADER_LEN) {
            let (crc_slot, rest) = header.split_at_mut(BODY_LEN_OFFSET);
            if let Some(hash_slot) = rest.get_mut(HASH_OFFSET - BODY_LEN_OFFSET..) {
                hash_slot.copy_from_slice(&link.0);
            }
            crc_slot.copy_from_slice(&crc32fast::hash(rest).to_le_bytes());
        }
    }
    Ok(link)
}

/// Appends one frame holding `body` to `out` as a group of its own (flagged
/// [`FrameFlags::LINK_END`] whatever `meta` says) following `prev`, and returns its link.
///
/// # Errors
/// `LengthTooLarge` when the body is longer than [`FRAME_BODY_LEN_MAX`]; nothing is appended.
pub fn encode_frame(
    out: &mut Vec<u8>,
    prev: &ChainHash,
    meta: &FrameMeta,
    body: &[u8],
) -> Result<ChainHash, FormatError> {
    let start = out.len();
    let meta = FrameMeta {
        flags: meta.flags.with(FrameFlags::LINK_END),
        ..*meta
    };
    encode_unlinked(out, &meta, body)?;
    let linked = out.get_mut(start..).map(|group| link_group(group, prev));
    match linked {
        Some(Ok(link)) => Ok(link),
        Some(Err(e)) => {
            out.truncate(start);
            Err(e)
        }
        None => Err(FormatError::Truncated {
            needed: start as u64,
            available: out.len() as u64,
        }),
    }
}

/// Decodes a whole frame at the start of `bytes` and checks both checksums. Returns the header
/// and the body. The chain link is checked over the frame's whole group ([`GroupCheck`]).
///
/// # Errors
/// As [`FrameHeader::decode`] and [`FrameHeader::check_body`].
pub fn decode_frame(bytes: &[u8]) -> Result<(FrameHeader, &[u8]), FormatError> {
    let header = FrameHeader::decode(bytes)?;
    let end = FRAME_HEADER_LEN + header.body_len as usize;
    let body = bytes
        .get(FRAME_HEADER_LEN..end)
        .ok_or(FormatError::Truncated {
            needed: end as u64,
            available: bytes.len() as u64,
        })?;
    header.check_body(body)?;
    Ok((header, body))
}

/// Checks the chain link over frames read in order, a group at a time: each frame is added as it
/// is read ([`GroupCheck::push`]), and the group is hashed when its last frame comes. Holds the
/// group's bytes so far (with each header's checksum and link zeroed), at most [`LINK_GROUP_BYTES`] and
/// one frame. Body checksums are the caller's to check.
#[derive(Debug, Default)]
pub struct GroupCheck {
    /// The group's frames so far, as the link covers them.
    bytes: Vec<u8>,
    /// The link the group's first frame stores; every frame of the group must store the same.
    link: Option<ChainHash>,
    /// How many frames the group holds so far.
    frames: u64,
}

impl GroupCheck {
    /// Adds `frame` (its whole bytes, `header` decoded from them) to the group, which continues
    /// `prev`. Returns the group's link once `frame` ends the group and the link holds; `None`
    /// while the group goes on. After an error, or a group's end, the next frame starts a new group.
    ///
    /// # Errors
    /// `Truncated` when `frame` is not `header`'s whole frame; `GroupLinksDiffer` when the frame
    /// stores another link than the group's first; `GroupTooLong` when the group already holds
    /// [`LINK_GROUP_BYTES`] or more before this frame; `ChainMismatch` when the group's link is not the
    /// one its frames store.
    pub fn push(
        &mut self,
        prev: &ChainHash,
        header: &FrameHeader,
        frame: &[u8],
    ) -> Result<Option<ChainHash>, FormatError> {
        let result = self.add(prev, header, frame);
        if !matches!(result, Ok(None)) {
            self.clear();
        }
        result
    }

    fn add(
        &mut self,
        prev: &ChainHash,
        header: &FrameHeader,
        frame: &[u8],
    ) -> Result<Option<ChainHash>, FormatError> {
        if frame.len() as u64 != header.frame_len() {
            return Err(FormatError::Truncated {
                needed: header.frame_len(),
                available: frame.len() as u64,
            });
        }
        let link = *self.link.get_or_insert(header.hash);
        if link != header.hash {
            return Err(FormatError::GroupLinksDiffer {
                group: link.to_hex(),
                frame: header.hash.to_hex(),
                frames_before: self.frames,
            });
        }
        if self.bytes.len() as u64 >= LINK_GROUP_BYTES {
            return Err(FormatError::GroupTooLong {
                bytes: self.bytes.len() as u64,
                frames: self.frames,
                max: LINK_GROUP_BYTES,
            });
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(frame);
        if let Some(added) = self.bytes.get_mut(start..) {
            zero_unlinked_fields(added);
        }
        self.frames += 1;
        if !header.meta.flags.is_link_end() {
            return Ok(None);
        }
        let computed = group_link(prev, &self.bytes);
        if computed != link {
            return Err(FormatError::ChainMismatch {
                stored: link.to_hex(),
                computed: computed.to_hex(),
            });
        }
        Ok(Some(link))
    }

    /// Forgets the group so far: the next frame pushed starts a group.
    pub fn clear(&mut self) {
        self.bytes.clear();
        if self.bytes.capacity() > 4 * LINK_GROUP_BYTES as usize {
            // A group with a large frame: do not keep its memory for the groups after it.
            self.bytes.shrink_to(2 * LINK_GROUP_BYTES as usize);
        }
        self.link = None;
        self.frames = 0;
    }

    /// Whether no frame of a group is held: the next frame pushed starts a group.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }
}

/// Whether every byte is zero: unwritten (preallocated or sparse) space, not a frame.
#[must_use]
pub fn is_zeroed(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| *b == 0)
}

/// The position stored in a candidate header, read without checking anything; used to search
/// for a valid frame after damage.
#[must_use]
pub fn peek_position(bytes: &[u8]) -> Option<Position> {
    let field = bytes.get(POSITION_OFFSET..POSITION_OFFSET + 8)?;
    let mut b = [0u8; 8];
    b.copy_from_slice(field);
    Some(Position(u64::from_le_bytes(b)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::envelope::Envelope;
    use proptest::prelude::*;

    fn meta(position: u64, end: bool) -> FrameMeta {
        FrameMeta {
            position: Position(position),
            recorded_at_ns: 1_778_493_600_000_000_000,
            stream_version: position,
            flags: if end {
                FrameFlags::END_OF_BATCH
                    .with(FrameFlags::FIRST_IN_WRITE)
                    .with(FrameFlags::LINK_END)
            } else {
                FrameFlags::LINK_END
            },
        }
    }

    /// Checks `frame` as a group of its own following `prev`.
    fn check_alone(frame: &[u8], prev: &ChainHash) -> Result<ChainHash, FormatError> {
        let (header, _) = decode_frame(frame)?;
        let frame = &frame[..header.frame_len() as usize];
        GroupCheck::default()
            .push(prev, &header, frame)?
            .ok_or(FormatError::Truncated {
                needed: 0,
                available: 0,
            })
    }

    /// A group of `bodies` in one buffer following `prev`, ending its batch: the group's bytes and
    /// link.
    fn group_of(prev: &ChainHash, first: u64, bodies: &[&[u8]]) -> (Vec<u8>, ChainHash) {
        let mut out = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            let last = i + 1 == bodies.len();
            let flags = if last {
                FrameFlags::END_OF_BATCH.with(FrameFlags::LINK_END)
            } else {
                FrameFlags::NONE
            };
            let meta = FrameMeta {
                flags,
                ..meta(first + i as u64, false)
            };
            encode_unlinked(&mut out, &meta, body).unwrap();
        }
        let link = link_group(&mut out, prev).unwrap();
        (out, link)
    }

    /// Pushes every frame of `group` into a fresh check; the link, or the first error.
    fn check_group(group: &[u8], prev: &ChainHash) -> Result<Option<ChainHash>, FormatError> {
        let mut check = GroupCheck::default();
        let mut at = 0;
        let mut last = None;
        while at < group.len() {
            let (header, _) = decode_frame(&group[at..])?;
            let len = header.frame_len() as usize;
            last = check.push(prev, &header, &group[at..at + len])?;
            at += len;
        }
        Ok(last)
    }

    /// The example of `docs/FORMAT.md`, "Golden bytes": encoded exactly as the document shows.
    fn golden_frame() -> Vec<u8> {
        let mut e = Envelope::new("session.created", "evt_1", "2026-05-11T10:00:00Z");
        e.session_id = Some("s1".into());
        let body = e.to_msgpack().unwrap();
        let mut out = Vec::new();
        encode_frame(&mut out, &ChainHash::GENESIS, &meta(1, true), &body).unwrap();
        out
    }

    pub(crate) fn hex_dump(bytes: &[u8]) -> String {
        bytes
            .chunks(16)
            .map(|line| {
                line.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Returns the text between `<!-- golden:NAME -->` ```text and ``` in FORMAT.md.
    pub(crate) fn golden_block(name: &str) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
        let doc = std::fs::read_to_string(path).expect("docs/FORMAT.md is readable");
        let marker = format!("<!-- golden:{name} -->");
        let start = doc
            .find(&marker)
            .unwrap_or_else(|| panic!("FORMAT.md lacks {marker}"));
        let rest = &doc[start + marker.len()..];
        let open = rest.find("```text\n").expect("code block after marker") + "```text\n".len();
        let close = rest[open..].find("```").expect("closed code block");
        rest[open..open + close].trim().to_string()
    }

    #[test]
    fn golden_frame_bytes_match_format_md() {
        let dump = hex_dump(&golden_frame());
        assert_eq!(
            golden_block("frame"),
            dump,
            "docs/FORMAT.md's golden frame differs from the encoder; new dump:\n{dump}"
        );
    }

    #[test]
    fn layout_constants_match_format_md_table() {
        assert_eq!(
            (
                BODY_LEN_OFFSET,
                BODY_CRC_OFFSET,
                FLAGS_OFFSET,
                RESERVED_OFFSET
            ),
            (4, 8, 12, 14)
        );
        assert_eq!(
            (
                POSITION_OFFSET,
                RECORDED_AT_OFFSET,
                STREAM_VERSION_OFFSET,
                HASH_OFFSET
            ),
            (16, 24, 32, 40)
        );
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let frame = golden_frame();
        for bit in 0..frame.len() * 8 {
            let mut damaged = frame.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let result = check_alone(&damaged, &ChainHash::GENESIS);
            assert!(result.is_err(), "flip of bit {bit} went undetected");
        }
    }

    #[test]
    fn every_truncation_is_detected_as_truncated() {
        let frame = golden_frame();
        for len in 0..frame.len() {
            let result = decode_frame(&frame[..len]);
            assert!(
                matches!(result, Err(FormatError::Truncated { .. })),
                "truncation to {len} bytes gave {result:?}"
            );
        }
    }

    #[test]
    fn chain_detects_reordering_and_deletion_of_runs() {
        let mut prev = ChainHash::GENESIS;
        let mut frames = Vec::new();
        for p in 1..=3 {
            let mut out = Vec::new();
            prev = encode_frame(
                &mut out,
                &prev,
                &meta(p, true),
                format!("body{p}").as_bytes(),
            )
            .unwrap();
            frames.push(out);
        }
        // Frame 3 after frame 1 (frame 2 deleted): its link does not follow from frame 1's.
        let h1 = check_alone(&frames[0], &ChainHash::GENESIS).unwrap();
        assert!(matches!(
            check_alone(&frames[2], &h1),
            Err(FormatError::ChainMismatch { .. })
        ));
        let h2 = check_alone(&frames[1], &h1).unwrap();
        assert_eq!(check_alone(&frames[2], &h2).unwrap(), prev);
    }

    #[test]
    fn a_run_links_all_its_frames_with_one_link_that_covers_each_byte() {
        let bodies: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 100 + i]).collect();
        let refs: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
        let prev = ChainHash([9; 32]);
        let (group, link) = group_of(&prev, 10, &refs);
        assert_eq!(check_group(&group, &prev), Ok(Some(link)));
        // Every frame stores the group's link and decodes with its checksums.
        let mut at = 0;
        while at < group.len() {
            let (header, _) = decode_frame(&group[at..]).unwrap();
            assert_eq!(header.hash, link);
            at += header.frame_len() as usize;
        }
        // Another previous link, or any byte of the group changed (and its checksums made to
        // agree), gives another link.
        assert!(matches!(
            check_group(&group, &ChainHash::GENESIS),
            Err(FormatError::ChainMismatch { .. })
        ));
        let mut edited = refs.clone();
        let changed = [3u8; 102];
        edited[2] = &changed;
        let (_, other) = group_of(&prev, 10, &edited);
        assert_ne!(other, link);
        // A frame of the group dropped: the group's link no longer holds.
        let first_len = decode_frame(&group).unwrap().0.frame_len() as usize;
        assert!(matches!(
            check_group(&group[first_len..], &prev),
            Err(FormatError::ChainMismatch { .. })
        ));
    }

    #[test]
    fn a_frame_storing_another_link_than_its_run_is_refused() {
        let prev = ChainHash::GENESIS;
        let (group, _) = group_of(&prev, 1, &[b"a", b"b"]);
        let (other, _) = group_of(&ChainHash([1; 32]), 2, &[b"b"]);
        let first_len = decode_frame(&group).unwrap().0.frame_len() as usize;
        let mut mixed = group[..first_len].to_vec();
        mixed.extend_from_slice(&other);
        assert!(matches!(
            check_group(&mixed, &prev),
            Err(FormatError::GroupLinksDiffer {
                frames_before: 1,
                ..
            })
        ));
    }

    #[test]
    fn a_run_that_goes_on_past_run_bytes_is_refused() {
        let body = vec![7u8; 1000];
        let count = LINK_GROUP_BYTES as usize / (FRAME_HEADER_LEN + body.len()) + 2;
        let bodies: Vec<&[u8]> = vec![&body; count];
        let (group, _) = group_of(&ChainHash::GENESIS, 1, &bodies);
        assert!(matches!(
            check_group(&group, &ChainHash::GENESIS),
            Err(FormatError::GroupTooLong { .. })
        ));
    }

    #[test]
    fn a_batch_end_inside_a_run_is_refused() {
        let mut out = Vec::new();
        let meta = FrameMeta {
            flags: FrameFlags::END_OF_BATCH,
            ..meta(1, false)
        };
        encode_unlinked(&mut out, &meta, b"x").unwrap();
        link_group(&mut out, &ChainHash::GENESIS).unwrap();
        assert_eq!(
            decode_frame(&out).map(|_| ()),
            Err(FormatError::BatchEndsInsideGroup(1))
        );
    }

    #[test]
    fn link_run_refuses_bytes_that_do_not_end_at_a_frame_end() {
        let mut group = Vec::new();
        encode_unlinked(&mut group, &meta(1, true), b"abc").unwrap();
        group.pop();
        let before = group.clone();
        assert!(matches!(
            link_group(&mut group, &ChainHash::GENESIS),
            Err(FormatError::Truncated { .. })
        ));
        assert_eq!(group, before);
    }

    #[test]
    fn oversized_body_is_refused_before_encoding() {
        let mut out = Vec::new();
        let body = vec![0u8; FRAME_BODY_LEN_MAX as usize + 1];
        let result = encode_frame(&mut out, &ChainHash::GENESIS, &meta(1, true), &body);
        assert!(matches!(result, Err(FormatError::LengthTooLarge { .. })));
        assert!(out.is_empty());
    }

    #[test]
    fn zeroed_header_is_not_a_frame() {
        let zeros = [0u8; FRAME_HEADER_LEN];
        assert!(is_zeroed(&zeros));
        assert!(FrameHeader::decode(&zeros).is_err());
    }

    proptest! {
        #[test]
        fn frames_round_trip(body in prop::collection::vec(any::<u8>(), 0..2048), p in 1u64..u64::MAX, end: bool) {
            let mut out = Vec::new();
            let hash = encode_frame(&mut out, &ChainHash([7; 32]), &meta(p, end), &body).unwrap();
            let (header, decoded) = decode_frame(&out).unwrap();
            prop_assert_eq!(decoded, &body[..]);
            prop_assert_eq!(check_alone(&out, &ChainHash([7; 32])).unwrap(), hash);
            prop_assert_eq!(header.hash, hash);
            prop_assert_eq!(header.meta, meta(p, end));
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_frame_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame(&bytes);
            let _ = check_alone(&bytes, &ChainHash::GENESIS);
        }
    }
}
