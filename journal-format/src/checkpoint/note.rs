//! [`SignedCheckpoint`]: a checkpoint's body with its signature lines, as a C2SP signed note:
//! the body, an empty line, then `— <key name> <base64(key id || signature)>` per signature.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::key::check_key_name;
use super::{
    control_character_at, Checkpoint, CheckpointError, KeyId, SigningKey, VerifierKey,
    NOTE_LEN_MAX, SIGNATURES_MAX,
};

/// What starts a signature line: an em dash (U+2014) and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// One signature line of a note: the key's name, its key id, and the signature bytes (for
/// Ed25519, 64). A line by a key the verifier does not hold is kept as it is and ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    /// The signing key's name.
    pub name: String,
    /// The signing key's id.
    pub key_id: KeyId,
    /// The signature, without the key id.
    pub signature: Vec<u8>,
}

impl NoteSignature {
    /// `name+keyid`, how errors and reports name the key.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}+{}", self.name, self.key_id)
    }

    /// The line without its newline: `— <name> <base64(key id || signature)>`.
    fn line(&self) -> String {
        let mut bytes = Vec::with_capacity(4 + self.signature.len());
        bytes.extend_from_slice(&self.key_id.0);
        bytes.extend_from_slice(&self.signature);
        format!("{SIGNATURE_PREFIX}{} {}", self.name, BASE64.encode(bytes))
    }

    /// Reads one line (without its newline); `number` counts signature lines from 1.
    fn parse(line: &str, number: usize) -> Result<NoteSignature, CheckpointError> {
        let malformed = |problem: String| {
            CheckpointError::MalformedNote(format!("signature line {number}: {problem}"))
        };
        let rest = line.strip_prefix(SIGNATURE_PREFIX).ok_or_else(|| {
            malformed("does not start with an em dash (U+2014) and a space".into())
        })?;
        let (name, encoded) = rest
            .split_once(' ')
            .ok_or_else(|| malformed("is not \"— <key name> <signature>\"".into()))?;
        check_key_name(name).map_err(|e| malformed(e.to_string()))?;
        let bytes = BASE64
            .decode(encoded)
            .map_err(|e| malformed(format!("the signature is not canonical base64: {e}")))?;
        let Some((key_id, signature)) = bytes.split_first_chunk::<4>() else {
            return Err(malformed(
                "a signature holds a 4-byte key id and at least one byte".into(),
            ));
        };
        if signature.is_empty() {
            return Err(malformed(
                "a signature holds a 4-byte key id and at least one byte".into(),
            ));
        }
        Ok(NoteSignature {
            name: name.to_owned(),
            key_id: KeyId(*key_id),
            signature: signature.to_vec(),
        })
    }
}

/// A checkpoint with its signatures. Its text is a C2SP signed note (`docs/FORMAT.md`,
/// "Checkpoints and proof documents").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedCheckpoint {
    /// What is signed.
    pub checkpoint: Checkpoint,
    /// The signature lines, in the order of the text.
    pub signatures: Vec<NoteSignature>,
}

impl SignedCheckpoint {
    /// Signs `checkpoint`'s body with `key`.
    ///
    /// # Errors
    /// [`CheckpointError::InvalidOrigin`] when the checkpoint's body would not read back as it
    /// ([`Checkpoint::check`]): nothing is signed that a verifier cannot parse.
    pub fn sign(
        checkpoint: Checkpoint,
        key: &SigningKey,
    ) -> Result<SignedCheckpoint, CheckpointError> {
        let mut signed = SignedCheckpoint {
            checkpoint,
            signatures: Vec::new(),
        };
        signed.cosign(key)?;
        Ok(signed)
    }

    /// Adds `witness`'s signature of the same body after the others, replacing an earlier
    /// signature by the same key (name and key id). A cosignature says only that the witness
    /// signed this body: what it checked first (that the checkpoint is consistent with the last
    /// it saw) is the witness's business.
    ///
    /// # Errors
    /// As [`SignedCheckpoint::sign`].
    pub fn cosign(&mut self, witness: &SigningKey) -> Result<(), CheckpointError> {
        self.checkpoint.check()?;
        let signature = witness.sign(self.checkpoint.body().as_bytes());
        self.signatures
            .retain(|s| !(s.name == witness.name() && s.key_id == witness.key_id()));
        self.signatures.push(NoteSignature {
            name: witness.name().to_owned(),
            key_id: witness.key_id(),
            signature: signature.to_vec(),
        });
        Ok(())
    }

