//! `toolArg`: tests an argument at a dot path. Absent, or of another type: missing data.
use serde_json::Value;

use super::{Tri, json_path};
use crate::engine::evaluate::DecisionCtx;
use crate::policy::CArgTest;

pub(crate) fn eval(path: &[String], test: &CArgTest, ctx: &mut DecisionCtx<'_>) -> Tri {
    let v = json_path(ctx.call.args, path);
    let r = match (test, v) {
        (CArgTest::Str(t), Some(Value::String(s))) => Some(t.matches(s)),
        (CArgTest::Num(op, n), Some(Value::Number(x))) => x.as_f64().map(|x| op.apply(x, *n)),
        (CArgTest::Bool(b), Some(Value::Bool(x))) => Some(x == b),
        _ => None,
    };
    match r {
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
