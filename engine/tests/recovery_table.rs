//! One test per row of the recovery decision table in docs/FORMAT.md.

mod common;

use common::*;
use journal_engine::{Error, Journal, Options, RecoveryAction, VerifyOptions};
use journal_format::Position;

fn open(dir: &std::path::Path) -> Result<Journal, Error> {
    Journal::open(dir, small_segments())
}

fn verify_ok(journal: &Journal) {
    let report = journal
        .verify(&VerifyOptions::default(), &mut |_, _| {})
        .expect("verify runs");
    assert!(report.ok, "verify found problems: {:?}", report.problems);
}

/// A journal with `n` single-event appends (each its own write and batch).
fn journal_with(dir: &std::path::Path, n: u64) {
    let journal = open(dir).expect("open");
    for i in 1..=n {
        append(&journal, vec![event(i, "s1")]);
    }
    journal.close();
}

/// A journal spanning at least three segments.
/// Appends the zeros an open journal leaves after its frames (the filler's, up to 2 MiB; here
/// 1 MiB), as a crash leaves them.
fn zero_fill_ahead(segment: &mut Vec<u8>) {
    segment.resize(segment.len() + (1 << 20), 0);
}

/// The first action of an open's recovery report when it is a torn tail cut: where the cut
/// began and where its bytes were kept.
fn first_torn_cut(journal: &Journal) -> Option<(u64, Option<String>)> {
    match journal.recovery_report().actions.first() {
        Some(RecoveryAction::TornTailCut {
            offset, saved_to, ..
        }) => Some((*offset, saved_to.clone())),
        _ => None,
    }
}

fn multi_segment(dir: &std::path::Path) {
    let journal = open(dir).expect("open");
    let mut i = 0;
    while segment_files(dir).len() < 4 {
        i += 1;
        append(
            &journal,
            (0..20).map(|k| event(i * 100 + k, "s1")).collect(),
        );
    }
    journal.close();
}

#[test]
fn row1_empty_directory_opens_as_empty_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(0));
    assert!(journal.recovery_report().actions.is_empty());
    assert_eq!(segment_files(dir.path()).len(), 1);
    verify_ok(&journal);
}

#[test]
fn row2_missing_middle_segment_refuses_to_open_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    std::fs::remove_file(&files[1]).unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
    assert!(
        err.to_string().contains("00000000000000000002.seg"),
        "{err}"
    );
}

#[test]
fn row3_sealed_segment_with_damaged_footer_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    let len = std::fs::metadata(&files[0]).unwrap().len();
    flip_byte(&files[0], len - 40);
    let err = open(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::Corruption { segment, .. } if segment.0 == 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("footer"), "{err}");
}

#[test]
fn row4_damaged_segment_header_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    flip_byte(&files[1], 30); // first_position
    let err = open(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::Corruption { segment, offset: 0, .. } if segment.0 == 2),
        "{err:?}"
    );
}

/// Sets up a journal whose last segment is sealed (as after a crash right after sealing, before
/// the next segment existed); returns its head.
fn sealed_last(dir: &std::path::Path) -> (Position, std::path::PathBuf) {
    multi_segment(dir);
    let (head_before, tail) = {
        let journal = open(dir).unwrap();
        let h = head(&journal);
        journal.close();
        (h, segment_files(dir).pop().unwrap())
    };
    let tail_frames = frames(&tail).len() as u64;
    std::fs::remove_file(&tail).unwrap();
    let sealed_head = Position(head_before.0 - tail_frames);
    rewind_evidence(dir, sealed_head);
    (sealed_head, tail)
}

#[test]
fn row5_incomplete_last_segment_is_removed_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (expected_head, tail) = sealed_last(dir.path());
    // A crash while creating the next segment: the file exists, its header never reached the disk.
    std::fs::write(&tail, [0u8; 40]).unwrap();
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), expected_head);
    assert!(journal.recovery_report().actions.iter().any(|a| matches!(
        a,
        RecoveryAction::IncompleteSegmentRemoved { bytes: 40, .. }
    )));
    append(&journal, vec![event(1, "s9")]);
    verify_ok(&journal);
}

