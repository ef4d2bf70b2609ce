//! Hostile input: every file of `tests/hostile/` (and the large inputs generated here) is
//! refused by `journal append` with exit code 1 and an error naming the line and the problem,
//! and the journal directory is left byte-for-byte unchanged.

use std::path::Path;

use journal_format::Envelope;
use serde_json::json;

mod common;
use common::{assert_same, journal, snapshot};

/// The expected phrase in the error for each corpus file (besides the line number).
const CORPUS: &[(&str, &str)] = &[
    ("invalid-utf8", "line 2"),
    ("deep-nesting", "nest deeper than 127 levels"),
    ("huge-integer", "does not fit 64 bits"),
    (
        "huge-float",
        "field `payload.usd`: number 1e400 is out of range",
    ),
    (
        "tiny-float",
        "field `payload.usd`: number 1e-400 is too small",
    ),
    ("wrong-type-session", "sessionId"),
    ("wrong-type-sequence", "sequence"),
    ("wrong-type-task-object", "task"),
    ("null-id", "taskId"),
    ("empty-id", "runId"),
    ("empty-event-id", "eventId"),
    ("missing-type", "missing required field `type`"),
    ("missing-timestamp", "missing required field `timestamp`"),
    ("duplicate-keys", "duplicate key `exitCode`"),
    ("timestamp-out-of-range", "timestamp"),
    ("timestamp-not-rfc3339", "not an RFC 3339 date-time"),
    ("timestamp-impossible-date", "timestamp"),
    ("journal-assigned-field", "assigned by the journal"),
    ("not-an-object", "expected a JSON object"),
    ("truncated-record", "EOF"),
    ("bad-provenance", "provenance"),
    ("trailing-garbage", "trailing characters"),
];

fn assert_refused(dir: &Path, input: &Path, phrase: &str, line: Option<usize>) {
    let before = snapshot(dir);
    let out = journal(dir).arg("append").arg(input).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = input.file_name().unwrap().to_string_lossy();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{name}: exit code; stderr: {stderr}"
    );
    assert!(
        stderr.contains(phrase),
        "{name}: the error names the problem ({phrase}): {stderr}"
    );
    if let Some(line) = line {
        assert!(
            stderr.contains(&format!("line {line}")),
            "{name}: the error names line {line}: {stderr}"
        );
    }
    assert_same(&snapshot(dir), &before, &name);
}

fn existing_journal() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("seed.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| json!({"type":"tool.started","eventId":format!("seed-{i}"),"timestamp":"2026-05-11T10:00:00Z","sessionId":"s0"}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    assert!(journal(&dir.path().join("j"))
        .arg("append")
        .arg(&input)
        .output()
        .unwrap()
        .status
        .success());
    dir
}

#[test]
fn every_corpus_input_is_refused_by_name_and_line_and_changes_nothing() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let files: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    assert_eq!(
        files.len(),
        CORPUS.len(),
        "every corpus file has an expectation: {files:?}"
    );
    let tmp = existing_journal();
    let dir = tmp.path().join("j");
    for (name, phrase) in CORPUS {
        assert_refused(&dir, &corpus.join(format!("{name}.jsonl")), phrase, Some(2));
    }
}

