//! `toolgate review`: list and decide human reviews in a review store file.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::audit_out::AuditOut;
use crate::engine::{
    FileReviewStore, Review, ReviewError, ReviewStatus, ReviewStore, ReviewVerdict, status_word,
};

/// A review store that can say why it could not list its reviews, and lists them page by
/// page (`each` is given each page in turn, and stops the listing by answering `false`).
trait Store: ReviewStore {
    fn each_page(
        &self,
        pending: bool,
        each: &mut dyn FnMut(Vec<Review>) -> bool,
    ) -> Result<(), ReviewError>;
}

impl Store for FileReviewStore {
    fn each_page(
        &self,
        pending: bool,
        each: &mut dyn FnMut(Vec<Review>) -> bool,
    ) -> Result<(), ReviewError> {
        let all = FileReviewStore::try_list(self)?;
        each(
            all.into_iter()
                .filter(|r| !pending || r.status == ReviewStatus::Pending)
                .collect(),
        );
        Ok(())
    }
}

#[cfg(feature = "redis")]
impl Store for crate::state::redis::RedisReviewStore {
    fn each_page(
        &self,
        pending: bool,
        each: &mut dyn FnMut(Vec<Review>) -> bool,
    ) -> Result<(), ReviewError> {
        let mut after: Option<String> = None;
        loop {
            let page = self.page(pending, after.as_deref(), crate::state::redis::REVIEW_PAGE)?;
            if !each(page.reviews) {
                return Ok(());
            }
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(()),
            }
        }
    }
}

/// The store the arguments name (a file, or Redis with `--state`) and how to name it.
fn open(args: &ReviewArgs) -> Result<(Box<dyn Store>, String), String> {
    #[cfg(feature = "redis")]
    if let Some(config) = args.state.redis()? {
        let store = super::state::StateArgs::review_store(&config)?;
        let place = format!(
            "{} (prefix {})",
            crate::state::redis::redact_url(&config.url),
            config.prefix
        );
        return Ok((Box::new(store), place));
    }
    #[cfg(not(feature = "redis"))]
    if args.state.state.is_some() {
        return Err("--state needs toolgate built with the `redis` feature".into());
    }
    Ok((
        Box::new(FileReviewStore::new(&args.store)),
        args.store.display().to_string(),
    ))
}

/// The long help of `toolgate review`.
pub const LONG_ABOUT: &str = "List, approve, deny or expire human-review (hitl) requests.\n\n\
Reviews live in a JSON file shared with the engine (`FileReviewStore` in the library, \
`toolgate replay --reviews FILE` on the command line). Approving a review lets identical calls \
(same agent, rule, tool, arguments and end user) through from then on; denying blocks them.";

/// Arguments of `toolgate review`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct ReviewArgs {
    /// The review store file.
    #[arg(
        short,
        long,
        value_name = "FILE",
        default_value = "toolgate-reviews.json",
        global = true
    )]
    pub store: PathBuf,
    /// Reviews on Redis instead of a file (`--state redis://…`, as given to `replay` and
    /// `mcp-proxy`): a decision here is seen by every process sharing that Redis.
    #[command(flatten)]
    pub state: super::state::StateArgs,
    /// Also write each decision (approve, deny, expire) as a `review.decided` audit event, as
    /// the console does: to a folder (`DIR/toolgate-console/<date>.jsonl`, verified by
    /// `toolgate verify DIR`) or to a collector's `postgres://…` store.
    #[arg(long, value_name = "DIR|postgres://…", global = true)]
    pub audit: Option<String>,
    #[command(subcommand)]
    pub action: ReviewAction,
}

