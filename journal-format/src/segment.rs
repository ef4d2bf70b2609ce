//! Segment files: the header every segment starts with and the footer a sealed segment ends
//! with (a sparse position→offset index and a trailer). Layout: `docs/FORMAT.md`, "Segment".

use crate::error::FormatError;
use crate::frame::{read_u16, read_u32, read_u64};
use crate::types::{ByteOffset, ChainHash, Position, SegmentId};

/// The magic number a segment starts with.
pub const SEGMENT_MAGIC: [u8; 8] = *b"AJRNLSEG";
/// The magic number a sealed segment's trailer starts with.
pub const FOOTER_MAGIC: [u8; 8] = *b"AJRNLEND";
/// The format version this build writes and reads. Version 1 linked every frame on its own;
/// version 2 links runs of frames (`docs/FORMAT.md`, "Frame").
pub const FORMAT_VERSION: u16 = 2;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const HEADER_RESERVED_OFFSET: usize = VERSION_OFFSET + 2;
const HEADER_CRC_OFFSET: usize = HEADER_RESERVED_OFFSET + 2;
const SEGMENT_ID_OFFSET: usize = HEADER_CRC_OFFSET + 4;
const FIRST_POSITION_OFFSET: usize = SEGMENT_ID_OFFSET + 8;
const PREV_HASH_OFFSET: usize = FIRST_POSITION_OFFSET + 8;
/// The length of a segment header; the first frame follows it.
pub const SEGMENT_HEADER_LEN: usize = PREV_HASH_OFFSET + 32;
const _: () = assert!(SEGMENT_HEADER_LEN == 64);

const TRAILER_MAGIC_OFFSET: usize = 0;
const LAST_POSITION_OFFSET: usize = TRAILER_MAGIC_OFFSET + 8;
const COUNT_OFFSET: usize = LAST_POSITION_OFFSET + 8;
const INDEX_OFFSET_OFFSET: usize = COUNT_OFFSET + 8;
const INDEX_COUNT_OFFSET: usize = INDEX_OFFSET_OFFSET + 8;
const TRAILER_CRC_OFFSET: usize = INDEX_COUNT_OFFSET + 4;
const LAST_HASH_OFFSET: usize = TRAILER_CRC_OFFSET + 4;
/// The length of the trailer at the very end of a sealed segment.
pub const SEGMENT_FOOTER_TRAILER_LEN: usize = LAST_HASH_OFFSET + 32;
const _: () = assert!(SEGMENT_FOOTER_TRAILER_LEN == 72);
/// The length of one sparse index entry: position (u64) and byte offset (u64).
pub const FOOTER_ENTRY_LEN: usize = 16;
/// The most entries a footer may hold; a longer index is damage, not data.
pub const FOOTER_ENTRIES_MAX: u32 = 1 << 20;

/// The header at the start of every segment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's number.
    pub segment_id: SegmentId,
    /// The position of the segment's first frame.
    pub first_position: Position,
    /// The chain link of the last frame of the previous segment ([`ChainHash::GENESIS`] for the
    /// first segment), so the chain runs across files.
    pub prev_hash: ChainHash,
}

fn header_crc(h: &[u8; SEGMENT_HEADER_LEN]) -> u32 {
    let (before, after) = h.split_at(HEADER_CRC_OFFSET);
    let mut crc = crc32fast::Hasher::new();
    crc.update(before);
    crc.update(after.get(4..).unwrap_or_default());
    crc.finalize()
}

