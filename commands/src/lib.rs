//! Commands: the runtime way to write (docs/MODEL.md §4, the Agent Runtime spec's control plane). A command reads
//! its stream, folds it into a [`StreamState`](journal_projections::StreamState), decides
//! against the rules of [`journal_projections::rules`], and appends its events atomically with
//! the stream's version as the expected version. When another writer got there first, the
//! command is decided again on the new state (and then applied, found a no-op, or refused),
//! never applied twice.
//!
//! Every command names its stream: the session (`sessionId`), or for a task command without a
//! session, the task's own stream. Queue, schedule and sensor commands run in the session that
//! holds the queue (the ecosystem contract: one planning session, each scheduled entry a run in it), so their
//! dedupe checks and their writes are one atomic decision.
//!
//! - [`command`]: [`Command`], parsed from a name and JSON arguments, and where it writes.
//! - [`runner`]: [`Commands`], which reads, decides, appends and decides again on a conflict;
//!   [`Accepted`], what it did. [`error`]: [`CommandError`], why it did not.
//! - By subject, each command's arguments and its pure decision: [`task`], [`completion`],
//!   [`turn`], [`action`], [`checklist`], [`session`] (checkpoints, dispatch), [`queue`],
//!   [`schedule`].
//!
//! This crate reads the log only through `journal-engine`'s public API, and the state and the
//! rules from `journal-projections`, which does not depend on it.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod action;
pub mod checklist;
pub mod command;
pub mod completion;
mod context;
mod decision;
pub mod error;
pub mod queue;
pub mod runner;
pub mod schedule;
mod scope;
pub mod session;
pub mod task;
pub mod turn;

pub use action::{RequireAction, RespondAction};
pub use checklist::{ChecklistCommand, ChecklistItemInput};
pub use command::{Command, Scope, NAMES};
pub use completion::{completion_gate, CompleteTask, CompletionPolicy, DecideCompletion};
pub use error::CommandError;
pub use queue::{EnqueueTask, RecordSensorEvent};
pub use runner::{Accepted, Commands};
pub use schedule::{EvaluateSchedules, UpsertSchedule};
pub use session::{CaptureCheckpoint, RecordDispatch};
pub use task::{CreateTask, LinkTasks, TaskCommand};
pub use turn::{InterruptTurn, SubmitTurn};
