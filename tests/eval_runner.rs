//! Runner, normalization, aggregation, storage and config validation.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use toolgate::eval::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Returns fixed scores for named criteria.
struct Fixed(Vec<(&'static str, Score)>);

#[async_trait]
impl Evaluator for Fixed {
    fn evaluator_type(&self) -> &str {
        "fixed"
    }
    async fn evaluate(
        &self,
        _input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        Ok(self
            .0
            .iter()
            .filter(|(n, _)| criteria.iter().any(|c| c.name == *n))
            .map(|(n, s)| EvaluationResult::new(*n, "fixed", s.clone(), "fixed"))
            .collect())
    }
}

struct Failing;

#[async_trait]
impl Evaluator for Failing {
    fn evaluator_type(&self) -> &str {
        "failing"
    }
    async fn evaluate(
        &self,
        _: &EvaluationInput,
        _: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        Err(EvalError::evaluator("failing", "backend unavailable"))
    }
}

struct Panicking;

#[async_trait]
impl Evaluator for Panicking {
    fn evaluator_type(&self) -> &str {
        "panicking"
    }
    async fn evaluate(
        &self,
        _: &EvaluationInput,
        _: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        panic!("boom")
    }
}

fn c(name: &str, scale: EvaluationScale, w: Option<f64>) -> EvaluationCriteria {
    EvaluationCriteria {
        name: name.into(),
        description: String::new(),
        scale,
        weight: w,
    }
}

#[test]
fn normalization_rules() {
    use EvaluationScale::*;
    let n = |s: Score, scale: EvaluationScale| normalize_score(&s, &scale);
    // binary and pass/fail
    assert_eq!(n(Score::Bool(true), Binary), Some(1.0));
    assert_eq!(n(Score::Bool(false), PassFail), Some(0.0));
    assert_eq!(n(Score::Number(1.0), Binary), Some(1.0));
    assert_eq!(n(Score::Number(0.0), PassFail), Some(0.0));
    assert_eq!(n(Score::Number(0.5), Binary), None);
    for (word, v) in [
        ("TRUE", 1.0),
        ("false", 0.0),
        ("Pass", 1.0),
        ("FAIL", 0.0),
        (" yes ", 1.0),
        ("No", 0.0),
        ("1", 1.0),
    ] {
        assert_eq!(n(Score::Text(word.into()), Binary), Some(v), "{word}");
        assert_eq!(n(Score::Text(word.into()), PassFail), Some(v), "{word}");
    }
    assert_eq!(n(Score::Text("maybe".into()), Binary), None);
    // likert5: (x-1)/4
    assert_eq!(n(Score::Number(1.0), Likert5), Some(0.0));
    assert_eq!(n(Score::Number(4.0), Likert5), Some(0.75));
    assert_eq!(n(Score::Number(5.0), Likert5), Some(1.0));
    assert_eq!(n(Score::Text("3".into()), Likert5), Some(0.5));
    assert_eq!(n(Score::Number(0.0), Likert5), None);
    assert_eq!(n(Score::Number(6.0), Likert5), None);
    assert_eq!(n(Score::Bool(true), Likert5), None);
    // numeric
    assert_eq!(n(Score::Number(0.42), Numeric), Some(0.42));
    assert_eq!(n(Score::Number(1.0), Numeric), Some(1.0));
    assert_eq!(n(Score::Number(85.0), Numeric), Some(0.85));
    assert_eq!(n(Score::Number(100.0), Numeric), Some(1.0));
    assert_eq!(n(Score::Number(100.5), Numeric), None);
    assert_eq!(n(Score::Number(-0.1), Numeric), None);
    assert_eq!(n(Score::Number(f64::NAN), Numeric), None);
    assert_eq!(n(Score::Bool(true), Numeric), None);
    // custom
    let custom = || Custom("tone".into());
    assert_eq!(n(Score::Text("positive".into()), custom()), None);
    assert_eq!(n(Score::Text("pass".into()), custom()), Some(1.0));
    assert_eq!(n(Score::Bool(false), custom()), Some(0.0));
    assert_eq!(n(Score::Number(50.0), custom()), Some(0.5));
}

#[test]
fn scale_serde() {
    let s: Vec<EvaluationScale> = serde_json::from_value(json!([
        "binary",
        "likert5",
        "numeric",
        "pass/fail",
        "stars"
    ]))
    .unwrap();
    assert_eq!(
        s,
        vec![
            EvaluationScale::Binary,
            EvaluationScale::Likert5,
            EvaluationScale::Numeric,
            EvaluationScale::PassFail,
            EvaluationScale::Custom("stars".into())
        ]
    );
    assert_eq!(serde_json::to_value(&s).unwrap()[3], json!("pass/fail"));
}

#[tokio::test]
async fn weighted_overall_score_example() {
    // Quality numeric w1 = 85 → 0.85; Safety binary w2 = true → 1; Clarity pass/fail w1 = "fail" → 0.
    // (1·0.85 + 2·1 + 1·0) / (1 + 2 + 1) = 2.85 / 4 = 0.7125
    let criteria = vec![
        c("Quality", EvaluationScale::Numeric, Some(1.0)),
        c("Safety", EvaluationScale::Binary, Some(2.0)),
        c("Clarity", EvaluationScale::PassFail, None),
    ];
    let runner = EvaluationRunner::new()
        .with_criteria(criteria)
        .with_evaluator(Arc::new(Fixed(vec![
            ("Quality", Score::Number(85.0)),
            ("Safety", Score::Bool(true)),
            ("Clarity", Score::Text("fail".into())),
        ])));
    let r = runner.run(EvaluationInput::new("x")).await.unwrap();
    assert!(
        close(r.overall_score.unwrap(), 0.7125),
        "{:?}",
        r.overall_score
    );
    let norm: Vec<Option<f64>> = r.results.iter().map(|x| x.normalized_score).collect();
    assert_eq!(norm, vec![Some(0.85), Some(1.0), Some(0.0)]);
    assert_eq!(
        r.evaluation_config_snapshot.criteria_names,
        vec!["Quality", "Safety", "Clarity"]
    );
    assert_eq!(r.evaluation_config_snapshot.storage_provider_type, "none");
    // Serialized camelCase with the PRD field names.
    let v = serde_json::to_value(&r).unwrap();
    for key in [
        "overallScore",
        "results",
        "timestamp",
        "inputSnapshot",
        "evaluationConfigSnapshot",
        "runErrors",
        "durationMs",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["results"][0]["criterionName"], "Quality");
    assert_eq!(v["results"][0]["evaluatorType"], "fixed");
    let back: AggregatedEvaluationResult = serde_json::from_value(v).unwrap();
    assert_eq!(back.overall_score, r.overall_score);
}

#[tokio::test]
async fn left_out_results_and_edge_cases() {
    let criteria = vec![
        c("A", EvaluationScale::Likert5, Some(3.0)),
        c("B", EvaluationScale::Numeric, Some(1.0)),
        c("C", EvaluationScale::Custom("category".into()), Some(1.0)),
    ];
    // B = 250 does not normalize; C = "positive" does not normalize; A = 4 → 0.75.
    let runner = EvaluationRunner::new()
        .with_criteria(criteria.clone())
        .with_evaluator(Arc::new(Fixed(vec![
            ("A", Score::Number(4.0)),
            ("B", Score::Number(250.0)),
            ("C", Score::Text("positive".into())),
        ])));
    let r = runner.run(EvaluationInput::new("x")).await.unwrap();
    assert_eq!(r.overall_score, Some(0.75));

    // Results with error are left out.
    let mut results = vec![
        EvaluationResult::new("A", "t", 5.0, "ok"),
        EvaluationResult::failed("B", "t", "broken"),
    ];
    results[1].score = Score::Number(0.0);
    assert_eq!(aggregate(&mut results, &criteria), Some(1.0));
    assert_eq!(results[1].normalized_score, None);

    // Nothing left → null.
    let runner = EvaluationRunner::new()
        .with_criteria(criteria.clone())
        .with_evaluator(Arc::new(Fixed(vec![("C", Score::Text("meh".into()))])));
    let r = runner.run(EvaluationInput::new("x")).await.unwrap();
    assert_eq!(r.overall_score, None);
    assert_eq!(
        serde_json::to_value(&r).unwrap()["overallScore"],
        json!(null)
    );

    // All weights 0 → 0.
    let zero = vec![c("A", EvaluationScale::Binary, Some(0.0))];
    let mut results = vec![EvaluationResult::new("A", "t", true, "ok")];
    assert_eq!(aggregate(&mut results, &zero), Some(0.0));

    // A result for an unknown criterion is left out.
    let mut results = vec![EvaluationResult::new("Z", "t", true, "ok")];
    assert_eq!(aggregate(&mut results, &zero), None);
}

#[tokio::test]
async fn failing_evaluators_are_recorded_and_others_kept() {
    let criteria = vec![c("Q", EvaluationScale::Binary, None)];
    let runner = EvaluationRunner::new()
        .with_criteria(criteria)
        .with_evaluator(Arc::new(Failing))
        .with_evaluator(Arc::new(Fixed(vec![("Q", Score::Bool(true))])))
        .with_evaluator(Arc::new(Panicking));
    let r = runner.run(EvaluationInput::new("x")).await.unwrap();
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.overall_score, Some(1.0));
    assert_eq!(r.run_errors.len(), 2);
    assert_eq!(r.run_errors[0].kind, RunErrorKind::Evaluator);
    assert_eq!(r.run_errors[0].source, "failing");
    assert_eq!(r.run_errors[0].evaluator_index, Some(0));
    assert!(r.run_errors[0].error.contains("backend unavailable"));
    assert_eq!(r.run_errors[1].source, "panicking");
    assert!(r.run_errors[1].error.contains("boom"));
    assert_eq!(
        r.evaluation_config_snapshot.evaluator_types,
        vec!["failing", "fixed", "panicking"]
    );
}

#[tokio::test]
async fn input_criteria_override_config_criteria() {
    let runner = EvaluationRunner::new()
        .with_criteria(vec![c("Q", EvaluationScale::Binary, None)])
        .with_evaluator(Arc::new(Fixed(vec![
            ("Q", Score::Bool(false)),
            ("R", Score::Bool(true)),
        ])));
    let input =
        EvaluationInput::new("x").with_criteria(vec![c("R", EvaluationScale::Binary, None)]);
    let r = runner.run(input).await.unwrap();
    assert_eq!(r.overall_score, Some(1.0));
    assert_eq!(r.input_snapshot.criteria[0].name, "R");
    // The effective criteria are recorded in the input snapshot.
    let r = runner.run(EvaluationInput::new("x")).await.unwrap();
    assert_eq!(r.input_snapshot.criteria[0].name, "Q");
    assert_eq!(r.overall_score, Some(0.0));
    // Invalid input criteria are an error naming the entry.
    let bad =
        EvaluationInput::new("x").with_criteria(vec![c("R", EvaluationScale::Binary, Some(-1.0))]);
    let e = runner.run(bad).await.unwrap_err().to_string();
    assert!(e.contains("input.criteria[0].weight"), "{e}");
}

#[tokio::test]
async fn jsonl_storage_appends_and_storage_failure_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/results.jsonl");
    let config = EvaluationRunConfig::from_json(&format!(
        r#"{{"criteria": [{{"name": "Short", "scale": "binary"}}],
            "evaluatorConfigs": [{{"type": "ruleBased", "rules": [{{"criterionName": "Short", "config": {{"type": "max_chars", "maxChars": 5}}}}]}}],
            "storage": {{"type": "jsonlFile", "path": {:?}}}}}"#,
        path.to_str().unwrap()
    ))
    .unwrap();
    let r1 = run_evaluation(EvaluationInput::new("abc"), &config)
        .await
        .unwrap();
    let r2 = run_evaluation(EvaluationInput::new("abcdef"), &config)
        .await
        .unwrap();
    assert_eq!(r1.overall_score, Some(1.0));
    assert_eq!(r2.overall_score, Some(0.0));
    assert_eq!(
        r1.evaluation_config_snapshot.storage_provider_type,
        "jsonlFile"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<AggregatedEvaluationResult> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1].input_snapshot.response, json!("abcdef"));

    // A directory as the target file: saving fails, the run does not.
    let config = EvaluationRunConfig {
        storage: Some(StorageConfig::JsonlFile {
            path: dir.path().to_path_buf(),
        }),
        ..config
    };
    let r = run_evaluation(EvaluationInput::new("abc"), &config)
        .await
        .unwrap();
    assert_eq!(r.overall_score, Some(1.0));
    assert_eq!(r.run_errors.len(), 1);
    assert_eq!(r.run_errors[0].kind, RunErrorKind::Storage);
    assert_eq!(r.run_errors[0].source, "jsonlFile");
}

