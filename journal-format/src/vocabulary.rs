//! The event vocabulary (docs/MODEL.md §2): every type the journal knows by name and family — the
//! 120 types of the Agent Runtime schema's enum and the journal's own families — and the rules
//! for everything else: `vendor.<namespace>.<name>` and unknown types are stored and returned
//! unchanged, never refused for being unknown.

/// The event types of the Agent Runtime schema (v0.4) enum, in the schema's order.
pub const AGENT_RUNTIME_TYPES: [&str; 120] = [
    "session.created",
    "session.updated",
    "thread.started",
    "thread.updated",
    "turn.submitted",
    "turn.started",
    "turn.completed",
    "turn.failed",
    "task.created",
    "task.accepted",
    "task.queued",
    "task.started",
    "task.updated",
    "task.progress",
    "task.waiting",
    "task.blocked",
    "task.paused",
    "task.resumed",
    "task.retrying",
    "task.cancel_requested",
    "task.cancelled",
    "task.timed_out",
    "task.failed",
    "task.lost",
    "task.completed",
    "task.archived",
    "run.status",
    "model.requested",
    "model.delta",
    "model.completed",
    "model.failed",
    "reasoning.delta",
    "reasoning.summary",
    "tool.catalog.resolved",
    "tool.started",
    "tool.args",
    "tool.progress",
    "tool.result",
    "tool.failed",
    "action.required",
    "action.resolved",
    "queue.changed",
    "context.resolved",
    "context.compaction.started",
    "context.compaction.completed",
    "context.compaction.failed",
    "artifact.changed",
    "evidence.changed",
    "subagent.spawned",
    "subagent.status",
    "subagent.input",
    "subagent.completed",
    "subagent.failed",
    "subagent.closed",
    "limit.changed",
    "snapshot.updated",
    "runtime.warning",
    "runtime.error",
    "permission.evaluated",
    "permission.requested",
    "permission.resolved",
    "sandbox.applied",
    "sandbox.violation",
    "hook.started",
    "hook.completed",
    "hook.failed",
    "policy.changed",
    "process.started",
    "process.output",
    "process.input",
    "process.completed",
    "process.failed",
    "process.terminated",
    "task.profile.resolved",
    "routing.candidates.resolved",
    "routing.decided",
    "routing.fallback.applied",
    "routing.not_possible",
    "routing.single_candidate",
    "task.delegated",
    "task.dependency.updated",
    "task.attempt.started",
    "task.attempt.completed",
    "task.attempt.failed",
    "cost.estimated",
    "cost.recorded",
    "rate_limit.hit",
    "quota.low",
    "quota.blocked",
    "channel.connected",
    "channel.disconnected",
    "channel.resumed",
    "channel.message",
    "channel.permission_forwarded",
    "channel.permission_returned",
    "job.created",
    "job.started",
    "job.progress",
    "job.item.started",
    "job.item.completed",
    "job.item.failed",
    "job.completed",
    "job.failed",
    "job.cancelled",
    "output.spilled",
    "output.truncated",
    "output.redacted",
    "output.expired",
    "history.window.loaded",
    "history.reconstructed",
    "history.rollback.started",
    "history.rollback.completed",
    "snapshot.repaired",
    "benchmark.dataset.resolved",
    "benchmark.configuration.resolved",
    "benchmark.trial.started",
    "benchmark.trial.completed",
    "benchmark.trial.failed",
    "benchmark.reward.recorded",
    "benchmark.comparison.completed",
];

/// The journal's own event types (docs/MODEL.md §2), each with its family.
pub const JOURNAL_TYPES: [(&str, &str); 17] = [
    ("checklist.created", "checklist"),
    ("checklist.updated", "checklist"),
    ("checklist.verification_nudged", "checklist"),
    ("snapshot.written", "snapshot"),
    ("checkpoint.captured", "checkpoint"),
    ("task.completion.attempted", "completion"),
    ("task.completion.decided", "completion"),
    ("task.recovery.attempted", "recovery"),
    ("dispatch.requested", "dispatch"),
    ("handoff.requested", "handoff"),
    ("handoff.accepted", "handoff"),
    ("schedule.upserted", "schedule"),
    ("schedule.fired", "schedule"),
    ("sensor.event.recorded", "sensor"),
    ("sensor.event.deduped", "sensor"),
    ("workflow.transitioned", "workflow"),
    ("workflow.completed", "workflow"),
];

/// Where a type comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The Agent Runtime schema's closed enum.
    AgentRuntime,
    /// The journal's own families.
    Journal,
    /// `vendor.<namespace>.<name>`.
    Vendor,
    /// Anything else: stored and counted, never refused.
    Unknown,
}

/// What the vocabulary knows about one event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeInfo<'a> {
    /// The type as given.
    pub name: &'a str,
    /// Its family: the Agent Runtime family (the part before the first dot), the journal
    /// family, the vendor namespace, or `unknown`.
    pub family: &'a str,
    /// Where it comes from.
    pub origin: Origin,
}

/// Classifies an event type.
#[must_use]
pub fn classify(name: &str) -> TypeInfo<'_> {
    if let Some((_, family)) = JOURNAL_TYPES.iter().find(|(t, _)| *t == name) {
        return TypeInfo {
            name,
            family,
            origin: Origin::Journal,
        };
    }
    if AGENT_RUNTIME_TYPES.contains(&name) {
        let family = name.split('.').next().unwrap_or(name);
        return TypeInfo {
            name,
            family,
            origin: Origin::AgentRuntime,
        };
    }
    if let Some(rest) = name.strip_prefix("vendor.") {
        if let Some((namespace, local)) = rest.split_once('.') {
            if !namespace.is_empty() && !local.is_empty() {
                return TypeInfo {
                    name,
                    family: namespace,
                    origin: Origin::Vendor,
                };
            }
        }
    }
    TypeInfo {
        name,
        family: "unknown",
        origin: Origin::Unknown,
    }
}

/// Whether the Agent Runtime schema's enum holds this type (so it can be exported as is).
#[must_use]
pub fn is_agent_runtime_type(name: &str) -> bool {
    AGENT_RUNTIME_TYPES.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_runtime_types_are_exactly_the_schema_enum() {
        let text = crate::conformance::Schema::Event.text();
        let schema: serde_json::Value = serde_json::from_str(text).unwrap();
        let names: Vec<&str> = schema["properties"]["type"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(names, AGENT_RUNTIME_TYPES.to_vec());
    }

    #[test]
    fn journal_types_do_not_collide_with_the_schema_and_are_unique() {
        for (t, _) in JOURNAL_TYPES {
            assert!(!is_agent_runtime_type(t), "{t}");
            assert_eq!(
                JOURNAL_TYPES.iter().filter(|(u, _)| *u == t).count(),
                1,
                "{t}"
            );
        }
    }

    #[test]
    fn types_are_classified_by_origin_and_family() {
        assert_eq!(
            classify("tool.started"),
            TypeInfo {
                name: "tool.started",
                family: "tool",
                origin: Origin::AgentRuntime
            }
        );
        assert_eq!(classify("rate_limit.hit").family, "rate_limit");
        assert_eq!(classify("task.completion.decided").origin, Origin::Journal);
        assert_eq!(classify("task.completion.decided").family, "completion");
        assert_eq!(
            classify("vendor.acme.deploy_started"),
            TypeInfo {
                name: "vendor.acme.deploy_started",
                family: "acme",
                origin: Origin::Vendor
            }
        );
        assert_eq!(classify("vendor.acme").origin, Origin::Unknown);
        assert_eq!(classify("made.up").origin, Origin::Unknown);
    }
}
