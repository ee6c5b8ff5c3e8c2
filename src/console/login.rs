//! Logging in and out: the login form (its CSRF token issued by the server), wrong tokens
//! throttled per address and logged with the address (never the token), sessions.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, FromRequestParts, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{App, auth, csrf_ok, forbidden_csrf, pages, session};

/// The address of the peer, when the server records it (`ConnectInfo`).
pub(super) struct Peer(Option<SocketAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
        ))
    }
}

pub(super) async fn login_form(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if session(&app, &headers).is_some() {
        return Redirect::to("/").into_response();
    }
    login_page(&app, StatusCode::OK, None)
}

/// The login page with a fresh login CSRF token (issued by this server, also as a cookie).
fn login_page(app: &App, status: StatusCode, error: Option<&str>) -> Response {
    let csrf = app.login_csrf.issue(chrono::Utc::now().timestamp());
    (
        status,
        [(
            header::SET_COOKIE,
            app.cookies.set(
                app.cookies.login,
                &csrf,
                Some(auth::LOGIN_CSRF_TTL_SECS as u64),
            ),
        )],
        Html(pages::login(&csrf, error).into_string()),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    token: String,
}

pub(super) async fn login(
    State(app): State<Arc<App>>,
    Peer(peer): Peer,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let ip = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| p.ip());
    let shown = peer.map_or_else(|| "an unknown address".to_string(), |p| p.ip().to_string());
    let now = std::time::Instant::now();
    if app.throttle.blocked(ip, now) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "60")],
            Html(
                pages::message(
                    None,
                    "Too many attempts",
                    "Too many wrong tokens from this address; try again in a minute.",
                )
                .into_string(),
            ),
        )
            .into_response();
    }
    // The token must be one this console issued, and the cookie must hold the same (double
    // submit): a cookie planted by someone else carries no token of ours.
    let cookie = auth::cookie(&headers, app.cookies.login);
    let csrf_matches = match (cookie, form.csrf.as_deref()) {
        (Some(c), Some(f)) => {
            auth::ct_eq(c.as_bytes(), f.as_bytes())
                && app.login_csrf.check(f, chrono::Utc::now().timestamp())
        }
        _ => false,
    };
    if !csrf_matches {
        return forbidden_csrf(None);
    }
    let Some(name) = app.tokens.check(&form.token) else {
        let n = app.throttle.failed(ip, now);
        // The address, never the token.
        tracing::warn!(
            "console: login refused from {shown}: unknown token ({n} in the last minute{})",
            if n >= auth::LOGIN_FAILURES_PER_MINUTE {
                "; further attempts from this address get 429 for the rest of the minute"
            } else {
                ""
            }
        );
        return login_page(
            &app,
            StatusCode::UNAUTHORIZED,
            Some("That token is not valid."),
        );
    };
    tracing::info!("console: {name} logged in from {shown}");
    let id = app.sessions.start(name);
    let mut res = Redirect::to("/").into_response();
    let h = res.headers_mut();
    for c in [
        app.cookies.set(app.cookies.session, &id, None),
        app.cookies.set(app.cookies.login, "", Some(0)),
    ] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            h.append(header::SET_COOKIE, v);
        }
    }
    res
}

#[derive(Debug, Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
}

pub(super) async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    let Some((id, s)) = session(&app, &headers) else {
        return Redirect::to("/login").into_response();
    };
    if !csrf_ok(&s, form.csrf.as_deref()) {
        return forbidden_csrf(None);
    }
    app.sessions.end(&id);
    (
        [(
            header::SET_COOKIE,
            app.cookies.set(app.cookies.session, "", Some(0)),
        )],
        Redirect::to("/login"),
    )
        .into_response()
}
