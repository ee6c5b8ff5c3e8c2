//! The `requestState` of an `input_required` result (MCP 2026-07-28's multi round-trip
//! requests), sealed with HMAC-SHA256: it names the review a call waits on, the call's
//! fingerprint, the agent and end user it was asked for, and when it expires. The client echoes
//! it on its retry; anything it changes breaks the seal.
//!
//! Text form: `v1.<hex of the JSON payload>.<hex of the MAC over "v1." + payload>`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::tokens::ct_eq;

const BLOCK: usize = 64;

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut ipad = [0x36u8; BLOCK];
    let mut opad = [0x5cu8; BLOCK];
    for i in 0..BLOCK {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize()
        .into()
}

/// The key sealing `requestState` (`--request-state-key FILE`, shared by replicas; random per
/// process when absent). Never printed.
#[derive(Clone)]
pub struct SealKey(std::sync::Arc<Vec<u8>>);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl Default for SealKey {
    fn default() -> Self {
        SealKey::random()
    }
}

impl SealKey {
    /// A fresh random key (32 bytes).
    pub fn random() -> SealKey {
        SealKey(std::sync::Arc::new(rand::random::<[u8; 32]>().to_vec()))
    }

    /// The key in `path`: its bytes (surrounding whitespace trimmed), at least 32.
    pub fn load(path: &Path) -> Result<SealKey, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("request state key {}: {e}", path.display()))?;
        let s = bytes.trim_ascii();
        if s.len() < 32 {
            return Err(format!(
                "request state key {}: too short (at least 32 bytes)",
                path.display()
            ));
        }
        Ok(SealKey(std::sync::Arc::new(s.to_vec())))
    }

    /// A key from its bytes.
    pub fn from_bytes(bytes: &[u8]) -> SealKey {
        SealKey(std::sync::Arc::new(bytes.to_vec()))
    }

    /// A key for another use, derived from this one (HMAC-SHA256 of `label`).
    pub(crate) fn derive(&self, label: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, label)
    }

    /// Seals `state`.
    pub(crate) fn seal(&self, state: &RequestState) -> String {
        let payload = hex::encode(serde_json::to_vec(state).unwrap_or_default());
        let signed = format!("v1.{payload}");
        let mac = hmac_sha256(&self.0, signed.as_bytes());
        format!("{signed}.{}", hex::encode(mac))
    }

    /// Opens a sealed state: its payload when the MAC is right (not yet checked: expiry and
    /// what it names).
    pub(crate) fn open(&self, text: &str) -> Result<RequestState, &'static str> {
        let (signed, mac) = text.rsplit_once('.').ok_or("malformed requestState")?;
        let payload = signed.strip_prefix("v1.").ok_or("malformed requestState")?;
        let mut got = [0u8; 32];
        hex::decode_to_slice(mac, &mut got).map_err(|_| "malformed requestState")?;
        let want = hmac_sha256(&self.0, signed.as_bytes());
        if !ct_eq(&want, &got) {
            return Err("requestState is forged or tampered with (bad seal)");
        }
        let bytes = hex::decode(payload).map_err(|_| "malformed requestState")?;
        serde_json::from_slice(&bytes).map_err(|_| "malformed requestState")
    }
}

/// What a sealed `requestState` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestState {
    /// The review the call waits on.
    #[serde(rename = "r")]
    pub(crate) review: String,
    /// The call's fingerprint ([`fingerprint`]).
    #[serde(rename = "f")]
    pub(crate) call: String,
    /// The agent.
    #[serde(rename = "a")]
    pub(crate) agent: String,
    /// The end user's id.
    #[serde(rename = "u")]
    pub(crate) enduser: Option<String>,
    /// Expiry, Unix milliseconds.
    #[serde(rename = "e")]
    pub(crate) expires_ms: i64,
}

/// The fingerprint of a call: SHA-256 over the tool's name and the canonical JSON of its
/// arguments (keys sorted).
pub(crate) fn fingerprint(name: &str, args: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(crate::audit::canonical_json(args).as_bytes());
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_changed_state_breaks_the_seal() {
        let k = SealKey::from_bytes(&[7u8; 32]);
        let s = RequestState {
            review: "r1".into(),
            call: "f".into(),
            agent: "a".into(),
            enduser: Some("u".into()),
            expires_ms: 5,
        };
        let text = k.seal(&s);
        assert_eq!(k.open(&text).unwrap(), s);
        let mut bytes = text.clone().into_bytes();
        bytes[5] = if bytes[5] == b'0' { b'1' } else { b'0' };
        assert!(k.open(&String::from_utf8(bytes).unwrap()).is_err());
        assert!(SealKey::from_bytes(&[8u8; 32]).open(&text).is_err());
        assert!(k.open("junk").is_err());
    }
}
