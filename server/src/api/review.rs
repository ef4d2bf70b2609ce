//! What a reviewer reads of a run: `GET /v1/replay/{kind}/{id}` (the narrative, as
//! `journal replay` prints it) and `GET /v1/evidence/{session}` (the evidence pack, as
//! `journal export evidence` writes it, as one tar archive). Both are built by
//! `journal-replay` on the blocking pool.
//!
//! A token limited to sessions replays only its own sessions (not a run or a task, which the
//! token cannot tell apart from other sessions' before reading them), and neither a replay nor
//! a pack that nests a subagent's session outside its prefixes.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use journal_replay::narrative::Step;
use journal_replay::pack::{self, Contents};
use journal_replay::{Narrative, Scope as ReplayScope};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{path, query};
use crate::auth::{authorize, check_session, forbidden};
use crate::error::ApiError;
use crate::tokens::{Grant, Scope};
use crate::AppState;

/// The media type of an evidence pack.
pub(crate) const TAR: &str = "application/x-tar";

/// What a replay is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
pub(crate) enum ReplayKind {
    /// A run (`runId`).
    Run,
    /// A task (`taskId`) with its runs.
    Task,
    /// A session (`sessionId`).
    Session,
}

impl ReplayKind {
    fn parse(kind: &str) -> Result<ReplayKind, ApiError> {
        match kind {
            "run" => Ok(ReplayKind::Run),
            "task" => Ok(ReplayKind::Task),
            "session" => Ok(ReplayKind::Session),
            other => Err(ApiError::bad_request(format!(
                "no replay kind {other:?}: run, task or session"
            ))),
        }
    }

    fn scope(self, id: &str) -> ReplayScope {
        match self {
            ReplayKind::Run => ReplayScope::Run(id.to_string()),
            ReplayKind::Task => ReplayScope::Task(id.to_string()),
            ReplayKind::Session => ReplayScope::Session(id.to_string()),
        }
    }
}

/// The form of a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ReplayFormat {
    /// Stable JSON (`journal schema replay.narrative`).
    #[default]
    Json,
    /// Plain text, as `journal replay` prints it (without colour).
    Text,
    /// One self-contained HTML page (no script, nothing fetched).
    Html,
}

/// The query of `GET /v1/replay/{kind}/{id}`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReplayQuery {
    /// The narrative as of this position (time travel); default the head.
    #[param(minimum = 0)]
    at: Option<u64>,
    /// `json` (default), `text` or `html`.
    #[param(inline)]
    format: Option<ReplayFormat>,
}

/// The sessions of the subagents a narrative nests (their `childSessionId`), at any depth.
fn nested_sessions(steps: &[Step], out: &mut BTreeSet<String>) {
    for step in steps {
        if step.kind == "subagent" {
            let child = step
                .details
                .get("payload")
                .and_then(|p| p.get("childSessionId"))
                .and_then(serde_json::Value::as_str);
            if let Some(child) = child {
                out.insert(child.to_string());
            }
        }
        nested_sessions(&step.children, out);
    }
}

/// Refuses a narrative that nests a session the grant does not cover.
pub(crate) fn check_nested(grant: &Grant, narrative: &Narrative) -> Result<(), ApiError> {
    if grant.sessions().is_none() {
        return Ok(());
    }
    let mut sessions = BTreeSet::new();
    nested_sessions(&narrative.steps, &mut sessions);
    sessions
        .iter()
        .try_for_each(|s| check_session(grant, Some(s)))
}

fn nothing(what: String) -> ApiError {
    ApiError::kind(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("nothing is recorded about {what}"),
    )
}

