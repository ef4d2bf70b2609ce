//! Archiving old segments through the real journal: sealed segments moved to an archive
//! directory, reads, replay, proofs and `verify` across the boundary with the archive attached
//! and detached, tampering with archived files detected, restore, the retention policies, an
//! encrypted journal archived then redacted, and a crash at every step of an archive and a
//! restore on the simulated disk.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{append, event, small_segments};
use journal_engine::archive::{self, Retention};
use journal_engine::sim_disk::{Faults, SimDisk};
use journal_engine::storage::{OpenMode, Storage, StorageFile, StorageLock};
use journal_engine::{
    ArchiveRequest, Chain, Encryption, Error, Journal, MasterKey, Options, Redaction, Subject,
    VerifyOptions,
};
use journal_format::merkle::{leaf_hash, verify_inclusion, TreeHash};
use journal_format::{Envelope, Position, StoredEvent};

/// Events enough to fill several 64 KiB segments.
const EVENTS: u64 = 1_200;

fn fill(journal: &Journal, session: &str, n: u64) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        append(journal, chunk.iter().map(|i| event(*i, session)).collect());
    }
}

fn attached(archive: &Path) -> Options {
    Options {
        archive: Some(archive.to_path_buf()),
        ..small_segments()
    }
}

fn before(position: u64, to: &Path) -> ArchiveRequest {
    ArchiveRequest {
        retention: Retention::Before(Position(position)),
        to: to.to_path_buf(),
        dry_run: false,
    }
}

fn read_from(journal: &Journal, from: u64) -> Result<Vec<StoredEvent>, Error> {
    journal
        .read(Position(from), None, Chain::Verified)
        .collect()
}

fn verify(journal: &Journal) -> journal_engine::VerifyReport {
    journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .expect("verify runs")
}

/// A journal of `EVENTS` events with the segments before position 700 archived to `archive`.
fn archived_journal(dir: &Path, archive: &Path) -> (Vec<StoredEvent>, u64) {
    let journal = Journal::open(dir, small_segments()).expect("open");
    fill(&journal, "s1", EVENTS);
    let all = read_from(&journal, 1).expect("read all");
    let outcome = journal.archive(&before(700, archive)).expect("archive");
    assert!(outcome.segments.len() >= 2, "{outcome:?}");
    assert!(outcome.last_archived < 700 && outcome.first_live == outcome.last_archived + 1);
    journal.close();
    (all, outcome.last_archived)
}

#[test]
fn archived_positions_read_with_the_archive_attached_and_say_where_they_are_without_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let (all, last) = archived_journal(&dir, &archive);
    assert!(dir.join(archive::MANIFEST_FILE).exists());

    // Detached: the live log reads from the boundary on, and before it the error names where.
    let journal = Journal::open(&dir, small_segments()).expect("open detached");
    let err = read_from(&journal, 1).expect_err("position 1 is archived");
    assert!(matches!(err, Error::Archived { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("1..={last}")) && text.contains("archive"),
        "{text}"
    );
    let live = read_from(&journal, last + 1).expect("live part");
    assert_eq!(live, all[last as usize..]);
    let archived_id = all[0].envelope.event_id.clone();
    assert!(matches!(
        journal.get(&archived_id),
        Err(Error::Archived { .. })
    ));
    // Appends go on after the boundary; the chain continues.
    fill(&journal, "s2", 50);
    let report = verify(&journal);
    assert!(report.ok, "{:?}", report.problems);
    let check = report.archive.expect("the report says what is archived");
    assert!(
        !check.attached && check.verified_from == last + 1,
        "{check:?}"
    );
    assert!(check.note.contains("not checked"), "{}", check.note);
    // A digest kept of an archived position cannot be checked detached, and says so.
    let digest = VerifyOptions {
        digest: Some((Position(3), all[2].hash)),
        ..VerifyOptions::default()
    };
    let report = journal.verify(&digest, &mut |_, _| {}).expect("verify");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].kind, "digest_archived");
    // A digest of a live position has its tree root checked on the stored hashes of the
    // archived leaves.
    let head = journal.head();
    let kept = |root| VerifyOptions {
        digest: Some((head.position, head.hash)),
        digest_root: Some(root),
        ..VerifyOptions::default()
    };
    let root = journal.tree_root(head.position.0).expect("root");
    let report = journal.verify(&kept(root), &mut |_, _| {}).expect("verify");
    assert!(report.ok, "{:?}", report.problems);
    let report = journal
        .verify(&kept(TreeHash([7; 32])), &mut |_, _| {})
        .expect("verify");
    assert!(
        report.problems.iter().any(|p| p.kind == "digest_mismatch"),
        "{:?}",
        report.problems
    );
    // Proofs of archived positions come from the tree's level files.
    let size = journal.head().position.0;
    let proof = journal.inclusion_proof(Position(3), size).expect("proof");
    let root = journal.tree_root(size).expect("root");
    assert!(matches!(
        journal.stored_body(Position(3)),
        Err(Error::Archived { .. })
    ));
    journal.close();

    // Attached: every position reads, the chain verified across the boundary.
    let journal = Journal::open(&dir, attached(&archive)).expect("open attached");
    let again = read_from(&journal, 1).expect("read all attached");
    assert_eq!(again[..all.len()], all[..]);
    assert_eq!(
        journal.get(&archived_id).expect("get").expect("found"),
        all[0]
    );
    let body = journal.stored_body(Position(3)).expect("archived body");
    assert!(verify_inclusion(&leaf_hash(&body), 2, size, &proof, &root).is_ok());
    let report = verify(&journal);
    assert!(report.ok, "{:?}", report.problems);
    let check = report.archive.expect("archive section");
    assert!(check.attached && check.verified_from == 1, "{check:?}");
    let digest = VerifyOptions {
        digest: Some((Position(3), all[2].hash)),
        ..VerifyOptions::default()
    };
    assert!(journal.verify(&digest, &mut |_, _| {}).expect("verify").ok);
    journal.close();
}

