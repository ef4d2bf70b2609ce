//! `journal demo`: the whole product in a few seconds, in `./journal-demo` (or `--out DIR`),
//! with no setup. It generates a realistic agent workload, appends part of it, streams more into
//! a second process and kills that writer with SIGKILL mid-stream, reopens the journal (showing
//! what recovery found, and that every acknowledged event is there), appends the rest (what was
//! already stored is recognised by its event id), catches the read models up, prints a session
//! snapshot with its freshness and the narrative of one task, writes the HTML replay, and ends
//! with `verify`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use journal_engine::seams::{Clock as _, SystemClock};
use journal_engine::{AppendOptions, Journal, Options, VerifyOptions};
use journal_format::Envelope;
use journal_projections::{workload, ReadModels};
use journal_replay::Scope;

use crate::{fail, out, Failure};

/// The marker that says a directory holds a demo journal (and may be replaced by the next demo).
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
        "made by `journal demo`; the next demo replaces this directory\n",
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

/// The session whose snapshot and HTML replay the demo shows.
const SESSION: &str = "sess_00003";

/// Nanoseconds since `since` (a time on `clock`).
fn elapsed_ns(clock: &SystemClock, since: i64) -> f64 {
    (clock.now_unix_ns() - since) as f64
}

/// Runs the demo in `dir`.
pub async fn run(dir: &Path) -> Result<u8, Failure> {
    let clock = SystemClock;
    let started = clock.now_unix_ns();
    out::line(format_args!("journal demo in {}", dir.display()))?;
    prepare(dir)?;
    let events = generate()?;
    let first = events.len() * 6 / 10;
    let (head_part, rest) = events.split_at(first);
    append_first(dir, head_part).await?;
    let acked = stream_and_kill(dir, &rest[..rest.len() / 2])?;
    let journal = recover(dir, head_part.len() as u64, &acked)?;
    append_rest(&journal, rest).await?;
    read_models(&journal, &clock).await?;
    let task = narrate(&journal, dir, &events)?;
    let ok = verify(&journal).await?;
    journal.close();
    out::line(format_args!(
        "\ndone in {:.1} s. Try: journal --dir {} get session {SESSION}; journal --dir {} replay task {task}",
        elapsed_ns(&clock, started) / 1e9,
        dir.display(),
        dir.display()
    ))?;
    Ok(if ok { 0 } else { 3 })
}

/// Step 1: the workload.
fn generate() -> Result<Vec<Envelope>, Failure> {
    step(1, "A generated agent workload")?;
    let sessions = 8;
    let events = workload::generate(2026, sessions, 6_000);
    out::line(format_args!(
        "{} events over {sessions} sessions: threads and turns, model calls with cost, tool calls (some failing, some never answered), retries with new attempts, approvals that pause a task, subagents, compactions, checkpoints, artifacts, evidence, and tasks completed without their evidence or decision",
        events.len()
    ))?;
    Ok(events)
}

/// Step 2: the first part of the workload, appended in batches.
async fn append_first(dir: &Path, events: &[Envelope]) -> Result<(), Failure> {
    step(
        2,
        "Appending the first part (durable, group-committed batches)",
    )?;
    let journal = Journal::open(dir, Options::default())?;
    for chunk in events.chunks(500) {
        journal
            .append_batch(chunk, AppendOptions::default())
            .await?;
    }
    out::line(format_args!(
        "{} events appended, head {}",
        events.len(),
        journal.head().position
    ))?;
    journal.close();
    Ok(())
}

/// Step 3: `events` streamed into a second process, killed halfway; the ids it acknowledged.
fn stream_and_kill(dir: &Path, events: &[Envelope]) -> Result<Vec<String>, Failure> {
    step(
        3,
        "A second process streams more events, and is killed with SIGKILL mid-stream",
    )?;
    let acked = stream_then_kill(dir, events, events.len() / 2)?;
    out::line(format_args!(
        "the writer acknowledged {} events (each only once durable), then was killed",
        acked.len()
    ))?;
    Ok(acked)
}

/// Step 4: the journal reopened after the kill, `before_kill` events long before it: what
/// recovery did, and every `acked` event present.
fn recover(dir: &Path, before_kill: u64, acked: &[String]) -> Result<Journal, Failure> {
    step(4, "Reopening: recovery")?;
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
    for id in acked {
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
    Ok(journal)
}

/// Step 5: the rest of the workload, part of it stored already.
async fn append_rest(journal: &Journal, rest: &[Envelope]) -> Result<(), Failure> {
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
    Ok(())
}

/// Step 6: the read models caught up, and a session's snapshot with its freshness.
async fn read_models(journal: &Journal, clock: &SystemClock) -> Result<(), Failure> {
    step(
        6,
        "Read models: catching up, then a session snapshot with its freshness",
    )?;
    let models = ReadModels::open(journal)?;
    let t = clock.now_unix_ns();
    let m = models.clone();
    tokio::task::spawn_blocking(move || m.catch_up(&mut |_, _, _| {}))
        .await
        .map_err(|e| fail(e.to_string()))??;
    out::line(format_args!(
        "caught up in {:.0} ms",
        elapsed_ns(clock, t) / 1e6
    ))?;
    let answer = models.view("session", SESSION)?;
    let s = answer.model.unwrap_or_default();
    out::line(format_args!(
        "session {SESSION}: {} events, tasks {}, tool calls {} ({} open), model calls {}, approvals pending {}, incidents {}",
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
    Ok(())
}

/// Step 7: the narrative of a task of `events` that was retried (and, when one was, also
/// waited for an approval), and the HTML replay of the demo's session; the task's id.
fn narrate(journal: &Journal, dir: &Path, events: &[Envelope]) -> Result<String, Failure> {
    step(
        7,
        "The narrative of one task: a retry after a failed attempt, and an approval",
    )?;
    let tasks_of = |event_type: &str| -> BTreeSet<&str> {
        events
            .iter()
            .filter(|e| e.event_type == event_type)
            .filter_map(|e| e.task_id.as_deref())
            .collect()
    };
    let retried = tasks_of("task.retrying");
    let approved = tasks_of("action.required");
    let task = retried
        .iter()
        .find(|t| approved.contains(*t))
        .or_else(|| retried.iter().next())
        .map(|t| (*t).to_string())
        .ok_or_else(|| fail("the workload has no retried task"))?;
    let narrative = journal_replay::load(journal, &Scope::Task(task.clone()), None)?;
    out::text(journal_replay::text::render(&narrative, out::colour()))?;
    let session_narrative =
        journal_replay::load(journal, &Scope::Session(SESSION.to_string()), None)?;
    let html = dir.join(format!("replay-{SESSION}.html"));
    std::fs::write(&html, journal_replay::html::render(&session_narrative))
        .map_err(|e| fail(format!("{}: {e}", html.display())))?;
    out::line(format_args!(
        "\nthe HTML replay of session {SESSION} is at {} (self-contained; open it in a browser)",
        html.display()
    ))?;
    Ok(task)
}

/// Step 8: `verify`; whether the journal is sound.
async fn verify(journal: &Journal) -> Result<bool, Failure> {
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
    Ok(report.ok)
}
