//! Checking a proof document offline: the event body against its leaf and id, the Merkle proof
//! against the tree head, and the tree head against a checkpoint signed by a key the auditor
//! holds. [`Checked`] says what was established; [`CheckError`] names the first thing that
//! does not hold.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Serialize;
use thiserror::Error;

use super::{ConsistencyProof, InclusionProof, CONSISTENCY_FORMAT, INCLUSION_FORMAT};
use crate::checkpoint::{format_time, CheckpointError, SignedCheckpoint, VerifierKey};
use crate::merkle::{leaf_hash, verify_consistency, verify_inclusion, ProofError, TreeHash};
use crate::EventIds;

/// Why a proof document does not prove what it says.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The text is not a proof document (not JSON, a field missing, unknown or malformed).
    #[error("not a proof document: {0}")]
    Document(String),
    /// The `format` is not one this version reads.
    #[error("unknown proof format {0:?} (this version reads agent-journal-inclusion-proof/1 and agent-journal-consistency-proof/1)")]
    UnknownFormat(String),
    /// The `body` is not canonical base64.
    #[error("body: not canonical base64: {0}")]
    BodyNotBase64(String),
    /// The body's leaf hash is not the document's `leaf_hash`.
    #[error("leaf_hash: the document says {document}, the body hashes to {computed}")]
    LeafHashMismatch {
        /// The document's `leaf_hash`.
        document: TreeHash,
        /// `BLAKE3(0x00 || body)`.
        computed: TreeHash,
    },
    /// The body is not a stored event whose id can be read.
    #[error("body: not a stored event: {0}")]
    BodyNotAnEvent(String),
    /// The body's event id is not the document's `event_id`.
    #[error("event_id: the document says {document:?}, the body holds {body:?}")]
    EventIdMismatch {
        /// The document's `event_id`.
        document: String,
        /// The event id the body holds (empty when it holds none).
        body: String,
    },
    /// `leaf_index` is not `position - 1`.
    #[error("leaf_index {leaf_index} is not position {position} - 1 (the event at position p is leaf p - 1)")]
    LeafIndexNotPosition {
        /// The document's `position`.
        position: u64,
        /// The document's `leaf_index`.
        leaf_index: u64,
    },
    /// The Merkle proof does not lead from the leaf (or old tree) to the root.
    #[error("path: the Merkle proof does not hold: {0}")]
    Merkle(#[from] ProofError),
    /// Keys were given, but the document has no checkpoint to check them against.
    #[error("{field}: absent, so nothing signs the root (an unsigned root proves nothing to an auditor); ask the journal for a proof against a signed checkpoint")]
    Unsigned {
        /// `checkpoint`, `old_checkpoint` or `new_checkpoint`.
        field: &'static str,
    },
    /// The checkpoint's text does not parse, or its signatures do not verify with the keys.
    #[error("{field}: {source}")]
    Checkpoint {
        /// `checkpoint`, `old_checkpoint` or `new_checkpoint`.
        field: &'static str,
        /// What is wrong with it.
        source: CheckpointError,
    },
    /// The proof is for a larger tree than the checkpoint signs.
    #[error("{size_field} {proof} is beyond the {checkpoint} events of {field}: the checkpoint does not sign that tree")]
    SizeBeyondCheckpoint {
        /// `checkpoint`, `old_checkpoint` or `new_checkpoint`.
        field: &'static str,
        /// `tree_size`, `old_size` or `new_size`.
        size_field: &'static str,
        /// The proof's tree size.
        proof: u64,
        /// The checkpoint's tree size.
        checkpoint: u64,
    },
    /// The proof is for a smaller tree than the checkpoint signs.
    #[error("{size_field} {proof} is not the {checkpoint} events of {field}: the checkpoint signs another tree")]
    SizeDiffersFromCheckpoint {
        /// `checkpoint`, `old_checkpoint` or `new_checkpoint`.
        field: &'static str,
        /// `tree_size`, `old_size` or `new_size`.
        size_field: &'static str,
        /// The proof's tree size.
        proof: u64,
        /// The checkpoint's tree size.
        checkpoint: u64,
    },
    /// The proof's root is not the checkpoint's.
    #[error("{root_field} {proof} is not the root {checkpoint} that {field} signs")]
    RootDiffersFromCheckpoint {
        /// `checkpoint`, `old_checkpoint` or `new_checkpoint`.
        field: &'static str,
        /// `root`, `old_root` or `new_root`.
        root_field: &'static str,
        /// The proof's root.
        proof: TreeHash,
        /// The checkpoint's root.
        checkpoint: TreeHash,
    },
    /// The two checkpoints of a consistency proof are of different journals.
    #[error("the checkpoints are of two journals: old_checkpoint's origin is {old:?}, new_checkpoint's {new:?}")]
    OriginsDiffer {
        /// The older checkpoint's origin.
        old: String,
        /// The newer checkpoint's origin.
        new: String,
    },
}

