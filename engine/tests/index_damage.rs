//! A damaged index never makes the journal panic: the index and the read models are derived,
//! so damage to them is reported and rebuilt from the log, never trusted.

mod common;

use common::*;
use journal_engine::{Filter, Journal, Options, VerifyOptions};
use journal_format::Position;

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn build(dir: &std::path::Path) -> u64 {
    let journal = Journal::open(dir, Options::default()).unwrap();
    let mut n = 0;
    for batch in 0..40u64 {
        let events = (0..50)
            .map(|k| event(batch * 50 + k, &format!("s{}", k % 7)))
            .collect();
        n += append(&journal, events).len() as u64;
    }
    journal.close();
    n
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Everything a reading command does with an open journal: status, verify, reads through the
/// index, a query.
/// Returns whether open found the index unusable and rebuilt it.
fn exercise(dir: &std::path::Path, events: u64) -> Result<bool, String> {
    let journal = Journal::open(dir, Options::default()).map_err(|e| e.to_string())?;
    let rebuilt_at_open = journal.recovery_report().actions.iter().any(|a| {
        matches!(a, journal_engine::RecoveryAction::IndexRebuilt { reason } if reason.contains("could not be used"))
    });
    let _ = journal.status();
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    let _ = journal.get(&format!("evt-{}", events / 2));
    let _ = journal.stream_version("s3");
    if let Ok(query) = journal.query(Filter {
        session: Some("s3".into()),
        ..Filter::default()
    }) {
        let _ = query.count();
    }
    if !report.ok {
        return Err(format!("{:?}", report.problems));
    }
    assert_eq!(journal.head().position, Position(events));
    Ok(rebuilt_at_open)
}

#[test]
fn random_damage_to_the_index_never_panics_and_is_rebuilt_or_reported() {
    let base = tempfile::tempdir().unwrap();
    let events = build(base.path());
    let seeds: u64 = std::env::var("INDEX_DAMAGE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let mut panics = Vec::new();
    let mut rebuilt = 0;
    // The index's pages depend on how the indexer gathered its applies, so which seeds stop
    // redb varies from run to run: past `seeds`, go on until one has (at most four times as
    // many), so that the rebuild path is always exercised.
    for seed in 1..=seeds * 4 {
        if seed > seeds && rebuilt > 0 {
            break;
        }
        let dir = tempfile::tempdir().unwrap();
        copy_dir(base.path(), dir.path());
        let index = dir.path().join("index.redb");
        let mut bytes = std::fs::read(&index).unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // Damage one to four pages: random bytes over a random stretch of each.
        for _ in 0..1 + rng.next() % 4 {
            let page = (rng.next() as usize % (bytes.len() / 4096).max(1)) * 4096;
            let at = page + rng.next() as usize % 4000;
            for b in bytes.iter_mut().skip(at).take(1 + rng.next() as usize % 96) {
                *b = rng.next() as u8;
            }
        }
        std::fs::write(&index, &bytes).unwrap();
        let path = dir.path().to_path_buf();
        let outcome = std::panic::catch_unwind(|| exercise(&path, events));
        match outcome {
            Err(_) => panics.push(seed),
            Ok(Err(e)) => eprintln!("seed {seed}: reported: {e}"),
            Ok(Ok(rebuilt_at_open)) => rebuilt += u32::from(rebuilt_at_open),
        }
        // Damage that stopped redb left its marker: the next open rebuilds the index from the
        // log, and everything checks.
        if dir.path().join("index.damaged").exists() {
            rebuilt += 1;
            let journal = Journal::open(dir.path(), Options::default()).unwrap();
            assert!(
                journal.recovery_report().actions.iter().any(|a| matches!(
                    a,
                    journal_engine::RecoveryAction::IndexRebuilt { reason } if reason.contains("damaged")
                )),
                "seed {seed}: {:?}",
                journal.recovery_report()
            );
            let report = journal
                .verify(&VerifyOptions::default(), &mut |_, _| {})
                .unwrap();
            assert!(report.ok, "seed {seed}: {:?}", report.problems);
            assert!(!dir.path().join("index.damaged").exists());
        }
    }
    assert!(
        panics.is_empty(),
        "damage to index.redb panicked for seeds {panics:?}"
    );
    eprintln!("{seeds} seeds: {rebuilt} rebuilt after redb stopped on damage");
    assert!(rebuilt > 0, "no seed damaged the index enough to stop redb");
}
