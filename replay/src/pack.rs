//! Packs of files a reviewer can archive for one session (`journal export replay|evidence`,
//! `GET /v1/evidence/{session}`).
//!
//! - A replay pack: the session's narrative as `replay.json`, `replay.txt` and `replay.html`.
//! - An evidence pack: the replay, the session's events as stored (`events.jsonl`: each with
//!   its position, chain link and stream version), the journal's head when packed
//!   (`head.json`: check the journal later with `journal verify --digest POSITION:HASH:ROOT`),
//!   each event's inclusion proof (`proofs/<position>.json`) against the latest signed
//!   checkpoint (`checkpoint.txt`) and, since an earlier pack's checkpoint, the consistency
//!   proof from it (`consistency.json`), all checked offline by `journal check-proof`; and
//!   every blob the events reference (`blobs/<hex>`, with the references that could not be
//!   found listed).
//!
//! Both end with `MANIFEST.json`: what was packed, and every other file with its size and
//! BLAKE3 hash. A pack is built in memory, then written as a directory or as one tar archive.

use std::collections::BTreeSet;
use std::path::Path;

use journal_engine::{Filter, Journal};
use journal_format::Position;
use serde_json::{json, Value};

use crate::{Narrative, Scope};

/// What a pack holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contents {
    /// The narrative in JSON, text and HTML.
    Replay,
    /// The events with their chain links, the head digest, the referenced blobs, the replay.
    Evidence,
}

/// One file of a pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// Its path inside the pack (`/`-separated, relative).
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A pack of files, `MANIFEST.json` last.
#[derive(Clone, Debug)]
pub struct Pack {
    /// The files, in the order they were made; `MANIFEST.json` is the last.
    pub files: Vec<File>,
    /// What was packed: the manifest's `exported` object.
    pub summary: Value,
    /// The narrative the replay files render.
    pub narrative: Narrative,
    /// When the newest event of the session was recorded (Unix seconds): the files' time in
    /// an archive of an evidence pack (0 for a replay pack).
    pub modified: u64,
}

/// Why a pack could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// Reading the journal failed.
    #[error(transparent)]
    Journal(#[from] journal_engine::Error),
    /// Encoding a file failed.
    #[error("encoding {file}: {message}")]
    Encode {
        /// The file.
        file: String,
        /// What went wrong.
        message: String,
    },
}

/// Adds `name` to the files and to the manifest's list.
fn add(files: &mut Vec<File>, manifest: &mut Vec<Value>, name: &str, bytes: Vec<u8>) {
    manifest.push(json!({
        "file": name,
        "bytes": bytes.len(),
        "blake3": blake3::hash(&bytes).to_hex().to_string(),
    }));
    files.push(File {
        name: name.to_string(),
        bytes,
    });
}

fn pretty(file: &str, value: &impl serde::Serialize) -> Result<Vec<u8>, PackError> {
    serde_json::to_vec_pretty(value).map_err(|e| PackError::Encode {
        file: file.to_string(),
        message: e.to_string(),
    })
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

/// The pack of `session`, as of the journal's head; `None` when nothing is recorded for it.
///
/// # Errors
/// [`PackError`]: a journal error, or a file that could not be encoded.
pub fn build(
    journal: &Journal,
    contents: Contents,
    session: &str,
) -> Result<Option<Pack>, PackError> {
    build_since(journal, contents, session, None)
}

/// As [`build`]; an evidence pack also holds the consistency proof from the tree of `since`
/// events (the checkpoint of an earlier pack) to its own checkpoint.
///
/// # Errors
/// As [`build`].
pub fn build_since(
    journal: &Journal,
    contents: Contents,
    session: &str,
    since: Option<u64>,
) -> Result<Option<Pack>, PackError> {
    let scope = Scope::Session(session.to_string());
    let narrative = crate::load(journal, &scope, None)?;
    if narrative.counts.events == 0 {
        return Ok(None);
    }
    let mut files = Vec::new();
    let mut manifest = Vec::new();
    add_replay(&narrative, &mut files, &mut manifest)?;
    let mut summary = json!({"session": session, "replay": narrative.counts});
    let mut modified = 0;
    if contents == Contents::Evidence {
        let packing = Packing {
            files: &mut files,
            manifest: &mut manifest,
            summary: &mut summary,
        };
        modified = add_evidence(journal, session, since, packing)?;
    }
    let manifest_json = json!({"exported": summary, "files": manifest});
    files.push(File {
        name: "MANIFEST.json".into(),
        bytes: pretty("MANIFEST.json", &manifest_json)?,
    });
    Ok(Some(Pack {
        files,
        summary,
        narrative,
        modified,
    }))
}

/// The narrative as `replay.json`, `replay.txt` and `replay.html`.
fn add_replay(
    narrative: &Narrative,
    files: &mut Vec<File>,
    manifest: &mut Vec<Value>,
) -> Result<(), PackError> {
    add(
        files,
        manifest,
        "replay.json",
        pretty("replay.json", narrative)?,
    );
    let text = crate::text::render(narrative, crate::text::Colour::Plain);
    add(files, manifest, "replay.txt", text.into_bytes());
    let html = crate::html::render(narrative);
    add(files, manifest, "replay.html", html.into_bytes());
    Ok(())
}

/// Where the files of a pack go, with their manifest and summary.
struct Packing<'p> {
    files: &'p mut Vec<File>,
    manifest: &'p mut Vec<Value>,
    summary: &'p mut Value,
}

