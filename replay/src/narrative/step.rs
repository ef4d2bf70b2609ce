//! A step made from an event, and later events joined to it: what a step shows of an event
//! (its producer, ids, evidence, and payload with long strings cut), and the one word a
//! lifecycle event type means.

use std::collections::BTreeMap;

use journal_format::time_fmt::format_rfc3339_ns;
use journal_format::{Provenance, StoredEvent};
use serde_json::{json, Value};

use super::{Evidence, Step};

fn producer(event: &StoredEvent) -> Option<String> {
    let e = &event.envelope;
    match (&e.runtime_id, &e.native_ns) {
        (Some(r), Some(ns)) => Some(format!("{r} ({ns})")),
        (Some(r), None) => Some(r.clone()),
        (None, Some(ns)) => Some(ns.clone()),
        (None, None) => None,
    }
}

pub(super) fn evidence_of(event: &StoredEvent) -> Evidence {
    match event.envelope.provenance {
        Some(Provenance::Inferred | Provenance::Projected) => Evidence::Inferred,
        _ => Evidence::Observed,
    }
}

fn ids(event: &StoredEvent) -> BTreeMap<String, String> {
    let e = &event.envelope;
    [
        ("threadId", &e.thread_id),
        ("turnId", &e.turn_id),
        ("taskId", &e.task_id),
        ("runId", &e.run_id),
        ("attemptId", &e.attempt_id),
        ("toolCallId", &e.tool_call_id),
        ("actionId", &e.action_id),
        ("subagentId", &e.subagent_id),
        ("modelRequestId", &e.model_request_id),
        ("processId", &e.process_id),
        ("artifactId", &e.artifact_id),
        ("evidenceId", &e.evidence_id),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
    .collect()
}

pub(super) fn payload_str<'a>(event: &'a StoredEvent, field: &str) -> Option<&'a str> {
    event
        .envelope
        .payload
        .as_ref()
        .and_then(|p| p.get(field))
        .and_then(Value::as_str)
}

/// The payload as a step shows it: strings beyond 2,000 characters are cut, with their length
/// (the whole value stays in the event, and `outputRef` points at blobs).
fn shown(value: Option<&Value>) -> Value {
    const CHARS_MAX: usize = 2000;
    match value {
        None => Value::Null,
        Some(Value::String(s)) if s.chars().count() > CHARS_MAX => {
            let cut: String = s.chars().take(CHARS_MAX).collect();
            json!({"text": cut, "truncatedFrom": s.chars().count()})
        }
        Some(Value::Object(m)) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), shown(Some(v)))).collect())
        }
        Some(Value::Array(a)) => Value::Array(a.iter().map(|v| shown(Some(v))).collect()),
        Some(v) => v.clone(),
    }
}

pub(super) fn step(kind: &str, title: String, event: &StoredEvent) -> Step {
    let e = &event.envelope;
    let mut details = serde_json::Map::new();
    if let Some(p) = &e.payload {
        details.insert("payload".into(), shown(Some(p)));
    }
    if let Some(r) = &e.output_ref {
        details.insert("outputRef".into(), json!(r));
    }
    if let Some(s) = &e.status {
        details.insert("status".into(), json!(s));
    }
    Step {
        kind: kind.to_string(),
        title,
        evidence: evidence_of(event),
        event_ids: vec![e.event_id.clone()],
        positions: vec![event.position.0],
        producer: producer(event),
        timestamp: e.timestamp.clone(),
        recorded_at: format_rfc3339_ns(event.recorded_at_ns),
        ids: ids(event),
        details: Value::Object(details),
        complete: true,
        children: Vec::new(),
    }
}

/// Adds a later event to a step (a result to its call, a decision to its approval).
pub(super) fn join(step: &mut Step, event: &StoredEvent, role: &str) {
    step.event_ids.push(event.envelope.event_id.clone());
    step.positions.push(event.position.0);
    if evidence_of(event) == Evidence::Inferred {
        step.evidence = Evidence::Inferred;
    }
    for (k, v) in ids(event) {
        step.ids.entry(k).or_insert(v);
    }
    if let Value::Object(d) = &mut step.details {
        let mut part = serde_json::Map::new();
        part.insert("type".into(), json!(event.envelope.event_type));
        // The producer's time of the joined event: a call's duration runs to its result's.
        part.insert("timestamp".into(), json!(event.envelope.timestamp));
        if let Some(p) = &event.envelope.payload {
            part.insert("payload".into(), shown(Some(p)));
        }
        if let Some(r) = &event.envelope.output_ref {
            part.insert("outputRef".into(), json!(r));
        }
        if let Some(s) = &event.envelope.status {
            part.insert("status".into(), json!(s));
        }
        d.insert(role.to_string(), Value::Object(part));
    }
}

/// What a lifecycle event type means, in a word.
pub(super) fn lifecycle_word(t: &str) -> Option<&'static str> {
    Some(match t {
        "task.created" => "created",
        "task.accepted" => "accepted",
        "task.queued" => "queued",
        "task.started" => "started",
        "task.paused" => "paused",
        "task.resumed" => "resumed",
        "task.retrying" => "retrying",
        "task.waiting" => "waiting",
        "task.blocked" => "blocked",
        "task.cancel_requested" => "cancel requested",
        "task.cancelled" => "cancelled",
        "task.timed_out" => "timed out",
        "task.failed" => "failed",
        "task.lost" => "lost",
        "task.completed" => "completed",
        "task.archived" => "archived",
        "task.progress" => "progress",
        _ => return None,
    })
}
