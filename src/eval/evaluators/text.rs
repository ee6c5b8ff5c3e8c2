//! Text helpers shared by the evaluators: case folding, whitespace normalization and literal
//! term search with an optional whole-word condition.

/// Trims and collapses every run of whitespace into one space.
pub fn normalize_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lower-cases `s` unless `case_sensitive`.
pub fn fold(s: &str, case_sensitive: bool) -> String {
    if case_sensitive {
        s.to_string()
    } else {
        s.to_lowercase()
    }
}

/// A "word character": a letter, a digit or `_` (Unicode-aware).
pub fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Finds the literal `needle` in `haystack` (no regex syntax: `c++` is just `c++`).
///
/// With `whole_word`, an occurrence counts only when the character before it and the character
/// after it (if any) are not word characters ([`is_word_char`]). An empty needle never matches.
pub fn contains_term(haystack: &str, needle: &str, whole_word: bool) -> bool {
    if needle.is_empty() {
        return false;
    }
    if !whole_word {
        return haystack.contains(needle);
    }
    haystack.match_indices(needle).any(|(start, m)| {
        let before_ok = haystack[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word_char(c));
        let after_ok = haystack[start + m.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_word_char(c));
        before_ok && after_ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_word_literal() {
        assert!(contains_term("i like c++ a lot", "c++", true));
        assert!(contains_term("c++", "c++", true));
        assert!(!contains_term("abc++", "c++", true));
        assert!(!contains_term("scrap", "crap", true));
        assert!(contains_term("scrap", "crap", false));
        assert!(contains_term("crap, really", "crap", true));
        assert!(!contains_term("anything", "", false));
    }

    #[test]
    fn whitespace() {
        assert_eq!(normalize_whitespace("  a \n\t b  c "), "a b c");
    }
}
