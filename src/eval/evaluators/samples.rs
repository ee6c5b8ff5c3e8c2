//! Samples of the statistical evaluator: detached from the input once, then one variant per
//! sample (so memory stays linear in the input).

use serde_json::Value;

use crate::eval::types::EvaluationInput;

/// Takes the non-null JSON value at a field path out of `input` (an object key is removed, an
/// array element or a root becomes `null`), for the roots that hold JSON values; `None` when
/// the path does not lead to one.
pub(super) fn take_field(input: &mut EvaluationInput, path: &str) -> Option<Value> {
    let segments: Vec<&str> = path.split('.').collect();
    let (root, rest) = segments.split_first()?;
    let mut value: &mut Value = match *root {
        "response" | "output" => &mut input.response,
        "groundTruth" => input.ground_truth.as_mut()?,
        "context" => input.context.as_mut()?,
        "metadata" => input.metadata.as_mut()?,
        "agentConfig" => input.agent_config.as_mut()?,
        _ => return None,
    };
    let Some((last, parents)) = rest.split_last() else {
        return Some(value.take()).filter(|v| !v.is_null());
    };
    for seg in parents {
        value = match value {
            Value::Object(m) => m.get_mut(*seg)?,
            Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    let taken = match value {
        Value::Object(m) => m.remove(*last)?,
        Value::Array(a) => a.get_mut(last.parse::<usize>().ok()?)?.take(),
        _ => return None,
    };
    Some(taken).filter(|v| !v.is_null())
}

/// The input `base` with one sample applied: a bare response, or an object with `response`
/// and optional `groundTruth`, `context`, `metadata`, `toolCalls` that replace the base's.
pub(super) fn sample_variant(base: &EvaluationInput, sample: Value) -> EvaluationInput {
    let mut variant = base.clone();
    match sample {
        Value::Object(mut o) if o.contains_key("response") => {
            variant.response = o.remove("response").unwrap_or(Value::Null);
            if let Some(g) = o.remove("groundTruth") {
                variant.ground_truth = Some(g);
            }
            if let Some(c) = o.remove("context") {
                variant.context = Some(c);
            }
            if let Some(m) = o.remove("metadata") {
                variant.metadata = Some(m);
            }
            if let Some(t) = o.remove("toolCalls") {
                variant.tool_calls = serde_json::from_value(t).ok();
            }
        }
        other => variant.response = other,
    }
    variant
}
