//! `journal prove inclusion|consistency` and the `journal checkpoint` subcommands that use the
//! journal (`sign`, `list`, `show`, `keep`): proof documents built from the journal's Merkle
//! tree against the checkpoints it keeps, for `journal check-proof` to check offline.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use journal_engine::Journal;
use journal_format::checkpoint::{SignedCheckpoint, NOTE_LEN_MAX};
use journal_format::proof::ProofDocument;
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

/// Signs a checkpoint of the tree head with `key` when no kept checkpoint serves a proof of
/// `size` (or, without one, of a tree holding `needed` events) and the tree is the head's;
/// warns on standard error when the proof will be against an unsigned tree head.
fn sign_if_needed(
    journal: &Journal,
    size: Option<u64>,
    needed: u64,
    key: Option<&Path>,
) -> Result<(), Failure> {
    let head = journal.head().position.0;
    if journal.proof_tree(size, needed)?.1.is_some() {
        return Ok(());
    }
    match key {
        Some(key) if size.is_none_or(|s| s == head) => {
            journal.sign_checkpoint(&read_signing_key(key)?)?;
        }
        _ => out::warn(format_args!(
            "journal: no signed checkpoint serves this proof: it is against the unsigned tree head (sign one with `journal checkpoint sign --key`, or pass --key)"
        )),
    }
    Ok(())
}

fn inclusion(journal: &Journal, args: &InclusionArgs) -> Result<ProofDocument, Failure> {
    let event = journal
        .get(&args.event_id)?
        .ok_or_else(|| fail(format!("no event with id {:?}", args.event_id)))?;
    sign_if_needed(
        journal,
        args.size,
        event.position.0,
        args.output.key.as_deref(),
    )?;
    let document = journal.inclusion_document_at(event.position, args.size)?;
    Ok(ProofDocument::Inclusion(document))
}

fn consistency(journal: &Journal, args: &ConsistencyArgs) -> Result<ProofDocument, Failure> {
    sign_if_needed(
        journal,
        args.new_size,
        args.old_size,
        args.output.key.as_deref(),
    )?;
    let document = journal.consistency_document(args.old_size, args.new_size)?;
    if document.old_checkpoint.is_none() {
        out::warn(format_args!(
            "journal: no signed checkpoint of {} events is kept: the older tree head is unsigned",
            args.old_size
        ));
    }
    Ok(ProofDocument::Consistency(document))
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
