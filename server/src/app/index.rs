//! The sessions list's own small read model: one compact row per session, folded from the log
//! as it grows (the rows are at the head whenever the list is asked for: only the events since
//! the last request are read), with each session's incident count taken from the rules' read
//! model once it has caught up with the session's newest event. Ten thousand sessions list
//! from memory: a filter, a sort and a page of rows.

use std::collections::{HashMap, HashSet};

use journal_engine::{Chain, Journal};
use journal_format::{Position, StoredEvent};
use journal_projections::ReadModels;
use journal_replay::html::{ListFilter, SessionRow};
use serde_json::Value;

use crate::error::ApiError;

/// A session's row and what its next events need to update it.
#[derive(Debug, Default)]
struct Entry {
    row: SessionRow,
    /// Tool calls seen, by id.
    calls: HashSet<String>,
    /// Tool calls without a result, by id.
    open: HashSet<String>,
    /// Approvals required and not resolved, by action id.
    pending: HashSet<String>,
    /// Token and cost figures by the fact they record (a revision replaces its fact's).
    costs: HashMap<String, (Option<u64>, Option<f64>)>,
    /// The newest lifecycle word (task or session).
    lifecycle: Option<String>,
    /// Whether its incident count waits for the rules' read model.
    incidents_due: bool,
}

/// Every session's row, up to `cursor`.
#[derive(Debug, Default)]
pub(crate) struct SessionIndex {
    cursor: u64,
    entries: HashMap<String, Entry>,
    /// Session ids, newest activity first.
    order: Vec<String>,
}

fn payload_str<'a>(e: &'a StoredEvent, key: &str) -> Option<&'a str> {
    e.envelope.payload.as_ref()?.get(key)?.as_str()
}

/// The text a person asked in a `turn.submitted`.
fn request_text(e: &StoredEvent) -> Option<String> {
    let input = e.envelope.payload.as_ref()?.get("input")?;
    let text = match input {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let line = text.lines().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(120).collect())
}

/// The state a lifecycle event type leaves a session in, if it says.
fn lifecycle_word(t: &str) -> Option<&'static str> {
    let word = t
        .strip_prefix("task.")
        .or_else(|| t.strip_prefix("session."))?;
    Some(match word {
        "failed" | "timed_out" | "lost" => "failed",
        "cancelled" => "cancelled",
        "completed" | "archived" | "ended" => "completed",
        "paused" | "waiting" | "blocked" => "paused",
        "created" | "queued" | "accepted" => "queued",
        "started" | "resumed" | "retrying" | "progress" => "running",
        _ => return None,
    })
}

impl Entry {
    fn apply(&mut self, event: &StoredEvent) {
        let e = &event.envelope;
        let row = &mut self.row;
        row.events += 1;
        row.started.get_or_insert_with(|| e.timestamp.clone());
        row.last_activity = Some(e.timestamp.clone());
        row.last_position = event.position.0;
        if row.runtime.is_none() {
            row.runtime = e.runtime_id.clone();
        }
        if row.imported_from.is_none() {
            row.imported_from = e.native_ns.clone();
        }
        let t = e.event_type.as_str();
        match t {
            "turn.submitted" => {
                row.turns += 1;
                if row.title.is_none() {
                    row.title = request_text(event);
                }
            }
            "task.created" if row.title.is_none() => {
                row.title = payload_str(event, "objective")
                    .or_else(|| payload_str(event, "title"))
                    .map(|s| s.chars().take(120).collect());
            }
            "tool.started" | "tool.args" => {
                if let Some(id) = &e.tool_call_id {
                    if self.calls.insert(id.clone()) {
                        row.tool_calls += 1;
                        self.open.insert(id.clone());
                    }
                }
            }
            "tool.result" | "tool.failed" => {
                if let Some(id) = &e.tool_call_id {
                    self.open.remove(id);
                }
                let failed = t == "tool.failed"
                    || payload_str(event, "status") == Some("failure")
                    || e.status.as_deref() == Some("failed");
                row.failures += u64::from(failed);
            }
            "model.failed" | "runtime.error" | "task.failed" => row.failures += 1,
            "action.required" => {
                self.pending.extend(e.action_id.clone());
            }
            "action.resolved" => {
                if let Some(id) = &e.action_id {
                    self.pending.remove(id);
                }
            }
            "cost.recorded" => {
                let p = e.payload.as_ref();
                let n = |k: &str| p.and_then(|p| p.get(k)).and_then(Value::as_u64);
                let tokens = match (n("inputTokens"), n("outputTokens")) {
                    (None, None) => None,
                    (i, o) => Some(i.unwrap_or(0) + o.unwrap_or(0)),
                };
                let usd = p.and_then(|p| p.get("costUsd")).and_then(Value::as_f64);
                let fact = e.supersedes().unwrap_or(&e.event_id).to_string();
                self.costs.insert(fact, (tokens, usd));
                row.tokens = self.costs.values().filter_map(|c| c.0).reduce(|a, b| a + b);
                row.cost_usd = self.costs.values().filter_map(|c| c.1).reduce(|a, b| a + b);
            }
            _ => {}
        }
        if let Some(word) = lifecycle_word(t) {
            self.lifecycle = Some(word.to_string());
        }
        row.open_calls = self.open.len() as u64;
        row.pending_approvals = self.pending.len() as u64;
        row.state = if row.pending_approvals > 0 {
            "waiting_approval".into()
        } else {
            self.lifecycle.clone().unwrap_or_else(|| "unknown".into())
        };
        self.incidents_due = true;
    }
}

