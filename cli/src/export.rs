//! `journal export --format agentruntime`: events as Agent Runtime JSON Lines that validate
//! against the chosen schema; what the spec's closed enum does not know is mapped or left out,
//! and the count of what was left out is reported.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use journal_engine::{Filter, Journal};
use journal_format::conformance::{self, Exported, Schema};
use serde_json::json;

use crate::{fail, out, pack, Failure, FilterArgs, Profile};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// Agent Runtime event objects, one per line.
    Agentruntime,
}

/// `journal export`'s arguments.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// `replay` or `evidence`: a pack of files for a session (`--session ID --out DIR`);
    /// without it, the events as Agent Runtime JSON Lines.
    #[arg(value_enum)]
    pack: Option<pack::Pack>,
    /// The output form.
    #[arg(long, value_enum, default_value = "agentruntime")]
    format: ExportFormat,
    /// The schema every written event must validate against.
    #[arg(long, value_enum, default_value = "core")]
    profile: Profile,
    /// Write to FILE instead of standard output (for `replay` and `evidence`: the directory,
    /// new or empty).
    #[arg(long)]
    out: Option<PathBuf>,
    /// For `evidence`: also prove the journal only grew since an earlier pack, given its
    /// `checkpoint.txt` (or a tree size): `consistency.json`.
    #[arg(long, value_name = "CHECKPOINT")]
    since: Option<String>,
    #[command(flatten)]
    filter: FilterArgs,
}

/// Writes a pack for a session, or the events as JSON Lines (to `--out` or standard output)
/// with a report of what was left out on standard error.
pub fn run(journal: &Journal, args: &ExportArgs) -> Result<u8, Failure> {
    if let Some(what) = args.pack {
        let (Some(session), Some(out)) = (&args.filter.session, &args.out) else {
            return Err(Failure {
                code: 2,
                message: "export replay|evidence needs --session ID and --out DIR".into(),
            });
        };
        let since = args.since.as_deref().map(pack::since_size).transpose()?;
        return pack::export(journal, what, session, out, since);
    }
    let ExportFormat::Agentruntime = args.format;
    let schema = args.profile.schema();
    let summary = match &args.out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .map_err(|e| fail(format!("{}: {e}", path.display())))?;
            export(journal, args.filter.filter(), schema, file)?
        }
        None => export(journal, args.filter.filter(), schema, out::stdout())?,
    };
    out::warn(summary.to_json());
    Ok(0)
}

/// What an export wrote and left out.
pub struct Summary {
    /// Events written.
    pub exported: u64,
    /// Events left out, by reason.
    pub left_out: BTreeMap<String, u64>,
}

/// Writes every event `filter` selects to `out`, in `schema`'s form.
pub fn export(
    journal: &Journal,
    filter: Filter,
    schema: Schema,
    out: impl Write,
) -> Result<Summary, Failure> {
    let mut out = BufWriter::new(out);
    let mut summary = Summary {
        exported: 0,
        left_out: BTreeMap::new(),
    };
    for event in journal.query(filter)? {
        let event = event?;
        match conformance::export(&event.envelope, schema) {
            Exported::Event(value) => {
                serde_json::to_writer(&mut out, &value).map_err(|e| fail(e.to_string()))?;
                out.write_all(b"\n")?;
                summary.exported += 1;
            }
            Exported::LeftOut(reason) => {
                // Group by the reason's first clause so the report stays short.
                let key = reason.split(": ").take(2).collect::<Vec<_>>().join(": ");
                *summary.left_out.entry(key).or_default() += 1;
            }
        }
    }
    out.flush()?;
    Ok(summary)
}

impl Summary {
    /// The report printed on standard error.
    pub fn to_json(&self) -> serde_json::Value {
        let left: u64 = self.left_out.values().sum();
        json!({"exported": self.exported, "leftOut": left, "leftOutByReason": self.left_out})
    }
}
