//! Criterion benchmarks of the journal's hot paths: frame encode/decode, chain hashing (runs of
//! frames against a link per frame),
//! envelope encoding, durable appends at batch sizes 1, 100 and 1000, sequential reads verified
//! and unverified, index lookups by event id, the projection folds (`StreamState`, `Activity`)
//! over one generated session, and replay (building one session's narrative).

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use journal_benches::workload_event;
use journal_engine::{AppendOptions, Chain, Durability, Journal, Options};
use journal_format::frame::{decode_frame, encode_frame, link_group};
use journal_format::{
    ChainHash, Envelope, FrameFlags, FrameMeta, GroupCheck, Position, FRAME_HEADER_LEN,
    LINK_GROUP_BYTES,
};
use journal_projections::activity::Activity;
use journal_projections::{workload, Event, StreamState};
use journal_replay::{narrative, Scope};

fn frames(c: &mut Criterion) {
    let body = workload_event(7).to_msgpack().expect("encodes");
    let meta = FrameMeta {
        position: Position(7),
        recorded_at_ns: 1,
        stream_version: 1,
        flags: FrameFlags::END_OF_BATCH,
    };
    let mut group = c.benchmark_group("frame");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("encode", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            out.clear();
            encode_frame(&mut out, &ChainHash::GENESIS, &meta, &body).expect("encodes")
        });
    });
    let mut frame = Vec::new();
    encode_frame(&mut frame, &ChainHash::GENESIS, &meta, &body).expect("encodes");
    group.bench_function("decode_checksums", |b| {
        b.iter(|| decode_frame(&frame).expect("decodes").0.hash)
    });
    group.bench_function("decode_checksums_and_chain", |b| {
        let mut check = GroupCheck::default();
        b.iter(|| {
            let (header, _) = decode_frame(&frame).expect("decodes");
            check
                .push(&ChainHash::GENESIS, &header, &frame)
                .expect("links")
        })
    });
    group.finish();

    // The chain over 1,000 frames of the workload's size: linked in runs of about 64 KiB, as
    // the writer does, against the baseline of a link per frame (format version 1).
    let mut group = c.benchmark_group("chain_1000_frames");
    group.throughput(Throughput::Elements(1000));
    let unlinked: Vec<u8> = (0..1000u64)
        .flat_map(|i| {
            let mut out = Vec::new();
            let meta = FrameMeta {
                position: Position(i + 1),
                ..meta
            };
            journal_format::frame::encode_unlinked(&mut out, &meta, &body).expect("encodes");
            out
        })
        .collect();
    let frame_len = FRAME_HEADER_LEN + body.len();
    let run_frames = (LINK_GROUP_BYTES as usize).div_ceil(frame_len);
    group.bench_function("runs_of_64_kib", |b| {
        let mut buf = unlinked.clone();
        b.iter(|| {
            let mut prev = ChainHash::GENESIS;
            for run in buf.chunks_mut(run_frames * frame_len) {
                prev = link_group(run, &prev).expect("links");
                for header in run.chunks_mut(frame_len) {
                    header[..4].fill(0);
                    header[40..72].fill(0);
                }
            }
            prev
        })
    });
    group.bench_function("link_per_frame_baseline", |b| {
        b.iter(|| {
            let mut prev = ChainHash::GENESIS;
            for frame in unlinked.chunks(frame_len) {
                let mut hasher = blake3::Hasher::new();
                hasher.update(&prev.0);
                hasher.update(&frame[4..40]);
                hasher.update(&frame[FRAME_HEADER_LEN..]);
                prev = ChainHash(*hasher.finalize().as_bytes());
            }
            prev
        })
    });
    group.finish();

    let event = workload_event(7);
    let mut group = c.benchmark_group("envelope");
    group.bench_function("to_msgpack", |b| {
        b.iter(|| event.to_msgpack().expect("encodes"))
    });
    group.bench_function("from_msgpack", |b| {
        b.iter(|| Envelope::from_msgpack(&body).expect("decodes"))
    });
    group.finish();
}

fn appends(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_durable");
    group.sample_size(10);
    for batch in [1u64, 100, 1000] {
        group.throughput(Throughput::Elements(batch));
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            let dir = tempfile::tempdir().expect("tempdir");
            let journal = Journal::open(dir.path(), Options::default()).expect("opens");
            let mut next = 0u64;
            b.iter_batched(
                || {
                    let events: Vec<_> = (next..next + batch).map(workload_event).collect();
                    next += batch;
                    events
                },
                |events| {
                    journal
                        .append_batch_blocking(events, AppendOptions::default())
                        .expect("appends")
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Journal::open(dir.path(), Options::default()).expect("opens");
    let n = 20_000u64;
    for start in (0..n).step_by(1000) {
        journal
            .append_batch_blocking(
                (start..start + 1000)
                    .map(workload_event)
                    .collect::<Vec<_>>(),
                AppendOptions::default(),
            )
            .expect("appends");
    }
    let mut group = c.benchmark_group("read_sequential");
    group.throughput(Throughput::Elements(n));
    group.sample_size(10);
    for chain in [Chain::Unverified, Chain::Verified] {
        let name = if chain.verified() {
            "verified"
        } else {
            "unverified"
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                journal
                    .read(Position(1), None, chain)
                    .map(|e| e.expect("reads").position.0)
                    .sum::<u64>()
            });
        });
    }
    group.finish();
    let mut group = c.benchmark_group("index");
    let mut i = 0u64;
    group.bench_function("get_by_event_id", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            journal
                .get(&format!("evt-{i:012}"))
                .expect("reads")
                .expect("present")
                .position
        });
    });
    group.finish();
}

/// One generated session of about 10,000 events, stored (buffered) and read back: the input
/// of the fold and replay benches.
fn session_events() -> (tempfile::TempDir, Vec<journal_format::StoredEvent>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Journal::open(
        dir.path(),
        Options {
            durability: Durability::Buffered {
                sync_interval: std::time::Duration::from_millis(200),
            },
            ..Options::default()
        },
    )
    .expect("opens");
    for chunk in workload::generate(7, 1, 10_000).chunks(1000) {
        journal
            .append_batch_blocking(chunk, AppendOptions::default())
            .expect("appends");
    }
    let events = journal
        .read(Position(1), None, Chain::Unverified)
        .map(|e| e.expect("reads"))
        .collect();
    journal.close();
    (dir, events)
}

fn folds_and_replay(c: &mut Criterion) {
    let (_dir, events) = session_events();
    let head = events.last().map_or(0, |e| e.position.0);
    let mut group = c.benchmark_group("projection_fold");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.sample_size(10);
    group.bench_function("stream_state", |b| {
        b.iter(|| StreamState::fold(&events).all_incidents().len())
    });
    group.bench_function("activity", |b| {
        b.iter(|| {
            let mut activity = Activity::default();
            for e in &events {
                activity.apply(&Event::new(e));
            }
            activity
        })
    });
    group.finish();
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.sample_size(10);
    let scope = Scope::Session("sess_00000".into());
    group.bench_function("narrative_build", |b| {
        b.iter(|| narrative::build(&scope, &events, None, head).steps.len())
    });
    group.finish();
}

#[allow(missing_docs)] // The macro generates an undocumented function.
mod group {
    use super::*;
    criterion_group!(benches, frames, appends, reads, folds_and_replay);
}
use group::benches;
criterion_main!(benches);
