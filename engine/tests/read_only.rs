//! Read-only opening beside a writer: no lock taken, nothing written, appends refused, and the
//! reader follows what the writer appends (new frames and new segments) through `refresh` and
//! subscriptions.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use journal_engine::storage::{FsStorage, OpenMode, Storage, StorageFile, StorageLock};
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

/// The file system, except that the next length asked of a segment file is `stale` bytes more
/// than it is: the length a reader took just before the writer trimmed the file.
#[derive(Debug, Default)]
struct StaleLength {
    stale: Arc<AtomicU64>,
}

#[derive(Debug)]
struct StaleFile {
    file: Arc<dyn StorageFile>,
    stale: Arc<AtomicU64>,
}

impl StorageFile for StaleFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.len()? + self.stale.swap(0, Ordering::SeqCst))
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
}

impl Storage for StaleLength {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Arc<dyn StorageFile>> {
        let file = FsStorage.open(path, mode)?;
        if path.extension().is_some_and(|e| e == "seg") {
            return Ok(Arc::new(StaleFile {
                file,
                stale: Arc::clone(&self.stale),
            }));
        }
        Ok(file)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        FsStorage.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        FsStorage.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        FsStorage.sync_dir(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn StorageLock>> {
        FsStorage.lock(path)
    }
}

#[test]
fn a_reader_follows_a_writer_that_trims_its_tail_while_the_reader_looks() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Journal::open(dir.path(), Options::default()).unwrap();
    append(&writer, (0..30).map(|k| event(k, "s1")).collect());
    let storage = Arc::new(StaleLength::default());
    let stale = Arc::clone(&storage.stale);
    let reader = Journal::open(
        dir.path(),
        Options {
            read_only: true,
            storage,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(reader.head().position, Position(30));
    append(&writer, (30..40).map(|k| event(k, "s1")).collect());
    // Closing trims the zeros the writer laid ahead of its frames; the reader took the length
    // from before.
    writer.close();
    stale.store(1 << 20, Ordering::SeqCst);
    let head = reader
        .refresh()
        .expect("a shrunk tail is read again, not damage");
    assert_eq!(head.position, Position(40));
    assert_eq!(stale.load(Ordering::SeqCst), 0, "the stale length was used");
}
