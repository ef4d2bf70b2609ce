//! `--dir` that holds no journal: only the commands that write create one; every other command
//! refuses the directory by name (exit 1) and creates nothing.

use std::path::Path;

mod common;
use common::{journal, snapshot};

/// Every path under `dir`, directories too, and each file's bytes.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = snapshot(dir).into_iter().collect();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push((path.display().to_string(), Vec::new()));
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The commands that only read, with their arguments.
const READERS: &[&[&str]] = &[
    &["read"],
    &["tail"],
    &["tail", "-f"],
    &["verify"],
    &["digest"],
    &["status"],
    &["get", "session", "S"],
    &["get", "history", "S"],
    &["rebuild"],
    &["rebuild", "--verify"],
    &["replay", "session", "S"],
    &["export"],
    &["export", "evidence", "--session", "S", "--out", "pack-out"],
    &[
        "blob",
        "get",
        "blake3:0000000000000000000000000000000000000000000000000000000000000000",
    ],
];

fn assert_refused(dir: &Path, args: &[&str]) {
    let out = journal(dir)
        .args(args)
        .current_dir(dir.parent().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: exit code; {stderr}");
    assert!(
        stderr.contains(&dir.display().to_string()) && stderr.contains("no journal"),
        "{args:?}: the error names the directory: {stderr}"
    );
}

#[test]
fn reading_commands_refuse_a_directory_without_a_journal_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("typo");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), "not a journal").unwrap();
    let before = tree(tmp.path());
    for args in READERS {
        assert_refused(&typo, args);
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
        assert_refused(&empty, args);
        assert_eq!(
            tree(tmp.path()),
            before,
            "{args:?} changed {}",
            tmp.path().display()
        );
    }
}

#[test]
fn writing_commands_still_create_a_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new");
    let out = common::output_with_stdin(
        journal(&dir).arg("append"),
        r#"{"type":"session.created","eventId":"e1","timestamp":"2026-05-11T10:00:00Z","sessionId":"S"}"#,
    );
    assert!(out.status.success(), "{out:?}");
    let out = journal(&dir).arg("verify").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let blob = tmp.path().join("blob.txt");
    std::fs::write(&blob, "bytes").unwrap();
    let other = tmp.path().join("other");
    let out = journal(&other)
        .args(["blob", "put"])
        .arg(&blob)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(other.join("segments").is_dir());
}
