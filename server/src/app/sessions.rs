//! `GET /`: the sessions list, from the app's session index (brought up to the head first),
//! filtered, newest activity first, a page at a time. A token limited to session prefixes
//! lists only its own sessions.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use journal_replay::html::{sessions, ListFilter, SessionsPage};
use serde::Deserialize;

use super::signin::authorize_page;
use crate::api::query;
use crate::error::ApiError;
use crate::AppState;

/// Rows a page of the list shows.
pub(crate) const ROWS_PER_PAGE: usize = 50;

/// The list's query: the search, the filters (on when given and not empty), the page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    q: Option<String>,
    failed: Option<String>,
    approval: Option<String>,
    open: Option<String>,
    incidents: Option<String>,
    imported: Option<String>,
    page: Option<usize>,
}

impl ListQuery {
    fn filter(&self) -> ListFilter {
        let on = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        ListFilter {
            q: self.q.clone().unwrap_or_default().trim().to_string(),
            failed: on(&self.failed),
            approval: on(&self.approval),
            open: on(&self.open),
            incidents: on(&self.incidents),
            imported: self.imported.clone().unwrap_or_default(),
        }
    }
}

/// The sessions list page.
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    q: Result<Query<ListQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let grant = match authorize_page(&state, &headers, "/") {
        Ok(grant) => grant,
        Err(signin) => return Ok(*signin),
    };
    let q = query(q)?;
    let filter = q.filter();
    let page = q.page.unwrap_or(0);
    let html = tokio::task::spawn_blocking(move || -> Result<String, ApiError> {
        let mut index = state.app.index.lock().unwrap_or_else(|p| p.into_inner());
        index.refresh(&state.journal, &state.models)?;
        let (rows, matching) =
            index.page(&filter, page, ROWS_PER_PAGE, |id| grant.covers(Some(id)));
        Ok(sessions::render(&SessionsPage {
            rows,
            matching,
            total: index.len(),
            page,
            per_page: ROWS_PER_PAGE,
            filter: &filter,
            imported: index.imported(),
            freshness: super::freshness(&state),
        }))
    })
    .await??;
    Ok(super::page(StatusCode::OK, html))
}