#[test]
fn row6_sealed_last_segment_gets_a_new_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (expected_head, tail) = sealed_last(dir.path());
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), expected_head);
    assert!(tail.exists(), "a new, empty tail segment was created");
    assert_eq!(frames(&tail).len(), 0);
    append(&journal, vec![event(1, "s2")]);
    verify_ok(&journal);
}

#[test]
fn row7_zeroed_tail_is_a_clean_end() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 3);
    let file = segment_files(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    truncate(&file, len + 4096); // preallocated, never written
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(3));
    assert!(
        journal.recovery_report().actions.is_empty(),
        "{:?}",
        journal.recovery_report()
    );
    append(&journal, vec![event(4, "s1")]);
    verify_ok(&journal);
}

#[test]
fn row8_unfinished_batch_is_cut_whole() {
    let dir = tempfile::tempdir().unwrap();
    {
        let journal = open(dir.path()).unwrap();
        append(&journal, vec![event(1, "s1")]);
        append(&journal, (2..=4).map(|i| event(i, "s1")).collect());
        journal.close();
    }
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    assert_eq!(f.len(), 4);
    // The last frame of the batch (the one with END_OF_BATCH) never reached the disk.
    truncate(&file, f[3].0);
    rewind_evidence(dir.path(), Position::FIRST);
    let journal = open(dir.path()).unwrap();
    assert_eq!(
        head(&journal),
        Position::FIRST,
        "the batch is atomic: none of it survives"
    );
    let cut = journal
        .recovery_report()
        .actions
        .iter()
        .find_map(|a| match a {
            RecoveryAction::TornTailCut {
                positions, offset, ..
            } => Some((*positions, *offset)),
            _ => None,
        });
    assert_eq!(cut, Some((Some([2, 3]), f[1].0)));
    verify_ok(&journal);
}

#[test]
fn row9_torn_final_frame_is_cut_and_kept_in_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    let (last_offset, last) = f[4];
    truncate(&file, last_offset + last.frame_len() - 7);
    rewind_evidence(dir.path(), Position(4));
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(4));
    let Some((offset, Some(saved))) = first_torn_cut(&journal) else {
        panic!(
            "expected a torn tail cut, got {:?}",
            journal.recovery_report()
        );
    };
    assert_eq!(offset, last_offset);
    assert!(dir.path().join(saved).exists());
    verify_ok(&journal);
    // A write whose later sector landed while an earlier one did not (reordered unsynced
    // writes): a zeroed sector inside the frame, real bytes after it. Cut too.
    append(&journal, vec![event(5, "s1")]);
    let mut big = event(6, "s1");
    big.payload = Some(serde_json::json!({"output": "y".repeat(3000)}));
    append(&journal, vec![big]);
    journal.close();
    let f = frames(&file);
    let (o6, h6) = f[5];
    let mut bytes = std::fs::read(&file).unwrap();
    let sector = (o6 as usize / 512 + 2) * 512;
    assert!(sector + 512 < (o6 + h6.frame_len()) as usize);
    bytes[sector..sector + 512].fill(0);
    std::fs::write(&file, bytes).unwrap();
    rewind_evidence(dir.path(), Position(5));
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(5));
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::TornTailCut { .. })));
    verify_ok(&journal);
}

#[test]
fn row12_a_complete_last_frame_with_wrong_bytes_is_corruption_not_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let (o5, h5) = frames(&file)[4];
    // Bit rot in the last, acknowledged frame: every byte present, one of them wrong.
    flip_byte(&file, o5 + h5.frame_len() - 3);
    let err = open(dir.path()).unwrap_err();
    let message = err.to_string();
    let (position, offset, _) = corruption_at(err);
    assert_eq!((offset, position), (o5, Some(5)));
    assert!(message.contains("not a torn write"), "{message}");
    // Garbage after the last frame that no torn write explains is refused the same way.
    flip_byte(&file, o5 + h5.frame_len() - 3);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(&[0xAB; 100]);
    std::fs::write(&file, bytes).unwrap();
    assert!(open(dir.path()).unwrap_err().is_corruption());
}

