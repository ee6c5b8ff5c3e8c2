//! Lexical suite: similarity, keyword coverage, sentiment (AFINN-165) and toxicity.

use serde_json::{Value, json};
use toolgate::eval::*;

fn crit(name: &str, scale: &str) -> EvaluationCriteria {
    serde_json::from_value(json!({"name": name, "scale": scale})).unwrap()
}

fn num(s: &Score) -> f64 {
    match s {
        Score::Number(n) => *n,
        other => panic!("expected a number, got {other:?}"),
    }
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-4, "{a} != {b}");
}

async fn similarity_score(
    cfg: Value,
    response: &str,
    truth: &str,
    scale: &str,
) -> EvaluationResult {
    let e = LexicalSimilarityEvaluator::new(serde_json::from_value(cfg).unwrap());
    let input = EvaluationInput::new(response).with_ground_truth(truth);
    e.evaluate(&input, &[crit("S", scale)])
        .await
        .unwrap()
        .remove(0)
}

#[test]
fn similarity_functions() {
    // night {ni,ig,gh,ht} vs nacht {na,ac,ch,ht}: 1 shared → 2/8.
    close(sorensen_dice("night", "nacht"), 0.25);
    close(sorensen_dice("", ""), 1.0);
    close(sorensen_dice("a", "b"), 0.0);
    // aa a {aa,a ,a?}: "aaa" {aa,aa} vs "aa" {aa}: 2·1/3.
    close(sorensen_dice("aaa", "aa"), 2.0 / 3.0);
    // kitten → sitting: distance 3, max length 7.
    close(levenshtein_similarity("kitten", "sitting"), 1.0 - 3.0 / 7.0);
    close(levenshtein_similarity("", ""), 1.0);
    close(
        similarity(SimilarityAlgorithm::JaroWinkler, "MARTHA", "MARHTA"),
        0.961_111,
    );
}

#[tokio::test]
async fn lexical_similarity_evaluator() {
    let r = similarity_score(json!({"criterionName": "S"}), "Night", "NACHT", "numeric").await;
    close(num(&r.score), 0.25);
    assert_eq!(r.metadata.unwrap()["algorithm"], json!("sorensen-dice"));
    let r = similarity_score(
        json!({"criterionName": "S", "caseSensitive": true}),
        "Night",
        "NACHT",
        "numeric",
    )
    .await;
    close(num(&r.score), 0.0);
    // Whitespace normalization (default on) makes these equal.
    let r = similarity_score(
        json!({"criterionName": "S", "algorithm": "levenshtein"}),
        "  a   b ",
        "a b",
        "numeric",
    )
    .await;
    close(num(&r.score), 1.0);
    let r = similarity_score(
        json!({"criterionName": "S", "algorithm": "levenshtein", "normalizeWhitespace": false}),
        "a  b",
        "a b",
        "numeric",
    )
    .await;
    close(num(&r.score), 0.75);
    let r = similarity_score(
        json!({"criterionName": "S", "algorithm": "jaro-winkler"}),
        "martha",
        "marhta",
        "numeric",
    )
    .await;
    close(num(&r.score), 0.961_111);
    // Binary scale: threshold (default 0.8).
    let r = similarity_score(
        json!({"criterionName": "S", "algorithm": "levenshtein"}),
        "kitten",
        "sitting",
        "binary",
    )
    .await;
    assert_eq!(r.score, Score::Bool(false));
    let r = similarity_score(
        json!({"criterionName": "S", "algorithm": "levenshtein", "threshold": 0.5}),
        "kitten",
        "sitting",
        "binary",
    )
    .await;
    assert_eq!(r.score, Score::Bool(true));
    // Custom fields; a missing reference is an error result.
    let e = LexicalSimilarityEvaluator::new(
        serde_json::from_value(json!({"criterionName": "S", "sourceField": "context.a", "referenceField": "context.b"}))
            .unwrap(),
    );
    let input = EvaluationInput::new("").with_context(json!({"a": "night", "b": "nacht"}));
    close(
        num(&e.evaluate(&input, &[crit("S", "numeric")]).await.unwrap()[0].score),
        0.25,
    );
    let input = EvaluationInput::new("").with_context(json!({"a": "night"}));
    let r = e
        .evaluate(&input, &[crit("S", "numeric")])
        .await
        .unwrap()
        .remove(0);
    assert!(r.error.unwrap().contains("context.b"));
}

async fn coverage(cfg: Value, input: EvaluationInput) -> EvaluationResult {
    let e = KeywordCoverageEvaluator::new(serde_json::from_value(cfg).unwrap());
    e.evaluate(&input, &[crit("K", "numeric")])
        .await
        .unwrap()
        .remove(0)
}

