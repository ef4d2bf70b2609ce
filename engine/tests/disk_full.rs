//! A real full disk: a journal on an 8 MiB tmpfs mounted by the test (the test runs as root, as
//! CI does). Appends fail with a clear error once the disk is full, nothing half-written is
//! visible after reopening, appends work again once space is freed, and `verify` passes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use journal_engine::{AppendOptions, Error, Journal, Options, VerifyOptions};
use journal_format::Position;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs {
    path: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("the `mount` command runs");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs and needs root (as CI has): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs {
            path,
            _parent: parent,
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

fn walk(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push((
                path.display().to_string(),
                std::fs::metadata(&path).unwrap().len(),
            ));
        }
    }
    out
}

fn verify_ok(journal: &Journal) {
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

#[test]
fn a_full_disk_fails_appends_clearly_and_loses_nothing_acknowledged() {
    // Freeing the ballast leaves room for the filler's zeros ahead of the tail (2 MiB) and for
    // the index's durable commits (redb grows its file in steps).
    let fs = Tmpfs::mount("8m");
    let ballast: &Path = &fs.path.join("ballast");
    std::fs::write(ballast, vec![7u8; 5 * 1024 * 1024]).unwrap();
    let dir = fs.path.join("journal");
    let journal = Journal::open(&dir, Options::default()).unwrap();
    let mut acked = Vec::new();
    let mut i = 0u64;
    let err = loop {
        let events: Vec<_> = (0..20).map(|k| event(i * 20 + k, "s1")).collect();
        i += 1;
        match journal.append_batch_blocking(events, AppendOptions::default()) {
            Ok(answers) => acked.extend(answers),
            Err(e) => break e,
        }
        assert!(i < 100_000, "the disk never filled");
    };
    assert!(
        acked.len() > 100,
        "some appends succeeded before the disk filled"
    );
    let message = err.to_string();
    // The log's write fails first, or the index's durable commit (at least once a second):
    // either way the error says why, and appends stay refused until the journal is reopened.
    assert!(
        matches!(err, Error::Poisoned(_) | Error::Index(_))
            && message.contains("No space left on device"),
        "a clear error: {message}"
    );
    let again = journal.append_batch_blocking(vec![event(999_999, "s1")], AppendOptions::default());
    assert!(
        matches!(again, Err(Error::Poisoned(_) | Error::Index(_))),
        "{again:?}"
    );
    drop(journal);

    // Free space; the journal reopens with every acknowledged event and nothing half-written.
    std::fs::remove_file(ballast).unwrap();
    let journal = Journal::open(&dir, Options::default()).unwrap_or_else(|e| {
        let sizes: Vec<_> = walk(&fs.path);
        panic!("reopen after freeing space: {e}; files: {sizes:?}")
    });
    let stored = all_events(&journal);
    assert!(stored.len() >= acked.len());
    for a in &acked {
        let e = &stored[a.position.0 as usize - 1];
        assert_eq!(
            (e.envelope.event_id.as_str(), e.hash),
            (&*a.event_id, a.hash)
        );
    }
    verify_ok(&journal);
    let more = append(&journal, vec![event(1_000_000, "s1")]);
    assert_eq!(
        more[0].position,
        Position(stored.len() as u64 + 1),
        "appends work again"
    );
    verify_ok(&journal);
}
