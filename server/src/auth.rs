//! Who may do what: the bearer token of a request checked against the tokens file for a scope
//! ([`authorize`]), and a grant limited to session prefixes checked against the session a
//! request names ([`check_session`]). Every route calls these before it reads or writes.

use axum::http::{header, HeaderMap, StatusCode};

use crate::error::ApiError;
use crate::tokens::{Grant, Scope};
use crate::AppState;

/// The grant of the request's bearer token for `scope`: everything when the server has no
/// tokens file.
pub(crate) fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    scope: Scope,
) -> Result<Grant, ApiError> {
    let Some(tokens) = &state.tokens else {
        return Ok(Grant::everything());
    };
    let unauthorized =
        |message: &str| ApiError::kind(StatusCode::UNAUTHORIZED, "unauthorized", message);
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            // The scheme's name is case-insensitive (RFC 9110, 11.1).
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .map(str::trim)
        .ok_or_else(|| unauthorized("no bearer token: send `Authorization: Bearer <token>`"))?;
    let grant = tokens
        .check(token)
        .ok_or_else(|| unauthorized("the bearer token is not known (mistyped or revoked)"))?;
    if !grant.has(scope) {
        return Err(forbidden(format!(
            "the token has no `{}` scope",
            scope.name()
        )));
    }
    Ok(grant)
}

/// A `403 forbidden` saying what the token lacks.
pub(crate) fn forbidden(message: impl Into<String>) -> ApiError {
    ApiError::kind(StatusCode::FORBIDDEN, "forbidden", message)
}

/// Refuses a session the grant is not limited to.
pub(crate) fn check_session(grant: &Grant, session: Option<&str>) -> Result<(), ApiError> {
    if grant.covers(session) {
        return Ok(());
    }
    Err(forbidden(match session {
        Some(s) => format!(
            "the token is limited to sessions starting with {:?}; {s:?} is not one",
            grant.sessions().unwrap_or_default()
        ),
        None => format!(
            "the token is limited to sessions starting with {:?}: name a session",
            grant.sessions().unwrap_or_default()
        ),
    }))
}
