//! The 2026-07-28 stateless path: a request's run comes from its
//! `_meta["dev.toolgate/runId"]` (a run inside the caller's token) or is the token's own;
//! `server/discover` and `subscriptions/listen` are answered here.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::super::frame::Frame;
use super::super::jsonrpc::{self, Kind};
use super::super::tokens::Identity;
use super::session::Session;
use super::stream::{answer, sse};
use super::{RUN_META, Refusal, Server, checks, json_response, rpc_error, upstream_failed};

impl Server {
    pub(super) async fn modern_run(
        &self,
        msg: &Frame,
        token: usize,
        who: &Identity,
    ) -> Result<Arc<Session>, Refusal> {
        let run = msg
            .pointer("/params/_meta")
            .and_then(|m| m.get(RUN_META))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty() && r.len() <= 256)
            .map(str::to_owned);
        let Some(run) = run else {
            return self
                .recorded_run(token, who, None)
                .await
                .map_err(upstream_failed);
        };
        if self.book.shared() {
            // Shared with the other replicas: a record, handed over between calls.
            return self
                .recorded_run(token, who, Some(run))
                .await
                .map_err(upstream_failed);
        }
        let key = (token, run.clone());
        let cap = self.listen.max_sessions_per_token;
        let held = |runs: &HashMap<(usize, String), Arc<Session>>| {
            runs.iter()
                .filter(|((t, r), s)| *t == token && !r.is_empty() && !s.is_closed())
                .count()
        };
        {
            let runs = self.runs.lock();
            if let Some(s) = runs.get(&key)
                && !s.is_closed()
            {
                s.touch();
                return Ok(s.clone());
            }
            if held(&runs) >= cap {
                return Err(checks::too_many_sessions(cap));
            }
        }
        // Checked before an upstream of its own (`--upstream-per session`) is started.
        let scoped = self.scoped_run(token, &run);
        let hub = self
            .ups
            .for_session(token, &scoped)
            .await
            .map_err(upstream_failed)?;
        let mut runs = self.runs.lock();
        if let Some(s) = runs.get(&key)
            && !s.is_closed()
        {
            s.touch();
            return Ok(s.clone());
        }
        if held(&runs) >= cap {
            return Err(checks::too_many_sessions(cap));
        }
        let s = Session::open(self.config(who, Some(scoped)), &hub, token, None, false);
        runs.insert(key, s.clone());
        Ok(s)
    }
}

/// A 2026-07-28 request: stateless, its run from its `_meta` or its token.
pub(super) async fn post(srv: &Arc<Server>, msg: Frame, token: usize, who: &Identity) -> Response {
    match jsonrpc::kind(&msg) {
        Kind::Request("server/discover") => {
            let id = msg
                .id_text()
                .map(|t| t.into_owned())
                .unwrap_or("null".into());
            json_response(
                StatusCode::OK,
                jsonrpc::result_to(
                    &id,
                    &checks::discover_complete(srv.ups.main.discover_result()),
                ),
            )
        }
        Kind::Request("subscriptions/listen") => {
            let s = match srv.modern_run(&msg, token, who).await {
                Ok(s) => s,
                Err(r) => return *r,
            };
            let rx = s.listen(
                msg.get("id").cloned().unwrap_or(Value::Null),
                msg.get("params"),
            );
            sse(rx, None)
        }
        Kind::Request("initialize") => rpc_error(
            StatusCode::BAD_REQUEST,
            &msg.id_text()
                .map(|t| t.into_owned())
                .unwrap_or("null".into()),
            jsonrpc::INVALID_REQUEST,
            "2026-07-28 has no initialize",
        ),
        Kind::Request(_) => {
            let s = match srv.modern_run(&msg, token, who).await {
                Ok(s) => s,
                Err(r) => return *r,
            };
            answer(s.request(msg, true, false).await).await
        }
        Kind::Notification(_) => {
            // 2026-07-28 defines no client notifications over HTTP (closing a stream cancels).
            StatusCode::ACCEPTED.into_response()
        }
        Kind::Response | Kind::Other => rpc_error(
            StatusCode::BAD_REQUEST,
            "null",
            jsonrpc::INVALID_REQUEST,
            "a client sends requests (2026-07-28 has no server requests to answer)",
        ),
    }
}
