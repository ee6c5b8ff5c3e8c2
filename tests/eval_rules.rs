//! Rule-based evaluator: every rule kind of seeds 000, 001 and 002, with hand-computed outcomes.

use serde_json::{Value, json};
use toolgate::eval::*;

fn crit(name: &str, scale: &str) -> EvaluationCriteria {
    serde_json::from_value(json!({"name": name, "scale": scale})).unwrap()
}

/// Runs one rule (criterion "R", binary) on an input; returns the result.
async fn rule_on(config: Value, input: EvaluationInput) -> EvaluationResult {
    let cfg: RuleBasedConfig =
        serde_json::from_value(json!({"rules": [{"criterionName": "R", "config": config}]}))
            .unwrap();
    let e = RuleBasedEvaluator::new(cfg);
    let mut r = e.evaluate(&input, &[crit("R", "binary")]).await.unwrap();
    assert_eq!(r.len(), 1);
    r.remove(0)
}

async fn passes(config: Value, response: &str) -> bool {
    let r = rule_on(config, EvaluationInput::new(response)).await;
    assert!(r.error.is_none(), "unexpected error {:?}", r.error);
    match r.score {
        Score::Bool(b) => b,
        other => panic!("expected a boolean, got {other:?}"),
    }
}

#[tokio::test]
async fn length_is_inclusive_and_counts_characters() {
    let cfg = json!({"type": "length", "min": 3, "max": 5});
    assert!(!passes(cfg.clone(), "ab").await);
    assert!(passes(cfg.clone(), "abc").await);
    assert!(passes(cfg.clone(), "abcde").await);
    assert!(!passes(cfg.clone(), "abcdef").await);
    // 5 characters, 15 bytes.
    assert!(!passes(cfg.clone(), "日本語です。").await);
    assert!(passes(cfg, "日本語です").await);
    assert!(passes(json!({"type": "length", "min": 1}), "x").await);
}

#[tokio::test]
async fn regex_flags_and_expected_outcome() {
    assert!(passes(json!({"type": "regex", "pattern": "^hello"}), "hello world").await);
    assert!(!passes(json!({"type": "regex", "pattern": "^hello"}), "Hello world").await);
    assert!(
        passes(
            json!({"type": "regex", "pattern": "^hello", "flags": "i"}),
            "Hello"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "regex", "pattern": "^b$", "flags": "m"}),
            "a\nb\nc"
        )
        .await
    );
    assert!(!passes(json!({"type": "regex", "pattern": "^b$"}), "a\nb\nc").await);
    assert!(
        passes(
            json!({"type": "regex", "pattern": "^\\{.*\\}$", "flags": "s"}),
            "{\n}"
        )
        .await
    );
    assert!(!passes(json!({"type": "regex", "pattern": "^\\{.*\\}$"}), "{\n}").await);
    assert!(
        passes(
            json!({"type": "regex", "pattern": "\\d{3}-\\d{4}", "expectedOutcome": "no_match"}),
            "no phone"
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "regex", "pattern": "\\d{3}-\\d{4}", "expectedOutcome": "no_match"}),
            "555-1234"
        )
        .await
    );
}

#[tokio::test]
async fn invalid_regex_is_an_error_not_a_crash() {
    let r = rule_on(
        json!({"type": "regex", "pattern": "(unclosed"}),
        EvaluationInput::new("x"),
    )
    .await;
    assert!(
        r.error.as_deref().unwrap().contains("invalid regex"),
        "{:?}",
        r.error
    );
    assert_eq!(r.score, Score::Bool(false));
    let r = rule_on(
        json!({"type": "regex", "pattern": "a", "flags": "x"}),
        EvaluationInput::new("a"),
    )
    .await;
    assert!(
        r.error.as_deref().unwrap().contains("flag"),
        "{:?}",
        r.error
    );
    let r = rule_on(
        json!({"type": "regex_match", "pattern": "[z-a]"}),
        EvaluationInput::new("a"),
    )
    .await;
    assert!(r.error.is_some());
}

#[tokio::test]
async fn includes_any_all_none() {
    let kw = json!(["AgentDock", "API key"]);
    let text = "Use your agentdock api key.";
    assert!(
        passes(
            json!({"type": "includes", "keywords": kw, "expectedOutcome": "all"}),
            text
        )
        .await
    );
    assert!(
        !passes(json!({"type": "includes", "keywords": kw, "caseSensitive": true, "expectedOutcome": "all"}), text).await
    );
    assert!(
        passes(json!({"type": "includes", "keywords": ["AgentDock", "nope"], "expectedOutcome": "any"}), text).await
    );
    assert!(
        !passes(
            json!({"type": "includes", "keywords": ["nope"], "expectedOutcome": "any"}),
            text
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "includes", "keywords": ["nope"], "expectedOutcome": "none"}),
            text
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "includes", "keywords": kw, "expectedOutcome": "none"}),
            text
        )
        .await
    );
}

