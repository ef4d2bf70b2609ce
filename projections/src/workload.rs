//! A generated agent workload, deterministic from a seed: sessions with threads and turns,
//! model calls with cost, tool calls (some failing, some left open), approvals, tasks with
//! attempts, retries and completion decisions (some completed without one: an incident),
//! checklists, artifacts and evidence, compactions, subagents, checkpoints. Used by the tests,
//! the benchmarks and the demo; every event passes the append checks.

use journal_engine::sim_disk::SimRng;
use journal_format::Envelope;
use serde_json::{json, Value};

/// The workload's random source: the simulator's SplitMix64 ([`SimRng`]), with chances in
/// percent.
#[derive(Debug, Clone)]
pub struct Rng(SimRng);

impl Rng {
    /// A generator from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Rng {
        Rng(SimRng::new(seed))
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.0.below(100) < percent
    }
}

/// An RFC 3339 timestamp `ms` milliseconds after 2026-05-11T00:00:00Z (within 18 days).
#[must_use]
pub fn timestamp(ms: u64) -> String {
    let s = ms / 1000;
    let day = 11 + (s / 86_400).min(17);
    format!(
        "2026-05-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        ms % 1000
    )
}

struct Session {
    id: String,
    events: Vec<Envelope>,
    clock_ms: u64,
    seq: u64,
}

impl Session {
    fn event(&mut self, event_type: &str, payload: Option<Value>) -> &mut Envelope {
        self.seq += 1;
        self.clock_ms += 37;
        let mut e = Envelope::new(
            event_type,
            format!("{}-e{}", self.id, self.seq),
            timestamp(self.clock_ms),
        );
        e.session_id = Some(self.id.clone());
        e.runtime_id = Some("runtime_demo".into());
        e.sequence = Some(self.seq);
        e.payload = payload;
        self.events.push(e);
        let Some(last) = self.events.last_mut() else {
            unreachable!("an event was just pushed")
        };
        last
    }
}

