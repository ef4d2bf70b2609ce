//! What a test reads off a journal's directory by itself, not through the engine: the files
//! holding given bytes (proof that plaintext or a destroyed key is gone), and a data key of the
//! key store unwrapped as docs/FORMAT.md lays the store out.

use std::path::Path;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde_json::Value;

use crate::Res;

/// Every file under `dir`, with its bytes.
///
/// # Errors
/// Listing or reading a file.
pub fn files(dir: &Path) -> Res<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(files(&path)?);
        } else {
            out.push((path.display().to_string(), std::fs::read(&path)?));
        }
    }
    Ok(out)
}

/// The files under `dir` whose bytes hold `needle`.
///
/// # Errors
/// Listing or reading a file.
pub fn holding(dir: &Path, needle: &[u8]) -> Res<Vec<String>> {
    Ok(files(dir)?
        .into_iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(name, _)| name)
        .collect())
}

/// The data key `key_ref` of the key store (`KEYS`) in `dir`, unwrapped with the master key
/// `master_hex` (64 hex digits) as docs/FORMAT.md lays the store out: base64 of a 24-byte
/// nonce and the XChaCha20-Poly1305 ciphertext, the key reference as associated data. Also
/// the wrapped text, as the store holds it.
///
/// # Errors
/// No store, no such key, or a key that does not unwrap.
pub fn data_key(dir: &Path, master_hex: &str, key_ref: &str) -> Res<([u8; 32], String)> {
    let store: Value = serde_json::from_slice(&std::fs::read(dir.join("KEYS"))?)?;
    let wrapped = store["keys"][key_ref]
        .as_str()
        .ok_or_else(|| format!("the key store holds no key {key_ref}"))?
        .to_string();
    let bytes = base64::engine::general_purpose::STANDARD.decode(&wrapped)?;
    let master = (0..32)
        .map(|i| {
            master_hex
                .get(i * 2..i * 2 + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or("the master key is not 64 hex digits")?;
    let (nonce, sealed) = (
        bytes
            .get(..24)
            .ok_or("a wrapped key shorter than its nonce")?,
        bytes.get(24..).unwrap_or_default(),
    );
    let key = XChaCha20Poly1305::new(master.as_slice().into())
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: sealed,
                aad: key_ref.as_bytes(),
            },
        )
        .map_err(|_| format!("{key_ref} does not unwrap with the master key"))?;
    let key: [u8; 32] = key
        .try_into()
        .map_err(|_| format!("{key_ref} is not 32 bytes"))?;
    Ok((key, wrapped))
}
