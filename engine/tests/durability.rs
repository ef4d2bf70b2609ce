//! Durability rules: a failed sync poisons the writer until reopen; buffered mode acknowledges
//! before syncing and syncs on request; closing and reopening keeps every acknowledged event;
//! large groups synced on the syncer thread are answered only once durable, in order, with at
//! most one write unsynced, and a failed sync or a panic there poisons instead of hanging.

mod common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use journal_engine::storage::{FsStorage, OpenMode, Storage, StorageFile, StorageLock};
use journal_engine::{AppendOptions, Durability, Error, Journal, Options};
use journal_format::Position;

/// The real file system, except that `sync_data` fails with EIO while `fail` is set (on the
/// syncer thread only, while `fail_in_syncer` is), and syncs are counted (the syncer thread's
/// apart as well).
///
/// It also watches the segments' frames: `overlaps` counts each write of frames (bytes not all
/// zero: the filler writes zeros) made while an earlier write of frames was not yet synced, or
/// while a sync other than the filler's was under way. A write of frames of
/// [`LARGE_WRITE_BYTES`] or more takes [`LARGE_WRITE_PAUSE`] longer, so that other producers'
/// requests queue while it lasts, as on a slow disk: the writer hands a written group to the
/// syncer thread only when requests wait, and on a busy machine producers that took turns
/// left the syncer idle for a whole test.
#[derive(Debug, Default)]
struct FlakyDisk {
    fail: Arc<AtomicBool>,
    fail_in_syncer: Arc<AtomicBool>,
    panic_in_syncer: Arc<AtomicBool>,
    syncs: Arc<AtomicUsize>,
    syncer_syncs: Arc<AtomicUsize>,
    frames: Arc<FrameWatch>,
}

/// A write of frames this large is slowed down by [`LARGE_WRITE_PAUSE`] (see [`FlakyDisk`]).
const LARGE_WRITE_BYTES: usize = 256 * 1024;
const LARGE_WRITE_PAUSE: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct FrameWatch {
    unsynced: AtomicUsize,
    syncing: AtomicUsize,
    overlaps: AtomicUsize,
}

#[derive(Debug)]
struct FlakyFile {
    inner: Arc<dyn StorageFile>,
    fail: Arc<AtomicBool>,
    fail_in_syncer: Arc<AtomicBool>,
    panic_in_syncer: Arc<AtomicBool>,
    syncs: Arc<AtomicUsize>,
    syncer_syncs: Arc<AtomicUsize>,
    /// Set for segment files.
    frames: Option<Arc<FrameWatch>>,
}

/// Whether this is the journal's syncer thread.
fn on_syncer() -> bool {
    std::thread::current().name() == Some("journal-syncer")
}

