//! Ed25519 keys as signed notes name them: a key name, a key id
//! (`SHA-256(name || 0x0A || 0x01 || public key)[:4]`) and the text forms
//! `name+keyid+base64(0x01 || public key)` (a verifier key) and
//! `PRIVATE+KEY+name+keyid+base64(0x01 || seed)` (a private key), as Go's
//! `golang.org/x/mod/sumdb/note` reads and writes them.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _};
use sha2::{Digest, Sha256};

use super::{CheckpointError, KEY_NAME_LEN_MAX};

/// The signature type byte of Ed25519 in signed notes; it prefixes the key bytes in a key's text
/// and goes into its key id.
pub const SIGNATURE_TYPE_ED25519: u8 = 0x01;

/// The prefix of a private key's text.
const PRIVATE_PREFIX: &str = "PRIVATE+KEY+";

/// A key id: the first four bytes of `SHA-256(name || 0x0A || 0x01 || public key)`. It picks
/// the key a signature line claims among the keys a verifier holds; it proves nothing itself.
/// Displays as 8 lower-case hex digits, the bytes in order.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct KeyId(pub [u8; 4]);

impl KeyId {
    /// The key id of the Ed25519 public key `public` named `name`.
    #[must_use]
    pub fn of(name: &str, public: &[u8; 32]) -> KeyId {
        let mut hasher = Sha256::new();
        hasher.update(name.as_bytes());
        hasher.update([b'\n', SIGNATURE_TYPE_ED25519]);
        hasher.update(public);
        let digest = hasher.finalize();
        let mut id = [0u8; 4];
        for (to, from) in id.iter_mut().zip(digest.iter()) {
            *to = *from;
        }
        KeyId(id)
    }

