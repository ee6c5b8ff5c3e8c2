//! Evaluation of each condition kind, one file per kind, plus the three-valued logic that
//! combines them (`and`, `or`, `not`, with short-circuit).

mod enduser_tag;
mod execution_time;
mod max_calls;
mod metric_window;
mod require_subject;
mod sensitive_data;
mod sequence;
mod signal;
mod time_gate;
mod tool_arg;
mod tool_name;
mod tool_tag;

use futures::future::BoxFuture;

pub(crate) use sensitive_data::{
    DEFAULT_SCAN_LIMIT, Redaction, ScanMode, UNDECIDABLE_NOTE, redact_found, redact_strings,
    redaction,
};

use super::ctx::DecisionCtx;
use crate::policy::{CCond, EffectType};

pub(crate) use super::ctx::Tri;

/// Resolves an unknown leaf by its own `onMissing`: allow → false; block/hitl → true, and the
/// rule takes that effect if it triggers.
pub(crate) fn resolve_missing(
    t: Tri,
    on_missing: Option<EffectType>,
    ctx: &mut DecisionCtx<'_>,
) -> Tri {
    match (t, on_missing) {
        (Tri::Unknown, Some(EffectType::Allow)) => Tri::False,
        (Tri::Unknown, Some(e)) => {
            ctx.effect_override = Some(ctx.effect_override.map_or(e, |o| o.max(e)));
            Tri::True
        }
        (t, _) => t,
    }
}

/// Evaluates a condition that needs no signal.
pub(crate) fn eval_sync(c: &CCond, ctx: &mut DecisionCtx<'_>) -> Tri {
    match c {
        CCond::And(cs) | CCond::Or(cs) => {
            let mut fold = Fold::for_node(c);
            for part in cs {
                if let Some(t) = fold.push(eval_sync(part, ctx)) {
                    return t;
                }
            }
            fold.acc
        }
        CCond::Not(c) => not(eval_sync(c, ctx)),
        CCond::Custom { name, .. } => {
            // Never reached: rules with custom conditions are evaluated by `eval_async`.
            ctx.note_missing(format!("custom {name}: evaluated without a runtime"));
            Tri::Unknown
        }
        CCond::Signal { key, .. } => {
            // Never reached: rules with signals are evaluated by `eval_async`.
            ctx.note_missing(format!("signal {key}: evaluated without a runtime"));
            Tri::Unknown
        }
        leaf => eval_leaf(leaf, ctx),
    }
}

/// Evaluates a condition that may ask signal providers (awaited lazily, short-circuit kept).
pub(crate) fn eval_async<'a, 'c: 'a>(
    c: &'a CCond,
    ctx: &'a mut DecisionCtx<'c>,
) -> BoxFuture<'a, Tri> {
    Box::pin(async move {
        match c {
            CCond::And(cs) | CCond::Or(cs) => {
                let mut fold = Fold::for_node(c);
                for part in cs {
                    if let Some(t) = fold.push(eval_async(part, ctx).await) {
                        return t;
                    }
                }
                fold.acc
            }
            CCond::Not(c) => not(eval_async(c, ctx).await),
            CCond::Custom { name, args } => ctx.custom_value(name, args).await,
            CCond::Signal {
                key,
                args,
                op,
                value,
                on_missing,
            } => {
                let t = signal::eval(key, args, *op, value, ctx).await;
                resolve_missing(t, *on_missing, ctx)
            }
            leaf => eval_leaf(leaf, ctx),
        }
    })
}

/// Three-valued `and` / `or` with short-circuit: a part equal to the node's dominant value
/// (false for `and`, true for `or`) decides at once; otherwise any unknown part makes the
/// result unknown.
struct Fold {
    acc: Tri,
    dominant: Tri,
}

impl Fold {
    fn for_node(c: &CCond) -> Fold {
        if matches!(c, CCond::Or(_)) {
            Fold {
                acc: Tri::False,
                dominant: Tri::True,
            }
        } else {
            Fold {
                acc: Tri::True,
                dominant: Tri::False,
            }
        }
    }

    /// Adds a part's value; returns the node's value when it is decided.
    fn push(&mut self, t: Tri) -> Option<Tri> {
        if t == self.dominant {
            return Some(t);
        }
        if t == Tri::Unknown {
            self.acc = Tri::Unknown;
        }
        None
    }
}

fn not(t: Tri) -> Tri {
    match t {
        Tri::True => Tri::False,
        Tri::False => Tri::True,
        Tri::Unknown => Tri::Unknown,
    }
}

