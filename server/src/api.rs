//! The routes: the router and the handlers of events, commands, read models and the journal's
//! state; the event stream's is in `stream.rs`, the replay and evidence pack's in [`review`],
//! the schemas' in [`schemas`]. Token checks are in `auth.rs`, the read filters in
//! `read_query.rs`, both shared with `stream.rs`. Every route is registered once, with its
//! `#[utoipa::path]` description, in [`routes`]: the router and the OpenAPI document
//! ([`openapi`], `GET /openapi.json`) both come from it. Journal calls that block (reads,
//! status, verify, read models, replays) run on the blocking pool; appends await the writer.
//! The review app's pages (`crate::app`) are merged into the same router, behind the layer
//! that takes a `GET`'s token from its cookie.

mod openapi;
mod proofs;
pub(crate) mod review;
mod schemas;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::StreamExt;
use journal_commands::Command;
use journal_engine::input::{line_bytes_max, Checker, InputBatch};
use journal_engine::{AppendOptions, VerifyOptions};
use journal_format::Digest as KeptDigest;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{authorize, check_session, forbidden};
use crate::error::{ApiError, Refusal};
use crate::read_query::ReadQuery;
use crate::tokens::Scope;
use crate::AppState;

/// The number of events a page of `GET /v1/events` holds when `limit` is not given.
pub const READ_LIMIT_DEFAULT: usize = 100;
/// The most events a page holds (a larger `limit` is lowered to it).
pub const READ_LIMIT_MAX: usize = 1000;
/// A page ends early once its events take this many bytes of JSON.
pub const READ_PAGE_BYTES_MAX: usize = 16 << 20;
/// The longest `timeoutMs` a read model request may wait for `minPosition`.
pub const MODEL_TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// The `timeoutMs` of a read model request that gives `minPosition` without one.
pub const MODEL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// An append body up to this size is parsed on the request's task (a few events, tens of
/// microseconds); a larger one on the blocking pool, whose hand-over costs more than parsing
/// a small body.
const PARSE_INLINE_BYTES_MAX: usize = 16 << 10;

/// The JSON Lines media type.
const NDJSON: &str = "application/x-ndjson";

/// Every route with its description: one `routes!` per path.
pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(append, read))
        .routes(routes!(follow))
        .routes(routes!(command))
        .routes(routes!(model))
        .routes(routes!(review::replay))
        .routes(routes!(review::evidence))
        .routes(routes!(proofs::inclusion))
        .routes(routes!(proofs::consistency))
        .routes(routes!(proofs::latest_checkpoint))
        .routes(routes!(schemas::list))
        .routes(routes!(schemas::one))
        .routes(routes!(status))
        .routes(routes!(digest))
        .routes(routes!(verify))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi::openapi_json))
}

/// The router of [`routes`], with the fallback and the count of refusals.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let (router, _) = routes().split_for_parts();
    router
        .merge(crate::app::router())
        .fallback(not_found)
        .layer(middleware::from_fn(crate::app::cookie::bearer_from_cookie))
        .layer(middleware::map_response_with_state(
            Arc::clone(&state),
            count_refusals,
        ))
        .with_state(state)
}

async fn count_refusals(State(state): State<Arc<AppState>>, response: Response) -> Response {
    if let Some(Refusal(reason)) = response.extensions().get::<Refusal>() {
        state.metrics.refused(reason);
    }
    response
}

async fn not_found() -> ApiError {
    ApiError::kind(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route (docs/SERVER.md lists them)",
    )
}

/// A query string that does not parse, as a `400`.
pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("query string: {}", e.body_text())))
}

/// A path that does not decode (a segment that is not UTF-8), as a `400`.
pub(crate) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(p)| p)
        .map_err(|e| ApiError::bad_request(format!("path: {}", e.body_text())))
}

