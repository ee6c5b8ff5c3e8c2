//! Serializable audit configuration: which sinks, and what to redact.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    AuditError, AuditSink, ConsoleFormat, ConsoleSink, FileSink, FileSinkConfig, RedactionConfig,
};

/// One sink, as configured (`{"type": "file" | "console" | "http", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SinkConfig {
    /// A [`FileSink`].
    File(FileSinkConfig),
    /// A [`ConsoleSink`] on stdout.
    Console {
        /// `pretty` (default) or `json`.
        #[serde(default)]
        format: ConsoleFormat,
    },
    /// An [`super::HttpSink`].
    #[cfg(feature = "http")]
    Http(super::HttpSinkConfig),
}

/// Audit configuration: sinks and redaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditConfig {
    /// The sinks. Empty means the default: a [`FileSink`] writing `./toolgate-audit/<date>.jsonl`.
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
    /// What to redact from event bodies before sealing.
    #[serde(default)]
    pub redaction: RedactionConfig,
    /// Sign runs with this Ed25519 private key file (PKCS#8 PEM, see `toolgate keygen`):
    /// `run.ended` and periodic `checkpoint` events carry `signature` and `keyId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<std::path::PathBuf>,
}

impl AuditConfig {
    /// Builds the configured sinks (the default file sink when none is configured). An HTTP
    /// sink needs a tokio runtime.
    pub fn build_sinks(&self) -> Result<Vec<Arc<dyn AuditSink>>, AuditError> {
        if self.sinks.is_empty() {
            return Ok(vec![Arc::new(FileSink::new(FileSinkConfig::default())?)]);
        }
        self.sinks
            .iter()
            .map(|s| -> Result<Arc<dyn AuditSink>, AuditError> {
                Ok(match s {
                    SinkConfig::File(c) => Arc::new(FileSink::new(c.clone())?),
                    SinkConfig::Console { format } => Arc::new(ConsoleSink::stdout(*format)),
                    #[cfg(feature = "http")]
                    SinkConfig::Http(c) => Arc::new(super::HttpSink::new(c.clone())?),
                })
            })
            .collect()
    }
}
