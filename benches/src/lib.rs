//! Benchmarks of the journal: criterion benches of the hot paths (`benches/hot_paths.rs`), the
//! comparison command's workloads ([`compare`], run by `src/bin/compare.rs`), and the event
//! workload they share. Not published; peers used for comparison (SQLite, redb, okaywal) are
//! dependencies of this crate only, never of the engine.

pub mod compare;

use journal_format::Envelope;
use serde_json::json;

/// How the workload's event ids are made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Ids {
    /// `evt-000000000123`: ids that grow with time, as UUID v7, ULIDs and counters do.
    #[default]
    Growing,
    /// UUID v4-shaped ids in no order, drawn from the event's number (the same each time).
    Random,
}

/// A realistic mix of agent-runtime events of about 500 bytes as MessagePack: turns, model calls,
/// tool calls with arguments and results, across a few sessions, tasks and runs.
#[must_use]
pub fn workload_event(i: u64) -> Envelope {
    workload_event_with(i, Ids::Growing)
}

/// SplitMix64's output function: a well-mixed 64 bits from any counter.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// [`workload_event`] with its id made as `ids` says.
#[must_use]
pub fn workload_event_with(i: u64, ids: Ids) -> Envelope {
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
        match ids {
            Ids::Growing => format!("evt-{i:012}"),
            Ids::Random => {
                let (a, b) = (mix(2 * i), mix(2 * i + 1));
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xfff,
                    0x8000 | ((b >> 48) & 0x3fff),
                    b & 0xffff_ffff_ffff
                )
            }
        },
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

    #[test]
    fn random_ids_are_uuid_v4_shaped_distinct_and_in_no_order() {
        let ids: Vec<String> = (0..1000)
            .map(|i| workload_event_with(i, Ids::Random).event_id)
            .collect();
        for id in &ids {
            let dashes: Vec<usize> = id.match_indices('-').map(|(at, _)| at).collect();
            assert_eq!((id.len(), dashes), (36, vec![8, 13, 18, 23]), "{id}");
            assert_eq!(id.as_bytes()[14], b'4', "{id}");
            assert!(
                matches!(id.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
                "{id}"
            );
        }
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        let ascending = ids.windows(2).filter(|w| w[0] < w[1]).count();
        assert!(
            (400..600).contains(&ascending),
            "{ascending} of 999 in order"
        );
    }
}
