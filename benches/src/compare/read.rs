//! The read workload: every event of a journal read back in order, with the chain verified and
//! without (checksums only), as records (`Journal::scan`: the frames checked, bodies not
//! decoded) and as decoded events (`Journal::read`), against a raw read of the same segment
//! files' bytes. The page cache is warm for all of them: this measures the read path, not the
//! disk. Beside them, the index rebuilt from the log (the index file deleted, then the journal
//! opened and closed), which measures the indexer's work per event against the decoded read.

use std::fmt::Write as _;
use std::io::Read as _;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use journal_engine::{Chain, Journal, Options};
use journal_format::Position;
use serde_json::json;

use super::stats::median_duration;
use super::{built_journal, dir_bytes, Context, Res, Section};

/// Reads every segment file under `dir/segments` in 1 MiB chunks; returns the bytes read.
fn raw_read(dir: &Path) -> Res<u64> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("segments"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    for path in files {
        let mut file = std::fs::File::open(path)?;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total)
}

/// Scans every record, handing each body to `black_box`; returns how many.
fn journal_scan(journal: &Journal, chain: Chain) -> Res<u64> {
    let mut n = 0u64;
    journal.scan(Position(1), None, chain, |record| {
        n += 1;
        std::hint::black_box(record.body);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(n)
}

fn journal_read(journal: &Journal, chain: Chain) -> Res<u64> {
    let mut n = 0u64;
    for event in journal.read(Position(1), None, chain) {
        let event = event?;
        n += u64::from(event.position.0 > 0);
    }
    Ok(n)
}

/// Deletes the index and opens and closes the journal, which rebuilds the index from the log;
/// returns the index's size in bytes.
fn index_rebuild(dir: &Path) -> Res<u64> {
    std::fs::remove_file(dir.join("index.redb"))?;
    let journal = Journal::open(dir, Options::default())?;
    journal.close();
    Ok(std::fs::metadata(dir.join("index.redb"))?.len())
}

/// The median time of each way of reading the whole journal.
struct ReadTimes {
    raw: Duration,
    records_unverified: Duration,
    records_verified: Duration,
    unverified: Duration,
    verified: Duration,
}

/// Times each way of reading the `head` events of the journal in `dir`, `ctx.rounds` times
/// each, interleaved round by round.
fn read_times(ctx: &Context, journal: &Journal, dir: &Path, head: u64) -> Res<ReadTimes> {
    let mut times: [Vec<Duration>; 5] = Default::default();
    for _ in 0..ctx.rounds {
        for (mode, slot) in times.iter_mut().enumerate() {
            let t = Instant::now();
            let n = match mode {
                0 => {
                    raw_read(dir)?;
                    head
                }
                1 => journal_scan(journal, Chain::Unverified)?,
                2 => journal_scan(journal, Chain::Verified)?,
                3 => journal_read(journal, Chain::Unverified)?,
                _ => journal_read(journal, Chain::Verified)?,
            };
            slot.push(t.elapsed());
            if n != head {
                return Err(format!("read {n} events of {head}").into());
            }
        }
    }
    let [raw, records_unverified, records_verified, unverified, verified] =
        times.map(|mut t| median_duration(&mut t));
    Ok(ReadTimes {
        raw,
        records_unverified,
        records_verified,
        unverified,
        verified,
    })
}

/// The median time of `ctx.rounds` index rebuilds, and the index's size in bytes.
fn rebuild_time(ctx: &Context, dir: &Path) -> Res<(Duration, u64)> {
    let mut rebuilds = Vec::new();
    let mut index_bytes = 0;
    for _ in 0..ctx.rounds {
        let t = Instant::now();
        index_bytes = index_rebuild(dir)?;
        rebuilds.push(t.elapsed());
    }
    Ok((median_duration(&mut rebuilds), index_bytes))
}

/// The table of read modes (written to `text`), and its rows as JSON.
fn modes_table(
    text: &mut String,
    times: &ReadTimes,
    head: u64,
    log_bytes: u64,
) -> Res<serde_json::Map<String, serde_json::Value>> {
    writeln!(
        text,
        "{:<44} {:>10} {:>10} {:>12} {:>9} {:>7}",
        "read", "events", "ms", "events/s", "MB/s", "×raw"
    )?;
    let raw = times.raw;
    let mut rows = serde_json::Map::new();
    for (name, key, d) in [
        ("raw read of the segment files", "raw", raw),
        (
            "records, unverified (scan: checksums)",
            "recordsUnverified",
            times.records_unverified,
        ),
        (
            "records, verified (scan: checksums+chain)",
            "recordsVerified",
            times.records_verified,
        ),
        (
            "events, unverified (read: checksums+decode)",
            "unverified",
            times.unverified,
        ),
        (
            "events, verified (read: +chain+decode)",
            "verified",
            times.verified,
        ),
    ] {
        let per_s = head as f64 / d.as_secs_f64();
        let ratio = raw.as_secs_f64() / d.as_secs_f64();
        let mb = log_bytes as f64 / d.as_secs_f64() / 1e6;
        writeln!(
            text,
            "{name:<44} {head:>10} {:>10.1} {per_s:>12.0} {mb:>9.0} {ratio:>7.3}",
            super::ms(d)
        )?;
        rows.insert(
            key.into(),
            json!({"ms": super::ms(d), "eventsPerSec": per_s, "mbPerSec": mb, "ratioToRaw": ratio}),
        );
    }
    Ok(rows)
}

/// Runs the read workload.
///
/// # Errors
/// I/O and journal errors, or a read that does not return every event.
pub fn run(ctx: &Context) -> Res<Section> {
    let events = ctx.events_or(2_000, 1_000_000);
    let dir = built_journal(ctx, events)?;
    let journal = Journal::open(&dir, Options::default())?;
    let head = journal.head().position.0;
    let log_bytes = dir_bytes(&dir.join("segments"));
    raw_read(&dir)?; // Warm the page cache.
    let times = read_times(ctx, &journal, &dir, head)?;
    journal.close();
    let (rebuild, index_bytes) = rebuild_time(ctx, &dir)?;
    let mut text = String::new();
    let rows = modes_table(&mut text, &times, head, log_bytes)?;
    let rebuild_per_s = head as f64 / rebuild.as_secs_f64();
    let rebuild_ratio = times.unverified.as_secs_f64() / rebuild.as_secs_f64();
    writeln!(
        text,
        "index rebuilt from the log: {:.1} ms, {rebuild_per_s:.0} events/s, {rebuild_ratio:.3} × the unverified decoded read; {:.1} index bytes per event",
        super::ms(rebuild),
        index_bytes as f64 / head as f64
    )?;
    let records_ratio =
        times.records_verified.as_secs_f64() / times.records_unverified.as_secs_f64();
    let events_ratio = times.verified.as_secs_f64() / times.unverified.as_secs_f64();
    writeln!(
        text,
        "unverified ÷ verified speed: records {records_ratio:.2} ×, events {events_ratio:.2} ×"
    )?;
    Ok(Section {
        name: "read",
        text,
        json: json!({
            "events": head,
            "logBytes": log_bytes,
            "rounds": ctx.rounds,
            "modes": rows,
            "unverifiedOverVerified": {"records": records_ratio, "events": events_ratio},
            "indexRebuild": {
                "ms": super::ms(rebuild),
                "eventsPerSec": rebuild_per_s,
                "ratioToUnverifiedRead": rebuild_ratio,
                "indexBytesPerEvent": index_bytes as f64 / head as f64,
            },
        }),
    })
}
