//! Checks of a request's head before it is routed, each answered with a JSON error and counted
//! in `/metrics`: a request target over [`URI_BYTES_MAX`] (`414 uri_too_long`), header fields
//! over [`HEADER_BYTES_MAX`] (`431 headers_too_large`), a body of a type other than JSON or
//! JSON Lines, or a sign-in that is not a form (`415 unsupported_media_type`). Then the body is given its deadline
//! ([`crate::deadline`]).
//!
//! hyper refuses what is larger still before any of this runs, without a JSON body: a head over
//! [`HEAD_BYTES_MAX`] (`431`, the connection closed) and a target over 64 KiB (`414`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::deadline::Deadline;
use crate::error::{ApiError, Refusal};
use crate::AppState;

/// The longest request target (path and query) answered.
pub const URI_BYTES_MAX: usize = 8 << 10;
/// The most bytes of header fields a request may have (names, values and their separators).
pub const HEADER_BYTES_MAX: usize = 16 << 10;
/// The most bytes of a request's head hyper reads: past it the connection is closed with a bare
/// `431`, so that a client cannot make the server buffer an unbounded head.
pub const HEAD_BYTES_MAX: usize = 128 << 10;

/// The media types a request body may have: JSON Lines or JSON. A body without a
/// `Content-Type` is taken as either.
pub const BODY_TYPES: [&str; 3] = [
    "application/x-ndjson",
    "application/jsonl",
    "application/json",
];

/// The media type of the app's sign-in form (`POST /signin`), the one body not JSON.
pub const FORM_TYPE: &str = "application/x-www-form-urlencoded";

/// `router` with the checks in front of every route.
pub(crate) fn layer(router: Router, state: &Arc<AppState>) -> Router {
    router.layer(middleware::from_fn_with_state(Arc::clone(state), check))
}

async fn check(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Err(e) = head(&request) {
        let response = e.into_response();
        if let Some(Refusal(reason)) = response.extensions().get::<Refusal>() {
            state.metrics.refused(reason);
        }
        return response;
    }
    let (parts, body) = request.into_parts();
    let body = Deadline::wrap(body, state.config.read_timeout);
    next.run(Request::from_parts(parts, body)).await
}

/// Refuses a head too large or a body of the wrong type.
fn head(request: &Request) -> Result<(), ApiError> {
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    if target > URI_BYTES_MAX {
        return Err(ApiError::kind(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!(
                "the request target (path and query) is {target} bytes, over the limit of {URI_BYTES_MAX}"
            ),
        ));
    }
    let fields = header_bytes(request.headers());
    if fields > HEADER_BYTES_MAX {
        return Err(ApiError::kind(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!("the header fields are {fields} bytes, over the limit of {HEADER_BYTES_MAX}"),
        ));
    }
    if request.uri().path() == SIGNIN_PATH && request.method() == Method::POST {
        form_type(request.headers())?;
    } else if [Method::POST, Method::PUT, Method::PATCH].contains(request.method()) {
        content_type(request.headers())?;
    }
    Ok(())
}

/// The app's sign-in, whose form posts `application/x-www-form-urlencoded`.
const SIGNIN_PATH: &str = "/signin";

/// Refuses a sign-in body that is not a form.
fn form_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let media = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let media = media.split(';').next().unwrap_or_default().trim();
    if media.eq_ignore_ascii_case(FORM_TYPE) {
        return Ok(());
    }
    Err(ApiError::kind(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the sign-in's Content-Type is {media:?}; send the form ({FORM_TYPE})"),
    )
    .with("expected", vec![FORM_TYPE]))
}

/// The header fields' size as sent: `name: value` and a line end each.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// Refuses a `Content-Type` that is not one of [`BODY_TYPES`] (parameters such as `charset`
/// aside).
fn content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text.split(';').next().unwrap_or_default().trim();
    if BODY_TYPES.iter().any(|t| media.eq_ignore_ascii_case(t)) {
        return Ok(());
    }
    Err(ApiError::kind(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "the body's Content-Type is {media:?}; send application/x-ndjson or application/jsonl (JSON Lines) or application/json (with curl: -H 'Content-Type: application/x-ndjson')"
        ),
    )
    .with("expected", BODY_TYPES.to_vec()))
}

/// The `Accept` header a `415` carries (RFC 9110, 15.5.16): the types that would be taken.
pub(crate) fn accepted_types() -> HeaderValue {
    HeaderValue::from_static("application/x-ndjson, application/jsonl, application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn json_and_json_lines_are_taken_with_parameters_and_in_any_case() {
        for ok in [
            "application/json",
            "application/x-ndjson; charset=utf-8",
            "Application/JSONL",
            " application/json ;q=1",
        ] {
            assert!(
                content_type(&headers(&[("content-type", ok)])).is_ok(),
                "{ok}"
            );
        }
        assert!(
            content_type(&HeaderMap::new()).is_ok(),
            "no type: taken as JSON"
        );
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "",
        ] {
            assert!(
                content_type(&headers(&[("content-type", bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn header_bytes_count_names_values_and_separators() {
        let map = headers(&[("x-a", "12345"), ("x-a", "6")]);
        assert_eq!(header_bytes(&map), (3 + 5 + 4) + (3 + 1 + 4));
    }
}
