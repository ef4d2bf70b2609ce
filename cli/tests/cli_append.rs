//! The `journal` binary end to end: atomic append of a whole input, `--stream` acknowledgements,
//! exit codes, and a child killed with SIGKILL at random moments.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::{assert_same, journal, snapshot};

fn line(i: u64) -> String {
    let event_type = [
        "turn.submitted",
        "model.requested",
        "tool.started",
        "tool.result",
    ][(i % 4) as usize];
    json!({
        "type": event_type,
        "eventId": format!("evt-{i}"),
        "timestamp": "2026-05-11T10:00:00Z",
        "sessionId": format!("sess-{}", i % 7),
        "toolCallId": format!("call-{i}"),
        "sequence": i,
        "payload": {"command": format!("ls -la /tmp/{i}"), "exitCode": 0}
    })
    .to_string()
}

fn run(cmd: &mut Command, stdin: &str) -> (i32, String, String) {
    let out = common::output_with_stdin(cmd, stdin);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_line_in_a_large_input_writes_nothing_and_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, _) = run(
        journal(dir.path()).arg("append"),
        &(0..10).map(line).collect::<Vec<_>>().join("\n"),
    );
    assert_eq!(code, 0);
    let before = snapshot(dir.path());
    let mut lines: Vec<String> = (100..5100).map(line).collect();
    lines[2499] =
        r#"{"type":"tool.started","eventId":"x","timestamp":"2026-13-45T99:00:00Z"}"#.to_string();
    let input = dir.path().join("input.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let before_with_input = {
        let mut b = before.clone();
        b.insert("input.jsonl".into(), std::fs::read(&input).unwrap());
        b
    };
    let out = journal(dir.path())
        .arg("append")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2500") && stderr.contains("timestamp"),
        "{stderr}"
    );
    assert_same(&snapshot(dir.path()), &before_with_input, "input.jsonl");
    // Not JSON at all, and invalid UTF-8, are refused the same way.
    let (code, _, stderr) = run(
        journal(dir.path()).arg("append"),
        &format!("{}\nnot json\n", line(1)),
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("line 2"), "{stderr}");
    std::fs::write(
        &input,
        b"{\"type\":\"a\xff\",\"timestamp\":\"2026-05-11T10:00:00Z\"}\n",
    )
    .unwrap();
    let out = journal(dir.path())
        .arg("append")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

#[test]
fn append_read_verify_digest_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let input: String = (0..50).map(line).collect::<Vec<_>>().join("\n");
    let (code, stdout, _) = run(journal(dir.path()).arg("append"), &input);
    assert_eq!(code, 0);
    let acks: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(acks.len(), 50);
    assert_eq!(acks[49]["position"], 50);
    // Appending the same input again stores nothing new.
    let (_, stdout, _) = run(journal(dir.path()).arg("append"), &input);
    assert!(stdout.lines().all(|l| l.contains("\"duplicate\":true")));
    let out = journal(dir.path())
        .args(["read", "--session", "sess-3", "--type", "tool."])
        .output()
        .unwrap();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e["sessionId"], "sess-3");
        assert!(e["type"].as_str().unwrap().starts_with("tool."));
        assert!(
            e["position"].is_u64()
                && e["recordedAt"].is_string()
                && e["hash"].is_string()
                && e["streamVersion"].is_u64()
        );
    }
    let digest: Value =
        serde_json::from_slice(&journal(dir.path()).arg("digest").output().unwrap().stdout)
            .unwrap();
    let arg = format!(
        "{}:{}",
        digest["position"],
        digest["hash"].as_str().unwrap()
    );
    let out = journal(dir.path())
        .args(["verify", "--digest", &arg])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["events"], 50);
    // The digest with the Merkle tree's root: it holds, and another root is history rewritten.
    let full = digest["digest"].as_str().unwrap();
    assert_eq!(full, format!("{arg}:{}", digest["root"].as_str().unwrap()));
    assert_eq!(digest["tree_size"], 50);
    let verify_with = |d: &str| {
        journal(dir.path())
            .args(["verify", "--digest", d])
            .output()
            .unwrap()
    };
    assert_eq!(verify_with(full).status.code(), Some(0));
    let other_root = format!("{arg}:{}", "ab".repeat(32));
    let out = verify_with(&other_root);
    assert_eq!(out.status.code(), Some(3));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["problems"][0]["kind"], "digest_mismatch", "{report}");
    let status: Value =
        serde_json::from_slice(&journal(dir.path()).arg("status").output().unwrap().stdout)
            .unwrap();
    assert_eq!(status["headPosition"], 50);
    assert_eq!(status["indexLag"], 0);
    // Usage errors exit 2.
    assert_eq!(
        journal(dir.path())
            .args(["verify", "--digest", "nonsense"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        journal(dir.path())
            .arg("frobnicate")
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
    // Damage in the middle of the log: open refuses with exit 3, naming the place.
    let seg = dir.path().join("segments/00000000000000000001.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[300] ^= 1;
    std::fs::write(&seg, bytes).unwrap();
    let out = journal(dir.path()).arg("verify").output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("00000000000000000001.seg") && stderr.contains("offset"),
        "{stderr}"
    );
}

#[test]
fn stream_mode_acknowledges_each_event_once_durable_and_stops_at_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut input: Vec<String> = (0..30).map(line).collect();
    input.push(line(5)); // a duplicate
    input.push("{broken".into());
    input.push(line(99));
    let (code, stdout, stderr) = run(
        journal(dir.path()).args(["append", "--stream"]),
        &input.join("\n"),
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("line 32"), "{stderr}");
    let acks: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(acks.len(), 31);
    assert_eq!(acks[30]["duplicate"], true);
    assert_eq!(acks[30]["position"], 6);
    let out = journal(dir.path()).arg("read").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        30,
        "everything acknowledged before the bad line stays"
    );
}

