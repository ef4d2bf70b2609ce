//! The seeds' invariants (docs/MODEL.md §4), written once. Commands (`journal-commands`) refuse what
//! breaks them; the state fold ([`crate::state`]) records facts that break them anyway (facts are
//! never refused for their meaning) and shows each as an incident naming the rule.

use journal_format::status::Lifecycle;
use serde::Serialize;

/// A named invariant. The name is what a refused command's error and an incident carry.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A terminal task never becomes non-terminal again, except by a retry that opens a new
    /// attempt after a failure (the session runtime's follow-up run); nothing follows `completed`,
    /// `cancelled` or `archived` but archiving.
    TerminalIsFinal,
    /// A resume of a terminal task is refused (the session runtime's resume safety).
    ResumeOfTerminal,
    /// A retry needs a failed, timed-out, lost, interrupted or blocked task.
    RetryNeedsFailure,
    /// A task must exist (in the command's stream) before it is acted on.
    UnknownTask,
    /// A task id is created once.
    TaskExists,
    /// A task that is running is not started again.
    AlreadyRunning,
    /// Leaving `waiting_permission` happens only through `respond_action` with the action's id.
    ActionPending,
    /// `respond_action` needs an action that was required.
    UnknownAction,
    /// An action is resolved once; an unresolved action is never treated as approved.
    ActionAlreadyResolved,
    /// Completion needs an accepted completion decision (the coding-agent runtime).
    CompletionNotAccepted,
    /// Completion needs the evidence the task declared: every required artifact exists.
    EvidenceMissing,
    /// In the queue runtime: `completed` requires machine status `ok`.
    MachineStatusNotOk,
    /// In the queue runtime: cancellation comes from an operator, a user or policy, never from agent output.
    OnlyOperatorCancels,
    /// In the session runtime: a checklist is never empty.
    ChecklistEmpty,
    /// In the session runtime: checklist item ids are unique.
    ChecklistDuplicateId,
    /// In the session runtime: at most one checklist item is `in_progress`.
    ChecklistMultipleInProgress,
    /// In the session runtime: every checklist item has a title that is not blank.
    ChecklistBlankTitle,
    /// In the session runtime: an item's kind is `implementation` or `verification`.
    ChecklistUnknownKind,
    /// In the session runtime: `checklist_create` fails if a checklist exists.
    ChecklistExists,
    /// In the session runtime: `checklist_update` needs a checklist.
    NoChecklist,
    /// Task dependencies form no cycle, and a task does not depend on itself.
    DependencyCycle,
    /// A turn id is submitted once.
    TurnExists,
    /// A schedule's interval is at least one second, and puts its next run at a time the
    /// journal can record (before 2262-04-12).
    InvalidInterval,
    /// A command's arguments are malformed (a missing or mistyped field).
    InvalidArguments,
}

impl Rule {
    /// The rule's name, as errors and incidents carry it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Rule::TerminalIsFinal => "terminal_is_final",
            Rule::ResumeOfTerminal => "resume_of_terminal",
            Rule::RetryNeedsFailure => "retry_needs_failure",
            Rule::UnknownTask => "unknown_task",
            Rule::TaskExists => "task_exists",
            Rule::AlreadyRunning => "already_running",
            Rule::ActionPending => "action_pending",
            Rule::UnknownAction => "unknown_action",
            Rule::ActionAlreadyResolved => "action_already_resolved",
            Rule::CompletionNotAccepted => "completion_not_accepted",
            Rule::EvidenceMissing => "evidence_missing",
            Rule::MachineStatusNotOk => "machine_status_not_ok",
            Rule::OnlyOperatorCancels => "only_operator_cancels",
            Rule::ChecklistEmpty => "checklist_empty",
            Rule::ChecklistDuplicateId => "checklist_duplicate_id",
            Rule::ChecklistMultipleInProgress => "checklist_multiple_in_progress",
            Rule::ChecklistBlankTitle => "checklist_blank_title",
            Rule::ChecklistUnknownKind => "checklist_unknown_kind",
            Rule::ChecklistExists => "checklist_exists",
            Rule::NoChecklist => "no_checklist",
            Rule::DependencyCycle => "dependency_cycle",
            Rule::TurnExists => "turn_exists",
            Rule::InvalidInterval => "invalid_interval",
            Rule::InvalidArguments => "invalid_arguments",
        }
    }
}

