//! The tree workload: what the Merkle tree costs and gives. Durable appends with the tree kept
//! against the same appends without it (`Options::tree`), in batches of 1, 100 and 1,000 from
//! one producer, taking turns within each round; then, on the journal of 1,000,000 events the
//! read and open workloads share, the time to produce and to check inclusion and consistency
//! proofs, and the tree's bytes on disk per event.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use journal_engine::{AppendOptions, Journal, Options};
use journal_format::merkle::{leaf_hash, verify_consistency, verify_inclusion, TreeHash};
use journal_format::{Envelope, Position};
use serde_json::{json, Value};

use super::stats::median;
use super::{Context, Res, Section};

/// Proofs timed per kind; the median is reported.
const PROOFS: u64 = 1000;

/// One append cell's figures: events/s without and with the tree, medians over the rounds.
struct Cell {
    batch: u64,
    events: u64,
    without: f64,
    with: f64,
    /// From the last acknowledgement to the tree head of every event, with the tree.
    catch_up_ms: f64,
}

/// Runs the tree workload.
///
/// # Errors
/// The journal's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let mut cells = Vec::new();
    for batch in [1u64, 100, 1000] {
        let events = if batch == 1 {
            ctx.events_or(200, 2_500)
        } else {
            ctx.events_or(2_000, 50_000)
        };
        cells.push(append_cell(ctx, batch, events)?);
    }
    let size = ctx.events_or(20_000, 1_000_000);
    let proofs = proofs(ctx, size)?;
    let mut text = String::new();
    writeln!(
        text,
        "appends, one producer, durable: the tree kept against not"
    )?;
    writeln!(
        text,
        "{:>6} {:>8} {:>14} {:>14} {:>8} {:>14}",
        "batch", "events", "without ev/s", "with ev/s", "×without", "catch-up ms"
    )?;
    for c in &cells {
        writeln!(
            text,
            "{:>6} {:>8} {:>14.0} {:>14.0} {:>8.3} {:>14.2}",
            c.batch,
            c.events,
            c.without,
            c.with,
            c.with / c.without,
            c.catch_up_ms
        )?;
    }
    text.push_str(&proofs.0);
    let json = json!({
        "append": cells.iter().map(|c| json!({
            "batch": c.batch, "events": c.events, "without_events_per_s": c.without,
            "with_events_per_s": c.with, "ratio": c.with / c.without,
            "catch_up_ms": c.catch_up_ms,
        })).collect::<Vec<_>>(),
        "proofs": proofs.1,
    });
    Ok(Section {
        name: "tree",
        text,
        json,
    })
}

/// Appends `events` events in batches of `batch`, durably, with and without the tree, taking
/// turns over the rounds.
fn append_cell(ctx: &Context, batch: u64, events: u64) -> Res<Cell> {
    let all: Vec<Envelope> = (0..events).map(crate::workload_event).collect();
    let batches: Vec<Vec<Envelope>> = all.chunks(batch as usize).map(<[_]>::to_vec).collect();
    let (mut without, mut with, mut catch_up) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ctx.rounds.max(1) {
        for keep in [round % 2 == 0, round % 2 == 1] {
            let dir = ctx.fresh_dir(&format!("tree-append-{batch}"))?;
            let journal = Journal::open(
                &dir,
                Options {
                    tree: keep,
                    ..Options::default()
                },
            )?;
            let started = Instant::now();
            for b in &batches {
                journal.append_batch_blocking(b.clone(), AppendOptions::default())?;
            }
            let appended = started.elapsed();
            let rate = events as f64 / appended.as_secs_f64();
            if keep {
                let head = journal.tree_head()?;
                catch_up.push(super::ms(started.elapsed() - appended));
                assert_eq!(head.position.0, events, "the tree holds every event");
                with.push(rate);
            } else {
                without.push(rate);
            }
            journal.close();
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(Cell {
        batch,
        events,
        without: median(&mut without),
        with: median(&mut with),
        catch_up_ms: median(&mut catch_up),
    })
}

/// Microseconds of a duration.
fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Spread positions `1..=size` for the proofs: a multiplicative walk, the same every run.
fn spread(size: u64, k: u64) -> u64 {
    1 + (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) % size
}

/// The medians of producing and checking [`PROOFS`] inclusion and consistency proofs on the
/// tree of `size` events whose root is `root`: per kind, produce µs, check µs, hashes.
fn time_proofs(journal: &Journal, size: u64, root: &TreeHash) -> Res<[[f64; 3]; 2]> {
    let mut figures: [[Vec<f64>; 3]; 2] = Default::default();
    for k in 0..PROOFS {
        let position = spread(size, k);
        let body = journal.stored_body(Position(position))?;
        let t = Instant::now();
        let proof = journal.inclusion_proof(Position(position), size)?;
        figures[0][0].push(us(t.elapsed()));
        let t = Instant::now();
        verify_inclusion(&leaf_hash(&body), position - 1, size, &proof, root)?;
        figures[0][1].push(us(t.elapsed()));
        figures[0][2].push(proof.len() as f64);

        let old = spread(size, k + PROOFS);
        let old_root = journal.tree_root(old)?;
        let t = Instant::now();
        let proof = journal.consistency_proof(old, size)?;
        figures[1][0].push(us(t.elapsed()));
        let t = Instant::now();
        verify_consistency(old, size, &old_root, root, &proof)?;
        figures[1][1].push(us(t.elapsed()));
        figures[1][2].push(proof.len() as f64);
    }
    Ok(figures.map(|kind| kind.map(|mut values| median(&mut values))))
}

/// Proofs on the shared journal of `events` events (or a few more): the medians of producing and checking
/// [`PROOFS`] inclusion and consistency proofs, and the tree's bytes per event.
fn proofs(ctx: &Context, events: u64) -> Res<(String, Value)> {
    let dir = super::built_journal(ctx, events)?;
    let opened = Instant::now();
    let journal = Journal::open(&dir, Options::default())?;
    let head = journal.tree_head()?;
    let open_ms = super::ms(opened.elapsed());
    // The open workload may have appended to the shared journal: the proofs are against its head.
    let size = head.position.0;
    let timed = time_proofs(&journal, size, &head.root)?;
    journal.close();
    let tree_bytes = super::dir_bytes(&dir.join("tree"));
    let per_event = tree_bytes as f64 / size as f64;
    let mut text = String::new();
    writeln!(
        text,
        "\nproofs on {size} events (median of {PROOFS}; the open and tree head took {open_ms:.1} ms)"
    )?;
    writeln!(
        text,
        "{:<12} {:>12} {:>10} {:>8}",
        "proof", "produce µs", "check µs", "hashes"
    )?;
    let [inclusion, consistency] = timed;
    for (name, [p, c, n]) in [("inclusion", inclusion), ("consistency", consistency)] {
        writeln!(text, "{name:<12} {p:>12.1} {c:>10.1} {n:>8.0}")?;
    }
    writeln!(
        text,
        "tree on disk: {tree_bytes} bytes, {per_event:.1} per event"
    )?;
    let value = json!({
        "events": size,
        "inclusion": {"produce_us": inclusion[0], "check_us": inclusion[1], "hashes": inclusion[2]},
        "consistency": {"produce_us": consistency[0], "check_us": consistency[1], "hashes": consistency[2]},
        "tree_bytes": tree_bytes,
        "tree_bytes_per_event": per_event,
        "open_and_tree_head_ms": open_ms,
    });
    Ok((text, value))
}
