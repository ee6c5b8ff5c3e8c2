//! LLM judge and embedding similarity against a local OpenAI-compatible server.
#![cfg(feature = "http")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{Value, json};
use toolgate::eval::*;

#[derive(Default)]
struct Server {
    chat_attempts: AtomicUsize,
    chat_requests: Mutex<Vec<Value>>,
    auth: Mutex<Vec<Option<String>>>,
    fail_next: AtomicUsize,
}

async fn chat(
    State(s): State<Arc<Server>>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    s.chat_attempts.fetch_add(1, Ordering::SeqCst);
    if s.fail_next.load(Ordering::SeqCst) > 0 {
        s.fail_next.fetch_sub(1, Ordering::SeqCst);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "busy"})),
        );
    }
    s.auth.lock().push(
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    );
    let prompt = body["messages"][1]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    s.chat_requests.lock().push(body);
    let content = if prompt.contains("OFFSCALE") {
        r#"{"score": 9, "reasoning": "too high"}"#.to_string()
    } else if prompt.contains("GARBAGE") {
        "I refuse to answer in JSON".to_string()
    } else {
        "Sure!\n```json\n{\"score\": 4, \"reasoning\": \"Accurate and polite.\"}\n```".to_string()
    };
    (
        StatusCode::OK,
        Json(json!({"id": "c1", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})),
    )
}

fn vector_for(text: &str) -> Vec<f64> {
    match text {
        "cat" => vec![1.0, 0.0, 0.0],
        "kitten" => vec![0.8, 0.6, 0.0],
        _ => vec![0.0, 0.0, 1.0],
    }
}

async fn embeddings(Json(body): Json<Value>) -> Json<Value> {
    let data: Vec<Value> = body["input"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .rev() // out of order on purpose: the client sorts by index
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector_for(t.as_str().unwrap_or(""))}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]}))
}

async fn start() -> (String, Arc<Server>) {
    let state = Arc::new(Server::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        // Accepts the request and never answers.
        .route(
            "/hang/v1/chat/completions",
            post(std::future::pending::<StatusCode>),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/v1"), state)
}

fn settings(base: &str, model: &str) -> ModelSettings {
    let mut s = ModelSettings::new(base, model);
    s.retry_backoff_ms = MIN_RETRY_BACKOFF_MS;
    s.api_key_env = "TOOLGATE_TEST_NO_SUCH_KEY_VAR".into();
    s
}

fn crit(name: &str, scale: &str, description: &str) -> EvaluationCriteria {
    serde_json::from_value(json!({"name": name, "scale": scale, "description": description}))
        .unwrap()
}

#[tokio::test]
async fn llm_judge_substitutes_template_and_parses_reply() {
    let (base, server) = start().await;
    let client =
        OpenAiCompatibleClient::with_api_key(&settings(&base, "judge-1"), Some("sk-test".into()))
            .unwrap();
    let judge = LlmJudgeEvaluator::new("Helpfulness", Arc::new(client)).with_template(
        "C={{criterion.name}} D={{ criterion.description }} S={{criterion.scale}} R={{response}} \
         G={{groundTruth}} T={{context.customer.tier}} M={{context.missing}}",
    );
    let input = EvaluationInput::new("Your refund is on its way.")
        .with_ground_truth("Refund issued.")
        .with_context(json!({"customer": {"tier": "gold"}}));
    let criteria = [crit("Helpfulness", "likert5", "Is it helpful?")];
    let r = judge.evaluate(&input, &criteria).await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].score, Score::Number(4.0));
    assert_eq!(r[0].reasoning.as_deref(), Some("Accurate and polite."));
    assert!(r[0].error.is_none());
    let meta = r[0].metadata.as_ref().unwrap();
    assert_eq!(meta["model"], json!("judge-1"));
    assert_eq!(meta["missingPlaceholders"], json!(["context.missing"]));
    let req = server.chat_requests.lock()[0].clone();
    assert_eq!(req["model"], json!("judge-1"));
    assert_eq!(req["messages"][0]["role"], json!("system"));
    assert_eq!(
        req["messages"][1]["content"],
        json!(
            "C=Helpfulness D=Is it helpful? S=likert5 R=Your refund is on its way. G=Refund issued. T=gold M="
        )
    );
    assert_eq!(server.auth.lock()[0].as_deref(), Some("Bearer sk-test"));

    // Through the runner: likert 4 → 0.75.
    let runner = EvaluationRunner::new()
        .with_criteria(criteria.to_vec())
        .with_evaluator(Arc::new(judge));
    let agg = runner.run(input).await.unwrap();
    assert_eq!(agg.overall_score, Some(0.75));
}

