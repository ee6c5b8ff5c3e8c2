//! [`ConsoleSink`]: one line per event, for people (`pretty`) or machines (`json`).

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::audit::{AuditError, AuditEvent, AuditSink, EventKind};

/// Output format of a [`ConsoleSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsoleFormat {
    /// One short human-readable line per event.
    #[default]
    Pretty,
    /// The event's canonical JSON, one per line (JSONL).
    Json,
}

/// Writes events to stdout (or any writer), one line each.
pub struct ConsoleSink {
    format: ConsoleFormat,
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for ConsoleSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSink")
            .field("format", &self.format)
            .finish()
    }
}

impl ConsoleSink {
    /// A sink writing to stdout.
    pub fn stdout(format: ConsoleFormat) -> ConsoleSink {
        ConsoleSink::with_writer(format, Box::new(std::io::stdout()))
    }
    /// A sink writing to stderr.
    pub fn stderr(format: ConsoleFormat) -> ConsoleSink {
        ConsoleSink::with_writer(format, Box::new(std::io::stderr()))
    }
    /// A sink writing to `out`.
    pub fn with_writer(format: ConsoleFormat, out: Box<dyn Write + Send>) -> ConsoleSink {
        ConsoleSink {
            format,
            out: Mutex::new(out),
        }
    }

    /// The line a `pretty` sink prints for `event` (without the newline).
    pub fn pretty_line(event: &AuditEvent) -> String {
        let b = event.body();
        let s = |v: Option<&Value>| -> String {
            match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            }
        };
        let tool = s(b.get("tool").and_then(|t| t.get("name")));
        let call = s(b.get("callId"));
        let detail = match event.kind() {
            EventKind::RunStarted => format!(
                "agent={}{}",
                event.agent_id(),
                event
                    .enduser_id()
                    .map(|u| format!(" enduser={u}"))
                    .unwrap_or_default()
            ),
            EventKind::ToolDecision => {
                let d = b.get("decision");
                let get = |k: &str| s(d.and_then(|d| d.get(k)));
                let mut line = format!(
                    "{} {tool} call={call} -> {} {}",
                    s(b.get("phase")),
                    get("effect"),
                    get("code")
                );
                let rule = get("ruleId");
                if !rule.is_empty() {
                    line.push_str(&format!(" rule={rule}"));
                }
                let shadow = get("shadowEffect");
                if !shadow.is_empty() {
                    line.push_str(&format!(" shadow={shadow}"));
                }
                let reason = get("reason");
                if !reason.is_empty() {
                    line.push_str(&format!(" \"{reason}\""));
                }
                line
            }
            EventKind::ToolResult => {
                let outcome = match b.get("error") {
                    Some(Value::Null) | None => "ok".to_string(),
                    Some(e) => format!("error: {}", s(Some(e))),
                };
                format!("{tool} call={call} {outcome} {}ms", s(b.get("durationMs")))
            }
            EventKind::LlmResult => format!(
                "{} tokensIn={} tokensOut={} costUsd={}",
                s(b.get("model")),
                s(b.get("tokensIn")),
                s(b.get("tokensOut")),
                s(b.get("costUsd"))
            ),
            EventKind::LlmDecision => {
                let d = b.get("decision");
                let get = |k: &str| s(d.and_then(|d| d.get(k)));
                let mut line = format!(
                    "llm.before {} call={call} -> {} {}",
                    s(b.get("model")),
                    get("effect"),
                    get("code")
                );
                let rule = get("ruleId");
                if !rule.is_empty() {
                    line.push_str(&format!(" rule={rule}"));
                }
                line
            }
            EventKind::LlmMessages => format!(
                "{} call={call} messages={}",
                s(b.get("model")),
                b.get("messages")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            EventKind::RunEnded => format!(
                "status={} totals={}",
                s(b.get("status")),
                s(b.get("totals"))
            ),
            EventKind::Error => {
                let mut line = s(b.get("message"));
                if !call.is_empty() {
                    line.push_str(&format!(" call={call}"));
                }
                line
            }
            EventKind::EvaluationResult => format!(
                "for {} {}",
                s(b.get("forEventKind")),
                s(b.get("forEventId"))
            ),
            EventKind::Checkpoint => format!("signed by {}", s(b.get("keyId"))),
            EventKind::ToolChanged => format!("{tool} call={call} {}", s(b.get("sha256"))),
            EventKind::ReviewDecided => format!(
                "review={} {} by {}",
                s(b.get("reviewId")),
                s(b.get("status")),
                s(b.get("decidedBy"))
            ),
        };
        format!(
            "{} {}#{} {:<17} {}",
            event
                .ts()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            event.run_id(),
            event.seq(),
            event.kind().as_str(),
            detail.trim_end()
        )
    }
}

#[async_trait]
impl AuditSink for ConsoleSink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        let mut text = String::new();
        for e in events {
            match self.format {
                ConsoleFormat::Pretty => text.push_str(&ConsoleSink::pretty_line(e)),
                ConsoleFormat::Json => text.push_str(&e.to_canonical_json()),
            }
            text.push('\n');
        }
        let mut out = self.out.lock();
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|e| AuditError::Sink(format!("console: {e}")))
    }
    async fn flush(&self) -> Result<(), AuditError> {
        self.out
            .lock()
            .flush()
            .map_err(|e| AuditError::Sink(format!("console: {e}")))
    }
}
