//! `GET /sessions/{id}`: a session's page, as of `?at=POSITION` (time travel) and at page
//! `?page=N` of its narrative: the narrative and the rules' state loaded by `journal-replay`
//! on the blocking pool, with the read models' freshness and the chain's verified head. A
//! token limited to sessions sees only its own, and not one that nests a subagent's session
//! outside its prefixes.

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use journal_replay::html::{self, Served, SessionPage};
use journal_replay::Scope;
use maud::html as markup;
use serde::Deserialize;

use super::signin::authorize_page;
use crate::api::review::check_nested;
use crate::api::{path, query};
use crate::auth::check_session;
use crate::error::ApiError;
use crate::AppState;

/// The query of a session's page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageQuery {
    /// As of this position.
    at: Option<u64>,
    /// The page of the narrative (from 0).
    page: Option<usize>,
}

/// The runtime that wrote a narrative: its first step's producer.
fn runtime(n: &journal_replay::Narrative) -> Option<String> {
    n.steps.iter().find_map(|s| s.producer.clone())
}

/// A session's page.
pub(crate) async fn page(
    State(state): State<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<PageQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = path(id)?;
    let q = query(q)?;
    let here = format!("/sessions/{}", html::encode(&id));
    let grant = match authorize_page(&state, &headers, &here) {
        Ok(grant) => grant,
        Err(signin) => return Ok(*signin),
    };
    check_session(&grant, Some(&id))?;
    let (status, html) = tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
        let review = journal_replay::load_review(&state.journal, &Scope::Session(id.clone()), q.at)
            .map_err(ApiError::engine)?;
        if review.narrative.counts.events == 0 {
            let body = markup! {
                div.card { h1 { "No session " code { (id) } }
                    p { "Nothing is recorded about it" @if let Some(at) = q.at { " as of position " (at) } "." }
                    p { a href="/" { "All sessions" } } }
            };
            return Ok((StatusCode::NOT_FOUND, html::frame("No such session", "not found", &body)));
        }
        check_nested(&grant, &review.narrative)?;
        let runtime = runtime(&review.narrative);
        let page = SessionPage {
            narrative: &review.narrative,
            state: Some(&review.state),
            runtime: runtime.as_deref(),
            served: Some(Served {
                path: &here,
                session: &id,
                at: q.at,
                last_position: review.last_position,
                freshness: super::freshness(&state),
                chain: Some(state.app.chain.status(&state.journal)),
                page: q.page.unwrap_or(0),
            }),
        };
        Ok((StatusCode::OK, html::session::render(&page)))
    })
    .await??;
    Ok(super::page(status, html).into_response())
}