#[inline(always)]
fn eval_leaf(c: &CCond, ctx: &mut DecisionCtx<'_>) -> Tri {
    match c {
        CCond::ToolName(t) => tool_name::eval(t, ctx),
        CCond::ToolTag(op) => tool_tag::eval(op, ctx),
        CCond::ToolArg {
            path,
            test,
            on_missing,
        } => {
            let t = tool_arg::eval(path.as_deref(), test, ctx);
            resolve_missing(t, *on_missing, ctx)
        }
        CCond::EnduserTag(op) => enduser_tag::eval(op, ctx),
        CCond::ExecutionTime {
            scope,
            op,
            ms,
            on_missing,
        } => {
            let t = execution_time::eval(*scope, *op, *ms, ctx);
            resolve_missing(t, *on_missing, ctx)
        }
        CCond::Sequence { must, must_not } => sequence::eval(must, must_not, ctx),
        CCond::MaxCalls { counter, max } => max_calls::eval(*counter, *max, ctx),
        CCond::MetricWindow {
            tracker,
            aggregate,
            op,
            value,
            on_missing,
        } => {
            let t = metric_window::eval(*tracker, *aggregate, *op, *value, ctx);
            resolve_missing(t, *on_missing, ctx)
        }
        CCond::TimeGate {
            tz,
            windows,
            on_missing,
        } => {
            let t = time_gate::eval(tz, windows, ctx);
            resolve_missing(t, *on_missing, ctx)
        }
        CCond::RequireSubject(s) => require_subject::eval(s, ctx),
        CCond::SensitiveData(c) => sensitive_data::eval(c, ctx),
        CCond::Signal { .. }
        | CCond::Custom { .. }
        | CCond::And(_)
        | CCond::Or(_)
        | CCond::Not(_) => eval_sync(c, ctx),
    }
}

/// Resolves a dot path (`a.b.0.c`) in a JSON value: own keys of objects, indexes of arrays.
pub(crate) fn json_path<'v>(
    root: &'v serde_json::Value,
    path: &[String],
) -> Option<&'v serde_json::Value> {
    let mut cur = root;
    for seg in path {
        cur = match cur {
            serde_json::Value::Object(m) => small_get(m, seg)?,
            serde_json::Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Entries up to which a map is searched by a scan (short keys compared without a `memcmp`
/// call, lengths first) instead of the B-tree's ordered search.
const SCAN_MAX: usize = 8;

/// `map.get(key)`: a scan for small maps (most arguments and end-user tags), the ordered
/// search for larger ones.
#[inline]
pub(crate) fn small_get<'m, V>(map: impl SmallMap<'m, V>, key: &str) -> Option<&'m V> {
    map.small_get(key)
}

/// The value of `key` among `entries`, compared byte by byte (no `memcmp` call).
#[inline(always)]
fn scan<'m, V: 'm>(
    mut entries: impl Iterator<Item = (&'m String, &'m V)>,
    key: &str,
) -> Option<&'m V> {
    let k = key.as_bytes();
    entries
        .find(|(e, _)| crate::policy::eq_bytes(e.as_bytes(), k))
        .map(|(_, v)| v)
}

/// A string-keyed map [`small_get`] searches.
pub(crate) trait SmallMap<'m, V: 'm> {
    fn small_get(self, key: &str) -> Option<&'m V>;
}

impl<'m> SmallMap<'m, serde_json::Value> for &'m serde_json::Map<String, serde_json::Value> {
    #[inline]
    fn small_get(self, key: &str) -> Option<&'m serde_json::Value> {
        if self.len() > SCAN_MAX {
            return self.get(key);
        }
        scan(self.iter(), key)
    }
}

impl<'m> SmallMap<'m, String> for &'m std::collections::BTreeMap<String, String> {
    #[inline]
    fn small_get(self, key: &str) -> Option<&'m String> {
        if self.len() > SCAN_MAX {
            return self.get(key);
        }
        scan(self.iter(), key)
    }
}

#[cfg(test)]
mod small_get_tests {
    use super::small_get;
    use std::collections::BTreeMap;

    #[test]
    fn small_get_finds_what_get_finds_in_small_and_large_maps() {
        let keys = [
            "",
            "a",
            "b",
            "ab",
            "kyc",
            "tz",
            "role",
            "rolf",
            "plan",
            "tier",
            "amount",
            "dryRun",
            "restricted",
            "sandboxed",
            "a_long_key_past_16_bytes",
            "é",
        ];
        for n in [0, 1, 3, 8, 9, keys.len()] {
            let tags: BTreeMap<String, String> = keys[..n]
                .iter()
                .map(|k| (k.to_string(), format!("v-{k}")))
                .collect();
            let args: serde_json::Map<String, serde_json::Value> = keys[..n]
                .iter()
                .map(|k| (k.to_string(), serde_json::Value::from(*k)))
                .collect();
            for k in keys
                .iter()
                .chain(&["zz", "rol", "roles", "a_long_key_past_16_bytez"])
            {
                assert_eq!(small_get(&tags, k), tags.get(*k), "{n} tags, {k:?}");
                assert_eq!(small_get(&args, k), args.get(*k), "{n} args, {k:?}");
            }
        }
    }
}
