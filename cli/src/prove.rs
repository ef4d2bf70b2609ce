//! `journal prove inclusion|consistency` and the `journal checkpoint` subcommands that use the
//! journal (`sign`, `list`, `show`, `keep`): proof documents built from the journal's Merkle
//! tree against the checkpoints it keeps, for `journal check-proof` to check offline.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use journal_engine::Journal;
use journal_format::checkpoint::{SignedCheckpoint, NOTE_LEN_MAX};
use journal_format::merkle::leaf_hash;
use journal_format::proof::{
    ConsistencyProof, InclusionProof, ProofDocument, CONSISTENCY_FORMAT, INCLUSION_FORMAT,
};
use journal_format::time_fmt;
use serde_json::json;

use crate::proof::{read_signing_key, read_text, CheckpointCommand};
use crate::{fail, out, Failure};

/// `journal prove`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum ProveCommand {
    /// That an event is in the journal: its inclusion proof against a signed checkpoint.
    Inclusion(InclusionArgs),
    /// That the journal only grew between two tree sizes: a consistency proof between their
    /// checkpoints.
    Consistency(ConsistencyArgs),
}

/// Where a proof is written, and what signs a checkpoint when none is kept.
#[derive(Args, Debug)]
pub struct Output {
    /// Sign a checkpoint of the tree head with this private key (`NAME.key`) when no kept
    /// checkpoint serves.
    #[arg(long, value_name = "KEY_FILE")]
    key: Option<PathBuf>,
    /// Write the proof document here instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// `journal prove inclusion`'s arguments.
#[derive(Args, Debug)]
pub struct InclusionArgs {
    /// The event's id.
    event_id: String,
    /// The tree size to prove against (default: the latest kept checkpoint that holds the
    /// event, else the tree head).
    #[arg(long)]
    size: Option<u64>,
    #[command(flatten)]
    output: Output,
}

/// `journal prove consistency`'s arguments.
#[derive(Args, Debug)]
pub struct ConsistencyArgs {
    /// The older tree size (an earlier checkpoint's).
    old_size: u64,
    /// The newer tree size (default: the latest kept checkpoint's, else the tree head).
    new_size: Option<u64>,
    #[command(flatten)]
    output: Output,
}

/// Runs a `journal prove` subcommand.
pub fn prove(journal: &Journal, command: &ProveCommand) -> Result<u8, Failure> {
    let (document, output) = match command {
        ProveCommand::Inclusion(args) => (inclusion(journal, args)?, &args.output),
        ProveCommand::Consistency(args) => (consistency(journal, args)?, &args.output),
    };
    let text = document.to_json();
    match &output.out {
        Some(path) => std::fs::write(path, format!("{text}\n"))
            .map_err(|e| fail(format!("writing {}: {e}", path.display())))?,
        None => out::line(&text)?,
    }
    Ok(0)
}

/// The checkpoint a proof of tree size `size` (or, without one, of a tree holding `needed`
/// events) is against: the one kept, else one signed now with `key` when the size is the
/// head's; `None` (an unsigned tree head, said on standard error) when neither.
fn checkpoint_for(
    journal: &Journal,
    size: Option<u64>,
    needed: u64,
    key: Option<&Path>,
) -> Result<(u64, Option<SignedCheckpoint>), Failure> {
    let head = journal.head().position.0;
    let kept = match size {
        Some(size) => journal.checkpoint(size)?,
        None => journal
            .latest_checkpoint()?
            .filter(|c| c.checkpoint.tree_size >= needed),
    };
    if let Some(kept) = kept {
        return Ok((kept.checkpoint.tree_size, Some(kept)));
    }
    let size = size.unwrap_or(head);
    if let Some(key) = key.filter(|_| size == head) {
        let signed = journal.sign_checkpoint(&read_signing_key(key)?)?;
        return Ok((signed.checkpoint.tree_size, Some(signed)));
    }
    out::warn(format_args!(
        "journal: no signed checkpoint of {size} events is kept: the proof is against the unsigned tree head (sign one with `journal checkpoint sign --key`, or pass --key)"
    ));
    Ok((size, None))
}

fn inclusion(journal: &Journal, args: &InclusionArgs) -> Result<ProofDocument, Failure> {
    let event = journal
        .get(&args.event_id)?
        .ok_or_else(|| fail(format!("no event with id {:?}", args.event_id)))?;
    let position = event.position;
    let (size, checkpoint) =
        checkpoint_for(journal, args.size, position.0, args.output.key.as_deref())?;
    let path = journal.inclusion_proof(position, size)?;
    let body = journal.stored_body(position)?;
    Ok(ProofDocument::Inclusion(InclusionProof {
        format: INCLUSION_FORMAT.into(),
        event_id: args.event_id.clone(),
        position: position.0,
        leaf_index: position.0 - 1,
        tree_size: size,
        leaf_hash: leaf_hash(&body),
        path,
        root: journal.tree_root(size)?,
        body: InclusionProof::encode_body(&body),
        checkpoint: checkpoint.map(|c| c.to_text()),
    }))
}

fn consistency(journal: &Journal, args: &ConsistencyArgs) -> Result<ProofDocument, Failure> {
    let (new_size, new_checkpoint) = checkpoint_for(
        journal,
        args.new_size,
        args.old_size,
        args.output.key.as_deref(),
    )?;
    if args.old_size > new_size {
        return Err(fail(format!(
            "the older size {} is beyond the newer {new_size}",
            args.old_size
        )));
    }
    let old_checkpoint = journal.checkpoint(args.old_size)?;
    if old_checkpoint.is_none() {
        out::warn(format_args!(
            "journal: no signed checkpoint of {} events is kept: the older tree head is unsigned",
            args.old_size
        ));
    }
    Ok(ProofDocument::Consistency(ConsistencyProof {
        format: CONSISTENCY_FORMAT.into(),
        old_size: args.old_size,
        old_root: journal.tree_root(args.old_size)?,
        new_size,
        new_root: journal.tree_root(new_size)?,
        path: journal.consistency_proof(args.old_size, new_size)?,
        old_checkpoint: old_checkpoint.map(|c| c.to_text()),
        new_checkpoint: new_checkpoint.map(|c| c.to_text()),
    }))
}

/// `journal checkpoint sign`'s arguments.
#[derive(Args, Debug)]
pub struct SignArgs {
    /// The private key (`NAME.key`) that signs.
    #[arg(long, value_name = "KEY_FILE")]
    key: PathBuf,
}

/// `journal checkpoint show`'s arguments.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The checkpoint's tree size, or `latest`.
    #[arg(default_value = "latest")]
    size: String,
}

