//! Tool usage, statistical and trace comparison evaluators.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::eval::*;

fn crit(name: &str, scale: &str) -> EvaluationCriteria {
    serde_json::from_value(json!({"name": name, "scale": scale})).unwrap()
}

fn call(name: &str, args: Value) -> ToolCallRecord {
    ToolCallRecord {
        name: name.into(),
        args,
        output: None,
        error: None,
    }
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

#[tokio::test]
async fn tool_usage_declarative_checks() {
    let cfg: ToolUsageConfig = serde_json::from_value(json!({"rules": [
        {"criterionName": "Search", "expectedToolName": "search",
         "argumentChecks": [
            {"path": "$.query", "op": "matches", "value": "^[a-z ]+$"},
            {"path": "limit", "op": "lte", "value": 10},
            {"path": "filters.lang", "op": "oneOf", "value": ["en", "de"]},
            {"path": "debug", "op": "notExists"}
         ]},
        {"criterionName": "Email", "expectedToolName": "send_email", "isRequired": false},
        {"criterionName": "Refund", "expectedToolName": "refund"}
    ]}))
    .unwrap();
    let e = ToolUsageEvaluator::new(cfg);
    let criteria = [
        crit("Search", "binary"),
        crit("Email", "pass/fail"),
        crit("Refund", "binary"),
    ];
    let good = EvaluationInput::new("done").with_tool_calls(vec![call(
        "search",
        json!({"query": "rust evals", "limit": 5, "filters": {"lang": "en"}}),
    )]);
    let r = e.evaluate(&good, &criteria).await.unwrap();
    assert_eq!(r[0].score, Score::Bool(true), "{:?}", r[0].reasoning);
    assert_eq!(r[1].score, Score::Bool(true)); // optional, not called
    assert_eq!(r[2].score, Score::Bool(false)); // required, not called
    assert!(
        r[2].reasoning
            .as_ref()
            .unwrap()
            .contains("required tool 'refund' was not called")
    );
    assert_eq!(
        r[0].metadata.as_ref().unwrap()["source"],
        json!("toolCalls")
    );

    // Every call must pass: the second call breaks two checks.
    let bad = EvaluationInput::new("done").with_tool_calls(vec![
        call(
            "search",
            json!({"query": "ok", "limit": 1, "filters": {"lang": "de"}}),
        ),
        call(
            "search",
            json!({"query": "DROP TABLE", "limit": 50, "filters": {"lang": "en"}}),
        ),
    ]);
    let r = e.evaluate(&bad, &criteria[..1]).await.unwrap();
    assert_eq!(r[0].score, Score::Bool(false));
    let meta = r[0].metadata.as_ref().unwrap();
    assert_eq!(meta["callCount"], json!(2));
    let failures = meta["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2);
    assert!(
        failures[0]
            .as_str()
            .unwrap()
            .starts_with("call 2 of 2: argument '$.query'")
    );
}

#[test]
fn argument_check_ops() {
    let args = json!({"a": 1, "s": "hello", "arr": [1, 2], "o": {"k": true}, "n": null});
    let chk = |path: &str, op: CheckOp, value: Option<Value>| {
        ArgumentCheck {
            path: path.into(),
            op,
            value,
        }
        .check(&args)
    };
    assert!(chk("a", CheckOp::Equals, Some(json!(1.0))).is_ok());
    assert!(chk("a", CheckOp::NotEquals, Some(json!(2))).is_ok());
    assert!(chk("s", CheckOp::Contains, Some(json!("ell"))).is_ok());
    assert!(chk("arr", CheckOp::Contains, Some(json!(2))).is_ok());
    assert!(chk("arr", CheckOp::Contains, Some(json!(3))).is_err());
    assert!(chk("a", CheckOp::Gt, Some(json!(0))).is_ok());
    assert!(chk("a", CheckOp::Lt, Some(json!(1))).is_err());
    assert!(chk("a", CheckOp::Gte, Some(json!(1))).is_ok());
    assert!(chk("o.k", CheckOp::Type, Some(json!("boolean"))).is_ok());
    assert!(chk("arr.1", CheckOp::Equals, Some(json!(2))).is_ok());
    assert!(chk("n", CheckOp::Exists, None).is_err()); // null counts as missing
    assert!(chk("missing", CheckOp::NotExists, None).is_ok());
    assert!(chk("$", CheckOp::Type, Some(json!("object"))).is_ok());
    let e = chk("missing", CheckOp::Equals, Some(json!(1))).unwrap_err();
    assert_eq!(e, "argument 'missing' is missing");
    assert!(chk("s", CheckOp::Matches, Some(json!("(bad"))).is_err());
}

#[tokio::test]
async fn tool_usage_closure_check() {
    let rule = ToolUsageRule::new("Pay", "pay").check_fn(|args| {
        match args.get("amount").and_then(Value::as_f64) {
            Some(a) if a > 0.0 && a <= 100.0 => Ok(()),
            other => Err(format!("amount {other:?} out of range")),
        }
    });
    let e = ToolUsageEvaluator::with_rules(vec![rule]);
    let ok = EvaluationInput::new("").with_tool_calls(vec![call("pay", json!({"amount": 20}))]);
    let bad = EvaluationInput::new("").with_tool_calls(vec![call("pay", json!({"amount": 500}))]);
    assert_eq!(
        e.evaluate(&ok, &[crit("Pay", "binary")]).await.unwrap()[0].score,
        Score::Bool(true)
    );
    let r = e.evaluate(&bad, &[crit("Pay", "numeric")]).await.unwrap();
    assert_eq!(r[0].score, Score::Number(0.0));
    assert!(r[0].reasoning.as_ref().unwrap().contains("out of range"));
}

#[tokio::test]
async fn tool_calls_from_message_history_and_context() {
    let history = vec![
        json!({"role": "user", "content": "weather in Paris?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        json!({"role": "tool", "content": "18C"}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool-call", "toolName": "get_time", "args": {"tz": "Europe/Paris"}}]}),
    ];
    let calls = tool_calls_from_messages(&history);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].args, json!({"city": "Paris"}));
    assert_eq!(calls[1].args, json!({"tz": "Europe/Paris"}));

    let e =
        ToolUsageEvaluator::with_rules(vec![ToolUsageRule::new("Weather", "get_weather").check(
            "city",
            CheckOp::Equals,
            Some(json!("Paris")),
        )]);
    let mut input = EvaluationInput::new("18C");
    input.message_history = Some(history);
    let r = e
        .evaluate(&input, &[crit("Weather", "binary")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(true));
    assert_eq!(
        r[0].metadata.as_ref().unwrap()["source"],
        json!("messageHistory")
    );

    let input = EvaluationInput::new("")
        .with_context(json!({"toolCalls": [{"name": "get_weather", "args": {"city": "Rome"}}]}));
    let r = e
        .evaluate(&input, &[crit("Weather", "binary")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(false));
    assert_eq!(r[0].metadata.as_ref().unwrap()["source"], json!("context"));

    // Explicit context source with a non-array: error result.
    let cfg: ToolUsageConfig = serde_json::from_value(json!({
        "toolDataSource": "context", "contextPath": "calls",
        "rules": [{"criterionName": "Weather", "expectedToolName": "get_weather"}]}))
    .unwrap();
    let input = EvaluationInput::new("").with_context(json!({"calls": "nope"}));
    let r = ToolUsageEvaluator::new(cfg)
        .evaluate(&input, &[crit("Weather", "binary")])
        .await
        .unwrap();
    assert!(r[0].error.as_ref().unwrap().contains("context.calls"));
}

#[test]
fn summary_statistics_hand_computed() {
    // values 0.2, 0.4, 0.6, 0.8, 1.0: mean 0.6; sample variance = (0.16+0.04+0+0.04+0.16)/4 = 0.1
    let s = summarize(&[1.0, 0.2, 0.6, 0.4, 0.8], 0.7).unwrap();
    assert_eq!(s.count, 5);
    close(s.mean, 0.6);
    close(s.std_dev, 0.1f64.sqrt());
    close(s.median, 0.6);
    // p5: rank 0.05·4 = 0.2 → 0.2 + 0.2·0.2 = 0.24; p95: rank 3.8 → 0.8 + 0.8·0.2 = 0.96
    close(s.p5, 0.24);
    close(s.p95, 0.96);
    close(s.pass_rate, 0.4); // 0.8 and 1.0
    close(s.min, 0.2);
    close(s.max, 1.0);
    let one = summarize(&[0.5], 0.7).unwrap();
    close(one.std_dev, 0.0);
    assert!(summarize(&[], 0.5).is_none());
}

#[tokio::test]
async fn statistical_evaluator_over_samples() {
    // Inner: max_length 10 on a numeric criterion → 1 or 0 per sample.
    let inner: RuleBasedConfig = serde_json::from_value(json!({"rules": [
        {"criterionName": "Short", "config": {"type": "max_length", "maxLength": 10}}]}))
    .unwrap();
    let stat = StatisticalEvaluator::new(Arc::new(RuleBasedEvaluator::new(inner)), 0.5);
    let criteria = [crit("Short", "numeric")];
    let inputs: Vec<EvaluationInput> = ["short", "also short", "this one is far too long", "ok"]
        .iter()
        .map(|s| EvaluationInput::new(*s))
        .collect();
    let report = stat.evaluate_multiple(&inputs, &criteria).await;
    assert_eq!(report.runs, 4);
    let s = report.criteria["Short"].summary.as_ref().unwrap();
    close(s.mean, 0.75);
    close(s.pass_rate, 0.75);
    // sample std of [0,1,1,1]: mean .75, Σ(x−m)² = .5625 + 3·.0625 = .75, /3 = .25 → .5
    close(s.std_dev, 0.5);
    close(s.median, 1.0);
    close(s.p5, 0.15); // rank 0.15 between 0 and 1
    close(report.overall.as_ref().unwrap().mean, 0.75);

    // As a configured evaluator reading context.samples.
    let cfg = EvaluationRunConfig::from_json(
        r#"{"criteria": [{"name": "Short", "scale": "numeric"}],
            "evaluatorConfigs": [{"type": "statistical", "passThreshold": 0.5, "evaluator":
               {"type": "ruleBased", "rules": [{"criterionName": "Short", "config": {"type": "max_length", "maxLength": 10}}]}}]}"#,
    )
    .unwrap();
    let input = EvaluationInput::new("").with_context(
        json!({"samples": ["short", {"response": "also short"}, "this one is far too long", "ok"]}),
    );
    let r = run_evaluation(input, &cfg).await.unwrap();
    close(r.overall_score.unwrap(), 0.75);
    assert_eq!(r.results[0].evaluator_type, "statistical");
    assert_eq!(
        r.results[0].metadata.as_ref().unwrap()["summary"]["count"],
        json!(4)
    );
    // Without samples the evaluator fails as a whole → runErrors.
    let r = run_evaluation(EvaluationInput::new("x"), &cfg)
        .await
        .unwrap();
    assert_eq!(r.run_errors.len(), 1);
    assert!(r.run_errors[0].error.contains("context.samples"));
}

