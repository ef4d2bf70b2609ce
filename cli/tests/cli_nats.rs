//! Replication, following and ingest through a three-node JetStream cluster of real
//! `nats-server` processes (`tests/nats/mod.rs`), with the `journal` binary killed and
//! restarted and a NATS node killed with SIGKILL: the replica's digest equals the source's,
//! every event acknowledged by JetStream is in the journal once, a tampered or missing
//! message is refused with its position, and a fleet journal's events prove their origin.

mod common;
mod nats;
mod serving;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::journal;
use journal_engine::{AppendOptions, Chain, Journal, Options};
use journal_format::merkle::{leaf_hash, verify_inclusion};
use journal_format::{Envelope, Position};
use journal_replicate::Origin;
use nats::{jetstream, runtime, Cluster, Killed};
use serde_json::Value;

/// One event's JSON line.
fn line(i: u64, session: &str) -> String {
    format!(
        "{{\"type\":\"tool.started\",\"eventId\":\"{session}-{i}\",\"timestamp\":\"2026-05-11T10:00:00Z\",\"sessionId\":\"{session}\",\"payload\":{{\"n\":{i}}}}}\n"
    )
}

/// `journal append --stream` of `lines`, as a running process.
fn spawn_append(dir: &Path, lines: String) -> Killed {
    let mut child = journal(dir)
        .args(["append", "--stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = stdin.write_all(lines.as_bytes());
    });
    Killed(Some(child))
}

fn spawn(cmd: &mut Command) -> Killed {
    Killed(Some(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    ))
}

/// The position the replicate task noted as acknowledged for `stream`.
fn cursor(dir: &Path, stream: &str) -> u64 {
    std::fs::read_to_string(dir.join(format!("replicate.{stream}.cursor")))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits until `f` holds, up to `limit`, naming `what` when it does not.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let steps = limit.as_millis() / 100;
    for _ in 0..steps {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not within {limit:?}");
}

/// `journal digest`'s digest.
fn digest(dir: &Path) -> String {
    let out = journal(dir).arg("digest").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["digest"].as_str().unwrap().to_string()
}

/// The head position `journal status` gives (read-only beside a writer).
fn head(dir: &Path) -> u64 {
    let out = journal(dir).arg("status").output().unwrap();
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["headPosition"].as_u64())
        .unwrap_or(0)
}

