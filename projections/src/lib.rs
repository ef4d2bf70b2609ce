//! The runtime state folded from the log, the seeds' rules, and the read models built from
//! them.
//!
//! - [`rules`]: the invariants of docs/MODEL.md §4, written once, with their names.
//! - [`state`]: the one state machine — a pure fold of a stream's events into tasks, attempts,
//!   actions, turns, the checklist, schedules and sensor keys; facts that break a rule are kept
//!   and shown as incidents.
//!
//! The control plane's commands decide with [`rules`] on [`state`]; they live in
//! `journal-commands`, which depends on this crate.
//!
//! - [`projection`], [`store`], [`worker`]: the projection runtime — a named, versioned fold,
//!   its states and checkpoint kept together in redb, a worker that resumes, rebuilds on a
//!   version change and faults (never skips) on an event it cannot apply; [`partition`]: builds
//!   from the start in bounded memory, one partition of the streams per pass.
//! - [`id_map`]: the folds' maps from ids, hashed for lookups, read in key order.
//! - [`activity`], [`models`], [`views`]: the journal's projections and the read models of
//!   docs/MODEL.md §5 built from them, each answer with its freshness.
//!
//! NOTE: this crate reads the log only through `journal-engine`'s public API and never opens
//! segment files.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod activity;
pub mod agentruntime;
pub mod ecosystem;
pub mod id_map;
pub mod models;
pub mod partition;
pub mod projection;
pub mod rules;
pub mod state;
pub mod store;
pub mod views;
pub mod worker;
mod worker_error;
pub mod workload;

pub use models::{Answer, ReadModels};
pub use projection::{Event, Freshness, FreshnessState, Projection};
pub use rules::{Rule, Violation};
pub use state::StreamState;
