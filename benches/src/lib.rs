//! Benchmarks of the journal: criterion benches of the hot paths (`benches/hot_paths.rs`), the
//! comparison command's workloads ([`compare`], run by `src/bin/compare.rs`), and the event
//! workload they share. Not published; peers used for comparison (SQLite, redb, okaywal) are
//! dependencies of this crate only, never of the engine.

pub mod compare;

use journal_format::Envelope;
use serde_json::json;

/// A realistic mix of agent-runtime events of about 500 bytes as MessagePack: turns, model calls,
/// tool calls with arguments and results, across a few sessions, tasks and runs.
#[must_use]
pub fn workload_event(i: u64) -> Envelope {
    const TYPES: [&str; 8] = [
        "turn.submitted",
        "model.requested",
        "model.completed",
        "tool.started",
        "tool.args",
        "tool.result",
        "task.progress",
        "cost.recorded",
    ];
    let event_type = TYPES[(i % TYPES.len() as u64) as usize];
    let mut e = Envelope::new(
        event_type,
        format!("evt-{i:012}"),
        "2026-05-11T10:00:00.123Z",
    );
    e.runtime_id = Some("runtime-bench".into());
    e.session_id = Some(format!("sess-{:04}", i % 64));
    e.thread_id = Some(format!("thread-{:04}", i % 64));
    e.turn_id = Some(format!("turn-{:06}", i / 16));
    e.task_id = Some(format!("task-{:05}", i % 997));
    e.run_id = Some(format!("run-{:05}", i % 211));
    e.tool_call_id = Some(format!("call-{i:08}"));
    e.trace_id = Some(format!("{:032x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    e.sequence = Some(i);
    e.payload = Some(json!({
        "toolName": "shell",
        "arguments": {"command": format!("cargo test -p crate-{} -- --nocapture", i % 13), "cwd": "/workspace/project"},
        "status": if i.is_multiple_of(17) { "failure" } else { "success" },
        "exitCode": i % 3,
        "durationMs": 1200 + i % 500,
        "stdoutPreview": "running 42 tests\ntest result: ok. 42 passed; 0 failed; 0 ignored",
        "usage": {"inputTokens": 1800 + i % 700, "outputTokens": 240 + i % 90},
    }));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_events_are_about_500_bytes() {
        let sizes: Vec<usize> = (0..100)
            .map(|i| workload_event(i).to_msgpack().unwrap().len())
            .collect();
        let mean = sizes.iter().sum::<usize>() / sizes.len();
        assert!((450..=600).contains(&mean), "mean stored size {mean}");
    }
}
