//! `signal`: asks a registered provider, with a timeout, and compares its value.
use serde_json::{Map, Value};

use super::{Tri, json_path};
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::{CBinding, SignalOp, SignalValue, SubjectField};

pub(crate) async fn eval(
    key: &std::sync::Arc<str>,
    bindings: &[(String, CBinding)],
    op: SignalOp,
    expected: &SignalValue,
    ctx: &mut DecisionCtx<'_>,
) -> Tri {
    let mut args = Map::new();
    for (name, b) in bindings {
        match resolve(b, ctx) {
            Some(v) => {
                args.insert(name.clone(), v);
            }
            None => {
                ctx.note_missing(format!(
                    "signal {key}: binding \"{name}\" resolved to nothing"
                ));
                return Tri::Unknown;
            }
        }
    }
    match ctx.signal_value(key, args).await {
        Some(v) => compare(&v, op, expected).into(),
        None => Tri::Unknown,
    }
}

fn resolve(b: &CBinding, ctx: &DecisionCtx<'_>) -> Option<Value> {
    let user = ctx.run.context.enduser.as_ref();
    match b {
        CBinding::EnduserId => user.map(|u| Value::String(u.id.clone())),
        CBinding::EnduserTag(t) => user
            .and_then(|u| u.tags.get(t))
            .map(|v| Value::String(v.clone())),
        CBinding::ToolName => Some(Value::String(ctx.call.name.to_string())),
        CBinding::ToolTag(t) => Some(Value::Bool(ctx.call.tags_lc.contains(t))),
        CBinding::ToolArg(p) => json_path(ctx.call.args, p).cloned(),
        CBinding::Subject {
            subject_type,
            role,
            field,
        } => ctx
            .subjects
            .iter()
            .find(|s| {
                &s.subject_type == subject_type
                    && role.as_ref().is_none_or(|r| s.role.as_ref() == Some(r))
            })
            .and_then(|s| match field {
                SubjectField::Id => Some(Value::String(s.value.clone())),
                SubjectField::IdSystem => s.id_system.clone().map(Value::String),
            }),
        CBinding::Const(v) => Some(v.clone()),
    }
}

/// JSON equality with numbers compared by value.
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn compare(actual: &Value, op: SignalOp, expected: &SignalValue) -> bool {
    // A string `value` is compared as a string when the result is a string; otherwise it is
    // read as JSON (the seed's older form).
    let exp = match (&expected.raw, actual) {
        (Value::String(_), Value::String(_)) if !matches!(op, SignalOp::In | SignalOp::Nin) => {
            &expected.raw
        }
        (Value::String(_), _) => expected.parsed.as_ref().unwrap_or(&expected.raw),
        _ => &expected.raw,
    };
    let num = |v: &Value| v.as_f64();
    match op {
        SignalOp::Eq => json_eq(actual, exp),
        SignalOp::Neq => !json_eq(actual, exp),
        SignalOp::Gt | SignalOp::Gte | SignalOp::Lt | SignalOp::Lte => {
            match (num(actual), num(exp)) {
                (Some(a), Some(e)) => match op {
                    SignalOp::Gt => a > e,
                    SignalOp::Gte => a >= e,
                    SignalOp::Lt => a < e,
                    _ => a <= e,
                },
                _ => false,
            }
        }
        SignalOp::In | SignalOp::Nin => {
            let list = match exp {
                Value::Array(a) => Some(a),
                _ => expected.parsed.as_ref().and_then(Value::as_array),
            };
            let found = list.is_some_and(|l| l.iter().any(|x| json_eq(actual, x)));
            if op == SignalOp::In { found } else { !found }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sv(v: Value) -> SignalValue {
        let parsed = v.as_str().and_then(|s| serde_json::from_str(s).ok());
        SignalValue { raw: v, parsed }
    }

    #[test]
    fn comparisons() {
        assert!(compare(&json!(1), SignalOp::Eq, &sv(json!(1.0))));
        assert!(compare(&json!(true), SignalOp::Eq, &sv(json!("true"))));
        assert!(compare(&json!("true"), SignalOp::Eq, &sv(json!("true"))));
        assert!(compare(
            &json!("EU"),
            SignalOp::In,
            &sv(json!("[\"EU\",\"UK\"]"))
        ));
        assert!(compare(
            &json!("US"),
            SignalOp::Nin,
            &sv(json!(["EU", "UK"]))
        ));
        assert!(!compare(&json!("5"), SignalOp::Gt, &sv(json!(1))));
        assert!(compare(&json!(5), SignalOp::Gte, &sv(json!("5"))));
        assert!(compare(
            &json!({"a": [1, 2]}),
            SignalOp::Eq,
            &sv(json!({"a": [1.0, 2]}))
        ));
    }
}