/// What a proof document established, for printing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// What the proof shows.
    pub proven: Proven,
    /// The checkpoints the tree heads were matched with, the older first.
    pub checkpoints: Vec<CheckpointSeen>,
    /// Whether every tree head was matched with a checkpoint whose signature verified with a
    /// key given. False only when no key was given: then the proof shows what it shows about a
    /// root, and nothing about who published that root.
    pub signed: bool,
}

/// What a proof shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Proven {
    /// The event is in the tree.
    Inclusion {
        /// The event's id.
        event_id: String,
        /// The event's position.
        position: u64,
        /// The tree's size.
        tree_size: u64,
        /// The tree's root.
        #[serde(serialize_with = "hex")]
        root: TreeHash,
    },
    /// The older tree is a prefix of the newer.
    Consistency {
        /// The older tree's size.
        old_size: u64,
        /// The older tree's root.
        #[serde(serialize_with = "hex")]
        old_root: TreeHash,
        /// The newer tree's size.
        new_size: u64,
        /// The newer tree's root.
        #[serde(serialize_with = "hex")]
        new_root: TreeHash,
    },
}

/// A checkpoint a proof's tree head was matched with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointSeen {
    /// The journal's identity.
    pub origin: String,
    /// Its tree size.
    pub tree_size: u64,
    /// Its chain head's position.
    pub chain_position: u64,
    /// Its chain head's link, hex.
    pub chain_hash: String,
    /// When it was made, as the checkpoint's `time` line gives it (RFC 3339 UTC).
    pub time: String,
    /// The names of the keys whose signatures verified (empty when no key was given).
    pub signers: Vec<String>,
}

fn hex<S: serde::Serializer>(hash: &TreeHash, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hash.to_hex())
}

/// Checks an inclusion proof with nothing but the document and `keys`: the body hashes to
/// `leaf_hash` and holds `event_id`; `leaf_index` is `position - 1`; the path leads from the
/// leaf to `root` for `tree_size`; and the checkpoint, when present, is signed by one of `keys`
/// and names `tree_size` and `root`. With `keys` given, a document without a checkpoint is
/// refused; with none, the checkpoint's signatures are not checked and [`Checked::signed`] is
/// false.
///
/// # Errors
/// The first [`CheckError`] found, naming the field.
pub fn check_inclusion(p: &InclusionProof, keys: &[VerifierKey]) -> Result<Checked, CheckError> {
    if p.format != INCLUSION_FORMAT {
        return Err(CheckError::UnknownFormat(p.format.clone()));
    }
    let body = BASE64
        .decode(&p.body)
        .map_err(|e| CheckError::BodyNotBase64(e.to_string()))?;
    let computed = leaf_hash(&body);
    if computed != p.leaf_hash {
        return Err(CheckError::LeafHashMismatch {
            document: p.leaf_hash,
            computed,
        });
    }
    let ids =
        EventIds::from_msgpack(&body).map_err(|e| CheckError::BodyNotAnEvent(e.to_string()))?;
    if ids.event_id != Some(p.event_id.as_str()) {
        return Err(CheckError::EventIdMismatch {
            document: p.event_id.clone(),
            body: ids.event_id.unwrap_or_default().to_owned(),
        });
    }
    if p.position.checked_sub(1) != Some(p.leaf_index) {
        return Err(CheckError::LeafIndexNotPosition {
            position: p.position,
            leaf_index: p.leaf_index,
        });
    }
    verify_inclusion(&p.leaf_hash, p.leaf_index, p.tree_size, &p.path, &p.root)?;
    let head = TreeHead {
        field: "checkpoint",
        size_field: "tree_size",
        root_field: "root",
        size: p.tree_size,
        root: p.root,
    };
    let seen = head.check(p.checkpoint.as_deref(), keys)?;
    Ok(Checked {
        proven: Proven::Inclusion {
            event_id: p.event_id.clone(),
            position: p.position,
            tree_size: p.tree_size,
            root: p.root,
        },
        signed: seen.is_some() && !keys.is_empty(),
        checkpoints: seen.into_iter().collect(),
    })
}