#[test]
fn row12_holds_when_the_tail_is_zero_filled_ahead_as_an_open_journal_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let (o5, h5) = frames(&file)[4];
    // What a crash leaves: the writer's zero-filled space after the frames (1 MiB ahead).
    let mut bytes = std::fs::read(&file).unwrap();
    zero_fill_ahead(&mut bytes);
    std::fs::write(&file, bytes).unwrap();
    flip_byte(&file, o5 + h5.frame_len() - 3);
    let (position, offset, _) = corruption_at(open(dir.path()).unwrap_err());
    assert_eq!((offset, position), (o5, Some(5)));
    // Undamaged, the same file opens clean: the zeros are trimmed, nothing is lost.
    flip_byte(&file, o5 + h5.frame_len() - 3);
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(5));
    verify_ok(&journal);
}

#[test]
fn row12_holds_for_a_last_frame_whose_body_ends_in_zeros() {
    // The fourth event's payload ends in `"exitCode": 0`: its frame's last byte is a zero, like
    // the zeros a torn write leaves. Found by the simulator (seeds 1281 and 2710).
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 4);
    let file = segment_files(dir.path()).pop().unwrap();
    let (o4, h4) = frames(&file)[3];
    let end = o4 + h4.frame_len();
    let mut bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes[end as usize - 1], 0, "the frame ends in a zero byte");
    zero_fill_ahead(&mut bytes);
    std::fs::write(&file, &bytes).unwrap();
    // One flipped bit in the body (flip_byte flips one bit): bit rot, refused.
    flip_byte(&file, o4 + 100);
    let err = open(dir.path()).unwrap_err();
    let message = err.to_string();
    let (position, offset, _) = corruption_at(err);
    assert_eq!((offset, position), (o4, Some(4)));
    assert!(message.contains("one flipped bit"), "{message}");
    // A torn write instead: the frame's last bytes never landed. Cut, as row 9 says.
    let tear = end as usize - 8;
    bytes[tear..end as usize].fill(0);
    std::fs::write(&file, &bytes).unwrap();
    rewind_evidence(dir.path(), Position(3));
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(3));
    assert_eq!(
        first_torn_cut(&journal).map(|(offset, _)| offset),
        Some(o4),
        "{:?}",
        journal.recovery_report()
    );
    verify_ok(&journal);
}

#[test]
fn row9_holds_for_one_bit_cleared_in_the_last_byte_a_torn_write_could_have_lost() {
    // The fifth event's payload ends in `"exitCode": 1`: its frame's last byte is 0x01. With
    // that bit cleared the byte reads as unwritten space: one flipped bit, or a torn write that
    // lost the byte, which the bytes cannot tell apart. Cut, as row 9 says, and kept.
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let (o5, h5) = frames(&file)[4];
    let end = (o5 + h5.frame_len()) as usize;
    let mut bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes[end - 1], 0x01, "the frame ends in 0x01");
    bytes[end - 1] = 0;
    zero_fill_ahead(&mut bytes);
    std::fs::write(&file, &bytes).unwrap();
    // Had the fifth event been acknowledged, HEAD could say so and open would refuse (see
    // `rows13_...`); after a crash during its write, HEAD holds the fourth.
    rewind_evidence(dir.path(), Position(4));
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(4));
    let Some((offset, saved_to)) = first_torn_cut(&journal) else {
        panic!(
            "expected a torn tail cut, got {:?}",
            journal.recovery_report()
        );
    };
    assert_eq!(offset, o5);
    assert!(saved_to.is_some(), "the cut bytes are kept");
    verify_ok(&journal);
}