impl StorageFile for FlakyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(frames) = self.frames.as_ref().filter(|_| buf.iter().any(|b| *b != 0)) {
            let unsynced = frames.unsynced.fetch_add(1, Ordering::SeqCst);
            if unsynced > 0 || frames.syncing.load(Ordering::SeqCst) > 0 {
                frames.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            if buf.len() >= LARGE_WRITE_BYTES {
                std::thread::sleep(LARGE_WRITE_PAUSE);
            }
        }
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        let watched = self
            .frames
            .as_ref()
            .filter(|_| std::thread::current().name() != Some("journal-filler"));
        if let Some(frames) = watched {
            frames.syncing.fetch_add(1, Ordering::SeqCst);
            frames.unsynced.store(0, Ordering::SeqCst);
        }
        let result = self.sync_data_once();
        if let Some(frames) = watched {
            frames.syncing.fetch_sub(1, Ordering::SeqCst);
        }
        result
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl FlakyFile {
    fn sync_data_once(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if on_syncer() {
            self.syncer_syncs.fetch_add(1, Ordering::SeqCst);
            if self.fail_in_syncer.load(Ordering::SeqCst) {
                return Err(io::Error::from_raw_os_error(5));
            }
            assert!(
                !self.panic_in_syncer.load(Ordering::SeqCst),
                "a sync on the syncer thread panics, as the test asked"
            );
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.sync_data()
    }
}

impl Storage for FlakyDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(FlakyFile {
            inner: FsStorage.open(path, mode)?,
            fail: Arc::clone(&self.fail),
            fail_in_syncer: Arc::clone(&self.fail_in_syncer),
            panic_in_syncer: Arc::clone(&self.panic_in_syncer),
            syncs: Arc::clone(&self.syncs),
            syncer_syncs: Arc::clone(&self.syncer_syncs),
            frames: (path.extension().is_some_and(|e| e == "seg"))
                .then(|| Arc::clone(&self.frames)),
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

/// A journal in `dir` on `disk`, with the default options otherwise.
fn open_on(dir: &Path, disk: Arc<FlakyDisk>) -> Journal {
    Journal::open(
        dir,
        Options {
            storage: disk,
            ..Options::default()
        },
    )
    .unwrap()
}

/// After a failure poisoned `journal`: it says so, it published exactly the `acknowledged`
/// events, and once closed and reopened it still has them all and verifies.
fn assert_poisoned_keeping(journal: Journal, dir: &Path, acknowledged: u64) {
    assert!(journal.status().unwrap().poisoned.is_some());
    assert_eq!(
        journal.head().position.0,
        acknowledged,
        "acknowledged = published"
    );
    journal.close();
    let journal = Journal::open(dir, Options::default()).unwrap();
    assert!(
        journal.head().position.0 >= acknowledged,
        "an acknowledged event was lost"
    );
    let report = journal.verify(&Default::default(), &mut |_, _| {}).unwrap();
    assert!(report.ok, "{report:?}");
}

#[test]
fn a_failed_sync_poisons_the_writer_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    let fail = Arc::clone(&disk.fail);
    let journal = open_on(dir.path(), disk);
    append(&journal, vec![event(1, "s1")]);
    fail.store(true, Ordering::SeqCst);
    let err = journal
        .append_batch_blocking(vec![event(2, "s1")], AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::Poisoned(ref cause) if cause.contains("syncing")),
        "{err:?}"
    );
    fail.store(false, Ordering::SeqCst);
    let err = journal
        .append_batch_blocking(vec![event(3, "s1")], AppendOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::Poisoned(_)),
        "still poisoned after the disk recovers: {err:?}"
    );
    assert!(journal.status().unwrap().poisoned.is_some());
    assert_eq!(
        journal.head().position,
        Position::FIRST,
        "the failed append was never acknowledged"
    );
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    // The unsynced bytes may or may not be on disk; either way the log is a valid prefix.
    assert!(journal.head().position >= Position::FIRST);
    append(&journal, vec![event(4, "s1")]);
    assert!(
        journal
            .verify(&Default::default(), &mut |_, _| {})
            .unwrap()
            .ok
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_shares_syncs_among_concurrent_appenders() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    let syncs = Arc::clone(&disk.syncs);
    let journal = open_on(dir.path(), disk);
    let before = syncs.load(Ordering::SeqCst);
    let tasks: Vec<_> = (0..64u64)
        .map(|p| {
            let journal = journal.clone();
            tokio::spawn(async move {
                for i in 0..20 {
                    journal
                        .append(event(p * 1000 + i, &format!("s{p}")))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let used = syncs.load(Ordering::SeqCst) - before;
    assert_eq!(journal.head().position, Position(1280));
    assert!(
        used < 1280,
        "1280 durable appends took {used} syncs: group commit must share them"
    );
}

/// Producers appending large batches at once: each written group of 512 KiB or more, written
/// while others wait, goes to the syncer thread. Each producer's count of acknowledged events,
/// and the error it stopped at.
fn large_batches_at_once(
    journal: &Journal,
    producers: u64,
    batches: u64,
) -> Vec<(u64, Option<Error>)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                scope.spawn(move || {
                    let mut acknowledged = 0;
                    for b in 0..batches {
                        let events: Vec<_> = (0..1000)
                            .map(|i| event((p * batches + b) * 1000 + i, &format!("s{p}")))
                            .collect();
                        let answers =
                            match journal.append_batch_blocking(events, AppendOptions::default()) {
                                Ok(answers) => answers,
                                Err(e) => return (acknowledged, Some(e)),
                            };
                        // Answered, so published: every event of the batch is readable now.
                        for answer in [answers.first(), answers.last()].into_iter().flatten() {
                            let stored = journal.get_position(answer.position).unwrap();
                            assert_eq!(stored.envelope.event_id, *answer.event_id);
                        }
                        acknowledged += answers.len() as u64;
                    }
                    (acknowledged, None)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn large_groups_synced_beside_the_writer_are_answered_durable_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    let syncer_syncs = Arc::clone(&disk.syncer_syncs);
    let frames = Arc::clone(&disk.frames);
    let journal = open_on(dir.path(), disk);
    let acknowledged: u64 = large_batches_at_once(&journal, 4, 8)
        .into_iter()
        .map(|(n, error)| {
            assert!(error.is_none(), "{error:?}");
            n
        })
        .sum();
    assert_eq!(acknowledged, 32_000);
    assert_eq!(journal.head().position, Position(32_000));
    assert!(
        syncer_syncs.load(Ordering::SeqCst) > 0,
        "no group went to the syncer thread"
    );
    assert_eq!(
        frames.overlaps.load(Ordering::SeqCst),
        0,
        "frames were written while earlier ones were unsynced: a power failure could keep the \
         later write and lose the earlier"
    );
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    assert_eq!(journal.head().position, Position(32_000));
    let report = journal.verify(&Default::default(), &mut |_, _| {}).unwrap();
    assert!(report.ok, "{report:?}");
    // Each producer's events are in the log in the order it appended them.
    let mut last_seen: std::collections::HashMap<String, u64> = Default::default();
    for stored in all_events(&journal) {
        let (session, i) = stored.envelope.event_id.rsplit_once('-').unwrap();
        let i: u64 = i.parse().unwrap();
        if let Some(before) = last_seen.insert(session.to_string(), i) {
            assert!(i > before, "{session}: {i} after {before}");
        }
    }
}

/// Large batches from 4 producers at once on a disk whose syncs on the syncer thread fail in the
/// way `fault` (a flag of the disk) turns on; asserts the syncer thread did sync. The journal,
/// its directory, and each producer's acknowledged count and error.
fn large_batches_with_syncer_fault(
    fault: fn(&FlakyDisk) -> &AtomicBool,
) -> (tempfile::TempDir, Journal, Vec<(u64, Option<Error>)>) {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    fault(&disk).store(true, Ordering::SeqCst);
    let syncer_syncs = Arc::clone(&disk.syncer_syncs);
    let journal = open_on(dir.path(), disk);
    let results = large_batches_at_once(&journal, 4, 8);
    assert!(
        syncer_syncs.load(Ordering::SeqCst) > 0,
        "the syncer never synced"
    );
    (dir, journal, results)
}

#[test]
fn a_failed_sync_on_the_syncer_thread_answers_nothing_it_covered_and_poisons() {
    let (dir, journal, results) = large_batches_with_syncer_fault(|disk| &disk.fail_in_syncer);
    let mut acknowledged = 0;
    for (n, error) in results {
        acknowledged += n;
        match error {
            Some(Error::Poisoned(cause)) => assert!(cause.contains("syncing"), "{cause}"),
            other => panic!("every producer stops at the failed sync: {other:?}"),
        }
    }
    // Producers stop at their first refusal; what was acknowledged before the failure stays.
    assert_poisoned_keeping(journal, dir.path(), acknowledged);
}

#[test]
fn a_panic_on_the_syncer_thread_poisons_instead_of_hanging() {
    let (dir, journal, results) = large_batches_with_syncer_fault(|disk| &disk.panic_in_syncer);
    let mut acknowledged = 0;
    for (n, error) in results {
        acknowledged += n;
        // Its group's callers are told the journal closed; everyone after, that it is poisoned.
        assert!(
            matches!(error, Some(Error::Poisoned(_)) | Some(Error::Closed)),
            "{error:?}"
        );
    }
    assert_poisoned_keeping(journal, dir.path(), acknowledged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_mode_acknowledges_before_sync_and_syncs_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    let syncs = Arc::clone(&disk.syncs);
    let options = Options {
        storage: disk,
        durability: Durability::Buffered {
            sync_interval: Duration::from_secs(3600),
        },
        ..Options::default()
    };
    let journal = Journal::open(dir.path(), options).unwrap();
    let before = syncs.load(Ordering::SeqCst);
    for i in 0..50 {
        journal.append(event(i, "s1")).await.unwrap();
    }
    assert_eq!(
        syncs.load(Ordering::SeqCst),
        before,
        "no sync on the append path in buffered mode"
    );
    journal.sync().await.unwrap();
    assert_eq!(syncs.load(Ordering::SeqCst), before + 1);
    drop(journal);
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    assert_eq!(journal.head().position, Position(50));
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _journal = Journal::open(dir.path(), Options::default()).unwrap();
    let err = Journal::open(dir.path(), Options::default()).unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err:?}");
}

#[test]
fn agent_runtime_fixtures_round_trip_through_the_journal() {
    let fixtures = testdata_dir().join("agentruntime/fixtures/lime-profile");
    let mut originals = Vec::new();
    for entry in std::fs::read_dir(&fixtures).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with("-event.json") {
            originals.push(
                serde_json::from_slice::<serde_json::Value>(&std::fs::read(&path).unwrap())
                    .unwrap(),
            );
        }
    }
    originals.sort_by_key(|v| v["eventId"].as_str().unwrap().to_string());
    assert_eq!(originals.len(), 5);
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let events = originals
        .iter()
        .map(|v| {
            journal_format::Envelope::from_json_value(v.clone(), &mut || unreachable!()).unwrap()
        })
        .collect();
    append(&journal, events);
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    for (stored, original) in all_events(&journal).iter().zip(&originals) {
        let mut json = stored.to_json_value();
        let object = json.as_object_mut().unwrap();
        for field in ["position", "recordedAt", "hash", "streamVersion"] {
            assert!(object.remove(field).is_some());
        }
        assert_eq!(
            &json, original,
            "the fixture comes back exactly as appended"
        );
    }
}
