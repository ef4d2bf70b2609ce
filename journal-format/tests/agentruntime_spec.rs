//! Every Agent Runtime fixture event (`testdata/agentruntime/`) against the typed payload check
//! and both vendored event schemas.

use std::path::{Path, PathBuf};

use journal_format::conformance::Schema;
use journal_format::Envelope;

/// `testdata/agentruntime` in the repository; panics with a clear message when missing.
fn spec_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/agentruntime");
    assert!(
        dir.join("fixtures").is_dir(),
        "the test data is missing: expected {} (`testdata/` in the repository)",
        dir.display()
    );
    dir
}

fn fixture_events() -> Vec<(String, serde_json::Value)> {
    let dir = spec_dir().join("fixtures/lime-profile");
    let mut events = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read fixtures") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with("-event.json") {
            let value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            events.push((name, value));
        }
    }
    assert!(events.len() >= 5, "expected the five event fixtures");
    events
}

#[test]
fn every_fixture_event_is_a_valid_fact_and_conforms() {
    for (name, value) in fixture_events() {
        let envelope = Envelope::from_json_value(value.clone(), &mut || unreachable!())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        envelope
            .validate_fact()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Schema::Event
            .check(&envelope.to_json_value())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Schema::LimeEvent
            .check(&envelope.to_json_value())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn snapshot_fixture_conforms_to_both_snapshot_schemas() {
    let path = spec_dir().join("fixtures/lime-profile/thread-read-snapshot.json");
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    Schema::Snapshot.check(&value).unwrap();
    Schema::LimeSnapshot.check(&value).unwrap();
}
