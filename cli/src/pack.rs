//! `journal export replay|evidence --session ID --out DIR`: files a reviewer can archive.
//!
//! - `replay`: the session's narrative as `replay.json`, `replay.txt` and `replay.html`.
//! - `evidence`: the session's events as stored (`events.jsonl`: each with its position, chain
//!   link and stream version), the journal's head when exported (`head.json`: check the journal
//!   later with `journal verify --digest POSITION:HASH`), every blob the events reference
//!   (`blobs/<hex>`, with the references that could not be found listed), and the replay.
//!
//! Both end with `MANIFEST.json`: every file with its size and BLAKE3 hash.

use std::collections::BTreeSet;
use std::path::Path;

use journal_engine::{Filter, Journal};
use journal_replay::Scope;
use serde_json::{json, Value};

use crate::{fail, out, Failure};

/// What to export.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pack {
    /// The narrative in JSON, text and HTML.
    Replay,
    /// The events with their chain links, the head digest, the referenced blobs, the replay.
    Evidence,
}

fn write(dir: &Path, name: &str, bytes: &[u8], manifest: &mut Vec<Value>) -> Result<(), Failure> {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(&path, bytes).map_err(|e| fail(format!("{}: {e}", path.display())))?;
    manifest.push(json!({
        "file": name,
        "bytes": bytes.len(),
        "blake3": blake3::hash(bytes).to_hex().to_string(),
    }));
    Ok(())
}

/// Every `blake3:<hex>` reference in a value.
fn blob_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) if s.starts_with("blake3:") => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| blob_refs(v, out)),
        Value::Object(map) => map.values().for_each(|v| blob_refs(v, out)),
        _ => {}
    }
}

/// Writes the pack; returns the exit code (1 when the session has no events).
pub fn export(journal: &Journal, what: Pack, session: &str, out: &Path) -> Result<u8, Failure> {
    let scope = Scope::Session(session.to_string());
    let narrative = journal_replay::load(journal, &scope, None)?;
    if narrative.counts.events == 0 {
        out::warn(format_args!(
            "journal: nothing is recorded for session {session}"
        ));
        return Ok(1);
    }
    refuse_non_empty(out)?;
    std::fs::create_dir_all(out).map_err(|e| fail(format!("{}: {e}", out.display())))?;
    let mut manifest = Vec::new();
    write_replay(out, &narrative, &mut manifest)?;
    let mut summary = json!({"session": session, "replay": narrative.counts});
    if what == Pack::Evidence {
        write_evidence(journal, session, out, &mut manifest, &mut summary)?;
    }
    let manifest_json = json!({"exported": summary, "files": manifest});
    let bytes = serde_json::to_vec_pretty(&manifest_json).map_err(|e| fail(e.to_string()))?;
    std::fs::write(out.join("MANIFEST.json"), &bytes)
        .map_err(|e| fail(format!("{}: {e}", out.display())))?;
    out::line(format_args!(
        "{}",
        json!({"out": out.display().to_string(), "exported": manifest_json["exported"]})
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

/// The narrative as `replay.json`, `replay.txt` and `replay.html`.
fn write_replay(
    out: &Path,
    narrative: &journal_replay::Narrative,
    manifest: &mut Vec<Value>,
) -> Result<(), Failure> {
    let json = serde_json::to_vec_pretty(narrative).map_err(|e| fail(e.to_string()))?;
    write(out, "replay.json", &json, manifest)?;
    let text = journal_replay::text::render(narrative, journal_replay::text::Colour::Plain);
    write(out, "replay.txt", text.as_bytes(), manifest)?;
    let html = journal_replay::html::render(narrative);
    write(out, "replay.html", html.as_bytes(), manifest)
}

/// The session's events as stored, the head when exported and the blobs the events reference;
/// what was written goes into `summary`.
fn write_evidence(
    journal: &Journal,
    session: &str,
    out: &Path,
    manifest: &mut Vec<Value>,
    summary: &mut Value,
) -> Result<(), Failure> {
    let head = journal.head();
    let mut lines = String::new();
    let mut refs = BTreeSet::new();
    let mut count = 0u64;
    for event in journal.query(Filter {
        session: Some(session.to_string()),
        ..Filter::default()
    })? {
        let value = event?.to_json_value();
        blob_refs(&value, &mut refs);
        lines.push_str(&value.to_string());
        lines.push('\n');
        count += 1;
    }
    write(out, "events.jsonl", lines.as_bytes(), manifest)?;
    let head_json = json!({
        "position": head.position.0,
        "hash": head.hash.to_hex(),
        "verify": format!("journal verify --digest {}:{}", head.position.0, head.hash.to_hex()),
    });
    let head_bytes = serde_json::to_vec_pretty(&head_json).map_err(|e| fail(e.to_string()))?;
    write(out, "head.json", &head_bytes, manifest)?;
    let (stored, missing) = write_blobs(journal, &refs, out, manifest)?;
    summary["events"] = json!(count);
    summary["blobs"] = json!(stored);
    summary["blobsMissing"] = json!(missing);
    summary["head"] = head_json;
    Ok(())
}

/// Each blob of `refs` as `blobs/<hex>`; how many were written, and the references that could
/// not be read (with why, when it was not simply absent).
fn write_blobs(
    journal: &Journal,
    refs: &BTreeSet<String>,
    out: &Path,
    manifest: &mut Vec<Value>,
) -> Result<(u64, Vec<String>), Failure> {
    let mut missing = Vec::new();
    let mut stored = 0u64;
    for reference in refs {
        match journal.blobs().get(reference) {
            Ok(Some(bytes)) => {
                let hex = reference.trim_start_matches("blake3:");
                write(out, &format!("blobs/{hex}"), &bytes, manifest)?;
                stored += 1;
            }
            Ok(None) => missing.push(reference.clone()),
            Err(e) => missing.push(format!("{reference}: {e}")),
        }
    }
    Ok((stored, missing))
}
