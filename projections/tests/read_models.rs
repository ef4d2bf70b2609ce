//! Read models against a real journal: incremental equals rebuilt across crashes, exact lag of
//! a stalled worker, a poison event faulting the projection, a version bump rebuilding while the
//! old answers stay readable, read-your-writes, and `unknown` where facts are missing.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use journal_engine::seams::Clock;
use journal_engine::{AppendOptions, Journal, Options};
use journal_format::{Envelope, StoredEvent};
use journal_projections::models::{freshness, ReadModels};
use journal_projections::store::Store;
use journal_projections::worker::{decode, Reached, Worker};
use journal_projections::{workload, Event, FreshnessState, Projection};

#[derive(Debug)]
struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_unix_ns(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl TestClock {
    fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms * 1_000_000, Ordering::SeqCst);
    }
}

fn journal_with(dir: &std::path::Path, clock: Option<Arc<TestClock>>) -> Journal {
    let mut options = Options::default();
    if let Some(clock) = clock {
        options.clock = clock;
    }
    Journal::open(dir, options).unwrap()
}

fn append(journal: &Journal, events: &[Envelope]) {
    for chunk in events.chunks(2000) {
        journal
            .append_batch_blocking(chunk.to_vec(), AppendOptions::default())
            .unwrap();
    }
}

#[test]
fn incremental_equals_rebuilt_across_random_crashes() {
    // The first build by partition (the default), and by the workers' ordinary catch-up, which
    // a crash leaves to resume from its last committed batch.
    incremental_equals_rebuilt_across_random_crashes_building(false);
    incremental_equals_rebuilt_across_random_crashes_building(true);
}

fn incremental_equals_rebuilt_across_random_crashes_building(ordinary: bool) {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    let events = workload::generate(7, 40, 24_000);
    assert!(events.len() > 20_000, "{}", events.len());
    let mut rng = workload::Rng::new(99);
    let mut appended = 0;
    let mut crashes = 0;
    while appended < events.len() {
        let n = (1 + rng.below(6000) as usize).min(events.len() - appended);
        append(&journal, &events[appended..appended + n]);
        appended += n;
        // A worker that dies after a random number of committed batches; the next one resumes
        // from the checkpoint.
        let models = ReadModels::open(&journal).unwrap().with_batch_events(1000);
        let models = if ordinary {
            models.without_partitions()
        } else {
            models
        };
        let die_after = rng.below(3);
        let mut batches = 0;
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            models.catch_up(&mut |_, _, _| {
                batches += 1;
                if batches == die_after + 1 && die_after < 2 {
                    panic!("simulated crash");
                }
            })
        }));
        crashes += u32::from(result.is_err());
        drop(models);
    }
    assert!(
        crashes > 0,
        "the test crashed no worker (ordinary: {ordinary})"
    );
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let rebuilt = ReadModels::open_at(&journal, &dir.path().join("rebuilt.redb")).unwrap();
    rebuilt.catch_up(&mut |_, _, _| {}).unwrap();
    for name in ["state", "activity"] {
        let (incremental, keys) = models.digest(name).unwrap();
        let (scratch, scratch_keys) = rebuilt.digest(name).unwrap();
        assert_eq!(keys, 40, "{name}: one state per session");
        assert_eq!((incremental, keys), (scratch, scratch_keys), "{name}");
        assert_eq!(models.freshness(name).unwrap().state, FreshnessState::Fresh);
    }
}

