//! The archive manifest (`ARCHIVE` in the journal's directory): which sealed segments were
//! moved out of the live log, where to, and what each must hash to. Its bytes are described in
//! `docs/FORMAT.md` (the archive manifest); it is replaced whole with `replace_file`, never
//! edited in place.

use std::path::Path;

use journal_format::{ChainHash, Position, SegmentId};

use crate::error::{Error, Result};
use crate::storage::{replace_file, OpenMode, Storage};

/// The manifest's file name in the journal's directory.
pub const MANIFEST_FILE: &str = "ARCHIVE";

/// The first eight bytes of a manifest.
const MAGIC: &[u8; 8] = b"JRNLARCV";

/// The manifest layout this build writes and reads.
const VERSION: u32 = 1;

/// The fixed part of an entry: id, first, last, length (8 bytes each), three 32-byte hashes,
/// and the location's length (2 bytes).
const ENTRY_FIXED_LEN: usize = 4 * 8 + 3 * 32 + 2;

/// One archived segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedSegment {
    /// Its id (its file name is [`SegmentId::file_name`]).
    pub segment: SegmentId,
    /// The first position it holds.
    pub first: Position,
    /// The last position it holds.
    pub last: Position,
    /// The file's length in bytes, footer included.
    pub len: u64,
    /// BLAKE3 of the whole file.
    pub file_hash: [u8; 32],
    /// The chain link before its first event (its header's previous link).
    pub prev_hash: ChainHash,
    /// The chain link at its end: the link the next segment continues.
    pub last_hash: ChainHash,
    /// The archive directory it was copied to, as given when it was archived.
    pub location: String,
}

/// Every archived segment, oldest first; they hold positions `1..=last` without a gap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The archived segments, in position order.
    pub segments: Vec<ArchivedSegment>,
}

impl Manifest {
    /// The last archived position and the chain link there (the link the first live segment
    /// continues); `None` when nothing is archived.
    #[must_use]
    pub fn boundary(&self) -> Option<(SegmentId, Position, ChainHash)> {
        self.segments
            .last()
            .map(|s| (s.segment, s.last, s.last_hash))
    }

    /// The archived segment holding `position`, if any.
    #[must_use]
    pub fn holding(&self, position: Position) -> Option<&ArchivedSegment> {
        self.segments
            .iter()
            .find(|s| s.first <= position && position <= s.last)
    }

    /// The manifest's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.segments.len() * (ENTRY_FIXED_LEN + 64) + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let count = u32::try_from(self.segments.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for s in &self.segments {
            out.extend_from_slice(&s.segment.0.to_le_bytes());
            out.extend_from_slice(&s.first.0.to_le_bytes());
            out.extend_from_slice(&s.last.0.to_le_bytes());
            out.extend_from_slice(&s.len.to_le_bytes());
            out.extend_from_slice(&s.file_hash);
            out.extend_from_slice(&s.prev_hash.0);
            out.extend_from_slice(&s.last_hash.0);
            let location = s.location.as_bytes();
            let len = u16::try_from(location.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(location.get(..usize::from(len)).unwrap_or_default());
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// Reads a manifest's bytes.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for another layout version; [`Error::InvalidInput`] naming what
    /// is wrong with damaged bytes (a checksum that does not match, an entry cut short, entries
    /// that do not follow each other).
    pub fn decode(bytes: &[u8]) -> Result<Manifest> {
        let bad = |what: &str| Error::InvalidInput(format!("the archive manifest {what}"));
        let split = bytes
            .len()
            .checked_sub(32)
            .ok_or_else(|| bad("is too short"))?;
        let (body, sum) = bytes.split_at(split);
        if blake3::hash(body).as_bytes() != sum {
            return Err(bad("does not match its checksum (damaged)"));
        }
        let mut r = Reader { bytes: body };
        if r.take(8)? != MAGIC {
            return Err(bad("does not start with JRNLARCV"));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(Error::Unsupported(format!(
                "archive manifest version {version} (this build reads {VERSION})"
            )));
        }
        let count = r.u32()?;
        let mut segments = Vec::new();
        for _ in 0..count {
            segments.push(r.entry()?);
        }
        if !r.bytes.is_empty() {
            return Err(bad("has bytes after its last entry"));
        }
        let manifest = Manifest { segments };
        manifest.check()?;
        Ok(manifest)
    }

    /// Checks that the entries follow each other: ids one after another, positions from 1
    /// without a gap, each link continuing the one before.
    fn check(&self) -> Result<()> {
        let mut expected = (Position::FIRST, ChainHash::GENESIS, None::<SegmentId>);
        for s in &self.segments {
            let (first, prev, id) = expected;
            let follows = id.is_none_or(|id| s.segment.0 == id.0 + 1);
            if s.first != first || s.prev_hash != prev || !follows || s.last < s.first {
                return Err(Error::InvalidInput(format!(
                    "the archive manifest's entry for segment {} does not follow the one before it",
                    s.segment
                )));
            }
            expected = (s.last.next(), s.last_hash, Some(s.segment));
        }
        Ok(())
    }
}

/// A cursor over a manifest's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.bytes.len() < n {
            return Err(Error::InvalidInput(
                "the archive manifest is cut short".into(),
            ));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn entry(&mut self) -> Result<ArchivedSegment> {
        let segment = SegmentId(self.u64()?);
        let first = Position(self.u64()?);
        let last = Position(self.u64()?);
        let len = self.u64()?;
        let file_hash = self.array()?;
        let prev_hash = ChainHash(self.array()?);
        let last_hash = ChainHash(self.array()?);
        let location_len = u16::from_le_bytes(self.array()?);
        let location =
            String::from_utf8(self.take(usize::from(location_len))?.to_vec()).map_err(|_| {
                Error::InvalidInput(format!(
                    "the archive manifest's location of segment {segment} is not UTF-8"
                ))
            })?;
        Ok(ArchivedSegment {
            segment,
            first,
            last,
            len,
            file_hash,
            prev_hash,
            last_hash,
            location,
        })
    }
}

