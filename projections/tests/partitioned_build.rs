//! Builds from the start by partition (`journal_projections::partition`): the same read models
//! as one pass over the log, aliases included; an interrupted build serves nothing partial and
//! starts again; a fault is the first event in log order that the fold cannot apply.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::{Envelope, StoredEvent};
use journal_projections::models::freshness;
use journal_projections::partition::{self, partition_of};
use journal_projections::store::Store;
use journal_projections::worker::{decode, Reached, Worker};
use journal_projections::{workload, Event, FreshnessState, Projection, ReadModels};

fn append(journal: &Journal, events: &[Envelope]) {
    for chunk in events.chunks(2000) {
        journal
            .append_batch_blocking(chunk.to_vec(), AppendOptions::default())
            .unwrap();
    }
}

fn event(kind: &str, id: &str, session: &str) -> Envelope {
    let mut e = Envelope::new(kind, id, "2026-05-11T10:00:00Z");
    e.session_id = Some(session.into());
    e
}

/// Two sessions in different partitions, the later-numbered one's partition read first.
fn sessions_in_reversed_partitions(partitions: u64) -> (String, String) {
    for i in 0..1000 {
        let (a, b) = (format!("sa-{i}"), format!("sb-{i}"));
        if partition_of(&format!("session:{a}"), partitions)
            > partition_of(&format!("session:{b}"), partitions)
        {
            return (a, b);
        }
    }
    panic!("no pair of sessions in reversed partitions");
}

#[test]
fn a_build_by_partition_equals_one_pass_aliases_included() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let mut events = workload::generate(11, 30, 20_000);
    let n = events.len() as u64;
    // A run named in two sessions: its alias is the newer session's, although the older
    // session's partition is read last.
    let (older, newer) = sessions_in_reversed_partitions(n.div_ceil(3000));
    let mut first = event("run.status", "shared-1", &older);
    first.run_id = Some("shared-run".into());
    let mut second = event("run.status", "shared-2", &newer);
    second.run_id = Some("shared-run".into());
    events.push(first);
    events.push(second);
    append(&journal, &events);

    let by_partition = ReadModels::open_at(&journal, &dir.path().join("parts.redb"))
        .unwrap()
        .with_partition_events(3000);
    let mut passes = 0;
    by_partition
        .catch_up(&mut |name, _, _| passes += u32::from(name == "state"))
        .unwrap();
    assert!(passes >= 7, "the build took {passes} passes");
    let one_pass = ReadModels::open_at(&journal, &dir.path().join("one.redb"))
        .unwrap()
        .without_partitions();
    one_pass.catch_up(&mut |_, _, _| {}).unwrap();
    for name in ["state", "activity"] {
        let (digest, keys) = by_partition.digest(name).unwrap();
        assert_eq!(keys, 32, "{name}: one state per session");
        assert_eq!((digest, keys), one_pass.digest(name).unwrap(), "{name}");
        let f = by_partition.freshness(name).unwrap();
        assert_eq!(
            (f.state, f.position),
            (FreshnessState::Fresh, n + 2),
            "{name}"
        );
    }
    assert_eq!(
        by_partition.stream_of("run", "shared-run").unwrap(),
        Some(format!("session:{newer}"))
    );
    // Every alias, written partition by partition (the newest position kept), is one pass's.
    let aliases = aliases_of(by_partition.store(), "state");
    assert!(aliases.len() > 100, "{}", aliases.len());
    assert_eq!(aliases, aliases_of(one_pass.store(), "state"));

    // Appends after the build are applied incrementally. The second workload's
    // events get ids of their own: its generator numbers events as the first one's does, and an
    // id reused with another body is refused.
    let mut more = workload::generate(12, 3, 900);
    for e in &mut more {
        e.event_id = format!("more-{}", e.event_id);
    }
    append(&journal, &more);
    by_partition.catch_up(&mut |_, _, _| {}).unwrap();
    one_pass.catch_up(&mut |_, _, _| {}).unwrap();
    for name in ["state", "activity"] {
        assert_eq!(
            by_partition.digest(name).unwrap(),
            one_pass.digest(name).unwrap()
        );
    }
}

