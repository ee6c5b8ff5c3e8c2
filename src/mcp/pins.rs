//! Pinning of tool definitions: the SHA-256 of each tool's definition, first seen, in a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The fields of a tool definition that are pinned.
const PINNED_FIELDS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// SHA-256 hex of the canonical JSON of a tool definition's pinned fields (name, title,
/// description, inputSchema, outputSchema, annotations; absent ones left out).
pub fn definition_hash(tool: &Value) -> String {
    let mut m = Map::new();
    for k in PINNED_FIELDS {
        if let Some(v) = tool.get(k) {
            m.insert(k.to_string(), v.clone());
        }
    }
    crate::audit::sha256_hex(&crate::audit::canonical_json(&Value::Object(m)))
}

/// One tool's pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pin {
    /// The accepted definition's hash.
    pub sha256: String,
    /// The hash of a later, different definition, waiting to be accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_to: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinData {
    tools: BTreeMap<String, Pin>,
}

/// Errors of a pin file.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// Read, parse or write failed.
    #[error("pin file {path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// No pin for this tool.
    #[error("pin file {path}: no tool named \"{name}\"")]
    NotFound {
        /// The file.
        path: PathBuf,
        /// The tool.
        name: String,
    },
}

/// What a listing of a tool means for its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinCheck {
    /// Pinned just now (first listing) or unchanged.
    Ok,
    /// The definition differs from the pinned one; calls must be blocked.
    Changed {
        /// Whether this listing is the first to show this new definition.
        new: bool,
    },
}

/// The pin file (`--pin FILE`): `{"tools": {"<name>": {"sha256", "changedTo"?}}}`. Every
/// change rewrites it atomically (temp file, rename).
#[derive(Debug, Clone)]
pub struct PinFile {
    path: PathBuf,
}

impl PinFile {
    /// A pin file at `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        PinFile { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, message: impl std::fmt::Display) -> PinError {
        PinError::Io {
            path: self.path.clone(),
            message: message.to_string(),
        }
    }

    fn read(&self) -> Result<PinData, PinError> {
        match std::fs::read_to_string(&self.path) {
            Ok(s) if s.trim().is_empty() => Ok(PinData::default()),
            Ok(s) => serde_json::from_str(&s).map_err(|e| self.io(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinData::default()),
            Err(e) => Err(self.io(e)),
        }
    }

    fn write(&self, data: &PinData) -> Result<(), PinError> {
        let text = serde_json::to_string_pretty(data).map_err(|e| self.io(e))?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| self.io(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))
    }

    /// Every pin, by tool name.
    pub fn list(&self) -> Result<BTreeMap<String, Pin>, PinError> {
        Ok(self.read()?.tools)
    }

    /// Checks a listing of tools (name, definition hash) against the pins: pins tools seen for
    /// the first time, records changed definitions. One read and at most one write.
    pub fn observe(&self, tools: &[(String, String)]) -> Result<Vec<PinCheck>, PinError> {
        let mut data = self.read()?;
        let mut dirty = false;
        let mut out = Vec::with_capacity(tools.len());
        for (name, hash) in tools {
            let check = match data.tools.get_mut(name) {
                None => {
                    data.tools.insert(
                        name.clone(),
                        Pin {
                            sha256: hash.clone(),
                            changed_to: None,
                        },
                    );
                    dirty = true;
                    PinCheck::Ok
                }
                Some(pin) if pin.sha256 == *hash => {
                    if pin.changed_to.take().is_some() {
                        dirty = true;
                    }
                    PinCheck::Ok
                }
                Some(pin) => {
                    let new = pin.changed_to.as_deref() != Some(hash.as_str());
                    if new {
                        pin.changed_to = Some(hash.clone());
                        dirty = true;
                    }
                    PinCheck::Changed { new }
                }
            };
            out.push(check);
        }
        if dirty {
            self.write(&data)?;
        }
        Ok(out)
    }

    /// Whether `hash` is the accepted definition of `name` (re-reads the file, so an accept by
    /// another process is seen).
    pub fn is_accepted(&self, name: &str, hash: &str) -> Result<bool, PinError> {
        Ok(self
            .read()?
            .tools
            .get(name)
            .is_some_and(|p| p.sha256 == hash))
    }

    /// Accepts the changed definition of `name`: it becomes the pinned one.
    pub fn accept(&self, name: &str) -> Result<Pin, PinError> {
        let mut data = self.read()?;
        let pin = data.tools.get_mut(name).ok_or_else(|| PinError::NotFound {
            path: self.path.clone(),
            name: name.to_string(),
        })?;
        if let Some(h) = pin.changed_to.take() {
            pin.sha256 = h;
        }
        let out = pin.clone();
        self.write(&data)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_ignores_unpinned_fields_and_key_order() {
        let a = json!({"name": "t", "inputSchema": {"type": "object", "a": 1}, "_meta": {"x": 1}});
        let b = json!({"inputSchema": {"a": 1, "type": "object"}, "name": "t"});
        assert_eq!(definition_hash(&a), definition_hash(&b));
        let c = json!({"name": "t", "description": "now different"});
        assert_ne!(definition_hash(&a), definition_hash(&c));
    }

    #[test]
    fn observe_pins_then_detects_change_until_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let pins = PinFile::new(dir.path().join("pins.json"));
        let t = |h: &str| vec![("tool".to_string(), h.to_string())];
        assert_eq!(pins.observe(&t("h1")).unwrap(), [PinCheck::Ok]);
        assert_eq!(pins.observe(&t("h1")).unwrap(), [PinCheck::Ok]);
        assert_eq!(
            pins.observe(&t("h2")).unwrap(),
            [PinCheck::Changed { new: true }]
        );
        assert_eq!(
            pins.observe(&t("h2")).unwrap(),
            [PinCheck::Changed { new: false }]
        );
        assert!(!pins.is_accepted("tool", "h2").unwrap());
        assert_eq!(pins.accept("tool").unwrap().sha256, "h2");
        assert!(pins.is_accepted("tool", "h2").unwrap());
        assert_eq!(pins.observe(&t("h2")).unwrap(), [PinCheck::Ok]);
        assert!(matches!(
            pins.accept("nope"),
            Err(PinError::NotFound { .. })
        ));
    }
}