/// The events of one session with `turns` turns.
fn session(rng: &mut Rng, index: usize, turns: usize) -> Vec<Envelope> {
    let mut s = Session {
        id: format!("sess_{index:05}"),
        events: Vec::new(),
        clock_ms: (index as u64) * 1_000,
        seq: 0,
    };
    let thread = format!("thread_{index:05}");
    s.event("session.created", None);
    s.event("thread.started", None).thread_id = Some(thread.clone());
    s.event(
        "checklist.created",
        Some(json!({"items": [
            {"id": "i1", "title": "Reproduce", "kind": "implementation", "status": "in_progress"},
            {"id": "i2", "title": "Fix", "kind": "implementation", "status": "pending"}
        ], "verificationNudgeNeeded": false})),
    );
    for turn in 0..turns {
        let turn_id = format!("turn_{index:05}_{turn}");
        let task = format!("task_{index:05}_{turn}");
        let run = format!("run_{index:05}_{turn}");
        let stamp = |e: &mut Envelope| {
            e.thread_id = Some(thread.clone());
            e.turn_id = Some(turn_id.clone());
        };
        stamp(s.event(
            "turn.submitted",
            Some(json!({"input": [{"type": "text", "text": format!("step {turn}")}]})),
        ));
        stamp(s.event("turn.started", None));
        let e = s.event(
            "task.created",
            Some(json!({"title": format!("Step {turn}"),
                "evidenceRequirements": {"requiredArtifacts": [format!("out/{task}.md")]}})),
        );
        stamp(e);
        e.task_id = Some(task.clone());
        let attempts = if rng.chance(15) { 2 } else { 1 };
        for attempt in 1..=attempts {
            let attempt_id = format!("{task}_a{attempt}");
            for (t, p) in [
                ("task.attempt.started", json!({"attemptNumber": attempt})),
                ("task.started", json!({})),
            ] {
                let e = s.event(t, Some(p));
                stamp(e);
                e.task_id = Some(task.clone());
                e.attempt_id = Some(attempt_id.clone());
                e.run_id = Some(run.clone());
            }
            let calls = 1 + rng.below(3);
            for call in 0..calls {
                let request = format!("{run}_m{attempt}_{call}");
                for t in ["model.requested", "model.completed"] {
                    let e = s.event(t, Some(json!({"model": "gpt-5.4"})));
                    stamp(e);
                    e.model_request_id = Some(request.clone());
                    e.run_id = Some(run.clone());
                }
                let e = s.event(
                    "cost.recorded",
                    Some(
                        json!({"model": "gpt-5.4", "inputTokens": 1200 + rng.below(800),
                        "outputTokens": 100 + rng.below(400), "costUsd": 0.0125}),
                    ),
                );
                e.run_id = Some(run.clone());
                let tool_call = format!("{run}_t{attempt}_{call}");
                let e = s.event(
                    "tool.started",
                    Some(json!({"toolName": "shell", "arguments": {"cmd": "cargo test"}})),
                );
                stamp(e);
                e.tool_call_id = Some(tool_call.clone());
                e.run_id = Some(run.clone());
                if call == 0 && rng.chance(20) {
                    let action = format!("{tool_call}_approval");
                    let e = s.event(
                        "action.required",
                        Some(json!({"actionType": "tool_permission", "prompt": "Run cargo test?"})),
                    );
                    e.action_id = Some(action.clone());
                    e.task_id = Some(task.clone());
                    e.tool_call_id = Some(tool_call.clone());
                    let e = s.event(
                        "action.resolved",
                        Some(json!({"decision": "approve", "decidedBy": "user:reviewer"})),
                    );
                    e.action_id = Some(action);
                    e.task_id = Some(task.clone());
                }
                if rng.chance(3) {
                    continue; // a call with no result stays open
                }
                let failed = attempt < attempts && call + 1 == calls;
                let e = s.event(
                    "tool.result",
                    Some(json!({"toolName": "shell",
                        "status": if failed { "failure" } else { "success" },
                        "output": "x".repeat(64 + rng.below(256) as usize)})),
                );
                stamp(e);
                e.tool_call_id = Some(tool_call);
                e.run_id = Some(run.clone());
            }
            if attempt < attempts {
                for (t, p) in [
                    ("task.attempt.failed", json!({"status": "failed"})),
                    (
                        "task.failed",
                        json!({"reason": "tool.failed", "outcome": "failed"}),
                    ),
                    ("task.retrying", json!({})),
                ] {
                    let e = s.event(t, Some(p));
                    e.task_id = Some(task.clone());
                    e.attempt_id = Some(attempt_id.clone());
                }
            }
        }
        if rng.chance(10) {
            s.event(
                "context.compaction.started",
                Some(json!({"trigger": "auto", "tokensBefore": 180_000})),
            );
            s.event(
                "context.compaction.completed",
                Some(json!({"tokensAfter": 40_000, "summary": "summary of earlier turns"})),
            );
        }
        if rng.chance(10) {
            let sub = format!("{run}_sub");
            for t in ["subagent.spawned", "subagent.completed"] {
                let e = s.event(t, Some(json!({"role": "reviewer"})));
                e.subagent_id = Some(sub.clone());
                e.task_id = Some(task.clone());
            }
        }
        let evidence = rng.chance(85);
        if evidence {
            let e = s.event(
                "artifact.changed",
                Some(json!({"change": "created", "path": format!("out/{task}.md")})),
            );
            e.artifact_id = Some(format!("out/{task}.md"));
            e.task_id = Some(task.clone());
            let e = s.event(
                "evidence.changed",
                Some(json!({"kind": "test_run", "verification": "passed"})),
            );
            e.evidence_id = Some(format!("{task}_ev"));
            e.task_id = Some(task.clone());
        }
        // Most tasks are completed through an accepted decision; some without one (an
        // incident) and a few are left running.
        let ending = rng.below(100);
        if ending < 90 {
            if ending < 84 && evidence {
                let e = s.event(
                    "task.completion.decided",
                    Some(json!({"accepted": true, "reasons": ["tests pass"], "decidedBy": "reviewer"})),
                );
                e.task_id = Some(task.clone());
            }
            let e = s.event(
                "task.completed",
                Some(json!({"outcome": "ok", "machineStatus": "ok"})),
            );
            e.task_id = Some(task.clone());
        }
        if rng.chance(5) {
            s.event(
                "checkpoint.captured",
                Some(json!({"checkpointId": format!("{task}_cp"), "statusAtCapture": "running"})),
            );
        }
        stamp(s.event("turn.completed", None));
    }
    s.event(
        "checklist.updated",
        Some(json!({"items": [
            {"id": "i1", "title": "Reproduce", "kind": "implementation", "status": "completed"},
            {"id": "i2", "title": "Fix", "kind": "implementation", "status": "completed"}
        ], "verificationNudgeNeeded": true})),
    );
    s.events
}

/// About `events` events over `sessions` sessions, interleaved as concurrent sessions would
/// be, deterministic from `seed`.
#[must_use]
pub fn generate(seed: u64, sessions: usize, events: usize) -> Vec<Envelope> {
    let mut rng = Rng::new(seed);
    // About 20 events per turn.
    let turns = (events / sessions.max(1) / 20).max(1);
    let mut streams: Vec<std::vec::IntoIter<Envelope>> = (0..sessions)
        .map(|i| session(&mut rng, i, turns).into_iter())
        .collect();
    let mut out = Vec::with_capacity(events + events / 4);
    let mut live: Vec<usize> = (0..streams.len()).collect();
    while !live.is_empty() {
        let pick = rng.below(live.len() as u64) as usize;
        let Some(&stream) = live.get(pick) else {
            break;
        };
        let burst = 1 + rng.below(6);
        let mut ended = false;
        for _ in 0..burst {
            match streams.get_mut(stream).and_then(Iterator::next) {
                Some(e) => out.push(e),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            live.swap_remove(pick);
        }
    }
    out
}
