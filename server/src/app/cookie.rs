//! The token cookie: a browser cannot send a bearer header when it navigates or opens an
//! event stream, so a `GET` (or `HEAD`) request without an `Authorization` header but with a
//! `journal_token` cookie is answered as if it carried `Authorization: Bearer <cookie>`, under
//! the same scope and session rules. Other methods never read the cookie: a page cannot be
//! made to append or run a command by a cross-site form (and the cookie is `SameSite=Strict`).

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

/// The cookie's name.
pub(crate) const NAME: &str = "journal_token";

/// The value of the `journal_token` cookie in a `Cookie` header, if any.
pub(crate) fn token(cookies: &str) -> Option<&str> {
    cookies
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == NAME)
        .map(|(_, value)| value.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// Gives a `GET` or `HEAD` request its cookie's token as its bearer token.
pub(crate) async fn bearer_from_cookie(mut request: Request, next: Next) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if reads && !request.headers().contains_key(header::AUTHORIZATION) {
        let bearer = request
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(token)
            .and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok());
        if let Some(bearer) = bearer {
            request.headers_mut().insert(header::AUTHORIZATION, bearer);
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_among_other_cookies() {
        assert_eq!(token("a=1; journal_token=abc; b=2"), Some("abc"));
        assert_eq!(token("journal_token=\"abc\""), Some("abc"));
        assert_eq!(token("journal_tokens=abc"), None);
        assert_eq!(token("journal_token="), None);
        assert_eq!(token(""), None);
    }
}