/// Checks a consistency proof with nothing but the document and `keys`: `old_size <=
/// new_size`, the path shows the older tree a prefix of the newer, and each checkpoint, when
/// present, is signed by one of `keys` and names its tree's size and root; both are of one
/// journal. With `keys` given, a document missing either checkpoint is refused; with none,
/// signatures are not checked and [`Checked::signed`] is false.
///
/// # Errors
/// The first [`CheckError`] found, naming the field.
pub fn check_consistency(
    p: &ConsistencyProof,
    keys: &[VerifierKey],
) -> Result<Checked, CheckError> {
    if p.format != CONSISTENCY_FORMAT {
        return Err(CheckError::UnknownFormat(p.format.clone()));
    }
    verify_consistency(p.old_size, p.new_size, &p.old_root, &p.new_root, &p.path)?;
    let old = TreeHead {
        field: "old_checkpoint",
        size_field: "old_size",
        root_field: "old_root",
        size: p.old_size,
        root: p.old_root,
    };
    let new = TreeHead {
        field: "new_checkpoint",
        size_field: "new_size",
        root_field: "new_root",
        size: p.new_size,
        root: p.new_root,
    };
    let old = old.check(p.old_checkpoint.as_deref(), keys)?;
    let new = new.check(p.new_checkpoint.as_deref(), keys)?;
    if let (Some(old), Some(new)) = (&old, &new) {
        if old.origin != new.origin {
            return Err(CheckError::OriginsDiffer {
                old: old.origin.clone(),
                new: new.origin.clone(),
            });
        }
    }
    Ok(Checked {
        proven: Proven::Consistency {
            old_size: p.old_size,
            old_root: p.old_root,
            new_size: p.new_size,
            new_root: p.new_root,
        },
        signed: old.is_some() && new.is_some() && !keys.is_empty(),
        checkpoints: old.into_iter().chain(new).collect(),
    })
}

/// A tree head of a proof, with the names of the document's fields that give it.
struct TreeHead {
    field: &'static str,
    size_field: &'static str,
    root_field: &'static str,
    size: u64,
    root: TreeHash,
}

impl TreeHead {
    /// Checks the tree head against the checkpoint `text`: signed by one of `keys` (unless none
    /// is given), and naming this size and root. `None` when there is no checkpoint and no key.
    fn check(
        &self,
        text: Option<&str>,
        keys: &[VerifierKey],
    ) -> Result<Option<CheckpointSeen>, CheckError> {
        let field = self.field;
        let Some(text) = text else {
            return if keys.is_empty() {
                Ok(None)
            } else {
                Err(CheckError::Unsigned { field })
            };
        };
        let in_field = |source| CheckError::Checkpoint { field, source };
        let signed = SignedCheckpoint::parse(text).map_err(in_field)?;
        let signers = if keys.is_empty() {
            Vec::new()
        } else {
            signed.verify(keys).map_err(in_field)?
        };
        let c = &signed.checkpoint;
        let (proof, checkpoint, size_field) = (self.size, c.tree_size, self.size_field);
        if proof > checkpoint {
            return Err(CheckError::SizeBeyondCheckpoint {
                field,
                size_field,
                proof,
                checkpoint,
            });
        }
        if proof != checkpoint {
            return Err(CheckError::SizeDiffersFromCheckpoint {
                field,
                size_field,
                proof,
                checkpoint,
            });
        }
        if self.root != c.root {
            return Err(CheckError::RootDiffersFromCheckpoint {
                field,
                root_field: self.root_field,
                proof: self.root,
                checkpoint: c.root,
            });
        }
        Ok(Some(CheckpointSeen {
            origin: c.origin.clone(),
            tree_size: c.tree_size,
            chain_position: c.chain_position.0,
            chain_hash: c.chain_hash.to_hex(),
            time: format_time(c.time_ns),
            signers,
        }))
    }
}