#[test]
fn a_build_reading_noted_frames_across_segments_or_stepping_through_the_log_equals_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let small_segments = Options {
        limits: journal_engine::Limits {
            event_bytes_max: 16 * 1024,
            batch_events_max: 1_000,
            batch_bytes_max: 64 * 1024,
            segment_bytes_max: 256 * 1024,
        },
        ..Options::default()
    };
    let journal = Journal::open(dir.path(), small_segments).unwrap();
    let events = workload::generate(13, 12, 6_000);
    for chunk in events.chunks(50) {
        journal
            .append_batch_blocking(chunk.to_vec(), AppendOptions::default())
            .unwrap();
    }
    let segments = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .count();
    assert!(segments > 5, "{segments} segments");
    let n = events.len() as u64;
    let one_pass = ReadModels::open_at(&journal, &dir.path().join("one.redb"))
        .unwrap()
        .without_partitions();
    one_pass.catch_up(&mut |_, _, _| {}).unwrap();
    let log_bytes: u64 = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    // Six passes, the later five reading the frames the first noted, segment after segment:
    // copied into the notes, noted by their place and read from the log, or the first half
    // copied and the rest read from the log; then more passes than the build notes (one file
    // each), each stepping through the log.
    for (partition_events, copy_bytes_max, file) in [
        (n / 6 + 1, u64::MAX, "copied.redb"),
        (n / 6 + 1, 0, "placed.redb"),
        (n / 6 + 1, log_bytes / 2, "half-copied.redb"),
        (n / 300 + 1, u64::MAX, "stepped.redb"),
    ] {
        assert_eq!(
            (
                partition_events > n / 256,
                n.div_ceil(partition_events) > 256
            ),
            (file != "stepped.redb", file == "stepped.redb")
        );
        let models = ReadModels::open_at(&journal, &dir.path().join(file))
            .unwrap()
            .with_partition_events(partition_events)
            .with_copy_bytes_max(copy_bytes_max);
        let mut passes = 0;
        models
            .catch_up(&mut |name, _, _| passes += u64::from(name == "state"))
            .unwrap();
        // A call after each pass, then the ordinary catch-up's.
        assert!(passes > n.div_ceil(partition_events), "{file}: {passes}");
        for name in ["state", "activity"] {
            assert_eq!(
                models.digest(name).unwrap(),
                one_pass.digest(name).unwrap(),
                "{file}: {name}"
            );
        }
    }
}

#[test]
fn a_build_that_failed_in_this_process_starts_again_from_default_states() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, &workload::generate(6, 20, 12_000));
    let models = ReadModels::open_at(&journal, &dir.path().join("models.redb"))
        .unwrap()
        .with_partition_events(2000);
    // The first pass fails once `state` has written its partition and `activity` has not: the
    // activity worker holds that partition's states in its cache.
    let failed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        models.catch_up(&mut |_, _, _| panic!("simulated failure after the first flush"))
    }));
    assert!(failed.is_err());
    // The same workers, in the same process, build again.
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let one_pass = ReadModels::open_at(&journal, &dir.path().join("one.redb"))
        .unwrap()
        .without_partitions();
    one_pass.catch_up(&mut |_, _, _| {}).unwrap();
    for name in ["state", "activity"] {
        assert_eq!(
            models.digest(name).unwrap(),
            one_pass.digest(name).unwrap(),
            "{name}"
        );
        assert_eq!(models.freshness(name).unwrap().state, FreshnessState::Fresh);
    }
}

