//! What a decision needs besides the state ([`Context`]: the time and fresh ids), what it
//! yields ([`Decided`]: the events to append and a note), and the builders of the events it
//! appends: shared by the subject modules.

use journal_format::Envelope;
use serde_json::{Map, Value};

use crate::scope::Scope;

/// What a decision needs besides the state: the time, and fresh ids.
pub(crate) struct Context {
    now: String,
    now_ns: i64,
    counter: std::cell::Cell<u32>,
}

impl Context {
    /// A decision made at `now_ns` (nanoseconds since 1970), stamped on its events.
    pub(crate) fn at(now_ns: i64) -> Context {
        Context {
            now: journal_format::time_fmt::format_rfc3339_ns(now_ns),
            now_ns,
            counter: std::cell::Cell::new(0),
        }
    }

    /// A fresh id with a prefix: the time and a counter, unique within the journal's clock.
    pub(crate) fn id(&self, prefix: &str) -> String {
        let n = self.counter.get();
        self.counter.set(n + 1);
        format!("{prefix}_{:x}{n:02x}", self.now_ns)
    }
}

/// A decision: the events to append, and a note.
pub(crate) struct Decided {
    pub(crate) events: Vec<Envelope>,
    pub(crate) note: Option<String>,
}

impl Decided {
    pub(crate) fn events(events: Vec<Envelope>) -> Decided {
        Decided { events, note: None }
    }

    pub(crate) fn noop(note: impl Into<String>) -> Decided {
        Decided {
            events: Vec::new(),
            note: Some(note.into()),
        }
    }
}

/// A new event stamped with the command's scope and time; the journal assigns its id.
pub(crate) fn event(scope: &Scope, ctx: &Context, event_type: &str, payload: Value) -> Envelope {
    let mut e = Envelope::new(event_type, "", ctx.now.clone());
    e.session_id = scope.session_id.clone();
    e.runtime_id = scope.runtime_id.clone();
    e.thread_id = scope.thread_id.clone();
    if !payload.is_null() {
        e.payload = Some(payload);
    }
    e
}

/// A new event about task `task`, as [`event`].
pub(crate) fn task_event(
    scope: &Scope,
    ctx: &Context,
    task: &str,
    event_type: &str,
    payload: Value,
) -> Envelope {
    let mut e = event(scope, ctx, event_type, payload);
    e.task_id = Some(task.to_string());
    e
}

/// `payload` with the fields of `details` it does not have already.
pub(crate) fn with_details(mut payload: Value, details: Option<&Map<String, Value>>) -> Value {
    if let (Value::Object(object), Some(details)) = (&mut payload, details) {
        for (k, v) in details {
            object.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    payload
}

/// Sets `key` on a JSON object (does nothing on another value).
pub(crate) fn set(object: &mut Value, key: &str, value: Value) {
    if let Value::Object(o) = object {
        o.insert(key.to_string(), value);
    }
}

/// Drops the null fields of a JSON object (an absent argument is left out of the payload, not
/// recorded as `null`); does nothing on another value.
pub(crate) fn drop_nulls(object: &mut Value) {
    if let Value::Object(o) = object {
        o.retain(|_, v| !v.is_null());
    }
}
