//! `verify` catches tampering and says where: an edited byte, a deleted frame, swapped frames,
//! a truncated journal, a segment rewritten with a consistent new chain; blobs; the index.

mod common;

use common::*;
use journal_engine::{Chain, Journal, Options, VerifyOptions, VerifyReport};
use journal_format::frame::encode_frame;
use journal_format::{ChainHash, FrameFlags, FrameMeta, Position, SEGMENT_HEADER_LEN};

fn build(dir: &std::path::Path, n: u64) -> (Position, ChainHash) {
    let journal = Journal::open(dir, Options::default()).unwrap();
    for i in 1..=n {
        append(&journal, vec![event(i, "s1")]);
    }
    let head = journal.head();
    journal.close();
    (head.position, head.hash)
}

fn verify(dir: &std::path::Path, digest: Option<(Position, ChainHash)>) -> VerifyReport {
    // `verify` must see the tampered bytes: open without recovery cutting anything (the damage
    // is in the middle, so open would refuse); salvage is not used, so we verify a journal
    // whose damage recovery does not look at (sealed data) or verify right after tampering
    // through a second handle.
    let journal = Journal::open(dir, Options::default()).expect("open");
    journal
        .verify(
            &VerifyOptions {
                digest,
                ..VerifyOptions::default()
            },
            &mut |_, _| {},
        )
        .expect("verify runs")
}

/// Tampers with a live journal's tail through the file system while it is open, then verifies
/// through the same handle (recovery would otherwise refuse to open).
fn tamper_live(
    n: u64,
    tamper: impl FnOnce(&std::path::Path, &[(u64, journal_format::FrameHeader)]),
) -> VerifyReport {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    for i in 1..=n {
        append(&journal, vec![event(i, "s1")]);
    }
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    tamper(&file, &f);
    journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap()
}

#[test]
fn an_intact_journal_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let digest = build(dir.path(), 20);
    let report = verify(dir.path(), Some(digest));
    assert!(report.ok, "{:?}", report.problems);
    assert_eq!(report.events, 20);
}

#[test]
fn one_edited_payload_byte_is_found_with_its_place() {
    let report = tamper_live(10, |file, f| flip_byte(file, f[4].0 + 100));
    assert!(!report.ok);
    let p = &report.problems[0];
    assert_eq!(p.kind, "frame");
    assert_eq!(p.position, Some(5));
    assert!(p.detail.contains("body checksum"), "{p:?}");
}

#[test]
fn an_edit_with_recomputed_checksums_breaks_the_chain() {
    let report = tamper_live(10, |file, f| {
        // Frame 5 with a different body but valid checksums (a careful forger).
        let mut bytes = std::fs::read(file).unwrap();
        forge(&mut bytes, f, 4);
        std::fs::write(file, bytes).unwrap();
    });
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "chain" && p.position == Some(5)),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_deleted_frame_is_found() {
    let report = tamper_live(10, |file, f| {
        let mut bytes = std::fs::read(file).unwrap();
        let (offset, header) = f[3];
        bytes.drain(offset as usize..(offset + header.frame_len()) as usize);
        std::fs::write(file, bytes).unwrap();
    });
    assert!(!report.ok);
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "position_sequence" && p.position == Some(4)),
        "{:?}",
        report.problems
    );
}

#[test]
fn swapped_frames_are_found() {
    let report = tamper_live(10, |file, f| {
        let bytes = std::fs::read(file).unwrap();
        let a = &bytes[f[2].0 as usize..(f[2].0 + f[2].1.frame_len()) as usize];
        let b = &bytes[f[3].0 as usize..(f[3].0 + f[3].1.frame_len()) as usize];
        let mut out = bytes[..f[2].0 as usize].to_vec();
        out.extend_from_slice(b);
        out.extend_from_slice(a);
        out.extend_from_slice(&bytes[(f[3].0 + f[3].1.frame_len()) as usize..]);
        std::fs::write(file, out).unwrap();
    });
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "position_sequence" && p.position == Some(3)),
        "{:?}",
        report.problems
    );
}

