//! `toolgate state status|rearm`: the shared state's loss marker, and re-arming a prefix after
//! Redis lost toolgate's state (design §16; docs/operations-redis.md, "Lost state").
use std::process::ExitCode;

use super::state::StateArgs;

/// The long help of `toolgate state`.
pub const LONG_ABOUT: &str = "Inspect or re-arm toolgate's shared state on Redis.\n\n\
When Redis loses toolgate's state (FLUSHALL, a restart without persistence, eviction), the first \
process to notice marks the prefix as lost. From then on no process trusts a count that may have \
been lost: a decision reading a `maxCalls` counter without window, or a counter or metric window \
whose window has not passed since the loss, is a state-store failure (--failure-mode closed: \
BLOCKED_FAILURE; open: allowed), with an `error` audit event each time.\n\n\
`toolgate state status --state URL` prints the prefix's epoch, the loss marker and the re-arm log. \
`toolgate state rearm --state URL --reason TEXT [--by WHO]` removes the marker, so counts are \
trusted again from what Redis holds now (zero for what was lost: only re-arm once the caps' \
budgets may start again), and records who, when, why and which loss in the prefix's re-arm log \
(`<prefix>:rearms`, the 100 newest), also printed as one JSON line.\n\n\
Exit status: 0 on success, 2 when Redis cannot be reached or the arguments are wrong.";

/// Arguments of `toolgate state`.
#[derive(Debug, clap::Args)]
pub struct StateCmdArgs {
    #[command(subcommand)]
    pub action: StateAction,
    #[command(flatten)]
    pub state: StateArgs,
}

/// What `toolgate state` does.
#[derive(Debug, clap::Subcommand)]
pub enum StateAction {
    /// Print the prefix's epoch, loss marker and re-arm log.
    Status,
    /// Trust counts again after a loss of state: removes the loss marker (logged).
    Rearm {
        /// Why (recorded in the re-arm log).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Who re-arms [default: $USER].
        #[arg(long, value_name = "WHO")]
        by: Option<String>,
    },
}

/// Runs `toolgate state`.
pub fn run(args: StateCmdArgs) -> ExitCode {
    #[cfg(feature = "redis")]
    {
        match run_redis(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        }
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = args;
        eprintln!("error: this toolgate was built without the `redis` feature");
        ExitCode::from(2)
    }
}

#[cfg(feature = "redis")]
fn run_redis(args: StateCmdArgs) -> Result<(), String> {
    use crate::state::redis::RedisStateStore;
    let Some(mut config) = args.state.redis()? else {
        return Err("--state redis://HOST:PORT/DB is required".into());
    };
    config.timeout = config.timeout.max(std::time::Duration::from_secs(1));
    let rt = super::runtime().map_err(|e| format!("cannot start runtime: {e}"))?;
    rt.block_on(async move {
        let shown = crate::state::redis::redact_url(&config.url);
        let prefix = config.prefix.clone();
        let store = RedisStateStore::connect(config)
            .await
            .map_err(|e| format!("--state: cannot reach Redis: {e}"))?;
        match args.action {
            StateAction::Status => {
                let lost = store.lost_at().await.map_err(|e| e.to_string())?;
                let log = store.rearm_log().await.map_err(|e| e.to_string())?;
                outln!("state {shown} prefix {prefix}");
                match lost {
                    Some(t) => outln!(
                        "LOST at {} (server time): counts that may have been lost are not \
                         trusted; `toolgate state rearm` after checking the budgets",
                        fmt_ms(t)
                    ),
                    None => outln!("armed: no loss of state is pending"),
                }
                for entry in log {
                    outln!("rearmed: {entry}");
                }
                Ok(())
            }
            StateAction::Rearm { reason, by } => {
                let by = by
                    .or_else(|| std::env::var("USER").ok())
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| "unknown".into());
                let host = std::fs::read_to_string("/etc/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default();
                let entry = serde_json::json!({
                    "at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    "by": by,
                    "host": host,
                    "reason": reason,
                    "prefix": prefix,
                });
                let lost = store.rearm(&entry).await.map_err(|e| e.to_string())?;
                let mut shown_entry = entry;
                shown_entry["lostAt"] = lost.map_or(serde_json::Value::Null, |t| t.into());
                outln!("{shown_entry}");
                if lost.is_none() {
                    eprintln!("note: no loss of state was pending on prefix {prefix}");
                }
                Ok(())
            }
        }
    })
}

#[cfg(feature = "redis")]
fn fmt_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}