#[test]
fn an_interrupted_build_by_partition_serves_nothing_partial_and_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, &workload::generate(5, 20, 12_000));
    let head = journal.head().position.0;
    let store = dir.path().join("models.redb");
    let models = ReadModels::open_at(&journal, &store)
        .unwrap()
        .with_partition_events(2000);
    let mut flushed = 0;
    let crashed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        models.catch_up(&mut |_, _, _| {
            flushed += 1;
            if flushed == 5 {
                panic!("simulated crash in the third pass");
            }
        })
    }));
    assert!(crashed.is_err());
    drop(models);
    let models = ReadModels::open_at(&journal, &store)
        .unwrap()
        .with_partition_events(2000);
    for name in ["state", "activity"] {
        let f = models.freshness(name).unwrap();
        assert_eq!(
            (f.state, f.position),
            (FreshnessState::Rebuilding, 0),
            "{name}"
        );
        assert_eq!(f.progress.map(|p| p.target), Some(head), "{name}");
        assert_eq!(models.digest(name).unwrap().1, 0, "{name}: nothing served");
    }
    // Built again in one pass: what the crash left is cleared first.
    let models = models.without_partitions();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let fresh = ReadModels::open_at(&journal, &dir.path().join("fresh.redb")).unwrap();
    fresh.catch_up(&mut |_, _, _| {}).unwrap();
    for name in ["state", "activity"] {
        assert_eq!(models.digest(name).unwrap(), fresh.digest(name).unwrap());
        assert_eq!(models.freshness(name).unwrap().state, FreshnessState::Fresh);
    }
}

/// Every alias of `name`'s serving generation, as (kind, id, key), in order.
fn aliases_of(store: &Store, name: &str) -> Vec<(String, String, String)> {
    let version = store.meta(name).unwrap().serving.unwrap().version;
    let mut aliases = Vec::new();
    store
        .for_each_alias(name, version, &mut |kind, id, key| {
            aliases.push((kind.to_owned(), id.to_owned(), key.to_owned()));
            Ok(())
        })
        .unwrap();
    aliases
}

/// The event's stream key, as the test projections key their states (none for an event of no
/// stream).
fn stream_key_of(event: &StoredEvent) -> Option<String> {
    let key = event.envelope.stream_key();
    (key != "none:").then_some(key)
}

/// The positions [`Sequence`] applied for `session`, as stored.
fn sequence_of(store: &Store, session: &str) -> Option<Vec<u64>> {
    store
        .get("sequence", 1, &format!("session:{session}"))
        .unwrap()
        .map(|b| decode::<Vec<u64>>(&b).unwrap())
}

/// Lists the positions of each stream's events, in the order applied.
struct Sequence;

impl Projection for Sequence {
    type State = Vec<u64>;

    fn name(&self) -> &'static str {
        "sequence"
    }

    fn version(&self) -> u32 {
        1
    }

    fn key(&self, event: &StoredEvent) -> Option<String> {
        stream_key_of(event)
    }

    fn keyed_by_stream(&self) -> bool {
        true
    }

    fn apply(&self, state: &mut Vec<u64>, event: &Event<'_>) -> Result<(), String> {
        state.push(event.position.0);
        Ok(())
    }
}

/// Counts each stream's events; refuses `vendor.test.poison`.
struct Strict;

impl Projection for Strict {
    type State = u64;

    fn name(&self) -> &'static str {
        "strict"
    }

    fn version(&self) -> u32 {
        1
    }

    fn key(&self, event: &StoredEvent) -> Option<String> {
        stream_key_of(event)
    }

    fn keyed_by_stream(&self) -> bool {
        true
    }

    fn apply(&self, state: &mut u64, event: &Event<'_>) -> Result<(), String> {
        *state += 1;
        if event.envelope.event_type == "vendor.test.poison" {
            return Err("the test projection refuses this event".into());
        }
        Ok(())
    }
}

