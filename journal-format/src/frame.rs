//! Frames: one envelope's bytes on disk, with a header holding its length, checksums, the
//! journal-assigned fields and its link in the hash chain. Layout: `docs/FORMAT.md`, "Frame".
//!
//! Two CRC-32 checksums protect a frame: the header checksum covers every other header byte
//! (so a damaged length is caught before it is trusted), the body checksum covers the body. The
//! chain link is `BLAKE3(previous link ‖ header bytes 4..40 ‖ body)`, so editing, deleting or
//! reordering any frame changes every later link.

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
    const KNOWN: u16 = 3;

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
    /// The frame's link in the hash chain.
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
                flags: FrameFlags(flags),
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

    /// Checks that the stored link is `BLAKE3(prev ‖ header bytes 4..40 ‖ body)`.
    ///
    /// # Errors
    /// `ChainMismatch` naming both hashes.
    pub fn check_link(&self, prev: &ChainHash, body: &[u8]) -> Result<(), FormatError> {
        let computed = link(prev, &self.linked_header_bytes(), body);
        if computed != self.hash {
            return Err(FormatError::ChainMismatch {
                stored: self.hash.to_hex(),
                computed: computed.to_hex(),
            });
        }
        Ok(())
    }

    /// The header bytes the chain link covers (offsets 4..40), re-created from the fields.
    fn linked_header_bytes(&self) -> [u8; HASH_OFFSET - BODY_LEN_OFFSET] {
        let mut out = [0u8; HASH_OFFSET - BODY_LEN_OFFSET];
        write_linked_fields(&mut out, self.body_len, self.body_crc, &self.meta);
        out
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

/// One link of the chain: `BLAKE3(prev ‖ linked header bytes ‖ body)`.
fn link(prev: &ChainHash, linked_header: &[u8], body: &[u8]) -> ChainHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&prev.0);
    hasher.update(linked_header);
    hasher.update(body);
    ChainHash(*hasher.finalize().as_bytes())
}

/// Appends one frame holding `body` to `out` and returns its chain link.
///
/// # Errors
/// `LengthTooLarge` when the body is longer than [`FRAME_BODY_LEN_MAX`]; nothing is appended.
pub fn encode_frame(
    out: &mut Vec<u8>,
    prev: &ChainHash,
    meta: &FrameMeta,
    body: &[u8],
) -> Result<ChainHash, FormatError> {
    let body_len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= FRAME_BODY_LEN_MAX)
        .ok_or(FormatError::LengthTooLarge {
            len: body.len() as u64,
            max: u64::from(FRAME_BODY_LEN_MAX),
        })?;
    let body_crc = crc32fast::hash(body);
    let mut header = [0u8; FRAME_HEADER_LEN];
    let (crc_slot, rest) = header.split_at_mut(BODY_LEN_OFFSET);
    let (linked, hash_slot) = rest.split_at_mut(HASH_OFFSET - BODY_LEN_OFFSET);
    write_linked_fields(linked, body_len, body_crc, meta);
    let hash = link(prev, linked, body);
    hash_slot.copy_from_slice(&hash.0);
    let mut crc = crc32fast::Hasher::new();
    crc.update(linked);
    crc.update(hash_slot);
    let header_crc = crc.finalize();
    crc_slot.copy_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
    Ok(hash)
}

/// Decodes a whole frame at the start of `bytes` and checks both checksums; with `prev`, checks
/// the chain link too. Returns the header and the body.
///
/// # Errors
/// As [`FrameHeader::decode`], [`FrameHeader::check_body`] and [`FrameHeader::check_link`].
pub fn decode_frame<'a>(
    bytes: &'a [u8],
    prev: Option<&ChainHash>,
) -> Result<(FrameHeader, &'a [u8]), FormatError> {
    let header = FrameHeader::decode(bytes)?;
    let end = FRAME_HEADER_LEN + header.body_len as usize;
    let body = bytes
        .get(FRAME_HEADER_LEN..end)
        .ok_or(FormatError::Truncated {
            needed: end as u64,
            available: bytes.len() as u64,
        })?;
    header.check_body(body)?;
    if let Some(prev) = prev {
        header.check_link(prev, body)?;
    }
    Ok((header, body))
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
                FrameFlags::END_OF_BATCH.with(FrameFlags::FIRST_IN_WRITE)
            } else {
                FrameFlags::NONE
            },
        }
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
            let result = decode_frame(&damaged, Some(&ChainHash::GENESIS));
            assert!(result.is_err(), "flip of bit {bit} went undetected");
        }
    }

    #[test]
    fn every_truncation_is_detected_as_truncated() {
        let frame = golden_frame();
        for len in 0..frame.len() {
            let result = decode_frame(&frame[..len], Some(&ChainHash::GENESIS));
            assert!(
                matches!(result, Err(FormatError::Truncated { .. })),
                "truncation to {len} bytes gave {result:?}"
            );
        }
    }

    #[test]
    fn chain_detects_reordering_and_deletion() {
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
        let (h1, _) = decode_frame(&frames[0], Some(&ChainHash::GENESIS)).unwrap();
        assert!(matches!(
            decode_frame(&frames[2], Some(&h1.hash)),
            Err(FormatError::ChainMismatch { .. })
        ));
        let (h2, _) = decode_frame(&frames[1], Some(&h1.hash)).unwrap();
        assert!(decode_frame(&frames[2], Some(&h2.hash)).is_ok());
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
            let (header, decoded) = decode_frame(&out, Some(&ChainHash([7; 32]))).unwrap();
            prop_assert_eq!(decoded, &body[..]);
            prop_assert_eq!(header.hash, hash);
            prop_assert_eq!(header.meta, meta(p, end));
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_frame_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame(&bytes, Some(&ChainHash::GENESIS));
        }
    }
}