#[tokio::test]
async fn llm_judge_errors_and_retries() {
    let (base, server) = start().await;
    let mut s = settings(&base, "judge-1");
    s.retries = 2;
    let judge = LlmJudgeEvaluator::new(
        "Q",
        Arc::new(OpenAiCompatibleClient::from_settings(&s).unwrap()),
    )
    .with_template("{{response}}");
    let criteria = [crit("Q", "likert5", "")];
    // Off-scale score → error result.
    let r = judge
        .evaluate(&EvaluationInput::new("OFFSCALE"), &criteria)
        .await
        .unwrap();
    assert!(
        r[0].error
            .as_ref()
            .unwrap()
            .contains("not on the likert5 scale")
    );
    // Not JSON → error result.
    let r = judge
        .evaluate(&EvaluationInput::new("GARBAGE"), &criteria)
        .await
        .unwrap();
    assert!(r[0].error.as_ref().unwrap().contains("not a JSON object"));
    // Two 503s, then success (2 retries allowed). No key env var → no Authorization header.
    server.fail_next.store(2, Ordering::SeqCst);
    let r = judge
        .evaluate(&EvaluationInput::new("fine"), &criteria)
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Number(4.0));
    assert_eq!(server.auth.lock().last().cloned(), Some(None));
    // Three 503s exhaust the retries → error result naming the URL.
    server.fail_next.store(3, Ordering::SeqCst);
    let r = judge
        .evaluate(&EvaluationInput::new("fine"), &criteria)
        .await
        .unwrap();
    let err = r[0].error.as_ref().unwrap();
    assert!(
        err.contains("/v1/chat/completions") && err.contains("503") && err.contains("3 attempt"),
        "{err}"
    );
}

