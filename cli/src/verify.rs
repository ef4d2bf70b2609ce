//! `journal verify [--digest POSITION:HASH]` and `journal digest`: checking the whole journal
//! (with a progress bar on a terminal), and the head's link to keep outside it.

use std::io::{self, IsTerminal};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use journal_engine::{Journal, VerifyOptions};
use journal_format::{ChainHash, Position};
use serde_json::json;

use crate::{fail, out, Failure};

/// `journal verify`'s arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A digest kept outside the journal, as POSITION:HASH (from `journal digest`).
    #[arg(long)]
    pub digest: Option<String>,
}

fn usage(message: String) -> Failure {
    Failure { code: 2, message }
}

fn parse_digest(text: &str) -> Result<(Position, ChainHash), Failure> {
    let (position, hash) = text
        .split_once(':')
        .ok_or_else(|| usage(format!("--digest takes POSITION:HASH, got {text:?}")))?;
    let position = position
        .parse::<u64>()
        .map_err(|e| usage(format!("--digest position {position:?}: {e}")))?;
    let hash = ChainHash::from_hex(hash).map_err(|e| usage(format!("--digest hash: {e}")))?;
    Ok((Position(position), hash))
}

/// Prints the verify report; exit 3 when it found the journal damaged.
pub fn verify(journal: &Journal, args: &VerifyArgs) -> Result<u8, Failure> {
    let digest = args.digest.as_deref().map(parse_digest).transpose()?;
    let bar = if io::stderr().is_terminal() {
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("verify {bar:40} {bytes}/{total_bytes} {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let options = VerifyOptions {
        digest,
        ..VerifyOptions::default()
    };
    let report = journal.verify(&options, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    out::line(format_args!(
        "{}",
        serde_json::to_string(&report).map_err(|e| fail(e.to_string()))?
    ))?;
    Ok(if report.ok { 0 } else { 3 })
}

/// Prints the head's position and chain link.
pub fn digest(journal: &Journal) -> Result<u8, Failure> {
    let head = journal.head();
    out::line(format_args!(
        "{}",
        json!({"position": head.position.0, "hash": head.hash.to_hex()})
    ))?;
    Ok(0)
}