#[test]
fn a_stalled_worker_reports_stale_with_the_exact_lag() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(1_778_000_000_000_000_000)));
    let journal = journal_with(dir.path(), Some(Arc::clone(&clock)));
    let events = workload::generate(1, 2, 200);
    let (first, rest) = events.split_at(10);
    append(&journal, first);
    let models = ReadModels::open(&journal).unwrap();
    let f = models.freshness("state").unwrap();
    assert_eq!(
        (f.state, f.position, f.lag_events),
        (FreshnessState::Unknown, 0, 10)
    );
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let f = models.freshness("state").unwrap();
    assert_eq!(
        (f.state, f.position, f.lag_events, f.lag_ms),
        (FreshnessState::Fresh, 10, 0, 0)
    );
    clock.advance_ms(1500);
    append(&journal, &rest[..7]);
    clock.advance_ms(2500);
    for name in ["state", "activity"] {
        let f = models.freshness(name).unwrap();
        assert_eq!(
            (f.state, f.position, f.head, f.lag_events, f.lag_ms),
            (FreshnessState::Stale, 10, 17, 7, 2500),
            "{name}"
        );
    }
    let session = events[0].session_id.clone().unwrap();
    let answer = models.view("session", &session).unwrap();
    assert_eq!(answer.freshness.state, FreshnessState::Stale);
    assert_eq!(answer.freshness.lag_events, 7);
    models.catch_up(&mut |_, _, _| {}).unwrap();
    assert_eq!(
        models.freshness("activity").unwrap().state,
        FreshnessState::Fresh
    );
}

/// Counts events per stream; fails on `vendor.test.poison` unless `tolerant`.
struct Counting {
    version: u32,
    tolerant: bool,
}

impl Projection for Counting {
    type State = u64;

    fn name(&self) -> &'static str {
        "counting"
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn key(&self, event: &StoredEvent) -> Option<String> {
        Some(event.envelope.stream_key())
    }

    fn apply(&self, state: &mut u64, event: &Event<'_>) -> Result<(), String> {
        // A half-applied change before the failure: the worker must not keep it.
        *state += u64::from(self.version);
        if event.envelope.event_type == "vendor.test.poison" && !self.tolerant {
            return Err("the test projection refuses this event".into());
        }
        Ok(())
    }
}

fn count(store: &Store, version: u32, key: &str) -> u64 {
    store
        .get("counting", version, key)
        .unwrap()
        .map_or(0, |b| decode::<u64>(&b).unwrap())
}

#[test]
fn a_poison_event_faults_the_projection_naming_it_and_a_version_bump_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    let mut events = Vec::new();
    for i in 0..100 {
        let mut e = Envelope::new(
            if i == 60 {
                "vendor.test.poison"
            } else {
                "tool.progress"
            },
            format!("e{i}"),
            "2026-05-11T10:00:00Z",
        );
        e.session_id = Some("s".into());
        events.push(e);
    }
    append(&journal, &events);
    let store = Arc::new(Store::open(dir.path().join("test.redb")).unwrap());
    let mut worker = Worker::new(
        Arc::new(Counting {
            version: 1,
            tolerant: false,
        }),
        Arc::clone(&store),
    );
    let Reached::Faulted(fault) = worker.catch_up(&journal, &mut |_, _| {}).unwrap() else {
        panic!("expected a fault")
    };
    assert_eq!((fault.position, fault.event_id.as_str()), (61, "e60"));
    assert!(fault.error.contains("refuses"), "{}", fault.error);
    let f = freshness(&store, &journal, "counting").unwrap();
    assert_eq!(
        (f.state, f.position, f.lag_events),
        (FreshnessState::Faulted, 60, 40)
    );
    assert_eq!(f.fault.as_ref().unwrap().event_id, "e60");
    // The last good state is served: the 60 events before the poison, not the half-applied one.
    assert_eq!(count(&store, 1, "session:s"), 60);
    // It does not skip the event: more appends leave it where it is.
    let mut more = Envelope::new("tool.progress", "e100", "2026-05-11T10:00:00Z");
    more.session_id = Some("s".into());
    append(&journal, &[more]);
    assert!(matches!(
        worker.catch_up(&journal, &mut |_, _| {}).unwrap(),
        Reached::Faulted(_)
    ));
    assert_eq!(count(&store, 1, "session:s"), 60);

    // A new version of the fold rebuilds from the start and clears the fault.
    let mut worker = Worker::new(
        Arc::new(Counting {
            version: 2,
            tolerant: true,
        }),
        Arc::clone(&store),
    );
    assert_eq!(
        worker.catch_up(&journal, &mut |_, _| {}).unwrap(),
        Reached::Position(101)
    );
    let f = freshness(&store, &journal, "counting").unwrap();
    assert_eq!(
        (f.state, f.position, f.fault),
        (FreshnessState::Fresh, 101, None)
    );
    assert_eq!(count(&store, 2, "session:s"), 202);
    assert_eq!(
        count(&store, 1, "session:s"),
        0,
        "the old generation is dropped"
    );
}

