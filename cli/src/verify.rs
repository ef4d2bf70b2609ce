//! `journal verify [--digest DIGEST]` and `journal digest`: checking the whole journal (with a
//! progress bar on a terminal), and the digest to keep outside it (the head's position, chain
//! link and Merkle tree root).

use std::io::{self, IsTerminal};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use journal_engine::{Journal, VerifyOptions};
use journal_format::Digest;
use serde_json::json;

use crate::{fail, out, Failure};

/// `journal verify`'s arguments.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A digest kept outside the journal, as POSITION:HASH or POSITION:HASH:ROOT (from
    /// `journal digest`).
    #[arg(long)]
    pub digest: Option<String>,
}

fn usage(message: String) -> Failure {
    Failure { code: 2, message }
}

fn parse_digest(text: &str) -> Result<Digest, Failure> {
    text.parse::<Digest>()
        .map_err(|e| usage(format!("--digest: {e}")))
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
        digest: digest.map(|d| (d.position, d.hash)),
        digest_root: digest.and_then(|d| d.root),
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

/// Prints the digest: the head's position and chain link, and the Merkle tree's root there.
pub fn digest(journal: &Journal) -> Result<u8, Failure> {
    let head = journal.tree_head()?;
    let digest = Digest {
        position: head.position,
        hash: head.hash,
        root: Some(head.root),
    };
    out::line(format_args!(
        "{}",
        json!({
            "position": head.position.0,
            "hash": head.hash.to_hex(),
            "tree_size": head.position.0,
            "root": head.root.to_hex(),
            "digest": digest.to_string(),
        })
    ))?;
    Ok(0)
}
