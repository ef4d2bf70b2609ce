//! Durability rules: a failed sync poisons the writer until reopen; buffered mode acknowledges
//! before syncing and syncs on request; closing and reopening keeps every acknowledged event.

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

/// The real file system, except that `sync_data` fails with EIO while `fail` is set, and syncs
/// are counted.
#[derive(Debug, Default)]
struct FlakyDisk {
    fail: Arc<AtomicBool>,
    syncs: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct FlakyFile {
    inner: Arc<dyn StorageFile>,
    fail: Arc<AtomicBool>,
    syncs: Arc<AtomicUsize>,
}

impl StorageFile for FlakyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Storage for FlakyDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(FlakyFile {
            inner: FsStorage.open(path, mode)?,
            fail: Arc::clone(&self.fail),
            syncs: Arc::clone(&self.syncs),
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

#[test]
fn a_failed_sync_poisons_the_writer_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(FlakyDisk::default());
    let fail = Arc::clone(&disk.fail);
    let journal = Journal::open(
        dir.path(),
        Options {
            storage: disk,
            ..Options::default()
        },
    )
    .unwrap();
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
        Position(1),
        "the failed append was never acknowledged"
    );
    journal.close();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    // The unsynced bytes may or may not be on disk; either way the log is a valid prefix.
    assert!(journal.head().position >= Position(1));
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
    let journal = Journal::open(
        dir.path(),
        Options {
            storage: disk,
            ..Options::default()
        },
    )
    .unwrap();
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
    let fixtures = shared_dir().join("spec/agentruntime/fixtures/lime-profile");
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
