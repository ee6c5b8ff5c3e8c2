//! A run's events as trace lines, the model's side included: an `llm.decision` becomes an
//! `llm.call` (with the messages of the `llm.messages` event right after it, when the trail
//! has them), and each `llm.result` an `llm` line naming its call. A model call the trail
//! shows only by its usage (recorded while no `llm.before` rule was in play) gets an `llm.call`
//! of its own just before its `llm` line, recorded as allowed: so a new budget rule is decided
//! before every model call the run made, and the usage of a call it would block is not counted.

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::event_lines::{
    CallMeta, Events, RunLine, event_line, recorded, resolved_signals, str_field,
};
use crate::audit::{AuditEvent, EventKind};
use crate::trace::TraceLine;

/// A run's lines, read lazily from its events.
pub(super) struct RunLines {
    run_id: String,
    events: Events,
    /// An `llm.call` waiting for the event after it (its messages may follow).
    held: Option<RunLine>,
    /// Lines ready.
    ready: VecDeque<RunLine>,
    /// The last allowed model call whose usage was not seen yet.
    unpaired: Option<String>,
    /// The ids of the run's `llm.decision` events seen so far.
    decided: std::collections::HashSet<String>,
}

impl RunLines {
    pub(super) fn new(run_id: String, events: Events) -> RunLines {
        RunLines {
            run_id,
            events,
            held: None,
            ready: VecDeque::new(),
            unpaired: None,
            decided: Default::default(),
        }
    }

    fn take(&mut self, e: &AuditEvent) {
        let b = e.body();
        let at = e.ts();
        let run = Some(self.run_id.clone());
        match e.kind() {
            EventKind::LlmMessages => {
                if let Some((_, TraceLine::LlmCall { id, messages, .. }, _)) = self.held.as_mut()
                    && str_field(b.get("callId")).as_deref() == Some(id.as_str())
                {
                    *messages = rebuilt_messages(b.get("messages"));
                }
            }
            EventKind::LlmDecision => {
                let Some(id) = str_field(b.get("callId")) else {
                    return;
                };
                let model = str_field(b.get("model")).unwrap_or_default();
                let decision = b.get("decision");
                let allowed = decision
                    .and_then(|d| d.get("effect"))
                    .and_then(Value::as_str)
                    == Some("allow");
                self.unpaired = allowed.then(|| id.clone());
                self.decided.insert(id.clone());
                self.held = Some((
                    at,
                    TraceLine::LlmCall {
                        run_id: run,
                        id,
                        model: model.clone(),
                        // Null: not recorded (an `llm.messages` event after it fills them).
                        messages: Value::Null,
                        at: Some(at),
                    },
                    Some(CallMeta {
                        recorded: recorded(e.agent_id(), &model, at, decision),
                        signals: resolved_signals(decision),
                    }),
                ));
            }
            EventKind::LlmResult => {
                let model = str_field(b.get("model"));
                let named = str_field(b.get("callId")).filter(|id| self.decided.contains(id));
                let id = match named.or_else(|| self.unpaired.take()) {
                    Some(id) => id,
                    None => {
                        // Usage of a call no llm.before decision recorded: it was made.
                        let id = str_field(b.get("callId"))
                            .unwrap_or_else(|| format!("llm@{}", e.seq()));
                        let decision = json!({"effect": "allow", "code": "ALLOWED"});
                        let name = model.clone().unwrap_or_default();
                        self.ready.push_back((
                            at,
                            TraceLine::LlmCall {
                                run_id: run.clone(),
                                id: id.clone(),
                                model: name.clone(),
                                messages: Value::Null,
                                at: Some(at),
                            },
                            Some(CallMeta {
                                recorded: super::Recorded {
                                    usage_only: true,
                                    ..recorded(e.agent_id(), &name, at, Some(&decision))
                                },
                                signals: Default::default(),
                            }),
                        ));
                        id
                    }
                };
                self.ready.push_back((
                    at,
                    TraceLine::Llm {
                        run_id: run,
                        id: Some(id),
                        tokens_in: b.get("tokensIn").and_then(Value::as_u64).unwrap_or(0),
                        tokens_out: b.get("tokensOut").and_then(Value::as_u64).unwrap_or(0),
                        cost_usd: b.get("costUsd").and_then(Value::as_f64),
                        model,
                        duration_ms: b.get("durationMs").and_then(Value::as_f64),
                        at: Some(at),
                    },
                    None,
                ));
            }
            _ => {
                if let Some(line) = event_line(&self.run_id, e) {
                    self.ready.push_back(line);
                }
            }
        }
    }
}

impl Iterator for RunLines {
    type Item = RunLine;

    fn next(&mut self) -> Option<RunLine> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Some(line);
            }
            let Some(e) = self.events.next() else {
                return self.held.take();
            };
            // A held llm.call goes out before whatever follows it (its messages excepted).
            let messages_of_held = e.kind() == EventKind::LlmMessages && self.held.is_some();
            if !messages_of_held && let Some(h) = self.held.take() {
                self.ready.push_back(h);
            }
            self.take(&e);
            if messages_of_held && let Some(h) = self.held.take() {
                self.ready.push_back(h);
            }
        }
    }
}

/// The messages of an `llm.messages` event as a call's messages: `{role, content}` each (the
/// recorded content: cut past its bound, redacted spans as their stand-ins).
fn rebuilt_messages(recorded: Option<&Value>) -> Value {
    let list = recorded
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        list.into_iter()
            .map(|m| {
                json!({
                    "role": m.get("role").cloned().unwrap_or(Value::Null),
                    "content": m.get("content").cloned().unwrap_or(Value::Null),
                })
            })
            .collect(),
    )
}
