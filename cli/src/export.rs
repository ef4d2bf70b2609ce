//! `journal export --format agentruntime`: events as Agent Runtime JSON Lines that validate
//! against the chosen schema; what the spec's closed enum does not know is mapped or left out,
//! and the count of what was left out is reported.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};

use journal_engine::{Filter, Journal};
use journal_format::conformance::{self, Exported, Schema};
use serde_json::json;

use crate::Failure;

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
                serde_json::to_writer(&mut out, &value).map_err(|e| crate::fail(e.to_string()))?;
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
