//! `journal redact --session S | --run R | --event ID [--reason TEXT] [--by WHO]`: the content
//! destroyed by destroying its keys, a `journal.redacted` fact appended, then the read models
//! rebuilt from scratch in a new file, the old one overwritten first, so that no copy of the
//! redacted content stays in their store (docs/REDACTION.md).

use std::path::Path;

use clap::Args;
use journal_engine::{Journal, Redaction};
use journal_projections::ReadModels;
use serde_json::json;

use crate::{fail, out, Access, Cli, Failure};

/// `journal redact`'s arguments.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["session", "run", "event"])))]
pub struct RedactArgs {
    /// Redact every event of this session.
    #[arg(long)]
    session: Option<String>,
    /// Redact every event of this run.
    #[arg(long)]
    run: Option<String>,
    /// Redact this event.
    #[arg(long)]
    event: Option<String>,
    /// Why, recorded in the fact.
    #[arg(long)]
    reason: Option<String>,
    /// Who, recorded in the fact (default: the user running the command, `$USER`).
    #[arg(long)]
    by: Option<String>,
}

/// The read-model store's file (`journal-projections`' default).
const STORE_FILE: &str = "projections.redb";

/// Runs `journal redact`.
pub fn run(cli: &Cli, args: &RedactArgs) -> Result<u8, Failure> {
    let what = match (&args.session, &args.run, &args.event) {
        (Some(s), _, _) => Redaction::Session(s.clone()),
        (_, Some(r), _) => Redaction::Run(r.clone()),
        (_, _, Some(e)) => Redaction::Event(e.clone()),
        _ => return Err(fail("name what to redact: --session, --run or --event")),
    };
    let by = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let journal = crate::open(cli, Access::Write)?;
    let redacted = journal.redact(&what, &by, args.reason.as_deref())?;
    let rebuilt = purge_read_models(&journal)?;
    out::line(json!({
        "redacted": redacted,
        "readModels": if rebuilt { "rebuilt" } else { "none" },
    }))?;
    journal.close();
    Ok(0)
}

/// Overwrites the read-model store with zeros, removes it and rebuilds it from the log (which
/// now reads `[redacted]`); `false` when there was no store.
fn purge_read_models(journal: &Journal) -> Result<bool, Failure> {
    let path = journal.dir().join(STORE_FILE);
    if !path.exists() {
        return Ok(false);
    }
    wipe(&path)?;
    let models = ReadModels::open(journal).map_err(|e| fail(e.to_string()))?;
    models
        .catch_up(&mut |_, _, _| {})
        .map_err(|e| fail(e.to_string()))?;
    Ok(true)
}

/// Overwrites `path` with zeros, syncs it, and removes it.
fn wipe(path: &Path) -> Result<(), Failure> {
    use std::io::Write;
    let in_path = |e: std::io::Error| fail(format!("{}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(in_path)?.len();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(in_path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        file.write_all(zeros.get(..n).unwrap_or_default())
            .map_err(in_path)?;
        left -= n as u64;
    }
    file.sync_all().map_err(in_path)?;
    drop(file);
    std::fs::remove_file(path).map_err(in_path)?;
    crate::key::sync_dir(path.parent().unwrap_or(Path::new(".")))
}
