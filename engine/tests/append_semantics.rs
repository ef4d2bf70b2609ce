//! Appends: atomic batches, idempotency by event id, expected stream versions, limits, and many
//! concurrent producers sharing group commit.

mod common;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use journal_engine::storage::{FsStorage, OpenMode, Storage, StorageFile, StorageLock};
use journal_engine::{AppendOptions, Error, Filter, Journal, Options};
use journal_format::{Envelope, Position};

#[test]
fn appended_events_get_position_recorded_at_hash_and_stream_version() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(
        dir.path(),
        Options {
            clock: step_clock(),
            ..Options::default()
        },
    )
    .unwrap();
    let a = append(
        &journal,
        vec![event(1, "s1"), event(2, "s1"), event(3, "s2")],
    );
    assert_eq!(
        a.iter().map(|a| a.position.0).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        a.iter().map(|a| a.stream_version).collect::<Vec<_>>(),
        [1, 2, 1]
    );
    let stored = all_events(&journal);
    for (a, s) in a.iter().zip(&stored) {
        assert_eq!(a.hash, s.hash);
        assert_eq!(a.recorded_at_ns, s.recorded_at_ns);
        assert_eq!(
            s.envelope,
            event(s.position.0, if s.position.0 == 3 { "s2" } else { "s1" })
        );
    }
    let json = stored[0].to_json_value();
    assert_eq!(json["recordedAt"], "2026-05-11T10:00:00Z");
    assert_eq!(json["streamVersion"], 1);
    assert_eq!(json["hash"].as_str().unwrap().len(), 64);
}

#[test]
fn an_event_without_event_id_gets_a_uuid_v7() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let a = append(
        &journal,
        vec![Envelope::new("session.created", "", "2026-05-11T10:00:00Z")],
    );
    let id = uuid::Uuid::parse_str(&a[0].event_id).expect("a UUID");
    assert_eq!(id.get_version_num(), 7);
    assert!(journal.get(&a[0].event_id).unwrap().is_some());
}

#[test]
fn duplicate_event_ids_are_stored_once_and_answered_with_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let first = append(&journal, vec![event(1, "s1"), event(2, "s1")]);
    // Right away (the original may not be indexed yet), within a batch, and after a reopen.
    let again = append(
        &journal,
        vec![event(2, "s1"), event(3, "s1"), event(3, "s1")],
    );
    assert!(
        again[0].duplicate
            && again[0].position == first[1].position
            && again[0].hash == first[1].hash
    );
    assert!(!again[1].duplicate);
    assert!(again[2].duplicate && again[2].position == again[1].position);
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let third = append(&journal, vec![event(1, "s1")]);
    assert!(third[0].duplicate);
    assert_eq!(third[0].position, Position::FIRST);
    assert_eq!(third[0].stream_version, 1);
    assert_eq!(head(&journal), Position(3));
    assert_eq!(all_events(&journal).len(), 3);
}

/// The writer skips its lookup of recent ids for an id past the greatest it has written: ids
/// that do not grow are still found, right after their commit (before the index has them).
#[test]
fn duplicates_are_found_whatever_the_order_of_the_ids() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let with_id = |id: &str| {
        let mut e = event(1, "s1");
        e.event_id = id.into();
        e
    };
    // Each answer's position and whether it was a duplicate.
    let answered = |answers: &[journal_engine::Appended]| -> (Vec<u64>, Vec<bool>) {
        answers.iter().map(|a| (a.position.0, a.duplicate)).unzip()
    };
    let answers: Vec<_> = ["m", "c", "m", "c", "z", "a", "z", "m"]
        .iter()
        .map(|id| append(&journal, vec![with_id(id)]).remove(0))
        .collect();
    let (positions, duplicates) = answered(&answers);
    assert_eq!(positions, [1, 2, 1, 2, 3, 4, 3, 1]);
    assert_eq!(
        duplicates,
        [false, false, true, true, false, false, true, true]
    );
    assert_eq!(all_events(&journal).len(), 4);
    // Inside one batch: ids in order, then one out of order, then repeats of both kinds.
    let batch: Vec<_> = ["p", "q", "r", "n", "q", "s", "n", "p"]
        .iter()
        .map(|id| with_id(id))
        .collect();
    let (positions, duplicates) = answered(&append(&journal, batch));
    assert_eq!(positions, [5, 6, 7, 8, 6, 9, 8, 5]);
    assert_eq!(
        duplicates,
        [false, false, false, false, true, false, true, true]
    );
    assert_eq!(all_events(&journal).len(), 9);
}

