//! `GET /blobs/{reference}`: a blob from the journal's blob store (a large tool output a
//! step references), for the session page's "whole output" link. It answers text as
//! `text/plain` and anything else as bytes, never as a page (`nosniff`, a sandboxing
//! Content-Security-Policy). A token limited to sessions cannot read blobs: a blob names no
//! session.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::path;
use crate::auth::{authorize, forbidden};
use crate::error::ApiError;
use crate::tokens::Scope;
use crate::AppState;

/// The blob `reference` (`blake3:<hex>` or bare hex).
pub(crate) async fn blob(
    State(state): State<Arc<AppState>>,
    reference: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = authorize(&state, &headers, Scope::Read)?;
    if grant.sessions().is_some() {
        return Err(forbidden(
            "a token limited to sessions cannot read blobs (a blob names no session)",
        ));
    }
    let reference = path(reference)?;
    let found = tokio::task::spawn_blocking(move || state.journal.blobs().get(&reference))
        .await?
        .map_err(ApiError::engine)?;
    let Some(bytes) = found else {
        return Err(ApiError::kind(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such blob in the blob store",
        ));
    };
    let media = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let mut response = ([(header::CONTENT_TYPE, media)], bytes).into_response();
    let h = response.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600"),
    );
    Ok(response)
}
