//! `--notify URL` and its companions, shared by `replay`, `mcp-proxy` and `console`.

use std::path::PathBuf;

use crate::engine::{NotifyConfig, NotifyFormat};

/// The body of a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NotifyFormatArg {
    /// `{"type","review","consoleUrl"?}`, signed with `X-Toolgate-Signature` (over the
    /// timestamp and the body).
    #[default]
    Json,
    /// A Slack incoming-webhook message.
    Slack,
}

/// Webhooks told of each review raised and decided.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NotifyArgs {
    /// POST each review raised and decided to this URL (repeatable): JSON
    /// `{"type":"review.created"|"review.decided","review":{…},"consoleUrl"?}`, retried with
    /// backoff off the decision path.
    #[arg(long = "notify", value_name = "URL")]
    pub notify: Vec<String>,
    /// A file holding the HMAC key: each POST carries `X-Toolgate-Signature: sha256=<HMAC-SHA256
    /// of "<X-Toolgate-Timestamp>.<body>">` (surrounding whitespace of the file is ignored).
    #[arg(long, value_name = "FILE", requires = "notify")]
    pub notify_secret_file: Option<PathBuf>,
    /// `json` (default) or `slack` (a Slack incoming-webhook text message).
    #[arg(long, value_enum, value_name = "FORMAT", requires = "notify")]
    pub notify_format: Option<NotifyFormatArg>,
    /// The console's URL, linked from each notification.
    #[arg(long, value_name = "URL", requires = "notify")]
    pub console_url: Option<String>,
}

impl NotifyArgs {
    /// The configuration, or `None` without `--notify`. An unreadable or empty secret file,
    /// or a URL that is not http(s), is an error.
    pub fn config(&self) -> Result<Option<NotifyConfig>, String> {
        if self.notify.is_empty() {
            return Ok(None);
        }
        for url in &self.notify {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "--notify {url:?}: expected an http:// or https:// URL"
                ));
            }
        }
        let mut config = NotifyConfig::new(self.notify.clone());
        if let Some(path) = &self.notify_secret_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--notify-secret-file {}: {e}", path.display()))?;
            let key = text.trim();
            if key.is_empty() {
                return Err(format!("--notify-secret-file {}: empty", path.display()));
            }
            config.secret = Some(key.as_bytes().to_vec());
        }
        config.format = match self.notify_format.unwrap_or_default() {
            NotifyFormatArg::Json => NotifyFormat::Json,
            NotifyFormatArg::Slack => NotifyFormat::Slack,
        };
        config.console_url = self.console_url.clone();
        Ok(Some(config))
    }
}
