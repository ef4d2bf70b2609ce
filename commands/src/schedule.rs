//! Schedule commands (the queue runtime's recurring schedules): `upsert_schedule` and
//! `evaluate_schedules`, which fires every due schedule (a run of its task in the queue's
//! session) and moves it to its next run.

use journal_format::payload::SchedulePayload;
use journal_format::time_fmt;
use journal_format::Envelope;
use journal_projections::rules::{Rule, Violation};
use journal_projections::state::ScheduleState;
use journal_projections::StreamState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::context::{event, Context, Decided};
use crate::queue::new_task_events;
use crate::scope::Scope;

/// `upsert_schedule` (the queue runtime's RecurringScheduleRecord).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpsertSchedule {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The schedule.
    pub schedule: SchedulePayload,
}

/// `evaluate_schedules`: fire every due schedule at time `at`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluateSchedules {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub scope: Scope,
    /// The evaluation time (RFC 3339).
    pub at: String,
}

/// `upsert_schedule`: `schedule.upserted`; refused for an interval under a second or a next
/// run the journal cannot record.
pub(crate) fn upsert(c: &UpsertSchedule, ctx: &Context) -> Result<Decided, Violation> {
    if c.schedule.interval_seconds == 0 {
        return Err(Violation::new(
            Rule::InvalidInterval,
            format!(
                "schedule {}: intervalSeconds must be at least 1",
                c.schedule.schedule_id
            ),
        ));
    }
    let next_run = time_fmt::parse_rfc3339_ns(&c.schedule.next_run_at)
        .map_err(|e| Violation::new(Rule::InvalidArguments, format!("schedule.nextRunAt: {e}")))?;
    next_run_after(
        next_run,
        &c.schedule.schedule_id,
        c.schedule.interval_seconds,
    )?;
    let payload = serde_json::to_value(&c.schedule)
        .map_err(|e| Violation::new(Rule::InvalidArguments, format!("schedule: {e}")))?;
    Ok(Decided::events(vec![event(
        &c.scope,
        ctx,
        "schedule.upserted",
        payload,
    )]))
}

/// `evaluate_schedules`: every enabled schedule due at `at` fires; a no-op with a note when
/// none is due.
pub(crate) fn evaluate(
    c: &EvaluateSchedules,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    let at = time_fmt::parse_rfc3339_ns(&c.at)
        .map_err(|e| Violation::new(Rule::InvalidArguments, format!("at: {e}")))?;
    let mut events = Vec::new();
    for (id, s) in &state.schedules {
        if !s.schedule.enabled {
            continue;
        }
        let Ok(due) = time_fmt::parse_rfc3339_ns(&s.next_run_at) else {
            continue;
        };
        if due > at {
            continue;
        }
        events.extend(fire(c, ctx, id, s, Due { due, at })?);
    }
    if events.is_empty() {
        return Ok(Decided::noop(format!("no schedule is due at {}", c.at)));
    }
    Ok(Decided::events(events))
}

/// When a schedule is fired: the run it was due at, and the evaluation time (nanoseconds
/// since 1970).
struct Due {
    due: i128,
    at: i128,
}

/// One due schedule fired: `schedule.fired` (its next run, the runs it missed) and a new
/// queued task from its intent, sourced `schedule:<id>:<due time>`.
fn fire(
    c: &EvaluateSchedules,
    ctx: &Context,
    id: &str,
    s: &ScheduleState,
    when: Due,
) -> Result<Vec<Envelope>, Violation> {
    let interval_ns = i128::from(s.schedule.interval_seconds) * 1_000_000_000;
    let missed = u64::try_from((when.at - when.due) / interval_ns).unwrap_or(u64::MAX);
    let next = next_run_after(when.at, id, s.schedule.interval_seconds)?;
    let next_run_at = time_fmt::format_rfc3339_ns(next);
    let mut events = vec![event(
        &c.scope,
        ctx,
        "schedule.fired",
        json!({
            "scheduleId": id,
            "evaluatedAt": c.at,
            "dueAt": s.next_run_at,
            "nextRunAt": next_run_at,
            "missedRuns": missed,
        }),
    )];
    let mut intent = s.schedule.task.clone();
    intent.source = Some(format!("schedule:{id}:{}", s.next_run_at));
    let task_id = ctx.id("task");
    events.extend(new_task_events(
        &c.scope, ctx, &task_id, &intent, None, None,
    ));
    Ok(events)
}

/// The run `interval_seconds` after `from_ns`, when the journal can record it: times are
/// nanoseconds since 1970 in 64 bits, up to 2262-04-11T23:47:16.854775807Z.
///
/// # Errors
/// `invalid_interval` naming the schedule, never a run clamped to the last recordable time.
fn next_run_after(
    from_ns: i128,
    schedule_id: &str,
    interval_seconds: u64,
) -> Result<i64, Violation> {
    i128::from(interval_seconds)
        .checked_mul(1_000_000_000)
        .and_then(|interval_ns| from_ns.checked_add(interval_ns))
        .and_then(|next| i64::try_from(next).ok())
        .ok_or_else(|| {
            Violation::new(
                Rule::InvalidInterval,
                format!(
                    "schedule {schedule_id}: intervalSeconds {interval_seconds} after {} puts the \
                     next run past {}, the last time the journal can record",
                    time_fmt::format_rfc3339_ns(i64::try_from(from_ns).unwrap_or(i64::MAX)),
                    time_fmt::format_rfc3339_ns(i64::MAX)
                ),
            )
        })
}
