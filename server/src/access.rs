//! The request log: one `tracing` event per request, target `journal::request`, with the
//! method, the path (never the query, whose values could be secrets, nor any header, so never
//! the token), the status, the latency in milliseconds and the client's address; a refused
//! request also with its kind or rule and the message it was answered with. The CLI chooses the
//! format (`--log-format text|json`).

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use crate::conn::Peer;
use crate::error::{Refusal, RefusalMessage};

/// The most characters of a path or message logged.
const FIELD_CHARS_MAX: usize = 512;

/// `router` with every request logged.
pub(crate) fn layer(router: Router) -> Router {
    router.layer(middleware::from_fn(log))
}

async fn log(request: Request, next: Next) -> Response {
    #[allow(
        clippy::disallowed_methods,
        reason = "a request's latency is real time, not the journal's clock"
    )]
    let started = Instant::now();
    let method = request.method().clone();
    let path = clip(request.uri().path());
    let peer = request
        .extensions()
        .get::<Peer>()
        .map(|p| p.0.to_string())
        .unwrap_or_default();
    let response = next.run(request).await;
    // Milliseconds to the microsecond.
    let latency_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
    let status = response.status().as_u16();
    let refused = response.extensions().get::<Refusal>().map(|r| r.0.as_str());
    match refused {
        None => tracing::info!(
            target: "journal::request",
            method = %method, path, status, latency_ms, peer,
            "request"
        ),
        Some(reason) => {
            let message = response
                .extensions()
                .get::<RefusalMessage>()
                .map(|m| clip(&m.0))
                .unwrap_or_default();
            tracing::info!(
                target: "journal::request",
                method = %method, path, status, latency_ms, peer, refused = reason, reason = message,
                "refused"
            );
        }
    }
    response
}

/// `text`, cut to [`FIELD_CHARS_MAX`] characters.
fn clip(text: &str) -> String {
    match text.char_indices().nth(FIELD_CHARS_MAX) {
        Some((end, _)) => format!("{}…", text.get(..end).unwrap_or_default()),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_field_is_clipped_on_a_character_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(FIELD_CHARS_MAX + 10);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), FIELD_CHARS_MAX + 1);
        assert!(clipped.ends_with('…'));
    }
}
