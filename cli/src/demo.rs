//! `journal demo`: the whole product in a few seconds, in `./journal-demo` (or `--out DIR`),
//! with no setup. It generates a realistic agent workload, appends part of it, streams more into
//! a second process and kills that writer with SIGKILL mid-stream, reopens the journal (showing
//! what recovery found, and that every acknowledged event is there), appends the rest (what was
//! already stored is recognised by its event id), catches the read models up, prints a session
//! snapshot with its freshness and the narrative of one run, writes the HTML replay, and ends
//! with `verify`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use journal_engine::{AppendOptions, Journal, Options, VerifyOptions};
use journal_format::Envelope;
use journal_projections::{workload, ReadModels};
use journal_replay::Scope;

use crate::{fail, out, Failure};

/// The marker that says a directory holds a demo journal (and may be replaced by the next run).
/// Nothing else is ever removed.
const MARKER: &str = "DEMO";

fn step(n: u32, text: &str) -> std::io::Result<()> {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        out::line(format_args!("\n\x1b[1m{n}. {text}\x1b[0m"))
    } else {
        out::line(format_args!("\n{n}. {text}"))
    }
}

fn prepare(dir: &Path) -> Result<(), Failure> {
    if dir.exists() {
        if !dir.join(MARKER).exists() {
            return Err(fail(format!(
                "{} exists and is not a demo journal; pass --out with another directory",
                dir.display()
            )));
        }
        std::fs::remove_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    std::fs::write(
        dir.join(MARKER),
        "made by `journal demo`; the next run replaces this directory\n",
    )
    .map_err(|e| fail(format!("{}: {e}", dir.display())))
}

/// Streams `events` into a child `journal append --stream` and kills it with SIGKILL after
/// `kill_after` acknowledgements; returns the acknowledged event ids.
fn stream_then_kill(
    dir: &Path,
    events: &[Envelope],
    kill_after: usize,
) -> Result<Vec<String>, Failure> {
    let exe =
        std::env::current_exe().map_err(|e| fail(format!("finding the journal binary: {e}")))?;
    let mut child = Command::new(exe)
        .arg("--dir")
        .arg(dir)
        .args(["append", "--stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail(format!("starting the writer: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("the writer has no stdout"))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| fail("the writer has no stdin"))?;
    let lines: Vec<String> = events
        .iter()
        .map(|e| e.to_json_value().to_string())
        .collect();
    // Feed from a thread: the writer acknowledges while it reads.
    let feeder = std::thread::spawn(move || {
        for line in lines {
            if writeln!(stdin, "{line}").is_err() {
                break; // killed
            }
        }
    });
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Ok(ack) = serde_json::from_str::<serde_json::Value>(&line) {
            if let Some(id) = ack["eventId"].as_str() {
                acked.push(id.to_string());
            }
        }
        if acked.len() >= kill_after {
            let _ = child.kill(); // SIGKILL
            break;
        }
    }
    let _ = child.wait();
    let _ = feeder.join();
    Ok(acked)
}

