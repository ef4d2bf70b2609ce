//! The status model of docs/MODEL.md §3: four fields, never one overloaded word — `lifecycle`,
//! `outcome` (terminal only), `reason` (a namespaced class) and `native_status` (the source's
//! own word, always kept) — and the mapping from each seed's own words.

use serde::{Deserialize, Serialize};

/// Where a task, run or session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The Agent Runtime task status values, documented in docs/MODEL.md §3.
pub enum Lifecycle {
    Draft,
    Accepted,
    Queued,
    Preparing,
    Running,
    WaitingInput,
    WaitingPermission,
    WaitingResource,
    Blocked,
    Paused,
    Retrying,
    Cancelling,
    Cancelled,
    TimedOut,
    Failed,
    Lost,
    Completed,
    Archived,
    Stale,
    Unknown,
    /// Stopped by a crash, resumable (beyond the spec's values).
    Interrupted,
}

impl Lifecycle {
    /// Whether nothing follows but an explicit resume that opens a new attempt.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Lifecycle::Completed
                | Lifecycle::Failed
                | Lifecycle::Cancelled
                | Lifecycle::TimedOut
                | Lifecycle::Archived
        )
    }
}

/// How a terminal task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Outcome {
    Ok,
    PartialSuccess,
    NeedsUserAction,
    Failed,
    Cancelled,
    /// Completed without the evidence or decision that would make it verified.
    Unverified,
}

/// The four status fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Where it stands.
    pub lifecycle: Lifecycle,
    /// How it ended; only when `lifecycle` is terminal.
    pub outcome: Option<Outcome>,
    /// A namespaced class, e.g. `queue:operator`.
    pub reason: Option<String>,
    /// The source's own word, always kept.
    pub native_status: String,
}

/// Whose words a native status is in (the runtime designs of docs/MODEL.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vocabulary {
    /// The ecosystem contract's AgentSession status.
    EcosystemSession,
    /// The ecosystem contract's AgentRun / AgentTask status.
    EcosystemRun,
    /// The session runtime's session runtime (with its detail word and terminal status, see [`map`]).
    SessionRuntime,
    /// The queue runtime's queue runtime TaskRecord status.
    QueueRuntime,
    /// The coding-agent runtime's narrow runtime state.
    NarrowRuntime,
}

/// The status of a checklist item (the ecosystem contract's AgentTodo is a checklist item).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ChecklistItemStatus {
    Pending,
    InProgress,
    Completed,
    Removed,
}

/// Maps the ecosystem contract's AgentTodo status; `None` for a word that design does not define.
#[must_use]
pub fn map_todo(native: &str) -> Option<ChecklistItemStatus> {
    Some(match native {
        "open" => ChecklistItemStatus::Pending,
        "in-progress" => ChecklistItemStatus::InProgress,
        "done" => ChecklistItemStatus::Completed,
        "dropped" => ChecklistItemStatus::Removed,
        _ => return None,
    })
}