#[test]
fn trace_dimensions() {
    let reference = vec![
        call("search", json!({"q": "rust"})),
        call("fetch", json!({"url": "a"})),
    ];
    let current = vec![
        call("search", json!({"q": "rust"})),
        call("summarize", json!({})),
        call("fetch", json!({"url": "b"})),
    ];
    close(
        tool_sequence_similarity(&current, &reference),
        1.0 - 1.0 / 3.0,
    );
    close(parameter_agreement(&current, &reference), 0.5);
    close(tool_sequence_similarity(&[], &[]), 1.0);
    close(parameter_agreement(&[], &reference), 0.0);
    close(cost_deviation_score(0.012, 0.010), 0.8);
    close(cost_deviation_score(0.05, 0.010), 0.0);
    close(cost_deviation_score(0.0, 0.0), 1.0);
    // Partial key agreement: {a:1,b:2} vs {a:1,c:3}: keys {a,b,c}, 1 equal → 1/3.
    close(
        parameter_agreement(
            &[call("t", json!({"a": 1, "b": 2}))],
            &[call("t", json!({"a": 1, "c": 3}))],
        ),
        1.0 / 3.0,
    );
}

#[tokio::test]
async fn trace_comparison_hand_computed() {
    // seq 2/3, params 0.5, output 1.0, cost 0.8:
    // 0.3·0.6667 + 0.2·0.5 + 0.35·1 + 0.15·0.8 = 0.2 + 0.1 + 0.35 + 0.12 = 0.77
    let cfg: TraceComparisonConfig = serde_json::from_value(json!({
        "criterionName": "Trace",
        "reference": {
            "toolCalls": [{"name": "search", "args": {"q": "rust"}}, {"name": "fetch", "args": {"url": "a"}}],
            "response": "The answer is 42",
            "costUsd": 0.010
        }
    }))
    .unwrap();
    let e = TraceComparisonEvaluator::new(cfg);
    let mut input = EvaluationInput::new("the  answer is 42").with_tool_calls(vec![
        call("search", json!({"q": "rust"})),
        call("summarize", json!({})),
        call("fetch", json!({"url": "b"})),
    ]);
    input.metadata = Some(json!({"costUsd": 0.012}));
    let r = e
        .evaluate(&input, &[crit("Trace", "numeric")])
        .await
        .unwrap();
    match r[0].score {
        Score::Number(n) => close(n, 0.77),
        ref o => panic!("{o:?}"),
    }
    let meta = r[0].metadata.as_ref().unwrap();
    assert_eq!(meta["passed"], json!(true));
    let r = e
        .evaluate(&input, &[crit("Trace", "pass/fail")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(true));

    // Without a cost the cost dimension is skipped and the weights renormalize:
    // (0.2 + 0.1 + 0.35) / 0.85 = 0.764705…
    input.metadata = None;
    let r = e
        .evaluate(&input, &[crit("Trace", "numeric")])
        .await
        .unwrap();
    match r[0].score {
        Score::Number(n) => close(n, 0.65 / 0.85),
        ref o => panic!("{o:?}"),
    }

    // Reference from groundTruth; custom weights and threshold.
    let cfg: TraceComparisonConfig = serde_json::from_value(json!({
        "criterionName": "Trace", "passThreshold": 0.9,
        "weights": {"toolSequence": 1, "toolParameters": 0, "outputSimilarity": 0, "costDeviation": 0}
    }))
    .unwrap();
    let input = EvaluationInput::new("x")
        .with_ground_truth(json!({"toolCalls": [{"name": "a"}, {"name": "b"}]}))
        .with_tool_calls(vec![call("a", json!({}))]);
    let r = TraceComparisonEvaluator::new(cfg)
        .evaluate(&input, &[crit("Trace", "binary")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(false)); // 0.5 < 0.9
    close(
        r[0].metadata.as_ref().unwrap()["score"].as_f64().unwrap(),
        0.5,
    );
}

/// Records the serialized size of every input it is given; scores 1.
struct SizeRecorder(std::sync::Mutex<Vec<usize>>, std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl Evaluator for SizeRecorder {
    fn evaluator_type(&self) -> &str {
        "sizeRecorder"
    }
    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let size = serde_json::to_string(input).map(|s| s.len()).unwrap_or(0);
        self.0.lock().unwrap().push(size);
        if input.field_value("context.keep").is_ok() {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(criteria
            .iter()
            .map(|c| EvaluationResult::new(&c.name, "sizeRecorder", Score::Number(1.0), "ok"))
            .collect())
    }
}

#[tokio::test]
async fn statistical_samples_do_not_carry_every_other_sample() {
    // Regression (issue 8 finding 7): each sample's input was a copy of the whole input,
    // samples included, so memory grew with n². Now each sample sees the input minus the
    // samples plus its own sample: the sizes the inner evaluator sees add up to about the
    // input's size.
    let recorder = Arc::new(SizeRecorder(
        std::sync::Mutex::new(Vec::new()),
        std::sync::atomic::AtomicBool::new(false),
    ));
    let stat = StatisticalEvaluator::new(recorder.clone(), 0.5);
    let samples: Vec<Value> = (0..300)
        .map(|i| json!({"response": format!("{i}:{}", "x".repeat(1000))}))
        .collect();
    let input = EvaluationInput::new("").with_context(json!({"samples": samples, "keep": 1}));
    let input_size = serde_json::to_string(&input).unwrap().len();
    let results = stat
        .evaluate(&input, &[crit("Any", "numeric")])
        .await
        .unwrap();
    assert_eq!(results[0].metadata.as_ref().unwrap()["runs"], json!(300));
    let seen = recorder.0.lock().unwrap();
    assert_eq!(seen.len(), 300);
    let total: usize = seen.iter().sum();
    assert!(
        total < 2 * input_size,
        "inner evaluator saw {total} bytes for a {input_size}-byte input"
    );
    // The rest of the context is still there.
    assert!(recorder.1.load(std::sync::atomic::Ordering::SeqCst));
}
