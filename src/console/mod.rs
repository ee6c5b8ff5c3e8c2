//! The review console: a web page for the humans in the loop (design §15) over the review
//! store (a file or Redis) and, with `--store`, the audit store. `toolgate console` parses its
//! flags and calls [`serve`].
//!
//! * `store` — listing the reviews cheaply, the expiry sweep, a decision's side effects;
//! * `runs` — run pages read from the audit store (`review.decided` events are written by
//!   [`crate::audit_out`]);
//! * `auth` — tokens, sessions, CSRF;
//! * `layout` — every page's frame; `pages`, `run_page` — the HTML (maud templates); `text` — hostile text made visible, long values cut;
//! * `live` — the poller and the server-sent events.

mod auth;
mod layout;
mod live;
mod login;
mod pages;
mod run_page;
mod runs;
mod store;
mod text;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

pub(crate) use self::auth::Tokens;
use self::auth::{Cookies, LoginCsrf, Session, Sessions, Throttle};
use self::layout::Viewer;
use self::pages::{ListQuery, PageContext};
pub(crate) use self::store::ConsoleReviews;
use self::store::Effects;
use crate::audit_out::AuditOut;
use crate::engine::ReviewError;

/// What the handlers share.
pub(crate) struct App {
    reviews: Arc<dyn ConsoleReviews>,
    tokens: Tokens,
    sessions: Sessions,
    /// The audit store of `--store` (run pages), if given.
    runs: Option<AuditOut>,
    effects: Effects,
    live: live::Live,
    cookies: Cookies,
    login_csrf: LoginCsrf,
    throttle: Throttle,
}

/// What every page needs to know of the console.
pub(crate) fn page_context(app: &App) -> PageContext {
    PageContext {
        runs: app.runs.is_some(),
        approval_lasts: app.reviews.approval_lasts(),
    }
}

/// What the console is given, opened by `toolgate console` from its flags.
pub(crate) struct ConsoleConfig {
    /// The reviewers' tokens.
    pub tokens: Tokens,
    /// The review store.
    pub reviews: Arc<dyn ConsoleReviews>,
    /// The audit store of `--store` (run pages), if given.
    pub runs: Option<AuditOut>,
    /// Where `review.decided` events go.
    pub audit: AuditOut,
    /// Signs the runs of the `review.decided` events.
    pub signer: Option<Arc<crate::audit::RunSigner>>,
    /// The cookies get `Secure` and the `__Host-` prefix (an `https://` public URL).
    pub secure: bool,
    /// Webhooks told of each decision made here.
    pub notifier: Option<crate::engine::Notifier>,
    /// How often the review store is looked at for changes.
    pub poll: std::time::Duration,
}

/// Serves the console on `listener` through the HTTP front until `shutdown`; `ready` is told,
/// once the first look at the review store is done, where the reviews (and runs) are.
pub(crate) async fn serve(
    config: ConsoleConfig,
    listener: tokio::net::TcpListener,
    front: crate::http_front::FrontConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&str),
) -> Result<(), String> {
    let app = Arc::new(App {
        reviews: config.reviews,
        tokens: config.tokens,
        sessions: Sessions::default(),
        runs: config.runs,
        effects: Effects {
            audit: Some(config.audit),
            notifier: config.notifier,
            signer: config.signer,
        },
        live: live::Live::new(config.poll),
        cookies: Cookies::new(config.secure),
        login_csrf: LoginCsrf::default(),
        throttle: Throttle::default(),
    });
    live::start_poller(Arc::clone(&app));
    app.live.ready().await;
    ready(&format!(
        "{}{}",
        app.reviews.place(),
        app.runs
            .as_ref()
            .map(|r| format!(", runs in {}", r.place()))
            .unwrap_or_default()
    ));
    let served = crate::http_front::serve(router(Arc::clone(&app)), listener, front, shutdown)
        .await
        .map_err(|e| e.to_string());
    if let Some(n) = &app.effects.notifier {
        n.drain(crate::engine::NOTIFY_DRAIN).await;
    }
    served
}

/// The routes, with the security headers on every answer.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(login::logout))
        .route("/reviews/{id}", get(review_page))
        .route("/reviews/{id}/decide", post(decide))
        .route("/runs/{run}", get(run_page))
        .route("/events", get(live::events))
        .route("/static/console.js", get(script))
        .route("/static/console.css", get(style))
        .route("/healthz", get(|| async { "ok" }))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(app)
}

/// The Content-Security-Policy of every answer: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("static/console.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("static/console.css"),
    )
        .into_response()
}

/// The session of a request, with its cookie value.
fn session(app: &App, headers: &HeaderMap) -> Option<(String, Session)> {
    let id = auth::cookie(headers, app.cookies.session)?;
    app.sessions.get(id).map(|s| (id.to_string(), s))
}

fn csrf_ok(session: &Session, given: Option<&str>) -> bool {
    given.is_some_and(|g| auth::ct_eq(g.as_bytes(), session.csrf.as_bytes()))
}

fn forbidden_csrf(viewer: Option<&Viewer<'_>>) -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(
            pages::message(
                viewer,
                "Refused",
                "This form was not sent from this console (missing or wrong CSRF token). Reload the page and try again.",
            )
            .into_string(),
        ),
    )
        .into_response()
}

async fn index(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let Some((_, s)) = session(&app, &headers) else {
        return Redirect::to("/login").into_response();
    };
    let snap = app.live.current();
    let viewer = Viewer {
        name: &s.name,
        csrf: &s.csrf,
    };
    let ctx = page_context(&app);
    Html(pages::index(&viewer, &snap, chrono::Utc::now(), &ctx, &q).into_string()).into_response()
}

