//! The head record: the bytes of `HEAD`, the journal's evidence, kept apart from its segment
//! files, of how far its log was durably committed. Layout: `docs/FORMAT.md`, "Head record".
//!
//! The file holds two slots, each in a sector of its own; a writer overwrites the older slot, so
//! a torn write damages at most the slot being written and the other still holds the previous
//! record. The newer valid slot (the larger sequence) is the record.

use crate::error::FormatError;
use crate::frame::{read_u16, read_u32, read_u64};
use crate::types::{ChainHash, Position};

/// The magic number a head record slot starts with.
pub const HEAD_MAGIC: [u8; 8] = *b"AJRNLHED";
/// The version of the head record's layout.
pub const HEAD_VERSION: u16 = 1;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const FLAGS_OFFSET: usize = VERSION_OFFSET + 2;
const CRC_OFFSET: usize = FLAGS_OFFSET + 2;
const SEQUENCE_OFFSET: usize = CRC_OFFSET + 4;
const POSITION_OFFSET: usize = SEQUENCE_OFFSET + 8;
const HASH_OFFSET: usize = POSITION_OFFSET + 8;
/// The length of one slot.
pub const HEAD_SLOT_LEN: usize = HASH_OFFSET + 32;
const _: () = assert!(HEAD_SLOT_LEN == 64);
/// Where each slot starts: one sector apart, so that one torn sector write spoils one slot.
pub const HEAD_SLOT_STRIDE: u64 = 512;
/// The length of the whole file.
pub const HEAD_FILE_LEN: u64 = 2 * HEAD_SLOT_STRIDE;

/// Flag: the writer that made this record acknowledged appends before syncing them
/// (buffered durability), so its derived files may reflect positions the log never synced.
pub const HEAD_FLAG_BUFFERED: u16 = 1;
const KNOWN_FLAGS: u16 = HEAD_FLAG_BUFFERED;

/// One record: the log held at least `position` events, the last with chain link `hash`, all
/// durable, when it was written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HeadRecord {
    /// Counts the records written; the slot is `sequence % 2`.
    pub sequence: u64,
    /// The position durably committed.
    pub position: Position,
    /// The chain link of the run ending at `position` ([`ChainHash::GENESIS`] at position 0).
    pub hash: ChainHash,
    /// [`HEAD_FLAG_BUFFERED`] or nothing.
    pub flags: u16,
}

fn slot_crc(s: &[u8; HEAD_SLOT_LEN]) -> u32 {
    let (before, after) = s.split_at(CRC_OFFSET);
    let mut crc = crc32fast::Hasher::new();
    crc.update(before);
    crc.update(after.get(4..).unwrap_or_default());
    crc.finalize()
}

impl HeadRecord {
    /// Whether the writer of this record had buffered durability.
    #[must_use]
    pub fn buffered(&self) -> bool {
        self.flags & HEAD_FLAG_BUFFERED != 0
    }

    /// Where in the file this record's slot starts.
    #[must_use]
    pub fn slot_offset(&self) -> u64 {
        (self.sequence % 2) * HEAD_SLOT_STRIDE
    }

