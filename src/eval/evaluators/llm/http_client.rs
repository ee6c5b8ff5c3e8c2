//! [`OpenAiCompatibleClient`]: the HTTP client for OpenAI-compatible model endpoints.

use super::*;
use std::time::Duration;

/// A client for OpenAI-compatible `/chat/completions` and `/embeddings` endpoints
/// (OpenAI, Azure-style gateways, vLLM, Ollama, LiteLLM, …). Implements [`JudgeModel`] and
/// [`Embedder`].
///
/// Each attempt has the configured timeout; connection errors, timeouts, HTTP 429 and 5xx
/// are retried `retries` times with a linear backoff; other HTTP errors fail at once; all
/// attempts together end at `deadlineMs`.
#[derive(Debug, Clone)]
pub struct OpenAiCompatibleClient {
    settings: ModelSettings,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl OpenAiCompatibleClient {
    /// Builds a client; the API key is read from the `apiKeyEnv` environment variable.
    pub fn from_settings(settings: &ModelSettings) -> Result<Self, EvalError> {
        let api_key = std::env::var(&settings.api_key_env)
            .ok()
            .filter(|k| !k.is_empty());
        Self::with_api_key(settings, api_key)
    }

    /// Builds a client with an explicit API key (or none).
    pub fn with_api_key(
        settings: &ModelSettings,
        api_key: Option<String>,
    ) -> Result<Self, EvalError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(settings.timeout_ms))
            .build()
            .map_err(|e| EvalError::Model {
                url: settings.base_url.clone(),
                message: format!("building HTTP client: {e}"),
            })?;
        Ok(OpenAiCompatibleClient {
            settings: settings.clone(),
            api_key,
            http,
        })
    }

    fn url(&self, endpoint: &str) -> String {
        format!(
            "{}/{endpoint}",
            self.settings.base_url.trim_end_matches('/')
        )
    }

    /// POSTs `body` to `endpoint` with retries (at most [`MAX_RETRIES`], at least
    /// [`MIN_RETRY_BACKOFF_MS`] apart) within the overall deadline; returns the response
    /// JSON. The limits hold for settings that bypassed config validation too.
    async fn post(&self, endpoint: &str, body: &Value) -> Result<Value, EvalError> {
        let url = self.url(endpoint);
        let retries = self.settings.retries.min(MAX_RETRIES);
        let backoff = self
            .settings
            .retry_backoff_ms
            .clamp(MIN_RETRY_BACKOFF_MS, MAX_MODEL_WAIT_MS);
        let deadline = Duration::from_millis(self.settings.deadline_ms.min(MAX_MODEL_WAIT_MS));
        let mut tried = 0u32;
        let mut last = String::new();
        let attempts = async {
            for attempt in 0..=retries {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(
                        backoff.saturating_mul(u64::from(attempt)),
                    ))
                    .await;
                }
                tried += 1;
                let mut req = self.http.post(&url).json(body);
                if let Some(k) = &self.api_key {
                    req = req.bearer_auth(k);
                }
                match req.send().await {
                    Ok(resp) => {
                        let status = resp.status();
                        if status.is_success() {
                            return Some(
                                resp.json::<Value>()
                                    .await
                                    .map_err(|e| format!("invalid JSON response: {e}")),
                            );
                        }
                        let text = resp.text().await.unwrap_or_default();
                        last = format!("HTTP {status}: {}", truncate(&text, 300));
                        if !(status.as_u16() == 429 || status.is_server_error()) {
                            break;
                        }
                    }
                    Err(e) => last = format!("request error: {e}"),
                }
            }
            None
        };
        let outcome = tokio::time::timeout(deadline, attempts).await;
        let message = match outcome {
            Ok(Some(Ok(v))) => return Ok(v),
            Ok(Some(Err(m))) => m,
            Ok(None) => format!("{last} (after {tried} attempt(s))"),
            Err(_) => format!(
                "no answer within the deadline of {} ms (deadlineMs; {tried} attempt(s){})",
                deadline.as_millis(),
                if last.is_empty() {
                    String::new()
                } else {
                    format!(", last: {last}")
                }
            ),
        };
        Err(EvalError::Model { url, message })
    }
}

#[async_trait]
impl JudgeModel for OpenAiCompatibleClient {
    fn model_name(&self) -> &str {
        &self.settings.model
    }

    async fn complete(&self, system: &str, prompt: &str) -> Result<String, EvalError> {
        let mut body = json!({
            "model": self.settings.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": prompt}
            ]
        });
        if let (Some(t), Some(o)) = (self.settings.temperature, body.as_object_mut()) {
            o.insert("temperature".into(), json!(t));
        }
        let v = self.post("chat/completions", &body).await?;
        v.pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| EvalError::Model {
                url: self.url("chat/completions"),
                message: "response has no choices[0].message.content".into(),
            })
    }
}

#[async_trait]
impl Embedder for OpenAiCompatibleClient {
    fn model_name(&self) -> &str {
        &self.settings.model
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f64>>, EvalError> {
        let body = json!({"model": self.settings.model, "input": texts});
        let v = self.post("embeddings", &body).await?;
        let bad = |m: &str| EvalError::Model {
            url: self.url("embeddings"),
            message: m.to_string(),
        };
        let data = v
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("response has no data array"))?;
        let mut rows: Vec<(u64, Vec<f64>)> = Vec::with_capacity(data.len());
        for (i, d) in data.iter().enumerate() {
            let idx = d.get("index").and_then(Value::as_u64).unwrap_or(i as u64);
            let emb = d
                .get("embedding")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("data item has no embedding array"))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .ok_or_else(|| bad("embedding holds a non-number"))
                })
                .collect::<Result<Vec<f64>, _>>()?;
            rows.push((idx, emb));
        }
        rows.sort_by_key(|r| r.0);
        if rows.len() != texts.len() {
            return Err(bad(&format!(
                "expected {} embeddings, got {}",
                texts.len(),
                rows.len()
            )));
        }
        Ok(rows.into_iter().map(|r| r.1).collect())
    }
}