#[test]
fn replicate_200k_through_a_node_kill_and_two_replicate_kills_gives_the_same_digest() {
    let mut cluster = Cluster::start(3);
    let url = cluster.url();
    let (src, rep) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first: String = (1..=100_000)
        .map(|i| line(i, &format!("s{}", i % 50)))
        .collect();
    let rest: String = (100_001..=200_000)
        .map(|i| line(i, &format!("s{}", i % 50)))
        .collect();
    let mut append = spawn_append(src.path(), first);
    assert!(append
        .wait_for(Duration::from_secs(120))
        .is_some_and(|s| s.success()));
    let mut writer = spawn_append(src.path(), rest);
    let replicate = || {
        spawn(journal(src.path()).args([
            "replicate",
            "--to",
            &url,
            "--stream",
            "REPL",
            "--replicas",
            "3",
        ]))
    };
    let mut publisher = replicate();
    let mut follower = spawn(journal(rep.path()).args([
        "follow", "--from", &url, "--stream", "REPL", "--until", "200000",
    ]));
    let src_dir = src.path().to_path_buf();
    let acked = |n: u64| {
        let dir = src_dir.clone();
        move || cursor(&dir, "REPL") >= n
    };
    wait_until(
        "30,000 acknowledged",
        Duration::from_secs(60),
        acked(30_000),
    );
    publisher.kill();
    publisher = replicate();
    wait_until(
        "70,000 acknowledged",
        Duration::from_secs(60),
        acked(70_000),
    );
    cluster.kill(1);
    eprintln!("node 1 killed at {}", cursor(src.path(), "REPL"));
    std::thread::sleep(Duration::from_millis(500));
    cluster.restart(1);
    wait_until(
        "120,000 acknowledged",
        Duration::from_secs(90),
        acked(120_000),
    );
    publisher.kill();
    eprintln!("replicate killed at {}", cursor(src.path(), "REPL"));
    publisher = replicate();
    let status = follower.wait_for(Duration::from_secs(150));
    assert!(
        status.is_some_and(|s| s.success()),
        "the follower ended with {status:?}"
    );
    assert!(writer
        .wait_for(Duration::from_secs(10))
        .is_some_and(|s| s.success()));
    publisher.kill();
    let held = stream_positions(&url, "REPL");
    assert_eq!(held.len(), 200_000, "the stream holds each position once");
    assert!(
        held.iter().zip(1..).all(|(p, n)| *p == n),
        "the stream holds the positions in order"
    );
    let source_digest = digest(src.path());
    assert!(source_digest.starts_with("200000:"), "{source_digest}");
    assert_eq!(digest(rep.path()), source_digest);
    let verify = journal(rep.path())
        .args(["verify", "--digest", &source_digest])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// The `Journal-Position` of each message stream `name` holds, in stream order.
fn stream_positions(url: &str, name: &str) -> Vec<u64> {
    use async_nats::jetstream::consumer::{pull, AckPolicy};
    use futures_util::StreamExt;
    let rt = runtime();
    rt.block_on(async {
        let (_, js) = jetstream(url).await;
        let mut stream = retry(|| js.get_stream(name)).await;
        let count = stream.info().await.unwrap().state.messages;
        let consumer = stream
            .create_consumer(pull::Config {
                ack_policy: AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let mut positions = Vec::new();
        while (positions.len() as u64) < count {
            let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
                .await
                .expect("the stream's messages within 30 s")
                .unwrap()
                .unwrap();
            let headers = message.headers.as_ref().unwrap();
            let position = headers
                .get(journal_replicate::HEADER_POSITION)
                .unwrap()
                .as_str()
                .parse()
                .unwrap();
            positions.push(position);
        }
        positions
    })
}

/// The child side of the ingest test: publishes `JOURNAL_NATS_COUNT` events to
/// `agents.p<id>` with JetStream acknowledgements, printing each acknowledged event id.
#[test]
fn ingest_publisher_child() {
    let (Ok(url), Ok(id), Ok(count)) = (
        std::env::var("JOURNAL_NATS_URL"),
        std::env::var("JOURNAL_NATS_PUBLISHER"),
        std::env::var("JOURNAL_NATS_COUNT"),
    ) else {
        return; // Run as a test on its own: nothing to do.
    };
    let count: u64 = count.parse().unwrap();
    let rt = runtime();
    rt.block_on(async move {
        let (_, js) = jetstream(&url).await;
        let stdout = std::io::stdout();
        for i in 0..count {
            let body = line(i, &format!("p{id}"));
            // Retried until acknowledged: the same event id, so stored once.
            for _ in 0..100 {
                let sent = js
                    .publish(format!("agents.p{id}"), body.clone().into_bytes().into())
                    .await;
                if let Ok(ack) = sent {
                    if ack.await.is_ok() {
                        writeln!(stdout.lock(), "p{id}-{i}").unwrap();
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

#[test]
fn ingest_from_8_publishers_with_the_journal_killed_stores_each_acked_event_once() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let mut options = journal_replicate::IngestOptions::new(&url, "agents.>");
    options.replicas = 3;
    let dead = rt.block_on(async {
        let (client, js) = jetstream(&url).await;
        retry(|| journal_replicate::ingest::ensure_stream(&js, &options)).await;
        let dead = client.subscribe("journal.dead").await.unwrap();
        js.publish("agents.bad", "not an event".into())
            .await
            .unwrap()
            .await
            .unwrap();
        dead
    });
    let ingest = || {
        spawn(journal(dir.path()).args([
            "ingest",
            "--from",
            &url,
            "--subject",
            "agents.>",
            "--replicas",
            "3",
        ]))
    };
    let mut consumer = ingest();
    let me = std::env::current_exe().unwrap();
    let publishers: Vec<_> = (0..8)
        .map(|p| {
            Command::new(&me)
                .args([
                    "--exact",
                    "ingest_publisher_child",
                    "--nocapture",
                    "--quiet",
                ])
                .env("JOURNAL_NATS_URL", &url)
                .env("JOURNAL_NATS_PUBLISHER", p.to_string())
                .env("JOURNAL_NATS_COUNT", "2500")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_until("5,000 ingested", Duration::from_secs(60), || {
        head(dir.path()) >= 5_000
    });
    consumer.kill();
    consumer = ingest();
    let mut acked = BTreeSet::new();
    for child in publishers {
        let out = child.wait_with_output().unwrap();
        for id in out.stdout.lines() {
            let id = id.unwrap();
            if id.starts_with('p') {
                acked.insert(id);
            }
        }
    }
    assert!(acked.len() >= 19_000, "only {} acknowledged", acked.len());
    wait_until(
        "every acknowledged event stored",
        Duration::from_secs(60),
        || head(dir.path()) >= acked.len() as u64,
    );
    std::thread::sleep(Duration::from_millis(500));
    consumer.kill();
    let stored = Journal::open(dir.path(), Options::default()).unwrap();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for event in stored.read(Position::FIRST, None, Chain::Verified) {
        *counts.entry(event.unwrap().envelope.event_id).or_default() += 1;
    }
    for id in &acked {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "event {id} is not stored exactly once"
        );
    }
    assert!(counts.values().all(|n| *n == 1), "an event is stored twice");
    let letter = rt
        .block_on(async {
            use futures_util::StreamExt;
            let mut dead = dead;
            tokio::time::timeout(Duration::from_secs(10), dead.next()).await
        })
        .ok()
        .flatten()
        .expect("the bad message reaches the dead letters");
    let reason = letter.headers.unwrap();
    assert!(reason.get("Journal-Refused").is_some(), "{reason:?}");
}

/// `f`'s answer, asked again for up to 30 s while JetStream elects its leaders after a start.
async fn retry<T, E: std::fmt::Debug, F: std::future::Future<Output = Result<T, E>>>(
    mut f: impl FnMut() -> F,
) -> T {
    let mut last = None;
    for _ in 0..60 {
        match f().await {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("JetStream did not answer within 30 s: {last:?}");
}

/// A source journal of `n` single-event batches in `dir`, and its frames with their links.
fn source(dir: &Path, n: u64, session: &str) -> Vec<(Vec<u8>, String)> {
    let journal = Journal::open(dir, Options::default()).unwrap();
    let rt = runtime();
    for i in 1..=n {
        let mut event = Envelope::new(
            "tool.started",
            format!("{session}-{i}"),
            "2026-05-11T10:00:00Z",
        );
        event.session_id = Some(session.to_string());
        rt.block_on(journal.append_batch(vec![event], AppendOptions::default()))
            .unwrap();
    }
    let mut frames = Vec::new();
    journal
        .scan(Position::FIRST, None, Chain::Verified, |r| {
            frames.push((r.frame.to_vec(), r.hash.to_hex().to_string()));
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    frames
}

/// Publishes `frames` to stream `name` as `replicate` does (positions from 1, `skip` left out,
/// the body of `flip` with a flipped byte).
fn publish_frames(url: &str, name: &str, frames: &[(Vec<u8>, String)], flip: u64, skip: u64) {
    let rt = runtime();
    rt.block_on(async {
        let (_, js) = jetstream(url).await;
        let config = async_nats::jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![format!("{name}.x")],
            ..Default::default()
        };
        retry(|| js.get_or_create_stream(config.clone())).await;
        for (i, (frame, hash)) in frames.iter().enumerate() {
            let position = i as u64 + 1;
            if position == skip {
                continue;
            }
            let mut frame = frame.clone();
            if position == flip {
                let last = frame.len() - 1;
                frame[last] ^= 0x20;
            }
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(journal_replicate::HEADER_JOURNAL, "tampered-source");
            headers.insert(
                journal_replicate::HEADER_POSITION,
                position.to_string().as_str(),
            );
            headers.insert(journal_replicate::HEADER_HASH, hash.as_str());
            js.publish_with_headers(format!("{name}.x"), headers, frame.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
}

#[test]
fn a_flipped_byte_or_a_skipped_position_is_refused_with_its_position() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let src = tempfile::tempdir().unwrap();
    let frames = source(src.path(), 20, "t");
    publish_frames(&url, "FLIPPED", &frames, 5, 0);
    publish_frames(&url, "SKIPPED", &frames, 0, 7);
    // (stream, the position refused, what the refusal says, the replica's head after it)
    let cases = [("FLIPPED", 5, "damaged", 4), ("SKIPPED", 8, "gap", 6)];
    for (stream, position, what, kept) in cases {
        let rep = tempfile::tempdir().unwrap();
        let mut follower = journal(rep.path());
        follower.args([
            "follow", "--from", &url, "--stream", stream, "--until", "20",
        ]);
        let out = follower.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stream}: {stderr}");
        assert!(
            stderr.contains(&format!("position {position}")) && stderr.contains(what),
            "{stream}: {stderr}"
        );
        assert_eq!(
            head(rep.path()),
            kept,
            "{stream}: the positions ahead of the refused one are kept"
        );
    }
}

#[test]
fn a_fleet_journal_keeps_each_events_origin_and_proves_it_against_its_source() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let (a, b, fleet) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    source(a.path(), 30, "alpha-run");
    source(b.path(), 30, "beta-run");
    for (dir, stream) in [(a.path(), "FLEETA"), (b.path(), "FLEETB")] {
        let out = journal(dir)
            .args([
                "replicate",
                "--to",
                &url,
                "--stream",
                stream,
                "--until",
                "30",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = journal(fleet.path())
        .args([
            "follow", "--from", &url, "--stream", "FLEETA", "--stream", "FLEETB", "--until", "30",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sources: BTreeMap<String, Journal> = [a.path(), b.path()]
        .into_iter()
        .map(|dir| {
            let j = Journal::open(dir, Options::default()).unwrap();
            (j.id().unwrap().to_string(), j)
        })
        .collect();
    let gathered = Journal::open(fleet.path(), Options::default()).unwrap();
    let mut seen = 0;
    for event in gathered.read(Position::FIRST, None, Chain::Verified) {
        let event = event.unwrap();
        let origin = Origin::of(&event).expect("every fleet event has its origin");
        let source = &sources[&origin.journal];
        let head = source.tree_head().unwrap();
        let proof = source
            .inclusion_proof(Position(origin.position), head.position.0)
            .unwrap();
        let leaf = leaf_hash(&Origin::source_body(&event).unwrap());
        verify_inclusion(
            &leaf,
            origin.position - 1,
            head.position.0,
            &proof,
            &head.root,
        )
        .expect("the event is its source's, by the source's digest");
        let held = source.get_position(Position(origin.position)).unwrap();
        assert_eq!(held.hash.to_hex().to_string(), origin.hash);
        seen += 1;
    }
    assert_eq!(seen, 60, "both sources' events, each once");
    drop(gathered);

    // The review app on the fleet journal lists both sources' sessions.
    let server = serving::Server::start(fleet.path(), &[]);
    wait_until("both sessions listed", Duration::from_secs(30), || {
        let page = serving::get(&server.url("/"), None).body;
        page.contains("/sessions/alpha-run") && page.contains("/sessions/beta-run")
    });
    let session = serving::get(&server.url("/sessions/beta-run"), None);
    assert_eq!(session.status, 200, "{}", session.body);
    assert!(
        session.body.contains("tool.started"),
        "the session's events are shown"
    );
}

#[test]
fn a_fleet_gathers_every_event_once_through_a_node_kill() {
    let mut cluster = Cluster::start(3);
    let url = cluster.url();
    let (a, b, fleet) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    for (dir, stream, name) in [(a.path(), "KILLA", "ka"), (b.path(), "KILLB", "kb")] {
        let lines: String = (1..=30_000)
            .map(|i| line(i, &format!("{name}{}", i % 20)))
            .collect();
        let mut append = spawn_append(dir, lines);
        assert!(append
            .wait_for(Duration::from_secs(120))
            .is_some_and(|s| s.success()));
        let out = journal(dir)
            .args(["replicate", "--to", &url, "--stream", stream])
            .args(["--replicas", "3", "--until", "30000"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut follower = spawn(journal(fleet.path()).args([
        "follow", "--from", &url, "--stream", "KILLA", "--stream", "KILLB", "--until", "30000",
    ]));
    wait_until("10,000 gathered", Duration::from_secs(60), || {
        head(fleet.path()) >= 10_000
    });
    cluster.kill(1);
    std::thread::sleep(Duration::from_millis(500));
    cluster.restart(1);
    let status = follower.wait_for(Duration::from_secs(150));
    assert!(
        status.is_some_and(|s| s.success()),
        "the follower ended with {status:?}"
    );
    let gathered = Journal::open(fleet.path(), Options::default()).unwrap();
    let mut origins = BTreeMap::new();
    for event in gathered.read(Position::FIRST, None, Chain::Verified) {
        let origin = Origin::of(&event.unwrap()).expect("every fleet event has its origin");
        *origins
            .entry((origin.journal, origin.position))
            .or_insert(0u32) += 1;
    }
    assert_eq!(origins.len(), 60_000, "every event of both sources");
    assert!(origins.values().all(|n| *n == 1), "each once");
}

#[test]
fn serve_with_replicate_to_publishes_what_it_holds() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let (src, rep) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lines: String = (1..=500).map(|i| line(i, "served")).collect();
    let mut append = spawn_append(src.path(), lines);
    assert!(append
        .wait_for(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    let mut serve = spawn(journal(src.path()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--replicate-to",
        &url,
        "--replicate-stream",
        "SERVED",
    ]));
    wait_until("500 acknowledged", Duration::from_secs(60), || {
        cursor(src.path(), "SERVED") >= 500
    });
    let out = journal(rep.path())
        .args([
            "follow", "--from", &url, "--stream", "SERVED", "--until", "500",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(digest(rep.path()), digest(src.path()));
    serve.kill();
}
