//! Reads by range, event id, session, task, run, stream and type prefix; the index rebuilt from
//! the log when missing or inconsistent; subscriptions with no gap and no duplicate.

mod common;

use common::*;
use journal_engine::{Appended, Chain, Error, Filter, Journal, Options, RecoveryAction};
use journal_format::{Position, FRAME_HEADER_LEN};

fn setup(dir: &std::path::Path) -> Journal {
    let journal = Journal::open(dir, small_segments()).unwrap();
    for batch in 0..30u64 {
        let session = format!("s{}", batch % 3);
        append(
            &journal,
            (0..10).map(|k| event(batch * 10 + k, &session)).collect(),
        );
    }
    journal
}

fn positions(q: journal_engine::Query) -> Vec<u64> {
    q.map(|e| e.unwrap().position.0).collect()
}

#[test]
fn reads_by_every_key_agree_with_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let journal = setup(dir.path());
    let all = all_events(&journal);
    assert_eq!(all.len(), 300);
    assert!(segment_files(dir.path()).len() > 1);
    let expect = |pred: &dyn Fn(&journal_format::StoredEvent) -> bool| -> Vec<u64> {
        all.iter()
            .filter(|e| pred(e))
            .map(|e| e.position.0)
            .collect()
    };
    let q = |f: Filter| positions(journal.query(f).unwrap());
    assert_eq!(
        q(Filter {
            session: Some("s1".into()),
            ..Filter::default()
        }),
        expect(&|e| e.envelope.session_id.as_deref() == Some("s1"))
    );
    assert_eq!(
        q(Filter {
            task: Some("task-2".into()),
            ..Filter::default()
        }),
        expect(&|e| e.envelope.task_id.as_deref() == Some("task-2"))
    );
    assert_eq!(
        q(Filter {
            run: Some("run-1".into()),
            ..Filter::default()
        }),
        expect(&|e| e.envelope.run_id.as_deref() == Some("run-1"))
    );
    assert_eq!(
        q(Filter {
            type_prefix: Some("tool.".into()),
            ..Filter::default()
        }),
        expect(&|e| e.envelope.event_type.starts_with("tool."))
    );
    assert_eq!(
        q(Filter {
            session: Some("s2".into()),
            type_prefix: Some("tool.r".into()),
            from: Some(Position(50)),
            to: Some(Position(250)),
            limit: Some(7),
            ..Filter::default()
        }),
        expect(&|e| e.envelope.session_id.as_deref() == Some("s2")
            && e.envelope.event_type == "tool.result"
            && (50..=250).contains(&e.position.0))
        .into_iter()
        .take(7)
        .collect::<Vec<_>>()
    );
    assert_eq!(
        positions(
            journal
                .query(Filter {
                    from: Some(Position(295)),
                    ..Filter::default()
                })
                .unwrap()
        ),
        (295..=300).collect::<Vec<_>>()
    );
    let by_id = journal.get("evt-s1-15").unwrap().unwrap();
    assert_eq!(by_id.envelope.event_id, "evt-s1-15");
    assert!(journal.get("no-such-id").unwrap().is_none());
    let stream = journal.read_stream("session:s0", 5).unwrap();
    assert_eq!(stream.first().unwrap().stream_version, 5);
    assert_eq!(
        stream.len() as u64,
        journal.stream_version("session:s0").unwrap() - 4
    );
    // Range reads across segment boundaries, from any position.
    for from in [1u64, 17, 150, 299, 300] {
        let got: Vec<u64> = journal
            .read(Position(from), Some(Position(from + 40)), Chain::Verified)
            .map(|e| e.unwrap().position.0)
            .collect();
        assert_eq!(got, (from..=(from + 40).min(300)).collect::<Vec<_>>());
    }
}

#[test]
fn a_missing_index_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path()).close();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::IndexRebuilt { .. })));
    assert_eq!(
        positions(
            journal
                .query(Filter {
                    session: Some("s0".into()),
                    ..Filter::default()
                })
                .unwrap()
        )
        .len(),
        100
    );
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

