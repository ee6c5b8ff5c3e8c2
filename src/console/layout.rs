//! The frame of every console page (head, header with the viewer, main), at the bottom of the
//! console's pages: [`super::pages`] and [`super::run_page`] fill it.

use maud::{DOCTYPE, Markup, html};

/// What a page needs to know of its viewer.
pub struct Viewer<'a> {
    /// The reviewer's name.
    pub name: &'a str,
    /// The session's CSRF token.
    pub csrf: &'a str,
}

/// A whole page around `body`.
pub fn layout(title: &str, viewer: Option<&Viewer<'_>>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate console" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "toolgate console" }
                    @if let Some(v) = viewer {
                        span.who { "Signed in as " strong { (v.name) } }
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(v.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}
