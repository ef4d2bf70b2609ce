//! Signing in a browser: `GET /signin` shows a small form for a token; the form's `POST /signin`
//! (the token in the body, never in a URL a browser keeps in its history) checks it (it must
//! have the `read` scope), sets it as the `journal_token` cookie (`HttpOnly`,
//! `SameSite=Strict`, `Secure` over HTTPS) and redirects to the page asked for. A page asked
//! for without a token, when the server has a tokens file, answers this form with `401`.

use std::sync::Arc;

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Query, State};
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

/// The query of `GET /signin`, and the form `POST /signin` takes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Signin {
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
            form method="post" action="/signin" {
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

/// `GET /signin`: the form. A token in the query is refused: a URL stays in the browser's
/// history.
pub(crate) async fn form_page(
    q: Result<Query<Signin>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    if q.token.is_some() {
        return Err(ApiError::bad_request(
            "a token in the URL would stay in the browser's history: send it in the sign-in form (POST /signin)",
        ));
    }
    let next = local(q.next.as_deref());
    Ok(super::page(StatusCode::OK, form(next, None)))
}

/// `POST /signin`, the form's: checks the token and sets the cookie.
pub(crate) async fn signin(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    signin: Result<Form<Signin>, FormRejection>,
) -> Result<Response, ApiError> {
    if !same_origin(&headers) {
        return Err(ApiError::kind(
            StatusCode::FORBIDDEN,
            "cross_site",
            "a sign-in must come from this server's own form",
        ));
    }
    let Form(signin) =
        signin.map_err(|e| ApiError::bad_request(format!("sign-in form: {}", e.body_text())))?;
    let next = local(signin.next.as_deref()).to_string();
    let Some(token) = signin
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return Ok(super::page(
            StatusCode::UNAUTHORIZED,
            form(&next, Some("Give a token.")),
        ));
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

/// Whether a request comes from a page of this server, as far as the browser says: no `Origin`
/// (not a browser's cross-site form), or one naming the `Host` asked for.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, host)| host);
    matches!((origin_host, host), (Some(o), Some(h)) if o == h)
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
    fn a_sign_in_from_another_site_is_told_apart() {
        let with = |origin: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7070"));
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
            }
            same_origin(&h)
        };
        assert!(with(None));
        assert!(with(Some("http://127.0.0.1:7070")));
        assert!(with(Some("https://127.0.0.1:7070")));
        assert!(!with(Some("http://evil.example")));
        assert!(!with(Some("http://127.0.0.1:7071")));
        assert!(!with(Some("null")));
    }

    #[test]
    fn a_token_with_cookie_syntax_in_it_is_refused() {
        assert!(cookie_safe("jt_abc123"));
        assert!(!cookie_safe("a;b"));
        assert!(!cookie_safe("a b"));
        assert!(!cookie_safe(""));
    }
}
