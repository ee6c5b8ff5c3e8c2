//! The signature a notification carries: HMAC-SHA256 over the timestamp and the body.

use sha2::{Digest, Sha256};

#[cfg(doc)]
use super::SIGNATURE_HEADER;

/// The signature a notification carries in [`SIGNATURE_HEADER`] (without `sha256=`):
/// HMAC-SHA256 under `key` of the timestamp header's value, a `.`, and the raw body.
pub fn delivery_signature(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut msg = Vec::with_capacity(timestamp.len() + 1 + body.len());
    msg.extend_from_slice(timestamp.as_bytes());
    msg.push(b'.');
    msg.extend_from_slice(body);
    sign(key, &msg)
}

/// HMAC-SHA256 of `body` under `key` (RFC 2104), hex.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| -> [u8; BLOCK] { k.map(|x| x ^ b) };
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(body)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}