#[test]
fn truncated_history_is_caught_against_a_kept_digest() {
    let dir = tempfile::tempdir().unwrap();
    let digest = build(dir.path(), 10);
    // Cut the journal back cleanly to 6 events: on its own it looks intact.
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    truncate(&file, f[6].0);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let refused = Journal::open(dir.path(), Options::default()).unwrap_err();
    assert!(
        matches!(&refused, journal_engine::Error::HistoryMismatch { evidence, position, .. }
            if evidence == "HEAD" && *position == Position(7)),
        "HEAD records position 10: {refused}"
    );
    // Taken away with its evidence (HEAD and the index), only a digest kept elsewhere sees it.
    std::fs::remove_file(dir.path().join("HEAD")).unwrap();
    assert!(
        verify(dir.path(), None).ok,
        "a clean truncation with its evidence gone is invisible without a digest"
    );
    let report = verify(dir.path(), Some(digest));
    assert!(!report.ok);
    assert_eq!(report.problems[0].kind, "digest_beyond_head");
    assert_eq!(report.problems[0].position, Some(10));
}

#[test]
fn a_rewritten_segment_with_a_consistent_new_chain_is_caught_against_a_kept_digest() {
    let dir = tempfile::tempdir().unwrap();
    let digest = build(dir.path(), 10);
    // Rewrite every frame from position 3 on with a changed body and a recomputed chain.
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    let bytes = std::fs::read(&file).unwrap();
    let mut out = bytes[..f[2].0 as usize].to_vec();
    let mut prev = f[1].1.hash;
    for (offset, header) in &f[2..] {
        let start = *offset as usize + 72;
        let mut body = bytes[start..start + header.body_len() as usize].to_vec();
        if let Some(at) = body.iter().position(|b| *b == b'c') {
            body[at] = b'C';
        }
        let meta = FrameMeta {
            flags: FrameFlags::END_OF_BATCH.with(FrameFlags::FIRST_IN_WRITE),
            ..header.meta
        };
        prev = encode_frame(&mut out, &prev, &meta, &body).unwrap();
    }
    assert_eq!(out.len(), bytes.len());
    std::fs::write(&file, out).unwrap();
    let refused = Journal::open(dir.path(), Options::default()).unwrap_err();
    assert!(
        matches!(&refused, journal_engine::Error::HistoryMismatch { evidence, position, .. }
            if evidence == "HEAD" && *position == Position(10)),
        "HEAD records another link at position 10: {refused}"
    );
    // Rewritten with its evidence (HEAD and the index), only a digest kept elsewhere sees it.
    std::fs::remove_file(dir.path().join("HEAD")).unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    assert!(
        verify(dir.path(), None).ok,
        "a consistent rewrite with its evidence gone passes every internal check"
    );
    let report = verify(dir.path(), Some(digest));
    assert!(!report.ok);
    assert_eq!(report.problems[0].kind, "digest_mismatch");
    assert_eq!(report.problems[0].position, Some(10));
    assert!(report.problems[0].offset.unwrap() >= SEGMENT_HEADER_LEN as u64);
}

#[test]
fn blobs_are_checked_against_their_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    let output = b"a large tool output\n".repeat(1000);
    let reference = journal.blobs().put(&output).unwrap();
    assert_eq!(
        journal.blobs().put(&output).unwrap(),
        reference,
        "content addressed"
    );
    let mut e = event(1, "s1");
    e.output_ref = Some(reference.clone());
    let mut dangling = event(2, "s1");
    dangling.refs = Some(Box::new(serde_json::Map::from_iter([(
        "log".to_string(),
        serde_json::json!(format!("blake3:{}", "0".repeat(64))),
    )])));
    append(&journal, vec![e, dangling]);
    assert_eq!(journal.blobs().get(&reference).unwrap().unwrap(), output);
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].kind, "blob_missing");
    assert_eq!(report.problems[0].position, Some(2));
    let hex = reference.trim_start_matches("blake3:");
    let path = dir.path().join("blobs").join(&hex[..2]).join(hex);
    flip_byte(&path, 3);
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "blob_mismatch" && p.position == Some(1)),
        "{:?}",
        report.problems
    );
}