    /// The signed note: the body, an empty line, and one line per signature.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = self.checkpoint.body();
        text.push('\n');
        for signature in &self.signatures {
            text.push_str(&signature.line());
            text.push('\n');
        }
        text
    }

    /// Reads a signed checkpoint: a body as [`Checkpoint::body`] writes it, an empty line, and
    /// one to [`SIGNATURES_MAX`] signature lines, each ending in a newline. It checks the form
    /// only; [`SignedCheckpoint::verify`] checks the signatures.
    ///
    /// # Errors
    /// [`CheckpointError::MalformedNote`] for a text that breaks the signed-note format (too
    /// long, a control character, no empty line before the signatures, a bad signature line),
    /// [`CheckpointError::Body`] for a body that is not a checkpoint's.
    pub fn parse(text: &str) -> Result<SignedCheckpoint, CheckpointError> {
        let malformed = |problem: String| CheckpointError::MalformedNote(problem);
        if text.len() > NOTE_LEN_MAX {
            return Err(malformed(format!(
                "{} bytes, more than the {NOTE_LEN_MAX} accepted",
                text.len()
            )));
        }
        if let Some(at) = control_character_at(text) {
            return Err(malformed(format!(
                "a control character at byte {at} (a note holds none but newlines)"
            )));
        }
        // The body ends at the last empty line: the signature lines hold none.
        let split = text
            .rfind("\n\n")
            .ok_or_else(|| malformed("no empty line between the body and the signatures".into()))?;
        let (body, lines) = text.split_at(split + 1);
        let Some(lines) = lines
            .strip_prefix('\n')
            .and_then(|lines| lines.strip_suffix('\n'))
        else {
            return Err(malformed(
                "no signature line ending in a newline after the empty line".into(),
            ));
        };
        let lines: Vec<&str> = lines.split('\n').collect();
        if lines.len() > SIGNATURES_MAX {
            return Err(malformed(format!(
                "{} signature lines, more than the {SIGNATURES_MAX} accepted",
                lines.len()
            )));
        }
        let signatures = lines
            .iter()
            .enumerate()
            .map(|(i, line)| NoteSignature::parse(line, i + 1))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SignedCheckpoint {
            checkpoint: Checkpoint::parse_body(body)?,
            signatures,
        })
    }

    /// Checks the signatures by the keys in `keys` (a signature line's name and key id pick its
    /// key); lines by other keys are ignored, as the signed-note format says. Returns the names
    /// of the keys whose signatures verified, in the order of the lines, each once.
    ///
    /// # Errors
    /// [`CheckpointError::BadSignature`] naming the key when a signature by one of `keys` does
    /// not verify (the note was changed after signing, whatever the other signatures say);
    /// [`CheckpointError::NotSignedByGivenKey`] when no line is by any of `keys`.
    pub fn verify(&self, keys: &[VerifierKey]) -> Result<Vec<String>, CheckpointError> {
        let body = self.checkpoint.body();
        let mut verified: Vec<String> = Vec::new();
        for signature in &self.signatures {
            let mut candidates = keys
                .iter()
                .filter(|k| k.name() == signature.name && k.key_id() == signature.key_id)
                .peekable();
            let Some(first) = candidates.peek().copied() else {
                continue;
            };
            // Two keys with one name and key id are a broken key list, not a forgery: the
            // signature stands if either key verifies it.
            if !candidates.any(|k| k.verify(body.as_bytes(), &signature.signature).is_ok()) {
                return Err(first
                    .verify(body.as_bytes(), &signature.signature)
                    .err()
                    .unwrap_or_else(|| CheckpointError::BadSignature {
                        key: first.label(),
                        problem: "the text is not what this key signed",
                    }));
            }
            if !verified.contains(&signature.name) {
                verified.push(signature.name.clone());
            }
        }
        if verified.is_empty() {
            return Err(CheckpointError::NotSignedByGivenKey {
                keys: list(keys.iter().map(VerifierKey::label)),
                signers: list(self.signatures.iter().map(NoteSignature::label)),
            });
        }
        Ok(verified)
    }
}

