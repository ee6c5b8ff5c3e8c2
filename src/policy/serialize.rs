//! Policy values back to their JSON form (the inverse of parsing).

use serde::ser::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::types::*;

fn days_json(days: &[chrono::Weekday]) -> Value {
    Value::Array(
        days.iter()
            .map(|d| Value::String(d.to_string().to_lowercase()))
            .collect(),
    )
}

fn strs(v: &[String]) -> Value {
    Value::Array(v.iter().cloned().map(Value::String).collect())
}

fn put_opt<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_string(), v.into());
    }
}

fn mode_str(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
        Mode::Off => "off",
    }
}

impl Policy {
    /// The policy as JSON in the `{"policy": {..}, "rules": [..]}` form.
    pub fn to_json(&self) -> Value {
        let m = &self.meta;
        let mut meta = Map::new();
        meta.insert("name".into(), m.name.clone().into());
        put_opt(&mut meta, "description", m.description.clone());
        meta.insert("mode".into(), mode_str(m.mode).into());
        meta.insert(
            "combine".into(),
            match m.combine {
                Combine::MostSevereWins => "most_severe_wins",
                Combine::PriorityFirst => "priority_first",
            }
            .into(),
        );
        meta.insert(
            "onMissingDefault".into(),
            m.on_missing_default.as_str().into(),
        );
        put_opt(&mut meta, "timezone", m.timezone.clone());
        if !m.redact_detected {
            meta.insert("redactDetected".into(), false.into());
        }
        if !m.enabled {
            meta.insert("enabled".into(), false.into());
        }
        if let Some(a) = &m.agent_selector {
            let mut s = Map::new();
            put_opt(&mut s, "anyOfSlugs", a.any_of_slugs.as_deref().map(strs));
            put_opt(&mut s, "anyOfTags", a.any_of_tags.as_deref().map(strs));
            put_opt(&mut s, "allOfTags", a.all_of_tags.as_deref().map(strs));
            meta.insert("agentSelector".into(), Value::Object(s));
        }
        put_opt(&mut meta, "reviewTtlSeconds", m.review_ttl_seconds);
        put_opt(&mut meta, "onExpire", m.on_expire.map(OnExpire::as_str));
        json!({
            "policy": meta,
            "rules": self.rules.iter().map(Rule::to_json).collect::<Vec<_>>(),
        })
    }
}

impl Rule {
    /// The rule as JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        put_opt(&mut m, "policyId", self.policy_id.clone());
        m.insert("name".into(), self.name.clone().into());
        put_opt(&mut m, "description", self.description.clone());
        m.insert("priority".into(), self.priority.into());
        m.insert("enabled".into(), self.enabled.into());
        let mut sel = Map::new();
        sel.insert("phase".into(), self.selector.phase.as_str().into());
        if let Some(t) = &self.selector.tool {
            let mut tm = Map::new();
            put_opt(&mut tm, "name", t.name.as_deref().map(strs));
            put_opt(&mut tm, "tagsAll", t.tags_all.as_deref().map(strs));
            put_opt(&mut tm, "tagsAny", t.tags_any.as_deref().map(strs));
            sel.insert("tool".into(), tm.into());
        }
        m.insert("selector".into(), sel.into());
        m.insert("condition".into(), self.condition.to_json());
        let mut eff = Map::new();
        eff.insert("type".into(), self.effect.kind.as_str().into());
        put_opt(&mut eff, "reason", self.effect.reason.clone());
        m.insert("effect".into(), eff.into());
        put_opt(&mut m, "onMissing", self.on_missing.map(EffectType::as_str));
        put_opt(&mut m, "mode", self.mode.map(mode_str));
        put_opt(&mut m, "reviewTtlSeconds", self.review_ttl_seconds);
        put_opt(&mut m, "onExpire", self.on_expire.map(OnExpire::as_str));
        m.into()
    }
}

fn string_op_value(op: &StringOp) -> Value {
    match op {
        StringOp::Eq(s)
        | StringOp::Neq(s)
        | StringOp::Contains(s)
        | StringOp::StartsWith(s)
        | StringOp::EndsWith(s)
        | StringOp::Glob(s)
        | StringOp::Regex(s) => Value::String(s.clone()),
        StringOp::In(v) => strs(v),
    }
}

fn seq_json(entries: &[SequenceEntry]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| match e {
                SequenceEntry::Glob(g) => Value::String(g.clone()),
                SequenceEntry::Names(p) => json!({"by": "toolName", "patterns": p}),
                SequenceEntry::Tags { tags, all } => {
                    json!({"by": "toolTag", "tags": strs(tags), "op": if *all { "allOf" } else { "anyOf" }})
                }
            })
            .collect(),
    )
}

