//! What a notification says: the JSON body, or a Slack message.

use serde_json::{Value, json};

use super::{NotifyConfig, NotifyFormat};
use crate::engine::hitl::reviews::{Review, status_word};

/// The kind of a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyKind {
    /// A review was raised.
    Created,
    /// A review was decided.
    Decided,
}

impl NotifyKind {
    /// `review.created` or `review.decided`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Created => "review.created",
            NotifyKind::Decided => "review.decided",
        }
    }
}

/// The JSON body of a notification.
pub fn body(kind: NotifyKind, review: &Review, config: &NotifyConfig) -> Value {
    match config.format {
        NotifyFormat::Json => {
            let mut v = json!({"type": kind.as_str(), "review": review});
            if let Some(u) = &config.console_url {
                v["consoleUrl"] = Value::String(u.clone());
            }
            v
        }
        NotifyFormat::Slack => {
            let what = match kind {
                NotifyKind::Created => "waits for review".to_string(),
                NotifyKind::Decided => format!(
                    "was {} by {}",
                    status_word(review.status),
                    review.decided_by.as_deref().unwrap_or("someone")
                ),
            };
            // Every field from a call (or a reviewer) is escaped: Slack reads `<…>` as a link
            // or a mention (`<!channel>`) and `&` starts an entity.
            let mut text = format!(
                "toolgate: agent `{}` calling `{}` {} (rule `{}`{})",
                slack_escape(&review.agent_id),
                slack_escape(&review.tool_name),
                slack_escape(&what),
                slack_escape(&review.rule_id),
                review
                    .reason
                    .as_deref()
                    .map(|r| format!(": {}", slack_escape(r)))
                    .unwrap_or_default()
            );
            if let Some(c) = &review.comment {
                text.push_str(&format!(" — “{}”", slack_escape(c)));
            }
            if let Some(u) = &config.console_url {
                // The operator's URL: escaped too, and `|` (which ends a link's URL) encoded.
                text.push_str(&format!(
                    " <{}|Open the console>",
                    slack_escape(u).replace('|', "%7C")
                ));
            }
            json!({ "text": text })
        }
    }
}

/// `text` with `&`, `<` and `>` escaped as Slack's message format asks.
pub fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}
