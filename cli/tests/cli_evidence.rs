//! The command line never says `ok` after losing history: a log cut back, or rewritten with a
//! consistent chain, refuses every command with exit 3 naming the positions, until `--salvage`
//! accepts what holds together (and records that it did).

mod common;

use std::path::Path;

use common::journal;

fn append_events(dir: &Path, tmp: &Path, from: u64, to: u64) {
    let lines: Vec<String> = (from..=to)
        .map(|i| {
            format!(
                r#"{{"type":"tool.started","eventId":"e{i}","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1","toolCallId":"c{i}"}}"#
            )
        })
        .collect();
    // One batch per event, so that a cut can fall on a batch boundary.
    for line in lines {
        let file = tmp.join("one.jsonl");
        std::fs::write(&file, line).unwrap();
        let out = journal(dir).arg("append").arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The byte offset where the frame of `position` starts in the first segment.
fn frame_offset(segment: &Path, position: u64) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    let mut at = journal_format::SEGMENT_HEADER_LEN;
    loop {
        let header = journal_format::FrameHeader::decode(&bytes[at..]).unwrap();
        if header.meta.position.0 == position {
            return at as u64;
        }
        at += header.frame_len() as usize;
    }
}

#[test]
fn a_log_cut_at_a_batch_boundary_is_refused_with_exit_3_until_salvage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    append_events(&dir, tmp.path(), 1, 20);
    let segment = dir.join("segments/00000000000000000001.seg");
    let cut = frame_offset(&segment, 15);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(cut)
        .unwrap();
    for args in [vec!["verify"], vec!["read"], vec!["status"]] {
        let out = journal(&dir).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains("positions 15..=20 are missing"),
            "{args:?}: {stderr}"
        );
    }
    // An append is refused too: no lost position is reused.
    let file = tmp.path().join("more.jsonl");
    std::fs::write(
        &file,
        r#"{"type":"tool.started","eventId":"x1","timestamp":"2026-05-11T10:00:00Z","sessionId":"s1"}"#,
    )
    .unwrap();
    let out = journal(&dir).arg("append").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    // Salvage accepts the shorter log and says so; then the journal is ordinary again.
    let out = journal(&dir)
        .args(["--salvage", "verify"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("history_accepted"), "{stderr}");
    assert!(dir.join("quarantine/salvage.json").exists());
    let out = journal(&dir).arg("verify").output().unwrap();
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["events"], 14);
}

#[test]
fn a_log_rechained_consistently_is_refused_with_exit_3_and_salvage_proceeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    append_events(&dir, tmp.path(), 1, 12);
    // Rewrite every frame from position 5 on with a changed body and a recomputed chain: every
    // checksum and link holds, only the evidence (HEAD, the index's head) says otherwise.
    let segment = dir.join("segments/00000000000000000001.seg");
    let bytes = std::fs::read(&segment).unwrap();
    let start = frame_offset(&segment, 5) as usize;
    let mut out = bytes[..start].to_vec();
    let mut at = start;
    let mut prev = {
        let before = frame_offset(&segment, 4) as usize;
        journal_format::FrameHeader::decode(&bytes[before..])
            .unwrap()
            .hash
    };
    while at < bytes.len() {
        let header = journal_format::FrameHeader::decode(&bytes[at..]).unwrap();
        let body_at = at + journal_format::FRAME_HEADER_LEN;
        let mut body = bytes[body_at..body_at + header.body_len() as usize].to_vec();
        if let Some(i) = body.windows(2).position(|w| w == b"s1") {
            body[i + 1] = b'2';
        }
        prev = journal_format::frame::encode_frame(&mut out, &prev, &header.meta, &body).unwrap();
        at += header.frame_len() as usize;
    }
    std::fs::write(&segment, out).unwrap();
    for args in [vec!["verify"], vec!["read"]] {
        let out = journal(&dir).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.contains("was rewritten"), "{args:?}: {stderr}");
    }
    // Salvage accepts the log as far as it holds together: the rewritten frames record stream
    // versions their streams never had, so the log is cut at the first of them (kept in
    // quarantine), and the journal is ordinary again.
    let out = journal(&dir)
        .args(["--salvage", "verify"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("comes next"), "{stderr}");
    let out = journal(&dir).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["events"], 4);
}