#[tokio::test]
async fn json_parse_and_json_valid() {
    for ty in ["json_parse", "json_valid"] {
        assert!(passes(json!({"type": ty}), r#"{"a": [1, 2]}"#).await);
        assert!(passes(json!({"type": ty}), "42").await);
        assert!(!passes(json!({"type": ty}), "{a: 1}").await);
    }
    // A JSON (non-string) response is evaluated as its compact JSON text.
    let r = rule_on(
        json!({"type": "json_valid"}),
        EvaluationInput::new(json!({"ok": true})),
    )
    .await;
    assert_eq!(r.score, Score::Bool(true));
}

#[tokio::test]
async fn max_tokens_uses_a_real_tokenizer() {
    // cl100k_base: "hello world" = ["hello", " world"] = 2 tokens.
    let (n, tok) = count_tokens("hello world", TokenEncoding::Cl100kBase);
    if cfg!(feature = "tokenizer") {
        assert_eq!((n, tok), (2, "cl100k_base"));
    } else {
        assert_eq!((n, tok), (3, "estimate"));
    }
    // The estimate is ceil(chars / 4): 11 chars → 3.
    assert_eq!(
        count_tokens("hello world", TokenEncoding::Estimate),
        (3, "estimate")
    );
    assert!(
        passes(json!({"type": "max_tokens", "maxTokens": 2}), "hello world").await
            == cfg!(feature = "tokenizer")
    );
    assert!(
        !passes(
            json!({"type": "max_tokens", "max_tokens": 1}),
            "hello world"
        )
        .await
    );
    let r = rule_on(
        json!({"type": "max_tokens", "maxTokens": 10}),
        EvaluationInput::new("hello world"),
    )
    .await;
    let rule = &r.metadata.unwrap()["rules"][0];
    assert_eq!(
        rule["details"]["tokens"],
        json!(if cfg!(feature = "tokenizer") { 2 } else { 3 })
    );
}

#[tokio::test]
async fn seed_001_kinds() {
    assert!(passes(json!({"type": "max_chars", "maxChars": 3}), "abc").await);
    assert!(!passes(json!({"type": "max_chars", "max_chars": 3}), "abcd").await);
    assert!(passes(json!({"type": "non_empty"}), " a ").await);
    assert!(!passes(json!({"type": "non_empty"}), " \n\t ").await);
    // allowed_values: trim defaults to true.
    let av =
        json!({"type": "allowed_values", "allowedValues": ["positive", "negative", "neutral"]});
    assert!(passes(av.clone(), "  neutral\n").await);
    assert!(!passes(av.clone(), "Neutral").await);
    assert!(
        !passes(
            json!({"type": "allowed_values", "allowed_values": ["0", "1"], "trim": false}),
            " 1"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "allowed_values", "allowedValues": ["yes"], "ignoreCase": true}),
            "YES"
        )
        .await
    );
    // contains_any with ignore_case (default false).
    let ca = json!({"type": "contains_any", "keywords": ["用户", "Summary"]});
    assert!(passes(ca.clone(), "这是用户的对话").await);
    assert!(!passes(ca.clone(), "a summary").await);
    assert!(
        passes(
            json!({"type": "contains_any", "keywords": ["Summary"], "ignore_case": true}),
            "a summary"
        )
        .await
    );
    // regex_match with ignore_case.
    assert!(
        passes(
            json!({"type": "regex_match", "pattern": "^[^{]*$"}),
            "plain text"
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "regex_match", "pattern": "^[^{]*$"}),
            "{json}"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "regex_match", "pattern": "^ok$", "ignoreCase": true}),
            "OK"
        )
        .await
    );
    // starts_with / ends_with.
    assert!(
        passes(
            json!({"type": "starts_with", "prefix": "总结："}),
            "总结：用户问了天气。"
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "starts_with", "prefix": "summary:"}),
            "Summary: x"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "starts_with", "prefix": "summary:", "ignoreCase": true}),
            "Summary: x"
        )
        .await
    );
    assert!(passes(json!({"type": "ends_with", "suffix": "。"}), "好的。").await);
    assert!(!passes(json!({"type": "ends_with", "suffix": "."}), "no period").await);
    // action: mark_bad is accepted on the rule config; target: output means the response.
    let r = rule_on(
        json!({"type": "non_empty", "target": "output", "action": "mark_bad"}),
        EvaluationInput::new(""),
    )
    .await;
    assert_eq!(r.score, Score::Bool(false));
    let meta = r.metadata.unwrap();
    assert_eq!(meta["markedBad"], json!(true));
    assert_eq!(meta["rules"][0]["action"], json!("mark_bad"));
}

