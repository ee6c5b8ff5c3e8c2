//! A [`Decision`]'s canonical JSON (the form audit hashes are computed over), written straight
//! from its fields: members in byte order of their keys, known here, so nothing is buffered or
//! sorted. The result is byte for byte what the generic canonical serializer writes for the
//! derived `Serialize` form (`tests` below hold the two equal).

use super::decision::{Decision, EvaluatedRule, HitlInfo};
use crate::audit::event::canonical::{write_int, write_plain, write_string};
use crate::audit::event::ser::to_canonical;

// Keys are written as literals with their comma and colon (`,"key":`, one copy the compiler
// inlines); every object here starts with a member that is always present, written with its
// opening brace.

fn opt_str(out: &mut String, v: Option<&str>) {
    match v {
        Some(s) => write_string(s, out),
        None => out.push_str("null"),
    }
}

fn bool_text(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

impl EvaluatedRule {
    /// Writes the canonical JSON of this entry (keys: detected, effect, error, missing, ruleId,
    /// shadow, triggered).
    fn write_canonical(&self, out: &mut String) {
        if let Some(detected) = &self.detected {
            out.push_str("{\"detected\":[");
            for (i, d) in detected.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                // A detector's name needs no escape.
                out.push_str("{\"detector\":\"");
                out.push_str(d.detector.as_str());
                out.push_str("\",\"path\":");
                write_string(&d.path, out);
                out.push('}');
            }
            out.push(']');
            if self.detected_more > 0 {
                out.push_str(",\"detectedMore\":");
                write_int(u64::from(self.detected_more), out);
            }
            out.push_str(",\"effect\":\"");
        } else if self.detected_more > 0 {
            out.push_str("{\"detectedMore\":");
            write_int(u64::from(self.detected_more), out);
            out.push_str(",\"effect\":\"");
        } else {
            out.push_str("{\"effect\":\"");
        }
        // An effect's name needs no escape.
        out.push_str(self.effect.as_str());
        out.push('"');
        if let Some(e) = &self.error {
            out.push_str(",\"error\":");
            write_string(e, out);
        }
        if !self.missing.is_empty() {
            out.push_str(",\"missing\":");
            out.push('[');
            for (i, m) in self.missing.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(m, out);
            }
            out.push(']');
        }
        out.push_str(",\"ruleId\":");
        write_string(&self.rule_id, out);
        if self.shadow {
            out.push_str(",\"shadow\":true");
        }
        out.push_str(if self.triggered {
            ",\"triggered\":true}"
        } else {
            ",\"triggered\":false}"
        });
    }
}

impl HitlInfo {
    fn write_canonical(&self, out: &mut String) {
        out.push_str("{\"fingerprint\":");
        write_string(&self.fingerprint, out);
        out.push_str(",\"reviewId\":");
        write_string(&self.review_id, out);
        out.push_str(",\"status\":");
        let status = match self.status {
            super::decision::ReviewStatus::Pending => "\"pending\"",
            super::decision::ReviewStatus::Approved => "\"approved\"",
            super::decision::ReviewStatus::Denied => "\"denied\"",
            super::decision::ReviewStatus::Expired => "\"expired\"",
        };
        out.push_str(status);
        out.push('}');
    }
}

impl Decision {
    /// Appends the canonical JSON of this decision to `out`.
    pub(crate) fn write_canonical(&self, out: &mut String) {
        out.push_str("{\"abortRun\":");
        out.push_str(bool_text(self.abort_run));
        out.push_str(",\"code\":");
        write_plain(self.code.as_str(), out);
        out.push_str(",\"effect\":");
        write_plain(self.effect.as_str(), out);
        if let Some(e) = &self.error {
            out.push_str(",\"error\":");
            write_string(e, out);
        }
        out.push_str(",\"evaluated\":");
        out.push('[');
        for (i, r) in self.evaluated.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            r.write_canonical(out);
        }
        out.push(']');
        if let Some(h) = &self.hitl {
            out.push_str(",\"hitl\":");
            h.write_canonical(out);
        }
        out.push_str(",\"latencyNs\":");
        write_int(self.latency_ns, out);
        out.push_str(",\"phase\":");
        write_plain(self.phase.as_str(), out);
        if let Some(p) = &self.policy_id {
            out.push_str(",\"policyId\":");
            write_string(p, out);
        }
        out.push_str(",\"reason\":");
        opt_str(out, self.reason.as_deref());
        out.push_str(",\"ruleId\":");
        opt_str(out, self.rule_id.as_deref());
        out.push_str(",\"shadow\":");
        out.push_str(bool_text(self.shadow));
        if let Some(e) = self.shadow_effect {
            out.push_str(",\"shadowEffect\":");
            write_plain(e.as_str(), out);
        }
        if !self.signals.is_empty() {
            out.push_str(",\"signals\":");
            // Rare (signal providers in play) and holding arbitrary JSON: the generic writer.
            let at = out.len();
            if to_canonical(&self.signals, out).is_err() {
                out.truncate(at);
                out.push_str("[]");
            }
        }
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::engine::decide::decision::{DecisionCode, Evaluated, ReviewStatus, SignalRecord};
    use crate::policy::{EffectType, Phase};