#[tokio::test]
async fn keyword_coverage() {
    // 2 of 4 found.
    let r = coverage(
        json!({"criterionName": "K", "expectedKeywords": ["Rust", "C++", "python", "Go"]}),
        EvaluationInput::new("I write rust and c++ daily."),
    )
    .await;
    close(num(&r.score), 0.5);
    let meta = r.metadata.unwrap();
    assert_eq!(meta["found"], json!(["Rust", "C++"]));
    assert_eq!(meta["missing"], json!(["python", "Go"]));
    // Whole words: "go" inside "good" does not count, "c++" is literal.
    let r = coverage(
        json!({"criterionName": "K", "expectedKeywords": ["go", "c++", "cod"], "matchWholeWord": true}),
        EvaluationInput::new("good c++ code"),
    )
    .await;
    close(num(&r.score), 1.0 / 3.0);
    let r = coverage(
        json!({"criterionName": "K", "expectedKeywords": ["go"], "matchWholeWord": false}),
        EvaluationInput::new("good"),
    )
    .await;
    close(num(&r.score), 1.0);
    // Case-sensitive.
    let r = coverage(
        json!({"criterionName": "K", "expectedKeywords": ["Rust", "rust"], "caseSensitive": true}),
        EvaluationInput::new("rust"),
    )
    .await;
    close(num(&r.score), 0.5);
    // Keywords from groundTruth (comma-separated) and from a context array.
    let r = coverage(
        json!({"criterionName": "K", "keywordsSourceField": "groundTruth"}),
        EvaluationInput::new("Paris is in France").with_ground_truth("Paris, France, Europe"),
    )
    .await;
    close(num(&r.score), 2.0 / 3.0);
    let r = coverage(
        json!({"criterionName": "K", "keywordsSourceField": "context.kw"}),
        EvaluationInput::new("refund issued")
            .with_context(json!({"kw": ["refund", "issued", "date", "refund"]})),
    )
    .await;
    close(num(&r.score), 2.0 / 3.0);
    // No keywords → error.
    let r = coverage(
        json!({"criterionName": "K", "keywordsSourceField": "context.kw"}),
        EvaluationInput::new("x").with_context(json!({"kw": []})),
    )
    .await;
    assert!(r.error.is_some());
}

#[test]
fn afinn_lexicon_ships() {
    let lex = afinn_lexicon();
    assert_eq!(lex.len(), 3382);
    assert_eq!(lex.get("good"), Some(&3));
    assert_eq!(lex.get("not good"), Some(&-2));
    assert_eq!(lex.get("abhor"), Some(&-3));
}

#[test]
fn sentiment_analysis_hand_computed() {
    // Tokens: the support(+2) was great(+3) but the wait was [not good](−2 phrase) → 10 tokens, raw 3.
    let a = analyze("The support was great, but the wait was not good.");
    assert_eq!(a.tokens, 10);
    assert_eq!(a.raw_score, 3);
    close(a.comparative, 0.3);
    close(a.comparative_normalized, 0.53);
    assert_eq!(a.positive, vec!["support", "great"]);
    assert_eq!(a.negative, vec!["not good"]);
    // Negation: "not happy" = −3 over 4 tokens.
    let a = analyze("I am not happy");
    assert_eq!(a.raw_score, -3);
    close(a.comparative, -0.75);
    close(a.comparative_normalized, 0.425);
    assert_eq!(a.negative, vec!["not happy"]);
    // Curly apostrophes and punctuation.
    let a = analyze("I don’t like it!!!");
    assert_eq!(a.raw_score, -2);
    let a = analyze("");
    assert_eq!((a.raw_score, a.tokens), (0, 0));
    close(a.comparative_normalized, 0.5);
}

#[tokio::test]
async fn sentiment_evaluator_outputs() {
    let text = "The support was great, but the wait was not good.";
    let run = |output: &str| {
        let e = SentimentEvaluator::new(
            serde_json::from_value(json!({"criterionName": "T", "outputType": output})).unwrap(),
        );
        async move {
            e.evaluate(&EvaluationInput::new(text), &[crit("T", "numeric")])
                .await
                .unwrap()
                .remove(0)
        }
    };
    close(num(&run("comparativeNormalized").await.score), 0.53);
    close(num(&run("rawScore").await.score), 3.0);
    let r = run("category").await;
    assert_eq!(r.score, Score::Text("positive".into()));
    let meta = r.metadata.unwrap();
    assert_eq!(meta["rawScore"], json!(3));
    assert_eq!(meta["category"], json!("positive"));
    // Thresholds: comparative 0.3 is neutral with positiveThreshold 0.5.
    let e = SentimentEvaluator::new(
        serde_json::from_value(
            json!({"criterionName": "T", "outputType": "category", "positiveThreshold": 0.5}),
        )
        .unwrap(),
    );
    let r = e
        .evaluate(&EvaluationInput::new(text), &[crit("T", "numeric")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Text("neutral".into()));
    let r = e
        .evaluate(
            &EvaluationInput::new("I am not happy"),
            &[crit("T", "numeric")],
        )
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Text("negative".into()));
}

#[tokio::test]
async fn toxicity() {
    let e = ToxicityEvaluator::new(
        serde_json::from_value(
            json!({"criterionName": "Safe", "toxicTerms": ["idiot", "shut up", "crap"]}),
        )
        .unwrap(),
    );
    let r = e
        .evaluate(
            &EvaluationInput::new("Shut up, you IDIOT."),
            &[crit("Safe", "binary")],
        )
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(false));
    assert_eq!(
        r[0].metadata.as_ref().unwrap()["foundTerms"],
        json!(["idiot", "shut up"])
    );
    // Whole-word by default: "scrap" is fine.
    let r = e
        .evaluate(
            &EvaluationInput::new("Scrap the draft."),
            &[crit("Safe", "binary")],
        )
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Bool(true));
    assert_eq!(r[0].metadata.as_ref().unwrap()["foundTerms"], json!([]));
    // Substring mode and case sensitivity.
    let e = ToxicityEvaluator::new(
        serde_json::from_value(
            json!({"criterionName": "Safe", "toxicTerms": ["crap"], "matchWholeWord": false, "caseSensitive": true}),
        )
        .unwrap(),
    );
    let r = e
        .evaluate(&EvaluationInput::new("scrap"), &[crit("Safe", "numeric")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Number(0.0));
    let r = e
        .evaluate(&EvaluationInput::new("SCRAP"), &[crit("Safe", "numeric")])
        .await
        .unwrap();
    assert_eq!(r[0].score, Score::Number(1.0));
}
