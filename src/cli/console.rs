//! `toolgate console`: parses its flags, opens the stores they name and serves the review
//! console (`src/console/`).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::audit_out::AuditOut;
use crate::console::{ConsoleConfig, ConsoleReviews, Tokens};
use crate::engine::FileReviewStore;

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
    let config = ConsoleConfig {
        tokens,
        reviews,
        runs,
        audit,
        signer,
        secure,
        notifier,
        poll: std::time::Duration::from_millis(args.poll_ms.clamp(20, 60_000)),
    };
    let front = crate::http_front::FrontConfig {
        per_address: args.front.per_address(),
        allowed_hosts: args.front.allowed_hosts.clone(),
        shutdown_grace: std::time::Duration::from_secs(5),
        name: "toolgate console",
        ..Default::default()
    };
    crate::console::serve(
        config,
        listener,
        front,
        super::collect::shutdown_signal(),
        |places| {
            println!("toolgate console listening on http://{addr}/");
            eprintln!("toolgate console: reviews in {places}");
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
        },
    )
    .await
}