    fn generic(d: &Decision) -> String {
        let mut s = String::new();
        to_canonical(d, &mut s).expect("canonical");
        s
    }

    fn typed(d: &Decision) -> String {
        let mut s = String::new();
        d.write_canonical(&mut s);
        s
    }

    fn effect(i: u8) -> EffectType {
        match i % 3 {
            0 => EffectType::Allow,
            1 => EffectType::Hitl,
            _ => EffectType::Block,
        }
    }

    #[test]
    fn a_full_decision_is_written_as_the_generic_writer_does() {
        let mut d = Decision::simple(
            Phase::After,
            EffectType::Hitl,
            DecisionCode::BlockedHitlRequested,
            Some(Arc::from("needs \"review\"\n")),
        );
        d.rule_id = Some(Arc::from("r-1"));
        d.policy_id = Some(Arc::from("pol"));
        d.evaluated = Evaluated::from(vec![EvaluatedRule {
            rule_id: Arc::from("r-1"),
            triggered: true,
            effect: EffectType::Hitl,
            shadow: true,
            missing: vec!["signal x: \u{1}".into(), "tz".into()],
            detected: None,
            detected_more: 0,
            error: Some("bad".into()),
        }]);
        d.signals = vec![SignalRecord {
            key: Arc::from("risk"),
            args: json!({"b": 1, "a": [1.5, null]}),
            value: Some(json!(0.25)),
            error: None,
            duration_us: 12,
        }];
        d.hitl = Some(HitlInfo {
            review_id: "rv".into(),
            status: ReviewStatus::Pending,
            fingerprint: "fp".into(),
        });
        d.shadow = true;
        d.shadow_effect = Some(EffectType::Block);
        d.abort_run = true;
        d.latency_ns = u64::MAX;
        d.error = Some("é".into());
        assert_eq!(typed(&d), generic(&d));
        let plain = Decision::simple(
            Phase::Before,
            EffectType::Allow,
            DecisionCode::Allowed,
            None,
        );
        assert_eq!(typed(&plain), generic(&plain));
    }

    proptest! {
        #[test]
        fn any_decision_is_written_as_the_generic_writer_does(
            reason in proptest::option::of(".{0,12}"),
            rule in proptest::option::of("[a-z\"\\\\]{0,6}"),
            rules in proptest::collection::vec(
                ("\\PC{0,8}", any::<bool>(), any::<u8>(), any::<bool>(),
                 proptest::collection::vec(".{0,5}", 0..3), proptest::option::of(".{0,5}")),
                0..5),
            hitl in proptest::option::of((".{0,5}", 0u8..4, "[0-9a-f]{0,8}")),
            flags in (any::<bool>(), any::<bool>(), any::<u64>(), any::<u8>()),
        ) {
            let mut d = Decision::simple(Phase::Before, effect(flags.3), DecisionCode::BlockedRule,
                reason.map(Arc::from));
            d.rule_id = rule.map(Arc::from);
            d.evaluated = rules.into_iter().map(|(id, t, e, s, missing, error)| EvaluatedRule {
                rule_id: Arc::from(id), triggered: t, effect: effect(e), shadow: s, missing, error, detected: None, detected_more: 0,
            }).collect();
            d.hitl = hitl.map(|(id, s, fp)| HitlInfo {
                review_id: id,
                status: [ReviewStatus::Pending, ReviewStatus::Approved, ReviewStatus::Denied,
                         ReviewStatus::Expired][s as usize],
                fingerprint: fp,
            });
            d.shadow = flags.0;
            d.abort_run = flags.1;
            d.latency_ns = flags.2;
            prop_assert_eq!(typed(&d), generic(&d));
        }
    }
}
