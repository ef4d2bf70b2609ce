//! The tree's head record, `tree/HEAD`: the size and root of the tree whose hashes were last
//! made durable. Written after the level files are synced, through a temporary file and a
//! rename (`HEAD.new`), so that a head never names hashes that are not on disk. Open trusts the level files
//! up to the head's size only once the root they give equals the head's.
//!
//! Layout (56 bytes, little-endian): magic `AJTRHEAD` (8), version `1` (u16), reserved zero
//! (u16), CRC-32 of bytes `0..12` and `16..56` (u32), size (u64), root (32 bytes).

use std::path::Path;

use journal_format::merkle::TreeHash;

use crate::error::{Error, Result};
use crate::storage::{replace_file, OpenMode, Storage};

/// The head record's file name, in the tree's directory.
const FILE: &str = "HEAD";
const MAGIC: &[u8; 8] = b"AJTRHEAD";
const VERSION: u16 = 1;
const LEN: usize = 56;
const CRC_AT: usize = 12;

/// The size and root of the tree last made durable.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct TreeRecord {
    pub size: u64,
    pub root: TreeHash,
}

impl TreeRecord {
    fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.size.to_le_bytes());
        out[24..56].copy_from_slice(&self.root.0);
        let crc = checksum(&out);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a head record; the error says what is wrong with it.
    fn decode(bytes: &[u8]) -> std::result::Result<TreeRecord, String> {
        let bytes: &[u8; LEN] = bytes
            .try_into()
            .map_err(|_| format!("the tree's head is {} bytes, not {LEN}", bytes.len()))?;
        if &bytes[..8] != MAGIC {
            return Err("the tree's head does not start with AJTRHEAD".into());
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != VERSION {
            return Err(format!(
                "the tree's head is of version {version}, not {VERSION}"
            ));
        }
        let stored = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
        if stored != checksum(bytes) {
            return Err("the tree's head fails its checksum".into());
        }
        let mut size = [0u8; 8];
        size.copy_from_slice(&bytes[16..24]);
        let mut root = [0u8; 32];
        root.copy_from_slice(&bytes[24..56]);
        Ok(TreeRecord {
            size: u64::from_le_bytes(size),
            root: TreeHash(root),
        })
    }
}

/// CRC-32 of a record's bytes but its checksum.
fn checksum(bytes: &[u8; LEN]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..CRC_AT]);
    hasher.update(&bytes[CRC_AT + 4..]);
    hasher.finalize()
}

/// What the tree's directory holds as its head.
pub(super) enum Found {
    /// No head: a tree never made durable (or its files were deleted).
    Missing,
    /// A head that cannot be read; the reason.
    Unreadable(String),
    Record(TreeRecord),
}

/// Reads the head record in `dir` (the tree's directory).
pub(super) fn read(storage: &dyn Storage, dir: &Path) -> Result<Found> {
    let path = dir.join(FILE);
    if !storage.exists(&path) {
        return Ok(Found::Missing);
    }
    let file = storage
        .open(&path, OpenMode::Read)
        .map_err(Error::io_with(|| format!("opening {}", path.display())))?;
    let len = file.len().map_err(Error::io_with(|| {
        format!("reading the length of {}", path.display())
    }))?;
    if len != LEN as u64 {
        return Ok(Found::Unreadable(format!(
            "the tree's head is {len} bytes, not {LEN}"
        )));
    }
    let mut bytes = [0u8; LEN];
    file.read_exact_at(&mut bytes, 0)
        .map_err(Error::io_with(|| format!("reading {}", path.display())))?;
    Ok(match TreeRecord::decode(&bytes) {
        Ok(record) => Found::Record(record),
        Err(why) => Found::Unreadable(why),
    })
}

/// Makes `record` the head in `dir`, durably: a temporary file, synced, renamed over the old
/// head, and the directory synced.
pub(super) fn write(storage: &dyn Storage, dir: &Path, record: TreeRecord) -> Result<()> {
    replace_file(storage, dir, FILE, &record.encode())
}

/// Removes the head in `dir`, if any.
pub(super) fn remove(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let path = dir.join(FILE);
    if storage.exists(&path) {
        storage
            .remove_file(&path)
            .map_err(Error::io_with(|| format!("removing {}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_any_flipped_bit_is_refused() {
        let record = TreeRecord {
            size: 1_000_003,
            root: TreeHash([0xa5; 32]),
        };
        let bytes = record.encode();
        assert_eq!(TreeRecord::decode(&bytes), Ok(record));
        for bit in 0..LEN * 8 {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                TreeRecord::decode(&bad).is_err(),
                "bit {bit} flipped passed"
            );
        }
        assert!(TreeRecord::decode(&bytes[..40])
            .unwrap_err()
            .contains("40 bytes"));
    }
}