#[test]
fn row9b_an_unfinished_seal_is_cut_and_the_segment_sealed_again_later() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    let f1 = frames(&files[0]);
    let (last_offset, last) = *f1.last().unwrap();
    let frames_end = last_offset + last.frame_len();
    let head1 = last.meta.position;
    // A crash while sealing segment 1: its footer only partly written, no segment 2 yet.
    for later in &files[1..] {
        std::fs::remove_file(later).unwrap();
    }
    let len = std::fs::metadata(&files[0]).unwrap().len();
    truncate(&files[0], frames_end + (len - frames_end) / 2);
    rewind_evidence(dir.path(), head1);
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), head1);
    let cut = journal
        .recovery_report()
        .actions
        .iter()
        .find_map(|a| match a {
            RecoveryAction::TornTailCut { offset, detail, .. } => Some((*offset, detail.clone())),
            _ => None,
        });
    let (offset, detail) = cut.expect("the partial footer is cut");
    assert_eq!(offset, frames_end);
    assert!(detail.contains("unfinished seal"), "{detail}");
    append(&journal, (0..20).map(|k| event(50_000 + k, "s1")).collect());
    assert!(
        segment_files(dir.path()).len() >= 2,
        "the full segment was sealed again and a new one started"
    );
    verify_ok(&journal);
}

#[test]
fn row10_damage_before_a_later_write_refuses_to_open_then_salvage_quarantines() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    let (offset2, _) = f[1];
    flip_byte(&file, offset2 + 80); // inside frame 2's body
    let err = open(dir.path()).unwrap_err();
    match &err {
        Error::Corruption {
            segment,
            offset,
            position,
            ..
        } => {
            assert_eq!(segment.0, 1);
            assert_eq!(*offset, offset2);
            assert_eq!(*position, Some(Position(2)));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let journal = Journal::open(
        dir.path(),
        Options {
            salvage: true,
            ..small_segments()
        },
    )
    .unwrap();
    assert_eq!(head(&journal), Position::FIRST);
    let q = journal
        .recovery_report()
        .actions
        .iter()
        .find_map(|a| match a {
            RecoveryAction::Quarantined {
                positions,
                readable_frames,
                files,
                ..
            } => Some((*positions, *readable_frames, files.clone())),
            _ => None,
        });
    let (positions, readable, files) = q.expect("a quarantine action");
    assert_eq!(
        positions,
        Some([3, 5]),
        "frames 3..=5 are readable in quarantine"
    );
    assert_eq!(readable, 3);
    assert!(dir.path().join(&files[0]).exists());
    verify_ok(&journal);
}

#[test]
fn row11_valid_frame_out_of_sequence_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 3);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    // Append a copy of frame 1 after frame 3: checksums valid, position wrong.
    let bytes = std::fs::read(&file).unwrap();
    let (o1, h1) = f[0];
    let copy = bytes[o1 as usize..(o1 + h1.frame_len()) as usize].to_vec();
    let mut damaged = bytes.clone();
    damaged.extend_from_slice(&copy);
    std::fs::write(&file, damaged).unwrap();
    let err = open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("position 1 where 4 was expected"),
        "{err}"
    );
}

#[test]
fn reopen_after_clean_close_reports_nothing_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let journal = open(dir.path()).unwrap();
    assert!(
        journal.recovery_report().actions.is_empty(),
        "{:?}",
        journal.recovery_report()
    );
    let events = all_events(&journal);
    assert_eq!(events.len() as u64, head(&journal).0);
    assert!(events
        .windows(2)
        .all(|w| w[0].position.next() == w[1].position));
    verify_ok(&journal);
}

/// Opens with salvage.
fn salvage(dir: &std::path::Path) -> Journal {
    Journal::open(
        dir,
        Options {
            salvage: true,
            ..small_segments()
        },
    )
    .expect("salvage opens")
}

/// The evidence and first position of a refusal for lost or rewritten history.
fn history_mismatch(error: Error) -> (String, u64, String) {
    let message = error.to_string();
    match error {
        Error::HistoryMismatch {
            evidence, position, ..
        } => (evidence, position.0, message),
        other => panic!("expected a history mismatch, got {other:?}"),
    }
}

