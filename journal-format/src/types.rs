//! Newtypes for the integers and hashes that must not be mixed up.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The global event number the journal assigns: 1, 2, 3, ... in append order, gapless.
///
/// `Position(0)` is never an event; it stands for "before the first event".
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Position(pub u64);

impl Position {
    /// The position before the first event.
    pub const ZERO: Position = Position(0);
    /// The first event's position.
    pub const FIRST: Position = Position(1);

    /// The position after this one.
    ///
    /// # Panics
    /// Never in practice: positions are bounded by the number of events ever written, far below
    /// `u64::MAX`. The check stays on in release builds because a wrapped position would corrupt
    /// the order of the log.
    #[must_use]
    pub fn next(self) -> Position {
        Position(
            self.0
                .checked_add(1)
                .unwrap_or_else(|| panic!("position overflow")),
        )
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The number of a segment file, 1, 2, 3, ... in the order the segments were created.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct SegmentId(pub u64);

impl SegmentId {
    /// The file name of this segment: the id zero-padded to 20 digits, so names sort
    /// numerically, with the `.seg` extension.
    #[must_use]
    pub fn file_name(self) -> String {
        format!("{:020}.seg", self.0)
    }

    /// Parses a file name made by [`SegmentId::file_name`].
    #[must_use]
    pub fn from_file_name(name: &str) -> Option<SegmentId> {
        let digits = name.strip_suffix(".seg")?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(SegmentId)
    }
}

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file_name())
    }
}

/// Where a frame lies in the log: its segment and the byte offset of its first byte there.
/// Ordered by segment, then offset: the order of the log.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    /// The segment holding the frame.
    pub segment: SegmentId,
    /// The frame's byte offset in that segment.
    pub offset: u64,
}

impl Location {
    /// The frame at `offset` in `segment`.
    #[must_use]
    pub fn new(segment: SegmentId, offset: u64) -> Location {
        Location { segment, offset }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} offset {}", self.segment, self.offset)
    }
}

/// An event's position and where its frame lies.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Located {
    /// The event's position.
    pub position: Position,
    /// Where its frame lies.
    pub location: Location,
}

impl Located {
    /// The event at `position`, whose frame is at `offset` in `segment`.
    #[must_use]
    pub fn new(position: Position, segment: SegmentId, offset: u64) -> Located {
        Located {
            position,
            location: Location::new(segment, offset),
        }
    }
}

/// A byte offset inside one segment file.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ByteOffset(pub u64);

impl fmt::Display for ByteOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A link of the hash chain: the BLAKE3 hash of the previous link and one frame's bytes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct ChainHash(pub [u8; 32]);

impl ChainHash {
    /// The link before the first frame of a journal: 32 zero bytes.
    pub const GENESIS: ChainHash = ChainHash([0; 32]);

    /// Lower-case hex, 64 characters.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hash_to_hex(&self.0)
    }

    /// Parses 64 hex digits (either case).
    ///
    /// # Errors
    /// Returns a message naming the problem when the text is not 64 hex digits.
    pub fn from_hex(text: &str) -> Result<ChainHash, String> {
        hash_from_hex(text).map(ChainHash)
    }
}

/// Lower-case hex of a 32-byte hash, 64 characters.
pub(crate) fn hash_to_hex(hash: &[u8; 32]) -> String {
    let mut s = String::with_capacity(64);
    for b in hash {
        s.push(hex_digit(b >> 4));
        s.push(hex_digit(b & 0x0f));
    }
    s
}

/// Parses 64 hex digits (either case) into a 32-byte hash; the error names the problem.
pub(crate) fn hash_from_hex(text: &str) -> Result<[u8; 32], String> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return Err(format!(
            "a hash is 64 hex digits, got {} characters",
            bytes.len()
        ));
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (hi, lo) = match pair {
            [hi, lo] => (hex_value(*hi), hex_value(*lo)),
            _ => (None, None),
        };
        match (hi, lo) {
            (Some(hi), Some(lo)) => *slot = (hi << 4) | lo,
            _ => return Err(format!("not a hex digit in hash {text:?}")),
        }
    }
    Ok(out)
}

/// The lower-case hex digit of a nibble (`n < 16`).
fn hex_digit(n: u8) -> char {
    char::from(if n < 10 { b'0' + n } else { b'a' + n - 10 })
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainHash({})", self.to_hex())
    }
}

impl fmt::Display for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_file_names_sort_numerically_and_round_trip() {
        let a = SegmentId(9).file_name();
        let b = SegmentId(10).file_name();
        assert!(a < b);
        assert_eq!(a, "00000000000000000009.seg");
        assert_eq!(SegmentId::from_file_name(&b), Some(SegmentId(10)));
        assert_eq!(SegmentId::from_file_name("9.seg"), None);
        assert_eq!(SegmentId::from_file_name("0000000000000000000x.seg"), None);
    }

    #[test]
    fn chain_hash_hex_round_trips_and_rejects_bad_text() {
        let h = ChainHash([0xab; 32]);
        assert_eq!(ChainHash::from_hex(&h.to_hex()), Ok(h));
        assert!(ChainHash::from_hex("abc").is_err());
        assert!(ChainHash::from_hex(&"zz".repeat(32)).is_err());
    }
}
