//! `toolArg`: tests an argument at a dot path (absent, or of another type: missing data), or
//! without a path every leaf of the test's type (true when one satisfies it; none: false);
//! `exists` / `notExists` test the path's presence (never missing data).
use serde_json::Value;

use super::{Tri, json_path};
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::CArgTest;

/// Deepest nesting scan mode looks into.
const MAX_DEPTH: usize = 128;

pub(crate) fn eval(path: Option<&[String]>, test: &CArgTest, ctx: &mut DecisionCtx<'_>) -> Tri {
    let Some(path) = path else {
        return any_leaf(ctx.call.args, test, 0).into();
    };
    let v = json_path(ctx.call.args, path);
    if let CArgTest::Exists(want) = test {
        return (v.is_some() == *want).into();
    }
    match v.and_then(|v| test_value(test, v)) {
        Some(b) => b.into(),
        None => {
            let what = match v {
                None => "absent",
                Some(_) => "of another type",
            };
            ctx.note_missing(format!("toolArg {}: {what}", path.join(".")));
            Tri::Unknown
        }
    }
}

/// The test on one value: `None` when the value is of another type.
#[inline(always)]
fn test_value(test: &CArgTest, v: &Value) -> Option<bool> {
    match (test, v) {
        (CArgTest::Str(t), Value::String(s)) => Some(t.matches(s)),
        (CArgTest::Num(op, n), Value::Number(x)) => x.as_f64().map(|x| op.apply(x, *n)),
        (CArgTest::Bool(b), Value::Bool(x)) => Some(x == b),
        _ => None,
    }
}

fn any_leaf(v: &Value, test: &CArgTest, depth: usize) -> bool {
    match v {
        Value::Array(a) if depth < MAX_DEPTH => a.iter().any(|x| any_leaf(x, test, depth + 1)),
        Value::Object(m) if depth < MAX_DEPTH => m.values().any(|x| any_leaf(x, test, depth + 1)),
        leaf => test_value(test, leaf) == Some(true),
    }
}
