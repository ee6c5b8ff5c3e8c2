//! Score normalization to 0–1 and weighted aggregation.

use super::types::{EvaluationCriteria, EvaluationResult, EvaluationScale, Score};

/// Parses the two-valued words: `true`/`pass`/`yes` → 1, `false`/`fail`/`no` → 0
/// (case-insensitive, surrounding whitespace ignored).
fn two_valued_word(s: &str) -> Option<f64> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "pass" | "yes" => Some(1.0),
        "false" | "fail" | "no" => Some(0.0),
        _ => None,
    }
}

fn number_of(score: &Score) -> Option<f64> {
    let n = match score {
        Score::Number(n) => *n,
        Score::Text(s) => s.trim().parse::<f64>().ok()?,
        Score::Bool(_) => return None,
    };
    n.is_finite().then_some(n)
}

fn numeric_range(n: f64) -> Option<f64> {
    if (0.0..=1.0).contains(&n) {
        Some(n)
    } else if n > 1.0 && n <= 100.0 {
        Some(n / 100.0)
    } else {
        None
    }
}

/// Normalizes a score on `scale` to 0–1, or `None` when it does not normalize.
///
/// Rules:
/// * **binary** and **pass/fail**: `true` → 1, `false` → 0; the numbers 0 and 1; the strings
///   `true`/`false`, `pass`/`fail`, `yes`/`no` (case-insensitive) and `"1"`/`"0"`. Anything else
///   does not normalize.
/// * **likert5**: a number x (or a numeric string) with 1 ≤ x ≤ 5 → (x − 1) / 4. Anything
///   else does not normalize.
/// * **numeric**: a number x (or a numeric string): 0 ≤ x ≤ 1 as is; 1 < x ≤ 100 → x / 100;
///   other values (negative, > 100) do not normalize. Booleans do not normalize.
/// * **custom** scales: booleans → 1/0; the two-valued words above → 1/0; numbers and numeric
///   strings as for **numeric**; other strings (categories) do not normalize.
///
/// NaN and infinite numbers never normalize.
pub fn normalize_score(score: &Score, scale: &EvaluationScale) -> Option<f64> {
    match scale {
        EvaluationScale::Binary | EvaluationScale::PassFail => match score {
            Score::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            Score::Number(n) if *n == 0.0 || *n == 1.0 => Some(*n),
            Score::Number(_) => None,
            Score::Text(s) => two_valued_word(s).or_else(|| match s.trim() {
                "1" => Some(1.0),
                "0" => Some(0.0),
                _ => None,
            }),
        },
        EvaluationScale::Likert5 => {
            let n = number_of(score)?;
            (1.0..=5.0).contains(&n).then(|| (n - 1.0) / 4.0)
        }
        EvaluationScale::Numeric => numeric_range(number_of(score)?),
        EvaluationScale::Custom(_) => match score {
            Score::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            Score::Text(s) => two_valued_word(s).or_else(|| numeric_range(number_of(score)?)),
            Score::Number(_) => numeric_range(number_of(score)?),
        },
    }
}

/// Expresses a value in 0–1 on a criterion's scale, for evaluators that compute a fraction or
/// similarity:
/// * **binary**, **pass/fail**: `value ≥ threshold` as a boolean;
/// * **likert5**: `1 + 4·value` (a number in 1–5);
/// * **numeric** and custom scales: the value itself.
///
/// The value is clamped to 0–1 first.
pub fn score_on_scale(value: f64, scale: &EvaluationScale, threshold: f64) -> Score {
    let v = if value.is_finite() {
        value.clamp(0.0, 1.0)
    } else {
        0.0
    };
    match scale {
        EvaluationScale::Binary | EvaluationScale::PassFail => Score::Bool(v >= threshold),
        EvaluationScale::Likert5 => Score::Number(1.0 + 4.0 * v),
        EvaluationScale::Numeric | EvaluationScale::Custom(_) => Score::Number(v),
    }
}

/// Expresses a pass/fail outcome on a criterion's scale: a boolean on binary, pass/fail and
/// custom scales, 1.0/0.0 on numeric, 5/1 on likert5.
pub fn bool_on_scale(pass: bool, scale: &EvaluationScale) -> Score {
    match scale {
        EvaluationScale::Numeric => Score::Number(if pass { 1.0 } else { 0.0 }),
        EvaluationScale::Likert5 => Score::Number(if pass { 5.0 } else { 1.0 }),
        _ => Score::Bool(pass),
    }
}

/// Fills `normalized_score` of each result and returns the overall score.
///
/// Rules:
/// * a result with `error`, a result whose criterion is not in `criteria`, and a result whose
///   score does not normalize ([`normalize_score`]) is left out (its `normalized_score` stays
///   `None`);
/// * every other result counts once with its criterion's weight (`weight`, default 1); several
///   results for the same criterion (from different evaluators) each count;
/// * overall = Σ weight·normalized / Σ weight;
/// * `None` when no result is left; `Some(0.0)` when results are left but all their weights
///   are 0.
pub fn aggregate(results: &mut [EvaluationResult], criteria: &[EvaluationCriteria]) -> Option<f64> {
    let mut sum = 0.0;
    let mut total_weight = 0.0;
    let mut counted = 0usize;
    for r in results.iter_mut() {
        r.normalized_score = None;
        if r.error.is_some() {
            continue;
        }
        let Some(criterion) = criteria.iter().find(|c| c.name == r.criterion_name) else {
            continue;
        };
        let Some(n) = normalize_score(&r.score, &criterion.scale) else {
            continue;
        };
        r.normalized_score = Some(n);
        let w = criterion.effective_weight();
        sum += w * n;
        total_weight += w;
        counted += 1;
    }
    if counted == 0 {
        None
    } else if total_weight <= 0.0 {
        Some(0.0)
    } else {
        Some(sum / total_weight)
    }
}