#[tokio::test]
async fn embedding_similarity_cosine_and_threshold() {
    let (base, _server) = start().await;
    let cfg: EmbeddingSimilarityConfig = serde_json::from_value(json!({
        "criterionName": "Semantic", "threshold": 0.75,
        "model": {"baseUrl": base, "model": "embed-1", "retryBackoffMs": 10}
    }))
    .unwrap();
    let client = OpenAiCompatibleClient::from_settings(&cfg.model).unwrap();
    let e = EmbeddingSimilarityEvaluator::new(cfg, Arc::new(client));
    let input = EvaluationInput::new("cat").with_ground_truth("kitten");
    // cos([1,0,0], [0.8,0.6,0]) = 0.8
    let r = e
        .evaluate(&input, &[crit("Semantic", "numeric", "")])
        .await
        .unwrap();
    match r[0].score {
        Score::Number(n) => assert!((n - 0.8).abs() < 1e-9),
        ref o => panic!("{o:?}"),
    }
    let r = e
        .evaluate(&input, &[crit("Semantic", "binary", "")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(true)); // 0.8 ≥ 0.75
    let far = EvaluationInput::new("cat").with_ground_truth("dog");
    let r = e
        .evaluate(&far, &[crit("Semantic", "binary", "")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(false)); // cos = 0
    assert!(cosine_similarity(&[0.0, 0.0], &[1.0, 0.0]).is_none());
}

#[tokio::test]
async fn model_evaluators_from_config() {
    let (base, _server) = start().await;
    let cfg: EvaluationRunConfig = serde_json::from_value(json!({
        "criteria": [
            {"name": "Judge", "description": "good?", "scale": "likert5"},
            {"name": "Semantic", "description": "close?", "scale": "numeric"},
            {"name": "Short", "description": "short", "scale": "binary"}
        ],
        "evaluatorConfigs": [
            {"type": "llmJudge", "criterionName": "Judge",
             "model": {"baseUrl": base, "model": "judge-1", "apiKeyEnv": "TOOLGATE_TEST_NO_SUCH_KEY_VAR"}},
            {"type": "embeddingSimilarity", "criterionName": "Semantic",
             "model": {"baseUrl": base, "model": "embed-1", "apiKeyEnv": "TOOLGATE_TEST_NO_SUCH_KEY_VAR"}},
            {"type": "ruleBased", "rules": [{"criterionName": "Short", "config": {"type": "max_chars", "maxChars": 10}}]}
        ]
    }))
    .unwrap();
    let (fast, slow) = cfg.split_by_speed();
    assert_eq!(fast.unwrap().evaluator_configs.len(), 1);
    let slow = slow.unwrap();
    assert_eq!(slow.evaluator_configs.len(), 2);
    let input = EvaluationInput::new("cat").with_ground_truth("kitten");
    // (0.75 + 0.8 + 1) / 3 = 0.85
    let r = run_evaluation(input.clone(), &cfg).await.unwrap();
    assert!((r.overall_score.unwrap() - 0.85).abs() < 1e-9, "{:?}", r);
    let r = run_evaluation(input, &slow).await.unwrap();
    assert!((r.overall_score.unwrap() - 0.775).abs() < 1e-9);
}

#[tokio::test]
async fn llm_judge_retry_limits_are_validated_with_their_path() {
    // Regression (issue 8 finding 9): `retries: 4294967295, retryBackoffMs: 0` was accepted
    // and hammered the endpoint forever.
    for (model, path) in [
        (
            json!({"retries": 4294967295u64}),
            "evaluatorConfigs[0].model.retries",
        ),
        (json!({"retries": 11}), "evaluatorConfigs[0].model.retries"),
        (
            json!({"retryBackoffMs": 0}),
            "evaluatorConfigs[0].model.retryBackoffMs",
        ),
        (
            json!({"deadlineMs": 0}),
            "evaluatorConfigs[0].model.deadlineMs",
        ),
        (
            json!({"timeoutMs": 0}),
            "evaluatorConfigs[0].model.timeoutMs",
        ),
    ] {
        let mut m = json!({"baseUrl": "http://127.0.0.1:9/v1", "model": "judge-1"});
        if let (Some(o), Some(extra)) = (m.as_object_mut(), model.as_object()) {
            o.extend(extra.clone());
        }
        let text = json!({
            "criteria": [{"name": "Q", "scale": "likert5"}],
            "evaluatorConfigs": [{"type": "llmJudge", "criterionName": "Q", "model": m}]
        })
        .to_string();
        let err = EvaluationRunConfig::from_json(&text)
            .and_then(|c| c.validate().map(|_| c))
            .expect_err("out-of-range model settings");
        assert!(err.to_string().contains(path), "{model}: {err}");
    }
}

#[tokio::test]
async fn llm_judge_retries_are_capped_and_the_deadline_ends_a_request() {
    let (base, server) = start().await;
    // Settings built in code bypass validation: the client still stops after MAX_RETRIES.
    let mut s = settings(&base, "judge-1");
    s.retries = u32::MAX;
    s.retry_backoff_ms = 0;
    let judge = LlmJudgeEvaluator::new(
        "Q",
        Arc::new(OpenAiCompatibleClient::from_settings(&s).unwrap()),
    )
    .with_template("{{response}}");
    let criteria = [crit("Q", "likert5", "")];
    server.fail_next.store(1_000, Ordering::SeqCst);
    let r = judge
        .evaluate(&EvaluationInput::new("fine"), &criteria)
        .await
        .unwrap();
    let err = r[0].error.as_ref().unwrap();
    assert!(err.contains("11 attempt(s)"), "{err}");
    assert_eq!(
        server.chat_attempts.load(Ordering::SeqCst),
        MAX_RETRIES as usize + 1
    );

    // An endpoint that never answers: the overall deadline ends the request, long before the
    // per-attempt timeout.
    let mut s = settings(&base.replace("/v1", "/hang/v1"), "judge-1");
    s.timeout_ms = 600_000;
    s.deadline_ms = 300;
    let judge = LlmJudgeEvaluator::new(
        "Q",
        Arc::new(OpenAiCompatibleClient::from_settings(&s).unwrap()),
    )
    .with_template("{{response}}");
    let r = judge
        .evaluate(&EvaluationInput::new("fine"), &criteria)
        .await
        .unwrap();
    let err = r[0].error.as_ref().unwrap();
    assert!(err.contains("deadline of 300 ms"), "{err}");
}