/// After salvage accepted `evidence`'s contradiction: the report says so, a salvage report is
/// kept in quarantine, and the journal then opens normally and verifies.
fn assert_salvage_accepted(dir: &std::path::Path, evidence: &str) {
    let journal = salvage(dir);
    assert!(
        journal.recovery_report().actions.iter().any(|a| matches!(
            a,
            RecoveryAction::HistoryAccepted { evidence: e, .. } if e == evidence
        )),
        "{:?}",
        journal.recovery_report()
    );
    journal.close();
    let kept = std::fs::read_dir(dir.join("quarantine"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("salvage"));
    assert!(kept, "the salvage report is kept in quarantine/");
    let journal = open(dir).expect("one salvage leaves an openable journal");
    verify_ok(&journal);
}

#[test]
fn row13_a_log_cut_at_a_batch_boundary_before_head_is_refused_naming_the_lost_positions() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 10);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    // A clean cut after the sixth batch: every remaining frame is intact.
    truncate(&file, f[6].0);
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let (evidence, position, message) = history_mismatch(open(dir.path()).unwrap_err());
    assert_eq!((evidence.as_str(), position), ("HEAD", 7), "{message}");
    assert!(
        message.contains("positions 7..=10 are missing"),
        "{message}"
    );
    assert_salvage_accepted(dir.path(), "HEAD");
}

#[test]
fn row13_deleted_last_segments_and_deleted_segments_are_refused() {
    for keep in [2usize, 0] {
        let dir = tempfile::tempdir().unwrap();
        multi_segment(dir.path());
        let files = segment_files(dir.path());
        for file in &files[keep..] {
            std::fs::remove_file(file).unwrap();
        }
        let (evidence, position, message) = history_mismatch(open(dir.path()).unwrap_err());
        assert!(evidence == "HEAD" || evidence == "index.redb", "{message}");
        assert!(position >= 1, "{message}");
        assert!(message.contains("are missing"), "{message}");
        // Nothing was written by the refused open: no new segment took the lost positions.
        assert_eq!(segment_files(dir.path()).len(), keep);
        assert_salvage_accepted(dir.path(), &evidence);
    }
}

#[test]
fn row14_a_log_rewritten_before_head_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 6);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    // Rewrite frames 3.. with changed bodies and a consistent new chain.
    let bytes = std::fs::read(&file).unwrap();
    let mut out = bytes[..f[2].0 as usize].to_vec();
    let mut prev = f[1].1.hash;
    for (offset, header) in &f[2..] {
        let start = *offset as usize + journal_format::FRAME_HEADER_LEN;
        let mut body = bytes[start..start + header.body_len() as usize].to_vec();
        if let Some(at) = body.iter().position(|b| *b == b'c') {
            body[at] = b'C';
        }
        prev = journal_format::frame::encode_frame(&mut out, &prev, &header.meta, &body).unwrap();
    }
    std::fs::write(&file, out).unwrap();
    std::fs::remove_file(dir.path().join("index.redb")).unwrap();
    let (evidence, position, message) = history_mismatch(open(dir.path()).unwrap_err());
    assert_eq!((evidence.as_str(), position), ("HEAD", 6), "{message}");
    assert!(message.contains("was rewritten"), "{message}");
    assert_salvage_accepted(dir.path(), "HEAD");
}

#[test]
fn row15_an_index_rechained_against_the_log_is_refused_then_salvage_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 6);
    let file = segment_files(dir.path()).pop().unwrap();
    let f = frames(&file);
    let bytes = std::fs::read(&file).unwrap();
    let mut out = bytes[..f[0].0 as usize].to_vec();
    let mut prev = journal_format::ChainHash::GENESIS;
    for (offset, header) in &f {
        let start = *offset as usize + journal_format::FRAME_HEADER_LEN;
        let mut body = bytes[start..start + header.body_len() as usize].to_vec();
        if let Some(at) = body.iter().position(|b| *b == b'c') {
            body[at] = b'C';
        }
        prev = journal_format::frame::encode_frame(&mut out, &prev, &header.meta, &body).unwrap();
    }
    std::fs::write(&file, out).unwrap();
    // The attacker also rewrote HEAD to the new chain: the index's head still disagrees.
    rewind_evidence_keeping_index(dir.path(), Position(6));
    let (evidence, position, message) = history_mismatch(open(dir.path()).unwrap_err());
    assert_eq!(
        (evidence.as_str(), position),
        ("index.redb", 6),
        "{message}"
    );
    let journal = salvage(dir.path());
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::IndexRebuilt { .. })));
    append(&journal, vec![event(100, "s1")]);
    verify_ok(&journal);
}

