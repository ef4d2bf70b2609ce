//! The journal's encryption at rest as its API shows it: the master key rotated, and the key
//! store's summary (docs/REDACTION.md).

use serde_json::Value;

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::keys::MasterKey;

impl Journal {
    /// Re-wraps every data key under `new` and replaces the key store; the log is not touched.
    /// From then on the journal opens with `new` only.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the journal is not encrypted (or was opened without its
    /// master key); I/O errors (the store under the old key then holds).
    pub fn rotate_master_key(&self, new: &MasterKey) -> Result<()> {
        match &self.inner.keys {
            Some(keys) => keys.rotate(new),
            None => Err(Error::InvalidInput(
                "this journal is not encrypted (or was opened without its master key)".into(),
            )),
        }
    }

    /// The key store's summary (master key id, subject, counts of keys, destroyed keys and
    /// redacted events), `None` when the journal is not encrypted or was opened without its
    /// master key.
    #[must_use]
    pub fn key_status(&self) -> Option<Value> {
        self.inner.keys.as_ref().map(|k| k.status())
    }
}
