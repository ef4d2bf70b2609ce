//! A decision: [`decide`] sends each command to the function of its subject module.

use journal_projections::rules::Violation;
use journal_projections::StreamState;

use crate::command::Command;
use crate::context::{Context, Decided};
use crate::task::CancelBy;
use crate::{action, checklist, completion, queue, schedule, session, task, turn};

/// Decides a command on a state. Pure: the same state, command and context give the same
/// events.
pub(crate) fn decide(
    command: &Command,
    state: &StreamState,
    ctx: &Context,
) -> Result<Decided, Violation> {
    match command {
        Command::CreateTask(c) => task::create(c, state, ctx),
        Command::StartTask(c) => task::start(c, state, ctx),
        Command::RetryTask(c) => task::retry(c, state, ctx),
        Command::AppendTaskProgress(c) => task::progress(c, state, ctx),
        Command::PauseTask(c) => task::pause(c, state, ctx),
        Command::ResumeTask(c) => task::resume(c, state, ctx),
        Command::CancelTask(c) => task::cancel(c, state, ctx, CancelBy::Requester),
        Command::OperatorCancel(c) => task::cancel(c, state, ctx, CancelBy::Operator),
        Command::FailTask(c) => task::fail(c, state, ctx),
        Command::LinkTasks(c) => task::link(c, state, ctx),
        Command::DecideCompletion(c) => completion::decide_completion(c, state, ctx),
        Command::CompleteTask(c) => completion::complete(c, state, ctx),
        Command::SubmitTurn(c) => turn::submit(c, state, ctx),
        Command::InterruptTurn(c) => turn::interrupt(c, state, ctx),
        Command::RequireAction(c) => action::require(c, state, ctx),
        Command::RespondAction(c) => action::respond(c, state, ctx),
        Command::ChecklistCreate(c) => checklist::write(c, state, ctx, checklist::Write::Create),
        Command::ChecklistUpdate(c) => checklist::write(c, state, ctx, checklist::Write::Update),
        Command::CaptureCheckpoint(c) => session::capture_checkpoint(c, state, ctx),
        Command::RecordDispatch(c) => session::record_dispatch(c, state, ctx),
        Command::EnqueueTask(c) => queue::enqueue(c, state, ctx),
        Command::RecordSensorEvent(c) => queue::record_sensor_event(c, state, ctx),
        Command::UpsertSchedule(c) => schedule::upsert(c, ctx),
        Command::EvaluateSchedules(c) => schedule::evaluate(c, state, ctx),
    }
}
