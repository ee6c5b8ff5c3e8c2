//! Login for the console: tokens from TOKENS (`{"tokens":[{"sha256","name"}]}`, only their
//! SHA-256 is stored), sessions in memory behind an `HttpOnly`, `SameSite=Strict` cookie
//! (`Secure` and `__Host-` when the console is reached over https), and a CSRF token per
//! session that every POST must carry. The login form's CSRF token is issued and signed by the
//! server (and also sent as a cookie: double submit), so a cookie an attacker planted does not
//! pass. Wrong tokens are throttled per address ([`Throttle`]).

use std::collections::HashMap;
use std::net::IpAddr;
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

/// The console's cookies: their names and attributes.
#[derive(Debug, Clone)]
pub struct Cookies {
    /// The session cookie's name.
    pub session: &'static str,
    /// The login form's CSRF cookie's name.
    pub login: &'static str,
    secure: bool,
}

impl Cookies {
    /// Over https (`secure`): `Secure`, and the `__Host-` prefix (which browsers accept only
    /// from a secure origin, for path `/`, without a domain: no sibling host can set it).
    pub fn new(secure: bool) -> Cookies {
        if secure {
            Cookies {
                session: "__Host-toolgate_session",
                login: "__Host-toolgate_login",
                secure,
            }
        } else {
            Cookies {
                session: SESSION_COOKIE,
                login: LOGIN_COOKIE,
                secure,
            }
        }
    }

    /// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, path `/`, `Secure` over https
    /// (`max_age` 0 deletes it).
    pub fn set(&self, name: &str, value: &str, max_age: Option<u64>) -> String {
        let mut c = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
        if self.secure {
            c.push_str("; Secure");
        }
        if let Some(a) = max_age {
            c.push_str(&format!("; Max-Age={a}"));
        }
        c
    }
}

/// How long a login form's CSRF token is good for.
pub const LOGIN_CSRF_TTL_SECS: i64 = 600;

/// Login CSRF tokens the server issues: `<unix time>.<nonce>.<MAC>`, the MAC (HMAC-SHA256 under
/// a key of this process) over the time and nonce. Only a token this console issued in the
/// last [`LOGIN_CSRF_TTL_SECS`] passes, whatever cookie the browser holds.
pub struct LoginCsrf {
    key: [u8; 32],
}

impl Default for LoginCsrf {
    fn default() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        LoginCsrf { key }
    }
}

impl std::fmt::Debug for LoginCsrf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginCsrf")
    }
}

impl LoginCsrf {
    /// A new token, issued at `now` (Unix seconds).
    pub fn issue(&self, now: i64) -> String {
        let mut nonce = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let head = format!("{now}.{}", hex::encode(nonce));
        let mac = crate::engine::notify_signature(&self.key, head.as_bytes());
        format!("{head}.{mac}")
    }

    /// Whether `token` was issued by this console less than [`LOGIN_CSRF_TTL_SECS`] before
    /// `now`.
    pub fn check(&self, token: &str, now: i64) -> bool {
        let Some((head, mac)) = token.rsplit_once('.') else {
            return false;
        };
        let want = crate::engine::notify_signature(&self.key, head.as_bytes());
        if !ct_eq(want.as_bytes(), mac.as_bytes()) {
            return false;
        }
        let issued = head
            .split_once('.')
            .and_then(|(t, _)| t.parse::<i64>().ok());
        issued.is_some_and(|t| t <= now && now - t <= LOGIN_CSRF_TTL_SECS)
    }
}

/// Wrong tokens an address may try per minute; past it, logins from it get 429 until the
/// minute is over.
pub const LOGIN_FAILURES_PER_MINUTE: u32 = 10;
/// Addresses whose failures are counted at most (the oldest windows make room).
pub const THROTTLED_ADDRESSES: usize = 10_000;
const WINDOW: Duration = Duration::from_secs(60);

/// Failed logins per address (IPv4, or the /64 of an IPv6 address), in one-minute windows.
#[derive(Debug, Default)]
pub struct Throttle {
    by_addr: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// The key an address is counted under: an IPv6 address's /64 (one host holds a whole /64).
fn throttle_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

impl Throttle {
    /// Whether logins from `ip` are refused for now.
    pub fn blocked(&self, ip: IpAddr, now: Instant) -> bool {
        let map = self.by_addr.lock();
        map.get(&throttle_key(ip)).is_some_and(|(start, n)| {
            now.duration_since(*start) < WINDOW && *n >= LOGIN_FAILURES_PER_MINUTE
        })
    }

    /// Counts a failed login from `ip`; returns the failures of its window so far.
    pub fn failed(&self, ip: IpAddr, now: Instant) -> u32 {
        let mut map = self.by_addr.lock();
        if map.len() >= THROTTLED_ADDRESSES {
            map.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
            if map.len() >= THROTTLED_ADDRESSES
                && let Some(oldest) = map.iter().min_by_key(|(_, (s, _))| *s).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        let e = map.entry(throttle_key(ip)).or_insert((now, 0));
        if now.duration_since(e.0) >= WINDOW {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
        e.1
    }
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
    fn login_csrf_only_from_this_server_and_fresh() {
        let c = LoginCsrf::default();
        let t = c.issue(1_000);
        assert!(c.check(&t, 1_100));
        assert!(!c.check(&t, 1_000 + LOGIN_CSRF_TTL_SECS + 1));
        assert!(!c.check("attacker-chosen", 1_100));
        assert!(!LoginCsrf::default().check(&t, 1_100));
    }

    #[test]
    fn throttle_per_address() {
        let t = Throttle::default();
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..LOGIN_FAILURES_PER_MINUTE {
            assert!(!t.blocked(a, now));
            t.failed(a, now);
        }
        assert!(t.blocked(a, now));
        assert!(!t.blocked(b, now));
        assert!(!t.blocked(a, now + WINDOW));
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
