//! Persisting aggregated results: the [`EvaluationStorageProvider`] trait, a JSONL file
//! provider and an in-memory provider for tests.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::error::EvalError;
use super::types::AggregatedEvaluationResult;

/// Where aggregated results go (PRD FR5). Implement this for databases, queues, …
#[async_trait]
pub trait EvaluationStorageProvider: Send + Sync {
    /// Identifier of the provider type (recorded in `evaluationConfigSnapshot.storageProviderType`).
    fn provider_type(&self) -> &str;

    /// Stores one result.
    async fn save_result(&self, result: &AggregatedEvaluationResult) -> Result<(), EvalError>;
}

/// Storage settings of a run configuration: `{"type": "jsonlFile", "path": "results.jsonl"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum StorageConfig {
    /// Append one JSON line per result to a file (parent directories are created).
    #[serde(alias = "jsonFile", alias = "JsonFile")]
    JsonlFile {
        /// The file to append to.
        path: PathBuf,
    },
}

impl StorageConfig {
    /// Builds the provider described by this config.
    pub fn build(&self) -> std::sync::Arc<dyn EvaluationStorageProvider> {
        match self {
            StorageConfig::JsonlFile { path } => std::sync::Arc::new(JsonlFileStorage::new(path)),
        }
    }
}

/// Appends each result as one line of JSON to a file (PRD: `JsonFileStorageProvider`).
/// Writes from concurrent runs are serialized so lines never interleave.
#[derive(Debug)]
pub struct JsonlFileStorage {
    path: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

impl JsonlFileStorage {
    /// A provider appending to `path`.
    pub fn new(path: impl AsRef<Path>) -> Self {
        JsonlFileStorage {
            path: path.as_ref().to_path_buf(),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The file results are appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl EvaluationStorageProvider for JsonlFileStorage {
    fn provider_type(&self) -> &str {
        "jsonlFile"
    }

    async fn save_result(&self, result: &AggregatedEvaluationResult) -> Result<(), EvalError> {
        let mut line = serde_json::to_string(result).map_err(|source| EvalError::Json {
            context: "serializing evaluation result".into(),
            source,
        })?;
        line.push('\n');
        let io_err = |source| EvalError::Io {
            action: "appending evaluation result to",
            path: self.path.display().to_string(),
            source,
        };
        let _guard = self.lock.lock().await;
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(io_err)?;
        }
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await
            .map_err(io_err)?;
        f.write_all(line.as_bytes()).await.map_err(io_err)?;
        f.flush().await.map_err(io_err)?;
        Ok(())
    }
}

/// Keeps results in memory (for tests and embedding).
#[derive(Debug, Default)]
pub struct MemoryStorage {
    results: parking_lot::Mutex<Vec<AggregatedEvaluationResult>>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the stored results, in the order they were saved.
    pub fn results(&self) -> Vec<AggregatedEvaluationResult> {
        self.results.lock().clone()
    }
}

#[async_trait]
impl EvaluationStorageProvider for MemoryStorage {
    fn provider_type(&self) -> &str {
        "memory"
    }

    async fn save_result(&self, result: &AggregatedEvaluationResult) -> Result<(), EvalError> {
        self.results.lock().push(result.clone());
        Ok(())
    }
}
