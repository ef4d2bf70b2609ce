//! Proof documents: an inclusion or a consistency proof with everything needed to check it and
//! nothing else, as one JSON file an auditor keeps and checks offline ([`check_inclusion`],
//! [`check_consistency`]) with the journal's verifier keys. Layout: `docs/FORMAT.md`,
//! "Checkpoints and proof documents".
//!
//! An inclusion proof carries the event's stored body (so the event itself is in the file),
//! the Merkle path from its leaf to a root, and the signed checkpoint that names that root; a
//! consistency proof carries the two tree heads, the path between them, and the two signed
//! checkpoints. Hashes are 64 lower-case hex digits, the body is canonical base64, and only
//! those forms are read, so a single changed bit anywhere in a document makes its check fail.
//!
//! Pure: no I/O.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::merkle::TreeHash;

mod check;

pub use check::{check_consistency, check_inclusion, CheckError, Checked, CheckpointSeen, Proven};

/// The `format` of an inclusion proof document.
pub const INCLUSION_FORMAT: &str = "agent-journal-inclusion-proof/1";
/// The `format` of a consistency proof document.
pub const CONSISTENCY_FORMAT: &str = "agent-journal-consistency-proof/1";
/// The longest proof document read, in bytes: an event body of the largest size a frame holds,
/// in base64, with room for the rest.
pub const DOCUMENT_LEN_MAX: usize = 24 * 1024 * 1024;

/// That an event is in the journal: its body is leaf `leaf_index` of the tree of `tree_size`
/// leaves whose root is `root`, which the checkpoint signs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProof {
    /// [`INCLUSION_FORMAT`].
    pub format: String,
    /// The event's id, as its body holds it.
    pub event_id: String,
    /// The event's position (`leaf_index + 1`).
    pub position: u64,
    /// The event's leaf in the tree (`position - 1`).
    pub leaf_index: u64,
    /// The size of the tree the proof is for.
    pub tree_size: u64,
    /// The hash of the leaf, `BLAKE3(0x00 || body)`.
    #[serde(with = "hex_hash")]
    pub leaf_hash: TreeHash,
    /// The inclusion proof: the siblings' hashes from the leaf up.
    #[serde(with = "hex_hashes")]
    pub path: Vec<TreeHash>,
    /// The root of the tree of `tree_size` leaves.
    #[serde(with = "hex_hash")]
    pub root: TreeHash,
    /// The event's stored body (its MessagePack envelope, `docs/FORMAT.md`), in base64.
    pub body: String,
    /// The text of the signed checkpoint of `tree_size` and `root`, when the journal signed one.
    pub checkpoint: Option<String>,
}

/// That the journal only grew: the tree of `old_size` leaves (root `old_root`) is a prefix of
/// the tree of `new_size` leaves (root `new_root`), both signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyProof {
    /// [`CONSISTENCY_FORMAT`].
    pub format: String,
    /// The older tree's size.
    pub old_size: u64,
    /// The older tree's root.
    #[serde(with = "hex_hash")]
    pub old_root: TreeHash,
    /// The newer tree's size.
    pub new_size: u64,
    /// The newer tree's root.
    #[serde(with = "hex_hash")]
    pub new_root: TreeHash,
    /// The consistency proof's hashes.
    #[serde(with = "hex_hashes")]
    pub path: Vec<TreeHash>,
    /// The text of the signed checkpoint of the older tree.
    pub old_checkpoint: Option<String>,
    /// The text of the signed checkpoint of the newer tree.
    pub new_checkpoint: Option<String>,
}

/// A proof document of either kind, told apart by its `format`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProofDocument {
    /// An inclusion proof.
    Inclusion(InclusionProof),
    /// A consistency proof.
    Consistency(ConsistencyProof),
}

impl InclusionProof {
    /// The event body in base64, as the document holds it.
    #[must_use]
    pub fn encode_body(body: &[u8]) -> String {
        BASE64.encode(body)
    }
}

impl ProofDocument {
    /// Reads a proof document, its kind by its `format`.
    ///
    /// # Errors
    /// [`CheckError::Document`] when the text is longer than [`DOCUMENT_LEN_MAX`], is not JSON,
    /// has a field missing, unknown or of the wrong form; [`CheckError::UnknownFormat`] for a
    /// `format` this version does not know.
    pub fn from_json(text: &str) -> Result<ProofDocument, CheckError> {
        if text.len() > DOCUMENT_LEN_MAX {
            return Err(CheckError::Document(format!(
                "{} bytes, more than the {DOCUMENT_LEN_MAX} a proof document may hold",
                text.len()
            )));
        }
        #[derive(Deserialize)]
        struct Format {
            format: String,
        }
        let document = |e: serde_json::Error| CheckError::Document(e.to_string());
        let Format { format } = serde_json::from_str(text).map_err(document)?;
        match format.as_str() {
            INCLUSION_FORMAT => serde_json::from_str(text)
                .map(ProofDocument::Inclusion)
                .map_err(document),
            CONSISTENCY_FORMAT => serde_json::from_str(text)
                .map(ProofDocument::Consistency)
                .map_err(document),
            _ => Err(CheckError::UnknownFormat(format)),
        }
    }