#[test]
fn an_archive_inside_the_journal_is_refused_and_one_a_crash_lost_is_rolled_back_at_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let journal = Journal::open(&dir, small_segments()).expect("open");
    fill(&journal, "s1", EVENTS);
    let all = read_from(&journal, 1).expect("read all");
    let err = journal
        .archive(&before(700, &dir.join("segments")))
        .expect_err("inside the journal");
    assert!(
        matches!(err, Error::InvalidInput(_)) && err.to_string().contains("inside the journal"),
        "{err}"
    );
    let outcome = journal.archive(&before(700, &archive)).expect("archive");
    journal.close();
    // As a crash after the manifest step can leave it when the archive directory's own entry
    // was not durable: the live copies still there, the archived ones gone.
    for moved in &outcome.segments {
        std::fs::copy(
            archive.join(&moved.segment),
            dir.join("segments").join(&moved.segment),
        )
        .expect("live copy");
    }
    std::fs::remove_dir_all(&archive).expect("archive lost");
    let journal = Journal::open(&dir, small_segments()).expect("open rolls back");
    let actions = format!("{:?}", journal.recovery_report().actions);
    assert!(actions.contains("ArchiveRolledBack"), "{actions}");
    assert_eq!(read_from(&journal, 1).expect("every event live"), all);
    assert!(verify(&journal).ok);
}

#[test]
fn a_rebuilt_index_needs_the_archive_and_works_with_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let (all, _) = archived_journal(&dir, &archive);
    std::fs::remove_file(dir.join("index.redb")).expect("index removed");
    let err = Journal::open(&dir, small_segments()).expect_err("refused without the archive");
    assert!(matches!(err, Error::Archived { .. }), "{err}");
    let journal = Journal::open(&dir, attached(&archive)).expect("rebuilt with the archive");
    let id = &all[5].envelope.event_id;
    assert_eq!(
        journal.get(id).expect("get").expect("found").position,
        Position(6)
    );
    assert!(verify(&journal).ok);
}

