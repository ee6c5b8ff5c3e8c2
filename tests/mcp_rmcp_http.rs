//! The gateway in front of a fixture server written with rmcp and served by rmcp's streamable
//! HTTP server on loopback (`--upstream URL`).
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;

use std::sync::Arc;

use mcp_client::{Proxy, Setup, code, text};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

/// Two tools: `echo` (no annotations) and `delete_note` (destructiveHint).
#[derive(Clone)]
struct Fixture;

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "rmcp-fixture", "version": "1.0.0"}
        }))
        .expect("a valid ServerConfig")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        Ok(serde_json::from_value(json!({"tools": [
            {"name": "echo", "description": "Echoes", "inputSchema": schema},
            {"name": "delete_note", "description": "Deletes", "inputSchema": schema,
             "annotations": {"destructiveHint": true}}
        ]}))
        .expect("a valid ListToolsResult"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = serde_json::to_value(&request.arguments).unwrap_or_default();
        let text = format!("{}: {}", request.name, args["text"].as_str().unwrap_or(""));
        let result: CallToolResult =
            serde_json::from_value(json!({"content": [{"type": "text", "text": text}]}))
                .expect("a valid CallToolResult");
        Ok(result.into())
    }
}

/// Serves the fixture on a loopback port from its own runtime; returns the endpoint.
fn serve() -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let service = StreamableHttpService::new(
                || Ok(Fixture),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tx.send(format!("http://{addr}/mcp")).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

#[test]
fn an_rmcp_fixture_over_streamable_http_is_governed() {
    let url = serve();
    let s = Setup::new();
    let mut args = s.args();
    args.extend(["--upstream".to_string(), url]);
    let mut p = Proxy::start(&args, &[]);
    let init = p.initialize_with("2025-06-18", json!({}));
    assert_eq!(init["serverInfo"]["name"], "rmcp-fixture");
    let list = p.request("tools/list", json!({}));
    assert_eq!(
        list["result"]["tools"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );

    let r = p.call("echo", json!({"text": "over rmcp"}));
    assert_eq!(text(&r), "echo: over rmcp", "{r}");
    let r = p.call("delete_note", json!({"text": "n1"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert_eq!(r["result"]["_meta"]["toolgate"]["ruleId"], "no-destructive");

    assert_eq!(p.finish().code(), Some(0));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}
