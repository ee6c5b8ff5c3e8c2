//! Database URLs without their passwords, for messages and logs. It sits below both the
//! collector (which shows the store it writes to) and the PostgreSQL store (whose connection
//! errors may quote the URL).

/// The URL without credentials: `postgres://user:secret@host/db` →
/// `postgres://user:***@host/db`, and every `password=` parameter's value → `***`. The user
/// info ends at the last `@` before the query, so a password holding a raw `/`, `:` or `@` is
/// hidden whole.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let main = match main.rsplit_once('@') {
        Some((auth, host)) => match auth.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => main.to_string(),
        },
        None => main.to_string(),
    };
    match query {
        Some(q) => format!("{scheme}://{main}?{}", redact_query(q)),
        None => format!("{scheme}://{main}"),
    }
}

/// `password=VALUE` (any case, in `&`- or space-separated parameters) → `password=***`.
fn redact_query(q: &str) -> String {
    let mut out = String::with_capacity(q.len());
    let mut rest = q;
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(i) = lower.find("password=") else {
            out.push_str(rest);
            return out;
        };
        let value_at = i + "password=".len();
        out.push_str(&rest[..value_at]);
        out.push_str("***");
        let tail = &rest[value_at..];
        let end = tail.find(['&', ' ']).unwrap_or(tail.len());
        rest = &tail[end..];
    }
}

/// The password(s) `url` holds, as written and percent-decoded.
fn passwords_of(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((_, rest)) = url.split_once("://") {
        let main = rest.split_once('?').map_or(rest, |(m, _)| m);
        if let Some((auth, _)) = main.rsplit_once('@')
            && let Some((_, pw)) = auth.split_once(':')
        {
            out.push(pw.to_string());
        }
    }
    let lower = url.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password=") {
        let start = from + i + "password=".len();
        let end = url[start..]
            .find(['&', ' '])
            .map_or(url.len(), |e| start + e);
        out.push(url[start..end].to_string());
        from = end;
    }
    let decoded: Vec<String> = out.iter().filter_map(|p| percent_decoded(p)).collect();
    out.extend(decoded);
    out.retain(|p| !p.is_empty());
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out
}

/// `%XX` decoded, when that gives other UTF-8 text.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok().filter(|d| d != text)
}

/// `message` with every password `url` holds replaced by `***` (for errors that may quote the
/// URL or parts of it).
pub fn redact_in(url: &str, message: &str) -> String {
    let mut out = message.replace(url, &redact_url(url));
    for pw in passwords_of(url) {
        out = out.replace(&pw, "***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact_url("postgres://u:p@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        // Issue 22 point 11: a raw '/' in the password, and ?password=.
        assert_eq!(redact_url("postgres://u:p/w@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=disable&password=s3%2Fcr&x=1"),
            "postgres://u@h/db?sslmode=disable&password=***&x=1"
        );
        assert_eq!(
            redact_in(
                "postgres://u@h/db?password=s3%2Fcr",
                "bad s3/cr and s3%2Fcr"
            ),
            "bad *** and ***"
        );
    }
}
