//! The archive workload: the time to archive about 1 GiB of sealed segments (`--quick`: 8 MiB)
//! to a directory on the same disk (each file copied, hashed and synced, the manifest replaced,
//! the live files removed), the time to restore them, and the verified read of every event with
//! the archive attached against the same read with every segment live, taking turns in each
//! round.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use journal_engine::{
    AppendOptions, ArchiveRequest, Chain, Durability, Journal, Limits, Options, Retention,
};
use journal_format::Position;
use serde_json::json;

use super::stats::median;
use super::{Context, Res, Section};

/// The figures of one run, medians over the rounds.
struct Figures {
    events: u64,
    segments: usize,
    bytes: u64,
    archive_ms: f64,
    restore_ms: f64,
    read_live: f64,
    read_attached: f64,
}

fn options(segment_bytes: u64, archive: Option<&Path>) -> Options {
    Options {
        limits: Limits {
            segment_bytes_max: segment_bytes,
            batch_bytes_max: segment_bytes / 2,
            event_bytes_max: u32::try_from(segment_bytes / 4)
                .unwrap_or(u32::MAX)
                .min(1 << 20),
            ..Limits::default()
        },
        archive: archive.map(Path::to_path_buf),
        ..Options::default()
    }
}

/// Runs the archive workload.
///
/// # Errors
/// The journal's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let (target, segment) = if ctx.quick {
        (8u64 << 20, 1u64 << 20)
    } else {
        (1u64 << 30, 64u64 << 20)
    };
    let f = measure(ctx, target, segment)?;
    let mb = f.bytes as f64 / 1e6;
    let mut text = String::new();
    writeln!(
        text,
        "archive {} sealed segments ({mb:.1} MB, {} events) to a directory on the same disk",
        f.segments, f.events
    )?;
    writeln!(
        text,
        "archive {:.1} ms ({:.0} MB/s); restore {:.1} ms ({:.0} MB/s)",
        f.archive_ms,
        mb / (f.archive_ms / 1e3),
        f.restore_ms,
        mb / (f.restore_ms / 1e3)
    )?;
    writeln!(
        text,
        "verified read of every event: all live {:.0}/s, archive attached {:.0}/s ({:.3} ×)",
        f.read_live,
        f.read_attached,
        f.read_attached / f.read_live
    )?;
    let json = json!({
        "segments": f.segments, "bytes": f.bytes, "events": f.events,
        "archive_ms": f.archive_ms, "archive_mb_per_s": mb / (f.archive_ms / 1e3),
        "restore_ms": f.restore_ms,
        "read_live_events_per_s": f.read_live,
        "read_attached_events_per_s": f.read_attached,
        "read_ratio": f.read_attached / f.read_live,
    });
    Ok(Section {
        name: "archive",
        text,
        json,
    })
}

/// Builds a journal of a little over `target` bytes in segments of `segment` bytes, then, each
/// round, reads it all live, archives every sealed segment but the head's, reads it all with
/// the archive attached, and restores it.
fn measure(ctx: &Context, target: u64, segment: u64) -> Res<Figures> {
    let dir = ctx.fresh_dir("archive-journal")?;
    let archive = ctx.dir.join("archive-store");
    let events = build(&dir, target, segment)?;
    let mut times: [Vec<f64>; 4] = Default::default();
    let (mut segments, mut bytes) = (0, 0);
    for _ in 0..ctx.rounds.max(1) {
        let journal = Journal::open(&dir, options(segment, None))?;
        times[2].push(read_all(&journal, events)?);
        let head = journal.head().position;
        let started = Instant::now();
        let outcome = journal.archive(&ArchiveRequest {
            retention: Retention::Before(head),
            to: archive.clone(),
            dry_run: false,
        })?;
        times[0].push(super::ms(started.elapsed()));
        (segments, bytes) = (outcome.segments.len(), outcome.bytes);
        journal.close();
        let journal = Journal::open(&dir, options(segment, Some(&archive)))?;
        times[3].push(read_all(&journal, events)?);
        let started = Instant::now();
        journal.restore(&archive, None)?;
        times[1].push(super::ms(started.elapsed()));
        journal.close();
        std::fs::remove_dir_all(&archive)?;
    }
    std::fs::remove_dir_all(&dir)?;
    let [mut archive_ms, mut restore_ms, mut live, mut attached] = times;
    Ok(Figures {
        events,
        segments,
        bytes,
        archive_ms: median(&mut archive_ms),
        restore_ms: median(&mut restore_ms),
        read_live: median(&mut live),
        read_attached: median(&mut attached),
    })
}

/// Appends workload events (buffered, in batches of 250) until the sealed segments hold
/// `target` bytes; returns how many.
fn build(dir: &Path, target: u64, segment: u64) -> Res<u64> {
    let journal = Journal::open(
        dir,
        Options {
            durability: Durability::Buffered {
                sync_interval: std::time::Duration::from_millis(200),
            },
            ..options(segment, None)
        },
    )?;
    let sealed = (target / segment).max(2) + 1;
    let mut at = 0u64;
    while journal.status()?.segments < usize::try_from(sealed)? {
        journal.append_batch_blocking(
            (at..at + 250)
                .map(crate::workload_event)
                .collect::<Vec<_>>(),
            AppendOptions::default(),
        )?;
        at += 250;
    }
    journal.close();
    Ok(at)
}

/// Reads every event, chain verified; events per second.
fn read_all(journal: &Journal, events: u64) -> Res<f64> {
    let started = Instant::now();
    let mut n = 0u64;
    for event in journal.read(Position::FIRST, None, Chain::Verified) {
        event?;
        n += 1;
    }
    if n != events {
        return Err(format!("read {n} events of {events}").into());
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