/// A broken rule and what broke it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// What broke it, with the ids concerned.
    pub message: String,
}

impl Violation {
    /// A violation of `rule`.
    pub fn new(rule: Rule, message: impl Into<String>) -> Violation {
        Violation {
            rule,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.rule.name(), self.message)
    }
}

/// What a task lifecycle event moves the task to; `None` for events that do not change it
/// (`task.updated`, `task.progress`, attempt completion).
#[must_use]
pub fn target_of(event_type: &str) -> Option<Lifecycle> {
    use Lifecycle as L;
    Some(match event_type {
        "task.created" | "task.accepted" => L::Accepted,
        "task.queued" => L::Queued,
        "task.started" | "task.resumed" | "task.attempt.started" => L::Running,
        "task.waiting" => L::WaitingInput,
        "task.blocked" => L::Blocked,
        "task.paused" => L::Paused,
        "task.retrying" => L::Retrying,
        "task.cancel_requested" => L::Cancelling,
        "task.cancelled" => L::Cancelled,
        "task.timed_out" => L::TimedOut,
        "task.failed" => L::Failed,
        "task.lost" => L::Lost,
        "task.completed" => L::Completed,
        "task.archived" => L::Archived,
        _ => return None,
    })
}

/// Whether a retry (a new attempt) may follow `from`.
#[must_use]
pub fn retryable_from(from: Lifecycle) -> bool {
    use Lifecycle as L;
    matches!(
        from,
        L::Failed | L::TimedOut | L::Lost | L::Interrupted | L::Blocked | L::Retrying
    )
}

/// Checks one lifecycle step of a task: `event_type` moving it from `from` to `to`.
///
/// # Errors
/// The broken rule: leaving a terminal state other than by a retry's new attempt after a
/// failure, or leaving `waiting_permission` other than by resolving the action.
pub fn check_transition(
    task_id: &str,
    from: Lifecycle,
    to: Lifecycle,
    event_type: &str,
) -> Result<(), Violation> {
    use Lifecycle as L;
    if from.is_terminal() {
        let new_attempt = matches!(event_type, "task.retrying" | "task.attempt.started");
        let allowed = to == L::Archived || (new_attempt && retryable_from(from));
        if !allowed {
            return Err(Violation::new(
                Rule::TerminalIsFinal,
                format!(
                    "task {task_id} is {from:?} (terminal); `{event_type}` would make it {to:?}"
                )
                .to_lowercase(),
            ));
        }
    }
    if from == L::WaitingPermission
        && matches!(to, L::Running)
        && !matches!(event_type, "action.resolved")
    {
        return Err(Violation::new(
            Rule::ActionPending,
            format!(
                "task {task_id} is waiting for permission; only respond_action with the action's id moves it on, not `{event_type}`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Lifecycle as L;

    #[test]
    fn terminal_states_stay_terminal_except_retry_after_failure_and_archive() {
        assert_eq!(
            check_transition("t", L::Completed, L::Running, "task.resumed")
                .unwrap_err()
                .rule,
            Rule::TerminalIsFinal
        );
        assert!(check_transition("t", L::Completed, L::Archived, "task.archived").is_ok());
        assert!(check_transition("t", L::Failed, L::Retrying, "task.retrying").is_ok());
        assert!(check_transition("t", L::Failed, L::Running, "task.attempt.started").is_ok());
        assert_eq!(
            check_transition("t", L::Cancelled, L::Running, "task.attempt.started")
                .unwrap_err()
                .rule,
            Rule::TerminalIsFinal
        );
        assert_eq!(
            check_transition("t", L::Completed, L::Failed, "task.failed")
                .unwrap_err()
                .rule,
            Rule::TerminalIsFinal
        );
    }

    #[test]
    fn waiting_permission_is_left_only_by_the_action() {
        assert_eq!(
            check_transition("t", L::WaitingPermission, L::Running, "task.resumed")
                .unwrap_err()
                .rule,
            Rule::ActionPending
        );
        assert!(check_transition("t", L::WaitingPermission, L::Running, "action.resolved").is_ok());
        assert!(check_transition(
            "t",
            L::WaitingPermission,
            L::Cancelling,
            "task.cancel_requested"
        )
        .is_ok());
    }
}
