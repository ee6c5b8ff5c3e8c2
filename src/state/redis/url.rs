//! Passwords in Redis URLs never reach logs or errors.

/// The URL with its password (if any) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The user info ends at the last '@' before the query: a password may hold a raw '/'.
    let main = rest.split_once('?').map_or(rest, |(m, _)| m);
    match main.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split_once(':').map_or("", |(u, _)| u);
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

/// `message` with the URL's password (if any) replaced by `***`.
pub(crate) fn scrub(url: &str, message: &str) -> String {
    let password = url
        .split_once("://")
        .map(|(_, rest)| rest.split_once('?').map_or(rest, |(m, _)| m))
        .and_then(|auth| auth.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty());
    match password {
        Some(p) => message.replace(p, "***"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_redacted() {
        assert_eq!(redact_url("redis://:pw@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(
            redact_url("redis://u:pw@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(redact_url("redis://h:6379/0"), "redis://h:6379/0");
        // A raw '/' in the password (issue 22 point 11).
        assert_eq!(
            redact_url("redis://:pa/ss@h:6379/0"),
            "redis://:***@h:6379/0"
        );
        assert_eq!(scrub("redis://:pa/ss@h:6379/0", "bad pa/ss"), "bad ***");
        assert_eq!(
            scrub("redis://u:pw9@h/0", "auth pw9 failed"),
            "auth *** failed"
        );
    }
}
