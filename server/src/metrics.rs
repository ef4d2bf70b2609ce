//! The server's counters, answered in the Prometheus text format on `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters kept while the server runs (from zero at start).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Batches appended.
    pub appends: AtomicU64,
    /// Events appended (duplicates included).
    pub events: AtomicU64,
    /// Request body bytes of the batches appended.
    pub bytes: AtomicU64,
    /// Subscribers following the log now.
    pub subscribers: AtomicU64,
    /// Subscribers closed for falling behind.
    pub subscribers_dropped: AtomicU64,
    /// Connections open now.
    pub connections: AtomicU64,
    /// Refusals and failures, by rule or kind.
    refusals: Mutex<BTreeMap<String, u64>>,
}

/// Decrements the connection gauge when dropped.
#[derive(Debug)]
pub struct ConnectionGuard<'m>(&'m Metrics);

impl Drop for ConnectionGuard<'_> {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Counts a refusal (or failure) by its rule or kind.
    pub fn refused(&self, reason: &str) {
        let mut refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        *refusals.entry(reason.to_string()).or_default() += 1;
    }

    /// Counts an open connection until the guard is dropped.
    pub fn connection(&self) -> ConnectionGuard<'_> {
        self.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self)
    }

    /// The Prometheus text exposition, with the journal's head position.
    pub fn render(&self, head_position: u64) -> String {
        let mut out = String::new();
        let mut one = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        one(
            "journal_appends_total",
            "counter",
            "Batches appended through the server.",
            load(&self.appends),
        );
        one(
            "journal_appended_events_total",
            "counter",
            "Events appended through the server (duplicates included).",
            load(&self.events),
        );
        one(
            "journal_appended_bytes_total",
            "counter",
            "Request body bytes of the batches appended.",
            load(&self.bytes),
        );
        one(
            "journal_subscribers",
            "gauge",
            "Subscribers following the log now.",
            load(&self.subscribers),
        );
        one(
            "journal_subscribers_dropped_total",
            "counter",
            "Subscribers closed for falling behind.",
            load(&self.subscribers_dropped),
        );
        one(
            "journal_connections",
            "gauge",
            "Connections open now.",
            load(&self.connections),
        );
        one(
            "journal_head_position",
            "gauge",
            "The position of the newest event.",
            head_position,
        );
        let _ = writeln!(
            out,
            "# HELP journal_refusals_total Requests refused or failed, by rule or kind.\n# TYPE journal_refusals_total counter"
        );
        let refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        for (reason, n) in refusals.iter() {
            let _ = writeln!(out, "journal_refusals_total{{reason=\"{reason}\"}} {n}");
        }
        out
    }
}
