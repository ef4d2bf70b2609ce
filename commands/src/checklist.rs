//! Checklist commands (the session runtime): `checklist_create` and `checklist_update`, each the whole
//! ordered list, with the verification nudge raised when its condition becomes true.

use std::collections::BTreeSet;

use journal_format::payload::ChecklistItem;
use journal_format::status::ChecklistItemStatus;
use journal_projections::rules::{Rule, Violation};
use journal_projections::state::Checklist;
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::context::{event, Context, Decided};
use crate::scope::Scope;

/// An item given to `checklist_create` / `checklist_update` (the id may be omitted).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChecklistItemInput {
    /// Kept when given; generated when absent.
    pub id: Option<String>,
    /// What the item is.
    pub title: String,
    /// `implementation` (default) or `verification`.
    pub kind: Option<String>,
    /// The item's status (default `pending`).
    pub status: Option<ChecklistItemStatus>,
}

/// `checklist_create` and `checklist_update`: the full ordered list.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChecklistCommand {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The whole list.
    pub items: Vec<ChecklistItemInput>,
}

/// Which checklist command writes the list: `checklist_create` needs a session without one,
/// `checklist_update` a session with one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    /// `checklist_create`.
    Create,
    /// `checklist_update`.
    Update,
}

/// `checklist_create` / `checklist_update`: `checklist.created` / `checklist.updated` with the
/// whole list, and `checklist.verification_nudged` when the nudge's condition becomes true.
pub(crate) fn write(
    c: &ChecklistCommand,
    state: &StreamState,
    ctx: &Context,
    write: Write,
) -> Result<Decided, Violation> {
    match (&state.checklist, write) {
        (Some(_), Write::Create) => {
            return Err(Violation::new(
                Rule::ChecklistExists,
                "a checklist already exists in this session; use checklist_update",
            ))
        }
        (None, Write::Update) => {
            return Err(Violation::new(
                Rule::NoChecklist,
                "no checklist exists in this session; use checklist_create",
            ))
        }
        _ => {}
    }
    let items = checklist_items(&c.items);
    Checklist::check_items(&items)?;
    let nudge = Checklist::needs_verification_nudge(&items);
    let was = state
        .checklist
        .as_ref()
        .is_some_and(|l| l.verification_nudge_needed);
    let kind = match write {
        Write::Create => "checklist.created",
        Write::Update => "checklist.updated",
    };
    let payload = json!({"items": items, "verificationNudgeNeeded": nudge});
    let mut events = vec![event(&c.scope, ctx, kind, payload.clone())];
    // Edge-triggered: the nudge is emitted when the condition becomes true.
    if nudge && !was {
        events.push(event(
            &c.scope,
            ctx,
            "checklist.verification_nudged",
            payload,
        ));
    }
    Ok(Decided::events(events))
}

/// The items of a checklist command with ids assigned (`item-N`, unused in the list) and
/// defaults applied.
fn checklist_items(input: &[ChecklistItemInput]) -> Vec<ChecklistItem> {
    let mut used: BTreeSet<String> = input.iter().filter_map(|i| i.id.clone()).collect();
    let mut next = 1usize;
    input
        .iter()
        .map(|i| {
            let id = i.id.clone().unwrap_or_else(|| loop {
                let candidate = format!("item-{next}");
                next += 1;
                if used.insert(candidate.clone()) {
                    break candidate;
                }
            });
            ChecklistItem {
                id,
                title: i.title.clone(),
                kind: i.kind.clone().unwrap_or_else(|| "implementation".into()),
                status: i.status.unwrap_or(ChecklistItemStatus::Pending),
            }
        })
        .collect()
}