/// Maps a native status to the four fields. `detail` is the second word some runtimes pair
/// with their status (the session runtime's `blocked` + `awaiting_approval`, `paused` +
/// `needs_user_action`, `completed` + its terminal status); `attempts_exhausted` tells the
/// queue runtime's `retryable_failure` with no attempt left (blocked) from one that will retry.
///
/// A word the mapping does not know gives `lifecycle: unknown` with the word kept in
/// `native_status`: nothing is guessed.
#[must_use]
pub fn map(
    vocabulary: Vocabulary,
    native: &str,
    detail: Option<&str>,
    attempts_exhausted: bool,
) -> Status {
    use Lifecycle as L;
    let status = |lifecycle, outcome: Option<Outcome>, reason: Option<&str>| Status {
        lifecycle,
        outcome,
        reason: reason.map(str::to_string),
        native_status: native.to_string(),
    };
    match (vocabulary, native, detail) {
        (Vocabulary::EcosystemSession, "active", _) => status(L::Running, None, None),
        (Vocabulary::EcosystemSession, "waiting-approval", _) => {
            status(L::WaitingPermission, None, None)
        }
        (Vocabulary::EcosystemSession, "paused", _) => status(L::Paused, None, None),
        (Vocabulary::EcosystemSession | Vocabulary::EcosystemRun, "completed", _) => {
            status(L::Completed, Some(Outcome::Ok), None)
        }
        (Vocabulary::EcosystemSession | Vocabulary::EcosystemRun, "failed", _) => {
            status(L::Failed, Some(Outcome::Failed), None)
        }
        (Vocabulary::EcosystemSession | Vocabulary::EcosystemRun, "cancelled", _) => {
            status(L::Cancelled, Some(Outcome::Cancelled), None)
        }
        (Vocabulary::EcosystemRun, "queued", _) => status(L::Queued, None, None),
        (Vocabulary::EcosystemRun, "running", _) => status(L::Running, None, None),
        (Vocabulary::EcosystemRun, "blocked", _) => status(L::Blocked, None, None),

        (Vocabulary::SessionRuntime, "pending" | "queued", _) => status(L::Queued, None, None),
        (Vocabulary::SessionRuntime, "planning", _) => status(L::Preparing, None, None),
        (Vocabulary::SessionRuntime, "executing", _) => status(L::Running, None, None),
        (Vocabulary::SessionRuntime, "blocked", Some("awaiting_approval")) => {
            status(L::WaitingPermission, None, None)
        }
        (Vocabulary::SessionRuntime, "blocked", _) => status(L::Blocked, None, None),
        (Vocabulary::SessionRuntime, "paused", Some("needs_user_action")) => {
            status(L::WaitingInput, None, None)
        }
        (Vocabulary::SessionRuntime, "paused", _) => status(L::Paused, None, None),
        (Vocabulary::SessionRuntime, "interrupted", _) => status(L::Interrupted, None, None),
        (Vocabulary::SessionRuntime, "completed", terminal) => {
            let outcome = match terminal {
                Some("partial_success") => Outcome::PartialSuccess,
                Some("needs_user_action") => Outcome::NeedsUserAction,
                Some("failed") => Outcome::Failed,
                Some("cancelled") => Outcome::Cancelled,
                Some("ok" | "success" | "completed") => Outcome::Ok,
                // No terminal status recorded: completion is not assumed successful.
                _ => Outcome::Unverified,
            };
            status(L::Completed, Some(outcome), None)
        }

        (Vocabulary::QueueRuntime, "pending", _) => status(L::Queued, None, None),
        (Vocabulary::QueueRuntime, "running", _) => status(L::Running, None, None),
        (Vocabulary::QueueRuntime, "completed", _) => status(L::Completed, Some(Outcome::Ok), None),
        (Vocabulary::QueueRuntime, "retryable_failure", _) if attempts_exhausted => {
            status(L::Blocked, None, Some("queue:retry_exhausted"))
        }
        (Vocabulary::QueueRuntime, "retryable_failure", _) => {
            status(L::Retrying, None, Some("queue:retryable_failure"))
        }
        (Vocabulary::QueueRuntime, "permanent_failure", _) => status(
            L::Failed,
            Some(Outcome::Failed),
            Some("queue:permanent_failure"),
        ),
        (Vocabulary::QueueRuntime, "blocked", _) => status(L::Blocked, None, None),
        (Vocabulary::QueueRuntime, "operator_canceled", _) => status(
            L::Cancelled,
            Some(Outcome::Cancelled),
            Some("queue:operator"),
        ),

        (Vocabulary::NarrowRuntime, "idle", _) => status(L::Queued, None, None),
        (Vocabulary::NarrowRuntime, "streaming", _) => status(L::Running, None, None),
        (Vocabulary::NarrowRuntime, "waiting_for_permission", _) => {
            status(L::WaitingPermission, None, None)
        }
        (Vocabulary::NarrowRuntime, "waiting_for_input", _) => status(L::WaitingInput, None, None),
        (Vocabulary::NarrowRuntime, "resumable", _) => status(L::Interrupted, None, None),
        (Vocabulary::NarrowRuntime, "failed_terminal", _) => {
            status(L::Failed, Some(Outcome::Failed), None)
        }

        _ => status(L::Unknown, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Lifecycle as L;
    use Vocabulary as V;

    /// (vocabulary, native word, detail, attempts exhausted) → (lifecycle, outcome, reason).
    type Row = (
        V,
        &'static str,
        Option<&'static str>,
        bool,
        L,
        Option<Outcome>,
        Option<&'static str>,
    );

    /// docs/MODEL.md §3, row by row.
    #[test]
    fn every_row_of_the_mapping_table() {
        let rows: &[Row] = &[
            (
                V::EcosystemSession,
                "active",
                None,
                false,
                L::Running,
                None,
                None,
            ),
            (
                V::EcosystemSession,
                "waiting-approval",
                None,
                false,
                L::WaitingPermission,
                None,
                None,
            ),
            (
                V::EcosystemSession,
                "paused",
                None,
                false,
                L::Paused,
                None,
                None,
            ),
            (
                V::EcosystemSession,
                "completed",
                None,
                false,
                L::Completed,
                Some(Outcome::Ok),
                None,
            ),
            (
                V::EcosystemSession,
                "failed",
                None,
                false,
                L::Failed,
                Some(Outcome::Failed),
                None,
            ),
            (
                V::EcosystemSession,
                "cancelled",
                None,
                false,
                L::Cancelled,
                Some(Outcome::Cancelled),
                None,
            ),
            (
                V::EcosystemRun,
                "queued",
                None,
                false,
                L::Queued,
                None,
                None,
            ),
            (
                V::EcosystemRun,
                "running",
                None,
                false,
                L::Running,
                None,
                None,
            ),
            (
                V::EcosystemRun,
                "blocked",
                None,
                false,
                L::Blocked,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "pending",
                None,
                false,
                L::Queued,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "queued",
                None,
                false,
                L::Queued,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "planning",
                None,
                false,
                L::Preparing,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "executing",
                None,
                false,
                L::Running,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "blocked",
                Some("awaiting_approval"),
                false,
                L::WaitingPermission,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "paused",
                Some("needs_user_action"),
                false,
                L::WaitingInput,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "interrupted",
                None,
                false,
                L::Interrupted,
                None,
                None,
            ),
            (
                V::SessionRuntime,
                "completed",
                Some("partial_success"),
                false,
                L::Completed,
                Some(Outcome::PartialSuccess),
                None,
            ),
            (
                V::SessionRuntime,
                "completed",
                Some("failed"),
                false,
                L::Completed,
                Some(Outcome::Failed),
                None,
            ),
            (
                V::SessionRuntime,
                "completed",
                None,
                false,
                L::Completed,
                Some(Outcome::Unverified),
                None,
            ),
            (
                V::QueueRuntime,
                "pending",
                None,
                false,
                L::Queued,
                None,
                None,
            ),
            (
                V::QueueRuntime,
                "retryable_failure",
                None,
                false,
                L::Retrying,
                None,
                Some("queue:retryable_failure"),
            ),
            (
                V::QueueRuntime,
                "retryable_failure",
                None,
                true,
                L::Blocked,
                None,
                Some("queue:retry_exhausted"),
            ),
            (
                V::QueueRuntime,
                "permanent_failure",
                None,
                false,
                L::Failed,
                Some(Outcome::Failed),
                Some("queue:permanent_failure"),
            ),
            (
                V::QueueRuntime,
                "operator_canceled",
                None,
                false,
                L::Cancelled,
                Some(Outcome::Cancelled),
                Some("queue:operator"),
            ),
            (V::NarrowRuntime, "idle", None, false, L::Queued, None, None),
            (
                V::NarrowRuntime,
                "streaming",
                None,
                false,
                L::Running,
                None,
                None,
            ),
            (
                V::NarrowRuntime,
                "waiting_for_permission",
                None,
                false,
                L::WaitingPermission,
                None,
                None,
            ),
            (
                V::NarrowRuntime,
                "waiting_for_input",
                None,
                false,
                L::WaitingInput,
                None,
                None,
            ),
            (
                V::NarrowRuntime,
                "resumable",
                None,
                false,
                L::Interrupted,
                None,
                None,
            ),
            (
                V::NarrowRuntime,
                "failed_terminal",
                None,
                false,
                L::Failed,
                Some(Outcome::Failed),
                None,
            ),
            (
                V::NarrowRuntime,
                "exploded",
                None,
                false,
                L::Unknown,
                None,
                None,
            ),
        ];
        for (vocabulary, native, detail, exhausted, lifecycle, outcome, reason) in rows {
            let s = map(*vocabulary, native, *detail, *exhausted);
            assert_eq!(
                (
                    s.lifecycle,
                    s.outcome,
                    s.reason.as_deref(),
                    s.native_status.as_str()
                ),
                (*lifecycle, *outcome, *reason, *native),
                "{vocabulary:?} {native} {detail:?}"
            );
            assert_eq!(
                s.outcome.is_some(),
                s.lifecycle.is_terminal() && s.lifecycle != L::Archived,
                "outcome only when terminal: {native}"
            );
        }
    }

    #[test]
    fn todo_words_are_checklist_item_statuses() {
        assert_eq!(map_todo("open"), Some(ChecklistItemStatus::Pending));
        assert_eq!(
            map_todo("in-progress"),
            Some(ChecklistItemStatus::InProgress)
        );
        assert_eq!(map_todo("done"), Some(ChecklistItemStatus::Completed));
        assert_eq!(map_todo("dropped"), Some(ChecklistItemStatus::Removed));
        assert_eq!(map_todo("later"), None);
    }

    #[test]
    fn terminal_lifecycles_are_the_five_of_model_md() {
        let terminal: Vec<Lifecycle> = [
            L::Draft,
            L::Accepted,
            L::Queued,
            L::Preparing,
            L::Running,
            L::WaitingInput,
            L::WaitingPermission,
            L::WaitingResource,
            L::Blocked,
            L::Paused,
            L::Retrying,
            L::Cancelling,
            L::Cancelled,
            L::TimedOut,
            L::Failed,
            L::Lost,
            L::Completed,
            L::Archived,
            L::Stale,
            L::Unknown,
            L::Interrupted,
        ]
        .into_iter()
        .filter(|l| l.is_terminal())
        .collect();
        assert_eq!(
            terminal,
            vec![
                L::Cancelled,
                L::TimedOut,
                L::Failed,
                L::Completed,
                L::Archived
            ]
        );
        assert_eq!(
            serde_json::to_string(&L::WaitingPermission).unwrap(),
            "\"waiting_permission\""
        );
    }
}