#[test]
fn row16_a_damaged_head_record_is_refused_then_salvage_sets_it_aside() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 3);
    let head_file = dir.path().join("HEAD");
    flip_byte(&head_file, 30);
    flip_byte(&head_file, 512 + 30);
    let (evidence, _, message) = history_mismatch(open(dir.path()).unwrap_err());
    assert_eq!(evidence, "HEAD", "{message}");
    assert!(message.contains("damaged"), "{message}");
    // One slot damaged (a torn update): the other holds, nothing to report.
    flip_byte(&head_file, 30);
    let journal = open(dir.path()).unwrap();
    assert_eq!(head(&journal), Position(3));
    journal.close();
    flip_byte(&head_file, 30);
    flip_byte(&head_file, 512 + 30);
    assert_salvage_accepted(dir.path(), "HEAD");
}

#[test]
fn row17_a_torn_tail_holding_committed_positions_is_damage_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    journal_with(dir.path(), 5);
    let file = segment_files(dir.path()).pop().unwrap();
    let (o5, h5) = frames(&file)[4];
    // The last frame looks torn, but HEAD says position 5 was acknowledged.
    truncate(&file, o5 + h5.frame_len() - 7);
    let before = std::fs::read(&file).unwrap();
    let err = open(dir.path()).unwrap_err();
    let (position, offset, detail) = corruption_at(err);
    assert_eq!((offset, position), (o5, Some(5)));
    assert!(detail.contains("damage, not a torn write"), "{detail}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was cut");
}

/// The quarantine actions of a journal's recovery report: (detail, readable frames).
fn quarantined(journal: &Journal) -> Vec<(String, u64)> {
    journal
        .recovery_report()
        .actions
        .iter()
        .filter_map(|a| match a {
            RecoveryAction::Quarantined {
                detail,
                readable_frames,
                ..
            } => Some((detail.clone(), *readable_frames)),
            _ => None,
        })
        .collect()
}

/// After a salvage: the journal reopens without salvage, verifies, and takes appends after
/// `head` (no position reused from what it kept).
fn assert_openable_after_salvage(dir: &std::path::Path, head_after: Position) {
    let journal = open(dir).expect("one salvage leaves an openable journal");
    assert_eq!(head(&journal), head_after);
    verify_ok(&journal);
    let appended = append(&journal, vec![event(77_777, "s9")]);
    assert_eq!(appended[0].position, head_after.next());
    verify_ok(&journal);
}

#[test]
fn salvage_of_a_missing_middle_segment_moves_what_cannot_follow_and_leaves_an_openable_journal() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    let kept_head = frames(&files[0]).last().unwrap().1.meta.position;
    std::fs::remove_file(&files[1]).unwrap();
    let journal = salvage(dir.path());
    assert_eq!(head(&journal), kept_head);
    let moved = quarantined(&journal);
    assert!(
        moved
            .iter()
            .any(|(detail, _)| detail.contains("is missing")),
        "{moved:?}"
    );
    journal.close();
    assert!(
        !files[2].exists() && !files[3].exists(),
        "moved to quarantine"
    );
    assert_openable_after_salvage(dir.path(), kept_head);
}

#[test]
fn salvage_sets_stray_files_aside_and_moves_no_intact_frame() {
    for stray in ["00000000000000000000.seg", "00000000000000000002.seg"] {
        let dir = tempfile::tempdir().unwrap();
        journal_with(dir.path(), 50);
        std::fs::write(
            dir.path().join("segments").join(stray),
            b"not a segment".repeat(50),
        )
        .unwrap();
        let refused = open(dir.path()).unwrap_err();
        assert!(refused.is_corruption(), "{stray}: {refused}");
        let journal = salvage(dir.path());
        assert_eq!(head(&journal), Position(50), "{stray}: every event kept");
        let moved = quarantined(&journal);
        assert_eq!(moved.len(), 1, "{stray}: {moved:?}");
        assert_eq!(moved[0].1, 0, "{stray}: no readable frame was moved");
        assert!(moved[0].0.contains(stray), "{stray}: {moved:?}");
        assert!(
            !journal
                .recovery_report()
                .actions
                .iter()
                .any(|a| matches!(a, RecoveryAction::HistoryAccepted { .. })),
            "{stray}: nothing acknowledged was lost"
        );
        journal.close();
        assert_openable_after_salvage(dir.path(), Position(50));
    }
}