#[test]
fn tampered_archives_are_found_naming_the_segment_and_position() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    archived_journal(&dir, &archive);
    let manifest =
        archive::manifest::read(&journal_engine::storage::FsStorage, &dir).expect("manifest");
    let first = &manifest.segments[0];
    let second = &manifest.segments[1];
    let file = archive.join(first.segment.file_name());

    // A flipped byte in a frame: the hash and the frame's checksum both say so.
    common::flip_byte(&file, 200);
    let journal = Journal::open(&dir, attached(&archive)).expect("open");
    let report = verify(&journal);
    assert!(!report.ok);
    let mismatch = report
        .problems
        .iter()
        .find(|p| p.kind == "archive_mismatch")
        .expect("hash mismatch reported");
    assert_eq!(
        mismatch.segment.as_deref(),
        Some(first.segment.file_name().as_str())
    );
    assert_eq!(mismatch.position, Some(1));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "frame" || p.kind == "chain"),
        "{:?}",
        report.problems
    );
    journal.close();
    common::flip_byte(&file, 200);

    // A swapped file: the header names another segment.
    let other = archive.join(second.segment.file_name());
    let saved = std::fs::read(&file).expect("read");
    std::fs::copy(&other, &file).expect("swap");
    let err = Journal::open(&dir, attached(&archive)).expect_err("a swapped file is refused");
    assert!(err.is_corruption(), "{err}");
    assert!(
        err.to_string().contains(&first.segment.file_name())
            || err
                .to_string()
                .contains(&format!("segment {}", first.segment)),
        "{err}"
    );
    std::fs::write(&file, saved).expect("put back");

    // A removed file: named, with its positions.
    std::fs::remove_file(&other).expect("remove");
    let err = Journal::open(&dir, attached(&archive)).expect_err("a missing file is refused");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}..={}", second.first, second.last)),
        "{text}"
    );
}

#[test]
fn restore_brings_segments_back_checking_their_hashes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let (all, last) = archived_journal(&dir, &archive);
    let journal = Journal::open(&dir, small_segments()).expect("open");
    let manifest =
        archive::manifest::read(&journal_engine::storage::FsStorage, &dir).expect("manifest");
    let newest = manifest.segments.last().expect("one").clone();

    // A damaged file is refused before anything moves.
    let file = archive.join(newest.segment.file_name());
    common::flip_byte(&file, 300);
    let err = journal
        .restore(&archive, Some(newest.first))
        .expect_err("refused");
    assert!(err.is_corruption(), "{err}");
    common::flip_byte(&file, 300);

    // The newest archived segment back: the boundary moves down.
    let outcome = journal
        .restore(&archive, Some(newest.first))
        .expect("restore one");
    assert_eq!(outcome.segments.len(), 1);
    assert_eq!(outcome.last_archived, newest.first.0 - 1);
    assert_eq!(
        read_from(&journal, newest.first.0).expect("read")[..],
        all[newest.first.0 as usize - 1..]
    );
    assert!(matches!(
        read_from(&journal, 1),
        Err(Error::Archived { .. })
    ));
    // Then the rest: nothing is archived.
    journal.restore(&archive, None).expect("restore all");
    assert_eq!(
        read_from(&journal, 1).expect("read all")[..all.len()],
        all[..]
    );
    let report = verify(&journal);
    assert!(report.ok && report.archive.is_none(), "{report:?}");
    journal.close();
    let journal = Journal::open(&dir, small_segments()).expect("reopen");
    assert_eq!(read_from(&journal, 1).expect("read").len(), all.len());
    assert!(last > 0);
}

#[test]
fn retention_by_age_and_size_and_a_dry_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let clock = common::step_clock();
    let options = Options {
        clock: clock.clone(),
        ..small_segments()
    };
    let journal = Journal::open(&dir, options).expect("open");
    fill(&journal, "s1", EVENTS);
    let segments = common::segment_files(&dir).len();
    let dry = journal
        .archive(&ArchiveRequest {
            retention: Retention::KeepSize(200 * 1024),
            to: archive.clone(),
            dry_run: true,
        })
        .expect("plan");
    assert!(dry.dry_run && !dry.segments.is_empty());
    assert_eq!(
        common::segment_files(&dir).len(),
        segments,
        "a dry run moves nothing"
    );
    assert!(!dir.join(archive::MANIFEST_FILE).exists());

    let sized = journal
        .archive(&ArchiveRequest {
            retention: Retention::KeepSize(200 * 1024),
            to: archive.clone(),
            dry_run: false,
        })
        .expect("by size");
    assert_eq!(sized.segments, dry.segments);
    let live: u64 = common::segment_files(&dir)
        .iter()
        .map(|f| std::fs::metadata(f).expect("meta").len())
        .sum();
    assert!(live <= 200 * 1024, "live log is {live} bytes");

    // By age: every event was recorded a millisecond apart; one hour from now they are all
    // older than 30 minutes, but the segment holding the head stays.
    clock
        .0
        .fetch_add(3_600_000_000_000, std::sync::atomic::Ordering::SeqCst);
    let aged = journal
        .archive(&ArchiveRequest {
            retention: Retention::OlderThan(std::time::Duration::from_secs(1_800)),
            to: archive.clone(),
            dry_run: false,
        })
        .expect("by age");
    assert!(!aged.segments.is_empty());
    let head = journal.head().position;
    assert!(aged.last_archived < head.0);
    assert_eq!(
        read_from(&journal, aged.first_live)
            .expect("live")
            .last()
            .map(|e| e.position),
        Some(head)
    );
    // Nothing younger than a day: nothing moves.
    let none = journal
        .archive(&ArchiveRequest {
            retention: Retention::OlderThan(std::time::Duration::from_secs(86_400)),
            to: archive.clone(),
            dry_run: false,
        })
        .expect("nothing");
    assert!(none.segments.is_empty());
}

