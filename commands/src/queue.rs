//! Queue commands (the queue runtime), run in the session that holds the queue so that their dedupe
//! checks and their writes are one atomic decision: `enqueue_task` (deduped by source and
//! idempotency key) and `record_sensor_event` (deduped by the sensor's key, and the task it
//! proposes enqueued); and the events of a new queued task, which schedules fire too.

use journal_format::payload::TaskIntent;
use journal_format::Envelope;
use journal_projections::rules::{Rule, Violation};
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::context::{drop_nulls, event, set, task_event, Context, Decided};
use crate::scope::Scope;

/// `enqueue_task` (the queue runtime).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnqueueTask {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The task id; generated when absent.
    pub task_id: Option<String>,
    /// What to do.
    pub intent: TaskIntent,
    /// A client's idempotency key: an active task with the same key is the answer.
    pub idempotency_key: Option<String>,
    /// The attempt budget.
    pub max_attempts: Option<u32>,
}

/// `record_sensor_event` (the queue runtime's SensorEvent).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordSensorEvent {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The sensor.
    pub sensor_id: String,
    /// The sensor's own event id.
    pub sensor_event_id: String,
    /// The sensor-owned, stable dedupe key.
    pub dedupe_key: String,
    /// When observed.
    pub observed_at: Option<String>,
    /// What was observed.
    pub source_ref: Option<String>,
    /// The sensor's data.
    #[serde(default)]
    pub payload: Map<String, Value>,
    /// The task to enqueue.
    pub proposed_task: Option<TaskIntent>,
}

/// `enqueue_task`: `task.created` and `task.queued`; a no-op with a note when an active task
/// has the same source or idempotency key.
pub(crate) fn enqueue(
    c: &EnqueueTask,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let duplicate = state.active_tasks().find(|t| {
        let same_key = c.idempotency_key.is_some() && t.idempotency_key == c.idempotency_key;
        let same_source = c.intent.source.is_some() && t.source == c.intent.source;
        same_key || same_source
    });
    if let Some(t) = duplicate {
        return Ok(Decided::noop(format!(
            "deduped: active task {} has the same source or idempotency key",
            t.task_id
        )));
    }
    let task_id = c.task_id.clone().unwrap_or_else(|| ctx.id("task"));
    if state.tasks.contains_key(&task_id) {
        return Err(Violation::new(
            Rule::TaskExists,
            format!("task {task_id} already exists"),
        ));
    }
    Ok(Decided::events(new_task_events(
        &c.scope,
        ctx,
        &task_id,
        &c.intent,
        c.idempotency_key.as_deref(),
        c.max_attempts,
    )))
}

/// `record_sensor_event`: `sensor.event.recorded` and the task it proposes; only
/// `sensor.event.deduped` (and a note) when its dedupe key or its sensor and event ids were
/// seen before.
pub(crate) fn record_sensor_event(
    c: &RecordSensorEvent,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let pair = format!("{}/{}", c.sensor_id, c.sensor_event_id);
    let first = state.sensor_keys.get(&c.dedupe_key).cloned();
    let seen = first.is_some() || state.sensor_events.contains(&pair);
    let mut payload = json!({
        "sensorId": c.sensor_id,
        "sensorEventId": c.sensor_event_id,
        "dedupeKey": c.dedupe_key,
        "observedAt": c.observed_at,
        "sourceRef": c.source_ref,
        "data": c.payload,
    });
    if seen {
        set(&mut payload, "duplicateOf", json!(first));
    }
    drop_nulls(&mut payload);
    if seen {
        let mut e = event(&c.scope, ctx, "sensor.event.deduped", payload);
        e.idempotency_key = Some(c.dedupe_key.clone());
        return Ok(Decided {
            events: vec![e],
            note: Some(format!(
                "deduped: the sensor event {pair} or its dedupe key {} was seen before; nothing was created",
                c.dedupe_key
            )),
        });
    }
    let mut recorded = event(&c.scope, ctx, "sensor.event.recorded", payload);
    recorded.idempotency_key = Some(c.dedupe_key.clone());
    let mut events = vec![recorded];
    if let Some(intent) = &c.proposed_task {
        let mut intent = intent.clone();
        intent
            .source
            .get_or_insert_with(|| format!("sensor:{}:{}", c.sensor_id, c.dedupe_key));
        let task_id = ctx.id("task");
        events.extend(new_task_events(
            &c.scope, ctx, &task_id, &intent, None, None,
        ));
    }
    Ok(Decided::events(events))
}

/// A new queued task: `task.created` from its intent (with the idempotency key and the
/// attempt budget when given) and `task.queued`.
pub(crate) fn new_task_events(
    scope: &Scope,
    ctx: &Context,
    task_id: &str,
    intent: &TaskIntent,
    idempotency_key: Option<&str>,
    max_attempts: Option<u32>,
) -> Vec<Envelope> {
    let mut payload = json!({
        "taskType": intent.task_type,
        "title": intent.subject,
        "objective": intent.description,
        "source": intent.source,
        "priority": intent.priority,
        "maxAttempts": max_attempts,
        "evidenceRequirements": intent.evidence_requirements,
        "intent": (!intent.payload.is_empty()).then_some(&intent.payload),
    });
    if let Value::Object(o) = &mut payload {
        o.retain(|_, v| !v.is_null());
    }
    let mut created = task_event(scope, ctx, task_id, "task.created", payload);
    created.idempotency_key = idempotency_key.map(str::to_string);
    let queued = task_event(scope, ctx, task_id, "task.queued", Value::Null);
    vec![created, queued]
}
