//! Passwords in Redis URLs never reach logs or errors.

/// The URL with its password (if any) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or("", |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// `message` with the URL's password (if any) replaced by `***`.
pub(super) fn scrub(url: &str, message: &str) -> String {
    let password = url
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
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
        assert_eq!(
            scrub("redis://u:pw9@h/0", "auth pw9 failed"),
            "auth *** failed"
        );
    }
}