/// Runs the demo in `dir`.
pub async fn run(dir: &Path) -> Result<u8, Failure> {
    let clock = journal_engine::seams::SystemClock;
    let started = journal_engine::seams::Clock::now_unix_ns(&clock);
    out::line(format_args!("journal demo in {}", dir.display()))?;
    prepare(dir)?;

    step(1, "A generated agent workload")?;
    let sessions = 8;
    let events = workload::generate(2026, sessions, 6_000);
    out::line(format_args!(
        "{} events over {sessions} sessions: threads and turns, model calls with cost, tool calls (some failing, some never answered), retries with new attempts, approvals that pause a task, subagents, compactions, checkpoints, artifacts, evidence, and tasks completed without their evidence or decision",
        events.len()
    ))?;
    let first = events.len() * 6 / 10;
    let (head_part, rest) = events.split_at(first);

    step(
        2,
        "Appending the first part (durable, group-committed batches)",
    )?;
    {
        let journal = Journal::open(dir, Options::default())?;
        for chunk in head_part.chunks(500) {
            journal
                .append_batch(chunk, AppendOptions::default())
                .await?;
        }
        out::line(format_args!(
            "{} events appended, head {}",
            head_part.len(),
            journal.head().position
        ))?;
        journal.close();
    }

    step(
        3,
        "A second process streams more events, and is killed with SIGKILL mid-stream",
    )?;
    let stream_part = &rest[..rest.len() / 2];
    let acked = stream_then_kill(dir, stream_part, stream_part.len() / 2)?;
    out::line(format_args!(
        "the writer acknowledged {} events (each only once durable), then was killed",
        acked.len()
    ))?;

    step(4, "Reopening: recovery")?;
    let before_kill = head_part.len() as u64;
    let journal = Journal::open(dir, Options::default())?;
    let report = journal.recovery_report();
    out::line(format_args!(
        "recovery: {}",
        serde_json::to_string(&report.actions).map_err(|e| fail(e.to_string()))?
    ))?;
    let torn = report
        .actions
        .iter()
        .any(|a| matches!(a, journal_engine::RecoveryAction::TornTailCut { .. }));
    out::line(format_args!(
        "{}",
        if torn {
            "a write was torn by the kill: cut back to the last complete batch, its bytes kept in quarantine/"
        } else {
            "no torn write: the kill landed between writes"
        }
    ))?;
    let written = journal.head().position.0 - before_kill;
    out::line(format_args!(
        "the writer had made {written} events durable; {} of them were acknowledged before it died",
        acked.len()
    ))?;
    let mut missing = 0;
    for id in &acked {
        if journal.get(id)?.is_none() {
            missing += 1;
        }
    }
    out::line(format_args!(
        "acknowledged events present after the crash: {}/{} (missing: {missing}); head {}",
        acked.len() - missing,
        acked.len(),
        journal.head().position
    ))?;
    if missing > 0 {
        return Err(fail(format!("{missing} acknowledged events are missing")));
    }

    step(
        5,
        "Appending the rest (the producer retries from where it is unsure)",
    )?;
    let before = journal.head().position.0;
    let mut duplicates = 0;
    for chunk in rest.chunks(500) {
        let appended = journal
            .append_batch(chunk, AppendOptions::default())
            .await?;
        duplicates += appended.iter().filter(|a| a.duplicate).count();
    }
    out::line(format_args!(
        "{} new events, {duplicates} already stored and recognised by event id; head {}",
        journal.head().position.0 - before,
        journal.head().position
    ))?;

    step(
        6,
        "Read models: catching up, then a session snapshot with its freshness",
    )?;
    let models = ReadModels::open(&journal)?;
    let t = journal_engine::seams::Clock::now_unix_ns(&clock);
    let m = models.clone();
    tokio::task::spawn_blocking(move || m.catch_up(&mut |_, _, _| {}))
        .await
        .map_err(|e| fail(e.to_string()))??;
    out::line(format_args!(
        "caught up in {:.0} ms",
        (journal_engine::seams::Clock::now_unix_ns(&clock) - t) as f64 / 1e6
    ))?;
    let session = "sess_00003";
    let answer = models.view("session", session)?;
    let s = answer.model.unwrap_or_default();
    out::line(format_args!(
        "session {session}: {} events, tasks {}, tool calls {} ({} open), model calls {}, approvals pending {}, incidents {}",
        s["events"],
        s["taskSummary"],
        s["toolCalls"]["total"],
        s["toolCalls"]["open"],
        s["modelCalls"]["total"],
        s["pendingActions"].as_array().map_or(0, Vec::len),
        s["incidents"].as_array().map_or(0, Vec::len),
    ))?;
    if let Some(i) = s["incidents"].as_array().and_then(|a| a.first()) {
        out::line(format_args!(
            "first incident: #{} {}: {}",
            i["position"], i["rule"], i["message"]
        ))?;
    }
    out::line(format_args!(
        "freshness: {}",
        serde_json::to_string(&answer.freshness).map_err(|e| fail(e.to_string()))?
    ))?;

    step(
        7,
        "The narrative of one task: a retry after a failed attempt, and an approval",
    )?;
    let retried: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e.event_type == "task.retrying")
        .filter_map(|e| e.task_id.as_deref())
        .collect();
    let approved: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e.event_type == "action.required")
        .filter_map(|e| e.task_id.as_deref())
        .collect();
    let run = retried
        .iter()
        .find(|t| approved.contains(*t))
        .or_else(|| retried.iter().next())
        .map(|t| (*t).to_string())
        .ok_or_else(|| fail("the workload has no retried task"))?;
    let narrative = journal_replay::load(&journal, &Scope::Task(run.clone()), None)?;
    out::text(format_args!(
        "{}",
        journal_replay::text::render(
            &narrative,
            std::io::IsTerminal::is_terminal(&std::io::stdout())
        )
    ))?;
    let session_narrative =
        journal_replay::load(&journal, &Scope::Session(session.to_string()), None)?;
    let html = dir.join(format!("replay-{session}.html"));
    std::fs::write(&html, journal_replay::html::render(&session_narrative))
        .map_err(|e| fail(format!("{}: {e}", html.display())))?;
    out::line(format_args!(
        "\nthe HTML replay of session {session} is at {} (self-contained; open it in a browser)",
        html.display()
    ))?;

    step(8, "verify")?;
    let j = journal.clone();
    let report =
        tokio::task::spawn_blocking(move || j.verify(&VerifyOptions::default(), &mut |_, _| {}))
            .await
            .map_err(|e| fail(e.to_string()))??;
    out::line(format_args!(
        "ok: {}, {} events, {} segments, head {}:{}",
        report.ok, report.events, report.segments, report.head.position, report.head.hash
    ))?;
    journal.close();
    out::line(format_args!(
        "\ndone in {:.1} s. Try: journal --dir {} get session {session}; journal --dir {} replay task {run}",
        (journal_engine::seams::Clock::now_unix_ns(&clock) - started) as f64 / 1e9,
        dir.display(),
        dir.display()
    ))?;
    Ok(if report.ok { 0 } else { 3 })
}
