//! The proptest counterpart of the `fuzz_segment_recovery` fuzz target: a valid journal's
//! segment bytes with random bit flips, truncations and garbage appended. Opening never panics
//! or hangs: it opens (cutting and reporting a torn tail) or refuses with `Corruption`; when it
//! opens, reading everything and `verify` never panic either.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use journal_engine::sim_disk::{Faults, SimDisk};
use journal_engine::storage::{OpenMode, Storage};
use journal_engine::{AppendOptions, Chain, Error, Journal, Options};
use journal_format::Position;
use proptest::prelude::*;

/// The segment files of a small valid journal (built once), by name.
fn valid_segments() -> &'static Vec<(String, Vec<u8>)> {
    static SEGMENTS: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    SEGMENTS.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let journal = Journal::open(tmp.path(), common::small_segments()).unwrap();
        for b in 0..12u64 {
            let events = (0..8)
                .map(|k| common::event(b * 8 + k, "s1"))
                .collect::<Vec<_>>();
            journal
                .append_batch_blocking(events, AppendOptions::default())
                .unwrap();
        }
        journal.close();
        common::segment_files(tmp.path())
            .into_iter()
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect()
    })
}

fn disk_with(dir: &Path, files: &[(String, Vec<u8>)]) -> SimDisk {
    let disk = SimDisk::new(1, Faults::default());
    let seg_dir: PathBuf = dir.join("segments");
    disk.create_dir_all(&seg_dir).unwrap();
    for (name, bytes) in files {
        let f = disk.open(&seg_dir.join(name), OpenMode::CreateNew).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_data().unwrap();
    }
    disk.sync_dir(&seg_dir).unwrap();
    disk
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn damaged_segments_never_panic_the_recovery(
        file_pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        garbage in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut files = valid_segments().clone();
        let i = file_pick.index(files.len());
        {
            let bytes = &mut files[i].1;
            for (at, x) in &flips {
                let at = at.index(bytes.len());
                bytes[at] ^= x;
            }
            if let Some(cut) = cut {
                let len = cut.index(bytes.len() + 1);
                bytes.truncate(len);
            }
            bytes.extend_from_slice(&garbage);
        }
        let tmp = tempfile::tempdir().unwrap();
        let disk = disk_with(tmp.path(), &files);
        let options = Options { storage: Arc::new(disk), ..common::small_segments() };
        match Journal::open(tmp.path(), options) {
            Ok(journal) => {
                let _ = journal.read(Position::FIRST, None, Chain::Verified).count();
                let _ = journal.verify(&Default::default(), &mut |_, _| {});
            }
            Err(Error::Corruption { .. }) | Err(Error::Index(_)) => {}
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }
}
