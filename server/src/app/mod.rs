//! The review app, served at `/` (`docs/REVIEW.md`): the sessions list ([`sessions`]), a
//! session's page ([`session`]), large outputs from the blob store ([`blobs`]), the sign-in
//! that sets the token cookie ([`signin`], [`cookie`]), and the embedded styles and script.
//! The pages are rendered by `journal-replay`'s templates, the same the static export uses;
//! what they show comes from the narrative, the rules' state and the read models, and the
//! list from its own small read model ([`index`]). Every page answers with a
//! Content-Security-Policy that lets it load from this server only.

pub(crate) mod blobs;
pub(crate) mod chain;
pub(crate) mod cookie;
pub(crate) mod index;
pub(crate) mod session;
pub(crate) mod sessions;
pub(crate) mod signin;

use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use journal_projections::Freshness;
use journal_replay::html::Badge;

use crate::AppState;

/// What the app keeps between requests.
#[derive(Debug, Default)]
pub(crate) struct AppCache {
    /// The sessions list's rows.
    pub index: Mutex<index::SessionIndex>,
    /// The chain's last verification.
    pub chain: chain::ChainCheck,
}

/// The pages' Content-Security-Policy: everything from this server, nothing from elsewhere,
/// no inline script.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The app's routes.
pub(crate) fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(sessions::list))
        .route("/sessions/{id}", get(session::page))
        .route("/blobs/{reference}", get(blobs::blob))
        .route("/signin", get(signin::form_page).post(signin::signin))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
}

/// An HTML page with the app's headers.
pub(crate) fn page(status: StatusCode, html: String) -> Response {
    let mut response = (status, Html(html)).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(media: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(media)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=300"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", journal_replay::html::CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", journal_replay::html::JS)
}

/// The freshness badge of a read models' answer.
pub(crate) fn badge(f: &Freshness) -> Badge {
    let state = serde_json::to_value(f.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    Badge {
        state,
        lag_events: f.lag_events,
        lag_ms: f.lag_ms,
    }
}

/// The read models' combined freshness (both projections).
pub(crate) fn freshness(state: &AppState) -> Option<Badge> {
    let parts = journal_projections::models::PROJECTIONS
        .iter()
        .filter_map(|n| state.models.freshness(n).ok())
        .collect::<Vec<_>>();
    Freshness::combine(&parts).map(|f| badge(&f))
}