/// The narrative of a run, task or session as of `at` (the head when absent), in `format`:
/// the narrative `journal replay KIND ID --at P --format F` prints.
#[utoipa::path(
    get,
    path = "/v1/replay/{kind}/{id}",
    operation_id = "replay",
    tag = "review",
    params(
        ("kind" = inline(ReplayKind), Path, description = "`run`, `task` or `session`"),
        ("id" = String, Path, description = "The run's, task's or session's id"),
        ReplayQuery,
    ),
    responses(
        (status = 200, description = "The narrative", content(
            (ref("#/components/schemas/replay.narrative") = "application/json"),
            (String = "text/plain"),
            (String = "text/html"),
        )),
        (status = 400, description = "A kind or format that does not exist, a bad query parameter, or an id that is not UTF-8", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to other sessions (and then reads only sessions)", body = ref("#/components/schemas/Error")),
        (status = 404, description = "Nothing is recorded about the id (as of `at`)", body = ref("#/components/schemas/Error")),
        (status = 503, description = "The journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn replay(
    State(state): State<Arc<AppState>>,
    kind_id: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<ReplayQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let (kind, id) = path(kind_id)?;
    let kind = ReplayKind::parse(&kind)?;
    let q = query(q)?;
    if grant.sessions().is_some() {
        if kind != ReplayKind::Session {
            return Err(forbidden(
                "a token limited to sessions replays only sessions (`/v1/replay/session/{id}`)",
            ));
        }
        check_session(&grant, Some(&id))?;
    }
    let format = q.format.unwrap_or_default();
    let narrative = tokio::task::spawn_blocking(move || {
        journal_replay::load(&state.journal, &kind.scope(&id), q.at)
            .map_err(ApiError::engine)
            .and_then(|n| {
                if n.counts.events == 0 {
                    Err(nothing(format!("{id} (as of position {})", n.as_of)))
                } else {
                    Ok(n)
                }
            })
    })
    .await??;
    check_nested(&grant, &narrative)?;
    render(&narrative, format)
}

/// The narrative's answer in `format`.
fn render(narrative: &Narrative, format: ReplayFormat) -> Result<Response, ApiError> {
    let (media, text) = match format {
        ReplayFormat::Json => (
            "application/json",
            serde_json::to_string(narrative).map_err(|e| ApiError::internal(e.to_string()))?,
        ),
        ReplayFormat::Text => (
            "text/plain; charset=utf-8",
            journal_replay::text::render(narrative, journal_replay::text::Colour::Plain),
        ),
        ReplayFormat::Html => (
            "text/html; charset=utf-8",
            journal_replay::html::render(narrative),
        ),
    };
    Ok(([(header::CONTENT_TYPE, media)], text).into_response())
}

/// A session id made safe for a file name: letters, digits, `.`, `-` and `_` kept, anything
/// else `_`, at most 64 characters, never `.` or `..`.
fn file_stem(session: &str) -> String {
    let safe: String = session
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = safe.trim_start_matches('.').to_string();
    format!("evidence-{safe}")
}

/// The evidence pack of a session, as `journal export evidence --session ID` writes it, as
/// one tar archive (`evidence-<session>/…`): the events with their chain links, the head
/// digest, the referenced blobs, the replay, and `MANIFEST.json`.
#[utoipa::path(
    get,
    path = "/v1/evidence/{session}",
    operation_id = "evidencePack",
    tag = "review",
    params(("session" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The pack, a tar archive (`Content-Disposition: attachment`)",
            content(("application/x-tar")),
            headers(("Content-Disposition" = String, description = "`attachment; filename=\"evidence-<session>.tar\"`")),
        ),
        (status = 400, description = "`bad_request`: a session id that is not UTF-8", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to other sessions", body = ref("#/components/schemas/Error")),
        (status = 404, description = "Nothing is recorded about the session", body = ref("#/components/schemas/Error")),
        (status = 503, description = "The journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn evidence(
    State(state): State<Arc<AppState>>,
    session: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let session = path(session)?;
    check_session(&grant, Some(&session))?;
    let stem = file_stem(&session);
    let prefix = stem.clone();
    let archive = tokio::task::spawn_blocking(move || {
        let pack = pack::build(&state.journal, Contents::Evidence, &session)
            .map_err(|e| match e {
                pack::PackError::Journal(e) => ApiError::engine(e),
                e => ApiError::internal(e.to_string()),
            })?
            .ok_or_else(|| nothing(format!("session {session}")))?;
        check_nested(&grant, &pack.narrative)?;
        pack.tar(&prefix)
            .map_err(|e| ApiError::internal(format!("writing the archive: {e}")))
    })
    .await??;
    let disposition = format!("attachment; filename=\"{stem}.tar\"");
    let mut response = ([(header::CONTENT_TYPE, TAR)], archive).into_response();
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        response
            .headers_mut()
            .insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_stem_is_safe_whatever_the_session_id() {
        assert_eq!(file_stem("s1"), "evidence-s1");
        assert_eq!(file_stem("../etc/passwd"), "evidence-_etc_passwd");
        assert_eq!(file_stem("..."), "evidence-");
        assert_eq!(file_stem("a b/é"), "evidence-a_b__");
        assert_eq!(file_stem(&"x".repeat(100)).len(), "evidence-".len() + 64);
    }
}
