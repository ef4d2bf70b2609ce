//! The master key: 32 bytes read from a file or an environment variable as 64 hex digits,
//! which wraps (encrypts) every data key in the key store.

use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::seams::Entropy;

/// The environment variable holding a master key (64 hex digits).
pub const MASTER_KEY_ENV: &str = "JOURNAL_MASTER_KEY";

/// The length of a wrapped key: its 24-byte nonce, the 32 key bytes and a 16-byte tag.
pub(crate) const WRAPPED_LEN: usize = 24 + 32 + 16;

/// A master key. Its bytes are wiped from memory when it is dropped.
#[derive(Clone)]
pub struct MasterKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MasterKey({})", self.id())
    }
}

impl MasterKey {
    /// A new random master key.
    #[must_use]
    pub fn generate(entropy: &dyn Entropy) -> MasterKey {
        let mut bytes = Zeroizing::new([0u8; 32]);
        entropy.fill(&mut bytes[..]);
        MasterKey(bytes)
    }

    /// The key of 64 hex digits (surrounding white space ignored).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the text is not 64 hex digits.
    pub fn parse(text: &str) -> Result<MasterKey> {
        let text = text.trim();
        let bad = || {
            Error::InvalidInput(format!(
                "a master key is 64 hex digits; this one has {} characters",
                text.len()
            ))
        };
        if text.len() != 64 {
            return Err(bad());
        }
        let mut bytes = Zeroizing::new([0u8; 32]);
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = text.get(i * 2..i * 2 + 2).ok_or_else(bad)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(MasterKey(bytes))
    }

    /// The key held in `path` (64 hex digits).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file, or [`Error::InvalidInput`] for its content.
    pub fn from_file(path: &Path) -> Result<MasterKey> {
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(Error::io_with(|| {
            format!("reading the master key {}", path.display())
        }))?);
        MasterKey::parse(&text).map_err(|e| {
            Error::InvalidInput(format!("the master key file {}: {e}", path.display()))
        })
    }

    /// The key as 64 hex digits, for writing it to a file.
    #[must_use]
    pub fn to_hex(&self) -> Zeroizing<String> {
        let mut out = Zeroizing::new(String::with_capacity(64));
        for b in self.0.iter() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// The key's id: the first 8 bytes of the BLAKE3 hash of its bytes, in hex. The key store
    /// names the master key that wraps it by this id.
    #[must_use]
    pub fn id(&self) -> String {
        let hash = blake3::hash(&self.0[..]);
        hash.as_bytes()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// `key` encrypted under this master key with a random nonce, `label` bound to it.
    pub(crate) fn wrap(&self, label: &str, key: &[u8; 32], entropy: &dyn Entropy) -> Vec<u8> {
        let mut nonce = [0u8; 24];
        entropy.fill(&mut nonce);
        let cipher = XChaCha20Poly1305::new((&*self.0).into());
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: key,
                    aad: label.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(WRAPPED_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The key `wrapped` holds, if it opens under this master key with `label`.
    pub(crate) fn unwrap_key(&self, label: &str, wrapped: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
        if wrapped.len() != WRAPPED_LEN {
            return None;
        }
        let (nonce, sealed) = wrapped.split_at(24);
        let cipher = XChaCha20Poly1305::new((&*self.0).into());
        let plain = Zeroizing::new(
            cipher
                .decrypt(
                    XNonce::from_slice(nonce),
                    Payload {
                        msg: sealed,
                        aad: label.as_bytes(),
                    },
                )
                .ok()?,
        );
        let mut key = Zeroizing::new([0u8; 32]);
        key.copy_from_slice(plain.get(..32)?);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seams::SystemEntropy;

    #[test]
    fn a_wrapped_key_opens_only_with_its_master_key_and_label() {
        let master = MasterKey::generate(&SystemEntropy);
        let other = MasterKey::generate(&SystemEntropy);
        let wrapped = master.wrap("session:s1/1", &[9; 32], &SystemEntropy);
        assert_eq!(wrapped.len(), WRAPPED_LEN);
        assert_eq!(
            master.unwrap_key("session:s1/1", &wrapped).map(|k| *k),
            Some([9; 32])
        );
        assert!(master.unwrap_key("session:s2/1", &wrapped).is_none());
        assert!(other.unwrap_key("session:s1/1", &wrapped).is_none());
    }

    #[test]
    fn a_master_key_reads_back_from_its_hex() {
        let master = MasterKey::generate(&SystemEntropy);
        let again = MasterKey::parse(&master.to_hex()).expect("parses");
        assert_eq!(again.id(), master.id());
        assert!(MasterKey::parse("abc").is_err());
        assert!(MasterKey::parse(&"zz".repeat(32)).is_err());
    }
}
