//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use journal_engine::seams::Clock;
use journal_engine::{AppendOptions, Appended, Chain, Filter, Journal, Limits, Options};
use journal_format::{Envelope, FrameHeader, Position, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};

/// A clock that advances one millisecond per reading, from a fixed start.
#[derive(Debug)]
pub struct StepClock(pub AtomicI64);

impl Clock for StepClock {
    fn now_unix_ns(&self) -> i64 {
        self.0.fetch_add(1_000_000, Ordering::SeqCst)
    }
}

pub fn step_clock() -> Arc<StepClock> {
    Arc::new(StepClock(AtomicI64::new(1_778_493_600_000_000_000)))
}

/// Options with small segments (64 KiB) so tests roll segments quickly.
pub fn small_segments() -> Options {
    Options {
        limits: Limits {
            event_bytes_max: 8 * 1024,
            batch_events_max: 1_000,
            batch_bytes_max: 32 * 1024,
            segment_bytes_max: 64 * 1024,
        },
        ..Options::default()
    }
}

/// A realistic event: a tool call in a session, about 300 bytes stored.
pub fn event(i: u64, session: &str) -> Envelope {
    let types = [
        "turn.submitted",
        "model.requested",
        "tool.started",
        "tool.result",
        "task.progress",
    ];
    let mut e = Envelope::new(
        types[(i % 5) as usize],
        format!("evt-{session}-{i}"),
        "2026-05-11T10:00:00Z",
    );
    e.session_id = Some(session.to_string());
    e.task_id = Some(format!("task-{}", i % 3));
    e.run_id = Some(format!("run-{}", i % 2));
    e.tool_call_id = Some(format!("call-{i}"));
    e.sequence = Some(i);
    e.payload = Some(serde_json::json!({
        "toolName": "bash",
        "arguments": {"command": format!("cargo test --package p{i}")},
        "exitCode": i % 2,
    }));
    e
}

pub fn append(journal: &Journal, events: Vec<Envelope>) -> Vec<Appended> {
    journal
        .append_batch_blocking(events, AppendOptions::default())
        .expect("append")
}

/// The positions of the events `filter` selects.
pub fn query_positions(journal: &Journal, filter: &Filter) -> Vec<u64> {
    journal
        .query(filter.clone())
        .expect("query")
        .map(|e| e.expect("event").position.0)
        .collect()
}

pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("segments"))
        .expect("segments dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    files
}

/// The (offset, header) of every frame in an unsealed segment file.
pub fn frames(file: &Path) -> Vec<(u64, FrameHeader)> {
    let bytes = std::fs::read(file).expect("read segment");
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    while at + FRAME_HEADER_LEN <= bytes.len() {
        let Ok(h) = FrameHeader::decode(&bytes[at..]) else {
            break;
        };
        out.push((at as u64, h));
        at += h.frame_len() as usize;
    }
    out
}

pub fn flip_byte(file: &Path, offset: u64) {
    let mut bytes = std::fs::read(file).expect("read");
    bytes[offset as usize] ^= 0x40;
    std::fs::write(file, bytes).expect("write");
}

pub fn truncate(file: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("open")
        .set_len(len)
        .expect("truncate");
}

pub fn head(journal: &Journal) -> Position {
    journal.head().position
}

/// Every event in the journal, read back.
pub fn all_events(journal: &Journal) -> Vec<journal_format::StoredEvent> {
    journal
        .read(Position::FIRST, None, Chain::Verified)
        .collect::<Result<Vec<_>, _>>()
        .expect("read all")
}

/// The repository's `testdata/` directory; panics with a clear message when missing.
pub fn testdata_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    assert!(
        dir.join("agentruntime/fixtures").is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

/// Where a corruption error places the damage: its position, offset and detail.
pub fn corruption_at(error: journal_engine::Error) -> (Option<u64>, u64, String) {
    match error {
        journal_engine::Error::Corruption {
            position,
            offset,
            detail,
            ..
        } => (position.map(|p| p.0), offset, detail),
        other => panic!("expected corruption, got {other}"),
    }
}

/// Leaves the journal's evidence as a crash would have: `HEAD` recording `position` as the last
/// durable head (its chain link read from the segment files) and no index. Tests that take
/// frames away from a closed journal to stand for writes a crash lost use it: a real crash
/// loses only writes that were never synced, which neither `HEAD` nor the index ever held.
pub fn rewind_evidence(dir: &Path, position: Position) {
    rewind_evidence_keeping_index(dir, position);
    let _ = std::fs::remove_file(dir.join("index.redb"));
}

/// Writes `HEAD` recording `position` with the link the segment files hold there, leaving the
/// index as it is.
pub fn rewind_evidence_keeping_index(dir: &Path, position: Position) {
    use journal_format::head_record::HeadRecord;
    let hash = if position == Position(0) {
        journal_format::ChainHash::GENESIS
    } else {
        segment_files(dir)
            .iter()
            .flat_map(|f| frames(f))
            .find(|(_, h)| h.meta.position == position)
            .map(|(_, h)| h.hash)
            .unwrap_or_else(|| panic!("no frame holds position {position}"))
    };
    let (bytes, _) = HeadRecord::new_file(position, hash, 0);
    std::fs::write(dir.join("HEAD"), bytes).unwrap();
}
