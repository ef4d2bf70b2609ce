//! `journal archive` and `journal restore` (docs/ARCHIVE.md): sealed segments moved to an
//! archive directory by a retention policy (`--before`, `--older-than`, `--keep-size`), or
//! brought back; each prints what it moved and where the live log now begins. Arguments are
//! checked before the journal is opened.

use std::path::PathBuf;

use clap::Args;
use journal_engine::archive::{parse_duration, parse_size};
use journal_engine::{ArchiveRequest, Retention};
use journal_format::Position;

use crate::{fail, models, out, Access, Cli, Failure};

/// `journal archive`'s arguments.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("policy").required(true).args(["before", "older_than", "keep_size"])))]
pub struct ArchiveArgs {
    /// Archive the sealed segments lying wholly before this position.
    #[arg(long, value_name = "POSITION")]
    before: Option<u64>,
    /// Archive the sealed segments whose last event was recorded longer ago than this (`90d`,
    /// `12h`, `30m`, `45s`, `2w`).
    #[arg(long, value_name = "AGE")]
    older_than: Option<String>,
    /// Archive the oldest sealed segments until the live log is at most this size (`10GiB`,
    /// `500MB`, bytes).
    #[arg(long, value_name = "SIZE")]
    keep_size: Option<String>,
    /// The archive directory (created when missing).
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// Print the plan; move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Archive positions a `journal replicate` has not had acknowledged yet (its replica then
    /// needs the archive attached to the source to catch up).
    #[arg(long)]
    force: bool,
}

/// `journal restore`'s arguments.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The archive directory the segments were archived to.
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// Restore only the archived segments holding this position and later ones (all when
    /// absent); the live log stays continuous.
    #[arg(long, value_name = "POSITION")]
    since: Option<u64>,
}

impl ArchiveArgs {
    /// The policy asked for, checked.
    fn retention(&self) -> Result<Retention, Failure> {
        let bad = |e: journal_engine::Error| fail(e.to_string());
        match (&self.before, &self.older_than, &self.keep_size) {
            (Some(p), _, _) => Ok(Retention::Before(Position(*p))),
            (_, Some(age), _) => parse_duration(age).map(Retention::OlderThan).map_err(bad),
            (_, _, Some(size)) => parse_size(size).map(Retention::KeepSize).map_err(bad),
            _ => Err(fail(
                "name what to archive: --before, --older-than or --keep-size",
            )),
        }
    }
}

/// Runs `journal archive`.
pub fn archive(cli: &Cli, args: &ArchiveArgs) -> Result<u8, Failure> {
    let request = ArchiveRequest {
        retention: args.retention()?,
        to: args.to.clone(),
        dry_run: args.dry_run,
    };
    crate::check_exists(&cli.dir)?;
    // The read models are brought to the head first: afterwards they never need an archived
    // event to catch up. Their store is opened before the journal, as every command does.
    let store = match models::has_store(&cli.dir) && !args.dry_run {
        true => Some(models::open_store(&cli.dir)?),
        false => None,
    };
    let journal = crate::open(cli, Access::Write)?;
    if let Some(store) = store {
        models::bring_up_to_date(&journal, store)?;
    }
    if !args.force && !args.dry_run {
        let plan = journal.archive(&ArchiveRequest {
            dry_run: true,
            ..request.clone()
        })?;
        not_ahead_of_replication(cli, plan.last_archived)?;
    }
    let outcome = journal.archive(&request)?;
    out::line(serde_json::to_string(&outcome).unwrap_or_default())?;
    journal.close();
    Ok(0)
}

/// Refuses to archive up to `last` when a replication (a `replicate.STREAM.cursor` in the
/// journal's directory) has not had that far acknowledged: its next publish would read an
/// archived position.
fn not_ahead_of_replication(cli: &Cli, last: u64) -> Result<(), Failure> {
    let behind = journal_replicate::replicated_positions(&cli.dir)
        .map_err(|e| fail(format!("reading the replication cursors: {e}")))?
        .into_iter()
        .find(|(_, acked)| *acked < last);
    match behind {
        Some((stream, acked)) => Err(fail(format!(
            "replication to stream {stream} has positions up to {acked} acknowledged; archiving up to {last} would leave it unable to go on without the archive attached: wait for it, archive less, or give --force"
        ))),
        None => Ok(()),
    }
}

/// Runs `journal restore`.
pub fn restore(cli: &Cli, args: &RestoreArgs) -> Result<u8, Failure> {
    if !args.from.is_dir() {
        return Err(fail(format!(
            "no archive in {}: it is not a directory",
            args.from.display()
        )));
    }
    crate::check_exists(&cli.dir)?;
    let journal = crate::open(cli, Access::Write)?;
    let outcome = journal.restore(&args.from, args.since.map(Position))?;
    out::line(serde_json::to_string(&outcome).unwrap_or_default())?;
    journal.close();
    Ok(0)
}