/// `journal checkpoint keep`'s arguments.
#[derive(Args, Debug)]
pub struct KeepArgs {
    /// A checkpoint of this journal (a witness's cosigned copy, say); `-` for standard input.
    file: PathBuf,
}

/// Runs a `journal checkpoint` subcommand that uses the journal.
pub fn checkpoint(journal: &Journal, command: &CheckpointCommand) -> Result<u8, Failure> {
    match command {
        CheckpointCommand::Sign(args) => sign(journal, args),
        CheckpointCommand::List => list(journal),
        CheckpointCommand::Show(args) => show(journal, args),
        CheckpointCommand::Keep(args) => keep(journal, args),
        // Answered by `proof::checkpoint`, with no journal.
        CheckpointCommand::Verify(_) | CheckpointCommand::Cosign(_) => Ok(0),
    }
}

/// `journal checkpoint sign`: signs the tree head, keeps the checkpoint and prints it.
fn sign(journal: &Journal, args: &SignArgs) -> Result<u8, Failure> {
    let signed = journal.sign_checkpoint(&read_signing_key(&args.key)?)?;
    out::text(signed.to_text())?;
    Ok(0)
}

/// `journal checkpoint list`: a JSON line per kept checkpoint.
fn list(journal: &Journal) -> Result<u8, Failure> {
    for size in journal.checkpoint_sizes()? {
        let Some(signed) = journal.checkpoint(size)? else {
            continue;
        };
        let c = &signed.checkpoint;
        out::line(json!({
            "tree_size": c.tree_size,
            "root": c.root.to_hex(),
            "chain_position": c.chain_position.0,
            "time": time_fmt::format_rfc3339_ns(c.time_ns),
            "signers": signed.signatures.iter().map(|s| s.label()).collect::<Vec<_>>(),
        }))?;
    }
    Ok(0)
}

/// `journal checkpoint show`: a kept checkpoint's text, as a person pastes it into a ticket.
fn show(journal: &Journal, args: &ShowArgs) -> Result<u8, Failure> {
    let signed = match args.size.as_str() {
        "latest" => journal.latest_checkpoint()?,
        size => {
            let size = size.parse::<u64>().map_err(|e| Failure {
                code: 2,
                message: format!(
                    "checkpoint show takes a tree size or `latest`, got {size:?}: {e}"
                ),
            })?;
            journal.checkpoint(size)?
        }
    };
    let signed = signed.ok_or_else(|| fail(format!("no checkpoint {} is kept", args.size)))?;
    out::text(signed.to_text())?;
    Ok(0)
}

/// `journal checkpoint keep`: keeps a checkpoint of this journal once it states what the
/// journal holds.
fn keep(journal: &Journal, args: &KeepArgs) -> Result<u8, Failure> {
    let text = read_text(&args.file, NOTE_LEN_MAX, "checkpoint")?;
    let signed = SignedCheckpoint::parse(&text)
        .map_err(|e| fail(format!("checkpoint {}: {e}", args.file.display())))?;
    journal.keep_checkpoint(&signed)?;
    let kept = journal
        .checkpoint(signed.checkpoint.tree_size)?
        .ok_or_else(|| fail("the checkpoint was not kept"))?;
    out::line(format_args!(
        "kept the checkpoint of {} events, signed by {}",
        kept.checkpoint.tree_size,
        kept.signatures
            .iter()
            .map(|s| s.label())
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    Ok(0)
}
