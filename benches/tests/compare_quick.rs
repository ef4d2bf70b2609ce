//! A smoke run of the comparison command: `compare --quick` runs every workload at small sizes
//! and writes a JSON document naming each workload and, for appends, every engine; the http
//! workload's cells and event stream, the tree workload's cells and proofs, and the app
//! workload's answer and render times are there too.

use std::process::Command;

#[test]
fn compare_quick_reports_every_workload_and_engine() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let json_path = scratch.path().join("compare.json");
    let out = Command::new(env!("CARGO_BIN_EXE_compare"))
        .args(["--quick", "--events", "400", "--dir"])
        .arg(scratch.path())
        .arg("--json")
        .arg(&json_path)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("json written")).expect("json");
    for workload in [
        "append", "read", "open", "rebuild", "replay", "import", "http", "tree", "app", "archive",
    ] {
        assert!(
            report["workloads"][workload].is_object(),
            "{workload} missing"
        );
    }
    let app = &report["workloads"]["app"];
    let pages = app["sessions"].as_array().expect("app sessions");
    assert_eq!(pages.len(), 3, "{app}");
    for page in pages.iter().chain([&app["list"]]) {
        assert!(page["answerMs"].as_f64().is_some_and(|v| v > 0.0), "{page}");
        if app["browser"] == true {
            assert!(
                page["renderedMs"].as_f64().is_some_and(|v| v > 0.0),
                "{page}"
            );
        }
    }
    let cells = report["workloads"]["append"]["cells"]
        .as_array()
        .expect("cells");
    assert_eq!(cells.len(), 6);
    for cell in cells {
        for engine in ["bound", "journal", "sqlite", "redb", "okaywal"] {
            let events_per_s = cell["engines"][engine]["eventsPerSec"].as_f64();
            assert!(events_per_s.is_some_and(|v| v > 0.0), "{engine} in {cell}");
            // Every engine spends some CPU on every event it stores.
            let cpu = cell["engines"][engine]["cpuUsPerEvent"].as_f64();
            assert!(cpu.is_some_and(|v| v > 0.0), "{engine}'s CPU in {cell}");
        }
    }
    let http = &report["workloads"]["http"];
    let cells = http["cells"].as_array().expect("http cells");
    assert_eq!(cells.len(), 6);
    for cell in cells {
        for side in ["http", "in-process"] {
            let events_per_s = cell["sides"][side]["eventsPerSec"].as_f64();
            assert!(events_per_s.is_some_and(|v| v > 0.0), "{side} in {cell}");
        }
    }
    for side in ["http", "in-process"] {
        let delivered = http["stream"][side]["deliveredPerSec"].as_f64();
        assert!(
            delivered.is_some_and(|v| v > 0.0),
            "the stream {side}: {http}"
        );
    }
    assert_eq!(http["targets"].as_array().map(Vec::len), Some(3));
    let tree = &report["workloads"]["tree"];
    let cells = tree["append"].as_array().expect("tree cells");
    assert_eq!(cells.len(), 3);
    for cell in cells {
        assert!(cell["ratio"].as_f64().is_some_and(|r| r > 0.0), "{cell}");
    }
    for proof in ["inclusion", "consistency"] {
        let figures = &tree["proofs"][proof];
        assert!(
            figures["produce_us"].as_f64().is_some_and(|v| v > 0.0),
            "{tree}"
        );
        assert!(
            figures["hashes"].as_f64().is_some_and(|v| v > 0.0),
            "{tree}"
        );
    }
    assert!(tree["proofs"]["tree_bytes_per_event"]
        .as_f64()
        .is_some_and(|v| v >= 32.0));
    let archive = &report["workloads"]["archive"];
    assert!(
        archive["segments"].as_u64().is_some_and(|n| n >= 2),
        "{archive}"
    );
    for figure in [
        "archive_ms",
        "restore_ms",
        "read_live_events_per_s",
        "read_attached_events_per_s",
    ] {
        assert!(
            archive[figure].as_f64().is_some_and(|v| v > 0.0),
            "{figure}: {archive}"
        );
    }
    // The scratch directory is removed at the end of the run.
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .expect("lists")
        .flatten()
        .filter(|e| e.path() != json_path)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
