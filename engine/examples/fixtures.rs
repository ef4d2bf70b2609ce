//! The main job until `journal demo` exists: append the Agent Runtime fixture events to a
//! journal, read them back, and verify the journal.
//!
//! ```text
//! cargo run --release -p journal-engine --example fixtures [-- JOURNAL_DIR]
//! ```
//!
//! The journal directory defaults to `./journal-data`; the fixtures are read from
//! `testdata/agentruntime/fixtures/lime-profile`. Running it twice
//! stores nothing new: event ids are idempotent.

use std::path::{Path, PathBuf};

use journal_engine::{AppendOptions, Chain, Journal, Options, VerifyOptions};
use journal_format::{Envelope, Position};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("journal-data"), PathBuf::from);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/agentruntime/fixtures/lime-profile");
    if !fixtures.is_dir() {
        return Err(format!(
            "the Agent Runtime fixtures are missing: expected {}",
            fixtures.display()
        )
        .into());
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&fixtures)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.to_string_lossy().ends_with("-event.json"));
    paths.sort();

    let journal = Journal::open(&dir, Options::default())?;
    for action in &journal.recovery_report().actions {
        println!("recovery: {}", serde_json::to_string(action)?);
    }
    let mut events = Vec::new();
    for path in &paths {
        let bytes = std::fs::read(path)?;
        let event = Envelope::from_json_slice(&bytes, &mut || journal.new_event_id())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        events.push(event);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let appended = runtime.block_on(journal.append_batch(events, AppendOptions::default()))?;
    println!(
        "appended {} fixture events to {} (durable):",
        appended.len(),
        dir.display()
    );
    for a in &appended {
        let note = if a.duplicate {
            "  (already stored)"
        } else {
            ""
        };
        println!(
            "  position {:>4}  stream version {:>3}  {}{note}",
            a.position, a.stream_version, a.event_id
        );
    }
    println!("the journal holds:");
    for event in journal.read(Position::FIRST, None, Chain::Verified) {
        let event = event?;
        println!(
            "  {:>4}  {:<28} {:<30} session {}",
            event.position,
            event.envelope.event_type,
            event.envelope.event_id,
            event.envelope.session_id.as_deref().unwrap_or("-")
        );
    }
    let report = journal.verify(&VerifyOptions::default(), &mut |_, _| {})?;
    println!("verify: {}", serde_json::to_string(&report)?);
    let head = journal.head();
    println!(
        "digest (keep it outside the journal): {}:{}",
        head.position, head.hash
    );
    if !report.ok {
        return Err("verify found problems".into());
    }
    Ok(())
}