#[test]
fn oversized_events_and_batches_are_refused_and_change_nothing() {
    let tmp = existing_journal();
    let dir = tmp.path().join("j");
    let good =
        r#"{"type":"session.created","eventId":"good-1","timestamp":"2026-05-11T10:00:00Z"}"#;

    // An event exactly one byte over the 1 MiB stored-size limit.
    let limit = 1024 * 1024;
    let mut e = Envelope::new("tool.result", "big", "2026-05-11T10:00:00Z");
    e.extra.insert("pad".into(), json!(""));
    let overhead = e.to_msgpack().unwrap().len();
    e.extra
        .insert("pad".into(), json!("x".repeat(limit + 1 - overhead)));
    while e.to_msgpack().unwrap().len() > limit + 1 {
        let pad = e.extra["pad"].as_str().unwrap()[1..].to_string();
        e.extra.insert("pad".into(), json!(pad));
    }
    while e.to_msgpack().unwrap().len() < limit + 1 {
        let pad = e.extra["pad"].as_str().unwrap().to_string() + "x";
        e.extra.insert("pad".into(), json!(pad));
    }
    assert_eq!(e.to_msgpack().unwrap().len(), limit + 1);
    let input = tmp.path().join("one-byte-over.jsonl");
    std::fs::write(&input, format!("{good}\n{}\n", e.to_json_value())).unwrap();
    assert_refused(
        &dir,
        &input,
        "1048577 bytes stored, over the event size limit of 1048576",
        Some(2),
    );
    // One byte less is accepted.
    let pad = e.extra["pad"].as_str().unwrap()[1..].to_string();
    e.extra.insert("pad".into(), json!(pad));
    let fits = tmp.path().join("at-limit.jsonl");
    std::fs::write(&fits, format!("{}\n", e.to_json_value())).unwrap();
    assert!(journal(&dir)
        .arg("append")
        .arg(&fits)
        .output()
        .unwrap()
        .status
        .success());

    // A 2 MiB string.
    let input = tmp.path().join("huge-string.jsonl");
    let huge = json!({"type":"tool.result","eventId":"huge","timestamp":"2026-05-11T10:00:00Z","pad":"y".repeat(2 << 20)});
    std::fs::write(&input, format!("{good}\n{huge}\n")).unwrap();
    assert_refused(&dir, &input, "over the event size limit", Some(2));

    // A batch of 10,001 events, one over the batch limit.
    let input = tmp.path().join("batch-over-limit.jsonl");
    let lines: Vec<String> = (0..10_001)
        .map(|i| json!({"type":"tool.progress","eventId":format!("b{i}"),"timestamp":"2026-05-11T10:00:00Z"}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    assert_refused(
        &dir,
        &input,
        "batch length (events) is 10001, over the limit of 10000",
        Some(10_001),
    );

    // 20 events of nearly 1 MiB each: over the 16 MiB batch limit at the 17th.
    let input = tmp.path().join("batch-bytes-over-limit.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| json!({"type":"tool.result","eventId":format!("m{i}"),"timestamp":"2026-05-11T10:00:00Z","pad":"z".repeat(1_000_000)}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    assert_refused(&dir, &input, "batch size (stored bytes)", Some(17));
}

/// The most bytes an input line may hold: four times the 1 MiB event limit, since JSON's
/// escapes can make an event's line several times its stored size.
const LINE_BYTES_MAX: usize = 4 << 20;

/// The address space `journal` is given below: under the 64 MiB line it is fed, so a process
/// that buffered the line whole would fail to allocate instead of refusing it. The binary and
/// its runtime take about 50 MiB of it before reading a byte (a debug build with the server's
/// TLS and logging in it), so the cap leaves room above that.
const ADDRESS_SPACE_KIB: usize = 60 * 1024;

/// Runs `journal --dir DIR ARGS` under `ulimit -v`, with `stdin` as its standard input.
fn capped(dir: &Path, args: &[&str], stdin: &Path) -> std::process::Output {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_journal"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdin(std::fs::File::open(stdin).unwrap());
    cmd.output().unwrap()
}

#[test]
fn a_line_past_the_bound_is_refused_by_number_without_being_buffered() {
    let tmp = existing_journal();
    let dir = tmp.path().join("j");
    // Line 2 is 64 MiB of one JSON string.
    let input = tmp.path().join("long-line.jsonl");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
        writeln!(
            f,
            r#"{{"type":"session.created","eventId":"ok-1","timestamp":"2026-05-11T10:00:00Z"}}"#
        )
        .unwrap();
        write!(
            f,
            r#"{{"type":"tool.result","eventId":"long","timestamp":"2026-05-11T10:00:00Z","pad":""#
        )
        .unwrap();
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..64 {
            f.write_all(&chunk).unwrap();
        }
        writeln!(f, r#""}}"#).unwrap();
    }
    let limit = LINE_BYTES_MAX.to_string();
    for args in [&["append", "-"][..], &["append", "--stream", "-"][..]] {
        let before = snapshot(&dir);
        let out = capped(&dir, args, &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("line 2") && stderr.contains(&limit),
            "{args:?}: names the line and the limit: {stderr}"
        );
        if args.contains(&"--stream") {
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).lines().count(),
                1,
                "{args:?}"
            );
        } else {
            assert_same(&snapshot(&dir), &before, "a long line");
        }
    }
    // A command's arguments from standard input are bounded too.
    let out = capped(&dir, &["command", "create_task", "-"], &input);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["error"]["rule"], "invalid_arguments");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&limit),
        "{answer}"
    );
}

/// An event nests at most 127 levels of arrays and maps, its own object counting as the first
/// (`docs/FORMAT.md`, Limits): at the limit it is stored and read back unchanged; one level more
/// is refused naming the line and the limit, and nothing is written.
#[test]
fn nesting_is_stored_up_to_the_documented_limit_and_refused_one_past_it() {
    let tmp = existing_journal();
    let dir = tmp.path().join("j");
    let nested = |levels: usize| {
        let mut value = json!("leaf");
        for _ in 0..levels {
            value = json!([value]);
        }
        value
    };
    let event = |id: &str, levels: usize| {
        json!({"type":"vendor.hostile.deep","eventId":id,"timestamp":"2026-05-11T10:00:00Z",
            "sessionId":"s0","payload":nested(levels)})
    };
    let good =
        r#"{"type":"session.created","eventId":"good-1","timestamp":"2026-05-11T10:00:00Z"}"#;
    let past = tmp.path().join("one-level-past.jsonl");
    std::fs::write(&past, format!("{good}\n{}\n", event("past", 127))).unwrap();
    assert_refused(&dir, &past, "nest deeper than 127 levels", Some(2));

    let at_limit = tmp.path().join("at-limit.jsonl");
    std::fs::write(&at_limit, format!("{}\n", event("deepest", 126))).unwrap();
    let out = journal(&dir).arg("append").arg(&at_limit).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = journal(&dir)
        .args(["read", "--from", "21"])
        .output()
        .unwrap();
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("serde_json reads it");
    assert_eq!(
        read["payload"],
        nested(126),
        "stored and read back unchanged"
    );
}

/// A schedule's next run must be a time the journal can record (up to 2262-04-11): an interval
/// that puts it past that is refused by the command with its rule, never clamped.
#[test]
fn a_schedule_interval_past_the_last_recordable_time_is_refused_by_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let args = json!({"sessionId":"q","schedule":{"scheduleId":"nightly","name":"n","enabled":true,
        "intervalSeconds":18_446_744_073_709_551_615_u64,"nextRunAt":"2026-05-10T02:00:00Z",
        "task":{"taskType":"audit"}}});
    let out = journal(&dir)
        .args(["command", "upsert_schedule", &args.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["error"]["rule"], "invalid_interval", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("nightly") && message.contains("2262"),
        "{message}"
    );
    let read = journal(&dir).arg("read").output().unwrap();
    assert!(read.stdout.is_empty(), "nothing written");
}