    /// The slot's bytes.
    #[must_use]
    #[allow(clippy::indexing_slicing)] // Constant offsets inside a fixed-size array.
    pub fn encode(&self) -> [u8; HEAD_SLOT_LEN] {
        let mut s = [0u8; HEAD_SLOT_LEN];
        s[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(&HEAD_MAGIC);
        s[VERSION_OFFSET..FLAGS_OFFSET].copy_from_slice(&HEAD_VERSION.to_le_bytes());
        s[FLAGS_OFFSET..CRC_OFFSET].copy_from_slice(&self.flags.to_le_bytes());
        s[SEQUENCE_OFFSET..POSITION_OFFSET].copy_from_slice(&self.sequence.to_le_bytes());
        s[POSITION_OFFSET..HASH_OFFSET].copy_from_slice(&self.position.0.to_le_bytes());
        s[HASH_OFFSET..HEAD_SLOT_LEN].copy_from_slice(&self.hash.0);
        let crc = slot_crc(&s);
        s[CRC_OFFSET..SEQUENCE_OFFSET].copy_from_slice(&crc.to_le_bytes());
        s
    }

    /// Decodes and checks one slot.
    ///
    /// # Errors
    /// `Truncated`, `BadMagic`, `HeaderChecksumMismatch`, `UnsupportedVersion` or
    /// `UnknownFlags`.
    #[allow(clippy::indexing_slicing)] // Bounds checked at the top.
    pub fn decode(bytes: &[u8]) -> Result<HeadRecord, FormatError> {
        let Some(slice) = bytes.get(..HEAD_SLOT_LEN) else {
            return Err(FormatError::Truncated {
                needed: HEAD_SLOT_LEN as u64,
                available: bytes.len() as u64,
            });
        };
        let mut s = [0u8; HEAD_SLOT_LEN];
        s.copy_from_slice(slice);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&s[MAGIC_OFFSET..VERSION_OFFSET]);
        if magic != HEAD_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let stored = read_u32(&s, CRC_OFFSET);
        let computed = slot_crc(&s);
        if stored != computed {
            return Err(FormatError::HeaderChecksumMismatch { stored, computed });
        }
        let version = read_u16(&s, VERSION_OFFSET);
        if version != HEAD_VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        let flags = read_u16(&s, FLAGS_OFFSET);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(FormatError::UnknownFlags(flags));
        }
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&s[HASH_OFFSET..HEAD_SLOT_LEN]);
        Ok(HeadRecord {
            sequence: read_u64(&s, SEQUENCE_OFFSET),
            position: Position(read_u64(&s, POSITION_OFFSET)),
            hash: ChainHash(hash),
            flags,
        })
    }

    /// A new file's bytes: this record's position, link and flags in both slots (sequences 0
    /// and 1), so that a torn update of either later leaves the other. Returns the newer slot's
    /// record with the bytes.
    #[must_use]
    pub fn new_file(position: Position, hash: ChainHash, flags: u16) -> (Vec<u8>, HeadRecord) {
        let mut bytes = vec![0u8; usize::try_from(HEAD_FILE_LEN).unwrap_or(1024)];
        let mut record = HeadRecord {
            sequence: 0,
            position,
            hash,
            flags,
        };
        for sequence in [0, 1] {
            record.sequence = sequence;
            let at = usize::try_from(record.slot_offset()).unwrap_or(0);
            if let Some(slot) = bytes.get_mut(at..at + HEAD_SLOT_LEN) {
                slot.copy_from_slice(&record.encode());
            }
        }
        (bytes, record)
    }

    /// The record a whole file holds: the valid slot with the larger sequence.
    ///
    /// # Errors
    /// The first slot's error when neither slot is valid.
    pub fn decode_file(bytes: &[u8]) -> Result<HeadRecord, FormatError> {
        let at = |offset: u64| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            HeadRecord::decode(bytes.get(start..).unwrap_or_default())
        };
        match (at(0), at(HEAD_SLOT_STRIDE)) {
            (Ok(a), Ok(b)) => Ok(if b.sequence > a.sequence { b } else { a }),
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), Ok(b)) => Ok(b),
            (Err(e), Err(_)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::{golden_block, hex_dump};

    fn record(sequence: u64) -> HeadRecord {
        HeadRecord {
            sequence,
            position: Position(1000 + sequence),
            hash: ChainHash([0x33; 32]),
            flags: 0,
        }
    }

    #[test]
    fn golden_head_record_matches_format_md() {
        let slot = HeadRecord {
            sequence: 7,
            position: Position(20_000),
            hash: ChainHash([0x22; 32]),
            flags: 0,
        };
        assert_eq!(golden_block("head-record"), hex_dump(&slot.encode()));
    }

    #[test]
    fn the_newer_valid_slot_is_the_record() {
        let mut file = vec![0u8; usize::try_from(HEAD_FILE_LEN).unwrap()];
        for r in [record(4), record(5)] {
            let at = usize::try_from(r.slot_offset()).unwrap();
            file[at..at + HEAD_SLOT_LEN].copy_from_slice(&r.encode());
        }
        assert_eq!(HeadRecord::decode_file(&file).unwrap(), record(5));
        // The newer slot torn: the older one stands.
        file[usize::try_from(HEAD_SLOT_STRIDE).unwrap() + 30] ^= 0x10;
        assert_eq!(HeadRecord::decode_file(&file).unwrap(), record(4));
        // Both damaged: an error.
        file[30] ^= 0x10;
        assert!(HeadRecord::decode_file(&file).is_err());
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        let bytes = record(9).encode();
        for bit in 0..HEAD_SLOT_LEN * 8 {
            let mut b = bytes;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(HeadRecord::decode(&b).is_err(), "bit {bit}");
        }
    }
}
