//! The index's head: the last event the index reflects, its chain link and where its frame
//! is, as stored under the `indexed` key of the index's metadata.

use journal_format::{ChainHash, Location, Position, SegmentId};

use crate::error::{Error, Result};

/// The last event the index reflects, and where it is: also the point after which recovery
/// scans the tail.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexHead {
    pub position: Position,
    pub hash: ChainHash,
    /// Where the head event's frame lies.
    pub location: Location,
    /// Where that frame ends in its segment.
    pub end_offset: u64,
}

impl IndexHead {
    const LEN: usize = 8 + 32 + 8 + 8 + 8;

    pub(crate) fn encode(&self) -> [u8; IndexHead::LEN] {
        let mut out = [0u8; IndexHead::LEN];
        let fields: [&[u8]; 5] = [
            &self.position.0.to_le_bytes(),
            &self.hash.0,
            &self.location.segment.0.to_le_bytes(),
            &self.location.offset.to_le_bytes(),
            &self.end_offset.to_le_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            if let Some(slot) = out.get_mut(at..at + f.len()) {
                slot.copy_from_slice(f);
            }
            at += f.len();
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<IndexHead> {
        let bad = || Error::Index("the index head record is malformed".into());
        let (position, rest) = bytes.split_first_chunk::<8>().ok_or_else(bad)?;
        let (hash, rest) = rest.split_first_chunk::<32>().ok_or_else(bad)?;
        let (segment, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let (offset, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let (end, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        if !rest.is_empty() {
            return Err(bad());
        }
        Ok(IndexHead {
            position: Position(u64::from_le_bytes(*position)),
            hash: ChainHash(*hash),
            location: Location::new(
                SegmentId(u64::from_le_bytes(*segment)),
                u64::from_le_bytes(*offset),
            ),
            end_offset: u64::from_le_bytes(*end),
        })
    }
}
