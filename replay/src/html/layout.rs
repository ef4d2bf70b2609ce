//! The frame of every page: the document head (title, styles, script), the top bar and the
//! main column. The app links its assets from the server (`/assets/…`); the static export
//! carries its styles inline under a Content-Security-Policy that forbids every fetch.

use maud::{html, Markup, PreEscaped, DOCTYPE};

/// The styles of every page.
pub const CSS: &str = include_str!("app.css");
/// The script of the app's pages: filters and time travel submit as they change, large outputs
/// load in place, and a live session refreshes as its events arrive.
pub const JS: &str = include_str!("app.js");

/// Where a page's styles and script come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assets {
    /// The app: `/assets/app.css` and `/assets/app.js`, from the server that served the page.
    Served,
    /// A file on its own: the styles inline, no script, nothing fetched from anywhere.
    Inline,
}

/// A whole page: `title`, then `body` under the top bar (which names `place`).
pub(crate) fn page(title: &str, place: &str, assets: Assets, body: &Markup) -> String {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if assets == Assets::Inline {
                    meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'";
                }
                title { (title) }
                @match assets {
                    // No icon to fetch.
                    Assets::Served => { link rel="icon" href="data:,"; link rel="stylesheet" href="/assets/app.css"; },
                    Assets::Inline => style { (PreEscaped(CSS)) },
                }
            }
            body {
                header.top {
                    @match assets {
                        Assets::Served => a href="/" { "journal · review" },
                        Assets::Inline => span { "journal · review" },
                    }
                    span.where { (place) }
                }
                main { (body) }
                @if assets == Assets::Served {
                    script src="/assets/app.js" {}
                }
            }
        }
    };
    markup.into_string()
}
