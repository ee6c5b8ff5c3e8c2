//! `custom` conditions: host functions registered by name that decide a condition from the
//! condition's `args` and the call's context. Same rules as signal providers: async, run with
//! the signal timeout; an error, a panic, a timeout or no function registered under the name
//! is missing data (the condition's rule's `onMissing` applies).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use super::call::RunContext;

/// What a custom condition is called with besides its `args`.
#[derive(Debug, Clone)]
pub struct CustomContext {
    /// The tool's name.
    pub tool_name: String,
    /// The tool's tags.
    pub tool_tags: Vec<String>,
    /// The call's arguments.
    pub args: Value,
    /// The run (its id, agent and end user).
    pub run: Arc<RunContext>,
}

impl CustomContext {
    /// The context as the object a host language's custom condition receives (the Python and
    /// Node packages pass it on): `{toolName, toolTags, args, runId, agentId, agentTags,
    /// sessionId, enduser}`, `enduser` being `{id, tags}` or `null`.
    pub fn into_json(self) -> Value {
        let run = &self.run;
        let mut m = serde_json::Map::new();
        m.insert("toolName".into(), Value::String(self.tool_name));
        m.insert(
            "toolTags".into(),
            Value::Array(self.tool_tags.into_iter().map(Value::String).collect()),
        );
        m.insert("args".into(), self.args);
        m.insert("runId".into(), Value::String(run.run_id.clone()));
        m.insert("agentId".into(), Value::String(run.agent_id.clone()));
        m.insert(
            "agentTags".into(),
            Value::Array(run.agent_tags.iter().cloned().map(Value::String).collect()),
        );
        m.insert(
            "sessionId".into(),
            run.session_id.clone().map_or(Value::Null, Value::String),
        );
        m.insert(
            "enduser".into(),
            run.enduser.as_ref().map_or(
                Value::Null,
                |u| serde_json::json!({"id": u.id, "tags": u.tags}),
            ),
        );
        Value::Object(m)
    }
}

/// A custom condition: receives the condition's `args` (`null` when absent) and the call's
/// context; returns whether the condition holds, or an error (missing data).
///
/// Any `Fn(Value, CustomContext) -> impl Future<Output = Result<bool, String>>` closure is one:
///
/// ```
/// use toolgate::engine::{CustomCondition, CustomContext};
/// fn takes(_: impl CustomCondition) {}
/// takes(|args: serde_json::Value, ctx: CustomContext| async move {
///     Ok::<_, String>(ctx.tool_name == args["tool"])
/// });
/// ```
pub trait CustomCondition: Send + Sync + 'static {
    /// Decides the condition.
    fn call(
        &self,
        args: Value,
        ctx: CustomContext,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send>>;
}

impl<F, Fut> CustomCondition for F
where
    F: Fn(Value, CustomContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool, String>> + Send + 'static,
{
    fn call(
        &self,
        args: Value,
        ctx: CustomContext,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send>> {
        Box::pin(self(args, ctx))
    }
}

/// Registered custom conditions by name; replaced copy-on-write so lookups take no lock.
pub(crate) type CustomRegistry = HashMap<String, Arc<dyn CustomCondition>>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_context_a_host_language_receives() {
        let mut run = RunContext::new("r1", "bot");
        run.agent_tags = vec!["prod".into()];
        let ctx = CustomContext {
            tool_name: "refund".into(),
            tool_tags: vec!["payments".into()],
            args: json!({"amount": 5}),
            run: Arc::new(run),
        };
        assert_eq!(
            ctx.into_json(),
            json!({"toolName": "refund", "toolTags": ["payments"], "args": {"amount": 5},
                   "runId": "r1", "agentId": "bot", "agentTags": ["prod"], "sessionId": null,
                   "enduser": null})
        );
    }
}
