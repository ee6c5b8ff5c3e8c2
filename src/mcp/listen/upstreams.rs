//! `--upstream-per shared|token|session`: which upstream process a session's requests go to.
//! Shared (the default): the one started at boot, for every client. Per token (or per
//! session): one more process (or HTTP upstream session) for each token (or each session),
//! started on first use — so that a server that asks its client things (sampling, elicitation,
//! roots) or reports to it (logging) always knows which client it serves.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::super::hub::Hub;
use super::super::transport::Link;
use super::super::{CHILD_GRACE, Upstream};

/// How upstream processes are shared by the clients of `--listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamPer {
    /// One upstream for every client.
    #[default]
    Shared,
    /// One upstream per token.
    Token,
    /// One upstream per 2025-11-25 session or 2026-07-28 run.
    Session,
}

/// The upstreams of the clients.
pub(super) struct Upstreams {
    /// The one started at boot (answers `server/discover`; the shared one).
    pub(super) main: Arc<Hub>,
    per: UpstreamPer,
    upstream: Upstream,
    max_message_bytes: usize,
    hubs: Mutex<HashMap<String, Arc<OnceCell<Arc<Hub>>>>>,
    links: Mutex<HashMap<String, Link>>,
}

impl Upstreams {
    pub(super) fn new(
        main: Arc<Hub>,
        per: UpstreamPer,
        upstream: Upstream,
        max_message_bytes: usize,
    ) -> Upstreams {
        Upstreams {
            main,
            per,
            upstream,
            max_message_bytes,
            hubs: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// The upstream of a session of `token` (`session`: its id, or its run's key).
    pub(super) async fn for_session(
        &self,
        token: usize,
        session: &str,
    ) -> Result<Arc<Hub>, String> {
        let key = match self.per {
            UpstreamPer::Shared => return Ok(self.main.clone()),
            UpstreamPer::Token => format!("t{token}"),
            UpstreamPer::Session => format!("s{token}:{session}"),
        };
        let cell = self.hubs.lock().entry(key.clone()).or_default().clone();
        cell.get_or_try_init(|| async {
            let mut link = super::super::connect_upstream(&self.upstream, self.max_message_bytes)
                .await
                .map_err(|e| e.to_string())?;
            let (hub, _gone) = Hub::start(&mut link);
            hub.set_dedicated();
            self.links.lock().insert(key.clone(), link);
            if let Err(e) = hub.initialize().await {
                self.forget(&key).await;
                return Err(e);
            }
            Ok(hub)
        })
        .await
        .cloned()
    }

    /// Stops the per-session upstreams no session uses any more.
    pub(super) async fn reap(&self) {
        if self.per != UpstreamPer::Session {
            return;
        }
        let unused: Vec<String> = self
            .hubs
            .lock()
            .iter()
            .filter(|(_, c)| c.get().is_some_and(|h| h.unused()))
            .map(|(k, _)| k.clone())
            .collect();
        for k in unused {
            self.forget(&k).await;
        }
    }

    async fn forget(&self, key: &str) {
        self.hubs.lock().remove(key);
        let link = self.links.lock().remove(key);
        if let Some(link) = link {
            stop(link).await;
        }
    }

    /// Stops every upstream of its own (not the main one).
    pub(super) async fn stop_all(&self) {
        self.hubs.lock().clear();
        let links: Vec<Link> = self.links.lock().drain().map(|(_, l)| l).collect();
        futures::future::join_all(links.into_iter().map(stop)).await;
    }
}

/// Closes an upstream's input and waits a little for the child, then kills it.
async fn stop(mut link: Link) {
    drop(link.tx);
    if let Some(mut child) = link.child.take()
        && tokio::time::timeout(CHILD_GRACE, child.wait())
            .await
            .is_err()
    {
        let _ = child.kill().await;
    }
}
