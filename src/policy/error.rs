//! Errors of loading a policy: each names the file, the JSON path and the problem.

use std::fmt;
use std::path::PathBuf;

/// One problem found in a policy, e.g.
/// `policies/x.json: rules[3].condition.all[1].windows[0].start: "25:00" is not HH:MM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The file, when the policy came from one.
    pub file: Option<PathBuf>,
    /// JSON path of the offending value (empty for the whole document).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// Every problem found while loading one or more policies (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl PolicyErrors {
    /// The individual errors.
    pub fn errors(&self) -> &[PolicyError] {
        &self.0
    }

    pub(crate) fn single(
        file: Option<PathBuf>,
        path: impl Into<String>,
        msg: impl Into<String>,
    ) -> Self {
        PolicyErrors(vec![PolicyError {
            file,
            path: path.into(),
            message: msg.into(),
        }])
    }
}

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
