//! Signed runs: Ed25519 keys, key files, and the signature carried by `run.ended` and
//! `checkpoint` events.
//!
//! The signed message of an event is its *signing hash*: the SHA-256 (lowercase hex, as
//! in `hash`) of the canonical JSON of the event without `hash`, `signature` and `keyId`.
//! The event then carries `signature` (the Ed25519 signature of the 64 ASCII bytes of that hex
//! text, 128 lowercase hex digits) and `keyId` ([`key_id`] of the public key), and its `hash`
//! is computed as for any event, over everything but `hash` (so over `signature` and `keyId`
//! too).
//!
//! Key files are PEM: the private key as PKCS#8 (`-----BEGIN PRIVATE KEY-----`), the public
//! key as SubjectPublicKeyInfo (`-----BEGIN PUBLIC KEY-----`), the forms OpenSSL reads and
//! writes for Ed25519.

use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::AuditError;
use super::event::write_canonical_members;

/// The body field holding an event's signature.
pub const SIGNATURE_FIELD: &str = "signature";
/// The body field naming the key that signed an event.
pub const KEY_ID_FIELD: &str = "keyId";

/// The id of a public key: `ed25519:` and the first 16 hex digits of the SHA-256 of the key's
/// 32 raw bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("ed25519:{}", &hex::encode(digest)[..16])
}

/// A private key that signs runs.
#[derive(Clone)]
pub struct RunSigner {
    key: SigningKey,
    key_id: String,
}

impl std::fmt::Debug for RunSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSigner")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl RunSigner {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> RunSigner {
        RunSigner::from_key(SigningKey::generate(&mut rand::rngs::OsRng))
    }

    /// A signer from a 32-byte Ed25519 seed (for tests and key stores).
    pub fn from_seed(seed: &[u8; 32]) -> RunSigner {
        RunSigner::from_key(SigningKey::from_bytes(seed))
    }

    fn from_key(key: SigningKey) -> RunSigner {
        let key_id = key_id(&key.verifying_key());
        RunSigner { key, key_id }
    }

    /// Reads a private key file (PKCS#8 PEM, as `toolgate keygen` writes).
    /// Reads at most [`MAX_KEY_FILE_BYTES`] of a regular file (see [`read_key_file`]) and warns
    /// (a `tracing` warning) when others than its owner may read it.
    pub fn from_file(path: &Path) -> Result<RunSigner, AuditError> {
        let text = read_key_file(path, true)?;
        let key = SigningKey::from_pkcs8_pem(&text).map_err(|e| {
            AuditError::Config(format!(
                "{}: not an Ed25519 private key (PKCS#8 PEM): {e}",
                path.display()
            ))
        })?;
        Ok(RunSigner::from_key(key))
    }

    /// The key's id, as written in `keyId`.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half.
    pub fn public_key(&self) -> RunVerifier {
        RunVerifier::from_key(self.key.verifying_key())
    }

    /// The signature (128 lowercase hex digits) of a signing hash (see the module docs).
    pub fn sign_hash(&self, signing_hash: &str) -> String {
        hex::encode(self.key.sign(signing_hash.as_bytes()).to_bytes())
    }

    /// Writes the private key to `path` (PKCS#8 PEM, mode 0600 on Unix, never over an existing
    /// file) and the public key to `path` + `.pub`.
    pub fn write_files(&self, path: &Path) -> Result<PathBuf, AuditError> {
        let private = self
            .key
            .to_pkcs8_pem(Default::default())
            .map_err(|e| AuditError::Config(format!("cannot encode the private key: {e}")))?;
        let public = self
            .key
            .verifying_key()
            .to_public_key_pem(Default::default())
            .map_err(|e| AuditError::Config(format!("cannot encode the public key: {e}")))?;
        let mut pub_path = path.as_os_str().to_owned();
        pub_path.push(".pub");
        let pub_path = PathBuf::from(pub_path);
        write_new(path, private.as_bytes(), true)?;
        write_new(&pub_path, public.as_bytes(), false)?;
        Ok(pub_path)
    }
}

fn write_new(path: &Path, bytes: &[u8], private: bool) -> Result<(), AuditError> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = opts.open(path).map_err(|e| AuditError::io(path, e))?;
    f.write_all(bytes).map_err(|e| AuditError::io(path, e))?;
    f.sync_all().map_err(|e| AuditError::io(path, e))
}

/// A public key that checks run signatures.
#[derive(Debug, Clone)]
pub struct RunVerifier {
    key: VerifyingKey,
    key_id: String,
}

/// Why a signature does not check out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `signature` or `keyId` is absent or not a string.
    #[error("signature or keyId missing or not a string")]
    Missing,
    /// The event names another key.
    #[error("signed with key {found}, not {expected}")]
    OtherKey {
        /// The `keyId` in the event.
        found: String,
        /// The id of the key checked against.
        expected: String,
    },
    /// `signature` is not 128 hex digits.
    #[error("signature is not 128 hex digits")]
    Encoding,
    /// The signature does not match the event's content.
    #[error("bad signature: the event, or an event before it, was changed after signing")]
    Invalid,
}

