//! Signal providers: async functions, registered by key, that rules ask for values.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Map, Value};

/// A signal provider: receives the resolved bindings, returns a JSON value.
///
/// Any `Fn(Map<String, Value>) -> impl Future<Output = Result<Value, String>>` closure is a
/// provider:
///
/// ```
/// use toolgate::engine::SignalProvider;
/// fn takes(_: impl SignalProvider) {}
/// takes(|args: serde_json::Map<String, serde_json::Value>| async move {
///     Ok::<_, String>(serde_json::json!(args.contains_key("userId")))
/// });
/// ```
pub trait SignalProvider: Send + Sync + 'static {
    /// Computes the signal for these arguments. An `Err` is missing data for the rule.
    fn call(
        &self,
        args: Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send>>;
}

impl<F, Fut> SignalProvider for F
where
    F: Fn(Map<String, Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, String>> + Send + 'static,
{
    fn call(
        &self,
        args: Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send>> {
        Box::pin(self(args))
    }
}

/// Registered providers by key; replaced copy-on-write so lookups take no lock.
pub(crate) type SignalRegistry = HashMap<String, Arc<dyn SignalProvider>>;