/// An event id names one event: the same id with the same body is a duplicate, answered with
/// the original; with another body the whole batch is refused, naming the id and the position
/// that holds it, and nothing of the batch is written. Checked while the original is among the
/// writer's recent ids, once the index holds it, and after a reopen.
#[test]
fn an_event_id_reused_with_another_body_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let first = append(&journal, vec![event(1, "s1"), event(2, "s1")]);
    let mut changed = event(2, "s1");
    changed.payload = Some(serde_json::json!({"toolName": "bash", "exitCode": 7}));
    let refuse = |journal: &Journal, when: &str| {
        let before = last_segment_bytes(dir.path());
        let head_before = head(journal);
        let err = journal
            .append_batch_blocking(
                vec![event(10, "s1"), changed.clone()],
                AppendOptions::default(),
            )
            .unwrap_err();
        match &err {
            Error::IdReused {
                event_id,
                index,
                position,
            } => {
                assert_eq!(
                    (event_id.as_str(), *index, *position),
                    ("evt-s1-2", 1, Some(first[1].position)),
                    "{when}"
                );
            }
            other => panic!("{when}: expected IdReused, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains("evt-s1-2") && message.contains("position 2"),
            "{when}: {message}"
        );
        assert_eq!(head(journal), head_before, "{when}: nothing of the batch");
        assert_eq!(last_segment_bytes(dir.path()), before, "{when}");
        // The same id with the same body is still a duplicate of the original.
        let again = append(journal, vec![event(2, "s1")]);
        assert!(again[0].duplicate, "{when}");
        assert_eq!(again[0].position, first[1].position, "{when}");
        assert_eq!(again[0].hash, first[1].hash, "{when}");
    };
    refuse(&journal, "right after the commit");
    // Once the index holds the original (a query waits for the indexer).
    let _ = query_positions(&journal, &Filter::default());
    append(&journal, vec![event(3, "s1")]);
    refuse(&journal, "through the index");
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    refuse(&journal, "after a reopen");
    assert_eq!(all_events(&journal).len(), 3);
    assert_eq!(all_events(&journal)[1].envelope, event(2, "s1"));
}

/// A body is compared as the event it holds: the keys of a JSON object in another order are
/// the same event (a producer that retries may serialize its map anew), a number of another
/// type is not.
#[test]
fn the_same_event_with_its_keys_in_another_order_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let with_payload = |payload: serde_json::Value| {
        let mut e = event(1, "s1");
        e.payload = Some(payload);
        e
    };
    let first = append(
        &journal,
        vec![with_payload(
            serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}}),
        )],
    );
    let reordered = with_payload(serde_json::json!({"b": {"d": 3, "c": 2}, "a": 1}));
    let again = append(&journal, vec![reordered.clone(), reordered]);
    assert!(again
        .iter()
        .all(|a| a.duplicate && a.position == first[0].position));
    let err = journal
        .append_batch_blocking(
            vec![with_payload(
                serde_json::json!({"a": 1.0, "b": {"c": 2, "d": 3}}),
            )],
            AppendOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::IdReused { .. }), "{err:?}");
}

/// Inside one batch, the same id twice with different bodies refuses the batch; twice with
/// the same body it is stored once.
#[test]
fn an_event_id_twice_in_one_batch_with_different_bodies_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, vec![event(1, "s1")]);
    let before = last_segment_bytes(dir.path());
    let mut changed = event(2, "s1");
    changed.timestamp = "2026-05-11T10:00:01Z".into();
    // Ids in increasing order before the repeat, and out of order: both ways of finding it.
    for batch in [
        vec![event(2, "s1"), event(3, "s1"), changed.clone()],
        vec![event(3, "s1"), event(2, "s1"), changed.clone()],
    ] {
        let err = journal
            .append_batch_blocking(batch, AppendOptions::default())
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::IdReused { event_id, index: 2, position: None } if event_id == "evt-s1-2"
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("evt-s1-2"), "{err}");
        assert_eq!(head(&journal), Position::FIRST);
        assert_eq!(last_segment_bytes(dir.path()), before);
    }
    let stored = append(&journal, vec![event(2, "s1"), event(2, "s1")]);
    assert_eq!(stored[1].position, stored[0].position);
    assert!(stored[1].duplicate);
}

