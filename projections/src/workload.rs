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

/// The ids of one turn: its thread and turn (stamped on its events), its task and its run.
struct Turn {
    number: usize,
    thread: String,
    turn_id: String,
    task: String,
    run: String,
}

impl Turn {
    fn new(index: usize, number: usize, thread: &str) -> Turn {
        Turn {
            number,
            thread: thread.to_string(),
            turn_id: format!("turn_{index:05}_{number}"),
            task: format!("task_{index:05}_{number}"),
            run: format!("run_{index:05}_{number}"),
        }
    }

    /// Stamps an event with the turn's thread and turn.
    fn stamp(&self, e: &mut Envelope) {
        e.thread_id = Some(self.thread.clone());
        e.turn_id = Some(self.turn_id.clone());
    }
}

/// How a tool call's result reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ToolOutcome {
    Success,
    /// The last call of an attempt that is retried.
    Failure,
}

/// Whether a turn's task recorded its declared artifact and the evidence of its tests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Evidence {
    Recorded,
    Absent,
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
    for number in 0..turns {
        s.turn(rng, &Turn::new(index, number, &thread));
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

impl Session {
    /// One turn: its task with one attempt or two, maybe a compaction and a subagent, most
    /// often the task's evidence, its ending, maybe a checkpoint.
    fn turn(&mut self, rng: &mut Rng, t: &Turn) {
        t.stamp(self.event(
            "turn.submitted",
            Some(json!({"input": [{"type": "text", "text": format!("step {}", t.number)}]})),
        ));
        t.stamp(self.event("turn.started", None));
        let e = self.event(
            "task.created",
            Some(json!({"title": format!("Step {}", t.number),
                "evidenceRequirements": {"requiredArtifacts": [format!("out/{}.md", t.task)]}})),
        );
        t.stamp(e);
        e.task_id = Some(t.task.clone());
        let attempts = if rng.chance(15) { 2 } else { 1 };
        for attempt in 1..=attempts {
            self.attempt(rng, t, attempt, attempts);
        }
        if rng.chance(10) {
            self.event(
                "context.compaction.started",
                Some(json!({"trigger": "auto", "tokensBefore": 180_000})),
            );
            self.event(
                "context.compaction.completed",
                Some(json!({"tokensAfter": 40_000, "summary": "summary of earlier turns"})),
            );
        }
        if rng.chance(10) {
            let sub = format!("{}_sub", t.run);
            for kind in ["subagent.spawned", "subagent.completed"] {
                let e = self.event(kind, Some(json!({"role": "reviewer"})));
                e.subagent_id = Some(sub.clone());
                e.task_id = Some(t.task.clone());
            }
        }
        let evidence = if rng.chance(85) {
            self.evidence(t);
            Evidence::Recorded
        } else {
            Evidence::Absent
        };
        self.ending(rng, t, evidence);
        if rng.chance(5) {
            self.event(
                "checkpoint.captured",
                Some(
                    json!({"checkpointId": format!("{}_cp", t.task), "statusAtCapture": "running"}),
                ),
            );
        }
        t.stamp(self.event("turn.completed", None));
    }

    /// Attempt `attempt` of `attempts` of the turn's task: one to three model and tool calls,
    /// the last failing and the attempt failed and retried when another attempt follows.
    fn attempt(&mut self, rng: &mut Rng, t: &Turn, attempt: u32, attempts: u32) {
        let attempt_id = format!("{}_a{attempt}", t.task);
        for (kind, p) in [
            ("task.attempt.started", json!({"attemptNumber": attempt})),
            ("task.started", json!({})),
        ] {
            let e = self.event(kind, Some(p));
            t.stamp(e);
            e.task_id = Some(t.task.clone());
            e.attempt_id = Some(attempt_id.clone());
            e.run_id = Some(t.run.clone());
        }
        let calls = 1 + rng.below(3);
        for call in 0..calls {
            let outcome = if attempt < attempts && call + 1 == calls {
                ToolOutcome::Failure
            } else {
                ToolOutcome::Success
            };
            self.call(rng, t, attempt, call, outcome);
        }
        if attempt < attempts {
            for (kind, p) in [
                ("task.attempt.failed", json!({"status": "failed"})),
                (
                    "task.failed",
                    json!({"reason": "tool.failed", "outcome": "failed"}),
                ),
                ("task.retrying", json!({})),
            ] {
                let e = self.event(kind, Some(p));
                e.task_id = Some(t.task.clone());
                e.attempt_id = Some(attempt_id.clone());
            }
        }
    }

    /// Call `call` of attempt `attempt`: a model call with its cost, then a tool call (the
    /// first sometimes behind an approval), whose result is sometimes never recorded.
    fn call(&mut self, rng: &mut Rng, t: &Turn, attempt: u32, call: u64, outcome: ToolOutcome) {
        let run = &t.run;
        let request = format!("{run}_m{attempt}_{call}");
        for kind in ["model.requested", "model.completed"] {
            let e = self.event(kind, Some(json!({"model": "gpt-5.4"})));
            t.stamp(e);
            e.model_request_id = Some(request.clone());
            e.run_id = Some(run.clone());
        }
        let e = self.event(
            "cost.recorded",
            Some(
                json!({"model": "gpt-5.4", "inputTokens": 1200 + rng.below(800),
                "outputTokens": 100 + rng.below(400), "costUsd": 0.0125}),
            ),
        );
        e.run_id = Some(run.clone());
        let tool_call = format!("{run}_t{attempt}_{call}");
        let e = self.event(
            "tool.started",
            Some(json!({"toolName": "shell", "arguments": {"cmd": "cargo test"}})),
        );
        t.stamp(e);
        e.tool_call_id = Some(tool_call.clone());
        e.run_id = Some(run.clone());
        if call == 0 && rng.chance(20) {
            self.approval(t, &tool_call);
        }
        if rng.chance(3) {
            return; // a call with no result stays open
        }
        let status = match outcome {
            ToolOutcome::Failure => "failure",
            ToolOutcome::Success => "success",
        };
        let e = self.event(
            "tool.result",
            Some(json!({"toolName": "shell",
                "status": status,
                "output": "x".repeat(64 + rng.below(256) as usize)})),
        );
        t.stamp(e);
        e.tool_call_id = Some(tool_call);
        e.run_id = Some(run.clone());
    }

    /// An approval of a tool call, required and granted.
    fn approval(&mut self, t: &Turn, tool_call: &str) {
        let action = format!("{tool_call}_approval");
        let e = self.event(
            "action.required",
            Some(json!({"actionType": "tool_permission", "prompt": "Run cargo test?"})),
        );
        e.action_id = Some(action.clone());
        e.task_id = Some(t.task.clone());
        e.tool_call_id = Some(tool_call.to_string());
        let e = self.event(
            "action.resolved",
            Some(json!({"decision": "approve", "decidedBy": "user:reviewer"})),
        );
        e.action_id = Some(action);
        e.task_id = Some(t.task.clone());
    }

    /// The task's declared artifact, and evidence that its tests passed.
    fn evidence(&mut self, t: &Turn) {
        let task = &t.task;
        let e = self.event(
            "artifact.changed",
            Some(json!({"change": "created", "path": format!("out/{task}.md")})),
        );
        e.artifact_id = Some(format!("out/{task}.md"));
        e.task_id = Some(task.clone());
        let e = self.event(
            "evidence.changed",
            Some(json!({"kind": "test_run", "verification": "passed"})),
        );
        e.evidence_id = Some(format!("{task}_ev"));
        e.task_id = Some(task.clone());
    }

    /// How the task ends: most tasks are completed through an accepted decision (only those
    /// with recorded evidence); some without one (an incident) and a few are left running.
    fn ending(&mut self, rng: &mut Rng, t: &Turn, evidence: Evidence) {
        let ending = rng.below(100);
        if ending >= 90 {
            return;
        }
        if ending < 84 && evidence == Evidence::Recorded {
            let e = self.event(
                "task.completion.decided",
                Some(json!({"accepted": true, "reasons": ["tests pass"], "decidedBy": "reviewer"})),
            );
            e.task_id = Some(t.task.clone());
        }
        let e = self.event(
            "task.completed",
            Some(json!({"outcome": "ok", "machineStatus": "ok"})),
        );
        e.task_id = Some(t.task.clone());
    }
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