#[tokio::test]
async fn memory_storage_and_metadata() {
    let store = Arc::new(MemoryStorage::new());
    let mut meta = serde_json::Map::new();
    meta.insert("suite".into(), json!("ci"));
    let runner = EvaluationRunner::new()
        .with_criteria(vec![c("Q", EvaluationScale::Binary, None)])
        .with_evaluator(Arc::new(Fixed(vec![("Q", Score::Bool(true))])))
        .with_storage(store.clone())
        .with_metadata(meta);
    let mut input = EvaluationInput::new("x");
    input.agent_id = Some("agent-1".into());
    input.session_id = Some("s-1".into());
    let r = runner.run(input).await.unwrap();
    assert_eq!(r.agent_id.as_deref(), Some("agent-1"));
    assert_eq!(r.session_id.as_deref(), Some("s-1"));
    assert_eq!(r.evaluation_config_snapshot.metadata_keys, vec!["suite"]);
    assert_eq!(r.evaluation_config_snapshot.storage_provider_type, "memory");
    assert_eq!(store.results().len(), 1);
}

fn config_err(v: serde_json::Value) -> String {
    let cfg: EvaluationRunConfig = serde_json::from_value(v).unwrap();
    cfg.validate().unwrap_err().to_string()
}

#[test]
fn validation_names_the_bad_entry() {
    let e = config_err(json!({
        "criteria": [{"name": "A", "scale": "binary"}],
        "evaluatorConfigs": [
            {"type": "toxicity", "criterionName": "A", "toxicTerms": ["x"]},
            {"type": "ruleBased", "rules": [
                {"criterionName": "A", "config": {"type": "length", "max": 3}},
                {"criterionName": "A", "config": {"type": "regex", "pattern": "(unclosed"}}
            ]}
        ]
    }));
    assert!(
        e.contains("evaluatorConfigs[1].rules[1].config.pattern"),
        "{e}"
    );

    let e = config_err(json!({
        "criteria": [{"name": "A", "scale": "binary"}],
        "evaluatorConfigs": [{"type": "sentiment", "criterionName": "B"}]
    }));
    assert!(e.contains("evaluatorConfigs[0].criterionName"), "{e}");
    assert!(e.contains("\"B\""), "{e}");

    let e = config_err(json!({
        "criteria": [{"name": "A", "scale": "binary"}, {"name": "A", "scale": "numeric"}]
    }));
    assert!(e.contains("criteria[1].name"), "{e}");

    let e = config_err(json!({
        "evaluatorConfigs": [{"type": "lexicalSimilarity", "criterionName": "A", "threshold": 1.5}]
    }));
    assert!(e.contains("evaluatorConfigs[0].threshold"), "{e}");

    let e = config_err(json!({
        "evaluatorConfigs": [{"type": "keywordCoverage", "criterionName": "A", "keywordsSourceField": "nowhere.x"}]
    }));
    assert!(e.contains("keywordsSourceField"), "{e}");

    let e = config_err(json!({
        "evaluatorConfigs": [{"type": "toolUsage", "rules": [
            {"criterionName": "A", "expectedToolName": "t", "argumentChecks": [{"path": "a", "op": "equals"}]}]}]
    }));
    assert!(
        e.contains("evaluatorConfigs[0].rules[0].argumentChecks[0].value"),
        "{e}"
    );

    let e = config_err(json!({
        "evaluatorConfigs": [{"type": "llmJudge", "criterionName": "A", "model": {"baseUrl": "ftp://x", "model": "m"}}]
    }));
    assert!(e.contains("evaluatorConfigs[0].model.baseUrl"), "{e}");
}