/// Reads a body of at most `limit` bytes; a longer one is refused `413` as soon as it is past
/// the limit, without reading the rest.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = |size: Option<u64>| {
        let size = size.map_or_else(String::new, |n| format!(" ({n} bytes)"));
        ApiError::kind(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the request body{size} is over the limit of {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        return Err(too_large(Some(n)));
    }
    let mut stream = body.into_data_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::body(&e))?;
        if out.len() + chunk.len() > limit {
            return Err(too_large(None));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The body limit of `POST /v1/events`: twice the batch byte limit (a batch's JSON is larger
/// than its stored form) and a mebibyte. The batch's own limits are checked line by line.
fn append_body_limit(state: &AppState) -> usize {
    usize::try_from(state.config.limits.batch_bytes_max)
        .unwrap_or(usize::MAX)
        .saturating_mul(2)
        .saturating_add(1 << 20)
}

/// Checks a body of JSON Lines, or a JSON array, as `journal append` checks its input.
fn parse_events(body: &[u8], checker: Checker) -> Result<InputBatch, ApiError> {
    let mut checker = checker;
    let mut batch = InputBatch::default();
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    if start.is_some_and(|i| body.get(i) == Some(&b'[')) {
        let value = journal_format::strict_json::parse(body).map_err(|e| {
            ApiError::kind(
                StatusCode::BAD_REQUEST,
                "invalid_event",
                format!("the body is not a JSON array: {e}"),
            )
        })?;
        let Value::Array(items) = value else {
            return Err(ApiError::bad_request("the body is not a JSON array"));
        };
        let mut checker = checker.elements();
        for (i, item) in items.into_iter().enumerate() {
            let event = checker.parse_value(item, i + 1).map_err(ApiError::line)?;
            checker
                .push(&mut batch, i + 1, event)
                .map_err(ApiError::line)?;
        }
        return Ok(batch);
    }
    for (i, line) in body.split(|b| *b == b'\n').enumerate() {
        let Some(event) = checker.parse_line(line, i + 1).map_err(ApiError::line)? else {
            continue;
        };
        checker
            .push(&mut batch, i + 1, event)
            .map_err(ApiError::line)?;
    }
    Ok(batch)
}

/// The query of `POST /v1/events`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct AppendQuery {
    /// The version the batch's one stream must be at (optimistic concurrency; `If-Match`
    /// says the same).
    #[param(minimum = 0)]
    expected_version: Option<u64>,
}

/// The expected stream version, from `expectedVersion` or `If-Match` (which must agree).
fn expected_version(q: &AppendQuery, headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let header = match headers.get(header::IF_MATCH) {
        None => None,
        Some(v) => {
            let text = v.to_str().unwrap_or_default().trim();
            let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
            Some(text.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "If-Match must be a stream version (a number), not {text:?}"
                ))
            })?)
        }
    };
    match (q.expected_version, header) {
        (Some(a), Some(b)) if a != b => Err(ApiError::bad_request(format!(
            "expectedVersion {a} and If-Match {b} disagree"
        ))),
        (a, b) => Ok(a.or(b)),
    }
}

