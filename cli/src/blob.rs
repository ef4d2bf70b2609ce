//! `journal blob put FILE` and `journal blob get REF`: large outputs stored beside the log and
//! referenced as `blake3:<hex>`.

use std::path::PathBuf;

use clap::Subcommand;
use journal_engine::Journal;
use serde_json::json;

use crate::{fail, out, Failure};

/// `journal blob`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum BlobCommand {
    /// Store a file; prints its reference.
    Put {
        /// The file to store.
        file: PathBuf,
    },
    /// Write a blob's bytes to standard output.
    Get {
        /// The reference (`blake3:<hex>`) or hex.
        reference: String,
    },
}

/// Stores a file and prints its reference, or writes a blob's bytes.
pub fn run(journal: &Journal, command: &BlobCommand) -> Result<u8, Failure> {
    match command {
        BlobCommand::Put { file } => {
            let bytes =
                std::fs::read(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
            let reference = journal.blobs().put(&bytes)?;
            out::line(json!({"ref": reference, "bytes": bytes.len()}))?;
            Ok(0)
        }
        BlobCommand::Get { reference } => match journal.blobs().get(reference)? {
            Some(bytes) => {
                out::bytes(&bytes)?;
                Ok(0)
            }
            None => Err(fail(format!("no blob {reference}"))),
        },
    }
}