impl SessionIndex {
    /// Folds in the events appended since the last call, then takes the incident counts the
    /// rules' read model now has for the sessions that changed.
    ///
    /// # Errors
    /// A journal or read-model error.
    pub(crate) fn refresh(
        &mut self,
        journal: &Journal,
        models: &ReadModels,
    ) -> Result<(), ApiError> {
        let head = journal.head().position.0;
        if head > self.cursor {
            for event in journal.read(Position(self.cursor + 1), None, Chain::Unverified) {
                let event = event.map_err(ApiError::engine)?;
                self.cursor = event.position.0;
                let Some(session) = event.envelope.session_id.clone() else {
                    continue;
                };
                let entry = self
                    .entries
                    .entry(session.clone())
                    .or_insert_with(|| Entry {
                        row: SessionRow {
                            id: session,
                            ..SessionRow::default()
                        },
                        ..Entry::default()
                    });
                entry.apply(&event);
            }
            // New activity reorders the list.
            self.sort();
        }
        self.take_incidents(models)
    }

    /// The incident counts of the sessions whose newest event the rules' read model reflects.
    fn take_incidents(&mut self, models: &ReadModels) -> Result<(), ApiError> {
        let reflected = models.freshness("state")?.position;
        for (id, entry) in &mut self.entries {
            if !entry.incidents_due || entry.row.last_position > reflected {
                continue;
            }
            let state = models.stream_state(&format!("session:{id}"))?;
            entry.row.incidents = state.model.map_or(0, |s| s.all_incidents().len() as u64);
            entry.incidents_due = false;
        }
        Ok(())
    }

    fn sort(&mut self) {
        let mut order: Vec<(&String, &Entry)> = self.entries.iter().collect();
        order.sort_by(|(_, a), (_, b)| {
            (b.row.last_activity.as_deref(), b.row.last_position)
                .cmp(&(a.row.last_activity.as_deref(), a.row.last_position))
        });
        self.order = order.into_iter().map(|(id, _)| id.clone()).collect();
    }

    /// The rows of the sessions `allowed` that pass `filter`, newest activity first: those of
    /// page `page` (of `per_page`), with how many pass in all.
    pub(crate) fn page(
        &self,
        filter: &ListFilter,
        page: usize,
        per_page: usize,
        allowed: impl Fn(&str) -> bool,
    ) -> (Vec<&SessionRow>, usize) {
        let mut matching = 0;
        let mut rows = Vec::new();
        let skip = page.saturating_mul(per_page);
        for id in &self.order {
            let Some(entry) = self.entries.get(id) else {
                continue;
            };
            if !entry.row.matches(filter) || !allowed(id) {
                continue;
            }
            if matching >= skip && rows.len() < per_page {
                rows.push(&entry.row);
            }
            matching += 1;
        }
        (rows, matching)
    }