#[test]
fn an_encrypted_journal_archives_ciphertext_and_redacts_archived_events() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let master = MasterKey::generate(&journal_engine::seams::SystemEntropy);
    let options = |archive: Option<PathBuf>| Options {
        encryption: Some(Encryption {
            master: master.clone(),
            subject: Subject::Session,
        }),
        archive,
        ..small_segments()
    };
    let journal = Journal::open(&dir, options(None)).expect("open");
    let secret = "hunter2-archived-secret";
    let mut old: Vec<Envelope> = (0..400).map(|i| event(i, "old")).collect();
    for e in &mut old {
        e.payload = Some(serde_json::json!({"toolName": "bash", "output": secret}));
    }
    for chunk in old.chunks(40) {
        append(&journal, chunk.to_vec());
    }
    for chunk in (0..800).collect::<Vec<u64>>().chunks(40) {
        append(&journal, chunk.iter().map(|i| event(*i, "new")).collect());
    }
    let outcome = journal.archive(&before(400, &archive)).expect("archive");
    assert!(!outcome.segments.is_empty());
    journal.close();
    for entry in std::fs::read_dir(&archive).expect("archive dir") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "archived segments hold content only encrypted"
        );
    }
    let journal = Journal::open(&dir, options(Some(archive.clone()))).expect("attached");
    let first = read_from(&journal, 1).expect("read")[0].clone();
    assert_eq!(
        first
            .envelope
            .payload
            .as_ref()
            .and_then(|p| p.get("output"))
            .and_then(|o| o.as_str()),
        Some(secret)
    );
    journal
        .redact(
            &Redaction::Session("old".into()),
            "auditor",
            Some("erasure request"),
        )
        .expect("redact archived events");
    let first = read_from(&journal, 1).expect("read")[0].clone();
    assert_ne!(
        first
            .envelope
            .payload
            .as_ref()
            .and_then(|p| p.get("output"))
            .and_then(|o| o.as_str()),
        Some(secret)
    );
    assert!(verify(&journal).ok);
}

/// A storage that forwards to a simulated disk and fails every change after the first
/// `budget` (a crash there: nothing after it reaches the disk).
#[derive(Debug)]
struct FailAfter {
    disk: SimDisk,
    budget: std::sync::atomic::AtomicI64,
}

impl FailAfter {
    fn spend(&self) -> std::io::Result<()> {
        if self
            .budget
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            <= 0
        {
            return Err(std::io::Error::other("crash injected"));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FailAfterFile {
    file: Arc<dyn StorageFile>,
    owner: Arc<FailAfter>,
}

impl StorageFile for FailAfterFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.owner.spend()?;
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.owner.spend()?;
        self.file.sync_data()
    }
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.owner.spend()?;
        self.file.set_len(len)
    }
}

#[derive(Debug, Clone)]
struct Crashing(Arc<FailAfter>);

