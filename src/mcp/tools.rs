//! The tools file: tags by tool-name glob, hidden tools, and tags from MCP annotations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::GlobMatcher;
use serde::Deserialize;
use serde_json::Value;

/// Errors of loading a tools file.
#[derive(Debug, thiserror::Error)]
pub enum ToolsFileError {
    /// The file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A glob is invalid.
    #[error("{path}: {at}: invalid glob \"{glob}\": {message}")]
    Glob {
        /// The file.
        path: PathBuf,
        /// JSON path of the glob.
        at: String,
        /// The glob.
        glob: String,
        /// Why.
        message: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tools: BTreeMap<String, RawEntry>,
    #[serde(default)]
    hide: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEntry {
    #[serde(default)]
    tags: Vec<String>,
    /// Ignore the server's annotation hints for these tools (they are untrusted).
    #[serde(default)]
    ignore_hints: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    glob: GlobMatcher,
    tags: Vec<String>,
    ignore_hints: bool,
}

/// A compiled tools file: `{"tools": {"<glob>": {"tags": [...], "ignoreHints"?: bool}},
/// "hide": ["<glob>"]}`. Globs match tool names case-insensitively.
#[derive(Debug, Clone, Default)]
pub struct ToolsFile {
    entries: Vec<Entry>,
    hide: Vec<GlobMatcher>,
}

/// The annotation hints and the tags they give.
const HINTS: [(&str, &str); 4] = [
    ("readOnlyHint", "mcp:read-only"),
    ("destructiveHint", "mcp:destructive"),
    ("idempotentHint", "mcp:idempotent"),
    ("openWorldHint", "mcp:open-world"),
];

impl ToolsFile {
    /// Loads and compiles a tools file.
    pub fn load(path: &Path) -> Result<ToolsFile, ToolsFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ToolsFileError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::parse(&text, path)
    }

    /// Compiles a tools file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ToolsFile, ToolsFileError> {
        let raw: RawFile = serde_json::from_str(text).map_err(|e| ToolsFileError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let glob = |g: &str, at: String| {
            crate::policy::glob_matcher(g).map_err(|e| ToolsFileError::Glob {
                path: path.to_path_buf(),
                at,
                glob: g.to_string(),
                message: e.kind().to_string(),
            })
        };
        let mut entries = Vec::with_capacity(raw.tools.len());
        for (g, e) in raw.tools {
            entries.push(Entry {
                glob: glob(&g, format!("tools[{g:?}]"))?,
                tags: e.tags,
                ignore_hints: e.ignore_hints,
            });
        }
        let hide = raw
            .hide
            .iter()
            .enumerate()
            .map(|(i, g)| glob(g, format!("hide[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(ToolsFile { entries, hide })
    }

    /// Whether the tool is hidden from the client.
    pub fn is_hidden(&self, name: &str) -> bool {
        let lc = name.to_lowercase();
        self.hide.iter().any(|g| g.is_match(&lc))
    }

    /// The tool's tags: those the file gives its name ∪ those of its MCP `annotations`
    /// (unless a matching entry sets `ignoreHints`). Sorted, without duplicates.
    pub fn tags(&self, name: &str, annotations: Option<&Value>) -> Vec<String> {
        let lc = name.to_lowercase();
        let mut tags = Vec::new();
        let mut ignore_hints = false;
        for e in self.entries.iter().filter(|e| e.glob.is_match(&lc)) {
            tags.extend(e.tags.iter().cloned());
            ignore_hints |= e.ignore_hints;
        }
        if !ignore_hints && let Some(a) = annotations {
            for (hint, tag) in HINTS {
                if a.get(hint).and_then(Value::as_bool) == Some(true) {
                    tags.push(tag.to_string());
                }
            }
        }
        tags.sort();
        tags.dedup();
        tags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(text: &str) -> ToolsFile {
        ToolsFile::parse(text, Path::new("tools.json")).unwrap()
    }

    #[test]
    fn tags_union_globs_and_hints() {
        let f = file(r#"{"tools": {"read_*": {"tags": ["read"]}, "*": {"tags": ["fs"]}}}"#);
        let ann = json!({"readOnlyHint": true, "openWorldHint": false});
        assert_eq!(
            f.tags("Read_File", Some(&ann)),
            ["fs", "mcp:read-only", "read"]
        );
        assert_eq!(f.tags("write", None), ["fs"]);
    }

    #[test]
    fn ignore_hints_overrides_annotations() {
        let f = file(r#"{"tools": {"evil": {"tags": ["write"], "ignoreHints": true}}}"#);
        let ann = json!({"readOnlyHint": true});
        assert_eq!(f.tags("evil", Some(&ann)), ["write"]);
    }

    #[test]
    fn hide_matches_case_insensitively() {
        let f = file(r#"{"hide": ["secret_*"]}"#);
        assert!(f.is_hidden("SECRET_tool"));
        assert!(!f.is_hidden("public"));
    }

    #[test]
    fn errors_name_file_and_path() {
        let e = ToolsFile::parse(r#"{"hide": ["a[" ]}"#, Path::new("t.json")).unwrap_err();
        assert!(e.to_string().contains("t.json: hide[0]"), "{e}");
        let e = ToolsFile::parse(r#"{"tool": {}}"#, Path::new("t.json")).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