/// Changes one body byte of frame `i` and recomputes its checksums (a careful forger), keeping
/// its flags and stored link so that the frames after it still continue from it: only the link
/// of the frame's run shows the edit.
fn forge(bytes: &mut [u8], f: &[(u64, journal_format::FrameHeader)], i: usize) {
    let (offset, header) = f[i];
    let offset = offset as usize;
    let body = &mut bytes[offset + 72..offset + 72 + header.body_len() as usize];
    let at = body.iter().position(|b| *b == b'b').unwrap();
    body[at] = b'z';
    let body_crc = crc32fast::hash(body);
    bytes[offset + 8..offset + 12].copy_from_slice(&body_crc.to_le_bytes());
    let crc = crc32fast::hash(&bytes[offset + 4..offset + 72]);
    bytes[offset..offset + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The positions a verified scan from `from` hands out, and how it ends.
fn verified_scan(journal: &Journal, from: u64) -> (Vec<u64>, journal_engine::Result<()>) {
    let mut got = Vec::new();
    let result = journal.scan(Position(from), None, Chain::Verified, |record| {
        got.push(record.position.0);
        Ok(std::ops::ControlFlow::Continue(()))
    });
    (got, result)
}

/// A report's chain problems, by position and offset.
fn chain_problems(report: &VerifyReport) -> Vec<(Option<u64>, Option<u64>)> {
    report
        .problems
        .iter()
        .filter(|p| p.kind == "chain")
        .map(|p| (p.position, p.offset))
        .collect()
}

/// Verified scans and `verify` check the links of a chunk of frames at a time on several
/// threads: a forged frame deep in a large segment (hashed by a thread other than the reader's)
/// is still named exactly, the frames before it are given, and the frames after it are
/// checked again from the link it stores.
#[test]
fn forged_frames_deep_in_a_large_segment_are_named_by_a_verified_scan_and_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    for b in 0..20u64 {
        append(
            &journal,
            (1..=100).map(|k| event(b * 100 + k, "s1")).collect(),
        );
    }
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    assert_eq!(f.len(), 2000);
    let mut bytes = std::fs::read(&file).unwrap();
    forge(&mut bytes, &f, 700);
    forge(&mut bytes, &f, 1300);
    // And one body byte flipped without its checksum recomputed (bit rot).
    bytes[f[1700].0 as usize + 72 + 20] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    // Read through the live handle: recovery at a reopen is not what is tested here.
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert_eq!(
        chain_problems(&report),
        [(Some(701), Some(f[700].0)), (Some(1301), Some(f[1300].0))],
        "{:?}",
        report.problems
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == "frame" && p.position == Some(1701) && p.offset == Some(f[1700].0)),
        "{:?}",
        report.problems
    );

    let scan_until_error = |from: u64| {
        let (got, result) = verified_scan(&journal, from);
        let (position, offset, detail) = corruption_at(result.unwrap_err());
        (got.last().copied().unwrap_or(0), position, offset, detail)
    };
    let (last, position, offset, detail) = scan_until_error(1);
    assert_eq!((last, position, offset), (700, Some(701), f[700].0));
    assert!(detail.contains("chain link mismatch"), "{detail}");
    // From well past the first forgery (a scan starts at the sparse index entry before its
    // first position, and checks the frames from there), the second one is named.
    let (last, position, offset, _) = scan_until_error(1200);
    assert_eq!((last, position, offset), (1300, Some(1301), f[1300].0));
    let (last, position, offset, detail) = scan_until_error(1500);
    assert_eq!((last, position, offset), (1700, Some(1701), f[1700].0));
    assert!(detail.contains("body checksum"), "{detail}");

    // A verified read of decoded events names the first forgery after the events before it.
    let mut events = journal.read(Position::FIRST, None, Chain::Verified);
    let read: Vec<_> = events
        .by_ref()
        .take(700)
        .map(|e| e.unwrap().position.0)
        .collect();
    assert_eq!(read, (1..=700).collect::<Vec<_>>());
    match events.next() {
        Some(Err(journal_engine::Error::Corruption { position, .. })) => {
            assert_eq!(position, Some(Position(701)));
        }
        other => panic!("expected corruption at 701, got {other:?}"),
    }

    // Unverified, the forgeries pass (their checksums hold): the records up to the flipped
    // byte are given.
    let mut count = 0;
    let error = journal
        .scan(Position::FIRST, None, Chain::Unverified, |_| {
            count += 1;
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap_err();
    assert_eq!(count, 1700, "{error}");
    journal.close();
}

/// The chain links link groups of frames: a forged frame in the middle of a link group makes its whole group
/// fail, and a verified reader hands out no frame of a link group before the group is checked.
#[test]
fn a_forged_frame_inside_a_run_withholds_its_whole_run_from_a_verified_reader() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, (1..=10).map(|k| event(k, "s1")).collect());
    append(&journal, (11..=60).map(|k| event(k, "s1")).collect());
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    // One run per batch: the second batch's frames all store one link, and only its last
    // frame ends the group.
    assert!(f[10..60].iter().all(|(_, h)| h.hash == f[10].1.hash));
    assert!(f[10..59].iter().all(|(_, h)| !h.meta.flags.is_link_end()));
    assert!(f[59].1.meta.flags.is_link_end());
    let mut bytes = std::fs::read(&file).unwrap();
    forge(&mut bytes, &f, 35);
    std::fs::write(&file, bytes).unwrap();

    let (got, result) = verified_scan(&journal, 1);
    assert_eq!(
        got.last().copied().unwrap_or(0),
        10,
        "the first run is given, nothing of the forged one"
    );
    let (position, offset, _) = corruption_at(result.unwrap_err());
    assert_eq!((position, offset), (Some(11), f[10].0));
    // Unverified, every frame is read: their checksums hold.
    let mut count = 0;
    journal
        .scan(Position::FIRST, None, Chain::Unverified, |_| {
            count += 1;
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    assert_eq!(count, 60);
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .unwrap();
    assert_eq!(
        chain_problems(&report),
        [(Some(11), Some(f[10].0))],
        "{:?}",
        report.problems
    );
}

/// A verified read that starts inside a link group (its sparse entry is in the middle of one, the link
/// before unknown) hands out that run's frames, and checks every run after it whole.
#[test]
fn a_verified_read_from_inside_a_run_checks_every_run_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), Options::default()).unwrap();
    append(&journal, (1..=2000).map(|k| event(k, "s1")).collect());
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    // The runs: each ends at its first frame that brings it to 64 KiB, the last at the batch's
    // end.
    let ends: Vec<usize> = (0..f.len())
        .filter(|&i| f[i].1.meta.flags.is_link_end())
        .collect();
    assert!(ends.len() >= 5, "{} runs", ends.len());
    let mut start = 0;
    for &end in &ends {
        let before_last = f[end].0 - f[start].0;
        assert!(before_last < journal_format::LINK_GROUP_BYTES);
        assert!(f[start..=end].iter().all(|(_, h)| h.hash == f[end].1.hash));
        start = end + 1;
    }
    assert_eq!(start, f.len());
    let run3 = ends[1] + 1;
    let run4 = ends[2] + 1;
    let from = f[run3].1.meta.position.0 + 5;
    let (got, result) = verified_scan(&journal, from);
    result.unwrap();
    assert_eq!(got, (from..=2000).collect::<Vec<_>>());

    let mut bytes = std::fs::read(&file).unwrap();
    forge(&mut bytes, &f, run4 + 10);
    std::fs::write(&file, bytes).unwrap();
    let (got, result) = verified_scan(&journal, from);
    let run4_first = f[run4].1.meta.position.0;
    assert_eq!(got, (from..run4_first).collect::<Vec<_>>());
    let (position, offset, _) = corruption_at(result.unwrap_err());
    assert_eq!((position, offset), (Some(run4_first), f[run4].0));
}