/// `GET /reviews/<id>`: one review, its arguments whole.
async fn review_page(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((_, s)) = session(&app, &headers) else {
        return Redirect::to("/login").into_response();
    };
    let viewer = Viewer {
        name: &s.name,
        csrf: &s.csrf,
    };
    let reviews = Arc::clone(&app.reviews);
    let found = tokio::task::spawn_blocking(move || reviews.by_id(&id))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    match found {
        Ok(Some(r)) => Html(
            pages::review_page(&viewer, &r, chrono::Utc::now(), &page_context(&app)).into_string(),
        )
        .into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Html(
                pages::message(Some(&viewer), "No such review", "No review has this id.")
                    .into_string(),
            ),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Html(pages::message(Some(&viewer), "Store unavailable", &e).into_string()),
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct DecideForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    verdict: String,
    #[serde(default)]
    comment: Option<String>,
}

async fn decide(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<DecideForm>,
) -> Response {
    let Some((_, s)) = session(&app, &headers) else {
        return (
            StatusCode::UNAUTHORIZED,
            Html(pages::message(None, "Not logged in", "Log in to decide reviews.").into_string()),
        )
            .into_response();
    };
    let viewer = Viewer {
        name: &s.name,
        csrf: &s.csrf,
    };
    if !csrf_ok(&s, form.csrf.as_deref()) {
        return forbidden_csrf(Some(&viewer));
    }
    let approve = match form.verdict.as_str() {
        "approve" => true,
        "deny" => false,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                Html(
                    pages::message(Some(&viewer), "Bad request", "Choose Approve or Deny.")
                        .into_string(),
                ),
            )
                .into_response();
        }
    };
    let verdict = store::verdict(approve, &s.name, form.comment);
    let reviews = Arc::clone(&app.reviews);
    let decided = tokio::task::spawn_blocking(move || reviews.decide_with(&id, &verdict)).await;
    let outcome = match decided {
        Ok(r) => r,
        Err(e) => Err(ReviewError::Io {
            path: std::path::PathBuf::from("review store"),
            message: e.to_string(),
        }),
    };
    match outcome {
        Ok(review) => {
            app.effects.decided(&review).await;
            app.live.decided(&review);
            Redirect::to("/").into_response()
        }
        Err(e) => {
            // Lost to the due expiry this very decision recorded: the expiry's event and
            // notification are written here (nobody else will).
            if let ReviewError::AlreadyDecided {
                expired_now: Some(r),
                ..
            } = &e
            {
                app.effects.decided(r).await;
                app.live.decided(r);
            }
            let (status, title) = match &e {
                ReviewError::AlreadyDecided { .. } => (StatusCode::CONFLICT, "Already decided"),
                ReviewError::NotFound(_) | ReviewError::PrefixTooShort(_) => {
                    (StatusCode::NOT_FOUND, "No such review")
                }
                ReviewError::Ambiguous { .. } => (StatusCode::BAD_REQUEST, "Ambiguous id"),
                ReviewError::Io { .. } => (StatusCode::SERVICE_UNAVAILABLE, "Store unavailable"),
            };
            app.live.wake();
            (
                status,
                Html(pages::message(Some(&viewer), title, &e.to_string()).into_string()),
            )
                .into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
struct RunQuery {
    agent: Option<String>,
}

async fn run_page(
    State(app): State<Arc<App>>,
    Path(run): Path<String>,
    Query(q): Query<RunQuery>,
    headers: HeaderMap,
) -> Response {
    let Some((_, s)) = session(&app, &headers) else {
        return Redirect::to("/login").into_response();
    };
    let viewer = Viewer {
        name: &s.name,
        csrf: &s.csrf,
    };
    let Some(store) = &app.runs else {
        return (
            StatusCode::NOT_FOUND,
            Html(
                pages::message(
                    Some(&viewer),
                    "No audit store",
                    "Start the console with --store DIR|postgres://… to see runs.",
                )
                .into_string(),
            ),
        )
            .into_response();
    };
    let (rows, verify) = match store.run(q.agent.as_deref(), &run).await {
        Ok((rows, check)) => {
            let breaks: Vec<String> = check
                .breaks
                .iter()
                .map(|b| match b.seq {
                    Some(seq) => format!("seq {seq}: {}", b.message),
                    None => b.message.clone(),
                })
                .collect();
            (rows, Ok((check.events, breaks)))
        }
        Err(e) => (Vec::new(), Err(e)),
    };
    // A run the store has no event of is not found (not "verified: 0 events").
    if rows.is_empty()
        && let Err(e) = &verify
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Html(pages::message(Some(&viewer), "Store unavailable", e).into_string()),
        )
            .into_response();
    }
    if rows.is_empty() && matches!(&verify, Ok((0, breaks)) if breaks.is_empty()) {
        return (
            StatusCode::NOT_FOUND,
            Html(
                pages::message(
                    Some(&viewer),
                    "No such run",
                    "The audit store holds no event of this run.",
                )
                .into_string(),
            ),
        )
            .into_response();
    }
    let agent = q
        .agent
        .clone()
        .or_else(|| {
            rows.first()
                .and_then(|r| r.body["agentId"].as_str().map(str::to_string))
        })
        .unwrap_or_default();
    Html(run_page::run_page(&viewer, &run, &agent, &rows, verify).into_string()).into_response()
}
