//! Reading a collector store (e.g. PostgreSQL) for a what-if replay run by run: the runs are
//! listed first ([`EventStore::run_heads`]: agent, run id, start — never events) and each
//! run's chain is verified page by page; a run's events are then read a page at a time when
//! the replay reaches it, so memory is bounded by the runs under way at once (a page of each),
//! not by the store.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use tokio::runtime::{Handle, RuntimeFlavor};

use super::WhatIfFilter;
use super::event_lines::Events;
use super::rebuild::{RunHead, RunSource};
use crate::audit::AuditEvent;
use crate::audit::store::{EventStore, RunHeadQuery, StoreError};

/// Runs listed per [`EventStore::run_heads`] page.
const HEADS_PAGE: usize = 10_000;
/// Events a run's reader fetches at a time.
const EVENTS_PAGE: usize = 64;

/// A store's runs indexed for [`super::what_if_store`] by [`index_store`]: per run its agent,
/// id and seq-0 event — no events.
pub struct StoreTrail {
    /// Runs whose stored chain does not verify, by (agent, run), with the first break.
    pub broken: BTreeMap<(String, String), String>,
    /// Problems met while reading, for people (the first 100).
    pub notes: Vec<String>,
    heads: Vec<RunHead>,
    store: Arc<dyn EventStore>,
}

impl std::fmt::Debug for StoreTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTrail")
            .field("runs", &self.heads.len())
            .field("broken", &self.broken)
            .field("notes", &self.notes)
            .finish_non_exhaustive()
    }
}

impl StoreTrail {
    /// Runs found.
    pub fn runs(&self) -> usize {
        self.heads.len()
    }
}

/// The runtime a store's runs are read on while the replay iterates: the replay's own, which
/// must be multi-threaded (a page is fetched with [`tokio::task::block_in_place`]).
pub(super) fn reading_runtime() -> Result<Handle, StoreError> {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => Ok(h),
        _ => Err(StoreError::BadRequest(
            "a what-if replay over a store runs inside a multi-thread tokio runtime".into(),
        )),
    }
}

/// Lists the runs `filter` selects in `store` and verifies each one's stored chain (page by
/// page: memory does not grow with a run). Must be awaited inside a multi-thread tokio
/// runtime, as must [`super::what_if_store`].
pub async fn index_store(
    store: Arc<dyn EventStore>,
    filter: &WhatIfFilter,
) -> Result<StoreTrail, StoreError> {
    reading_runtime()?;
    let mut query = RunHeadQuery {
        agent_id: filter.agent.clone(),
        since: filter.since,
        after: None,
        limit: HEADS_PAGE,
    };
    let mut heads = Vec::new();
    loop {
        let page = store.run_heads(&query).await?;
        heads.extend(page.runs.into_iter().map(|h| RunHead {
            agent_id: h.agent_id,
            run_id: h.run_id,
            first: h.first,
        }));
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    // Stores list runs in byte order; the merge relies on (agent, run id) order.
    heads.sort_by(|a, b| (&a.agent_id, &a.run_id).cmp(&(&b.agent_id, &b.run_id)));
    heads.dedup_by(|a, b| a.agent_id == b.agent_id && a.run_id == b.run_id);
    let mut broken = BTreeMap::new();
    let mut notes = Vec::new();
    for head in &heads {
        match store.verify_run(Some(&head.agent_id), &head.run_id).await {
            Ok(check) => {
                if let Some(b) = check.breaks.first() {
                    let at = b.seq.map_or_else(String::new, |s| format!("seq {s}: "));
                    broken.insert(
                        (head.agent_id.clone(), head.run_id.clone()),
                        format!("{at}{}", b.message),
                    );
                }
            }
            Err(StoreError::NotFound(_)) => {}
            Err(e) => {
                if notes.len() < 100 {
                    notes.push(format!(
                        "run {:?} of agent {:?}: cannot verify: {e}",
                        head.run_id, head.agent_id
                    ));
                }
                broken.insert(
                    (head.agent_id.clone(), head.run_id.clone()),
                    format!("cannot verify: {e}"),
                );
            }
        }
    }
    Ok(StoreTrail {
        broken,
        notes,
        heads,
        store,
    })
}

impl StoreTrail {
    pub(super) fn into_source(self, filter: &WhatIfFilter, handle: Handle) -> StoreRuns {
        StoreRuns {
            filter: WhatIfFilter {
                exclude: BTreeMap::new(),
                ..filter.clone()
            },
            heads: self.heads,
            store: self.store,
            handle,
        }
    }
}

/// An indexed store as a [`RunSource`]: a run's events are fetched a page at a time as the
/// replay consumes them.
pub(super) struct StoreRuns {
    heads: Vec<RunHead>,
    store: Arc<dyn EventStore>,
    handle: Handle,
    filter: WhatIfFilter,
}

impl RunSource for StoreRuns {
    fn heads(&self) -> &[RunHead] {
        &self.heads
    }

    fn open(&mut self, i: usize) -> Events {
        let Some(head) = self.heads.get(i) else {
            return Box::new(std::iter::empty());
        };
        Box::new(StoreRunReader {
            store: self.store.clone(),
            handle: self.handle.clone(),
            agent_id: head.agent_id.clone(),
            run_id: head.run_id.clone(),
            filter: self.filter.clone(),
            after: None,
            done: false,
            window: VecDeque::new(),
        })
    }
}

/// One run's events from the store, in seq order (stores key events by seq, so each seq
/// comes once), a page at a time.
struct StoreRunReader {
    store: Arc<dyn EventStore>,
    handle: Handle,
    agent_id: String,
    run_id: String,
    filter: WhatIfFilter,
    after: Option<u64>,
    done: bool,
    window: VecDeque<AuditEvent>,
}

impl StoreRunReader {
    /// Fetches the next page (on the replay's runtime, leaving the worker while it waits).
    fn refill(&mut self) {
        let (store, handle) = (&self.store, &self.handle);
        let (agent, run, after) = (self.agent_id.as_str(), self.run_id.as_str(), self.after);
        let page = tokio::task::block_in_place(|| {
            handle.block_on(store.run_page(Some(agent), run, after, EVENTS_PAGE))
        });
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    "what-if: reading run {:?} of agent {:?}: {e}; the rest of it is not read",
                    self.run_id,
                    self.agent_id
                );
                self.done = true;
                return;
            }
        };
        for line in &page.lines {
            match serde_json::from_str::<AuditEvent>(line) {
                Ok(e) if self.filter.keeps(&e) => self.window.push_back(e),
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    "what-if: run {:?}: a stored line is not an audit event ({e}); skipped",
                    self.run_id
                ),
            }
        }
        match page.next {
            Some(n) => self.after = Some(n),
            None => self.done = true,
        }
    }
}

impl Iterator for StoreRunReader {
    type Item = AuditEvent;

    fn next(&mut self) -> Option<AuditEvent> {
        loop {
            if let Some(e) = self.window.pop_front() {
                return Some(e);
            }
            if self.done {
                return None;
            }
            self.refill();
        }
    }
}
