//! A call's fingerprint: what a review is keyed by.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The fingerprint of a call: SHA-256 hex of agent id, rule id, tool name, canonical JSON of
/// the args and end-user id, separated by U+001F.
pub fn fingerprint(
    agent_id: &str,
    rule_id: &str,
    tool_name: &str,
    args: &Value,
    enduser_id: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    for part in [agent_id, rule_id, tool_name] {
        h.update(part.as_bytes());
        h.update([0x1f]);
    }
    // The audit trail's canonical form: sorted keys, and `1.0` and `1` are the same number.
    h.update(crate::audit::canonical_json(args).as_bytes());
    h.update([0x1f]);
    h.update(enduser_id.unwrap_or("").as_bytes());
    hex::encode(h.finalize())
}

/// The fingerprint of a call whose arguments the trail holds redacted: `redacted_fp` (the
/// [`fingerprint`] of the redacted arguments) extended by an HMAC-SHA256, under the engine's
/// fingerprint key, of the real arguments' canonical JSON. Two calls that differ only inside
/// a redacted span get different fingerprints (an approval of one does not approve the other),
/// while the fingerprint written in the trail cannot be checked against a guess of the
/// redacted value without the key (held in memory, never written).
pub(crate) fn keyed_fingerprint(redacted_fp: &str, key: &[u8], real_args: &Value) -> String {
    let mac =
        crate::engine::hitl::notify::sign(key, crate::audit::canonical_json(real_args).as_bytes());
    let mut h = Sha256::new();
    h.update(redacted_fp.as_bytes());
    h.update([0x1f]);
    h.update(mac.as_bytes());
    hex::encode(h.finalize())
}
