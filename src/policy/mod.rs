//! The policy language: types, parsing with validation, and compilation.
//!
//! Loading a policy is parse → validate → compile. [`parse_policy`] gives a [`Policy`] or every
//! problem in the document as [`PolicyErrors`], each naming the file, the JSON path and the
//! problem. [`CompiledPolicies::compile`] turns one or more policies into the form the engine
//! evaluates.
//!
//! ```
//! use toolgate::policy::{parse_policy, CompiledPolicies};
//! let err = parse_policy(r#"{"rules": [{"name": "x", "selector": {"phase": "tool.before"},
//!     "condition": {"kind": "toolName", "op": "eq", "value": "a"},
//!     "effect": {"type": "blok"}}]}"#, None).unwrap_err();
//! assert_eq!(err.to_string(), r#"rules[0].effect.type: "blok" is not one of "allow", "hitl", "block""#);
//! ```

mod compile;
mod error;
mod parse;
mod sensitive_compiled;
mod serialize;
mod types;

use std::path::{Path, PathBuf};

pub use compile::CompiledPolicies;
pub(crate) use compile::*;
pub use error::{PolicyError, PolicyErrors};
pub use parse::{
    CONDITION_KINDS, LLM_CONDITION_KINDS, MAX_CONDITION_DEPTH, parse_policy, parse_policy_value,
    slug,
};
pub(crate) use sensitive_compiled::*;
pub(crate) use serialize::json_number;
pub use types::*;

/// Reads and parses one policy file.
pub fn load_policy_file(path: &Path) -> Result<Policy, PolicyErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        PolicyErrors::single(
            Some(path.to_path_buf()),
            "",
            format!("cannot read the file: {e}"),
        )
    })?;
    parse_policy(&text, Some(path))
}

/// Expands paths into policy files: a file is taken as is; a folder yields its `*.json` files
/// (sorted, not recursive), except policy test files (`*.tests.json`).
pub fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, PolicyErrors> {
    expand_folders(paths, |name| {
        name.ends_with(".json") && !name.ends_with(".tests.json")
    })
    .map_err(|(p, e)| PolicyErrors::single(Some(p), "", format!("cannot read the folder: {e}")))
}

/// Expands paths: a file is taken as is; a folder yields its files (sorted, not recursive)
/// whose name `keep` accepts. On error, the folder that could not be read.
pub(crate) fn expand_folders(
    paths: &[PathBuf],
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<PathBuf>, (PathBuf, std::io::Error)> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| (p.clone(), e))?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file() && f.file_name().and_then(|n| n.to_str()).is_some_and(&keep)
                })
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Loads policy files (folders expanded by [`policy_files`]) and compiles them into one rule
/// set. Every error of every file is reported.
pub fn load_policies(paths: &[PathBuf]) -> Result<CompiledPolicies, PolicyErrors> {
    let files = policy_files(paths)?;
    let mut policies = Vec::new();
    let mut errors = Vec::new();
    for f in &files {
        match load_policy_file(f) {
            Ok(p) => policies.push(p),
            Err(e) => errors.extend(e.0),
        }
    }
    if !errors.is_empty() {
        return Err(PolicyErrors(errors));
    }
    let names: Vec<Option<&Path>> = files.iter().map(|f| Some(f.as_path())).collect();
    CompiledPolicies::compile(policies, &names)
}
