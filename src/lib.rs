//! # toolgate
//!
//! toolgate governs what AI agents do with their tools. An agent framework asks it before every
//! tool call; toolgate decides — from a JSON policy of rules — whether the call is **allowed**,
//! **blocked** or held for **human review** (hitl), and writes an immutable, hash-chained audit
//! trail. Evaluation results ride on those audit events.
//!
//! See the README for a quick start and `docs/` for the policy language, audit trail and evaluation reference.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
pub(crate) mod audit_out;
#[cfg(feature = "console")]
pub(crate) mod console;
pub(crate) mod detect;
pub mod engine;
pub mod eval;
#[cfg(feature = "http")]
pub mod http_front;
pub mod json;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "otel")]
pub mod otel;
pub mod policy;
pub mod state;
pub mod trace;
pub mod whatif;

#[doc(hidden)]
pub mod cli;
