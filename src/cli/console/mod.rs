//! `toolgate console`: a web page for the humans in the loop (design §15) over the review
//! store (a file or Redis) and, with `--store`, the audit store.
//!
//! * `store` — listing the reviews cheaply, the expiry sweep, a decision's side effects;
//! * `audit_out` — `review.decided` events and run pages;
//! * `auth` — tokens, sessions, CSRF;
//! * `pages` — the HTML (maud templates); `text` — hostile text made visible, long values cut;
//! * `live` — the poller and the server-sent events.

mod audit_out;
mod auth;
mod live;
mod login;
mod pages;
mod run_page;
mod store;
mod text;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use self::audit_out::AuditOut;
use self::auth::{Cookies, LoginCsrf, Session, Sessions, Throttle, Tokens};
use self::pages::{ListQuery, PageContext, Viewer};
use self::store::{ConsoleReviews, Effects};
use crate::engine::{FileReviewStore, ReviewError};

/// The long help of `toolgate console`.
pub const LONG_ABOUT: &str = "Serve the review console: a web page where reviewers log in with \
a token, see the calls waiting for review (agent, end user, tool, redacted arguments, rule and \
reason, age) as they are raised by any process, approve or deny them with a comment, and see \
who decided what. With --store, each review links to its run's page (decisions in order, \
evaluations, the chain's verify status).\n\n\
TOKENS is JSON: {\"tokens\": [{\"sha256\": \"<hex SHA-256 of the token>\", \"name\": \"alice\"}]}; \
the name is recorded as the reviewer. Each decision is also written as a `review.decided` \
audit event (to --store, else to --audit DIR).\n\n\
The first line on standard output is `toolgate console listening on http://ADDR/`.";

/// Arguments of `toolgate console`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct ConsoleArgs {
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8851")]
    pub listen: SocketAddr,
    /// The reviewers' tokens: `{"tokens": [{"sha256", "name"}]}`.
    #[arg(long, value_name = "TOKENS")]
    pub token_file: PathBuf,
    /// The review store file (as given to `replay --reviews`).
    #[arg(long, value_name = "FILE", conflicts_with = "state")]
    pub reviews: Option<PathBuf>,
    /// Reviews on Redis (`--state redis://…`, as given to `replay` and `mcp-proxy`).
    #[command(flatten)]
    pub state: super::state::StateArgs,
    /// The audit store: a folder of JSONL files or `postgres://…` (run pages, and where
    /// `review.decided` events go).
    #[arg(long, value_name = "DIR|postgres://…")]
    pub store: Option<String>,
    /// Where `review.decided` events go without --store.
    #[arg(long, value_name = "DIR", default_value = crate::audit::DEFAULT_AUDIT_DIR, conflicts_with = "store")]
    pub audit: PathBuf,
    /// How often the review store is looked at for changes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub poll_ms: u64,
    /// Webhooks told of each decision made here (see `replay --notify`).
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
    /// The URL reviewers reach the console at. `https://…` (a TLS proxy in front): the cookies
    /// get `Secure` and the `__Host-` prefix.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Sign the runs of the console's `review.decided` events with this Ed25519 private key
    /// (see `toolgate keygen`): each is closed by a signed `run.ended`, so `toolgate verify
    /// --public-key KEY.pub` accepts them.
    #[arg(long, value_name = "KEY")]
    pub signing_key: Option<PathBuf>,
    /// How the console's HTTP front admits clients (Host check, per-address cap).
    #[command(flatten)]
    pub front: super::front::FrontArgs,
}

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

/// Runs `toolgate console`.
pub fn run(args: ConsoleArgs) -> ExitCode {
    let runtime = match super::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate console: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate console: {e}");
            ExitCode::from(2)
        }
    }
}

fn open_reviews(args: &ConsoleArgs) -> Result<Arc<dyn ConsoleReviews>, String> {
    #[cfg(feature = "redis")]
    if let Some(config) = args.state.redis()? {
        return Ok(Arc::new(super::state::StateArgs::review_store(&config)?));
    }
    #[cfg(not(feature = "redis"))]
    if args.state.state.is_some() {
        return Err("--state needs toolgate built with the `redis` feature".into());
    }
    match &args.reviews {
        Some(path) => Ok(Arc::new(FileReviewStore::new(path))),
        None => Err("give the review store: --reviews FILE or --state redis://…".into()),
    }
}

async fn serve(args: ConsoleArgs) -> Result<(), String> {
    let tokens = Tokens::load(&args.token_file)?;
    let reviews = open_reviews(&args)?;
    let runs = match &args.store {
        Some(spec) => Some(AuditOut::open(spec).await?),
        None => None,
    };
    let audit = runs
        .clone()
        .unwrap_or_else(|| AuditOut::Dir(args.audit.clone()));
    let signer = match &args.signing_key {
        Some(path) => Some(Arc::new(
            crate::audit::RunSigner::from_file(path).map_err(|e| format!("--signing-key: {e}"))?,
        )),
        None => None,
    };
    let secure = match &args.public_url {
        Some(u) if u.starts_with("https://") => true,
        Some(u) if u.starts_with("http://") => false,
        Some(u) => {
            return Err(format!(
                "--public-url {u:?}: expected an http:// or https:// URL"
            ));
        }
        None => false,
    };
    let notifier = args.notify.config()?.map(crate::engine::Notifier::start);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let live = live::Live::new(std::time::Duration::from_millis(
        args.poll_ms.clamp(20, 60_000),
    ));
    let app = Arc::new(App {
        reviews,
        tokens,
        sessions: Sessions::default(),
        runs,
        effects: Effects {
            audit: Some(audit),
            notifier,
            signer,
        },
        live,
        cookies: Cookies::new(secure),
        login_csrf: LoginCsrf::default(),
        throttle: Throttle::default(),
    });
    live::start_poller(Arc::clone(&app));
    app.live.ready().await;
    println!("toolgate console listening on http://{addr}/");
    eprintln!(
        "toolgate console: reviews in {}{}",
        app.reviews.place(),
        app.runs
            .as_ref()
            .map(|r| format!(", runs in {}", r.place()))
            .unwrap_or_default()
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let front = crate::http_front::FrontConfig {
        per_address: args.front.per_address(),
        allowed_hosts: args.front.allowed_hosts.clone(),
        shutdown_grace: std::time::Duration::from_secs(5),
        name: "toolgate console",
        ..Default::default()
    };
    let served = crate::http_front::serve(
        router(Arc::clone(&app)),
        listener,
        front,
        super::collect::shutdown_signal(),
    )
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
            path: PathBuf::from("review store"),
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