/// An event id names one event: reusing it with another body refuses the whole input (exit 1,
/// the error naming the id, the position that holds it and the line), and nothing of it is
/// stored; the same body again is a duplicate answered with the original position.
#[test]
fn an_event_id_reused_with_another_body_is_refused_naming_the_id_and_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(journal(dir.path()).arg("append"), &line(1));
    assert_eq!(code, 0, "{stderr}");
    let mut changed: Value = serde_json::from_str(&line(1)).unwrap();
    changed["payload"]["exitCode"] = json!(1);
    let input = format!("{}\n{changed}\n", line(2));
    let (code, stdout, stderr) = run(journal(dir.path()).arg("append"), &input);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "nothing acknowledged: {stdout}");
    for named in ["evt-1", "position 1", "line 2"] {
        assert!(stderr.contains(named), "the error names {named}: {stderr}");
    }
    let out = journal(dir.path()).arg("read").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "nothing of the refused input is stored"
    );
    // In stream mode too: the batch holding it is refused, naming it.
    let (code, _, stderr) = run(
        journal(dir.path()).args(["append", "--stream"]),
        &changed.to_string(),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("evt-1") && stderr.contains("position 1"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(journal(dir.path()).arg("append"), &line(1));
    assert_eq!(code, 0, "{stderr}");
    let ack: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (ack["position"].clone(), ack["duplicate"].clone()),
        (json!(1), json!(true))
    );
}