#[test]
fn unknown_fields_and_types_are_rejected() {
    let bad_field = serde_json::from_value::<EvaluationRunConfig>(json!({
        "evaluatorConfigs": [{"type": "ruleBased", "rules": [
            {"criterionName": "A", "config": {"type": "length", "minimum": 3}}]}]
    }));
    assert!(bad_field.unwrap_err().to_string().contains("minimum"));
    let bad_type = serde_json::from_value::<EvaluationRunConfig>(json!({
        "evaluatorConfigs": [{"type": "magic"}]
    }));
    assert!(bad_type.is_err());
    let bad_top = serde_json::from_value::<EvaluationRunConfig>(json!({"criterias": []}));
    assert!(bad_top.is_err());
    let bad_eval_field = serde_json::from_value::<EvaluationRunConfig>(json!({
        "evaluatorConfigs": [{"type": "sentiment", "criterionName": "A", "outputTyp": "category"}]
    }));
    assert!(bad_eval_field.is_err());
}

#[test]
fn config_tags_aliases_and_split_by_speed() {
    let cfg: EvaluationRunConfig = serde_json::from_value(json!({
        "criteria": [{"name": "A", "description": "a", "scale": "numeric", "weight": 2}],
        "evaluatorConfigs": [
            {"type": "RuleBased", "rules": [{"criterionName": "A", "config": {"type": "json_valid"}}]},
            {"type": "LLMJudge", "criterionName": "A", "model": {"baseUrl": "http://127.0.0.1:1/v1", "model": "m"}},
            {"type": "sentiment", "criterionName": "A"},
            {"type": "NLPAccuracy", "criterionName": "A", "model": {"baseUrl": "http://127.0.0.1:1/v1", "model": "e"}},
            {"type": "statistical", "passThreshold": 0.5, "evaluator":
                {"type": "embeddingSimilarity", "criterionName": "A", "model": {"baseUrl": "http://127.0.0.1:1/v1", "model": "e"}}}
        ],
        "storage": {"type": "jsonlFile", "path": "x.jsonl"}
    }))
    .unwrap();
    cfg.validate().unwrap();
    let types: Vec<&str> = cfg
        .evaluator_configs
        .iter()
        .map(|e| e.type_name())
        .collect();
    assert_eq!(
        types,
        vec![
            "ruleBased",
            "llmJudge",
            "sentiment",
            "embeddingSimilarity",
            "statistical"
        ]
    );
    let (fast, slow) = cfg.split_by_speed();
    let fast = fast.unwrap();
    let slow = slow.unwrap();
    assert_eq!(fast.evaluator_configs.len(), 2);
    assert_eq!(slow.evaluator_configs.len(), 3);
    assert_eq!(fast.criteria, cfg.criteria);
    assert_eq!(slow.storage, cfg.storage);
    // Serializes with camelCase tags and round-trips.
    let v = serde_json::to_value(&cfg).unwrap();
    assert_eq!(v["evaluatorConfigs"][0]["type"], "ruleBased");
    assert_eq!(v["evaluatorConfigs"][1]["type"], "llmJudge");
    let back: EvaluationRunConfig = serde_json::from_value(v).unwrap();
    assert_eq!(back.evaluator_configs.len(), 5);

    let only_fast = EvaluationRunConfig {
        evaluator_configs: vec![cfg.evaluator_configs[0].clone()],
        ..Default::default()
    };
    let (f, s) = only_fast.split_by_speed();
    assert!(f.is_some() && s.is_none());
}
