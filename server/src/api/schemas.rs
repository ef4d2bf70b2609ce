//! `GET /v1/schema` and `GET /v1/schema/{name}`: the JSON Schemas `journal schema` prints
//! (the catalog of `journal-schemas`), built once and kept.

use std::sync::{Arc, OnceLock};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::path;
use crate::auth::authorize;
use crate::error::ApiError;
use crate::tokens::Scope;
use crate::AppState;

/// Every schema by name, built on first use.
pub(crate) fn catalog() -> &'static Map<String, Value> {
    static CATALOG: OnceLock<Map<String, Value>> = OnceLock::new();
    CATALOG.get_or_init(journal_schemas::all)
}

/// The answer of `GET /v1/schema`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SchemaNames {
    /// Every schema's name, sorted: `event`, `payload.<Shape>`, `command.<name>`,
    /// `state.stream`, `model.<kind>`, `replay.narrative`, `agentruntime.<file>`.
    names: Vec<String>,
}

/// The names of the JSON Schemas (`journal schema --list`).
#[utoipa::path(
    get,
    path = "/v1/schema",
    operation_id = "listSchemas",
    tag = "schemas",
    responses(
        (status = 200, description = "The names", body = SchemaNames),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    let mut names: Vec<String> = catalog().keys().cloned().collect();
    names.sort();
    Ok(Json(SchemaNames { names }).into_response())
}

/// One JSON Schema (2020-12, or the vendored Agent Runtime schema's own draft), as
/// `journal schema NAME` prints it.
#[utoipa::path(
    get,
    path = "/v1/schema/{name}",
    operation_id = "getSchema",
    tag = "schemas",
    params(("name" = String, Path, description = "A name `GET /v1/schema` lists")),
    responses(
        (status = 200, description = "The schema", body = Object),
        (status = 400, description = "`bad_request`: a name that is not UTF-8", body = ref("#/components/schemas/Error")),
        (status = 401, description = "No bearer token, or an unknown one", body = ref("#/components/schemas/Error")),
        (status = 403, description = "The token lacks `read`", body = ref("#/components/schemas/Error")),
        (status = 404, description = "No schema has that name", body = ref("#/components/schemas/Error")),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn one(
    State(state): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, &headers, Scope::Read)?;
    let name = path(name)?;
    let schema = catalog().get(&name).ok_or_else(|| {
        ApiError::kind(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no schema named {name:?}; `GET /v1/schema` lists them"),
        )
    })?;
    Ok(Json(schema).into_response())
}