#[tokio::test]
async fn seed_002_kinds() {
    assert!(
        passes(
            json!({"type": "not_contains", "substrings": ["error", "fail"]}),
            "all good"
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "not_contains", "substrings": ["error", "fail"]}),
            "an error"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "not_contains", "substrings": ["error"]}),
            "an ERROR"
        )
        .await
    );
    assert!(
        !passes(
            json!({"type": "not_contains", "substrings": ["error"], "ignoreCase": true}),
            "an ERROR"
        )
        .await
    );
    assert!(
        passes(
            json!({"type": "contains_any", "substrings": ["hello", "hi"]}),
            "oh hi there"
        )
        .await
    );
    assert!(passes(json!({"type": "max_length", "maxLength": 5}), "12345").await);
    assert!(!passes(json!({"type": "max_length", "max_length": 5}), "123456").await);
}

#[tokio::test]
async fn weighted_rules_per_criterion() {
    // Seed 002 example: contains_any (w 1) passes, not_contains (w 2) fails, max_length (w 0.5)
    // passes → weighted = (1 + 0.5) / 3.5 = 0.428571…
    let cfg: RuleBasedConfig = serde_json::from_value(json!({"rules": [
        {"criterionName": "Q", "id": "greeting", "weight": 1.0, "config": {"type": "contains_any", "substrings": ["hello", "hi", "hey"]}},
        {"criterionName": "Q", "id": "no_errors", "weight": 2.0, "config": {"type": "not_contains", "substrings": ["error", "fail"]}},
        {"criterionName": "Q", "id": "concise", "weight": 0.5, "config": {"type": "max_length", "maxLength": 500}}
    ]}))
    .unwrap();
    let e = RuleBasedEvaluator::new(cfg);
    let input = EvaluationInput::new("hello, there was an error");
    let numeric = e.evaluate(&input, &[crit("Q", "numeric")]).await.unwrap();
    match numeric[0].score {
        Score::Number(n) => assert!((n - 1.5 / 3.5).abs() < 1e-12, "{n}"),
        ref other => panic!("{other:?}"),
    }
    let meta = numeric[0].metadata.as_ref().unwrap();
    assert_eq!(meta["passedCount"], json!(2));
    assert_eq!(meta["ruleCount"], json!(3));
    assert_eq!(meta["rules"][1]["passed"], json!(false));
    assert!(
        numeric[0]
            .reasoning
            .as_ref()
            .unwrap()
            .contains("rule 'no_errors' (not_contains) failed")
    );
    // On a binary scale, any violated rule marks the output bad.
    let binary = e.evaluate(&input, &[crit("Q", "binary")]).await.unwrap();
    assert_eq!(binary[0].score, Score::Bool(false));
    // On likert5: 1 + 4 · 0.428571 = 2.714285…
    let likert = e.evaluate(&input, &[crit("Q", "likert5")]).await.unwrap();
    match likert[0].score {
        Score::Number(n) => assert!((n - (1.0 + 4.0 * 1.5 / 3.5)).abs() < 1e-12),
        ref other => panic!("{other:?}"),
    }
    // Rules of criteria not requested produce nothing.
    assert!(
        e.evaluate(&input, &[crit("Other", "binary")])
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn source_fields() {
    let mut input = EvaluationInput::new("resp")
        .with_prompt("the prompt")
        .with_ground_truth("truth")
        .with_context(
            json!({"extracted": {"title": "Quarterly report"}, "n": 3, "items": ["a", "b"]}),
        );
    input.response = json!({"role": "assistant", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]});
    let check = |field: &str, pattern: &str| json!({"type": "regex_match", "pattern": pattern, "sourceField": field});
    assert!(
        rule_on(check("prompt", "^the prompt$"), input.clone())
            .await
            .score
            == Score::Bool(true)
    );
    assert!(
        rule_on(check("groundTruth", "^truth$"), input.clone())
            .await
            .score
            == Score::Bool(true)
    );
    assert!(
        rule_on(
            check("context.extracted.title", "^Quarterly"),
            input.clone()
        )
        .await
        .score
            == Score::Bool(true)
    );
    assert!(
        rule_on(check("context.items.1", "^b$"), input.clone())
            .await
            .score
            == Score::Bool(true)
    );
    // Agent message responses are read as their text parts.
    assert!(
        rule_on(check("response", "^part one\npart two$"), input.clone())
            .await
            .score
            == Score::Bool(true)
    );
    // Missing field: the rule fails with a reasoning naming the field (not an error).
    let r = rule_on(check("context.missing.deep", "x"), input.clone()).await;
    assert_eq!(r.score, Score::Bool(false));
    assert!(r.error.is_none());
    assert!(
        r.reasoning
            .as_ref()
            .unwrap()
            .contains("'context.missing.deep' is missing"),
        "{:?}",
        r.reasoning
    );
    // Not a string.
    let r = rule_on(check("context.n", "3"), input.clone()).await;
    assert_eq!(r.score, Score::Bool(false));
    assert!(
        r.reasoning
            .as_ref()
            .unwrap()
            .contains("not a string (found number)"),
        "{:?}",
        r.reasoning
    );
    // Prompt absent.
    let r = rule_on(check("prompt", "x"), EvaluationInput::new("r")).await;
    assert!(
        r.reasoning
            .as_ref()
            .unwrap()
            .contains("'prompt' is missing")
    );
}

#[tokio::test]
async fn rule_based_via_run_config() {
    let cfg = EvaluationRunConfig::from_json(
        r#"{"criteria": [{"name": "Format", "description": "", "scale": "pass/fail"}],
            "evaluatorConfigs": [{"type": "ruleBased", "rules": [
              {"criterionName": "Format", "config": {"type": "json_parse"}},
              {"criterionName": "Format", "config": {"type": "length", "max": 10}}]}]}"#,
    )
    .unwrap();
    let r = run_evaluation(EvaluationInput::new("[1,2,3]"), &cfg)
        .await
        .unwrap();
    assert_eq!(r.overall_score, Some(1.0));
    let r = run_evaluation(EvaluationInput::new("[1,2,3,4,5,6]"), &cfg)
        .await
        .unwrap();
    assert_eq!(r.overall_score, Some(0.0));
}