#[test]
fn a_fault_in_a_build_by_partition_is_the_first_in_log_order() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let partitions = 4;
    // The first poison is in a session whose partition is read after the second's, and the
    // second's is not the first pass, so the build has written a partition when it faults.
    let (late, early) = (0..1000)
        .map(|i| (format!("late-{i}"), format!("early-{i}")))
        .find(|(late, early)| {
            let of = |s: &str| partition_of(&format!("session:{s}"), partitions);
            of(late) > of(early) && of(early) >= 1
        })
        .unwrap();
    let mut events = Vec::new();
    for i in 0..40 {
        let (kind, session) = match i {
            30 => ("vendor.test.poison", &late),
            35 => ("vendor.test.poison", &early),
            _ => ("tool.progress", if i % 2 == 0 { &late } else { &early }),
        };
        events.push(event(kind, &format!("e{i}"), session));
    }
    append(&journal, &events);
    let store = Arc::new(Store::open(dir.path().join("strict.redb")).unwrap());
    let mut worker = Worker::new(Arc::new(Strict), Arc::clone(&store));
    // Fed from the same passes: the other worker's fault stops neither its events after the
    // poison in the same batch nor its own build.
    let mut sequences = Worker::new(Arc::new(Sequence), Arc::clone(&store));
    partition::build(
        &journal,
        &mut [&mut worker, &mut sequences],
        10,
        partition::Scratch::new(dir.path()),
        &mut |_, _, _| {},
    )
    .unwrap();
    let sequence = |session: &str| sequence_of(&store, session);
    let positions = |parity: u64| -> Vec<u64> { (1..=40).filter(|p| p % 2 == parity).collect() };
    assert_eq!(sequence(&late), Some(positions(1)));
    assert_eq!(sequence(&early), Some(positions(0)));
    assert_eq!(
        freshness(&store, &journal, "sequence").unwrap().state,
        FreshnessState::Fresh
    );
    let Reached::Faulted(fault) = worker.catch_up(&journal, &mut |_, _| {}).unwrap() else {
        panic!("expected a fault");
    };
    assert_eq!((fault.position, fault.event_id.as_str()), (31, "e30"));
    let count = |session: &str| {
        store
            .get("strict", 1, &format!("session:{session}"))
            .unwrap()
            .map_or(0, |b| decode::<u64>(&b).unwrap())
    };
    // The states of the 30 events preceding the fault, nothing after it, served as the last good
    // state, as a build in one pass would leave them.
    assert_eq!((count(&late), count(&early)), (15, 15));
    let f = freshness(&store, &journal, "strict").unwrap();
    assert_eq!(
        (f.state, f.position, f.progress),
        (FreshnessState::Faulted, 30, None)
    );
}

#[test]
fn a_fault_stops_its_own_worker_only_across_chunks_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let partitions = 2;
    // Two sessions, one per partition: each pass holds 200 events, several chunks' worth.
    let (poisoned, clean) = sessions_in_reversed_partitions(partitions);
    let events: Vec<Envelope> = (0..400)
        .map(|i| {
            let session = if i % 2 == 0 { &poisoned } else { &clean };
            let kind = if i == 20 {
                "vendor.test.poison"
            } else {
                "tool.progress"
            };
            event(kind, &format!("e{i}"), session)
        })
        .collect();
    append(&journal, &events);
    let store = Arc::new(Store::open(dir.path().join("chunks.redb")).unwrap());
    let mut strict = Worker::new(Arc::new(Strict), Arc::clone(&store));
    let mut sequences = Worker::new(Arc::new(Sequence), Arc::clone(&store));
    let mut passes = 0;
    let built = partition::build(
        &journal,
        &mut [&mut strict, &mut sequences],
        200,
        partition::Scratch::new(dir.path()),
        &mut |name, _, _| passes += u32::from(name == "sequence"),
    )
    .unwrap();
    assert!(built);
    assert_eq!(passes, 2);
    // The healthy worker has every event of both sessions, in order, and serves at the head.
    let sequence = |session: &str| sequence_of(&store, session);
    let positions = |parity: u64| -> Vec<u64> { (1..=400).filter(|p| p % 2 == parity).collect() };
    assert_eq!(sequence(&poisoned), Some(positions(1)));
    assert_eq!(sequence(&clean), Some(positions(0)));
    let serving = store.meta("sequence").unwrap().serving.unwrap();
    assert_eq!(serving.position, 400);
    // The faulted one left the build (it serves nothing built past its fault), and its
    // ordinary catch-up faults at the poison, in the first chunk of its pass.
    let strict_meta = store.meta("strict").unwrap();
    assert_eq!(strict_meta.serving.map_or(0, |g| g.position), 0);
    let Reached::Faulted(fault) = strict.catch_up(&journal, &mut |_, _| {}).unwrap() else {
        panic!("expected a fault");
    };
    assert_eq!((fault.position, fault.event_id.as_str()), (21, "e20"));
}