#[test]
fn during_a_rebuild_the_old_answers_stay_readable_marked_rebuilding() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    const BATCH_EVENTS: u64 = 1000;
    let total = BATCH_EVENTS * 2 + 100;
    let events: Vec<Envelope> = (0..total)
        .map(|i| {
            let mut e = Envelope::new("tool.progress", format!("e{i}"), "2026-05-11T10:00:00Z");
            e.session_id = Some("s".into());
            e
        })
        .collect();
    append(&journal, &events);
    let store = Arc::new(Store::open(dir.path().join("test.redb")).unwrap());
    let v1 = |tolerant| Counting {
        version: 1,
        tolerant,
    };
    Worker::new(Arc::new(v1(true)), Arc::clone(&store))
        .catch_up(&journal, &mut |_, _| {})
        .unwrap();
    assert_eq!(count(&store, 1, "session:s"), total);

    let mut seen = Vec::new();
    let mut worker = Worker::new(
        Arc::new(Counting {
            version: 2,
            tolerant: true,
        }),
        Arc::clone(&store),
    )
    .with_batch_events(BATCH_EVENTS);
    worker
        .catch_up(&journal, &mut |position, _| {
            let f = freshness(&store, &journal, "counting").unwrap();
            let served = store.meta("counting").unwrap().serving.unwrap();
            seen.push((
                position,
                f.state,
                f.progress.map(|p| (p.position, p.target)),
                served.version,
                count(&store, served.version, "session:s"),
            ));
        })
        .unwrap();
    assert_eq!(
        seen,
        vec![
            (
                BATCH_EVENTS,
                FreshnessState::Rebuilding,
                Some((BATCH_EVENTS, total)),
                1,
                total
            ),
            (
                BATCH_EVENTS * 2,
                FreshnessState::Rebuilding,
                Some((BATCH_EVENTS * 2, total)),
                1,
                total
            ),
            (total, FreshnessState::Fresh, None, 2, total * 2),
        ]
    );
}

#[test]
fn read_your_own_writes_with_live_workers() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let journal = journal_with(dir.path(), None);
        let models = ReadModels::open(&journal).unwrap();
        let workers = models.spawn();
        let events = workload::generate(3, 3, 600);
        let mut last = 0;
        for chunk in events.chunks(50) {
            let appended = journal
                .append_batch(chunk.to_vec(), AppendOptions::default())
                .await
                .unwrap();
            last = appended.last().unwrap().position.0;
        }
        let m = models.clone();
        let reached =
            tokio::task::spawn_blocking(move || m.wait_for(last, Duration::from_secs(30)).unwrap())
                .await
                .unwrap();
        assert!(reached);
        let answer = models.view("session", "sess_00001").unwrap();
        assert!(answer.freshness.position >= last);
        assert!(answer.model.is_some());
        workers.abort();
    });
}

