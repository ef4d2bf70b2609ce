//! Signed checkpoints: the journal's tree head and chain head in a text an auditor keeps, signed
//! with Ed25519 in the C2SP signed-note format, so that a verifier of signed notes (Go's
//! `golang.org/x/mod/sumdb/note`, or one written from `docs/FORMAT.md`, "Checkpoints and proof
//! documents") checks the signatures. Keys, their text forms and the note's layout live here;
//! what a checkpoint proves about a proof document is [`crate::proof`]'s.
//!
//! A checkpoint's body is five lines, each ending in a newline: the origin (the journal's
//! identity, [`Checkpoint::origin_for`]), the tree size in decimal, the root in base64 (these
//! three are exactly a C2SP `tlog-checkpoint`), then the extension lines
//! `chain <position> <chain hash hex>` and `time <RFC 3339 UTC, nine fractional digits>`.
//! A signed checkpoint is the body, an empty line, and one line per signature:
//! `— <key name> <base64(key id || Ed25519 signature)>`.
//!
//! Only the canonical text is accepted: every number without leading zeros, hex in lower case,
//! base64 with its padding and no stray bits, the time in the one form [`Checkpoint::body`]
//! writes. So one checkpoint has one text, the text a signature covers is the body
//! [`Checkpoint::body`] gives back, and a single changed bit anywhere in a signed checkpoint
//! makes it fail to parse or to verify.
//!
//! Pure: no I/O, no clock, no randomness (a key is made from a seed the caller draws).

use thiserror::Error;

mod body;
mod key;
mod note;

pub(crate) use body::format_time;
pub use body::Checkpoint;
pub use key::{KeyId, SigningKey, VerifierKey, SIGNATURE_TYPE_ED25519};
pub use note::{NoteSignature, SignedCheckpoint};

/// The longest signed checkpoint text accepted, in bytes.
pub const NOTE_LEN_MAX: usize = 1024 * 1024;
/// The most signature lines a signed checkpoint may hold (Go's `note.Open` takes up to 100; the
/// signed-note specification asks verifiers to take at least 16).
pub const SIGNATURES_MAX: usize = 100;
/// The longest origin accepted, in bytes.
pub const ORIGIN_LEN_MAX: usize = 1024;
/// The longest key name accepted, in bytes.
pub const KEY_NAME_LEN_MAX: usize = 256;

/// What is wrong with a checkpoint, a signed checkpoint's text, a key's text, or a signature.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A key name is not one a signed note can carry.
    #[error("key name {name:?} {problem}")]
    InvalidKeyName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A checkpoint's origin cannot be the first line of a note.
    #[error("origin {origin:?} {problem}")]
    InvalidOrigin {
        /// The origin given.
        origin: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A key's text form is not `name+keyid+base64` (or `PRIVATE+KEY+name+keyid+base64`).
    #[error("{kind} key text: {problem}")]
    KeyText {
        /// `verifier` or `private`.
        kind: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A key's text names a key id that is not the one its name and key give.
    #[error("key {name}: the text says key id {given}, but the name and key give {computed}")]
    KeyIdMismatch {
        /// The key's name.
        name: String,
        /// The key id the text gives.
        given: KeyId,
        /// The key id computed from the name and the public key.
        computed: KeyId,
    },
    /// A signed note's text breaks the signed-note format.
    #[error("malformed signed checkpoint: {0}")]
    MalformedNote(String),
    /// A checkpoint body's line is not what that line must be.
    #[error("checkpoint body line {line} ({what}): {problem}")]
    Body {
        /// The line, from 1.
        line: usize,
        /// What the line holds: `origin`, `tree size`, ...
        what: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A signature by a given key does not verify: the note was changed, or not signed by it.
    #[error("the signature by key {key} does not verify: {problem}")]
    BadSignature {
        /// The key, as `name+keyid`.
        key: String,
        /// Why.
        problem: &'static str,
    },
    /// No signature of the note is by any of the keys given.
    #[error("no signature by any key given (keys: {keys}; the note is signed by: {signers})")]
    NotSignedByGivenKey {
        /// The keys given, as `name+keyid`, comma-separated (`none` for none).
        keys: String,
        /// The note's signers, as `name+keyid`, comma-separated.
        signers: String,
    },
}

/// Where `text` holds its first ASCII control character (below U+0020) other than a newline,
/// which a signed note must not hold.
fn control_character_at(text: &str) -> Option<usize> {
    text.bytes().position(|b| b < 0x20 && b != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_found_but_not_newlines() {
        assert_eq!(control_character_at("a\nb"), None);
        assert_eq!(control_character_at("a\tb"), Some(1));
        assert_eq!(control_character_at("ab\r"), Some(2));
        assert_eq!(control_character_at("é—"), None);
    }
}