/// Producers racing with one id: whichever is committed first holds it; every other body is
/// refused naming its position, and the same body is answered as its duplicate (the original
/// may still be staged in the same group commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_appends_of_one_id_store_one_body_and_refuse_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    for round in 0..20u64 {
        let id = format!("race-{round}");
        let mut tasks = Vec::new();
        for producer in 0..8u64 {
            let journal = journal.clone();
            let mut e = event(round, "s1");
            e.event_id.clone_from(&id);
            // Producers 0..4 send one body, 4..8 each a body of their own.
            e.sequence = Some(if producer < 4 { 0 } else { producer });
            tasks.push(tokio::spawn(async move {
                (e.sequence, journal.append(e).await)
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        let stored = journal.get(&id).unwrap().expect("one of them is stored");
        let winner = stored.envelope.sequence;
        for (sequence, result) in results {
            match result {
                Ok(a) => {
                    assert_eq!(
                        sequence, winner,
                        "round {round}: only the stored body is acked"
                    );
                    assert_eq!(a.position, stored.position);
                }
                Err(Error::IdReused {
                    position: Some(p), ..
                }) => {
                    assert_ne!(sequence, winner, "round {round}");
                    assert_eq!(p, stored.position);
                }
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
    }
    assert_eq!(all_events(&journal).len(), 20);
}

/// The file system, counting the reads of segment files.
#[derive(Debug, Default)]
struct ReadCountingDisk {
    segment_reads: Arc<AtomicU64>,
}

#[derive(Debug)]
struct ReadCountingFile {
    inner: Arc<dyn StorageFile>,
    reads: Option<Arc<AtomicU64>>,
}

impl StorageFile for ReadCountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(reads) = &self.reads {
            reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Storage for ReadCountingDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(ReadCountingFile {
            inner: FsStorage.open(path, mode)?,
            reads: (path.extension().is_some_and(|e| e == "seg"))
                .then(|| Arc::clone(&self.segment_reads)),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        FsStorage.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        FsStorage.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        FsStorage.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        FsStorage.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        FsStorage.sync_dir(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>> {
        FsStorage.lock(path)
    }
}

/// Comparing bodies costs the appends of new ids nothing: no segment is read while they are
/// appended, before or after the index holds the ids before them. An id found (a duplicate, or
/// a reuse refused), through the index or among the writer's recent ids, reads its one stored
/// frame, header then body.
#[test]
fn only_an_event_id_already_stored_reads_its_stored_frame() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(ReadCountingDisk::default());
    let reads = Arc::clone(&disk.segment_reads);
    let open = || {
        Journal::open(
            dir.path(),
            Options {
                storage: Arc::clone(&disk) as Arc<dyn Storage>,
                ..Options::default()
            },
        )
        .unwrap()
    };
    let journal = open();
    let since_open = reads.load(Ordering::SeqCst);
    for batch in 0..10u64 {
        append(
            &journal,
            (1..=100).map(|i| event(batch * 100 + i, "s1")).collect(),
        );
    }
    assert_eq!(
        reads.load(Ordering::SeqCst),
        since_open,
        "new ids read nothing"
    );
    // The index holds them now (a query waits for it, and reads them): later appends look ids
    // up in it.
    assert_eq!(query_positions(&journal, &Filter::default()).len(), 1000);
    let since_query = reads.load(Ordering::SeqCst);
    append(&journal, (1001..=1100).map(|i| event(i, "s1")).collect());
    assert_eq!(
        reads.load(Ordering::SeqCst),
        since_query,
        "new ids read nothing"
    );
    journal.close();

    // After a reopen every id is looked up in the index.
    let journal = open();
    let since_open = reads.load(Ordering::SeqCst);
    append(&journal, vec![event(5, "s1")]);
    let mut changed = event(6, "s1");
    changed.sequence = Some(0);
    assert!(journal
        .append_batch_blocking(vec![changed], AppendOptions::default())
        .is_err());
    append(&journal, vec![event(1101, "s1")]);
    assert_eq!(
        reads.load(Ordering::SeqCst) - since_open,
        2 * 2,
        "each id found in the index reads its frame's header and body, once"
    );
    // Right after its commit, among the recent ids (or in the index, if it has caught up).
    append(&journal, vec![event(1101, "s1")]);
    assert_eq!(reads.load(Ordering::SeqCst) - since_open, 3 * 2);
}

#[test]
fn expected_stream_version_conflict_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let expect = |v| AppendOptions {
        expected_stream_version: Some(v),
    };
    journal
        .append_batch_blocking(vec![event(1, "s1")], expect(0))
        .unwrap();
    journal
        .append_batch_blocking(vec![event(2, "s1"), event(3, "s1")], expect(1))
        .unwrap();
    let err = journal
        .append_batch_blocking(vec![event(4, "s1")], expect(1))
        .unwrap_err();
    match err {
        Error::Conflict {
            stream,
            expected,
            actual,
        } => {
            assert_eq!((stream.as_str(), expected, actual), ("session:s1", 1, 3));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(head(&journal), Position(3));
    assert_eq!(journal.stream_version("session:s1").unwrap(), 3);
    // A batch spanning two streams cannot carry one expected version.
    let err = journal
        .append_batch_blocking(vec![event(5, "s1"), event(6, "s2")], expect(3))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
}

/// The bytes of the journal's last segment, to show a refused append wrote nothing.
/// The last segment's bytes up to its last non-zero byte: the zeros after the frames are the
/// filler thread's, written when it runs (`Options::preallocate`).
fn last_segment_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut bytes = std::fs::read(segment_files(dir).pop().unwrap()).unwrap();
    let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    bytes.truncate(end);
    bytes
}

#[test]
fn a_bad_event_in_a_batch_writes_nothing_and_names_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, vec![event(1, "s1")]);
    let before = last_segment_bytes(dir.path());
    let mut bad = event(3, "s1");
    bad.timestamp = "yesterday".into();
    let err = journal
        .append_batch_blocking(vec![event(2, "s1"), bad], AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidEvent { index: Some(1), .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("timestamp"), "{err}");
    let after = last_segment_bytes(dir.path());
    assert_eq!(before, after, "the log is byte-for-byte unchanged");
}

/// What a batch of 600 events stores, answers and indexes is what six batches of 100 of the
/// same events store, answer and index.
#[test]
fn a_large_batch_is_stored_answered_and_indexed_as_small_batches_are() {
    let options = || Options {
        clock: step_clock(),
        ..Options::default()
    };
    let events: Vec<Envelope> = (0..600)
        .map(|i| event(i, ["s1", "s2", "s3"][(i % 3) as usize]))
        .collect();
    let (large_dir, small_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let large = Journal::open(large_dir.path(), options()).unwrap();
    let small = Journal::open(small_dir.path(), options()).unwrap();
    let large_answers = large
        .append_batch_blocking(&events, AppendOptions::default())
        .unwrap();
    let mut small_answers = Vec::new();
    for chunk in events.chunks(100) {
        small_answers.extend(
            small
                .append_batch_blocking(chunk, AppendOptions::default())
                .unwrap(),
        );
    }
    // Recording times differ: the small batches are six commits.
    let key = |a: &journal_engine::Appended| (a.position, a.event_id.to_string(), a.stream_version);
    assert_eq!(
        large_answers.iter().map(key).collect::<Vec<_>>(),
        small_answers.iter().map(key).collect::<Vec<_>>()
    );
    let bodies = |j: &Journal| {
        all_events(j)
            .into_iter()
            .map(|s| (s.position, s.envelope))
            .collect::<Vec<_>>()
    };
    assert_eq!(bodies(&large), bodies(&small));
    assert_eq!(bodies(&large).len(), 600);
    for (i, e) in events.iter().enumerate().step_by(37) {
        let found = large.get(&e.event_id).unwrap().expect("indexed");
        assert_eq!(found.position, Position(i as u64 + 1));
    }
    for filter in [
        Filter {
            session: Some("s2".into()),
            ..Filter::default()
        },
        Filter {
            task: Some("task-1".into()),
            ..Filter::default()
        },
        Filter {
            run: Some("run-0".into()),
            ..Filter::default()
        },
    ] {
        let positions = |j: &Journal| query_positions(j, &filter);
        assert!(positions(&large).len() >= 200, "{filter:?}");
        assert_eq!(positions(&large), positions(&small), "{filter:?}");
    }
}

/// A bad event anywhere in a large batch is named by its index in the batch, the first one when
/// there are several, and nothing of the batch is written.
#[test]
fn a_bad_event_anywhere_in_a_large_batch_is_named_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, vec![event(10_000, "s1")]);
    let before = last_segment_bytes(dir.path());
    for bad_at in [vec![450], vec![20], vec![120, 500]] {
        let mut events: Vec<Envelope> = (0..600).map(|i| event(i, "s1")).collect();
        for at in &bad_at {
            events[*at].timestamp = "yesterday".into();
        }
        let err = journal
            .append_batch_blocking(&events, AppendOptions::default())
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidEvent { index: Some(i), .. } if i == bad_at[0]),
            "{bad_at:?}: {err:?}"
        );
    }
    assert_eq!(before, last_segment_bytes(dir.path()), "nothing written");
}

#[test]
fn a_lent_batch_is_stored_as_the_same_batch_given_and_left_as_it_was() {
    let clock = || Options {
        clock: step_clock(),
        ..Options::default()
    };
    let (given_dir, lent_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let given = Journal::open(given_dir.path(), clock()).unwrap();
    let lent = Journal::open(lent_dir.path(), clock()).unwrap();
    let batch = vec![event(1, "s1"), event(2, "s2"), event(3, "s1")];
    let kept = batch.clone();
    let a = append(&given, batch.clone());
    let b = lent
        .append_batch_blocking(&batch, AppendOptions::default())
        .unwrap();
    assert_eq!(a, b, "the same answers");
    assert_eq!(batch, kept, "the caller's envelopes are left as they were");
    // The index keys (not in the log) too: the task and run ids are copied from a lent batch.
    for filter in [
        Filter {
            task: Some("task-0".into()),
            ..Filter::default()
        },
        Filter {
            run: Some("run-1".into()),
            ..Filter::default()
        },
    ] {
        let positions = |j: &Journal| query_positions(j, &filter);
        assert!(!positions(&lent).is_empty(), "{filter:?} finds events");
        assert_eq!(positions(&given), positions(&lent), "{filter:?}");
    }
    given.close();
    lent.close();
    assert_eq!(
        last_segment_bytes(given_dir.path()),
        last_segment_bytes(lent_dir.path()),
        "the same bytes in the log"
    );

    // Retried as it is (the point of keeping it): answered as duplicates, nothing new stored.
    let lent = Journal::open(lent_dir.path(), Options::default()).unwrap();
    let again = lent
        .append_batch_blocking(batch.as_slice(), AppendOptions::default())
        .unwrap();
    assert!(again.iter().all(|a| a.duplicate), "{again:?}");
    assert_eq!(
        again.iter().map(|a| a.position.0).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(lent.head().position, Position(3));

    // An event without an id gets one in the journal's copy, not in the caller's; a stored id
    // beside it in that copy is still answered as a duplicate.
    let mut idless = event(4, "s1");
    idless.event_id = String::new();
    let batch = vec![idless, event(2, "s2")];
    let answers = lent
        .append_batch_blocking(&batch, AppendOptions::default())
        .unwrap();
    assert_eq!(batch[0].event_id, "", "the caller's envelope keeps no id");
    let stored = lent.get(&answers[0].event_id).unwrap().expect("stored");
    assert_eq!(stored.envelope.event_id, &*answers[0].event_id);
    assert_eq!(stored.position, Position(4));
    assert!(!answers[0].duplicate);
    assert!(answers[1].duplicate, "{:?}", answers[1]);
    assert_eq!(answers[1].position, Position(2));

    // A bad event in a lent batch: refused by its index, nothing written.
    let before = lent.head();
    let mut bad = event(6, "s1");
    bad.timestamp = "yesterday".into();
    let batch = vec![event(5, "s1"), bad];
    let err = lent
        .append_batch_blocking(&batch, AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidEvent { index: Some(1), .. }),
        "{err:?}"
    );
    assert_eq!(lent.head(), before, "nothing of the batch is written");
}

#[test]
fn a_value_nested_deeper_than_an_event_may_be_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, vec![event(1, "s1")]);
    let before = last_segment_bytes(dir.path());
    let nested = |levels: usize| {
        let mut value = serde_json::json!(1);
        for _ in 0..levels {
            value = serde_json::Value::Array(vec![value]);
        }
        value
    };
    // The envelope's map is the first level: 126 arrays inside it are the most an event holds
    // (`journal_format::envelope::NEST_LEVELS_MAX`).
    let mut deepest = event(2, "s1");
    deepest.extra.insert("nativeTree".into(), nested(126));
    let mut deeper = event(3, "s1");
    deeper.extra.insert("nativeTree".into(), nested(127));
    let err = journal
        .append_batch_blocking(vec![deepest.clone(), deeper], AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidEvent { index: Some(1), .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("nest deeper than 127"), "{err}");
    let after = last_segment_bytes(dir.path());
    assert_eq!(before, after, "the log is byte-for-byte unchanged");

    append(&journal, vec![deepest.clone()]);
    let stored = all_events(&journal);
    assert_eq!(stored.last().map(|e| &e.envelope), Some(&deepest));
}

#[test]
fn limits_are_named_with_size_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let mut big = event(1, "s1");
    big.payload = Some(serde_json::json!({"output": "x".repeat(9 * 1024)}));
    let err = journal
        .append_batch_blocking(vec![event(0, "s1"), big], AppendOptions::default())
        .unwrap_err();
    match &err {
        Error::EventTooLarge {
            index, size, limit, ..
        } => {
            assert_eq!(*index, 1);
            assert!(*size > 9 * 1024);
            assert_eq!(*limit, 8 * 1024);
        }
        other => panic!("expected EventTooLarge, got {other:?}"),
    }
    // Exactly at the limit is accepted; one byte over is refused.
    let mut at_limit = event(2, "s1");
    let base = at_limit.to_msgpack().unwrap().len();
    at_limit.extra.insert("pad".into(), serde_json::json!(""));
    let padded = at_limit.to_msgpack().unwrap().len();
    let fill = 8 * 1024 - padded;
    at_limit
        .extra
        .insert("pad".into(), serde_json::json!("p".repeat(fill)));
    let mut len = at_limit.to_msgpack().unwrap().len();
    while len > 8 * 1024 {
        let pad = at_limit.extra["pad"].as_str().unwrap().to_string();
        at_limit
            .extra
            .insert("pad".into(), serde_json::json!(pad[1..].to_string()));
        len = at_limit.to_msgpack().unwrap().len();
    }
    assert!(base < len);
    let mut over = at_limit.clone();
    over.event_id = "over".into();
    while over.to_msgpack().unwrap().len() <= 8 * 1024 {
        let pad = over.extra["pad"].as_str().unwrap().to_string() + "p";
        over.extra.insert("pad".into(), serde_json::json!(pad));
    }
    assert_eq!(over.to_msgpack().unwrap().len(), 8 * 1024 + 1);
    let err = journal
        .append_batch_blocking(vec![over], AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::EventTooLarge {
                size: 8193,
                limit: 8192,
                ..
            }
        ),
        "{err:?}"
    );
    let too_many: Vec<_> = (0..1001).map(|i| event(i, "s1")).collect();
    let err = journal
        .append_batch_blocking(too_many, AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                actual: 1001,
                limit: 1000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(head(&journal), Position(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_appenders_get_gapless_positions_and_consistent_stream_versions() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let producers = 16u64;
    let per_producer = 150u64;
    let mut tasks = Vec::new();
    for p in 0..producers {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..per_producer {
                let session = format!("s{}", p % 4);
                let events = if i % 10 == 0 {
                    (0..5)
                        .map(|k| event(p * 100_000 + i * 10 + k, &session))
                        .collect()
                } else {
                    vec![event(p * 100_000 + i * 10, &session)]
                };
                out.extend(
                    journal
                        .append_batch(events, AppendOptions::default())
                        .await
                        .unwrap(),
                );
            }
            out
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let mut positions: Vec<u64> = acked.iter().map(|a| a.position.0).collect();
    positions.sort_unstable();
    assert_eq!(
        positions,
        (1..=positions.len() as u64).collect::<Vec<_>>(),
        "gapless, no position twice"
    );
    assert!(
        segment_files(dir.path()).len() > 3,
        "the workload rolled segments"
    );
    assert_stream_versions_count_in_log_order(&journal).await;
    // The producers' ids interleave in the log, each producer's growing: every one is found
    // at its position, and each producer's first again is answered as the original.
    for a in &acked {
        let stored = journal.get(&a.event_id).unwrap();
        assert_eq!(
            stored.map(|s| s.position),
            Some(a.position),
            "{}",
            a.event_id
        );
    }
    for p in 0..producers {
        let again = journal
            .append(event(p * 100_000, &format!("s{}", p % 4)))
            .await
            .unwrap();
        let first = acked
            .iter()
            .find(|a| *a.event_id == *again.event_id)
            .unwrap();
        assert!(again.duplicate, "{}", again.event_id);
        assert_eq!(again.position, first.position);
    }
    // Expected-version races: exactly one of two writers expecting the same version wins.
    let version = journal.stream_version("session:s0").unwrap();
    let contenders: Vec<_> = (0..2)
        .map(|k| {
            let journal = journal.clone();
            tokio::spawn(async move {
                journal
                    .append_batch(
                        vec![event(9_000_000 + k, "s0")],
                        AppendOptions {
                            expected_stream_version: Some(version),
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut wins = 0;
    for c in contenders {
        match c.await.unwrap() {
            Ok(_) => wins += 1,
            Err(Error::Conflict { actual, .. }) => assert_eq!(actual, version + 1),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(wins, 1);
    let report = journal.verify(&Default::default(), &mut |_, _| {}).unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_callers_that_commit_their_own_appends_share_the_log_with_queued_ones() {
    // Blocking callers commit on their own thread when the writer is idle (leaders) and queue
    // for the writer thread otherwise; async callers always queue. Mixed, they must still get
    // gapless positions, consistent stream versions, one copy of each id, and a log that
    // verifies.
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|p| {
            let journal = journal.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in 0..120u64 {
                    // Every tenth append repeats an id another thread appends too (ids name
                    // their session: threads 0 and 2 share s0's, 1 and 3 share s1's).
                    let id = if i % 10 == 0 {
                        7_000_000 + i
                    } else {
                        p * 100_000 + i
                    };
                    out.extend(
                        journal
                            .append_batch_blocking(
                                vec![event(id, &format!("s{}", p % 2))],
                                AppendOptions::default(),
                            )
                            .unwrap(),
                    );
                }
                out
            })
        })
        .collect();
    let tasks: Vec<_> = (4..6u64)
        .map(|p| {
            let journal = journal.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..120u64 {
                    out.extend(
                        journal
                            .append_batch(
                                vec![event(p * 100_000 + i, &format!("s{}", p % 2))],
                                AppendOptions::default(),
                            )
                            .await
                            .unwrap(),
                    );
                }
                out
            })
        })
        .collect();
    let mut acked = Vec::new();
    for t in threads {
        acked.extend(t.join().unwrap());
    }
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let mut fresh: Vec<u64> = acked
        .iter()
        .filter(|a| !a.duplicate)
        .map(|a| a.position.0)
        .collect();
    fresh.sort_unstable();
    // 6 × 120 appends; each of the 2 × 12 shared ids is appended twice and stored once.
    assert_eq!(fresh, (1..=6 * 120 - 2 * 12).collect::<Vec<_>>());
    for a in acked.iter().filter(|a| a.duplicate) {
        let original = acked
            .iter()
            .find(|o| !o.duplicate && o.event_id == a.event_id)
            .expect("a duplicate's original was acknowledged");
        assert_eq!(a.position, original.position, "{}", a.event_id);
    }
    assert_stream_versions_count_in_log_order(&journal).await;
    let report = tokio::task::spawn_blocking({
        let journal = journal.clone();
        move || {
            journal
                .verify(&journal_engine::VerifyOptions::default(), &mut |_, _| {})
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(report.ok, "{report:?}");
    // Once closed, a clone's blocking append is refused, not committed.
    let clone = journal.clone();
    tokio::task::spawn_blocking(move || journal.close())
        .await
        .unwrap();
    let late = tokio::task::spawn_blocking(move || {
        clone.append_batch_blocking(vec![event(9_999_999, "s0")], AppendOptions::default())
    })
    .await
    .unwrap();
    assert!(matches!(late, Err(Error::Closed)), "{late:?}");
}

/// Reads every stored event and checks that each one's stream version counts its stream's
/// events in log order.
async fn assert_stream_versions_count_in_log_order(journal: &Journal) {
    let stored = tokio::task::spawn_blocking({
        let journal = journal.clone();
        move || all_events(&journal)
    })
    .await
    .unwrap();
    let mut versions: HashMap<String, u64> = HashMap::new();
    for e in &stored {
        let v = versions.entry(e.envelope.stream_key()).or_default();
        *v += 1;
        assert_eq!(
            e.stream_version, *v,
            "stream versions count each stream's events in log order"
        );
    }
}