impl Storage for Crashing {
    fn open(&self, path: &Path, mode: OpenMode) -> std::io::Result<Arc<dyn StorageFile>> {
        if mode == OpenMode::CreateNew {
            self.0.spend()?;
        }
        let file = self.0.disk.open(path, mode)?;
        Ok(Arc::new(FailAfterFile {
            file,
            owner: Arc::clone(&self.0),
        }))
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.0.disk.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.0.disk.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.disk.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.spend()?;
        self.0.disk.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.0.spend()?;
        self.0.disk.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        self.0.spend()?;
        self.0.disk.sync_dir(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn StorageLock>> {
        self.0.disk.lock(path)
    }
}

fn sim_options(storage: Arc<dyn Storage>, archive: Option<&Path>) -> Options {
    Options {
        storage,
        preallocate: false,
        archive: archive.map(Path::to_path_buf),
        ..small_segments()
    }
}

/// Every event, read with the archive attached, and what the manifest lists.
fn survivors(disk: &SimDisk, dir: &Path, archive: &Path) -> Vec<StoredEvent> {
    let journal = Journal::open(dir, sim_options(Arc::new(disk.clone()), Some(archive)))
        .expect("a crashed archive or restore leaves a journal that opens");
    let events = read_from(&journal, 1).expect("every event live or archived");
    let names = disk.list_dir(&dir.join("segments")).expect("segments");
    assert!(names.iter().all(|n| n.ends_with(".seg")), "left: {names:?}");
    let report = verify(&journal);
    assert!(report.ok, "{:?}", report.problems);
    journal.close();
    // Detached too: what is live opens and verifies from the boundary.
    let journal = Journal::open(dir, sim_options(Arc::new(disk.clone()), None)).expect("detached");
    assert!(verify(&journal).ok);
    journal.close();
    events
}

#[test]
fn a_crash_at_each_step_of_an_archive_or_a_restore_loses_nothing() {
    let index_dir = tempfile::tempdir().expect("tmp");
    let dir = index_dir.path().join("j");
    let archive = index_dir.path().join("archive");
    for restore in [false, true] {
        let mut step = 0;
        loop {
            let disk = SimDisk::new(7 + step, Faults::default());
            std::fs::create_dir_all(&dir).expect("the index's directory");
            let journal =
                Journal::open(&dir, sim_options(Arc::new(disk.clone()), None)).expect("open");
            fill(&journal, "s1", 600);
            let all = read_from(&journal, 1).expect("read");
            if restore {
                journal.archive(&before(500, &archive)).expect("archive");
            }
            journal.close();
            let crashing = Arc::new(FailAfter {
                disk: disk.clone(),
                budget: std::sync::atomic::AtomicI64::new(i64::MAX),
            });
            let storage: Arc<dyn Storage> = Arc::new(Crashing(Arc::clone(&crashing)));
            let journal = Journal::open(&dir, sim_options(storage, None)).expect("reopen");
            crashing
                .budget
                .store(step as i64, std::sync::atomic::Ordering::SeqCst);
            let done = match restore {
                false => journal.archive(&before(500, &archive)).is_ok(),
                true => journal.restore(&archive, None).is_ok(),
            };
            drop(journal);
            let after = disk.crash();
            let events = survivors(&after, &dir, &archive);
            assert_eq!(events, all, "restore {restore}, crash after {step} changes");
            let _ = std::fs::remove_dir_all(&dir);
            if done {
                assert!(step > 3, "the steps were exercised");
                break;
            }
            step += 1;
        }
    }
}

#[test]
fn evidence_at_the_boundary_is_held_against_the_manifest_and_read_only_opens_both_ways() {
    use journal_format::head_record::HeadRecord;
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir, archive) = (tmp.path().join("j"), tmp.path().join("archive"));
    let (all, last) = archived_journal(&dir, &archive);
    let manifest =
        archive::manifest::read(&journal_engine::storage::FsStorage, &dir).expect("manifest");
    let (_, _, link) = manifest.boundary().expect("a boundary");
    // `HEAD` recording the last archived position (as after a seal): the manifest's link agrees.
    let (bytes, _) = HeadRecord::new_file(Position(last), link, 0);
    std::fs::write(dir.join("HEAD"), bytes).expect("HEAD");
    let journal = Journal::open(&dir, small_segments()).expect("opens detached");
    journal.close();
    // Another link there is rewritten history.
    let (bytes, _) = HeadRecord::new_file(Position(last), journal_format::ChainHash([7; 32]), 0);
    std::fs::write(dir.join("HEAD"), bytes).expect("HEAD");
    let err = Journal::open(&dir, small_segments()).expect_err("refused");
    assert!(matches!(err, Error::HistoryMismatch { .. }), "{err}");
    let (bytes, _) = HeadRecord::new_file(Position(last), link, 0);
    std::fs::write(dir.join("HEAD"), bytes).expect("HEAD");
    // Read-only, beside nothing: detached from the boundary, attached from position 1.
    let read_only = |archive: Option<PathBuf>| Options {
        read_only: true,
        archive,
        ..small_segments()
    };
    let journal = Journal::open(&dir, read_only(None)).expect("read-only detached");
    assert!(matches!(
        read_from(&journal, 1),
        Err(Error::Archived { .. })
    ));
    assert_eq!(
        read_from(&journal, last + 1).expect("live").len(),
        all.len() - last as usize
    );
    drop(journal);
    let journal = Journal::open(&dir, read_only(Some(archive))).expect("read-only attached");
    assert_eq!(read_from(&journal, 1).expect("all"), all);
}
