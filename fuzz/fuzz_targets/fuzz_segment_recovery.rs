//! Arbitrary bytes as the only segment of a journal on the simulated disk: opening never
//! panics or hangs; it opens (reading and verifying then never panic) or refuses with an error.
#![no_main]

use std::sync::Arc;

use journal_engine::sim_disk::{Faults, SimDisk};
use journal_engine::storage::{OpenMode, Storage};
use journal_engine::{Journal, Options};
use journal_format::Position;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tmp = tempfile::tempdir().expect("tempdir");
    let disk = SimDisk::new(1, Faults::default());
    let seg_dir = tmp.path().join("segments");
    disk.create_dir_all(&seg_dir).expect("dir");
    let f = disk
        .open(&seg_dir.join("00000000000000000001.seg"), OpenMode::CreateNew)
        .expect("create");
    f.write_all_at(data, 0).expect("write");
    f.sync_data().expect("sync");
    disk.sync_dir(&seg_dir).expect("sync dir");
    let options = Options {
        storage: Arc::new(disk),
        ..Options::default()
    };
    if let Ok(journal) = Journal::open(tmp.path(), options) {
        let _ = journal.read(Position(1), None, true).count();
        let _ = journal.verify(&Default::default(), &mut |_, _| {});
    }
});
