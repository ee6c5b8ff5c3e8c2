//! The engine's side of the audit trail: one hash chain per run, events handed to the bus.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::EngineInner;
use super::run::{RunContext, RunShared};

/// Per-run audit state (the run's hash chain).
pub(crate) struct RunAudit {}

impl EngineInner {
    pub(crate) fn audit_enabled(&self) -> bool {
        false
    }

    pub(crate) fn audit_for_run(&self, _ctx: &RunContext) -> RunAudit {
        RunAudit {}
    }

    pub(crate) fn emit(
        &self,
        _run: &RunShared,
        _kind: &str,
        _body: Map<String, Value>,
        _at: DateTime<Utc>,
    ) {
    }

    pub(crate) fn emit_with_evaluation(
        &self,
        run: &RunShared,
        kind: &str,
        mut body: Map<String, Value>,
        at: DateTime<Utc>,
        evaluation: Option<Value>,
    ) {
        if let Some(e) = evaluation {
            body.insert("evaluation".into(), e);
        }
        self.emit(run, kind, body, at);
    }

    pub(crate) async fn flush_audit(&self) {}

    pub(crate) async fn evaluate_tool_output(
        &self,
        _run: &RunShared,
        _tool: &str,
        _args: &Value,
        _outcome: &super::run::ToolOutcome,
    ) -> Option<Value> {
        None
    }

    pub(crate) async fn evaluate_run(
        &self,
        _run: &RunShared,
        _final_response: Option<&str>,
    ) -> Option<Value> {
        None
    }
}