/// The live workers reach the head on their own (no reader asking), their commits not
/// waiting for the disk; after `sync` the store, opened again, holds them.
#[test]
fn live_workers_reach_the_head_and_sync_makes_their_commits_durable() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let journal = journal_with(dir.path(), None);
    let models = ReadModels::open(&journal).unwrap();
    let head = runtime.block_on(async {
        let workers = models.spawn();
        let mut head = 0;
        for chunk in workload::generate(5, 2, 300).chunks(20) {
            let appended = journal
                .append_batch(chunk.to_vec(), AppendOptions::default())
                .await
                .unwrap();
            head = appended.last().unwrap().position.0;
        }
        let mut reached = false;
        for _ in 0..600 {
            let fresh = ["state", "activity"]
                .iter()
                .all(|n| models.freshness(n).unwrap().position == head);
            if fresh {
                reached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(reached, "the live workers did not reach {head} in 6 s");
        workers.abort();
        let _ = workers.await;
        head
    });
    models.sync().unwrap();
    let path = models.store().path().to_path_buf();
    drop(models);
    let store = Store::open(&path).unwrap();
    for name in ["state", "activity"] {
        let meta = store.meta(name).unwrap();
        assert_eq!(meta.serving.map(|g| g.position), Some(head), "{name}");
    }
}

#[test]
fn read_models_of_a_generated_workload_tell_what_the_facts_say() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    let events = workload::generate(11, 4, 2_000);
    append(&journal, &events);
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();

    // Counts derived from the events independently.
    let of = |session: &str| -> Vec<&Envelope> {
        events
            .iter()
            .filter(|e| e.session_id.as_deref() == Some(session))
            .collect()
    };
    let session_events = of("sess_00002");
    let answer = models.view("session", "sess_00002").unwrap();
    assert_eq!(answer.freshness.state, FreshnessState::Fresh);
    let s = answer.model.unwrap();
    assert_eq!(s["events"], session_events.len());
    let tool_calls: std::collections::BTreeSet<&str> = session_events
        .iter()
        .filter_map(|e| {
            e.tool_call_id
                .as_deref()
                .filter(|_| e.event_type == "tool.started")
        })
        .collect();
    let results: std::collections::BTreeSet<&str> = session_events
        .iter()
        .filter(|e| e.event_type == "tool.result")
        .filter_map(|e| e.tool_call_id.as_deref())
        .collect();
    assert_eq!(s["toolCalls"]["total"], tool_calls.len());
    assert_eq!(s["toolCalls"]["open"], tool_calls.len() - results.len());
    // Tasks completed without an accepted decision are unverified, with an incident naming the
    // event.
    let decided: std::collections::BTreeSet<&str> = session_events
        .iter()
        .filter(|e| e.event_type == "task.completion.decided")
        .filter_map(|e| e.task_id.as_deref())
        .collect();
    let completed: Vec<&Envelope> = session_events
        .iter()
        .copied()
        .filter(|e| e.event_type == "task.completed")
        .collect();
    let undecided: Vec<&&Envelope> = completed
        .iter()
        .filter(|e| !decided.contains(e.task_id.as_deref().unwrap()))
        .collect();
    assert_eq!(
        s["taskSummary"]["unverified"],
        undecided.len(),
        "{}",
        s["taskSummary"]
    );
    assert_eq!(
        s["taskSummary"]["completed"],
        completed.len() - undecided.len()
    );
    for e in &undecided {
        let task = models.view("task", e.task_id.as_deref().unwrap()).unwrap();
        let task = task.model.unwrap();
        assert_eq!(task["outcome"], "unverified");
        assert!(
            task["incidents"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["eventId"] == e.event_id.as_str()
                    && i["rule"] == "completion_not_accepted"),
            "{task}"
        );
    }
    assert!(
        !undecided.is_empty(),
        "the workload has an undecided completion"
    );
    // The checklist, a thread and a run.
    let checklist = models
        .view("checklist", "sess_00002")
        .unwrap()
        .model
        .unwrap();
    assert_eq!(checklist["verificationNudgeNeeded"], true);
    let thread = models
        .view("thread", "thread_00002")
        .unwrap()
        .model
        .unwrap();
    assert_eq!(thread["stream"], "session:sess_00002");
    assert!(!thread["turns"].as_array().unwrap().is_empty());
    let run = models.view("run", "run_00002_0").unwrap().model.unwrap();
    assert_eq!(run["taskId"], "task_00002_0");
    // The ecosystem contract's ecosystem views, counted against the events.
    let eco = models
        .view("ecosystem", "sess_00002")
        .unwrap()
        .model
        .unwrap();
    let count = |t: &str| session_events.iter().filter(|e| e.event_type == t).count();
    let distinct = |f: fn(&Envelope) -> Option<&str>| {
        session_events
            .iter()
            .filter_map(|e| f(e))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert_eq!(
        eco["tasks"].as_array().unwrap().len(),
        count("task.created")
    );
    assert_eq!(
        eco["runs"].as_array().unwrap().len(),
        distinct(|e| e.run_id.as_deref())
    );
    assert_eq!(
        eco["approvals"].as_array().unwrap().len(),
        count("action.required")
    );
    assert!(eco["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["status"] == "approve" && a["decidedBy"] == "user:reviewer"));
    let log = eco["actionLog"].as_array().unwrap();
    assert_eq!(
        log.iter().filter(|a| a["kind"] == "tool_call").count(),
        tool_calls.len()
    );
    assert_eq!(
        log.iter().filter(|a| a["kind"] == "model_call").count(),
        count("model.requested")
    );
    let todos = eco["todos"].as_array().unwrap();
    assert_eq!(todos.len(), 2);
    assert!(todos.iter().all(|t| t["status"] == "done"));
    assert_eq!(
        eco["checkpoints"].as_array().unwrap().len(),
        count("checkpoint.captured")
    );
    assert_eq!(
        eco["session"]["resumable"],
        count("checkpoint.captured") > 0
    );
    // Nothing known of an id: no model, still a freshness.
    let none = models.view("task", "no_such_task").unwrap();
    assert!(none.model.is_none());
    assert_eq!(none.freshness.state, FreshnessState::Fresh);
}

#[test]
fn fields_without_facts_say_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    let mut call = Envelope::new("tool.started", "only", "2026-05-11T10:00:00Z");
    call.session_id = Some("bare".into());
    call.tool_call_id = Some("c1".into());
    let mut task = Envelope::new("task.progress", "mention", "2026-05-11T10:00:01Z");
    task.session_id = Some("bare".into());
    task.task_id = Some("t1".into());
    append(&journal, &[call, task]);
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let s = models.view("session", "bare").unwrap().model.unwrap();
    for field in ["runtimeId", "status", "checklist"] {
        assert_eq!(s[field], "unknown", "{field}: {s}");
    }
    assert_eq!(s["toolCalls"]["open"], 1, "a call with no result is open");
    assert_eq!(s["toolCalls"]["byStatus"], serde_json::json!({}));
    assert_eq!(s["cost"]["inputTokens"], "unknown");
    assert_eq!(s["routing"]["selectedModel"], "unknown");
    assert_eq!(s["permissions"]["sandboxProfile"], "unknown");
    let eco = models.view("ecosystem", "bare").unwrap().model.unwrap();
    assert_eq!(eco["session"]["status"], "unknown", "{eco}");
    assert_eq!(eco["session"]["productId"], "unknown");
    assert_eq!(eco["session"]["resumable"], false);
    assert_eq!(eco["tasks"][0]["status"], "unknown");
    assert_eq!(eco["tasks"][0]["createdAt"], "unknown");
    assert_eq!(eco["actionLog"][0]["status"], "open");
    assert_eq!(eco["actionLog"][0]["ended"], "unknown");
    let t = models.view("task", "t1").unwrap().model.unwrap();
    assert_eq!(t["title"], "unknown");
    assert_eq!(t["outcome"], "not_applicable");
    assert_eq!(t["decision"], "unknown");
    assert_eq!(t["currentAttemptId"], "unknown");
}

#[test]
fn a_reset_rebuilds_from_scratch_even_with_states_cached() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    append(&journal, &workload::generate(8, 3, 600));
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let before = models.digest("activity").unwrap();
    // The same workers, their caches warm: a reset must not let them reuse cached states.
    models.reset(None).unwrap();
    assert_eq!(
        models.freshness("activity").unwrap().state,
        FreshnessState::Unknown
    );
    models.catch_up(&mut |_, _, _| {}).unwrap();
    assert_eq!(models.digest("activity").unwrap(), before);
    assert_eq!(models.digest("state").unwrap().1, 3);
}

#[test]
fn resume_state_follows_the_snapshot_precedence_and_history_reads_in_windows() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    let events = workload::generate(12, 2, 400);
    append(&journal, &events);
    let models = ReadModels::open(&journal).unwrap();
    models.catch_up(&mut |_, _, _| {}).unwrap();
    // No snapshot: reconstructed from the events.
    let resume = models.view("resume", "sess_00000").unwrap().model.unwrap();
    assert_eq!(resume["source"], "history_reconstructed");
    assert_eq!(resume["resumable"], true);
    assert_eq!(resume["replayFromPosition"], 1);
    assert_eq!(resume["reconstructed"]["stream"], "session:sess_00000");
    // An older snapshot, then a current one, then an older one again: the current one wins.
    let snapshot = |id: &str, schema: &str| {
        let mut e = Envelope::new("snapshot.written", id, "2026-05-12T00:00:00Z");
        e.session_id = Some("sess_00000".into());
        e.payload = Some(serde_json::json!({"schema": schema, "body": {"checklist": []}}));
        e
    };
    append(&journal, &[snapshot("old-1", "conversation_snapshot_v1")]);
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let resume = models.view("resume", "sess_00000").unwrap().model.unwrap();
    assert_eq!(resume["source"], "older_snapshot");
    assert_eq!(resume["snapshotAt"]["eventId"], "old-1");
    append(
        &journal,
        &[
            snapshot("v2", "session_runtime_v2"),
            snapshot("old-2", "conversation_snapshot_v1"),
        ],
    );
    models.catch_up(&mut |_, _, _| {}).unwrap();
    let resume = models.view("resume", "sess_00000").unwrap().model.unwrap();
    assert_eq!(resume["source"], "snapshot");
    assert_eq!(resume["snapshotAt"]["eventId"], "v2");
    assert_eq!(resume["schema"], "session_runtime_v2");
    assert_eq!(resume["snapshot"]["schema"], "session_runtime_v2");
    let v2 = journal.get("v2").unwrap().unwrap().position.0;
    assert_eq!(resume["replayFromPosition"], v2 + 1);

    // History in windows of 50: every event of the session once, in order.
    let expected: Vec<u64> = journal
        .query(journal_engine::Filter {
            session: Some("sess_00001".into()),
            ..journal_engine::Filter::default()
        })
        .unwrap()
        .map(|e| e.unwrap().position.0)
        .collect();
    let mut seen = Vec::new();
    let mut cursor = 1;
    let mut windows = 0;
    loop {
        let w = models.history("sess_00001", cursor, 50).unwrap();
        windows += 1;
        assert!(w.events.len() <= 50);
        seen.extend(w.events.iter().map(|e| e["position"].as_u64().unwrap()));
        match w.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(windows, expected.len().div_ceil(50));
}

/// A projection whose one state grows by a KiB per event.
#[derive(Debug)]
struct Growing;

impl Projection for Growing {
    type State = Vec<u8>;

    fn name(&self) -> &'static str {
        "growing"
    }

    fn version(&self) -> u32 {
        1
    }

    fn key(&self, _event: &StoredEvent) -> Option<String> {
        Some("all".into())
    }

    fn apply(&self, state: &mut Vec<u8>, event: &Event<'_>) -> Result<(), String> {
        state.extend(std::iter::repeat_n(event.position.0 as u8, 1024));
        Ok(())
    }
}