#[test]
fn an_index_ahead_of_the_log_is_evidence_of_lost_history_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path()).close();
    // Keep the index of 300 events, but cut the log back to a torn tail of fewer events, and
    // take HEAD away: the index's head is the evidence left.
    let index = std::fs::read(dir.path().join("index.redb")).unwrap();
    let tail = segment_files(dir.path()).pop().unwrap();
    let f = frames(&tail);
    let (offset, _) = f[f.len() / 2];
    truncate(&tail, offset + 10);
    std::fs::write(dir.path().join("index.redb"), index).unwrap();
    std::fs::remove_file(dir.path().join("HEAD")).unwrap();
    // The torn frame holds a position the index records as committed: damage, not a torn
    // write, and nothing is cut.
    let refused = Journal::open(dir.path(), small_segments()).unwrap_err();
    assert!(
        matches!(&refused, Error::Corruption { .. })
            && refused
                .to_string()
                .contains("position 300 was recorded as committed"),
        "{refused}"
    );
    // Salvage accepts the shorter log, says so, and rebuilds the index from it.
    let journal = Journal::open(
        dir.path(),
        Options {
            salvage: true,
            ..small_segments()
        },
    )
    .unwrap();
    let actions = &journal.recovery_report().actions;
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, RecoveryAction::Quarantined { .. })),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(
            a,
            RecoveryAction::HistoryAccepted { evidence, .. } if evidence == "index.redb"
        )),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(
            |a| matches!(a, RecoveryAction::IndexRebuilt { reason } if reason.contains("missing"))
        ),
        "{actions:?}"
    );
    let head = journal.head().position.0;
    assert!(head < 300);
    let ids: Vec<u64> = positions(
        journal
            .query(Filter {
                session: Some("s0".into()),
                ..Filter::default()
            })
            .unwrap(),
    );
    assert!(ids.iter().all(|p| *p <= head));
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

/// A journal of 50 events in stream `s0` whose index knows only the first 10 (the index file of
/// an earlier close put back): what a crash leaves when the indexer was behind. Returns the
/// answers to the 40 appends the index lacks.
fn lag_the_index(dir: &std::path::Path) -> Vec<Appended> {
    let journal = Journal::open(dir, small_segments()).unwrap();
    append(&journal, (0..10).map(|k| event(k, "s0")).collect());
    journal.close();
    let old_index = std::fs::read(dir.join("index.redb")).unwrap();
    let journal = Journal::open(dir, small_segments()).unwrap();
    let lacking = append(&journal, (10..50).map(|k| event(k, "s0")).collect());
    journal.close();
    std::fs::write(dir.join("index.redb"), old_index).unwrap();
    lacking
}

