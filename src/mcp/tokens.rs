//! Who calls a shared gateway (`--token-file`): bearer tokens, stored as the SHA-256 of the
//! token, each naming the agent (and end user, and agent tags) its calls are decided for.
//!
//! The identity of a call comes from its token only, never from what the client claims.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::engine::Enduser;

/// The identity a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The agent id.
    pub agent_id: String,
    /// The end user, if any.
    pub enduser: Option<Enduser>,
    /// The agent's tags.
    pub agent_tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    tokens: Vec<EntryShape>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EntryShape {
    sha256: String,
    agent_id: String,
    #[serde(default)]
    enduser: Option<Enduser>,
    #[serde(default)]
    agent_tags: Vec<String>,
}

/// The tokens of `--token-file`: `{"tokens":[{"sha256":"<hex of the token>","agentId":"…",
/// "enduser":{"id","tags"}?,"agentTags":[…]?}]}`.
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    entries: Vec<([u8; 32], Identity)>,
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("token file {path}: {message}")]
pub struct TokenFileError {
    path: String,
    message: String,
}

impl TokenFile {
    /// Reads and checks a token file (every `sha256` 64 hex digits, every `agentId` non-empty,
    /// no hash listed twice).
    pub fn load(path: &Path) -> Result<TokenFile, TokenFileError> {
        let err = |message: String| TokenFileError {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        TokenFile::parse(&text).map_err(err)
    }

    /// Parses the text of a token file.
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let shape: FileShape = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut entries: Vec<([u8; 32], Identity)> = Vec::with_capacity(shape.tokens.len());
        for (i, e) in shape.tokens.into_iter().enumerate() {
            let mut hash = [0u8; 32];
            hex::decode_to_slice(e.sha256.trim().to_ascii_lowercase(), &mut hash).map_err(
                |_| {
                    format!("tokens[{i}].sha256: expected 64 hex digits (the SHA-256 of the token)")
                },
            )?;
            if e.agent_id.trim().is_empty() {
                return Err(format!("tokens[{i}].agentId: empty"));
            }
            if entries.iter().any(|(h, _)| *h == hash) {
                return Err(format!("tokens[{i}]: the same token is listed twice"));
            }
            entries.push((
                hash,
                Identity {
                    agent_id: e.agent_id,
                    enduser: e.enduser,
                    agent_tags: e.agent_tags,
                },
            ));
        }
        Ok(TokenFile { entries })
    }

    /// The identity of `token` (compared by SHA-256, in constant time over every entry), with
    /// its index in the file.
    pub fn identify(&self, token: &str) -> Option<(usize, &Identity)> {
        let h: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (i, (want, id)) in self.entries.iter().enumerate() {
            if ct_eq(want, &h) {
                found = Some((i, id));
            }
        }
        found
    }

    /// The key of the token at `index`'s current-run record in the state store (derived from
    /// the token's hash, so the hash itself is not written there; the same in every replica
    /// reading the same file).
    pub fn run_key(&self, index: usize) -> Option<String> {
        let (hash, _) = self.entries.get(index)?;
        let mut h = Sha256::new();
        h.update(b"toolgate current run\0");
        h.update(hash);
        Some(hex::encode(h.finalize()))
    }

    /// How many tokens the file lists.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file lists no token.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Compares two byte strings in time independent of where they differ.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// The hex SHA-256 of a token, as a token file lists it.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_by_their_hash_only() {
        let text = format!(
            r#"{{"tokens":[{{"sha256":"{}","agentId":"a1","enduser":{{"id":"alice","tags":{{"team":"x"}}}},"agentTags":["t"]}},
              {{"sha256":"{}","agentId":"a2"}}]}}"#,
            token_sha256("secret-1"),
            token_sha256("secret-2")
        );
        let f = TokenFile::parse(&text).unwrap();
        let (i, id) = f.identify("secret-1").unwrap();
        assert_eq!((i, id.agent_id.as_str()), (0, "a1"));
        assert_eq!(id.enduser.as_ref().unwrap().id, "alice");
        assert_eq!(f.identify("secret-2").unwrap().1.agent_id, "a2");
        assert!(f.identify("secret-3").is_none());
        assert!(f.identify("").is_none());
        assert!(TokenFile::parse(r#"{"tokens":[{"sha256":"zz","agentId":"a"}]}"#).is_err());
        assert!(TokenFile::parse(r#"{"tokens":[{"sha256":"00","agentId":"a","x":1}]}"#).is_err());
    }
}
