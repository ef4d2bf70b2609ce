//! Signing in a browser: `GET /signin` shows a small form for a token; `GET /signin?token=T`
//! checks it (it must have the `read` scope), sets it as the `journal_token` cookie
//! (`HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS) and redirects to the page asked for.
//! A page asked for without a token, when the server has a tokens file, answers this form with
//! `401`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::cookie;
use crate::api::query;
use crate::auth::authorize;
use crate::error::ApiError;
use crate::tokens::{Grant, Scope};
use crate::AppState;

/// The query of `/signin`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SigninQuery {
    token: Option<String>,
    next: Option<String>,
}

/// A path on this server to go back to: a relative path only, never another site.
fn local(next: Option<&str>) -> &str {
    // Browsers drop tabs and newlines from a URL before reading it (`/\t/evil` is `//evil`):
    // only printable ASCII passes.
    next.filter(|n| {
        n.starts_with('/')
            && !n.starts_with("//")
            && !n.contains('\\')
            && n.bytes().all(|b| b.is_ascii_graphic())
    })
    .unwrap_or("/")
}

/// Whether `token` can be a cookie's value as it is.
fn cookie_safe(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
}

/// The sign-in form, with `problem` said above it.
fn form(next: &str, problem: Option<&str>) -> String {
    let body = html! {
        div.card {
            h1 { "Sign in" }
            p { "This server asks for a token with the " code { "read" } " scope ("
                code { "journal token create --scope read" } "). It is kept in a cookie that only this server reads, for reading pages." }
            @if let Some(p) = problem { p.bad { (p) } }
            form method="get" action="/signin" {
                input type="hidden" name="next" value=(next);
                input type="password" name="token" placeholder="token" aria-label="token" autocomplete="off";
                " " button type="submit" { "Sign in" }
            }
        }
    };
    journal_replay::html::frame("Sign in", "sign in", &body)
}

/// The grant of a page's request; a sign-in form (`401`) or the error answer when there is
/// none. `next` is the page, for after signing in.
pub(crate) fn authorize_page(
    state: &AppState,
    headers: &HeaderMap,
    next: &str,
) -> Result<Grant, Box<Response>> {
    authorize(state, headers, Scope::Read).map_err(|e| {
        Box::new(if e.status() == StatusCode::UNAUTHORIZED {
            super::page(StatusCode::UNAUTHORIZED, form(local(Some(next)), None))
        } else {
            e.into_response()
        })
    })
}

/// `GET /signin`.
pub(crate) async fn signin(
    State(state): State<Arc<AppState>>,
    q: Result<Query<SigninQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let next = local(q.next.as_deref()).to_string();
    let Some(token) = q.token.as_deref().map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(super::page(StatusCode::OK, form(&next, None)));
    };
    let Some(tokens) = &state.tokens else {
        // No tokens file: every page is open already.
        return Ok(redirect(&next, None));
    };
    let problem = match tokens.check(token) {
        _ if !cookie_safe(token) => "That is not a token.",
        None => "That token is not known (mistyped or revoked).",
        Some(grant) if !grant.has(Scope::Read) => "That token has no `read` scope.",
        Some(_) => {
            let secure = if state.config.tls.is_some() {
                "; Secure"
            } else {
                ""
            };
            let cookie = format!(
                "{}={token}; Path=/; HttpOnly; SameSite=Strict{secure}",
                cookie::NAME
            );
            return Ok(redirect(&next, Some(cookie)));
        }
    };
    Ok(super::page(
        StatusCode::UNAUTHORIZED,
        form(&next, Some(problem)),
    ))
}

fn redirect(next: &str, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(next) {
        h.insert(header::LOCATION, v);
    }
    if let Some(v) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_local_path_is_gone_back_to() {
        assert_eq!(local(Some("/sessions/s1?at=3")), "/sessions/s1?at=3");
        assert_eq!(local(Some("//evil.example/")), "/");
        assert_eq!(local(Some("https://evil.example/")), "/");
        assert_eq!(local(Some("/\\evil")), "/");
        assert_eq!(local(Some("/\t/evil.example")), "/");
        assert_eq!(local(Some("/\n/evil.example")), "/");
        assert_eq!(local(None), "/");
    }

    #[test]
    fn a_token_with_cookie_syntax_in_it_is_refused() {
        assert!(cookie_safe("jt_abc123"));
        assert!(!cookie_safe("a;b"));
        assert!(!cookie_safe("a b"));
        assert!(!cookie_safe(""));
    }
}