#[test]
fn a_lagging_index_catches_up_on_open() {
    let dir = tempfile::tempdir().unwrap();
    lag_the_index(dir.path());
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    assert!(
        journal
            .recovery_report()
            .actions
            .iter()
            .any(|a| matches!(a, RecoveryAction::IndexCaughtUp { from: 11, to: 50 })),
        "{:?}",
        journal.recovery_report()
    );
    assert_eq!(journal.stream_version("session:s0").unwrap(), 50);
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

#[test]
fn appends_right_after_open_wait_for_the_backlog_the_index_thread_catches_up() {
    // Open leaves a small index backlog to the index thread. The writer looks ids and stream
    // versions up in the index, so an append made at once must still see the whole backlog: a
    // repeated id is answered as the duplicate it is, and stream versions continue from 50.
    let dir = tempfile::tempdir().unwrap();
    let originals = lag_the_index(dir.path());

    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let again = journal
        .append_batch_blocking(
            vec![event(30, "s0"), event(50, "s0")],
            journal_engine::AppendOptions {
                expected_stream_version: Some(50),
            },
        )
        .unwrap();
    assert!(again[0].duplicate);
    assert_eq!(again[0].position, originals[20].position);
    assert!(!again[1].duplicate);
    assert_eq!(again[1].stream_version, 51);
    assert_eq!(head(&journal).0, 51);
}

#[test]
fn a_crash_right_after_a_catch_up_at_open_loses_nothing() {
    // Open catches the index up without a device flush (the indexer makes it durable when it
    // is next idle). A crash before that must leave an index the next open can use or repair.
    let dir = tempfile::tempdir().unwrap();
    lag_the_index(dir.path());

    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    // The crash image: the index file as it is on disk before the idle persist.
    let crashed_index = std::fs::read(dir.path().join("index.redb")).unwrap();
    assert_eq!(journal.stream_version("session:s0").unwrap(), 50);
    journal.close();
    std::fs::write(dir.path().join("index.redb"), crashed_index).unwrap();

    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    assert_eq!(journal.stream_version("session:s0").unwrap(), 50);
    for k in [0, 10, 49] {
        let id = event(k, "s0").event_id;
        assert!(journal.get(&id).unwrap().is_some(), "{id}");
    }
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_catches_up_then_follows_live_with_no_gap_or_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    for b in 0..20u64 {
        journal
            .append_batch(
                (0..10).map(|k| event(b * 10 + k, "s0")).collect::<Vec<_>>(),
                Default::default(),
            )
            .await
            .unwrap();
    }
    let mut sub = journal.subscribe(Position(5));
    let writer = {
        let journal = journal.clone();
        tokio::spawn(async move {
            for b in 20..60u64 {
                journal
                    .append_batch(
                        (0..10).map(|k| event(b * 10 + k, "s1")).collect::<Vec<_>>(),
                        Default::default(),
                    )
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 596 {
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
            .await
            .expect("no stall")
            .unwrap()
            .unwrap();
        seen.push(e.position.0);
    }
    writer.await.unwrap();
    assert_eq!(seen, (5..=600).collect::<Vec<_>>());
    // Resume from a cursor.
    let cursor = sub.cursor();
    assert_eq!(cursor, Position(601));
    let mut resumed = journal.subscribe(Position(598));
    for expected in 598..=600 {
        assert_eq!(resumed.next().await.unwrap().unwrap().position.0, expected);
    }
}

#[test]
fn reopening_scans_the_whole_tail_and_catches_an_old_index_up() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path()).close();
    // Every frame of the tail is checked at open, also after a clean close: damage in it is found
    // there, not left to `verify` (the tail segment is bounded, so open's cost is too).
    let tail = segment_files(dir.path()).pop().unwrap();
    let tail_len = std::fs::metadata(&tail).unwrap().len();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    assert_eq!(journal.recovery_report().tail_bytes_scanned, tail_len - 64);
    append(&journal, (0..40).map(|k| event(1000 + k, "s9")).collect());
    journal.close();
    // An index from before the last appends (as after a crash) is caught up from its head.
    let old = std::fs::read(dir.path().join("index.redb")).unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    append(&journal, (0..5).map(|k| event(2000 + k, "s9")).collect());
    journal.close();
    std::fs::write(dir.path().join("index.redb"), old).unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::IndexCaughtUp { to: 345, .. })));
    assert_eq!(journal.head().position, Position(345));
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

#[test]
fn scan_gives_the_records_read_gives_and_names_a_damaged_frame() {
    let dir = tempfile::tempdir().unwrap();
    let journal = setup(dir.path());
    let all = all_events(&journal);

    for verify_chain in [Chain::Unverified, Chain::Verified] {
        let mut decoded = Vec::new();
        journal
            .scan(Position::FIRST, None, verify_chain, |record| {
                let event = record.decode()?;
                assert_eq!(
                    (record.position, record.stream_version, record.hash),
                    (event.position, event.stream_version, event.hash)
                );
                assert_eq!(record.body, event.envelope.to_msgpack().unwrap().as_slice());
                decoded.push(event);
                Ok(std::ops::ControlFlow::Continue(()))
            })
            .unwrap();
        assert_eq!(decoded, all);
    }

    let mut seen = Vec::new();
    journal
        .scan(
            Position(95),
            Some(Position(140)),
            Chain::Verified,
            |record| {
                seen.push(record.position.0);
                Ok(if record.position.0 == 120 {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                })
            },
        )
        .unwrap();
    assert_eq!(seen, (95..=120).collect::<Vec<_>>());
    journal.close();

    // One byte of a sealed segment's body flipped: the scan stops there and says where.
    let first = &segment_files(dir.path())[0];
    let (offset, header) = frames(first)[3];
    flip_byte(first, offset + 72 + 10);
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let mut last = Position::ZERO;
    let error = journal
        .scan(Position::FIRST, None, Chain::Unverified, |record| {
            last = record.position;
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap_err();
    assert_eq!(last.0, header.meta.position.0 - 1);
    match error {
        journal_engine::Error::Corruption {
            position,
            offset: at,
            ..
        } => {
            assert_eq!(position, Some(header.meta.position));
            assert_eq!(at, offset);
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn scan_where_gives_the_selected_records_and_checks_only_their_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let journal = setup(dir.path());
    let all = all_events(&journal);
    let even = |p: Position| p.0.is_multiple_of(2);
    let scan_where = |journal: &Journal, from: u64, verify_chain: Chain| {
        let mut seen = Vec::new();
        journal
            .scan_where(Position(from), None, verify_chain, even, |record| {
                let event = record.decode()?;
                assert_eq!(event.position, record.position);
                seen.push(event);
                Ok(std::ops::ControlFlow::Continue(()))
            })
            .map(|()| seen)
    };
    for verify_chain in [Chain::Unverified, Chain::Verified] {
        let wanted: Vec<_> = all.iter().filter(|e| even(e.position)).cloned().collect();
        assert_eq!(scan_where(&journal, 1, verify_chain).unwrap(), wanted);
        let from_95: Vec<_> = wanted.into_iter().filter(|e| e.position.0 >= 95).collect();
        assert_eq!(scan_where(&journal, 95, verify_chain).unwrap(), from_95);
    }
    journal.close();

    // A flipped body byte in a frame nobody selects goes unread; in a selected frame, or when
    // the chain is verified (which hashes every body), it is named.
    let first = &segment_files(dir.path())[0];
    let (offset, header) = frames(first)[3];
    let damaged = header.meta.position;
    flip_byte(first, offset + 72 + 10);
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let select_damaged = |selected: bool| move |p: Position| p != damaged || selected;
    for (selected, verify_chain, fails) in [
        (false, Chain::Unverified, false),
        (true, Chain::Unverified, true),
        (false, Chain::Verified, true),
    ] {
        let mut count = 0;
        let result = journal.scan_where(
            Position::FIRST,
            None,
            verify_chain,
            select_damaged(selected),
            |_| {
                count += 1;
                Ok(std::ops::ControlFlow::Continue(()))
            },
        );
        match result {
            Ok(()) => {
                assert!(!fails, "selected {selected}, chain {verify_chain:?}");
                assert_eq!(count, all.len() - 1);
            }
            Err(journal_engine::Error::Corruption {
                position,
                offset: at,
                ..
            }) => {
                assert!(fails, "selected {selected}, chain {verify_chain:?}");
                assert_eq!((position, at), (Some(damaged), offset));
            }
            Err(other) => panic!("expected corruption, got {other}"),
        }
    }
    journal.close();

    // A damaged header is named even in a frame nobody selects: it is how the scan steps on.
    let (offset, header) = frames(first)[6];
    flip_byte(first, offset + 20);
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let skip = header.meta.position;
    let error = journal
        .scan_where(
            Position::FIRST,
            None,
            Chain::Unverified,
            |p| p != skip && p != damaged,
            |_| Ok(std::ops::ControlFlow::Continue(())),
        )
        .unwrap_err();
    match error {
        journal_engine::Error::Corruption { position, .. } => assert_eq!(position, Some(skip)),
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn a_copy_of_each_frame_reads_as_its_record_and_a_changed_copy_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = setup(dir.path());
    let mut copies = Vec::new();
    journal
        .scan(Position::FIRST, None, Chain::Unverified, |record| {
            // The frame is the header, then the body.
            assert_eq!(record.frame.len(), FRAME_HEADER_LEN + record.body.len());
            assert_eq!(&record.frame[FRAME_HEADER_LEN..], record.body);
            copies.push((
                record.position,
                record.location(),
                record.hash,
                record.stream_version,
                record.frame.to_vec(),
            ));
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    assert_eq!(copies.len(), 300);
    let mut frames = journal.frame_reader();
    for (position, at, hash, version, frame) in &copies {
        let copy = journal_engine::Record::from_frame(frame, *at, *position).unwrap();
        let read = frames.read(*at, *position).unwrap();
        assert_eq!(
            (
                copy.position,
                copy.location(),
                copy.hash,
                copy.stream_version
            ),
            (*position, *at, *hash, *version)
        );
        assert_eq!((copy.frame, copy.body), (read.frame, read.body));
        assert_eq!(
            copy.decode().unwrap().envelope.event_id,
            read.decode().unwrap().envelope.event_id
        );
    }

    let (position, at, _, _, frame) = &copies[41];
    let refused = |bytes: &[u8], at: journal_engine::FrameAt, position: Position| {
        journal_engine::Record::from_frame(bytes, at, position)
            .map(|r| r.position)
            .unwrap_err()
            .to_string()
    };
    // Each byte changed, in the header or the body, fails a checksum (or the position or
    // length check, which the header's checksum covers too).
    for i in [
        0,
        5,
        FRAME_HEADER_LEN - 1,
        FRAME_HEADER_LEN,
        frame.len() - 1,
    ] {
        let mut changed = frame.clone();
        changed[i] ^= 0x01;
        let error = refused(&changed, *at, *position);
        assert!(error.contains("checksum"), "byte {i}: {error}");
    }
    let other = refused(frame, *at, position.next());
    assert!(
        other.contains(&format!("holds position {position}")),
        "{other}"
    );
    let cut = refused(&frame[..frame.len() - 1], *at, *position);
    assert!(
        cut.contains(&format!(
            "the copy of the frame of position {position} (segment {} at {}) is {} bytes, not the frame's {} bytes",
            at.location.segment,
            at.location.offset,
            frame.len() - 1,
            at.len
        )),
        "{cut}"
    );
    let short = refused(
        &frame[..10],
        journal_engine::FrameAt { len: 10, ..*at },
        *position,
    );
    assert!(
        short.contains("is 10 bytes, shorter than a frame's header"),
        "{short}"
    );
    // A copy's failure is not the log's corruption.
    let mut changed = frame.clone();
    changed[FRAME_HEADER_LEN] ^= 0x01;
    let error = journal_engine::Record::from_frame(&changed, *at, *position)
        .map(|r| r.position)
        .unwrap_err();
    assert!(!error.is_corruption(), "{error}");
}

#[test]
fn a_frame_reader_reads_each_record_back_from_its_location_and_refuses_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let journal = setup(dir.path());
    assert!(segment_files(dir.path()).len() > 1);
    let mut scanned = Vec::new();
    journal
        .scan(Position::FIRST, None, Chain::Unverified, |record| {
            scanned.push((
                record.position,
                record.location(),
                record.hash,
                record.body.to_vec(),
            ));
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    assert_eq!(scanned.len(), 300);
    let mut frames = journal.frame_reader();
    // Backwards, so that the reader changes segment, and every one alike.
    for (position, at, hash, body) in scanned.iter().rev() {
        let record = frames.read(*at, *position).unwrap();
        assert_eq!(
            (record.position, record.location(), record.hash, record.body),
            (*position, *at, *hash, body.as_slice())
        );
        let i = position.0 - 1;
        let id = format!("evt-s{}-{i}", (i / 10) % 3);
        assert_eq!(record.decode().unwrap().envelope.event_id, id);
    }

    // Forward with a read-ahead smaller than a segment: most frames come from the buffer, some
    // straddle its end and are fetched again, and the reader crosses segments. Every other
    // frame, as a pass over one partition skips the others'.
    for read_ahead in [1, 2_000, 64 * 1024] {
        let mut ahead = journal.frame_reader().with_read_ahead(read_ahead);
        for (position, at, hash, body) in scanned.iter().step_by(2) {
            let record = ahead.read(*at, *position).unwrap();
            assert_eq!(
                (record.position, record.location(), record.hash, record.body),
                (*position, *at, *hash, body.as_slice())
            );
        }
        // A wrong location is refused from the buffer as from the disk.
        let (position, at, _, _) = &scanned[298];
        let wrong = ahead.read(*at, position.next()).map(|r| r.position);
        assert!(
            wrong.as_ref().is_err_and(|e| e
                .to_string()
                .contains(&format!("holds position {position}"))),
            "{wrong:?}"
        );
    }

    // Changing segment empties the buffer: a frame of the next segment whose offset falls
    // inside the window read from the one before is read from its own segment.
    let first_of = |segment| {
        scanned
            .iter()
            .find(|(_, at, _, _)| at.location.segment == segment)
            .unwrap()
    };
    let (p0, a0, _, _) = first_of(scanned[0].1.location.segment);
    let (p1, a1, h1, b1) = first_of(scanned[299].1.location.segment);
    assert_ne!(a0.location.segment, a1.location.segment);
    let mut ahead = journal.frame_reader().with_read_ahead(1 << 20);
    ahead.read(*a0, *p0).unwrap();
    let record = ahead.read(*a1, *p1).unwrap();
    assert_eq!(
        (record.position, record.hash, record.body),
        (*p1, *h1, b1.as_slice())
    );

    let (position, at, _, body) = &scanned[41];
    let refused = |result: journal_engine::Result<journal_engine::Record<'_>>| {
        result.map(|r| r.position).unwrap_err().to_string()
    };
    let wrong = refused(frames.read(*at, position.next()));
    assert!(
        wrong.contains(&format!("holds position {position}")),
        "{wrong}"
    );
    let past = refused(frames.read(*at, Position(301)));
    assert!(past.contains("position 301 is not in the log"), "{past}");
    let short = journal_engine::FrameAt {
        len: at.len - 1,
        ..*at
    };
    let short = refused(frames.read(short, *position));
    assert!(
        short.contains(&format!("in {} bytes, not", at.len)),
        "{short}"
    );
    for bogus in [
        journal_engine::FrameAt { len: 10, ..*at },
        journal_engine::FrameAt {
            len: u32::MAX,
            ..*at
        },
        journal_engine::FrameAt {
            location: journal_format::Location {
                offset: u64::MAX - 100,
                ..at.location
            },
            ..*at
        },
    ] {
        let refused = refused(frames.read(bogus, *position));
        assert!(refused.contains("holds no frame of"), "{refused}");
    }
    let nowhere = journal_engine::FrameAt {
        location: journal_format::Location {
            segment: journal_format::SegmentId(999),
            ..at.location
        },
        ..*at
    };
    let nowhere = refused(frames.read(nowhere, *position));
    assert!(nowhere.contains("999.seg is not in the log"), "{nowhere}");

    // A body damaged on disk after it was scanned is corruption, named where it is.
    let file = segment_files(dir.path())
        .into_iter()
        .find(|f| f.ends_with(at.location.segment.file_name()))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    let in_body = usize::try_from(at.location.offset).unwrap()
        + journal_format::FRAME_HEADER_LEN
        + body.len() / 2;
    bytes[in_body] ^= 0x20;
    // A read-ahead reader that fetched the frame before the damage serves it from its buffer
    // (committed frames do not change while the journal is open; this damage is done behind
    // its back); the default reader reads the file each time and finds it.
    let mut ahead = journal.frame_reader().with_read_ahead(64 * 1024);
    let (before, before_at, _, _) = &scanned[40];
    assert_eq!(
        before_at.location.segment, at.location.segment,
        "frames 41 and 42 share a segment"
    );
    ahead.read(*before_at, *before).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(ahead.read(*at, *position).unwrap().body, body.as_slice());
    match frames.read(*at, *position).map(|r| r.position) {
        Err(journal_engine::Error::Corruption {
            segment,
            offset,
            position: Some(p),
            ..
        }) => assert_eq!(
            (segment, offset, p),
            (at.location.segment, at.location.offset, *position)
        ),
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn an_index_of_another_layout_is_rebuilt_and_finds_ids_of_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    // Ids of every kind the index keys apart: short ones (up to 16 bytes, the limit itself
    // too), the journal's own UUIDs, a UUID in upper case, and longer ids.
    let mut ids: Vec<String> = vec![
        "e1".into(),
        "evt-000000000016".into(),
        "evt-0000000000017".into(),
        "0192F1C4-0000-7000-8000-00000000ABCD".into(),
        "an-id-that-is-longer-than-any-fixed-key".into(),
    ];
    ids.extend((0..40).map(|_| journal.new_event_id()));
    let events: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut e = event(i as u64, "s0");
            e.event_id = id.clone();
            e
        })
        .collect();
    let appended = append(&journal, events.clone());
    journal.close();
    // The index as a build of another layout left it.
    {
        let db = redb::Database::open(dir.path().join("index.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut table = txn.open_table(meta).unwrap();
            table
                .insert("layout", 3u64.to_le_bytes().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let journal = Journal::open(dir.path(), small_segments()).unwrap();
    let actions = &journal.recovery_report().actions;
    assert!(
        actions.iter().any(|a| matches!(
            a,
            RecoveryAction::IndexRebuilt { reason } if reason.contains("layout is version 3")
        )),
        "{actions:?}"
    );
    for (id, a) in ids.iter().zip(&appended) {
        let stored = journal
            .get(id)
            .unwrap()
            .unwrap_or_else(|| panic!("{id} not found"));
        assert_eq!(stored.position, a.position, "{id}");
    }
    for absent in [
        "e2",
        "0192f1c4-0000-7000-8000-00000000abcd",
        "an-id-that-is-longer",
    ] {
        assert!(journal.get(absent).unwrap().is_none(), "{absent}");
    }
    // The rebuilt index answers the append's idempotency check: every id again is a duplicate.
    let again = append(&journal, events);
    assert!(again.iter().all(|a| a.duplicate), "{again:?}");
    assert_eq!(
        again.iter().map(|a| a.position).collect::<Vec<_>>(),
        appended.iter().map(|a| a.position).collect::<Vec<_>>()
    );
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}
