//! A digest of a journal to keep outside it: the committed head's position and chain link, and
//! (since the Merkle tree) the root of the tree of the events up to it. Its text form is
//! `POSITION:HASH` or `POSITION:HASH:ROOT`, hashes in hex, as `journal digest` prints it and
//! `journal verify --digest` takes it.

use std::fmt;
use std::str::FromStr;

use crate::merkle::TreeHash;
use crate::types::{ChainHash, Position};

/// A digest of a journal's state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    /// The head's position: also the Merkle tree's size.
    pub position: Position,
    /// The head's chain link.
    pub hash: ChainHash,
    /// The root of the Merkle tree of the events at positions `1..=position`, when the digest
    /// names it (a digest taken before the tree existed does not).
    pub root: Option<TreeHash>,
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.position.0, self.hash.to_hex())?;
        if let Some(root) = self.root {
            write!(f, ":{root}")?;
        }
        Ok(())
    }
}

impl FromStr for Digest {
    type Err = String;

    /// Parses `POSITION:HASH` or `POSITION:HASH:ROOT`; the error names the part that is wrong.
    fn from_str(text: &str) -> Result<Digest, String> {
        let mut parts = text.split(':');
        let (Some(position), Some(hash)) = (parts.next(), parts.next()) else {
            return Err(format!(
                "a digest is POSITION:HASH or POSITION:HASH:ROOT, got {text:?}"
            ));
        };
        let root = parts.next();
        if parts.next().is_some() {
            return Err(format!("a digest has at most three parts, got {text:?}"));
        }
        let position = position
            .parse::<u64>()
            .map_err(|e| format!("the digest's position {position:?}: {e}"))?;
        let hash = ChainHash::from_hex(hash).map_err(|e| format!("the digest's hash: {e}"))?;
        let root = root
            .map(|r| TreeHash::from_hex(r).map_err(|e| format!("the digest's tree root: {e}")))
            .transpose()?;
        Ok(Digest {
            position: Position(position),
            hash,
            root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_round_trip_and_bad_parts_are_named() {
        let two = Digest {
            position: Position(42),
            hash: ChainHash([7; 32]),
            root: None,
        };
        let three = Digest {
            root: Some(TreeHash([9; 32])),
            ..two
        };
        for d in [two, three] {
            assert_eq!(d.to_string().parse::<Digest>(), Ok(d));
        }
        assert_eq!(three.to_string().matches(':').count(), 2);
        assert!("42"
            .parse::<Digest>()
            .unwrap_err()
            .contains("POSITION:HASH"));
        assert!("x:00".parse::<Digest>().unwrap_err().contains("position"));
        let bad_root = format!("{two}:zz");
        assert!(bad_root
            .parse::<Digest>()
            .unwrap_err()
            .contains("tree root"));
        let four = format!("{three}:00");
        assert!(four.parse::<Digest>().unwrap_err().contains("three parts"));
    }
}