    /// Parses 8 hex digits (either case, as Go's parser takes them).
    fn from_hex(text: &str) -> Option<KeyId> {
        if text.len() != 8 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut id = [0u8; 4];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(KeyId(id))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Checks that `name` can name a key in a signed note: not empty, no Unicode white space, no
/// `+`, no control character, at most [`KEY_NAME_LEN_MAX`] bytes.
///
/// # Errors
/// [`CheckpointError::InvalidKeyName`] saying which rule the name breaks.
pub(crate) fn check_key_name(name: &str) -> Result<(), CheckpointError> {
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.len() > KEY_NAME_LEN_MAX {
        Some("is longer than 256 bytes")
    } else if name.chars().any(char::is_whitespace) {
        Some("contains a space (a key name holds no Unicode white space)")
    } else if name.contains('+') {
        Some("contains '+' (which separates the parts of a key's text)")
    } else if name.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(CheckpointError::InvalidKeyName {
            name: name.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// A public key that checks signatures: its name, key id and Ed25519 public key.
///
/// # Invariants
/// The name passes the key-name rules, and the key id is the one the name and key give.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    key_id: KeyId,
    key: ed25519_dalek::VerifyingKey,
}

impl VerifierKey {
    /// Reads a verifier key's text, `name+keyid+base64(0x01 || public key)`; white space around
    /// it (a file's final newline) is ignored.
    ///
    /// # Errors
    /// [`CheckpointError::KeyText`] when the text is not of that form (or is a private key's),
    /// [`CheckpointError::InvalidKeyName`] for a name a note cannot carry,
    /// [`CheckpointError::KeyIdMismatch`] when the key id is not the name's and key's.
    pub fn from_text(text: &str) -> Result<VerifierKey, CheckpointError> {
        let text = text.trim();
        if text.starts_with(PRIVATE_PREFIX) {
            return Err(key_text_error(
                "verifier",
                "this is a private key (PRIVATE+KEY+…); give the verifier key (the .pub file)",
            ));
        }
        let (name, key_id, key_bytes) = split_key_text("verifier", text)?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&key_bytes).map_err(|_| {
            key_text_error(
                "verifier",
                "the 32 bytes are not an Ed25519 public key (not a point of the curve)",
            )
        })?;
        let computed = KeyId::of(name, &key_bytes);
        if computed != key_id {
            return Err(CheckpointError::KeyIdMismatch {
                name: name.to_owned(),
                given: key_id,
                computed,
            });
        }
        Ok(VerifierKey {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// The text form, `name+keyid+base64(0x01 || public key)`, without a newline.
    #[must_use]
    pub fn to_text(&self) -> String {
        key_text(&self.name, self.key_id, self.key.as_bytes())
    }

    /// The key's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    #[must_use]
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// The Ed25519 public key's 32 bytes.
    #[must_use]
    pub fn public_key(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// `name+keyid`, how errors and reports name the key.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}+{}", self.name, self.key_id)
    }

    /// Checks `signature` (the bytes after the key id) over `message` with RFC 8032's strict
    /// verification (no small-order keys or commitments, a canonical `S`).
    ///
    /// # Errors
    /// [`CheckpointError::BadSignature`] naming this key.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), CheckpointError> {
        let bad = |problem| CheckpointError::BadSignature {
            key: self.label(),
            problem,
        };
        let signature = Signature::from_slice(signature)
            .map_err(|_| bad("an Ed25519 signature is 64 bytes"))?;
        self.key
            .verify_strict(message, &signature)
            .map_err(|_| bad("the text is not what this key signed"))
    }
}

impl fmt::Debug for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VerifierKey({})", self.to_text())
    }
}

/// A private key that signs checkpoints: its name and Ed25519 key. Its `Debug` form shows the
/// name and key id, never the seed.
///
/// # Invariants
/// The name passes the key-name rules; the key id is the one the name and public key give.
#[derive(Clone)]
pub struct SigningKey {
    name: String,
    key_id: KeyId,
    key: ed25519_dalek::SigningKey,
}

impl SigningKey {
    /// The key named `name` whose Ed25519 seed (RFC 8032's 32-byte private key) is `seed`.
    /// The caller draws the seed from the operating system's random source.
    ///
    /// # Errors
    /// [`CheckpointError::InvalidKeyName`] for a name a note cannot carry.
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SigningKey, CheckpointError> {
        check_key_name(name)?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let key_id = KeyId::of(name, key.verifying_key().as_bytes());
        Ok(SigningKey {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// The text form, `PRIVATE+KEY+name+keyid+base64(0x01 || seed)`, without a newline. It is
    /// the secret: whoever has it signs as this key.
    #[must_use]
    pub fn to_text(&self) -> String {
        format!(
            "{PRIVATE_PREFIX}{}",
            key_text(&self.name, self.key_id, self.key.as_bytes())
        )
    }

    /// Reads a private key's text, `PRIVATE+KEY+name+keyid+base64(0x01 || seed)`; white space
    /// around it is ignored.
    ///
    /// # Errors
    /// [`CheckpointError::KeyText`] when the text is not of that form,
    /// [`CheckpointError::InvalidKeyName`] for a name a note cannot carry,
    /// [`CheckpointError::KeyIdMismatch`] when the key id is not the name's and public key's.
    pub fn from_text(text: &str) -> Result<SigningKey, CheckpointError> {
        let rest = text.trim().strip_prefix(PRIVATE_PREFIX).ok_or_else(|| {
            key_text_error(
                "private",
                "it does not start with PRIVATE+KEY+ (is this a verifier key?)",
            )
        })?;
        let (name, key_id, seed) = split_key_text("private", rest)?;
        let key = SigningKey::from_seed(name, seed)?;
        if key.key_id != key_id {
            return Err(CheckpointError::KeyIdMismatch {
                name: name.to_owned(),
                given: key_id,
                computed: key.key_id,
            });
        }
        Ok(key)
    }

    /// The verifier key of this key.
    #[must_use]
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The key's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    #[must_use]
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// The Ed25519 signature of `message` (deterministic: one message, one signature).
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({}+{})", self.name, self.key_id)
    }
}

/// `name+keyid+base64(0x01 || key)`.
fn key_text(name: &str, key_id: KeyId, key: &[u8; 32]) -> String {
    let mut typed = Vec::with_capacity(33);
    typed.push(SIGNATURE_TYPE_ED25519);
    typed.extend_from_slice(key);
    format!("{name}+{key_id}+{}", BASE64.encode(typed))
}

fn key_text_error(kind: &'static str, problem: impl Into<String>) -> CheckpointError {
    CheckpointError::KeyText {
        kind,
        problem: problem.into(),
    }
}

/// Splits `name+keyid+base64(0x01 || 32 bytes)` into its name, key id and 32 key bytes.
fn split_key_text<'t>(
    kind: &'static str,
    text: &'t str,
) -> Result<(&'t str, KeyId, [u8; 32]), CheckpointError> {
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(hex), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(key_text_error(
            kind,
            "expected name+keyid+key, three parts separated by '+'",
        ));
    };
    check_key_name(name)?;
    let key_id = KeyId::from_hex(hex)
        .ok_or_else(|| key_text_error(kind, format!("the key id {hex:?} is not 8 hex digits")))?;
    let typed = BASE64
        .decode(key)
        .map_err(|e| key_text_error(kind, format!("the key is not base64: {e}")))?;
    match typed.split_first() {
        Some((&SIGNATURE_TYPE_ED25519, bytes)) => <[u8; 32]>::try_from(bytes)
            .map(|b| (name, key_id, b))
            .map_err(|_| {
                key_text_error(
                    kind,
                    format!(
                        "an Ed25519 key is 32 bytes after its type byte, not {}",
                        bytes.len()
                    ),
                )
            }),
        Some((other, _)) => Err(key_text_error(
            kind,
            format!("signature type {other:#04x} is not Ed25519 (0x01), the one type supported"),
        )),
        None => Err(key_text_error(kind, "the key is empty")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> SigningKey {
        SigningKey::from_seed(name, [7; 32]).unwrap()
    }

    #[test]
    fn key_texts_round_trip() {
        let key = key("example.com/log");
        let private = key.to_text();
        assert!(private.starts_with("PRIVATE+KEY+example.com/log+"));
        let back = SigningKey::from_text(&format!("{private}\n")).unwrap();
        assert_eq!(back.to_text(), private);
        let public = key.verifier().to_text();
        let verifier = VerifierKey::from_text(&format!("  {public}\n")).unwrap();
        assert_eq!(verifier, key.verifier());
        assert_eq!(verifier.name(), "example.com/log");
        assert_eq!(verifier.key_id(), key.key_id());
        assert_eq!(
            format!("{key:?}"),
            format!("SigningKey(example.com/log+{})", key.key_id())
        );
    }

    /// The example in the documentation of Go's `golang.org/x/mod/sumdb/note`: its private key
    /// text gives its verifier key text, and signing its text gives its signature line.
    #[test]
    fn keys_and_signatures_match_the_go_note_package() {
        let key = SigningKey::from_text(
            "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        )
        .unwrap();
        let verifier = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        assert_eq!(key.verifier().to_text(), verifier);
        assert_eq!(VerifierKey::from_text(verifier), Ok(key.verifier()));
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n";
        let mut signature = key.key_id().0.to_vec();
        signature.extend_from_slice(&key.sign(text.as_bytes()));
        assert_eq!(
            BASE64.encode(&signature),
            "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
        );
        assert_eq!(
            key.verifier().verify(text.as_bytes(), &signature[4..]),
            Ok(())
        );
    }

    #[test]
    fn the_key_id_is_the_first_four_bytes_of_sha256_of_name_newline_type_and_key() {
        let key = key("k");
        let mut input = b"k\n\x01".to_vec();
        input.extend_from_slice(&key.verifier().public_key());
        let digest = Sha256::digest(&input);
        assert_eq!(key.key_id().0, [digest[0], digest[1], digest[2], digest[3]]);
        assert_eq!(KeyId([0, 0xab, 0x10, 0xff]).to_string(), "00ab10ff");
        assert_eq!(
            KeyId::from_hex("00AB10ff"),
            Some(KeyId([0, 0xab, 0x10, 0xff]))
        );
        assert_eq!(KeyId::from_hex("00ab10f"), None);
        assert_eq!(KeyId::from_hex("+0ab10ff"), None);
    }

    #[test]
    fn names_with_spaces_plus_or_nothing_are_refused() {
        for (name, says) in [
            ("", "is empty"),
            ("a b", "contains a space"),
            ("a\u{a0}b", "contains a space"),
            ("a+b", "contains '+'"),
            ("a\u{7}b", "control character"),
        ] {
            let err = SigningKey::from_seed(name, [1; 32]).unwrap_err();
            assert!(err.to_string().contains(says), "{name:?}: {err}");
        }
        assert!(SigningKey::from_seed(&"n".repeat(257), [1; 32]).is_err());
        assert!(SigningKey::from_seed("agent-journal/0190-ab", [1; 32]).is_ok());
    }

    #[test]
    fn bad_key_texts_are_named() {
        let key = key("log");
        let public = key.verifier().to_text();
        let private = key.to_text();
        let says = |text: &str, what: &str| {
            let err = VerifierKey::from_text(text).unwrap_err().to_string();
            assert!(err.contains(what), "{text:?}: {err}");
        };
        says(&private, "this is a private key");
        says("log", "three parts");
        says(&public.replacen("+", "+x", 1), "not 8 hex digits");
        says(&format!("{public}!"), "not base64");
        says(&public.replace("log+", "lag+"), "the name and key give");
        let short = format!("log+{}+{}", key.key_id(), BASE64.encode([1u8; 5]));
        says(&short, "32 bytes after its type byte, not 4");
        let typed = format!("log+{}+{}", key.key_id(), BASE64.encode([4u8; 33]));
        says(&typed, "signature type 0x04 is not Ed25519");
        let err = SigningKey::from_text(&public).unwrap_err().to_string();
        assert!(err.contains("does not start with PRIVATE+KEY+"), "{err}");
        let other = SigningKey::from_seed("log", [8; 32]).unwrap();
        let forged = private.replace(&key.key_id().to_string(), &other.key_id().to_string());
        let err = SigningKey::from_text(&forged).unwrap_err();
        assert!(
            matches!(err, CheckpointError::KeyIdMismatch { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let (a, b) = (key("a"), SigningKey::from_seed("a", [9; 32]).unwrap());
        let signature = a.sign(b"text\n");
        assert_eq!(a.verifier().verify(b"text\n", &signature), Ok(()));
        let err = b.verifier().verify(b"text\n", &signature).unwrap_err();
        assert!(err.to_string().contains(&b.verifier().label()), "{err}");
        assert!(a.verifier().verify(b"text!\n", &signature).is_err());
        assert!(a.verifier().verify(b"text\n", &signature[..63]).is_err());
    }
}
