//! Read-only opening beside a writer: no lock taken, nothing written, appends refused, and the
//! reader follows what the writer appends (new frames and new segments) through `refresh` and
//! subscriptions.

mod common;

use common::*;
use journal_engine::{Chain, Error, Filter, Journal, Options};
use journal_format::Position;

fn read_only() -> Options {
    Options {
        read_only: true,
        ..small_segments()
    }
}

#[test]
fn a_reader_beside_a_writer_sees_what_is_committed_and_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Journal::open(dir.path(), small_segments()).unwrap();
    append(&writer, (0..30).map(|k| event(k, "s1")).collect());
    let reader = Journal::open(dir.path(), read_only()).unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.head().position, Position(30));
    assert!(matches!(
        reader.append_batch_blocking(vec![event(99, "s1")], Default::default()),
        Err(Error::ReadOnly)
    ));
    // Filtered reads scan the log instead of the writer's index.
    let s1: Vec<_> = reader
        .query(Filter {
            task: Some("task-1".into()),
            ..Filter::default()
        })
        .unwrap()
        .collect();
    assert_eq!(s1.len(), 10);
    assert!(reader.get("evt-s1-7").unwrap().is_some());
    // The writer goes on, across several segment rolls; the reader catches up.
    for b in 1..80u64 {
        append(
            &writer,
            (0..10).map(|k| event(1000 * b + k, "s2")).collect(),
        );
    }
    assert!(segment_files(dir.path()).len() > 3);
    let head = reader.refresh().unwrap();
    assert_eq!(head, writer.head());
    let all: Vec<_> = reader
        .read(Position::FIRST, None, Chain::Verified)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(all.len(), 820);
    let report = reader.verify(&Default::default(), &mut |_, _| {}).unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

#[test]
fn a_read_only_open_repairs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Journal::open(dir.path(), small_segments()).unwrap();
    append(&writer, (0..5).map(|k| event(k, "s1")).collect());
    writer.close();
    // A torn write at the tail: a writer's open would cut it; a reader leaves it alone.
    let tail = segment_files(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&tail).unwrap();
    let torn = bytes[64..64 + 40].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&tail, &bytes).unwrap();
    let reader = Journal::open(dir.path(), read_only()).unwrap();
    assert_eq!(reader.head().position, Position(5));
    assert!(reader.recovery_report().actions.is_empty());
    drop(reader);
    assert_eq!(
        std::fs::read(&tail).unwrap(),
        bytes,
        "the reader wrote nothing"
    );
    assert!(!dir.path().join("quarantine").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_subscription_follows_another_writer() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Journal::open(dir.path(), small_segments()).unwrap();
    writer
        .append_batch(
            (0..5).map(|k| event(k, "s1")).collect::<Vec<_>>(),
            Default::default(),
        )
        .await
        .unwrap();
    let reader = Journal::open(dir.path(), read_only()).unwrap();
    let mut sub = reader.subscribe(Position::FIRST);
    let feeding = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for b in 1..30u64 {
                writer
                    .append_batch(
                        (0..10)
                            .map(|k| event(100 * b + k, "s1"))
                            .collect::<Vec<_>>(),
                        Default::default(),
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 295 {
        let e = tokio::time::timeout(std::time::Duration::from_secs(20), sub.next())
            .await
            .expect("no stall")
            .unwrap()
            .unwrap();
        seen.push(e.position.0);
    }
    feeding.await.unwrap();
    assert_eq!(seen, (1..=295).collect::<Vec<_>>());
}
