//! `Journal::append_frames`: a replica built from a source's stored frames has the same
//! positions, links and tree root; a damaged frame, a gap or a link that does not chain is
//! refused with its position, and nothing of the request is written.

mod common;

use std::ops::ControlFlow;

use common::event;
use journal_engine::{AppendOptions, Chain, Error, Journal, Limits, Options};
use journal_format::{Position, FRAME_HEADER_LEN};

/// Segments of 256 KiB, so that the journals roll several, and batches of up to 128 KiB, so
/// that one holds several link groups.
fn small_segments() -> Options {
    Options {
        limits: Limits {
            event_bytes_max: 8 * 1024,
            batch_events_max: 1_000,
            batch_bytes_max: 128 * 1024,
            segment_bytes_max: 256 * 1024,
        },
        ..Options::default()
    }
}

/// A source with batches of 1, 7 and 300 events (the last spanning several link groups) over
/// small segments, and its frames read back, each with whether it ends a batch.
fn source(dir: &std::path::Path) -> (Journal, Vec<(Vec<u8>, bool)>) {
    let journal = Journal::open(dir, small_segments()).expect("open source");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut i = 0;
    for size in [1u64, 7, 300, 1, 1, 40, 400, 400, 400, 3] {
        let batch: Vec<_> = (i..i + size)
            .map(|n| event(n, &format!("s{}", n % 3)))
            .collect();
        i += size;
        rt.block_on(journal.append_batch(batch, AppendOptions::default()))
            .expect("append");
    }
    let mut frames = Vec::new();
    journal
        .scan(Position::FIRST, None, Chain::Verified, |record| {
            let (header, _) = journal_format::frame::decode_frame(record.frame).expect("frame");
            frames.push((record.frame.to_vec(), header.meta.flags.is_end_of_batch()));
            Ok(ControlFlow::Continue(()))
        })
        .expect("scan");
    (journal, frames)
}

/// The frames as requests that each end a batch, up to about `bytes` each.
fn requests(frames: &[(Vec<u8>, bool)], bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for (frame, ends_batch) in frames {
        current.extend_from_slice(frame);
        if *ends_batch && current.len() >= bytes {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

#[test]
fn a_replica_of_copied_frames_has_the_source_digest() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (source, frames) = source(dirs.0.path());
    let replica = Journal::open(dirs.1.path(), small_segments()).expect("open replica");
    for request in requests(&frames, 20_000) {
        block(replica.append_frames(&request)).expect("append frames");
    }
    assert_eq!(replica.head(), source.head());
    let (a, b) = (source.tree_head().unwrap(), replica.tree_head().unwrap());
    assert_eq!((a.position, a.hash, a.root), (b.position, b.hash, b.root));
    let report = replica
        .verify(&Default::default(), &mut |_, _| {})
        .expect("verify");
    assert!(report.ok, "{report:?}");
    drop(replica);
    let reopened = Journal::open(dirs.1.path(), Options::default()).expect("reopen");
    assert_eq!(reopened.head(), source.head());
    let event = reopened.get("evt-s0-42").expect("get");
    assert!(event.is_some(), "the index finds copied events by id");
}

#[test]
fn a_flipped_byte_a_gap_and_a_repeat_are_refused_with_their_position() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_source, frames) = source(dirs.0.path());
    let replica = Journal::open(dirs.1.path(), small_segments()).expect("open replica");
    let requests = requests(&frames, 1);
    block(replica.append_frames(&requests[0])).expect("first batch");

    let mut flipped = requests[1].clone();
    let at = FRAME_HEADER_LEN + 10;
    flipped[at] ^= 0x40;
    let refused = block(replica.append_frames(&flipped)).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::FrameRefused {
                position: Position(2),
                ..
            }
        ),
        "{refused}"
    );

    let gap = block(replica.append_frames(&requests[2])).unwrap_err();
    assert!(
        matches!(
            gap,
            Error::FrameRefused {
                position: Position(9),
                ..
            }
        ),
        "{gap}"
    );
    let repeat = block(replica.append_frames(&requests[0])).unwrap_err();
    assert!(
        matches!(
            repeat,
            Error::FrameRefused {
                position: Position(1),
                ..
            }
        ),
        "{repeat}"
    );
    assert_eq!(
        replica.head().position,
        Position(1),
        "nothing refused was written"
    );
    block(replica.append_frames(&requests[1])).expect("the true second batch");
    assert_eq!(replica.head().position, Position(8));
}

#[test]
fn a_body_edited_with_its_checksums_recomputed_does_not_chain() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_source, frames) = source(dirs.0.path());
    let replica = Journal::open(dirs.1.path(), small_segments()).expect("open replica");
    let (frame, _) = &frames[0];
    let (header, body) = journal_format::frame::decode_frame(frame).expect("frame");
    let mut edited_body = body.to_vec();
    let at = edited_body.len() - 1;
    edited_body[at] ^= 0x01;
    // Framed again, checksums and all, after another link: the checksums hold, the link
    // does not chain to the replica's head.
    let mut forged = Vec::new();
    journal_format::frame::encode_frame(&mut forged, &header.hash, &header.meta, &edited_body)
        .expect("encode");
    let refused = block(replica.append_frames(&forged)).unwrap_err();
    match refused {
        Error::FrameRefused { position, reason } => {
            assert_eq!(position, Position(1));
            assert!(reason.contains("does not chain"), "{reason}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn a_request_refused_part_way_leaves_its_good_prefix_to_be_sent_again() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_source, frames) = source(dirs.0.path());
    let replica = Journal::open(dirs.1.path(), small_segments()).expect("open replica");
    let requests = requests(&frames, 1);
    block(replica.append_frames(&requests[0])).expect("first batch");
    // Positions 2..=308 (two batches, recorded at two times), then a gap: refused whole, after
    // its first frames were staged.
    let mut gapped = requests[1].clone();
    gapped.extend_from_slice(&requests[2]);
    gapped.extend_from_slice(&requests[4]);
    let refused = block(replica.append_frames(&gapped)).unwrap_err();
    assert!(matches!(refused, Error::FrameRefused { .. }), "{refused}");
    assert_eq!(replica.head().position, Position(1));
    // The staged frames' times and ids were rolled back with them: the same frames pass.
    block(replica.append_frames(&requests[1])).expect("the good prefix again");
    block(replica.append_frames(&requests[2])).expect("the batch after it");
    let report = replica
        .verify(&Default::default(), &mut |_, _| {})
        .expect("verify");
    assert!(report.ok, "{report:?}");
}