impl RunVerifier {
    fn from_key(key: VerifyingKey) -> RunVerifier {
        let key_id = key_id(&key);
        RunVerifier { key, key_id }
    }

    /// Reads a public key file (SubjectPublicKeyInfo PEM, as `toolgate keygen` writes to
    /// `KEY.pub`).
    /// Reads at most [`MAX_KEY_FILE_BYTES`] of a regular file (see [`read_key_file`]).
    pub fn from_file(path: &Path) -> Result<RunVerifier, AuditError> {
        let text = read_key_file(path, false)?;
        let key = VerifyingKey::from_public_key_pem(&text).map_err(|e| {
            AuditError::Config(format!(
                "{}: not an Ed25519 public key (PEM): {e}",
                path.display()
            ))
        })?;
        Ok(RunVerifier::from_key(key))
    }

    /// The key's id, as written in `keyId`.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Checks the signature of an event given as a JSON object (as stored).
    pub fn verify_event(&self, event: &Map<String, Value>) -> Result<(), SignatureError> {
        let (Some(Value::String(sig)), Some(Value::String(kid))) =
            (event.get(SIGNATURE_FIELD), event.get(KEY_ID_FIELD))
        else {
            return Err(SignatureError::Missing);
        };
        if *kid != self.key_id {
            return Err(SignatureError::OtherKey {
                found: kid.clone(),
                expected: self.key_id.clone(),
            });
        }
        let bytes: [u8; 64] = hex::decode(sig)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(SignatureError::Encoding)?;
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        let h = signing_hash(event);
        self.key
            .verify(h.as_bytes(), &signature)
            .map_err(|_| SignatureError::Invalid)
    }
}

/// The signing hash of an event given as a JSON object: SHA-256 (lowercase hex) of the
/// canonical JSON of the object without `hash`, `signature` and `keyId`.
pub fn signing_hash(event: &Map<String, Value>) -> String {
    let mut text = String::with_capacity(512);
    write_canonical_members(
        event
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "hash" | SIGNATURE_FIELD | KEY_ID_FIELD)),
        &mut text,
    );
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The largest key file read (a PEM Ed25519 key is about 120 bytes).
pub const MAX_KEY_FILE_BYTES: u64 = 8 * 1024;

/// Reads a key file: a regular file (a FIFO or device is refused before it is opened, so
/// nothing blocks), at most [`MAX_KEY_FILE_BYTES`] (a larger one is refused unread), not
/// empty. `private`: warns when the file's mode lets others than its owner read it.
pub fn read_key_file(path: &Path, private: bool) -> Result<String, AuditError> {
    use std::io::Read;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| AuditError::io(path, e))?;
    if !meta.is_file() {
        return Err(AuditError::Config(format!(
            "{shown}: not a regular file; a key is a small PEM file (`toolgate keygen` writes one)"
        )));
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(AuditError::Config(format!(
            "{shown}: too large for a key file ({} bytes; a PEM key is a few hundred)",
            meta.len()
        )));
    }
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                "{shown}: the private key is readable by other users (mode {:o}); \
                 `chmod 600 {shown}`",
                mode & 0o777
            );
        }
    }
    #[cfg(not(unix))]
    let _ = private;
    let file = std::fs::File::open(path).map_err(|e| AuditError::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| AuditError::io(path, e))?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(AuditError::Config(format!(
            "{shown}: too large for a key file (over {MAX_KEY_FILE_BYTES} bytes)"
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(AuditError::Config(format!(
            "{shown}: the file is empty; expected a PEM key (`toolgate keygen --out KEY` writes one)"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| AuditError::Config(format!("{shown}: not a PEM key (not text)")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sign_and_verify_roundtrip_through_files() {
        let dir = tempfile::tempdir().unwrap();
        let signer = RunSigner::from_seed(&[7; 32]);
        let key = dir.path().join("k");
        let pub_path = signer.write_files(&key).unwrap();
        assert!(signer.write_files(&key).is_err(), "never overwrites");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let signer2 = RunSigner::from_file(&key).unwrap();
        let verifier = RunVerifier::from_file(&pub_path).unwrap();
        assert_eq!(signer2.key_id(), verifier.key_id());
        assert!(verifier.key_id().starts_with("ed25519:"));

        let mut ev = json!({"a": 1, "hash": "x"}).as_object().unwrap().clone();
        let sig = signer2.sign_hash(&signing_hash(&ev));
        ev.insert(SIGNATURE_FIELD.into(), json!(sig));
        ev.insert(KEY_ID_FIELD.into(), json!(signer2.key_id()));
        assert_eq!(verifier.verify_event(&ev), Ok(()));
        ev.insert("a".into(), json!(2));
        assert_eq!(verifier.verify_event(&ev), Err(SignatureError::Invalid));
        let other = RunSigner::from_seed(&[8; 32]).public_key();
        assert!(matches!(
            other.verify_event(&ev),
            Err(SignatureError::OtherKey { .. })
        ));
        assert!(RunVerifier::from_file(&key).is_err());
    }
}
