//! The two ciphers of sealed content, each with its plaintext's form: [`Form::Siv`], the one
//! written (AES-256-GCM-SIV over the content as MessagePack), and [`Form::XChaCha`], the first
//! form, read so that journals sealed with it stay readable (XChaCha20-Poly1305 over the
//! content as JSON). Both bind the event id and the key reference as associated data, so
//! content cannot be moved to another event or key.

use aes_gcm_siv::aead::AeadInPlace;
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::SealError;

/// How a sealed content was encrypted, and so how it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// AES-256-GCM-SIV (RFC 8452) with the all-zero nonce, over the content as a MessagePack
    /// map. Each event key seals one event, and GCM-SIV derives its IV from the key, the
    /// associated data and the plaintext, so the same event seals to the same bytes and a
    /// repeated nonce reveals at most that two plaintexts are equal (RFC 8452 §9).
    Siv,
    /// XChaCha20-Poly1305 under this 24-byte nonce (a keyed hash of the plaintext), over the
    /// content as a JSON object: the form journals were first sealed in.
    XChaCha {
        /// The nonce, as stored.
        nonce: [u8; 24],
    },
}

/// The nonce of [`Form::Siv`]: each event key seals a single event.
const SIV_NONCE: [u8; 12] = [0; 12];

/// Seals `plaintext` (the content as MessagePack) in place in [`Form::Siv`]: it becomes the
/// ciphertext followed by its 16-byte tag.
///
/// # Errors
/// [`SealError::Malformed`] when the plaintext is longer than GCM-SIV takes (2³⁶ bytes).
pub(super) fn seal(
    event_id: &str,
    key_ref: &str,
    event_key: &[u8; 32],
    plaintext: &mut Vec<u8>,
) -> Result<(), SealError> {
    let aad = associated_data(event_id, key_ref);
    Aes256GcmSiv::new(event_key.into())
        .encrypt_in_place(Nonce::from_slice(&SIV_NONCE), &aad, plaintext)
        .map_err(|_| SealError::Malformed("the content is too long to seal".into()))
}

/// Opens `data` (ciphertext and tag) sealed in `form` into its plaintext, in place.
///
/// # Errors
/// [`SealError::NotOpened`] when the key is not the one it was sealed under or the bytes, the
/// event id or the key reference were altered.
pub(super) fn open(
    form: Form,
    event_id: &str,
    key_ref: &str,
    event_key: &[u8; 32],
    data: &mut Vec<u8>,
) -> Result<(), SealError> {
    let aad = associated_data(event_id, key_ref);
    match form {
        Form::Siv => Aes256GcmSiv::new(event_key.into())
            .decrypt_in_place(Nonce::from_slice(&SIV_NONCE), &aad, data)
            .map_err(|_| SealError::NotOpened),
        Form::XChaCha { nonce } => {
            let payload = Payload {
                msg: data.as_slice(),
                aad: &aad,
            };
            *data = XChaCha20Poly1305::new(event_key.into())
                .decrypt(XNonce::from_slice(&nonce), payload)
                .map_err(|_| SealError::NotOpened)?;
            Ok(())
        }
    }
}

/// The associated data: `eventId` 0x00 `key reference`.
fn associated_data(event_id: &str, key_ref: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(event_id.len() + key_ref.len() + 1);
    aad.extend_from_slice(event_id.as_bytes());
    aad.push(0);
    aad.extend_from_slice(key_ref.as_bytes());
    aad
}

/// Seals `plaintext` (the content as JSON) in [`Form::XChaCha`], as journals were first
/// sealed: for the tests that show such journals still open.
#[cfg(test)]
pub(super) fn seal_xchacha(
    event_id: &str,
    key_ref: &str,
    event_key: &[u8; 32],
    plaintext: &[u8],
) -> ([u8; 24], Vec<u8>) {
    let mut nonce = [0u8; 24];
    nonce.copy_from_slice(&blake3::keyed_hash(event_key, plaintext).as_bytes()[..24]);
    let aad = associated_data(event_id, key_ref);
    let payload = Payload {
        msg: plaintext,
        aad: &aad,
    };
    let data = XChaCha20Poly1305::new(event_key.into())
        .encrypt(XNonce::from_slice(&nonce), payload)
        .expect("XChaCha20-Poly1305 seals any length an event holds");
    (nonce, data)
}