/// `a, b, c`, or `none`.
fn list(labels: impl Iterator<Item = String>) -> String {
    let labels: Vec<String> = labels.collect();
    if labels.is_empty() {
        "none".into()
    } else {
        labels.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::TreeHash;
    use crate::types::{ChainHash, Position};

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: Checkpoint::origin_for("j1"),
            tree_size: 3,
            root: TreeHash([1; 32]),
            chain_position: Position(3),
            chain_hash: ChainHash([2; 32]),
            time_ns: 1_000,
        }
    }

    fn key(name: &str, seed: u8) -> SigningKey {
        SigningKey::from_seed(name, [seed; 32]).unwrap()
    }

    #[test]
    fn a_signed_checkpoint_round_trips_and_verifies() {
        let log = key("log", 1);
        let signed = SignedCheckpoint::sign(checkpoint(), &log).unwrap();
        let text = signed.to_text();
        assert!(text.starts_with(&format!("{}\n\u{2014} log ", checkpoint().body())));
        assert!(text.ends_with('\n'));
        let parsed = SignedCheckpoint::parse(&text).unwrap();
        assert_eq!(parsed, signed);
        assert_eq!(parsed.to_text(), text);
        assert_eq!(parsed.verify(&[log.verifier()]), Ok(vec!["log".into()]));
    }

    #[test]
    fn another_key_or_no_key_is_refused_and_named() {
        let signed = SignedCheckpoint::sign(checkpoint(), &key("log", 1)).unwrap();
        let other = key("other", 2).verifier();
        let err = signed.verify(std::slice::from_ref(&other)).unwrap_err();
        assert!(matches!(err, CheckpointError::NotSignedByGivenKey { .. }));
        let says = err.to_string();
        assert!(
            says.contains(&other.label()) && says.contains("log+"),
            "{says}"
        );
        let err = signed.verify(&[]).unwrap_err().to_string();
        assert!(err.contains("keys: none"), "{err}");
        // Same name, another key: its own key id, so the line is not its and is ignored.
        let impostor = key("log", 3).verifier();
        assert!(matches!(
            signed.verify(&[impostor]),
            Err(CheckpointError::NotSignedByGivenKey { .. })
        ));
    }

    #[test]
    fn a_changed_body_fails_by_name_of_the_key() {
        let log = key("log", 1);
        let mut signed = SignedCheckpoint::sign(checkpoint(), &log).unwrap();
        signed.checkpoint.tree_size = 4;
        let err = signed.verify(&[log.verifier()]).unwrap_err();
        assert_eq!(
            err,
            CheckpointError::BadSignature {
                key: log.verifier().label(),
                problem: "the text is not what this key signed"
            }
        );
    }

    #[test]
    fn a_cosigned_checkpoint_verifies_with_either_key_and_a_bad_known_line_fails_it() {
        let (log, witness) = (key("log", 1), key("witness", 2));
        let mut signed = SignedCheckpoint::sign(checkpoint(), &log).unwrap();
        signed.cosign(&witness).unwrap();
        signed.cosign(&witness).unwrap();
        assert_eq!(
            signed.signatures.len(),
            2,
            "a second cosign replaces the first"
        );
        let signed = SignedCheckpoint::parse(&signed.to_text()).unwrap();
        assert_eq!(signed.verify(&[log.verifier()]), Ok(vec!["log".into()]));
        assert_eq!(
            signed.verify(&[witness.verifier()]),
            Ok(vec!["witness".into()])
        );
        assert_eq!(
            signed.verify(&[witness.verifier(), log.verifier()]),
            Ok(vec!["log".into(), "witness".into()])
        );
        let mut broken = signed.clone();
        broken.signatures[1].signature[0] ^= 1;
        let err = broken.verify(&[log.verifier(), witness.verifier()]);
        assert!(
            matches!(err, Err(CheckpointError::BadSignature { ref key, .. }) if key.starts_with("witness+"))
        );
        assert_eq!(broken.verify(&[log.verifier()]), Ok(vec!["log".into()]));
    }

    #[test]
    fn unknown_signature_lines_are_kept_and_ignored() {
        let log = key("log", 1);
        let signed = SignedCheckpoint::sign(checkpoint(), &log).unwrap();
        let foreign = "\u{2014} example.com/other AAAAAQID\n";
        let text = format!("{}{foreign}", signed.to_text());
        let parsed = SignedCheckpoint::parse(&text).unwrap();
        assert_eq!(parsed.signatures.len(), 2);
        assert_eq!(parsed.to_text(), text);
        assert_eq!(parsed.verify(&[log.verifier()]), Ok(vec!["log".into()]));
    }

    #[test]
    fn malformed_notes_are_named() {
        let text = SignedCheckpoint::sign(checkpoint(), &key("log", 1))
            .unwrap()
            .to_text();
        let body = checkpoint().body();
        let says = |text: &str, what: &str| {
            let err = SignedCheckpoint::parse(text).unwrap_err().to_string();
            assert!(err.contains(what), "{text:?}: {err}");
        };
        says(&body, "no empty line");
        says(&format!("{body}\n"), "no signature line");
        says(&text.replace('\u{2014}', "-"), "em dash");
        says(
            &text.replacen("\u{2014} log ", "\u{2014} log", 1),
            "is not \"— <key name>",
        );
        says(
            &text.replacen("\u{2014} log ", "\u{2014} l+g ", 1),
            "contains '+'",
        );
        says(&format!("{body}\n\u{2014} log AAAA\n"), "4-byte key id");
        says(&format!("{body}\n\u{2014} log AAAAAA==\n"), "4-byte key id");
        says(
            &format!("{body}\n\u{2014} log AAAAAQ=\n"),
            "canonical base64",
        );
        says(&text.replacen('\n', "\r\n", 1), "control character at byte");
        says(&text.replacen("\n3\n", "\n03\n", 1), "line 2 (tree size)");
        let many = format!("{body}\n{}", "\u{2014} k AAAAAQID\n".repeat(101));
        says(&many, "101 signature lines");
        says(&"x".repeat(NOTE_LEN_MAX + 1), "more than the");
    }

    #[test]
    fn an_origin_that_would_not_parse_is_not_signed() {
        let mut c = checkpoint();
        c.origin = "two\nlines".into();
        let err = SignedCheckpoint::sign(c, &key("log", 1)).unwrap_err();
        assert!(
            matches!(err, CheckpointError::InvalidOrigin { .. }),
            "{err}"
        );
    }
}