#[test]
fn salvage_seals_again_a_segment_whose_footer_was_cut_keeping_every_frame() {
    let dir = tempfile::tempdir().unwrap();
    multi_segment(dir.path());
    let files = segment_files(dir.path());
    let before = {
        let journal = open(dir.path()).unwrap();
        let h = head(&journal);
        journal.close();
        h
    };
    let len = std::fs::metadata(&files[1]).unwrap().len();
    truncate(&files[1], len - 30);
    assert!(open(dir.path()).unwrap_err().is_corruption());
    let journal = salvage(dir.path());
    assert_eq!(head(&journal), before, "every acknowledged event kept");
    assert!(journal
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::Resealed { .. })));
    assert!(
        quarantined(&journal).is_empty(),
        "{:?}",
        journal.recovery_report()
    );
    journal.close();
    assert_openable_after_salvage(dir.path(), before);
}

/// Edits one byte of the body of the frame at `offset` and recomputes both of its checksums (not
/// its chain link), as a careful tamperer would.
fn edit_body_with_checksums(file: &std::path::Path, offset: u64) {
    use journal_format::frame::{BODY_CRC_OFFSET, HEADER_CRC_OFFSET};
    let mut bytes = std::fs::read(file).unwrap();
    let at = offset as usize;
    let header = journal_format::FrameHeader::decode(&bytes[at..]).unwrap();
    let body_start = at + journal_format::FRAME_HEADER_LEN;
    let body_end = body_start + header.body_len() as usize;
    bytes[body_start + 20] ^= 0x01;
    let body_crc = crc32fast::hash(&bytes[body_start..body_end]);
    bytes[at + BODY_CRC_OFFSET..at + BODY_CRC_OFFSET + 4].copy_from_slice(&body_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&bytes[at + 4..at + journal_format::FRAME_HEADER_LEN]);
    bytes[at + HEADER_CRC_OFFSET..at + HEADER_CRC_OFFSET + 4]
        .copy_from_slice(&header_crc.to_le_bytes());
    std::fs::write(file, bytes).unwrap();
}

/// Damages a segment file, given its frames.
type Tamper = fn(&std::path::Path, &[(u64, journal_format::FrameHeader)]);

#[test]
fn damage_anywhere_in_the_tail_segment_is_found_at_open_not_only_after_the_index() {
    // A bit flip, a body edited with its checksums recomputed, two frames swapped: each early in
    // the tail of a cleanly closed journal (whose index reflects every frame), each refused at
    // open naming its position, never read back as if it were history.
    let cases: [(&str, Tamper); 3] = [
        ("bit flip", |file, f| flip_byte(file, f[2].0 + 90)),
        ("edited body", |file, f| {
            edit_body_with_checksums(file, f[2].0)
        }),
        ("swapped frames", |file, f| {
            let mut bytes = std::fs::read(file).unwrap();
            let (a, b, end) = (f[2].0 as usize, f[3].0 as usize, f[4].0 as usize);
            let mut swapped = bytes[b..end].to_vec();
            swapped.extend_from_slice(&bytes[a..b]);
            bytes.splice(a..end, swapped);
            std::fs::write(file, bytes).unwrap();
        }),
    ];
    for (what, damage) in cases {
        let dir = tempfile::tempdir().unwrap();
        journal_with(dir.path(), 10);
        let file = segment_files(dir.path()).pop().unwrap();
        let f = frames(&file);
        damage(&file, &f);
        let err = open(dir.path()).unwrap_err();
        let (position, _, detail) = corruption_at(err);
        assert_eq!(position, Some(3), "{what}: {detail}");
    }
}
