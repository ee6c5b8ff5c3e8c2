//! Built-in evaluators. Each has a config type (loadable from JSON through
//! [`EvaluatorConfig`](super::EvaluatorConfig)) and an evaluator type implementing
//! [`Evaluator`](super::Evaluator).
//!
//! | type | evaluator | cost |
//! |---|---|---|
//! | `ruleBased` | [`RuleBasedEvaluator`] | µs, local |
//! | `lexicalSimilarity` | [`LexicalSimilarityEvaluator`] | µs, local |
//! | `keywordCoverage` | [`KeywordCoverageEvaluator`] | µs, local |
//! | `sentiment` | [`SentimentEvaluator`] | µs, local |
//! | `toxicity` | [`ToxicityEvaluator`] | µs, local |
//! | `toolUsage` | [`ToolUsageEvaluator`] | µs, local |
//! | `statistical` | [`StatisticalEvaluator`] | n × the wrapped evaluator |
//! | `traceComparison` | [`TraceComparisonEvaluator`] | µs, local |
//! | `llmJudge` | [`LlmJudgeEvaluator`] | one chat completion (slow, costs tokens) |
//! | `embeddingSimilarity` | [`EmbeddingSimilarityEvaluator`] | one embeddings call (slow) |

mod lexical;
mod llm;
mod rule_based;
mod samples;
mod sentiment;
mod statistical;
pub(crate) mod text;
mod tokens;
mod tool_usage;

pub use lexical::*;
pub use llm::*;
pub use rule_based::*;
pub use sentiment::*;
pub use statistical::*;
pub use tokens::*;
pub use tool_usage::*;