impl SegmentHeader {
    /// The header's bytes.
    #[must_use]
    #[allow(clippy::indexing_slicing)] // Constant offsets inside a fixed-size array.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut h = [0u8; SEGMENT_HEADER_LEN];
        h[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&SEGMENT_MAGIC);
        h[VERSION_OFFSET..HEADER_RESERVED_OFFSET].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[SEGMENT_ID_OFFSET..FIRST_POSITION_OFFSET]
            .copy_from_slice(&self.segment_id.0.to_le_bytes());
        h[FIRST_POSITION_OFFSET..PREV_HASH_OFFSET]
            .copy_from_slice(&self.first_position.0.to_le_bytes());
        h[PREV_HASH_OFFSET..SEGMENT_HEADER_LEN].copy_from_slice(&self.prev_hash.0);
        let crc = header_crc(&h);
        h[HEADER_CRC_OFFSET..SEGMENT_ID_OFFSET].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header from the first [`SEGMENT_HEADER_LEN`] bytes.
    ///
    /// # Errors
    /// `Truncated`, `BadMagic`, `UnsupportedVersion`, `ReservedNotZero` or
    /// `HeaderChecksumMismatch`.
    #[allow(clippy::indexing_slicing)] // Bounds checked at the top.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, FormatError> {
        let Some(slice) = bytes.get(..SEGMENT_HEADER_LEN) else {
            return Err(FormatError::Truncated {
                needed: SEGMENT_HEADER_LEN as u64,
                available: bytes.len() as u64,
            });
        };
        let mut h = [0u8; SEGMENT_HEADER_LEN];
        h.copy_from_slice(slice);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&h[MAGIC_OFFSET..VERSION_OFFSET]);
        if magic != SEGMENT_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let stored = read_u32(&h, HEADER_CRC_OFFSET);
        let computed = header_crc(&h);
        if stored != computed {
            return Err(FormatError::HeaderChecksumMismatch { stored, computed });
        }
        let version = read_u16(&h, VERSION_OFFSET);
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        if read_u16(&h, HEADER_RESERVED_OFFSET) != 0 {
            return Err(FormatError::ReservedNotZero);
        }
        let mut prev = [0u8; 32];
        prev.copy_from_slice(&h[PREV_HASH_OFFSET..SEGMENT_HEADER_LEN]);
        Ok(SegmentHeader {
            segment_id: SegmentId(read_u64(&h, SEGMENT_ID_OFFSET)),
            first_position: Position(read_u64(&h, FIRST_POSITION_OFFSET)),
            prev_hash: ChainHash(prev),
        })
    }
}

/// One entry of a sealed segment's sparse index: a frame's position and its byte offset.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FooterEntry {
    /// The frame's position.
    pub position: Position,
    /// The frame's offset in the segment file.
    pub offset: ByteOffset,
}

/// The footer of a sealed segment.
///
/// # Invariants
/// Entries are strictly increasing in both position and offset, every offset lies in
/// `SEGMENT_HEADER_LEN..index_offset`, and `count` is the number of frames in the segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFooter {
    /// The position of the segment's last frame (`first_position - 1` when it has none).
    pub last_position: Position,
    /// How many frames the segment holds.
    pub count: u64,
    /// Where the frames end and the sparse index starts.
    pub index_offset: ByteOffset,
    /// The chain link of the segment's last frame.
    pub last_hash: ChainHash,
    /// The sparse index.
    pub entries: Vec<FooterEntry>,
}

/// The part of the trailer read before the index entries are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Where the index starts.
    pub index_offset: ByteOffset,
    /// How many index entries there are.
    pub index_count: u32,
    bytes: [u8; SEGMENT_FOOTER_TRAILER_LEN],
}