#[tokio::test]
async fn max_tokens_is_linear_and_exact_on_long_text() {
    // Regression (issue 8 finding 8): a long text is counted chunk by chunk. Words are never
    // cut, so the count is exact: "hello world" then " hello world" × 9 999 = 20 000 tokens
    // (cl100k_base: "hello", " world", " hello" are one token each).
    let text = format!("hello world{}", " hello world".repeat(9_999));
    assert!(text.len() > 100_000);
    assert!(token_chunks(&text).all(|c| c.len() <= 4096));
    assert_eq!(token_chunks(&text).collect::<String>(), text);
    if cfg!(feature = "tokenizer") {
        assert_eq!(
            count_tokens(&text, TokenEncoding::Cl100kBase),
            (20_000, "cl100k_base")
        );
    }
}

#[tokio::test]
async fn max_tokens_on_long_unbroken_runs() {
    // Regression (issue 8 finding 8): one unbroken run of 400k characters took the tokenizer
    // 84 s in a release build (quadratic BPE merge of one piece; 1M characters panicked).
    // Now it is cut into pieces of at most 256 bytes: linear, no error.
    let text = "a".repeat(400_000);
    let r = rule_on(
        json!({"type": "max_tokens", "maxTokens": 1000}),
        EvaluationInput::new(text.as_str()),
    )
    .await;
    assert!(r.error.is_none(), "unexpected error {:?}", r.error);
    assert_eq!(r.score, Score::Bool(false));
    let tokens = r.metadata.unwrap()["rules"][0]["details"]["tokens"]
        .as_u64()
        .unwrap();
    assert!(tokens > 1000 && tokens <= 400_000, "{tokens} tokens");
    // A run of whitespace is one piece too.
    let spaces = format!("a{}b", " ".repeat(200_000));
    assert!(token_chunks(&spaces).all(|c| c.len() <= 4096));
    let (n, _) = count_tokens(&spaces, TokenEncoding::O200kBase);
    assert!(n > 2 && n <= 200_002, "{n} tokens");
}

#[tokio::test]
async fn max_tokens_over_the_size_cap_is_an_error_result() {
    let text = "word ".repeat(MAX_TOKEN_TEXT_BYTES / 5 + 1);
    let r = rule_on(
        json!({"type": "max_tokens", "maxTokens": 1000}),
        EvaluationInput::new(text.as_str()),
    )
    .await;
    let err = r.error.expect("an error result");
    assert!(err.contains("too long to count tokens"), "{err}");
    assert!(err.contains(&MAX_TOKEN_TEXT_BYTES.to_string()), "{err}");
}
