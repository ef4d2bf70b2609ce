//! The error answer of every route: a status and `{"error":{"rule"|"kind","message"}}`. A
//! refusal by a rule of the control plane names the `rule`; every other error names its
//! `kind`. Each error is counted in `/metrics` by its rule or kind.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use journal_engine::input::{LineError, Problem};
use journal_engine::Error;
use journal_projections::Violation;
use serde_json::{json, Map, Value};

use crate::deadline::BodyTimeout;

/// Why a request was refused or failed, as answered (boxed: errors are the rare path, and a
/// small `Result` keeps the common one cheap).
#[derive(Debug)]
pub struct ApiError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    status: StatusCode,
    /// `rule` or `kind`.
    key: &'static str,
    code: String,
    message: String,
    /// More fields of the error object (a conflict's versions, a refused line's number).
    extra: Map<String, Value>,
}

/// The reason an answer counts under in `journal_refusals_total`, kept in the response's
/// extensions.
#[derive(Clone, Debug)]
pub struct Refusal(pub String);

/// The message of an error answer, kept in the response's extensions for the request log.
#[derive(Clone, Debug)]
pub struct RefusalMessage(pub String);

impl ApiError {
    /// An error of `kind`.
    pub fn kind(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(Inner {
            status,
            key: "kind",
            code: kind.to_string(),
            message: message.into(),
            extra: Map::new(),
        }))
    }

    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// A refusal of a command by a rule (`422`).
    pub fn rule(violation: &Violation) -> ApiError {
        ApiError(Box::new(Inner {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            key: "rule",
            code: violation.rule.name().to_string(),
            message: violation.message.clone(),
            extra: Map::new(),
        }))
    }

    /// `400 bad_request`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::kind(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// Adds a field to the error object.
    #[must_use]
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.0.extra.insert(key.to_string(), value.into());
        self
    }

    /// The refusal of an input line: `413 too_large` for a size, `400 invalid_event` else;
    /// with the line's number.
    pub fn line(e: LineError) -> ApiError {
        let (status, kind) = if e.problem.is_size() {
            (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
        } else if e.problem == Problem::IdReused {
            (StatusCode::CONFLICT, "id_reused")
        } else {
            (StatusCode::BAD_REQUEST, "invalid_event")
        };
        ApiError::kind(status, kind, e.message).with("line", e.line)
    }

    /// An engine error, answered by what the caller can do about it.
    pub fn engine(e: Error) -> ApiError {
        let message = e.to_string();
        match e {
            Error::Conflict {
                stream,
                expected,
                actual,
            } => ApiError::kind(StatusCode::CONFLICT, "conflict", message)
                .with("stream", stream)
                .with("expectedVersion", expected)
                .with("actualVersion", actual),
            Error::LimitExceeded { .. } | Error::EventTooLarge { .. } => {
                ApiError::kind(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
            }
            Error::InvalidEvent { .. } => {
                ApiError::kind(StatusCode::BAD_REQUEST, "invalid_event", message)
            }
            Error::IdReused { .. } => ApiError::kind(StatusCode::CONFLICT, "id_reused", message),
            Error::InvalidInput(_) => ApiError::bad_request(message),
            Error::Archived { last_archived, .. } => {
                ApiError::kind(StatusCode::GONE, "archived", message)
                    .with("lastArchived", last_archived.0)
            }
            Error::Poisoned(_) | Error::Closed | Error::ReadOnly | Error::Tree(_) => {
                ApiError::kind(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            }
            Error::Io { ref source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) =>
            {
                ApiError::kind(StatusCode::INSUFFICIENT_STORAGE, "disk_full", message)
            }
            e if e.is_corruption() => {
                ApiError::kind(StatusCode::INTERNAL_SERVER_ERROR, "corruption", message)
            }
            _ => ApiError::internal(message),
        }
    }

    /// A request body that could not be read: `408 timeout` when it did not arrive in time
    /// ([`crate::deadline`]), `400 bad_request` else.
    pub fn body(e: &axum::Error) -> ApiError {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = source {
            if let Some(timeout) = s.downcast_ref::<BodyTimeout>() {
                return ApiError::kind(StatusCode::REQUEST_TIMEOUT, "timeout", timeout.to_string());
            }
            source = s.source();
        }
        ApiError::bad_request(format!("reading the body: {e}"))
    }

    /// `500 internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::kind(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(inner) = self;
        let Inner {
            status,
            key,
            code,
            message,
            extra,
        } = *inner;
        let mut error = Map::new();
        error.insert(key.to_string(), Value::String(code.clone()));
        error.insert("message".into(), Value::String(message.clone()));
        error.extend(extra);
        let mut response = (status, Json(json!({ "error": error }))).into_response();
        let headers = response.headers_mut();
        match status {
            // RFC 9110, 11.6.1: a 401 names the scheme the client must use.
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // The rest of a body that did not arrive in time is not waited for.
            StatusCode::REQUEST_TIMEOUT => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // RFC 9110, 15.5.16: `Accept` names the types that would be taken.
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                headers.insert(header::ACCEPT, crate::guard::accepted_types());
            }
            _ => {}
        }
        response.extensions_mut().insert(Refusal(code));
        response.extensions_mut().insert(RefusalMessage(message));
        response
    }
}

impl From<journal_projections::models::ReadError> for ApiError {
    fn from(e: journal_projections::models::ReadError) -> ApiError {
        use journal_projections::models::ReadError;
        match e {
            ReadError::UnknownModel(_) | ReadError::UnknownProjection(_) => {
                ApiError::kind(StatusCode::NOT_FOUND, "unknown_model", e.to_string())
            }
            ReadError::Journal(e) => ApiError::engine(e),
            e => ApiError::internal(e.to_string()),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::internal(format!("a worker failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_position_is_gone_naming_where_the_live_log_begins() {
        let e = ApiError::engine(Error::Archived {
            position: journal_format::Position(3),
            last_archived: journal_format::Position(820),
            locations: "/cold".into(),
        });
        assert_eq!(e.status(), StatusCode::GONE);
        assert_eq!(e.0.code, "archived");
        assert_eq!(e.0.extra.get("lastArchived"), Some(&Value::from(820u64)));
        assert!(e.0.message.contains("/cold"), "{}", e.0.message);
    }
}
