//! The encryption workload: what sealing content at rest costs. Durable appends with the
//! journal encrypted against the same appends without it, in batches of 100 and 1,000 from one
//! producer, taking turns within each round; the read-back of those journals (checksums and
//! chain checked, content opened); and the time to redact one session of 10,000 events (its
//! key destroyed, the fact appended) in a journal of 64 sessions.

use std::fmt::Write as _;
use std::time::Instant;

use journal_engine::seams::SystemEntropy;
use journal_engine::{
    AppendOptions, Chain, Encryption, Journal, MasterKey, Options, Redaction, Subject,
};
use journal_format::{Envelope, Position};
use serde_json::json;

use super::stats::median;
use super::{Context, Res, Section};

/// One cell's figures: events/s without and with encryption, medians over the rounds.
struct Cell {
    batch: u64,
    events: u64,
    append: [f64; 2],
    read: [f64; 2],
}

fn options(encrypted: bool) -> Options {
    Options {
        encryption: encrypted.then(|| Encryption {
            master: MasterKey::generate(&SystemEntropy),
            subject: Subject::Session,
        }),
        ..Options::default()
    }
}

/// Runs the encryption workload.
///
/// # Errors
/// The journal's errors.
pub fn run(ctx: &Context) -> Res<Section> {
    let mut cells = Vec::new();
    for batch in [100u64, 1000] {
        cells.push(cell(ctx, batch, ctx.events_or(2_000, 50_000))?);
    }
    let session_events = ctx.events_or(1_000, 10_000);
    let (redact_ms, total) = redact(ctx, session_events)?;
    let mut text = String::new();
    writeln!(
        text,
        "encryption at rest, one producer, durable: sealed against plaintext"
    )?;
    writeln!(
        text,
        "{:>6} {:>8} {:>14} {:>14} {:>7} {:>14} {:>14} {:>7}",
        "batch", "events", "append off/s", "append on/s", "×off", "read off/s", "read on/s", "×off"
    )?;
    for c in &cells {
        writeln!(
            text,
            "{:>6} {:>8} {:>14.0} {:>14.0} {:>7.3} {:>14.0} {:>14.0} {:>7.3}",
            c.batch,
            c.events,
            c.append[0],
            c.append[1],
            c.append[1] / c.append[0],
            c.read[0],
            c.read[1],
            c.read[1] / c.read[0]
        )?;
    }
    writeln!(
        text,
        "redact one session of {session_events} events in a journal of {total}: {redact_ms:.1} ms"
    )?;
    let json = json!({
        "cells": cells.iter().map(|c| json!({
            "batch": c.batch, "events": c.events,
            "append_off_events_per_s": c.append[0], "append_on_events_per_s": c.append[1],
            "append_ratio": c.append[1] / c.append[0],
            "read_off_events_per_s": c.read[0], "read_on_events_per_s": c.read[1],
            "read_ratio": c.read[1] / c.read[0],
        })).collect::<Vec<_>>(),
        "redact": {"session_events": session_events, "journal_events": total, "ms": redact_ms},
    });
    Ok(Section {
        name: "encrypt",
        text,
        json,
    })
}

/// Appends `events` events in batches of `batch`, durably, into a journal encrypted and one
/// not, taking turns over the rounds; then reads each back.
fn cell(ctx: &Context, batch: u64, events: u64) -> Res<Cell> {
    let all: Vec<Envelope> = (0..events).map(crate::workload_event).collect();
    let batches: Vec<Vec<Envelope>> = all.chunks(batch as usize).map(<[_]>::to_vec).collect();
    let mut append: [Vec<f64>; 2] = Default::default();
    let mut read: [Vec<f64>; 2] = Default::default();
    for round in 0..ctx.rounds.max(1) {
        for encrypted in [round % 2 == 0, round % 2 == 1] {
            let dir = ctx.fresh_dir(&format!("encrypt-{batch}"))?;
            let journal = Journal::open(&dir, options(encrypted))?;
            // Given, not lent, as `journal serve` and `journal append` hand over the batches
            // they parse: the journal may seal each in place. Copied before the clock.
            let given = batches.clone();
            let started = Instant::now();
            for b in given {
                journal.append_batch_blocking(b, AppendOptions::default())?;
            }
            let rate = events as f64 / started.elapsed().as_secs_f64();
            append[usize::from(encrypted)].push(rate);
            let started = Instant::now();
            let mut n = 0u64;
            for event in journal.read(Position::FIRST, None, Chain::Verified) {
                event?;
                n += 1;
            }
            assert_eq!(n, events, "every event reads back");
            read[usize::from(encrypted)].push(n as f64 / started.elapsed().as_secs_f64());
            journal.close();
            std::fs::remove_dir_all(&dir)?;
        }
    }
    Ok(Cell {
        batch,
        events,
        append: append.map(|mut v| median(&mut v)),
        read: read.map(|mut v| median(&mut v)),
    })
}

/// The time to redact session `sess-0000` holding `session_events` events, in a journal of 64
/// sessions of as many events each as the workload's events give it; and the journal's size.
fn redact(ctx: &Context, session_events: u64) -> Res<(f64, u64)> {
    let total = session_events * 64;
    let dir = ctx.fresh_dir("encrypt-redact")?;
    let journal = Journal::open(&dir, options(true))?;
    let all: Vec<Envelope> = (0..total).map(crate::workload_event).collect();
    for b in all.chunks(1000) {
        journal.append_batch_blocking(b, AppendOptions::default())?;
    }
    let started = Instant::now();
    let redacted = journal.redact(
        &Redaction::Session("sess-0000".into()),
        "compare",
        Some("benchmark"),
    )?;
    let ms = super::ms(started.elapsed());
    assert_eq!(redacted.events, session_events);
    journal.close();
    std::fs::remove_dir_all(&dir)?;
    Ok((ms, total))
}
