//! The runtime state folded from the log, the seeds' rules, and the commands that decide on
//! them.
//!
//! - [`rules`]: the invariants of MODEL.md §4, written once, with their names.
//! - [`state`]: the one state machine — a pure fold of a stream's events into tasks, attempts,
//!   actions, turns, the checklist, schedules and sensor keys; facts that break a rule are kept
//!   and shown as incidents.
//! - [`commands`]: seed 002's control plane; each command reads its stream, decides with
//!   [`rules`] on [`state`], and appends atomically with the expected stream version.
//!
//! NOTE: this crate reads the log only through `journal-engine`'s public API and never opens
//! segment files. The read models and projection workers of MODEL.md §5 build on [`state`].

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod commands;
pub mod rules;
pub mod state;

pub use commands::{Accepted, Command, CommandError, Commands};
pub use rules::{Rule, Violation};
pub use state::StreamState;
