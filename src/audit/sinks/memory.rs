//! [`MemorySink`]: keeps events in memory (tests, embedding).

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::audit::{AuditError, AuditEvent, AuditSink};

/// Keeps every event it receives, in order. For tests and for callers that inspect the trail.
#[derive(Debug, Default)]
pub struct MemorySink {
    events: Mutex<Vec<Arc<AuditEvent>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }
    /// A copy of the events received so far.
    pub fn events(&self) -> Vec<Arc<AuditEvent>> {
        self.events.lock().clone()
    }
    /// How many events were received.
    pub fn len(&self) -> usize {
        self.events.lock().len()
    }
    /// Whether no event was received.
    pub fn is_empty(&self) -> bool {
        self.events.lock().is_empty()
    }
    /// Forgets the events received so far.
    pub fn clear(&self) {
        self.events.lock().clear();
    }
}

#[async_trait]
impl AuditSink for MemorySink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        self.events.lock().extend(events.iter().cloned());
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}
