//! `journal check-proof` and `journal checkpoint verify|cosign`: what an auditor runs, with
//! nothing but a proof document or a checkpoint and the verifier keys; no journal is opened.
//! A proof or checkpoint that does not hold exits 3, like any other evidence found wrong
//! (`verify`, `rebuild --verify`).

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use journal_format::checkpoint::{SignedCheckpoint, SigningKey, VerifierKey, NOTE_LEN_MAX};
use journal_format::proof::{ProofDocument, DOCUMENT_LEN_MAX};
use serde_json::json;

use crate::key::sync_dir;
use crate::{fail, out, Failure};

/// The exit code of a proof or checkpoint that does not hold.
const REFUSED: u8 = 3;
/// The longest key file read, in bytes.
const KEY_FILE_LEN_MAX: usize = 4096;

/// `journal check-proof`'s arguments.
#[derive(Args, Debug)]
pub struct CheckProofArgs {
    /// The proof document (JSON); `-` for standard input.
    file: PathBuf,
    /// A verifier key file (`NAME.pub`) whose signature on the checkpoint is trusted; repeat
    /// for several. Without one, the signatures are not checked (and the output says so).
    #[arg(long = "key", value_name = "PUBKEY_FILE")]
    keys: Vec<PathBuf>,
    /// Print what was established (or why not) as JSON.
    #[arg(long)]
    json: bool,
}

/// `journal checkpoint`'s subcommands: `verify` and `cosign` work on a file alone; the others
/// on the journal (`crate::prove`).
#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// Check a signed checkpoint's signatures with verifier keys.
    Verify(VerifyArgs),
    /// Add a witness's signature to a signed checkpoint (the file is replaced whole).
    Cosign(CosignArgs),
    /// Sign a checkpoint of the journal's tree head with a key, keep it and print it.
    Sign(crate::prove::SignArgs),
    /// List the checkpoints the journal keeps, a JSON line each.
    List,
    /// Print a kept checkpoint (a tree size, or `latest`) as text to paste into a ticket.
    Show(crate::prove::ShowArgs),
    /// Keep a checkpoint of this journal a witness cosigned, once it matches the journal.
    Keep(crate::prove::KeepArgs),
}

impl CheckpointCommand {
    /// Whether the subcommand works on a file alone, opening no journal.
    #[must_use]
    pub fn offline(&self) -> bool {
        matches!(
            self,
            CheckpointCommand::Verify(_) | CheckpointCommand::Cosign(_)
        )
    }

    /// Whether the subcommand writes to the journal.
    #[must_use]
    pub fn writes(&self) -> bool {
        matches!(
            self,
            CheckpointCommand::Sign(_) | CheckpointCommand::Keep(_)
        )
    }
}

/// `journal checkpoint verify`'s arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The signed checkpoint; `-` for standard input.
    file: PathBuf,
    /// A trusted verifier key file (`NAME.pub`); repeat for several.
    #[arg(long = "key", value_name = "PUBKEY_FILE", required = true)]
    keys: Vec<PathBuf>,
    /// Print the checkpoint and its signers as JSON.
    #[arg(long)]
    json: bool,
}

/// `journal checkpoint cosign`'s arguments.
#[derive(Args, Debug)]
pub struct CosignArgs {
    /// The signed checkpoint file to add the signature to.
    file: PathBuf,
    /// The witness's private key file (`NAME.key`).
    #[arg(long = "key", value_name = "WITNESS_KEY_FILE")]
    key: PathBuf,
}

fn refused(message: String) -> Failure {
    Failure {
        code: REFUSED,
        message,
    }
}

/// Reads `path` (`-`: standard input) as text of at most `limit` bytes.
pub(crate) fn read_text(path: &Path, limit: usize, what: &str) -> Result<String, Failure> {
    let in_path = |e: io::Error| fail(format!("{what} {}: {e}", path.display()));
    let reader: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(fs::File::open(path).map_err(in_path)?)
    };
    let mut bytes = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(in_path)?;
    if bytes.len() > limit {
        return Err(refused(format!(
            "{what} {}: longer than the {limit} bytes one may hold",
            path.display()
        )));
    }
    String::from_utf8(bytes)
        .map_err(|e| refused(format!("{what} {}: not UTF-8: {e}", path.display())))
}

/// The verifier keys of the files `paths`.
fn read_keys(paths: &[PathBuf]) -> Result<Vec<VerifierKey>, Failure> {
    paths
        .iter()
        .map(|path| {
            let text =
                read_text(path, KEY_FILE_LEN_MAX, "key file").map_err(|f| fail(f.message))?;
            VerifierKey::from_text(&text)
                .map_err(|e| fail(format!("key file {}: {e}", path.display())))
        })
        .collect()
}

