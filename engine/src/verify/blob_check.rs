//! The blobs against their hashes, as `verify` checks them: every blob the log references, then
//! every other blob stored.

use std::collections::BTreeMap;

use journal_format::Position;

use crate::blobs::{BlobCheck, BlobStore};
use crate::error::Result;
use crate::verify::report::Problems;

/// Checks every blob in `refs` (hex hash → the first position referencing it) against its hash,
/// then every other blob in `blobs`.
///
/// # Errors
/// Failing to read the blob store.
pub(super) fn check_blobs(
    blobs: &BlobStore,
    refs: &BTreeMap<String, Position>,
    problems: &mut Problems,
) -> Result<()> {
    let shredded = blobs.shredded()?;
    for (hex, position) in refs {
        match blobs.check(hex)? {
            BlobCheck::Ok => {}
            // Destroyed by a redaction, on purpose.
            BlobCheck::Missing if shredded.contains(hex) => {}
            BlobCheck::Missing => problems.problem(
                "blob_missing",
                None,
                None,
                Some(*position),
                format!("blob {hex} is referenced but not stored"),
            ),
            BlobCheck::Mismatch { actual } => problems.problem(
                "blob_mismatch",
                None,
                None,
                Some(*position),
                format!("blob {hex} holds bytes hashing to {actual}"),
            ),
        }
    }
    for hex in blobs.list()? {
        if !refs.contains_key(&hex) {
            if let BlobCheck::Mismatch { actual } = blobs.check(&hex)? {
                problems.problem(
                    "blob_mismatch",
                    None,
                    None,
                    None,
                    format!("blob {hex} holds bytes hashing to {actual}"),
                );
            }
        }
    }
    Ok(())
}