impl SegmentFooter {
    /// The footer's bytes: the index entries, then the trailer.
    #[must_use]
    #[allow(clippy::indexing_slicing)] // Constant offsets inside a fixed-size array.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(self.entries.len() * FOOTER_ENTRY_LEN + SEGMENT_FOOTER_TRAILER_LEN);
        for entry in &self.entries {
            out.extend_from_slice(&entry.position.0.to_le_bytes());
            out.extend_from_slice(&entry.offset.0.to_le_bytes());
        }
        let mut t = [0u8; SEGMENT_FOOTER_TRAILER_LEN];
        t[TRAILER_MAGIC_OFFSET..LAST_POSITION_OFFSET].copy_from_slice(&FOOTER_MAGIC);
        t[LAST_POSITION_OFFSET..COUNT_OFFSET].copy_from_slice(&self.last_position.0.to_le_bytes());
        t[COUNT_OFFSET..INDEX_OFFSET_OFFSET].copy_from_slice(&self.count.to_le_bytes());
        t[INDEX_OFFSET_OFFSET..INDEX_COUNT_OFFSET]
            .copy_from_slice(&self.index_offset.0.to_le_bytes());
        let index_count = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        t[INDEX_COUNT_OFFSET..TRAILER_CRC_OFFSET].copy_from_slice(&index_count.to_le_bytes());
        t[LAST_HASH_OFFSET..].copy_from_slice(&self.last_hash.0);
        let crc = footer_crc(&out, &t);
        t[TRAILER_CRC_OFFSET..LAST_HASH_OFFSET].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&t);
        out
    }

    /// Reads the trailer from the last [`SEGMENT_FOOTER_TRAILER_LEN`] bytes of a file of
    /// `file_len` bytes. Its checksum is checked by [`SegmentFooter::decode`], with the entries.
    ///
    /// # Errors
    /// `Truncated`, `BadMagic` (the segment is not sealed, or the trailer is damaged), or
    /// `InconsistentFooter` when the index would not fit the file.
    #[allow(clippy::indexing_slicing)] // Bounds checked at the top.
    pub fn decode_trailer(bytes: &[u8], file_len: u64) -> Result<Trailer, FormatError> {
        let Some(slice) = bytes.get(..SEGMENT_FOOTER_TRAILER_LEN) else {
            return Err(FormatError::Truncated {
                needed: SEGMENT_FOOTER_TRAILER_LEN as u64,
                available: bytes.len() as u64,
            });
        };
        let mut t = [0u8; SEGMENT_FOOTER_TRAILER_LEN];
        t.copy_from_slice(slice);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&t[..8]);
        if magic != FOOTER_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let index_offset = read_u64(&t, INDEX_OFFSET_OFFSET);
        let index_count = read_u32(&t, INDEX_COUNT_OFFSET);
        if index_count > FOOTER_ENTRIES_MAX {
            return Err(FormatError::LengthTooLarge {
                len: u64::from(index_count),
                max: u64::from(FOOTER_ENTRIES_MAX),
            });
        }
        let expected_len = index_offset
            .checked_add(u64::from(index_count) * FOOTER_ENTRY_LEN as u64)
            .and_then(|n| n.checked_add(SEGMENT_FOOTER_TRAILER_LEN as u64));
        if expected_len != Some(file_len) || index_offset < SEGMENT_HEADER_LEN as u64 {
            return Err(FormatError::InconsistentFooter(format!(
                "index at {index_offset} with {index_count} entries does not end a file of {file_len} bytes"
            )));
        }
        Ok(Trailer {
            index_offset: ByteOffset(index_offset),
            index_count,
            bytes: t,
        })
    }

    /// Decodes the footer from its trailer and the index entry bytes that precede it.
    ///
    /// # Errors
    /// `HeaderChecksumMismatch` when the footer checksum fails, `InconsistentFooter` when the
    /// entries break the type's invariants.
    #[allow(clippy::indexing_slicing)] // Constant offsets inside a fixed-size array.
    pub fn decode(trailer: &Trailer, entry_bytes: &[u8]) -> Result<SegmentFooter, FormatError> {
        let t = &trailer.bytes;
        if entry_bytes.len() != trailer.index_count as usize * FOOTER_ENTRY_LEN {
            return Err(FormatError::Truncated {
                needed: u64::from(trailer.index_count) * FOOTER_ENTRY_LEN as u64,
                available: entry_bytes.len() as u64,
            });
        }
        let stored = read_u32(t, TRAILER_CRC_OFFSET);
        let computed = footer_crc(entry_bytes, t);
        if stored != computed {
            return Err(FormatError::HeaderChecksumMismatch { stored, computed });
        }
        let entries: Vec<FooterEntry> = entry_bytes
            .chunks_exact(FOOTER_ENTRY_LEN)
            .map(|e| FooterEntry {
                position: Position(read_u64(e, 0)),
                offset: ByteOffset(read_u64(e, 8)),
            })
            .collect();
        let ordered = entries
            .windows(2)
            .all(|w| w[0].position < w[1].position && w[0].offset < w[1].offset);
        let in_range = entries
            .iter()
            .all(|e| e.offset.0 >= SEGMENT_HEADER_LEN as u64 && e.offset < trailer.index_offset);
        if !ordered || !in_range {
            return Err(FormatError::InconsistentFooter(
                "sparse index entries are out of order or out of range".into(),
            ));
        }
        let mut last_hash = [0u8; 32];
        last_hash.copy_from_slice(&t[LAST_HASH_OFFSET..]);
        Ok(SegmentFooter {
            last_position: Position(read_u64(t, LAST_POSITION_OFFSET)),
            count: read_u64(t, COUNT_OFFSET),
            index_offset: trailer.index_offset,
            last_hash: ChainHash(last_hash),
            entries,
        })
    }
}