/// The manifest in `dir`, or an empty one when the journal has archived nothing.
///
/// # Errors
/// An I/O error, or a damaged manifest (see [`Manifest::decode`]).
pub fn read(storage: &dyn Storage, dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    if !storage.exists(&path) {
        return Ok(Manifest::default());
    }
    let io = |what: &'static str| {
        let shown = path.display().to_string();
        Error::io_with(move || format!("{what} {shown}"))
    };
    let file = storage.open(&path, OpenMode::Read).map_err(io("opening"))?;
    let len = file.len().map_err(io("reading the length of"))?;
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0).map_err(io("reading"))?;
    Manifest::decode(&bytes)
}

/// Makes `manifest` the journal's manifest, atomically and durably.
///
/// # Errors
/// An I/O error; the old manifest is then still in place.
pub(crate) fn write(storage: &dyn Storage, dir: &Path, manifest: &Manifest) -> Result<()> {
    if let Some(long) = manifest
        .segments
        .iter()
        .find(|s| s.location.len() > usize::from(u16::MAX))
    {
        return Err(Error::InvalidInput(format!(
            "the archive's location is {} bytes, over the manifest's {} (archive to a shorter path)",
            long.location.len(),
            u16::MAX
        )));
    }
    replace_file(storage, dir, MANIFEST_FILE, &manifest.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, first: u64, last: u64, prev: u8, end: u8) -> ArchivedSegment {
        ArchivedSegment {
            segment: SegmentId(id),
            first: Position(first),
            last: Position(last),
            len: 4096,
            file_hash: [0xAB; 32],
            prev_hash: ChainHash([prev; 32]),
            last_hash: ChainHash([end; 32]),
            location: String::from("/a"),
        }
    }

    #[test]
    fn round_trips_and_checks_its_entries_follow() {
        let manifest = Manifest {
            segments: vec![entry(1, 1, 10, 0, 1), entry(2, 11, 20, 1, 2)],
        };
        let bytes = manifest.encode();
        assert_eq!(Manifest::decode(&bytes).expect("decodes"), manifest);
        let gap = Manifest {
            segments: vec![entry(1, 1, 10, 0, 1), entry(2, 12, 20, 1, 2)],
        };
        let err = Manifest::decode(&gap.encode()).expect_err("a gap is refused");
        let named = err.to_string().contains("00000000000000000002.seg");
        assert!(named, "{err}");
    }

    #[test]
    fn a_flipped_byte_is_refused() {
        let manifest = Manifest {
            segments: vec![entry(1, 1, 10, 0, 1)],
        };
        let mut bytes = manifest.encode();
        if let Some(b) = bytes.get_mut(20) {
            *b ^= 1;
        }
        let err = Manifest::decode(&bytes).expect_err("damage is refused");
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    /// The hex dump under `<!-- golden:archive-manifest -->` in docs/FORMAT.md.
    fn golden_block() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
        let doc = std::fs::read_to_string(path).expect("docs/FORMAT.md is readable");
        let marker = "<!-- golden:archive-manifest -->";
        let start = doc
            .find(marker)
            .expect("FORMAT.md has the manifest's golden bytes");
        let rest = &doc[start + marker.len()..];
        let open = rest.find("```text\n").expect("a code block") + "```text\n".len();
        let close = rest[open..].find("```").expect("closed");
        rest[open..open + close].trim().to_string()
    }

    /// The golden bytes `docs/FORMAT.md` shows for a manifest of one segment.
    #[test]
    fn golden_bytes() {
        let manifest = Manifest {
            segments: vec![entry(1, 1, 10, 0, 1)],
        };
        let bytes = manifest.encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let expected = concat!(
            "4a524e4c41524356", // "JRNLARCV"
            "01000000",         // version 1
            "01000000",         // one entry
            "0100000000000000", // segment 1
            "0100000000000000", // first position 1
            "0a00000000000000", // last position 10
            "0010000000000000", // 4096 bytes
            "abababababababababababababababababababababababababababababababab",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0101010101010101010101010101010101010101010101010101010101010101",
            "0200", // location: 2 bytes
            "2f61", // "/a"
        );
        let dump = bytes
            .chunks(16)
            .map(|row| {
                row.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            golden_block(),
            dump,
            "FORMAT.md differs from the encoder:\n{dump}"
        );
        let (body, sum) = hex.split_at(hex.len() - 64);
        assert_eq!(body, expected);
        // BLAKE3 of the bytes before it, as docs/FORMAT.md shows.
        assert_eq!(
            sum,
            "2237d8da8e969896605f78b1cdd8bbd77c77b3db2505f2a1c2733dc237bb7963"
        );
    }
}
