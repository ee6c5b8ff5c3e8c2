//! Text from a call, made safe to show: invisible and direction-changing characters shown as
//! escapes (so `run_shell\u{202E}` cannot pass for another name), and long values cut on the
//! list pages (the review's own page shows them whole).

use maud::{Markup, html};
use serde_json::Value;

/// Characters shown as `[U+XXXX]` instead of themselves: C0 and C1 controls, bidi embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069, U+061C, U+200E/F), zero-width and
/// other invisible format characters, line and paragraph separators, tag characters.
pub fn hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{ad}'
        | '\u{34f}'
        | '\u{61c}'
        | '\u{115f}' | '\u{1160}'
        | '\u{17b4}' | '\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{3164}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}')
}

/// `text` for the page: each [`hidden`] character as a marked `[U+XXXX]` escape (line breaks
/// too, unless `keep_newlines`, for pretty-printed JSON whose line breaks are its own).
pub fn visible(text: &str, keep_newlines: bool) -> Markup {
    if !text
        .chars()
        .any(|c| hidden(c) && !(keep_newlines && c == '\n'))
    {
        return html! { (text) };
    }
    let mut parts: Vec<(bool, String)> = Vec::new();
    for c in text.chars() {
        if hidden(c) && !(keep_newlines && c == '\n') {
            parts.push((true, format!("[U+{:04X}]", c as u32)));
        } else {
            match parts.last_mut() {
                Some((false, s)) => s.push(c),
                _ => parts.push((false, c.to_string())),
            }
        }
    }
    html! {
        @for (esc, s) in &parts {
            @if *esc { span.esc title="an invisible or direction-changing character" { (s) } }
            @else { (s) }
        }
    }
}

/// Whether `text` holds a [`hidden`] character (its card is flagged).
pub fn has_hidden(text: &str) -> bool {
    text.chars().any(hidden)
}

/// `v` cut to about `budget` characters of JSON: strings past `max_string` characters are
/// cut, and once the budget is spent the remaining members and elements are left out. Returns
/// the cut value and whether anything was cut. Costs at most the budget, however large `v`.
pub fn cut_value(v: &Value, budget: usize, max_string: usize) -> (Value, bool) {
    let mut left = budget;
    let mut cut = false;
    let out = cut_in(v, &mut left, max_string, &mut cut, 0);
    (out, cut)
}

fn cut_in(v: &Value, left: &mut usize, max_string: usize, cut: &mut bool, depth: usize) -> Value {
    const DEPTH: usize = 32;
    match v {
        Value::String(s) => {
            let n = s.chars().count();
            let keep = n.min(max_string).min(*left);
            *left = left.saturating_sub(keep + 2);
            if keep < n {
                *cut = true;
                let head: String = s.chars().take(keep).collect();
                Value::String(format!("{head}… [{} more characters]", n - keep))
            } else {
                v.clone()
            }
        }
        Value::Array(a) => {
            if depth >= DEPTH {
                *cut = true;
                return Value::String("[…]".into());
            }
            let mut out = Vec::new();
            for (i, x) in a.iter().enumerate() {
                if *left == 0 {
                    *cut = true;
                    out.push(Value::String(format!("… [{} more elements]", a.len() - i)));
                    break;
                }
                *left = left.saturating_sub(1);
                out.push(cut_in(x, left, max_string, cut, depth + 1));
            }
            Value::Array(out)
        }
        Value::Object(m) => {
            if depth >= DEPTH {
                *cut = true;
                return Value::String("{…}".into());
            }
            let mut out = serde_json::Map::new();
            for (i, (k, x)) in m.iter().enumerate() {
                if *left == 0 {
                    *cut = true;
                    out.insert(
                        "…".into(),
                        Value::String(format!("[{} more members]", m.len() - i)),
                    );
                    break;
                }
                let key: String = k.chars().take(max_string).collect();
                if key.len() < k.len() {
                    *cut = true;
                }
                *left = left.saturating_sub(key.chars().count() + 4);
                out.insert(key, cut_in(x, left, max_string, cut, depth + 1));
            }
            Value::Object(out)
        }
        _ => {
            *left = left.saturating_sub(8);
            v.clone()
        }
    }
}

/// `v` as indented JSON.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_escaped_and_values_cut() {
        let m = visible("run\u{202e}hs.exe\nx", false).into_string();
        assert!(!m.contains('\u{202e}') && !m.contains('\n'), "{m}");
        assert!(m.contains("[U+202E]") && m.contains("[U+000A]"), "{m}");
        assert_eq!(
            visible("{\n  \"a\": 1\n}", true).into_string(),
            "{\n  &quot;a&quot;: 1\n}"
        );
        let big =
            serde_json::json!({"a": "x".repeat(10_000), "b": (0..10_000).collect::<Vec<_>>()});
        let (v, cut) = cut_value(&big, 2_000, 200);
        assert!(cut);
        assert!(pretty(&v).len() < 40_000, "{}", pretty(&v).len());
        let small = serde_json::json!({"cmd": "ls"});
        assert_eq!(cut_value(&small, 2_000, 200), (small, false));
    }
}