#[test]
fn batches_grow_with_the_states_so_a_long_catch_up_writes_linearly() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_with(dir.path(), None);
    append(&journal, &workload::generate(3, 2, 1_500)[..1_500]);
    let head = journal.head().position.0;

    let mut states = Vec::new();
    for growing in [true, false] {
        let store = Arc::new(Store::open(dir.path().join(format!("g{growing}.redb"))).unwrap());
        let worker = Worker::new(Arc::new(Growing), Arc::clone(&store));
        let mut worker = if growing {
            worker.with_growing_batches(10)
        } else {
            worker.with_batch_events(10)
        };
        let mut commits = Vec::new();
        let reached = worker
            .catch_up(&journal, &mut |position, _| commits.push(position))
            .unwrap();
        assert_eq!(reached, Reached::Position(head));
        if growing {
            // 10 events write 10 KiB, so the next batch is at least 10 KiB / 64 = 160 events,
            // and so on: a handful of commits instead of one per 10 events.
            assert!(commits.len() <= 6, "{commits:?}");
            assert_eq!(commits[..2], [10, 170]);
        } else {
            assert_eq!(commits.len() as u64, head.div_ceil(10));
        }
        let bytes = store.get("growing", 1, "all").unwrap().unwrap();
        states.push(decode::<Vec<u8>>(&bytes).unwrap());
    }
    assert_eq!(states[0].len() as u64, head * 1024);
    assert_eq!(states[0], states[1]);
}