/// `journal check-proof`: exit 0 with what the proof established, or 3 with why it does not
/// hold.
pub fn check_proof(args: &CheckProofArgs) -> Result<u8, Failure> {
    let keys = read_keys(&args.keys)?;
    let verdict = read_text(&args.file, DOCUMENT_LEN_MAX, "proof document")
        .and_then(|text| ProofDocument::from_json(&text).map_err(|e| refused(e.to_string())))
        .and_then(|document| document.check(&keys).map_err(|e| refused(e.to_string())));
    match (verdict, args.json) {
        (Ok(checked), true) => {
            let mut value = serde_json::to_value(&checked).map_err(|e| fail(e.to_string()))?;
            if let Some(object) = value.as_object_mut() {
                object.insert("ok".into(), true.into());
            }
            out::line(&value)?;
            Ok(0)
        }
        (Ok(checked), false) => {
            out::text(&checked)?;
            Ok(0)
        }
        (Err(f), true) if f.code == REFUSED => {
            out::line(json!({"ok": false, "problem": f.message}))?;
            Ok(REFUSED)
        }
        (Err(f), _) if f.code == REFUSED => Err(refused(format!("proof refused: {}", f.message))),
        (Err(f), _) => Err(f),
    }
}

/// Runs a `journal checkpoint` subcommand.
pub fn checkpoint(command: &CheckpointCommand) -> Result<u8, Failure> {
    match command {
        CheckpointCommand::Verify(args) => verify(args),
        CheckpointCommand::Cosign(args) => cosign(args),
        // Answered by `crate::prove::checkpoint`, on the journal.
        CheckpointCommand::Sign(_)
        | CheckpointCommand::List
        | CheckpointCommand::Show(_)
        | CheckpointCommand::Keep(_) => Ok(0),
    }
}

fn verify(args: &VerifyArgs) -> Result<u8, Failure> {
    let keys = read_keys(&args.keys)?;
    let text = read_text(&args.file, NOTE_LEN_MAX, "checkpoint")?;
    let refuse = |e: journal_format::checkpoint::CheckpointError| {
        refused(format!("checkpoint refused: {e}"))
    };
    let signed = SignedCheckpoint::parse(&text).map_err(refuse)?;
    let signers = signed.verify(&keys).map_err(refuse)?;
    let c = &signed.checkpoint;
    if args.json {
        out::line(json!({
            "ok": true,
            "origin": c.origin,
            "tree_size": c.tree_size,
            "root": c.root.to_hex(),
            "chain_position": c.chain_position.0,
            "chain_hash": c.chain_hash.to_hex(),
            "time_ns": c.time_ns,
            "signers": signers,
        }))?;
    } else {
        out::line(format_args!(
            "checkpoint {} of {} events, root {}, chain head {} {}: signed by {}",
            c.origin,
            c.tree_size,
            c.root,
            c.chain_position,
            c.chain_hash.to_hex(),
            signers.join(", ")
        ))?;
    }
    Ok(0)
}

/// The private key of the file `path` (`NAME.key`).
pub(crate) fn read_signing_key(path: &Path) -> Result<SigningKey, Failure> {
    let text = read_text(path, KEY_FILE_LEN_MAX, "key file").map_err(|f| fail(f.message))?;
    SigningKey::from_text(&text).map_err(|e| fail(format!("key file {}: {e}", path.display())))
}

fn cosign(args: &CosignArgs) -> Result<u8, Failure> {
    let witness = read_signing_key(&args.key)?;
    let text = read_text(&args.file, NOTE_LEN_MAX, "checkpoint").map_err(|f| fail(f.message))?;
    let mut signed = SignedCheckpoint::parse(&text)
        .map_err(|e| fail(format!("checkpoint {}: {e}", args.file.display())))?;
    signed
        .cosign(&witness)
        .map_err(|e| fail(format!("checkpoint {}: {e}", args.file.display())))?;
    replace_file(&args.file, &signed.to_text())?;
    out::line(format_args!(
        "{}: cosigned by {}+{}",
        args.file.display(),
        witness.name(),
        witness.key_id()
    ))?;
    Ok(0)
}

/// Replaces `path` with `text` whole: a new file beside it (with the old file's permissions),
/// synced, renamed over it, and the directory synced.
fn replace_file(path: &Path, text: &str) -> Result<(), Failure> {
    let in_path = |e: io::Error| fail(format!("{}: {e}", path.display()));
    let mode = fs::metadata(path).map_err(in_path)?.permissions().mode() & 0o777;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".cosign.tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| fail(format!("{}: {e}", tmp.display())))?;
    let written = file
        .set_permissions(Permissions::from_mode(mode))
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(in_path(e));
    }
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}
