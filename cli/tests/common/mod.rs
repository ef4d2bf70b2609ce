//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The `journal` binary, pointed at `dir`.
pub fn journal(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_journal"));
    cmd.arg("--dir").arg(dir);
    cmd
}

/// A command's standard output, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's standard error, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The standard output of a command that must have exited 0 (else fails, showing both
/// outputs).
pub fn ok(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// Runs `cmd` with `stdin` as its standard input; its output.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Every file under `dir` (by path relative to it) and its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Asserts two directory snapshots are byte-for-byte equal, naming the first file that differs;
/// `what` says which input was refused.
pub fn assert_same(
    after: &BTreeMap<String, Vec<u8>>,
    before: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "{what}: the same files"
    );
    for (name, bytes) in after {
        assert!(
            bytes == &before[name],
            "{what}: {name} changed: the journal must be byte-for-byte unchanged"
        );
    }
}
