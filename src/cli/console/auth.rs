//! Login for the console: tokens from TOKENS (`{"tokens":[{"sha256","name"}]}`, only their
//! SHA-256 is stored), sessions in memory behind an `HttpOnly`, `SameSite=Strict` cookie, and a
//! CSRF token per session that every POST must carry (the login form's comes from a cookie of
//! its own: double submit).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The session cookie.
pub const SESSION_COOKIE: &str = "toolgate_session";
/// The login form's CSRF cookie.
pub const LOGIN_COOKIE: &str = "toolgate_login";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    sha256: String,
    name: String,
}

/// The reviewers' tokens, by their SHA-256.
#[derive(Debug)]
pub struct Tokens {
    entries: Vec<([u8; 32], String)>,
}

impl Tokens {
    /// Reads TOKENS; every entry needs a 64-hex-digit `sha256` and a non-empty `name`.
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("--token-file {}: {e}", path.display()))
    }

    /// Parses the JSON of a tokens file.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let file: TokensFile = serde_json::from_str(text).map_err(|e| {
            format!("expected {{\"tokens\": [{{\"sha256\": \"<hex>\", \"name\": \"…\"}}]}}: {e}")
        })?;
        if file.tokens.is_empty() {
            return Err("tokens: no tokens, nobody could log in".into());
        }
        let mut entries = Vec::with_capacity(file.tokens.len());
        for (i, t) in file.tokens.into_iter().enumerate() {
            let digest = hex::decode(t.sha256.trim())
                .ok()
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| format!("tokens[{i}].sha256: expected 64 hex digits"))?;
            let name = t.name.trim().to_string();
            if name.is_empty() || name.chars().any(char::is_control) {
                return Err(format!("tokens[{i}].name: expected a non-empty name"));
            }
            entries.push((digest, name));
        }
        Ok(Tokens { entries })
    }

    /// The reviewer whose token this is. Every entry is compared in constant time.
    pub fn check(&self, token: &str) -> Option<String> {
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let mut found = None;
        for (d, name) in &self.entries {
            if ct_eq(d, &digest) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found
    }
}

/// Byte strings compared without an early exit.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes, hex.
pub fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// A logged-in reviewer.
#[derive(Debug, Clone)]
pub struct Session {
    /// The reviewer's name (from TOKENS).
    pub name: String,
    /// The CSRF token of this session's forms.
    pub csrf: String,
    expires: Instant,
}

/// Sessions by the SHA-256 of their cookie value (a leaked memory dump holds no cookie).
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// Starts a session for `name`; returns the cookie value.
    pub fn start(&self, name: String) -> String {
        let id = random_token();
        let session = Session {
            name,
            csrf: random_token(),
            expires: Instant::now() + SESSION_TTL,
        };
        let mut map = self.by_id.lock();
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        map.insert(Sha256::digest(id.as_bytes()).into(), session);
        id
    }

    /// The live session of a cookie value.
    pub fn get(&self, id: &str) -> Option<Session> {
        let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
        let map = self.by_id.lock();
        map.get(&key)
            .filter(|s| s.expires > Instant::now())
            .cloned()
    }

    /// Ends a session.
    pub fn end(&self, id: &str) {
        let key: [u8; 32] = Sha256::digest(id.as_bytes()).into();
        self.by_id.lock().remove(&key);
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, path `/` (`max_age` 0 deletes it).
pub fn set_cookie(name: &str, value: &str, max_age: Option<u64>) -> String {
    let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
    if let Some(a) = max_age {
        c.push_str(&format!("; Max-Age={a}"));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_check_by_digest() {
        let digest = hex::encode(Sha256::digest(b"s3cret"));
        let t = Tokens::parse(&format!(
            r#"{{"tokens":[{{"sha256":"{digest}","name":"alice"}}]}}"#
        ))
        .unwrap();
        assert_eq!(t.check("s3cret").as_deref(), Some("alice"));
        assert_eq!(t.check("s3cre"), None);
        assert!(Tokens::parse(r#"{"tokens":[{"sha256":"zz","name":"a"}]}"#).is_err());
        assert!(Tokens::parse(r#"{"tokens":[]}"#).is_err());
    }

    #[test]
    fn sessions_start_get_end() {
        let s = Sessions::default();
        let id = s.start("bob".into());
        assert_eq!(s.get(&id).map(|x| x.name), Some("bob".into()));
        s.end(&id);
        assert!(s.get(&id).is_none());
    }
}