    /// The document as JSON, on one line.
    #[must_use]
    pub fn to_json(&self) -> String {
        let json = match self {
            ProofDocument::Inclusion(p) => serde_json::to_string(p),
            ProofDocument::Consistency(p) => serde_json::to_string(p),
        };
        // Serializing these structs (strings, numbers, hex) cannot fail.
        json.unwrap_or_default()
    }

    /// Checks the document as [`check_inclusion`] or [`check_consistency`] does.
    ///
    /// # Errors
    /// As those functions.
    pub fn check(&self, keys: &[crate::checkpoint::VerifierKey]) -> Result<Checked, CheckError> {
        match self {
            ProofDocument::Inclusion(p) => check_inclusion(p, keys),
            ProofDocument::Consistency(p) => check_consistency(p, keys),
        }
    }
}

/// Reads 64 lower-case hex digits, and no other form of a hash.
fn hash_from_lower_hex(text: &str) -> Result<TreeHash, String> {
    let hash = TreeHash::from_hex(text)?;
    if hash.to_hex() != text {
        return Err(format!("{text:?} is not in lower case"));
    }
    Ok(hash)
}

/// A [`TreeHash`] as 64 lower-case hex digits.
mod hex_hash {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    use crate::merkle::TreeHash;

    pub fn serialize<S: Serializer>(hash: &TreeHash, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hash.to_hex())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TreeHash, D::Error> {
        let text = String::deserialize(d)?;
        super::hash_from_lower_hex(&text).map_err(D::Error::custom)
    }
}

/// A list of [`TreeHash`]es, each as 64 lower-case hex digits.
mod hex_hashes {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    use crate::merkle::TreeHash;

    pub fn serialize<S: Serializer>(hashes: &[TreeHash], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(hashes.iter().map(TreeHash::to_hex))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TreeHash>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                super::hash_from_lower_hex(text)
                    .map_err(|e| D::Error::custom(format!("hash {i}: {e}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{empty_root, leaf_hash};

    fn consistency() -> ConsistencyProof {
        ConsistencyProof {
            format: CONSISTENCY_FORMAT.into(),
            old_size: 0,
            old_root: empty_root(),
            new_size: 1,
            new_root: leaf_hash(b"x"),
            path: vec![],
            old_checkpoint: None,
            new_checkpoint: None,
        }
    }

    #[test]
    fn documents_are_told_apart_by_format_and_read_back() {
        let document = ProofDocument::Consistency(consistency());
        let json = document.to_json();
        assert!(json.starts_with(r#"{"format":"agent-journal-consistency-proof/1","old_size":0,"#));
        assert_eq!(ProofDocument::from_json(&json), Ok(document));
        let as_inclusion = json.replace("consistency-proof/1", "inclusion-proof/1");
        let err = ProofDocument::from_json(&as_inclusion).unwrap_err();
        assert!(matches!(err, CheckError::Document(_)), "{err}");
    }

    #[test]
    fn hashes_are_read_in_lower_case_hex_only() {
        let hash = leaf_hash(b"x");
        assert_eq!(hash_from_lower_hex(&hash.to_hex()), Ok(hash));
        let upper = hash.to_hex().to_uppercase();
        assert!(hash_from_lower_hex(&upper)
            .unwrap_err()
            .contains("lower case"));
        assert!(hash_from_lower_hex("ab").is_err());
        let mut value: serde_json::Value =
            serde_json::from_str(&ProofDocument::Consistency(consistency()).to_json()).unwrap();
        value["path"] = serde_json::json!(["00"]);
        let err = ProofDocument::from_json(&value.to_string())
            .unwrap_err()
            .to_string();
        assert!(err.contains("hash 0:"), "{err}");
    }

    #[test]
    fn an_oversized_document_is_refused_before_parsing() {
        let text = " ".repeat(DOCUMENT_LEN_MAX + 1);
        let err = ProofDocument::from_json(&text).unwrap_err().to_string();
        assert!(err.contains("more than the"), "{err}");
    }
}