/// What to do with reviews.
#[derive(Debug, clap::Subcommand)]
pub enum ReviewAction {
    /// List reviews (pending ones unless --all).
    List {
        /// Include decided and expired reviews.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending review (by id or a unique prefix of at least 8 characters).
    Approve {
        /// Review id.
        id: String,
        #[command(flatten)]
        who: Reviewer,
    },
    /// Deny a pending review.
    Deny {
        /// Review id.
        id: String,
        #[command(flatten)]
        who: Reviewer,
    },
    /// Expire a review: the next identical call asks again.
    Expire {
        /// Review id.
        id: String,
    },
}

/// Who decides, and why.
#[derive(Debug, Clone, clap::Args)]
pub struct Reviewer {
    /// The reviewer's name, recorded in the review (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// A comment recorded with the decision.
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
}

/// One line of `toolgate review list`.
fn print_review(r: &Review) {
    outln!(
        "{}  {:<8}  agent={} rule={} tool={} user={} args={}{}",
        r.id,
        format!("{:?}", r.status).to_lowercase(),
        r.agent_id,
        r.rule_id,
        r.tool_name,
        r.enduser_id.as_deref().unwrap_or("-"),
        serde_json::to_string(&r.args).unwrap_or_default(),
        r.reason
            .as_deref()
            .map(|x| format!("  ({x})"))
            .unwrap_or_default()
    );
    if let Some(by) = &r.decided_by {
        outln!(
            "    decided by {by}{}",
            r.comment
                .as_deref()
                .map(|c| format!(": {c}"))
                .unwrap_or_default()
        );
    }
}

/// Runs `toolgate review`.
pub fn run(args: ReviewArgs) -> ExitCode {
    let (store, place): (Box<dyn Store>, String) = match open(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let now = chrono::Utc::now();
    let (id, status, who) = match args.action {
        ReviewAction::List { all, json } => {
            let mut collected: Vec<Review> = Vec::new();
            let mut printed = 0usize;
            let listed = store.each_page(!all, &mut |page| {
                if json {
                    collected.extend(page);
                    return true;
                }
                for r in &page {
                    print_review(r);
                }
                printed += page.len();
                // A reader that went away (`| head`) wants no more pages.
                !super::out::closed()
            });
            if let Err(e) = listed {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&collected).unwrap_or_default()
                );
            } else if printed == 0 {
                outln!(
                    "no {}reviews in {}",
                    if all { "" } else { "pending " },
                    place
                );
            }
            return ExitCode::SUCCESS;
        }
        ReviewAction::Approve { id, who } => (id, ReviewStatus::Approved, Some(who)),
        ReviewAction::Deny { id, who } => (id, ReviewStatus::Denied, Some(who)),
        ReviewAction::Expire { id } => (id, ReviewStatus::Expired, None),
    };
    let mut verdict = ReviewVerdict::new(status, now);
    if let Some(who) = who {
        if let Some(by) = who
            .by
            .or_else(|| std::env::var("USER").ok())
            .filter(|b| !b.is_empty())
        {
            verdict = verdict.by(by);
        }
        verdict = verdict.comment(who.comment);
    }
    // The audit store is opened before deciding: a wrong `--audit` decides nothing.
    let audit = match args.audit.as_deref().map(open_audit).transpose() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: --audit: {e}");
            return ExitCode::from(2);
        }
    };
    match store.decide_with(&id, &verdict) {
        Ok(r) => {
            outln!("{}: {}", r.id, status_word(r.status));
            if let Some((runtime, out)) = audit
                && let Err(e) = runtime.block_on(out.decided(&r, now))
            {
                eprintln!(
                    "error: review {} is {}, but its review.decided audit event was not written to {}: {e}",
                    r.id,
                    status_word(r.status),
                    out.place()
                );
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            // Lost to the due expiry this very command recorded: its event is written here
            // (nobody else will).
            if let ReviewError::AlreadyDecided {
                expired_now: Some(r),
                ..
            } = &e
                && let Some((runtime, out)) = audit
                && let Err(e) = runtime.block_on(out.decided(r, r.decided_at.unwrap_or(now)))
            {
                eprintln!(
                    "error: review {} expired, but its review.decided audit event was not written to {}: {e}",
                    r.id,
                    out.place()
                );
            }
            ExitCode::FAILURE
        }
    }
}

/// The audit store `spec` names, with the runtime that writes to it.
fn open_audit(spec: &str) -> Result<(tokio::runtime::Runtime, AuditOut), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let out = runtime.block_on(AuditOut::open(spec))?;
    if let Some(dir) = out.dir() {
        let dir = dir.join("toolgate-console");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok((runtime, out))
}