/// A small deterministic generator, so each iteration's kill point is reproducible.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_at_random_moments_never_loses_an_acknowledged_event() {
    let iterations: u64 = std::env::var("KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut next_line = 0u64;
    for iteration in 0..iterations {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (iteration + 1));
        let mut child = journal(dir.path())
            .args(["append", "--stream"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let start = next_line;
        let count = 200 + rng.next() % 800;
        next_line += count;
        let feeder = std::thread::spawn(move || {
            for i in start..start + count {
                if writeln!(stdin, "{}", line(i)).is_err() {
                    return;
                }
            }
        });
        let kill_after = rng.next() % count;
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let mut got = 0u64;
        while got < kill_after {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(l) => {
                    let v: Value = serde_json::from_str(&l).unwrap();
                    acked.insert(
                        v["position"].as_u64().unwrap(),
                        (
                            v["eventId"].as_str().unwrap().into(),
                            v["hash"].as_str().unwrap().into(),
                        ),
                    );
                    got += 1;
                }
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Acknowledgements printed before the kill landed count too.
        reader.join().unwrap();
        while let Ok(l) = rx.try_recv() {
            let Ok(v) = serde_json::from_str::<Value>(&l) else {
                continue;
            };
            acked.insert(
                v["position"].as_u64().unwrap(),
                (
                    v["eventId"].as_str().unwrap().into(),
                    v["hash"].as_str().unwrap().into(),
                ),
            );
        }
        let _ = feeder.join();

        let out = journal(dir.path()).arg("read").output().unwrap();
        assert!(
            out.status.success(),
            "iteration {iteration}: read failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stored: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (k, e) in stored.iter().enumerate() {
            assert_eq!(
                e["position"].as_u64(),
                Some(k as u64 + 1),
                "iteration {iteration}: positions are gapless"
            );
        }
        for (position, (id, hash)) in &acked {
            let e = stored.get(*position as usize - 1).unwrap_or_else(|| {
                panic!("iteration {iteration}: acknowledged position {position} lost")
            });
            assert_eq!(
                e["eventId"].as_str(),
                Some(id.as_str()),
                "iteration {iteration}"
            );
            assert_eq!(
                e["hash"].as_str(),
                Some(hash.as_str()),
                "iteration {iteration}"
            );
        }
        let out = journal(dir.path()).arg("verify").output().unwrap();
        assert!(
            out.status.success(),
            "iteration {iteration}: verify: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert!(
        acked.len() > 100,
        "the test acknowledged {} events in all",
        acked.len()
    );
}

#[test]
fn read_and_tail_follow_work_beside_a_running_writer() {
    let dir = tempfile::tempdir().unwrap();
    // A writer holds the journal open, appending as lines arrive.
    let mut writer = journal(dir.path())
        .args(["append", "--stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    let mut acks = BufReader::new(writer.stdout.take().unwrap()).lines();
    for i in 0..5 {
        writeln!(stdin, "{}", line(i)).unwrap();
        acks.next().unwrap().unwrap();
    }
    // `tail -f` follows without taking the lock; `read` falls back to read-only.
    let follower = journal(dir.path())
        .args(["tail", "-f", "--from", "1", "--limit", "12"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = journal(dir.path()).arg("read").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));
    let append = journal(dir.path())
        .arg("append")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(append.status.code(), Some(1), "a second writer is refused");
    assert!(String::from_utf8_lossy(&append.stderr).contains("locked"));
    for i in 5..12 {
        writeln!(stdin, "{}", line(i)).unwrap();
        acks.next().unwrap().unwrap();
    }
    let followed = follower.wait_with_output().unwrap();
    let positions: Vec<u64> = String::from_utf8_lossy(&followed.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["position"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(positions, (1..=12).collect::<Vec<_>>());
    drop(stdin);
    assert!(writer.wait().unwrap().success());
}

/// An event of about `bytes` bytes of JSON, `i`-th of session `sess`.
fn sized_line(i: usize, bytes: usize) -> String {
    json!({
        "type": "tool.result",
        "eventId": format!("big-{i}"),
        "timestamp": "2026-05-11T10:00:00Z",
        "sessionId": "sess",
        "payload": {"output": "o".repeat(bytes)},
    })
    .to_string()
}

#[test]
fn stream_mode_groups_stay_within_the_batch_byte_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    // 3,000 events of 20 KB: 60 MB of valid input, several batches' worth of bytes.
    let input = tmp.path().join("input.jsonl");
    let lines: Vec<String> = (0..3000).map(|i| sized_line(i, 20_000)).collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = journal(&dir)
        .args(["append", "--stream"])
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let positions: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["position"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(positions, (1..=3000).collect::<Vec<u64>>());
}

#[test]
fn stream_mode_refuses_an_oversized_event_by_its_line_after_acknowledging_those_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let input = tmp.path().join("input.jsonl");
    let mut lines: Vec<String> = (0..10).map(|i| sized_line(i, 100)).collect();
    lines.push(sized_line(10, 2 << 20)); // line 11: over the 1 MiB event limit
    lines.push(sized_line(11, 100));
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = journal(&dir)
        .args(["append", "--stream"])
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("line 11") && stderr.contains("over the event size limit"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        10,
        "the lines before it are acknowledged"
    );
    let read = journal(&dir).arg("read").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&read.stdout).lines().count(), 10);
}

/// The index backlog an open reported on standard error (`index_caught_up`), in events.
fn backlog_reported(stderr: &str) -> u64 {
    let Some(json) = stderr
        .lines()
        .find_map(|l| l.strip_prefix("journal: recovery: "))
    else {
        return 0;
    };
    let actions: Vec<Value> = serde_json::from_str(json).unwrap();
    actions
        .iter()
        .filter(|a| a["kind"] == "index_caught_up")
        .map(|a| a["to"].as_u64().unwrap() + 1 - a["from"].as_u64().unwrap())
        .sum()
}

#[test]
fn writers_killed_again_and_again_leave_the_index_a_round_behind_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let per_round = 1500u64;
    let mut rng = XorShift(0x5EED_1DE7);
    let mut backlogs = Vec::new();
    for round in 0..12u64 {
        let mut child = journal(dir.path())
            .args(["append", "--stream"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let start = round * per_round;
        let feeder = std::thread::spawn(move || {
            for i in start..start + per_round {
                if writeln!(stdin, "{}", line(i)).is_err() {
                    return;
                }
            }
        });
        // Killed after some acknowledgements: well inside the indexer's idle wait.
        let kill_after = 200 + rng.next() % 800;
        let mut lines = BufReader::new(stdout).lines();
        for _ in 0..kill_after {
            if lines.next().is_none() {
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL
        let out = child.wait_with_output().unwrap();
        let _ = feeder.join();
        backlogs.push(backlog_reported(&String::from_utf8_lossy(&out.stderr)));
    }
    eprintln!("index backlogs at each open: {backlogs:?}");
    // Each open re-indexes at most what the round before it appended, never the sum of them.
    for (round, backlog) in backlogs.iter().enumerate() {
        assert!(
            *backlog <= per_round,
            "round {round} re-indexed {backlog} events (backlogs {backlogs:?})"
        );
    }
    let out = journal(dir.path()).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
