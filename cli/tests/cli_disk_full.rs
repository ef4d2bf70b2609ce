//! Reading commands on a full disk: they need to write nothing, so they answer, and they leave
//! nothing behind. The journal lives on a small tmpfs the test mounts (it needs root, as CI has).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{journal, snapshot};

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

/// Fills the file system at `dir` until a write fails with ENOSPC.
fn fill(dir: &Path) {
    let ballast = dir.join("ballast");
    let mut n = 0;
    loop {
        let chunk = vec![7u8; 64 * 1024];
        let path = ballast.with_extension(n.to_string());
        if std::fs::write(&path, &chunk).is_err() {
            // What did fit of the last chunk stays: the disk is full to the byte.
            break;
        }
        n += 1;
        assert!(n < 10_000, "the disk never filled");
    }
}

#[test]
fn reading_commands_answer_on_a_full_disk_and_leave_nothing_behind() {
    let fs = Tmpfs::mount("8m");
    let dir = fs.path.join("journal");
    let events: Vec<String> = (0..200)
        .map(|i| {
            format!(
                r#"{{"type":"tool.started","eventId":"e{i}","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1","toolCallId":"c{i}"}}"#
            )
        })
        .collect();
    let input = fs.path.join("events.jsonl");
    std::fs::write(&input, events.join("\n")).unwrap();
    let out = journal(&dir).arg("append").arg(&input).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&input).unwrap();
    // The index (redb) and the read models exist, as they would after use.
    let out = journal(&dir)
        .args(["get", "session", "s1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A new segment is needed at the next open for writing: seal the journal's last one by
    // making the disk full now.
    fill(&fs.path);
    let before = snapshot(&dir);
    for args in [
        vec!["read", "--limit", "3"],
        vec!["verify"],
        vec!["status"],
        vec!["digest"],
        vec!["tail", "-n", "2"],
        vec!["get", "session", "s1"],
    ] {
        let out = journal(&dir).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?} on a full disk: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "{args:?} answered");
    }
    let after = snapshot(&dir);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "no file was left behind (an empty quarantine copy, a temporary HEAD) or taken away"
    );
    // The log, its evidence and quarantine are as they were (redb may touch its own headers).
    for (name, bytes) in &before {
        if name.starts_with("segments/") || name.starts_with("quarantine/") || name == "HEAD" {
            assert_eq!(Some(bytes), after.get(name), "{name} changed");
        }
    }
}