/// Appends one atomic batch: all of it is stored, or none of it. The body is JSON Lines
/// (`application/x-ndjson`, one event a line) or a JSON array of events, checked as
/// `journal append` checks its input; answered once durable, in the body's form.
#[utoipa::path(
    post,
    path = "/v1/events",
    operation_id = "appendEvents",
    tag = "events",
    params(
        AppendQuery,
        ("If-Match" = Option<String>, Header, pattern = r#"^(W/)?"?[0-9]{1,19}"?$"#, description = "The expected stream version (a number, quoted or not); must agree with `expectedVersion`"),
    ),
    request_body(
        description = "The events, in the Agent Runtime event form (`event`). For JSON Lines the schema describes the sequence of lines: each item is one line",
        content(
            (ref("#/components/schemas/EventBatch") = "application/json", example = json!([
                {"type": "session.created", "eventId": "example-e1", "timestamp": "2026-05-11T10:00:00Z", "sessionId": "example-s1"}
            ])),
            (ref("#/components/schemas/EventBatch") = "application/x-ndjson", example = json!([
                {"type": "session.created", "eventId": "example-e2", "timestamp": "2026-05-11T10:00:01Z", "sessionId": "example-s1"}
            ])),
            (ref("#/components/schemas/EventBatch") = "application/jsonl"),
        ),
    ),
    responses(
        (status = 200, description = "One acknowledgement per event, once the batch is durable: a JSON array for an array, JSON Lines (each item of the schema one line) for JSON Lines", content(
            (ref("#/components/schemas/Acks") = "application/json"),
            (ref("#/components/schemas/Acks") = "application/x-ndjson"),
        )),
        (status = 400, description = "`invalid_event` naming the `line`, or `bad_request` (an empty body, a bad parameter); nothing is written", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `append`, or an event is outside its sessions", body = ref("#/components/schemas/Error")),
        (status = 408, description = "`timeout`: the body did not arrive in time", body = ref("#/components/schemas/Error")),
        (status = 409, description = "`conflict` (the expected version), or `id_reused` (an event id stored with another body)", body = ref("#/components/schemas/Error")),
        (status = 413, description = "`too_large`: an event, the batch, or the body over its limit", body = ref("#/components/schemas/Error")),
        (status = 415, description = "`unsupported_media_type`: a body that is not JSON Lines or JSON", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the writer is poisoned or the journal closed", body = ref("#/components/schemas/Error")),
        (status = 507, description = "`disk_full`", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn append(
    State(state): State<Arc<AppState>>,
    q: Result<Query<AppendQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Append)?;
    let q = query(q)?;
    let expected = expected_version(&q, &headers)?;
    let bytes = read_body(&headers, body, append_body_limit(&state)).await?;
    let size = bytes.len() as u64;
    let checker = Checker::new(state.config.limits, state.config.conformance);
    let array = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let batch = if bytes.len() <= PARSE_INLINE_BYTES_MAX {
        parse_events(&bytes, checker)?
    } else {
        tokio::task::spawn_blocking(move || parse_events(&bytes, checker)).await??
    };
    if batch.is_empty() {
        return Err(ApiError::bad_request("no events in the body"));
    }
    for event in batch.events() {
        check_session(&grant, event.session_id.as_deref())?;
    }
    let (events, lines) = batch.into_parts();
    let options = AppendOptions {
        expected_stream_version: expected,
    };
    let appended = match state.journal.append_batch(events, options).await {
        Ok(appended) => appended,
        Err(e) => {
            return Err(match lines.refusal(e) {
                Ok(line) => ApiError::line(line),
                Err(e) => ApiError::engine(e),
            })
        }
    };
    let m = &state.metrics;
    m.appends.fetch_add(1, Ordering::Relaxed);
    m.events.fetch_add(appended.len() as u64, Ordering::Relaxed);
    m.bytes.fetch_add(size, Ordering::Relaxed);
    if array {
        return Ok(Json(appended).into_response());
    }
    let mut text = String::new();
    for a in &appended {
        text.push_str(&serde_json::to_string(a).map_err(|e| ApiError::internal(e.to_string()))?);
        text.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, NDJSON)], text).into_response())
}

/// `GET /v1/events`: a page of events as JSON Lines; the `Link` header (`rel="next"`) names the
/// next page, from the position after the last event this page looked at.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "readEvents",
    tag = "events",
    params(ReadQuery),
    responses(
        (status = 200, description = "A page of stored events as JSON Lines: each item of the schema is one line",
            content((ref("#/components/schemas/StoredEvents") = "application/x-ndjson")),
            headers(("Link" = String, description = "`</v1/events?from=N&limit=L&…>; rel=\"next\"`: the next page")),
        ),
        (status = 400, description = "`bad_request`: a bad or unknown query parameter", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to sessions and `session` names none of them", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn read(
    State(state): State<Arc<AppState>>,
    q: Result<Query<ReadQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let q = query(q)?;
    if grant.sessions().is_some() {
        check_session(&grant, q.session.as_deref())?;
    }
    let limit = match q.limit {
        Some(0) => return Err(ApiError::bad_request("limit must be at least 1")),
        Some(n) => n.min(READ_LIMIT_MAX),
        None => READ_LIMIT_DEFAULT,
    };
    let journal = state.journal.clone();
    let mut filter = q.filter();
    filter.limit = Some(limit);
    let (text, next) = tokio::task::spawn_blocking(move || {
        let head = journal.head().position.0;
        let from = filter.from.map_or(1, |p| p.0);
        let mut text = String::new();
        let mut count = 0;
        let mut last = None;
        for event in journal.query(filter).map_err(ApiError::engine)? {
            let event = event.map_err(ApiError::engine)?;
            let line = serde_json::to_string(&event.to_json_value())
                .map_err(|e| ApiError::internal(e.to_string()))?;
            text.push_str(&line);
            text.push('\n');
            count += 1;
            last = Some(event.position.0);
            if text.len() >= READ_PAGE_BYTES_MAX {
                break;
            }
        }
        let full = count >= limit || text.len() >= READ_PAGE_BYTES_MAX;
        let after_last = last.map_or(from, |p| p + 1);
        let next = if full {
            after_last
        } else {
            after_last.max(head + 1).max(from)
        };
        Ok::<_, ApiError>((text, next))
    })
    .await??;
    let link = format!("</v1/events?{}>; rel=\"next\"", q.next(next, limit));
    let mut response = ([(header::CONTENT_TYPE, NDJSON)], text).into_response();
    if let Ok(v) = HeaderValue::from_str(&link) {
        response.headers_mut().insert(header::LINK, v);
    }
    Ok(response)
}

/// Follows the journal (Server-Sent Events): the history from `from` (or after
/// `Last-Event-ID`), then live appends, each event's `id:` its position; without `from` only
/// new events; with `to` the stream ends after that position.
#[utoipa::path(
    get,
    path = "/v1/events/stream",
    operation_id = "followEvents",
    tag = "events",
    params(
        ReadQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this position"),
    ),
    responses(
        (status = 200, description = "`id: POSITION` and `data: STORED EVENT` frames, `:heartbeat` comments, a final comment saying why it ended",
            content((String = "text/event-stream")),
        ),
        (status = 400, description = "`bad_request`: a bad query parameter or `Last-Event-ID`", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to sessions and `session` names none of them", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: as many streams are open as the server takes", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn follow(
    state: State<Arc<AppState>>,
    q: Result<Query<ReadQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    crate::stream::follow(state, q, headers).await
}

/// Runs a control-plane command: the body is its arguments (a JSON object, `command.<name>`);
/// answered with the events it appended.
#[utoipa::path(
    post,
    path = "/v1/commands/{name}",
    operation_id = "runCommand",
    tag = "commands",
    params(("name" = String, Path, description = "The command (`GET /v1/schema` lists `command.<name>`)", example = "create_task")),
    request_body(
        description = "The command's arguments",
        content((ref("#/components/schemas/CommandArguments") = "application/json", example = json!(
            {"sessionId": "example-s1", "taskId": "example-t1", "title": "An example task"}
        ))),
    ),
    responses(
        (status = 200, description = "The events the command appended, and its note", body = ref("#/components/schemas/CommandResult")),
        (status = 400, description = "`bad_request`: a name that is not UTF-8", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `command`, or the command's session is outside its sessions", body = ref("#/components/schemas/Error")),
        (status = 408, description = "`timeout`: the body did not arrive in time", body = ref("#/components/schemas/Error")),
        (status = 409, description = "`contended`: other writers kept changing the stream; `conflict`, `id_reused`", body = ref("#/components/schemas/Error")),
        (status = 413, description = "`too_large`: the arguments over 4 MiB", body = ref("#/components/schemas/Error")),
        (status = 415, description = "`unsupported_media_type`: a body that is not JSON", body = ref("#/components/schemas/Error")),
        (status = 422, description = "A rule refused it (`rule`): `invalid_arguments` for an unknown command or bad arguments", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the writer is poisoned or the journal closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn command(
    State(state): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Command)?;
    let name = path(name)?;
    let bytes = read_body(&headers, body, line_bytes_max(&state.config.limits)).await?;
    let text = String::from_utf8(bytes).map_err(|e| {
        ApiError::rule(&journal_projections::Violation::new(
            journal_projections::Rule::InvalidArguments,
            format!("the command's arguments are not UTF-8: {e}"),
        ))
    })?;
    let command = Command::parse_text(&name, &text).map_err(|v| ApiError::rule(&v))?;
    if grant.sessions().is_some() {
        let key = command.stream_key().map_err(|v| ApiError::rule(&v))?;
        check_session(&grant, key.strip_prefix("session:"))?;
    }
    match state.commands.execute(&command).await {
        Ok(accepted) => {
            let events: Vec<Value> = accepted.events.iter().map(|e| e.to_json_value()).collect();
            Ok(Json(json!({"events": events, "note": accepted.note})).into_response())
        }
        Err(e) => Err(match e.violation() {
            Some(v) => ApiError::rule(&v),
            None => match e {
                journal_commands::CommandError::Journal(e) => ApiError::engine(e),
                e => ApiError::kind(StatusCode::CONFLICT, "contended", e.to_string()),
            },
        }),
    }
}

/// The read models keyed by a session id (or a stream key): a token limited to sessions reads
/// only these, and only its own sessions'.
const SESSION_KINDS: [&str; 9] = [
    "session",
    "checklist",
    "queue",
    "evidence",
    "ecosystem",
    "resume",
    "history",
    "state",
    "activity",
];

/// The query of `GET /v1/models/{kind}/{id}`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ModelQuery {
    /// Wait until the read models reflect this position (read your own writes).
    #[param(minimum = 0)]
    min_position: Option<u64>,
    /// How long to wait for `minPosition`, in milliseconds (default 5,000, at most 60,000).
    #[param(minimum = 0)]
    timeout_ms: Option<u64>,
    /// `history`: the first position of the window (default 1).
    #[param(minimum = 0)]
    cursor: Option<u64>,
    /// `history`: the window's size (default 100, at most 1,000).
    #[param(minimum = 0)]
    limit: Option<usize>,
}

/// `GET /v1/models/{kind}/{id}`: a read model with its freshness (`journal get KIND ID`);
/// `404` when nothing is recorded about the id.
#[utoipa::path(
    get,
    path = "/v1/models/{kind}/{id}",
    operation_id = "getModel",
    tag = "models",
    params(
        ("kind" = String, Path, description = "The read model (`model.<kind>` is its schema)"),
        ("id" = String, Path, description = "A session id (or a stream key), or the task's, thread's or run's id"),
        ModelQuery,
    ),
    responses(
        (status = 200, description = "The model and its freshness (`behind` when `minPosition` was not reached in time)", body = ref("#/components/schemas/ModelAnswer")),
        (status = 400, description = "`bad_request`: a bad query parameter, or an id that is not UTF-8", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`, or is limited to other sessions (and then reads only a session's models)", body = ref("#/components/schemas/Error")),
        (status = 404, description = "`not_found`: nothing is recorded about the id; `unknown_model`: no such kind", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn model(
    State(state): State<Arc<AppState>>,
    kind_id: Result<Path<(String, String)>, PathRejection>,
    q: Result<Query<ModelQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    let (kind, id) = path(kind_id)?;
    let q = query(q)?;
    if grant.sessions().is_some() {
        if !SESSION_KINDS.contains(&kind.as_str()) {
            return Err(forbidden(format!(
                "a token limited to sessions reads only the read models of a session ({})",
                SESSION_KINDS.join(", ")
            )));
        }
        check_session(&grant, Some(&id))?;
    }
    let timeout = q
        .timeout_ms
        .map_or(MODEL_TIMEOUT_DEFAULT, Duration::from_millis)
        .min(MODEL_TIMEOUT_MAX);
    let state = Arc::clone(&state);
    tokio::task::spawn_blocking(move || {
        let nothing = |what: String| {
            ApiError::kind(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("nothing is recorded about {what}"),
            )
        };
        if kind == "history" {
            let cursor = q.cursor.unwrap_or(1);
            let limit = q
                .limit
                .unwrap_or(READ_LIMIT_DEFAULT)
                .clamp(1, READ_LIMIT_MAX);
            let window = journal_projections::models::history(&state.journal, &id, cursor, limit)?;
            if window.events.is_empty() && cursor <= 1 {
                return Err(nothing(format!("session {id}")));
            }
            return Ok(Json(json!({ "model": window })).into_response());
        }
        if let Some(p) = q.min_position {
            state.models.wait_for(p, timeout)?;
        }
        let mut answer = state.models.view(&kind, &id)?;
        let reached = q.min_position.is_none_or(|p| answer.freshness.require(p));
        if reached && answer.model.is_none() {
            return Err(nothing(format!("{kind} {id}")));
        }
        Ok(Json(answer).into_response())
    })
    .await?
}

/// `journal status`, with the read models' projections.
#[utoipa::path(
    get,
    path = "/v1/status",
    operation_id = "status",
    tag = "journal",
    responses(
        (status = 200, description = "The journal's state", body = ref("#/components/schemas/Status")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn status(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    tokio::task::spawn_blocking(move || {
        let mut status = serde_json::to_value(state.journal.status().map_err(ApiError::engine)?)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let projections = serde_json::to_value(state.models.status()?)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if let Value::Object(o) = &mut status {
            o.insert("projections".into(), projections);
        }
        Ok(Json(status).into_response())
    })
    .await?
}

/// The head's position and chain link and the Merkle tree's root there: check the journal
/// against it later with `journal verify --digest POSITION:HASH:ROOT`.
#[derive(Serialize, ToSchema)]
struct Digest {
    /// The position (0 for an empty journal).
    #[schema(minimum = 0)]
    position: u64,
    /// Its chain link, BLAKE3, hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    hash: String,
    /// The Merkle tree's size: the position.
    #[schema(minimum = 0)]
    tree_size: u64,
    /// The root of the Merkle tree of the events up to the position, BLAKE3, hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    root: String,
    /// All three as one text, `POSITION:HASH:ROOT`, for `verify --digest`.
    digest: String,
}

/// `journal digest`: the head's position and chain link, and the Merkle tree's root there.
#[utoipa::path(
    get,
    path = "/v1/digest",
    operation_id = "digest",
    tag = "journal",
    responses(
        (status = 200, description = "The head", body = Digest),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn digest(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    tokio::task::spawn_blocking(move || {
        let head = state.journal.tree_head().map_err(ApiError::engine)?;
        let kept = KeptDigest {
            position: head.position,
            hash: head.hash,
            root: Some(head.root),
        };
        Ok(Json(Digest {
            position: head.position.0,
            hash: head.hash.to_hex(),
            tree_size: head.position.0,
            root: head.root.to_hex(),
            digest: kept.to_string(),
        })
        .into_response())
    })
    .await?
}

/// The query of `GET /v1/verify`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct VerifyQuery {
    /// `POSITION:HASH` or `POSITION:HASH:ROOT` (`GET /v1/digest` kept earlier): the journal
    /// must hold that link there, and the Merkle tree of the events up to it that root.
    #[param(pattern = "^[0-9]{1,19}:[0-9a-fA-F]{64}(:[0-9a-fA-F]{64})?$")]
    digest: Option<String>,
}

/// `GET /v1/verify[?digest=POSITION:HASH[:ROOT]]`: `journal verify`'s report (`ok` says whether it
/// holds; `200` either way, `400` when the digest does not parse).
#[utoipa::path(
    get,
    path = "/v1/verify",
    operation_id = "verify",
    tag = "journal",
    params(VerifyQuery),
    responses(
        (status = 200, description = "The report; `ok` says whether the journal holds", body = ref("#/components/schemas/VerifyReport")),
        (status = 400, description = "`bad_request`: a digest that does not parse", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `admin`", body = ref("#/components/schemas/Error")),
        (status = 503, description = "`unavailable`: the journal is closed", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn verify(
    State(state): State<Arc<AppState>>,
    q: Result<Query<VerifyQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Admin)?;
    let q = query(q)?;
    let digest = q
        .digest
        .as_deref()
        .map(str::parse::<KeptDigest>)
        .transpose()
        .map_err(ApiError::bad_request)?;
    tokio::task::spawn_blocking(move || {
        let options = VerifyOptions {
            digest: digest.map(|d| (d.position, d.hash)),
            digest_root: digest.and_then(|d| d.root),
            ..VerifyOptions::default()
        };
        let report = state
            .journal
            .verify(&options, &mut |_, _| {})
            .map_err(ApiError::engine)?;
        Ok(Json(report).into_response())
    })
    .await?
}

/// The answer of `GET /healthz`.
#[derive(Serialize, ToSchema)]
struct Health {
    /// Whether the writer takes appends.
    ok: bool,
    /// The head position.
    #[schema(minimum = 0)]
    head: u64,
    /// Why the writer stopped taking appends.
    #[serde(skip_serializing_if = "Option::is_none")]
    poisoned: Option<String>,
}

/// `200` while the writer takes appends, `503` once it is poisoned. No token.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "health",
    tag = "journal",
    responses(
        (status = 200, description = "The writer takes appends", body = Health),
        (status = 503, description = "The writer is poisoned", body = Health),
    ),
)]
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let head = state.journal.head().position.0;
    let poisoned = state.journal.status().ok().and_then(|s| s.poisoned);
    let status = if poisoned.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let ok = poisoned.is_none();
    (status, Json(Health { ok, head, poisoned })).into_response()
}

/// The server's counters, Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "journal",
    responses(
        (status = 200, description = "Prometheus text", content((String = "text/plain"))),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `admin`", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Admin)?;
    let text = state.metrics.render(state.journal.head().position.0);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
