//! What an auditor fetches: `GET /v1/proofs/inclusion/{eventId}` and
//! `GET /v1/proofs/consistency?from=&to=` (the proof documents `journal prove` prints, checked
//! offline by `journal check-proof`), and `GET /v1/checkpoints/latest` (the latest signed
//! checkpoint, as text). Built on the blocking pool: a proof waits for the tree to hold the
//! head.
//!
//! An inclusion proof carries the event's body, so a token limited to sessions gets proofs of
//! its own sessions' events only.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{authorize, check_session, path, query};
use crate::error::ApiError;
use crate::tokens::Scope;
use crate::AppState;

/// The media type of a proof document.
const JSON: &str = "application/json";

/// The query of `GET /v1/proofs/inclusion/{eventId}`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct InclusionQuery {
    /// The tree size to prove against (default: the latest kept checkpoint that holds the
    /// event, else the tree head, unsigned).
    #[param(minimum = 1)]
    size: Option<u64>,
}

/// The inclusion proof document of an event, as `journal prove inclusion` prints it.
#[utoipa::path(
    get,
    path = "/v1/proofs/inclusion/{eventId}",
    operation_id = "inclusionProof",
    tag = "proofs",
    params(("eventId" = String, Path, description = "The event's id"), InclusionQuery),
    responses(
        (status = 200, description = "The proof document (`agent-journal-inclusion-proof/1`, `docs/FORMAT.md`)", content((serde_json::Value = "application/json"))),
        (status = 400, description = "`bad_request`: an unknown event, or a size that does not hold it", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to other sessions", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the tree does not hold the size asked for, or the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn inclusion(
    State(state): State<Arc<AppState>>,
    event_id: Result<Path<String>, PathRejection>,
    q: Result<Query<InclusionQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let event_id = path(event_id)?;
    let q = query(q)?;
    let document = tokio::task::spawn_blocking(move || {
        let event = state
            .journal
            .get(&event_id)
            .map_err(ApiError::engine)?
            .ok_or_else(|| ApiError::bad_request(format!("no event has id {event_id:?}")))?;
        check_session(&grant, event.envelope.session_id.as_deref())?;
        state
            .journal
            .inclusion_document_at(event.position, q.size)
            .map_err(ApiError::engine)
    })
    .await??;
    let text = serde_json::to_string(&document).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, JSON)], text).into_response())
}

/// The query of `GET /v1/proofs/consistency`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ConsistencyQuery {
    /// The older tree size (an earlier checkpoint's).
    #[param(minimum = 0)]
    from: u64,
    /// The newer tree size (default: the latest kept checkpoint's, else the tree head).
    #[param(minimum = 0)]
    to: Option<u64>,
}

/// The consistency proof document between two tree sizes, as `journal prove consistency`
/// prints it.
#[utoipa::path(
    get,
    path = "/v1/proofs/consistency",
    operation_id = "consistencyProof",
    tag = "proofs",
    params(ConsistencyQuery),
    responses(
        (status = 200, description = "The proof document (`agent-journal-consistency-proof/1`, `docs/FORMAT.md`)", content((serde_json::Value = "application/json"))),
        (status = 400, description = "`bad_request`: `from` beyond `to`, or `to` beyond the journal", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the tree does not hold the size asked for, or the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn consistency(
    State(state): State<Arc<AppState>>,
    q: Result<Query<ConsistencyQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    let q = query(q)?;
    let document = tokio::task::spawn_blocking(move || {
        state
            .journal
            .consistency_document(q.from, q.to)
            .map_err(ApiError::engine)
    })
    .await??;
    let text = serde_json::to_string(&document).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, JSON)], text).into_response())
}

/// The latest signed checkpoint the journal keeps, as the signed note `journal checkpoint
/// show` prints (`text/plain`).
#[utoipa::path(
    get,
    path = "/v1/checkpoints/latest",
    operation_id = "latestCheckpoint",
    tag = "proofs",
    responses(
        (status = 200, description = "The signed checkpoint (a C2SP signed note, `docs/FORMAT.md`)", content((String = "text/plain; charset=utf-8"))),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
        (status = 404, description = "`not_found`: no checkpoint was signed yet", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn latest_checkpoint(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    let latest = tokio::task::spawn_blocking(move || {
        state.journal.latest_checkpoint().map_err(ApiError::engine)
    })
    .await??
    .ok_or_else(|| {
        ApiError::kind(
            StatusCode::NOT_FOUND,
            "not_found",
            "no checkpoint was signed yet (journal serve --checkpoint-key, or journal checkpoint sign)",
        )
    })?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        latest.to_text(),
    )
        .into_response())
}
