//! The filters of `GET /v1/events` and `GET /v1/events/stream` ([`ReadQuery`]): the query
//! string both routes take, the engine's [`Filter`] it makes, and the query string of a page's
//! next page.

use journal_engine::Filter;
use journal_format::Position;
use serde::Deserialize;
use utoipa::IntoParams;

/// The filters of `GET /v1/events` and `GET /v1/events/stream`.
#[derive(Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReadQuery {
    /// The first position (inclusive).
    #[param(minimum = 0)]
    pub from: Option<u64>,
    /// The last position (inclusive).
    #[param(minimum = 0)]
    pub to: Option<u64>,
    /// Only this session's events.
    pub session: Option<String>,
    /// Only this task's events.
    pub task: Option<String>,
    /// Only this run's events.
    pub run: Option<String>,
    /// Only events whose type starts with this.
    #[serde(rename = "type")]
    pub type_prefix: Option<String>,
    /// The page size (default 100; a larger one than 1,000 is lowered to it). Not used by
    /// the stream.
    #[param(minimum = 1)]
    pub limit: Option<usize>,
}

impl ReadQuery {
    /// The engine's filter of these parameters (without a limit).
    pub(crate) fn filter(&self) -> Filter {
        Filter {
            from: self.from.map(Position),
            to: self.to.map(Position),
            session: self.session.clone(),
            task: self.task.clone(),
            run: self.run.clone(),
            type_prefix: self.type_prefix.clone(),
            limit: None,
        }
    }

    /// The query string of the page that starts at `from`, with the same filters.
    pub(crate) fn next(&self, from: u64, limit: usize) -> String {
        let mut q = format!("from={from}&limit={limit}");
        let mut add = |key: &str, value: &Option<String>| {
            if let Some(v) = value {
                q.push_str(&format!("&{key}={}", encode(v)));
            }
        };
        add("to", &self.to.map(|t| t.to_string()));
        add("session", &self.session);
        add("task", &self.task);
        add("run", &self.run);
        add("type", &self.type_prefix);
        q
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