    /// Sessions in all.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The runtimes sessions were imported from.
    pub(crate) fn imported(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .entries
            .values()
            .filter_map(|e| e.row.imported_from.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use journal_engine::{AppendOptions, Options};
    use journal_format::Envelope;
    use serde_json::json;

    use super::*;
    use crate::AppState;

    fn event(id: &str, t: &str, session: &str, more: Value) -> Envelope {
        let mut value = json!({"type": t, "eventId": id,
            "timestamp": format!("2026-05-11T10:00:{:02}Z", id.len()), "sessionId": session});
        if let (Value::Object(v), Value::Object(m)) = (&mut value, more) {
            v.extend(m);
        }
        Envelope::from_json_value(value, &mut || unreachable!("ids given")).unwrap()
    }

    fn append(journal: &Journal, events: Vec<Envelope>) {
        journal
            .append_batch_blocking(events, AppendOptions::default())
            .unwrap();
    }

    #[test]
    fn rows_follow_the_log_and_filter() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), Options::default()).unwrap();
        append(
            &journal,
            vec![
                event(
                    "a",
                    "turn.submitted",
                    "s1",
                    json!({"turnId": "t", "payload": {"input": [{"type": "text", "text": "fix the\nbuild"}]}}),
                ),
                event(
                    "ab",
                    "tool.started",
                    "s1",
                    json!({"toolCallId": "c1", "payload": {"toolName": "sh"}}),
                ),
                event("abc", "tool.failed", "s1", json!({"toolCallId": "c1"})),
                event("abcd", "tool.started", "s1", json!({"toolCallId": "c2"})),
                event("b", "action.required", "s2", json!({"actionId": "x1"})),
                event(
                    "bc",
                    "cost.recorded",
                    "s2",
                    json!({"payload": {"inputTokens": 10, "outputTokens": 5, "costUsd": 0.5}}),
                ),
            ],
        );
        let state = AppState::for_tests(&journal, 1 << 20);
        let mut index = SessionIndex::default();
        index.refresh(&journal, &state.models).unwrap();
        let all = |index: &SessionIndex, f: &ListFilter| {
            let (rows, n) = index.page(f, 0, 10, |_| true);
            (rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), n)
        };
        let (ids, n) = all(&index, &ListFilter::default());
        assert_eq!((ids, n), (vec!["s1".to_string(), "s2".to_string()], 2));
        let (rows, _) = index.page(&ListFilter::default(), 0, 10, |_| true);
        let s1 = rows[0];
        assert_eq!(s1.title.as_deref(), Some("fix the"));
        assert_eq!(
            (s1.turns, s1.tool_calls, s1.failures, s1.open_calls),
            (1, 2, 1, 1)
        );
        let s2 = rows[1];
        assert_eq!(
            (s2.pending_approvals, s2.state.as_str()),
            (1, "waiting_approval")
        );
        assert_eq!((s2.tokens, s2.cost_usd), (Some(15), Some(0.5)));
        let failed = ListFilter {
            failed: true,
            ..ListFilter::default()
        };
        assert_eq!(all(&index, &failed).0, vec!["s1"]);
        // Only what is new is read; new activity comes first.
        append(
            &journal,
            vec![
                event(
                    "bcdefgh",
                    "action.resolved",
                    "s2",
                    json!({"actionId": "x1"}),
                ),
                event("bcdefghi", "task.completed", "s2", json!({"taskId": "t2"})),
            ],
        );
        index.refresh(&journal, &state.models).unwrap();
        let (rows, _) = index.page(&ListFilter::default(), 0, 10, |_| true);
        assert_eq!(rows[0].id, "s2");
        assert_eq!(
            (rows[0].pending_approvals, rows[0].state.as_str()),
            (0, "completed")
        );
        assert_eq!(rows[0].events, 4);
        // A grant limited to other sessions lists none of these.
        assert_eq!(
            index.page(&ListFilter::default(), 0, 10, |id| id == "s9").1,
            0
        );
    }
}
