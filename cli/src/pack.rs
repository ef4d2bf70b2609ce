//! `journal export replay|evidence --session ID --out DIR`: files a reviewer can archive (see
//! `journal_replay::pack`, which the server's `GET /v1/evidence/{session}` answers as one tar
//! archive), written into a new or empty directory.

use std::path::Path;

use journal_engine::Journal;
use journal_format::checkpoint::{SignedCheckpoint, NOTE_LEN_MAX};
use journal_replay::pack::{self, Contents};
use serde_json::json;

use crate::{fail, out, Failure};

/// What to export.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pack {
    /// The narrative in JSON, text and HTML.
    Replay,
    /// The events with their chain links and inclusion proofs, the head digest, the signed
    /// checkpoint, the referenced blobs, the replay.
    Evidence,
}

/// The tree size `--since` names: a number, or a checkpoint file (an earlier pack's
/// `checkpoint.txt`).
pub fn since_size(since: &str) -> Result<u64, Failure> {
    if let Ok(size) = since.parse::<u64>() {
        return Ok(size);
    }
    let path = Path::new(since);
    let text = crate::proof::read_text(path, NOTE_LEN_MAX, "checkpoint")?;
    let signed = SignedCheckpoint::parse(&text)
        .map_err(|e| fail(format!("--since {}: {e}", path.display())))?;
    Ok(signed.checkpoint.tree_size)
}

/// Writes the pack; returns the exit code (1 when the session has no events). An evidence pack
/// `since` a tree size also holds the consistency proof from it.
pub fn export(
    journal: &Journal,
    what: Pack,
    session: &str,
    out: &Path,
    since: Option<u64>,
) -> Result<u8, Failure> {
    let contents = match what {
        Pack::Replay => Contents::Replay,
        Pack::Evidence => Contents::Evidence,
    };
    let built = pack::build_since(journal, contents, session, since);
    let Some(pack) = built.map_err(|e| fail(e.to_string()))? else {
        out::warn(format_args!(
            "journal: nothing is recorded for session {session}"
        ));
        return Ok(1);
    };
    refuse_non_empty(out)?;
    std::fs::create_dir_all(out).map_err(|e| fail(format!("{}: {e}", out.display())))?;
    pack.write_dir(out).map_err(|e| fail(e.to_string()))?;
    out::line(format_args!(
        "{}",
        json!({"out": out.display().to_string(), "exported": pack.summary})
    ))?;
    Ok(0)
}

/// Refuses a directory that exists and holds anything.
fn refuse_non_empty(out: &Path) -> Result<(), Failure> {
    if out.exists()
        && std::fs::read_dir(out)
            .map_err(|e| fail(format!("{}: {e}", out.display())))?
            .next()
            .is_some()
    {
        return Err(fail(format!(
            "{} is not empty: export into a new or empty directory",
            out.display()
        )));
    }
    Ok(())
}