fn binding_json(b: &SignalBinding) -> Value {
    match b {
        SignalBinding::EnduserId => json!({"from": "enduserId"}),
        SignalBinding::EnduserTag(t) => json!({"from": "enduserTag", "tag": t}),
        SignalBinding::ToolName => json!({"from": "toolName"}),
        SignalBinding::ToolTag(t) => json!({"from": "toolTag", "tag": t}),
        SignalBinding::ToolArg(p) => json!({"from": "toolArg", "path": p}),
        SignalBinding::Subject {
            subject_type,
            role,
            field,
        } => {
            let mut m = Map::new();
            m.insert("from".into(), "subject".into());
            m.insert("subjectType".into(), subject_type.clone().into());
            put_opt(&mut m, "role", role.clone());
            m.insert(
                "field".into(),
                match field {
                    SubjectField::Id => "id",
                    SubjectField::IdSystem => "idSystem",
                }
                .into(),
            );
            m.into()
        }
        SignalBinding::Const(v) => json!({"from": "const", "value": v}),
    }
}

impl Condition {
    /// The condition as JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), self.kind().into());
        match self {
            Condition::ToolName(op) => {
                m.insert("op".into(), op.op_name().into());
                m.insert("value".into(), string_op_value(op));
            }
            Condition::ToolTag(op) => match op {
                TagOp::Has(t) => {
                    m.insert("op".into(), "has".into());
                    m.insert("tag".into(), t.clone().into());
                }
                TagOp::AnyOf(t) | TagOp::AllOf(t) => {
                    let name = if matches!(op, TagOp::AnyOf(_)) {
                        "anyOf"
                    } else {
                        "allOf"
                    };
                    m.insert("op".into(), name.into());
                    m.insert("tags".into(), strs(t));
                }
            },
            Condition::ToolArg {
                path,
                test,
                on_missing,
            } => {
                put_opt(&mut m, "path", path.clone());
                match test {
                    ArgTest::Exists | ArgTest::NotExists => {
                        let op = if matches!(test, ArgTest::Exists) {
                            "exists"
                        } else {
                            "notExists"
                        };
                        m.insert("op".into(), op.into());
                    }
                    ArgTest::String(op) => {
                        m.insert("type".into(), "string".into());
                        m.insert("op".into(), op.op_name().into());
                        m.insert("value".into(), string_op_value(op));
                    }
                    ArgTest::Number(op, v) => {
                        m.insert("type".into(), "number".into());
                        m.insert("op".into(), op.as_str().into());
                        m.insert("value".into(), json_number(*v));
                    }
                    ArgTest::Boolean(b) => {
                        m.insert("type".into(), "boolean".into());
                        m.insert("op".into(), "eq".into());
                        m.insert("value".into(), (*b).into());
                    }
                }
                put_opt(&mut m, "onMissing", on_missing.map(EffectType::as_str));
            }
            Condition::EnduserTag(op) => match op {
                EnduserTagOp::Has { tag } => {
                    m.insert("op".into(), "has".into());
                    m.insert("tag".into(), tag.clone().into());
                }
                EnduserTagOp::HasValue { tag, value } => {
                    m.insert("op".into(), "hasValue".into());
                    m.insert("tag".into(), tag.clone().into());
                    m.insert("value".into(), value.clone().into());
                }
                EnduserTagOp::HasValueAny { tag, values } => {
                    m.insert("op".into(), "hasValueAny".into());
                    m.insert("tag".into(), tag.clone().into());
                    m.insert("values".into(), strs(values));
                }
            },
            Condition::ExecutionTime {
                scope,
                op,
                ms,
                on_missing,
            } => {
                m.insert(
                    "scope".into(),
                    match scope {
                        TimeScope::Tool => "tool",
                        TimeScope::Total => "total",
                    }
                    .into(),
                );
                m.insert("op".into(), op.as_str().into());
                m.insert("ms".into(), json_number(*ms));
                put_opt(&mut m, "onMissing", on_missing.map(EffectType::as_str));
            }
            Condition::Sequence {
                must_have_called,
                must_not_have_called,
            } => {
                put_opt(
                    &mut m,
                    "mustHaveCalled",
                    must_have_called.as_deref().map(seq_json),
                );
                put_opt(
                    &mut m,
                    "mustNotHaveCalled",
                    must_not_have_called.as_deref().map(seq_json),
                );
            }
            Condition::MaxCalls {
                selector,
                max,
                window_seconds,
                per,
                tag_filter,
            } => {
                m.insert(
                    "selector".into(),
                    match selector {
                        CallSelector::ToolName(p) => json!({"by": "toolName", "patterns": strs(p)}),
                        CallSelector::ToolTag(t) => json!({"by": "toolTag", "tags": strs(t)}),
                    },
                );
                m.insert("max".into(), (*max).into());
                put_opt(&mut m, "windowSeconds", *window_seconds);
                if let Some(t) = tag_filter {
                    m.insert("tagFilter".into(), strs(t));
                }
                put_opt(&mut m, "per", per.map(Scope::as_str));
            }
            Condition::MetricWindow {
                scope,
                metric,
                aggregate,
                window_seconds,
                op,
                value,
                filter,
                on_missing,
            } => {
                m.insert("scope".into(), scope.as_str().into());
                m.insert(
                    "metric".into(),
                    match metric {
                        MetricRef::Inbuilt(k) => json!({"kind": "inbuilt", "key": k.key()}),
                        MetricRef::Custom(k) => json!({"kind": "custom", "key": k}),
                    },
                );
                m.insert("aggregate".into(), aggregate.as_str().into());
                put_opt(&mut m, "windowSeconds", *window_seconds);
                m.insert("op".into(), op.as_str().into());
                m.insert("value".into(), json_number(*value));
                if let Some(f) = filter {
                    let mut fm = Map::new();
                    put_opt(&mut fm, "toolName", f.tool_name.as_deref().map(strs));
                    put_opt(&mut fm, "toolTag", f.tool_tag.as_deref().map(strs));
                    m.insert("filter".into(), fm.into());
                }
                put_opt(&mut m, "onMissing", on_missing.map(EffectType::as_str));
            }
            Condition::TimeGate {
                timezone,
                windows,
                on_missing,
            } => {
                m.insert(
                    "timezone".into(),
                    match timezone {
                        TimezoneSource::EnduserTag { tag, fallback_org } => {
                            let mut t = json!({"source": "enduserTag", "tag": tag});
                            if *fallback_org {
                                t["fallback"] = "org".into();
                            }
                            t
                        }
                        TimezoneSource::Static { tz } => json!({"source": "static", "tz": tz}),
                    },
                );
                m.insert(
                    "windows".into(),
                    Value::Array(
                        windows
                            .iter()
                            .map(|w| {
                                json!({"days": days_json(&w.days), "start": w.start.to_string(), "end": w.end.to_string()})
                            })
                            .collect(),
                    ),
                );
                put_opt(&mut m, "onMissing", on_missing.map(EffectType::as_str));
            }
            Condition::RequireSubject(s) => {
                m.insert("subjectType".into(), s.subject_type.clone().into());
                put_opt(&mut m, "idSystem", s.id_system.clone());
                put_opt(&mut m, "role", s.role.clone());
            }
            Condition::Signal {
                key,
                args,
                op,
                value,
                on_missing,
            } => {
                m.insert("key".into(), key.clone().into());
                m.insert(
                    "args".into(),
                    Value::Object(
                        args.iter()
                            .map(|(k, b)| (k.clone(), binding_json(b)))
                            .collect(),
                    ),
                );
                m.insert("op".into(), op.as_str().into());
                m.insert("value".into(), value.clone());
                put_opt(&mut m, "onMissing", on_missing.map(EffectType::as_str));
            }
            Condition::Custom { name, args } => {
                m.insert("name".into(), name.clone().into());
                if let Some(a) = args {
                    m.insert("args".into(), a.clone());
                }
            }
            Condition::SensitiveData {
                target,
                path,
                all,
                detectors,
                on_missing,
            } => {
                m.insert("target".into(), target.as_str().into());
                if let Some(e) = on_missing {
                    m.insert("onMissing".into(), e.as_str().into());
                }
                put_opt(&mut m, "path", path.clone());
                m.insert("op".into(), if *all { "allOf" } else { "anyOf" }.into());
                let entries = detectors
                    .iter()
                    .map(|d| {
                        let mut e = Map::new();
                        e.insert("detector".into(), d.detector.as_str().into());
                        if let Some(sc) = &d.sub_condition {
                            e.insert(
                                "subCondition".into(),
                                json!({
                                    "check": sc.check.as_str(),
                                    "op": sc.op.as_str(),
                                    "value": match &sc.value {
                                        SubValue::One(s) => Value::from(s.clone()),
                                        SubValue::List(l) => Value::from(l.clone()),
                                    },
                                }),
                            );
                        }
                        Value::Object(e)
                    })
                    .collect();
                m.insert("detectors".into(), Value::Array(entries));
            }
            Condition::And(cs) => {
                m.insert(
                    "all".into(),
                    Value::Array(cs.iter().map(Condition::to_json).collect()),
                );
            }
            Condition::Or(cs) => {
                m.insert(
                    "any".into(),
                    Value::Array(cs.iter().map(Condition::to_json).collect()),
                );
            }
            Condition::Not(c) => {
                m.insert("not".into(), c.to_json());
            }
        }
        m.into()
    }
}

/// A number as JSON: integral values without a fraction.
pub(crate) fn json_number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

macro_rules! serialize_via_json {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.to_json().serialize(s)
            }
        }
    )*};
}
serialize_via_json!(Policy, Rule, Condition);
