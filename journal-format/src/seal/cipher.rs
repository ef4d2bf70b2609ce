//! The two ciphers of sealed content, each with its plaintext's form: [`Form::Siv`], the one
//! written (AES-256-GCM-SIV over the content as MessagePack, under a key of its own derived
//! from the event key), and [`Form::XChaCha`], read (XChaCha20-Poly1305 over the content as
//! JSON, marked by its stored nonce). Both bind the event id and the key reference as
//! associated data, so content cannot be moved to another event or key.

use aes_gcm_siv::aead::AeadInPlace;
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::SealError;

/// How a sealed content was encrypted, and so how it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// AES-256-GCM-SIV (RFC 8452) under a key derived from the event key, with the all-zero
    /// nonce, over the content as a MessagePack map. An event key seals only the event of its
    /// id, and GCM-SIV derives its IV from the key, the associated data and the plaintext: the
    /// same event seals to the same bytes, and the nonce repeated under one key (an event sent
    /// again) reveals at most that two plaintexts are equal (RFC 8452 §9).
    Siv,
    /// XChaCha20-Poly1305 under the event key and this 24-byte nonce (a keyed hash of the
    /// plaintext), over the content as a JSON object: the form journals sealed before
    /// [`Form::Siv`] hold, read and never written.
    XChaCha {
        /// The nonce, as stored.
        nonce: [u8; 24],
    },
}

/// The nonce of [`Form::Siv`]: an event key seals only the event of its id.
const SIV_NONCE: [u8; 12] = [0; 12];

/// The AES-256-GCM-SIV key of an event: `BLAKE3-keyed(key = event key, SIV_KEY_CONTEXT)`, so
/// that no key serves two ciphers (the event key is [`Form::XChaCha`]'s).
fn siv_key(event_key: &[u8; 32]) -> Aes256GcmSiv {
    let key = zeroize::Zeroizing::new(*blake3::keyed_hash(event_key, SIV_KEY_CONTEXT).as_bytes());
    Aes256GcmSiv::new((&*key).into())
}

/// What [`siv_key`] hashes.
const SIV_KEY_CONTEXT: &[u8] = b"journal sealed content v2 AES-256-GCM-SIV";

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
    siv_key(event_key)
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
        Form::Siv => siv_key(event_key)
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

/// Seals `plaintext` (the content as JSON) in [`Form::XChaCha`]: for the tests that open
/// that form.
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
