//! The `sensitiveData` condition.

use super::*;

/// At most this many detector entries in one condition.
const MAX_DETECTORS: usize = 32;

impl Parser {
    pub(super) fn sensitive_data(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a sensitiveData condition",
            &["kind", "target", "path", "op", "detectors", "onMissing"],
        )?;
        let target = self.req_enum(
            &o,
            "target",
            &[
                ("toolArg", SensitiveTarget::ToolArg),
                ("toolOutput", SensitiveTarget::ToolOutput),
                ("llmInput", SensitiveTarget::LlmInput),
            ],
        );
        if target == Some(SensitiveTarget::ToolOutput) && self.phase == Some(Phase::Before) {
            self.err(
                join(&o.path, "target"),
                "\"toolOutput\" scans the tool's result: only in a rule whose selector.phase \
                 is \"tool.after\"",
            );
        }
        if target == Some(SensitiveTarget::LlmInput)
            && matches!(self.phase, Some(Phase::Before | Phase::After))
        {
            self.err(
                join(&o.path, "target"),
                "\"llmInput\" scans the messages sent to a model: only in a rule whose \
                 selector.phase is \"llm.before\"",
            );
        }
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let arg_path = match o.map.get("path") {
            None => Some(None),
            Some(_) => self.dot_path(&o, "path").map(Some),
        };
        let all = self.opt_enum(&o, "op", &[("anyOf", false), ("allOf", true)]);
        let detectors = self.detectors(&o);
        Some(Condition::SensitiveData {
            target: target?,
            on_missing: on_missing?,
            path: arg_path?,
            all: all?.unwrap_or(false),
            detectors: detectors?,
        })
    }

    fn detectors(&mut self, o: &Obj<'_>) -> Option<Vec<DetectorEntry>> {
        let v = self.req(o, "detectors")?;
        let lp = join(&o.path, "detectors");
        let Value::Array(items) = v else {
            self.err(
                lp,
                format!(
                    "expected an array of detector entries, found {}",
                    type_name(v)
                ),
            );
            return None;
        };
        if items.is_empty() {
            self.err(lp, "must not be empty: list at least one detector");
            return None;
        }
        if items.len() > MAX_DETECTORS {
            self.err(lp, format!("at most {MAX_DETECTORS} detectors"));
            return None;
        }
        let names: Vec<(&str, Detector)> = Detector::ALL.iter().map(|d| (d.as_str(), *d)).collect();
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = idx(&lp, i);
            let Some(eo) = self.obj(item, &ip, "a detector entry", &["detector", "subCondition"])
            else {
                ok = false;
                continue;
            };
            let Some(detector) = self.req_enum(&eo, "detector", &names) else {
                ok = false;
                continue;
            };
            let sub = match eo.map.get("subCondition") {
                None => Some(None),
                Some(s) => self
                    .sub_condition(s, &join(&ip, "subCondition"), detector)
                    .map(Some),
            };
            match sub {
                Some(sub_condition) => out.push(DetectorEntry {
                    detector,
                    sub_condition,
                }),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn sub_condition(&mut self, v: &Value, path: &str, detector: Detector) -> Option<SubCondition> {
        let o = self.obj(v, path, "a subCondition", &["check", "op", "value"])?;
        let check = self.req_enum(
            &o,
            "check",
            &[
                ("domain", SubCheck::Domain),
                ("tld", SubCheck::Tld),
                ("scheme", SubCheck::Scheme),
            ],
        )?;
        let allowed = detector.checks();
        if !allowed.contains(&check) {
            let msg = if allowed.is_empty() {
                format!(
                    "detector \"{detector}\" takes no subCondition (only \"email_domain\" and \"url\" do)"
                )
            } else {
                format!(
                    "detector \"{detector}\" checks {}, not \"{}\"",
                    allowed
                        .iter()
                        .map(|c| format!("\"{}\"", c.as_str()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    check.as_str()
                )
            };
            self.err(join(path, "check"), msg);
            return None;
        }
        let op = if check == SubCheck::Domain {
            self.req_enum(
                &o,
                "op",
                &[
                    ("eq", SubOp::Eq),
                    ("neq", SubOp::Neq),
                    ("endsWith", SubOp::EndsWith),
                    ("in", SubOp::In),
                ],
            )
        } else {
            self.req_enum(
                &o,
                "op",
                &[("eq", SubOp::Eq), ("neq", SubOp::Neq), ("in", SubOp::In)],
            )
        }?;
        let vp = join(path, "value");
        let raw = self.req(&o, "value")?;
        let value = match raw {
            Value::String(s) if op == SubOp::In => {
                self.err(
                    vp,
                    format!("operator \"in\" needs a non-empty list of strings, found the string \"{s}\""),
                );
                return None;
            }
            Value::String(s) => SubValue::One(s.clone()),
            _ => SubValue::List(self.str_list(raw, &vp, false)?),
        };
        let values = value.values();
        if values.is_empty() {
            self.err(vp, "must not be empty");
            return None;
        }
        if let Some(i) = values.iter().position(String::is_empty) {
            let p = if matches!(value, SubValue::One(_)) {
                vp
            } else {
                idx(&vp, i)
            };
            self.err(p, "must not be empty");
            return None;
        }
        Some(SubCondition { check, op, value })
    }
}