#[allow(clippy::indexing_slicing)] // Constant offsets inside a fixed-size array.
fn footer_crc(entries: &[u8], t: &[u8; SEGMENT_FOOTER_TRAILER_LEN]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(entries);
    crc.update(&t[..TRAILER_CRC_OFFSET]);
    crc.update(&t[LAST_HASH_OFFSET..]);
    crc.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::{golden_block, hex_dump};

    fn sample_footer() -> SegmentFooter {
        SegmentFooter {
            last_position: Position(2),
            count: 2,
            index_offset: ByteOffset(200),
            last_hash: ChainHash([0x22; 32]),
            entries: vec![FooterEntry {
                position: Position::FIRST,
                offset: ByteOffset(64),
            }],
        }
    }

    #[test]
    fn golden_segment_header_and_footer_match_format_md() {
        let header = SegmentHeader {
            segment_id: SegmentId(1),
            first_position: Position::FIRST,
            prev_hash: ChainHash::GENESIS,
        };
        assert_eq!(golden_block("segment-header"), hex_dump(&header.encode()));
        assert_eq!(
            golden_block("segment-footer"),
            hex_dump(&sample_footer().encode())
        );
    }

    #[test]
    fn header_round_trips_and_every_bit_flip_is_detected() {
        let header = SegmentHeader {
            segment_id: SegmentId(7),
            first_position: Position(1234),
            prev_hash: ChainHash([9; 32]),
        };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&damaged).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn footer_round_trips_and_every_bit_flip_is_detected() {
        let footer = sample_footer();
        let bytes = footer.encode();
        let file_len = 200 + bytes.len() as u64;
        let decode = |bytes: &[u8]| -> Result<SegmentFooter, FormatError> {
            let split = bytes.len() - SEGMENT_FOOTER_TRAILER_LEN;
            let trailer = SegmentFooter::decode_trailer(&bytes[split..], file_len)?;
            SegmentFooter::decode(&trailer, &bytes[..split])
        };
        assert_eq!(decode(&bytes), Ok(footer));
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn unsupported_version_is_named() {
        let mut bytes = SegmentHeader {
            segment_id: SegmentId(1),
            first_position: Position::FIRST,
            prev_hash: ChainHash::GENESIS,
        }
        .encode();
        // Version 1 (a chain link per frame) and a version from the future.
        for version in [1, FORMAT_VERSION + 1] {
            bytes[VERSION_OFFSET..HEADER_RESERVED_OFFSET].copy_from_slice(&version.to_le_bytes());
            let crc = header_crc(&bytes);
            bytes[HEADER_CRC_OFFSET..SEGMENT_ID_OFFSET].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(
                SegmentHeader::decode(&bytes),
                Err(FormatError::UnsupportedVersion(version))
            );
        }
    }
}