/// The session's events as stored, the head when packed, each event's inclusion proof, and the
/// blobs the events reference; what was added goes into the summary. Returns when the newest
/// event was recorded (Unix seconds).
fn add_evidence(
    journal: &Journal,
    session: &str,
    since: Option<u64>,
    packing: Packing<'_>,
) -> Result<u64, PackError> {
    let Packing {
        files,
        manifest,
        summary,
    } = packing;
    let head = journal.tree_head()?;
    let mut lines = String::new();
    let mut refs = BTreeSet::new();
    let mut positions = Vec::new();
    let mut newest_ns = 0i64;
    for event in journal.query(Filter {
        session: Some(session.to_string()),
        ..Filter::default()
    })? {
        let event = event?;
        newest_ns = newest_ns.max(event.recorded_at_ns);
        let value = event.to_json_value();
        blob_refs(&value, &mut refs);
        lines.push_str(&value.to_string());
        lines.push('\n');
        positions.push(event.position);
    }
    add(files, manifest, "events.jsonl", lines.into_bytes());
    let digest = format!("{}:{}:{}", head.position.0, head.hash.to_hex(), head.root);
    let head_json = json!({
        "position": head.position.0,
        "hash": head.hash.to_hex(),
        "root": head.root.to_hex(),
        "verify": format!("journal verify --digest {digest}"),
    });
    add(
        files,
        manifest,
        "head.json",
        pretty("head.json", &head_json)?,
    );
    let proofs = add_proofs(journal, &positions, since, files, manifest)?;
    let (stored, missing) = add_blobs(journal, &refs, files, manifest);
    summary["events"] = json!(positions.len());
    summary["blobs"] = json!(stored);
    summary["blobsMissing"] = json!(missing);
    summary["head"] = head_json;
    summary["proofs"] = proofs;
    Ok(u64::try_from(newest_ns / 1_000_000_000).unwrap_or(0))
}

/// Each event's inclusion proof, `proofs/<position, 20 digits>.json`, against the latest kept
/// checkpoint when it holds every event (its text as `checkpoint.txt`), else against the
/// unsigned tree head; and, `since` an earlier pack's tree size, the consistency proof from it
/// (`consistency.json`). Each is a document `journal check-proof` checks.
fn add_proofs(
    journal: &Journal,
    positions: &[Position],
    since: Option<u64>,
    files: &mut Vec<File>,
    manifest: &mut Vec<Value>,
) -> Result<Value, PackError> {
    let last = positions.last().map_or(0, |p| p.0);
    let (size, checkpoint) = journal.proof_tree(None, last)?;
    let documents = journal.inclusion_documents(positions, size, checkpoint.as_ref())?;
    for document in &documents {
        let name = format!("proofs/{:020}.json", document.position);
        add(files, manifest, &name, pretty(&name, document)?);
    }
    if let Some(checkpoint) = &checkpoint {
        add(
            files,
            manifest,
            "checkpoint.txt",
            checkpoint.to_text().into_bytes(),
        );
    }
    if let Some(old) = since {
        let document = journal.consistency_document(old, Some(size))?;
        add(
            files,
            manifest,
            "consistency.json",
            pretty("consistency.json", &document)?,
        );
    }
    Ok(json!({
        "treeSize": size,
        "signed": checkpoint.is_some(),
        "inclusion": positions.len(),
        "consistencyFrom": since,
    }))
}

/// Each blob of `refs` as `blobs/<hex>`; how many were added, and the references that could
/// not be read (with why, when it was not simply absent).
fn add_blobs(
    journal: &Journal,
    refs: &BTreeSet<String>,
    files: &mut Vec<File>,
    manifest: &mut Vec<Value>,
) -> (u64, Vec<String>) {
    let mut missing = Vec::new();
    let mut stored = 0u64;
    for reference in refs {
        match journal.blobs().get(reference) {
            Ok(Some(bytes)) => {
                let hex = reference.trim_start_matches("blake3:");
                add(files, manifest, &format!("blobs/{hex}"), bytes);
                stored += 1;
            }
            Ok(None) => missing.push(reference.clone()),
            Err(e) => missing.push(format!("{reference}: {e}")),
        }
    }
    (stored, missing)
}

impl Pack {
    /// Writes every file under `dir` (which must exist or be creatable).
    ///
    /// # Errors
    /// The first file or directory that could not be written, naming it.
    pub fn write_dir(&self, dir: &Path) -> std::io::Result<()> {
        let named = |path: &Path, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        };
        for file in &self.files {
            let path = dir.join(&file.name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| named(parent, e))?;
            }
            std::fs::write(&path, &file.bytes).map_err(|e| named(&path, e))?;
        }
        Ok(())
    }

    /// The pack as one tar archive (POSIX ustar), each file under `prefix/` (mode 0644, dated
    /// [`Pack::modified`]). `prefix` is one plain path component: the caller makes it from
    /// something safe (a session id can hold `/` or `..`).
    ///
    /// # Errors
    /// A path the tar format cannot hold (too long, or with `..`).
    pub fn tar(&self, prefix: &str) -> std::io::Result<Vec<u8>> {
        let mut builder = tar::Builder::new(Vec::new());
        for file in &self.files {
            let mut header = tar::Header::new_ustar();
            header.set_size(file.bytes.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(self.modified);
            header.set_entry_type(tar::EntryType::Regular);
            builder.append_data(
                &mut header,
                format!("{prefix}/{}", file.name),
                file.bytes.as_slice(),
            )?;
        }
        builder.into_inner()
    }
}