#[test]
fn a_log_in_one_partition_is_built_in_one_pass_to_the_ordinary_catch_ups_states() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, &workload::generate(23, 8, 3_000));
    let head = journal.head();
    let store = Arc::new(Store::open(dir.path().join("single.redb")).unwrap());
    let mut worker = Worker::new(
        Arc::new(journal_projections::models::ActivityProjection),
        Arc::clone(&store),
    );
    let mut passes = 0;
    let built = partition::build(
        &journal,
        &mut [&mut worker],
        u64::MAX,
        partition::Scratch::new(dir.path()),
        &mut |_, _, _| passes += 1,
    )
    .unwrap();
    assert!(built);
    assert_eq!(passes, 1);
    // Built to the head by the pass itself, not by an ordinary catch-up.
    let serving = store.meta("activity").unwrap().serving.unwrap();
    assert_eq!(
        (serving.position, serving.hash),
        (head.position.0, Some(head.hash))
    );
    drop((worker, store));
    let models = ReadModels::open_at(&journal, &dir.path().join("single.redb")).unwrap();
    let ordinary = ReadModels::open_at(&journal, &dir.path().join("ordinary.redb"))
        .unwrap()
        .without_partitions();
    ordinary.catch_up(&mut |_, _, _| {}).unwrap();
    assert_eq!(
        models.digest("activity").unwrap(),
        ordinary.digest("activity").unwrap()
    );
}

#[test]
fn a_build_whose_scratch_files_cannot_be_made_steps_through_the_log_to_the_same_states() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let events = workload::generate(17, 10, 4_000);
    append(&journal, &events);
    // With a projection that has aliases too: the same aliases.
    let states = |scratch: &std::path::Path, file: &str| {
        let store = Arc::new(Store::open(dir.path().join(file)).unwrap());
        let mut activity = Worker::new(
            Arc::new(journal_projections::models::ActivityProjection),
            Arc::clone(&store),
        );
        let mut state = Worker::new(
            Arc::new(journal_projections::models::StateProjection),
            Arc::clone(&store),
        );
        let built = partition::build(
            &journal,
            &mut [&mut activity, &mut state],
            700,
            partition::Scratch::new(scratch),
            &mut |_, _, _| {},
        )
        .unwrap();
        assert!(built, "{file}");
        let mut states = Vec::new();
        for name in ["activity", "state"] {
            let version = store.meta(name).unwrap().serving.unwrap().version;
            store
                .for_each(name, version, &mut |key, bytes| {
                    states.push((key.to_string(), bytes.to_vec()));
                    Ok(())
                })
                .unwrap();
        }
        (states, aliases_of(&store, "state"))
    };
    let noted = states(dir.path(), "noted.redb");
    let stepped = states(&dir.path().join("no such directory"), "stepped.redb");
    assert_eq!(noted.0.len(), 20, "one state per session and projection");
    assert!(noted.1.len() > 20, "{}", noted.1.len());
    assert!(noted == stepped);
}
