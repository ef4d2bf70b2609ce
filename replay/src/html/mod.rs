//! The review app's pages, server-rendered from one set of templates (`maud`): the sessions
//! list ([`sessions`]) and a session's page ([`session`]: header, tasks and approvals, gaps
//! and incidents, the SVG timeline, the narrative turn by turn). `journal serve` renders them
//! with its assets linked (`/assets/app.css`, `/assets/app.js`), paged, with time travel and
//! live refresh; the static export ([`render`]: `journal replay --format html`,
//! `journal export replay`, the evidence pack) renders the same session page as one file, its
//! styles inline, every step on it, no script, and a Content-Security-Policy that forbids every
//! fetch, so an archived page opens offline and looks like the app.

mod fmt;
mod layout;
pub mod session;
pub mod sessions;
mod steps;
mod timeline;

pub use layout::{Assets, CSS, JS};
pub use session::{Badge, Chain, Served, SessionPage, Verified, STEPS_PER_PAGE};
pub use sessions::{encode, ListFilter, SessionRow, SessionsPage};

use crate::narrative::Narrative;

/// Renders `narrative` as one self-contained HTML document: the app's session page with every
/// step, its styles inline and nothing fetched.
#[must_use]
pub fn render(narrative: &Narrative) -> String {
    session::render(&SessionPage {
        narrative,
        state: None,
        runtime: None,
        served: None,
    })
}

/// A page of the app around `body` (a sign-in form, a message): the top bar naming `place`,
/// the app's assets linked.
#[must_use]
pub fn frame(title: &str, place: &str, body: &maud::Markup) -> String {
    layout::page(title, place, Assets::Served, body)
}
