//! The error answer of every route: a status and `{"error":{"rule"|"kind","message"}}`. A
//! refusal by a rule of the control plane names the `rule`; every other error names its
//! `kind`. Each error is counted in `/metrics` by its rule or kind.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use journal_engine::input::{LineError, Problem};
use journal_engine::Error;
use journal_projections::Violation;
use serde_json::{json, Map, Value};

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
            Error::Poisoned(_) | Error::Closed | Error::ReadOnly => {
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
        error.insert("message".into(), Value::String(message));
        error.extend(extra);
        let mut response = (status, Json(json!({ "error": error }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110, 11.6.1: a 401 names the scheme the client must use.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response.extensions_mut().insert(Refusal(code));
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
