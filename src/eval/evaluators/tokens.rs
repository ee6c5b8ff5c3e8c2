//! Token counting for the `max_tokens` rule: a real BPE tokenizer over bounded chunks of the
//! text, so the cost is linear in the text and no input can panic the tokenizer.

use serde::{Deserialize, Serialize};

/// Tokenizer used by `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEncoding {
    /// OpenAI `cl100k_base` BPE (GPT-3.5/4); default.
    #[default]
    Cl100kBase,
    /// OpenAI `o200k_base` BPE (GPT-4o).
    O200kBase,
    /// The estimate `ceil(chars / 4)`. Also used for the BPE encodings when toolgate is built
    /// without the `tokenizer` feature.
    Estimate,
}

/// Largest text (in bytes) `max_tokens` counts; a longer text gets an error result.
pub const MAX_TOKEN_TEXT_BYTES: usize = 16 * 1024 * 1024;

/// Chunks are at most this many bytes long.
const CHUNK_BYTES: usize = 4096;

/// A run of whitespace or of non-whitespace is cut every this many bytes. BPE merging is
/// quadratic in the length of one pre-tokenized piece, and such a run can be one piece; no
/// BPE token of the supported encodings is this long, so a cut adds at most one token.
const UNBROKEN_BYTES: usize = 256;

/// Length in bytes of the first chunk of `rest` (see [`token_chunks`]).
fn chunk_end(rest: &str) -> usize {
    let mut run_start = 0;
    let mut prev_ws: Option<bool> = None;
    let mut last_cut = None;
    for (i, c) in rest.char_indices() {
        if i >= CHUNK_BYTES {
            return last_cut.unwrap_or(i);
        }
        let ws = c.is_whitespace();
        match prev_ws {
            Some(p) if p == ws => {
                if i - run_start >= UNBROKEN_BYTES {
                    return i;
                }
            }
            _ => {
                if ws && prev_ws == Some(false) {
                    last_cut = Some(i);
                }
                run_start = i;
            }
        }
        prev_ws = Some(ws);
    }
    rest.len()
}

/// Splits `text` into chunks of at most 4 KiB, cut before a whitespace character that
/// follows a word where the text has one, and inside any run of whitespace or of
/// non-whitespace longer than 256 bytes. Counting tokens chunk by chunk equals counting the
/// whole text wherever the tokenizer splits at the cut anyway (before a space that starts a
/// word); the chunks concatenate to `text`.
pub fn token_chunks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (chunk, tail) = rest.split_at(chunk_end(rest));
        rest = tail;
        Some(chunk)
    })
}

/// Counts tokens of `text` with `encoding`; returns the count and the tokenizer actually used.
/// The BPE encodings count chunk by chunk ([`token_chunks`]): linear in the text, exact for
/// text whose whitespace-free runs are shorter than 256 bytes. Callers bound the text with
/// [`MAX_TOKEN_TEXT_BYTES`].
pub fn count_tokens(text: &str, encoding: TokenEncoding) -> (usize, &'static str) {
    let estimate = || text.chars().count().div_ceil(4);
    match encoding {
        TokenEncoding::Estimate => (estimate(), "estimate"),
        #[cfg(feature = "tokenizer")]
        TokenEncoding::Cl100kBase | TokenEncoding::O200kBase => {
            use std::sync::OnceLock;
            use tiktoken_rs::CoreBPE;
            static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();
            static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();
            let (bpe, name) = if encoding == TokenEncoding::Cl100kBase {
                (
                    CL100K.get_or_init(|| tiktoken_rs::cl100k_base().ok()),
                    "cl100k_base",
                )
            } else {
                (
                    O200K.get_or_init(|| tiktoken_rs::o200k_base().ok()),
                    "o200k_base",
                )
            };
            match bpe {
                Some(bpe) => (
                    token_chunks(text)
                        .map(|c| bpe.encode_ordinary(c).len())
                        .sum(),
                    name,
                ),
                None => (estimate(), "estimate"),
            }
        }
        #[cfg(not(feature = "tokenizer"))]
        TokenEncoding::Cl100kBase | TokenEncoding::O200kBase => (estimate(), "estimate"),
    }
}