impl fmt::Display for Checked {
    /// What was established, in a few lines of text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.proven {
            Proven::Inclusion {
                event_id,
                position,
                tree_size,
                root,
            } => writeln!(
                f,
                "event {event_id:?} is at position {position} of the journal's tree of {tree_size} events, root {root}"
            )?,
            Proven::Consistency {
                old_size,
                old_root,
                new_size,
                new_root,
            } => writeln!(
                f,
                "the tree of {old_size} events (root {old_root}) is a prefix of the tree of {new_size} events (root {new_root}): the journal only grew"
            )?,
        }
        for c in &self.checkpoints {
            let signers = if c.signers.is_empty() {
                "signatures not checked".to_owned()
            } else {
                format!("signed by {}", c.signers.join(", "))
            };
            writeln!(
                f,
                "checkpoint {} of {} events at {}, chain head {} {}: {signers}",
                c.origin, c.tree_size, c.time, c.chain_position, c.chain_hash
            )?;
        }
        if !self.signed {
            writeln!(
                f,
                "NOT SIGNED: no key was given, so nothing shows that the journal published this root"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{Checkpoint, SigningKey};
    use crate::merkle::{empty_root, leaf_hash};
    use crate::types::{ChainHash, Position};

    fn head(size: u64, root: TreeHash) -> TreeHead {
        TreeHead {
            field: "checkpoint",
            size_field: "tree_size",
            root_field: "root",
            size,
            root,
        }
    }

    fn signed(size: u64, root: TreeHash, key: &SigningKey) -> String {
        let checkpoint = Checkpoint {
            origin: "o".into(),
            tree_size: size,
            root,
            chain_position: Position(size),
            chain_hash: ChainHash::GENESIS,
            time_ns: 0,
        };
        SignedCheckpoint::sign(checkpoint, key).unwrap().to_text()
    }

    #[test]
    fn a_tree_head_is_held_to_its_checkpoint() {
        let key = SigningKey::from_seed("k", [3; 32]).unwrap();
        let keys = [key.verifier()];
        let root = leaf_hash(b"a");
        let text = signed(1, root, &key);
        let seen = head(1, root).check(Some(&text), &keys).unwrap().unwrap();
        assert_eq!(
            (seen.signers, seen.time),
            (
                vec!["k".to_owned()],
                "1970-01-01T00:00:00.000000000Z".to_owned()
            )
        );
        let err = head(2, root).check(Some(&text), &keys).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tree_size 2 is beyond the 1 events of checkpoint: the checkpoint does not sign that tree"
        );
        let err = head(0, root).check(Some(&text), &keys).unwrap_err();
        assert!(matches!(
            err,
            CheckError::SizeDiffersFromCheckpoint {
                proof: 0,
                checkpoint: 1,
                ..
            }
        ));
        let err = head(1, empty_root()).check(Some(&text), &keys).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("root {} is not the root {root}", empty_root())),
            "{err}"
        );
        let err = head(1, root).check(Some("junk"), &keys).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("checkpoint: malformed signed checkpoint"),
            "{err}"
        );
        assert_eq!(head(1, root).check(None, &[]), Ok(None));
        assert_eq!(
            head(1, root).check(None, &keys),
            Err(CheckError::Unsigned {
                field: "checkpoint"
            })
        );
    }

    #[test]
    fn a_wrong_format_is_refused_by_the_checks_too() {
        let p = ConsistencyProof {
            format: "agent-journal-consistency-proof/0".into(),
            old_size: 0,
            old_root: empty_root(),
            new_size: 0,
            new_root: empty_root(),
            path: vec![],
            old_checkpoint: None,
            new_checkpoint: None,
        };
        assert!(matches!(
            check_consistency(&p, &[]),
            Err(CheckError::UnknownFormat(_))
        ));
        let p = ConsistencyProof {
            format: CONSISTENCY_FORMAT.into(),
            ..p
        };
        let checked = check_consistency(&p, &[]).unwrap();
        assert!(!checked.signed);
        let json = serde_json::to_value(&checked).unwrap();
        assert_eq!(json["proven"]["kind"], "consistency");
        assert_eq!(json["proven"]["new_root"], empty_root().to_hex());
    }
}
