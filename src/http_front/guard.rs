//! What the front checks on each request before the server's router sees it: the `Host` (DNS
//! rebinding), and a deadline on the whole body.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::FrontConfig;

/// The error a request body gives when its deadline passed.
#[derive(Debug)]
pub struct BodyTimeout(Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body not received within {:?}", self.0)
    }
}

impl std::error::Error for BodyTimeout {}

/// Whether reading a request body failed because its deadline (the front's body timeout)
/// passed: the server should answer 408.
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// A request body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(r) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(r);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

struct Guard {
    check_host: bool,
    allowed: Vec<String>,
    body_timeout: Duration,
}

/// `app` behind the front's checks.
pub(super) fn wrap(app: axum::Router, config: &FrontConfig, local: SocketAddr) -> axum::Router {
    let guard = Arc::new(Guard {
        check_host: local.ip().is_loopback() || !config.allowed_hosts.is_empty(),
        allowed: config
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect(),
        body_timeout: config.body_timeout,
    });
    app.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let guard = guard.clone();
            async move { guard.check(req, next).await }
        },
    ))
}

impl Guard {
    async fn check(&self, req: Request, next: Next) -> Response {
        if self.check_host
            && let Some(host) = req.headers().get(header::HOST)
            && !self.host_allowed(host.as_bytes())
        {
            return (
                StatusCode::FORBIDDEN,
                "Host not allowed: this server answers loopback names only (see --allowed-host)",
            )
                .into_response();
        }
        let (parts, body) = req.into_parts();
        let body = if body.is_end_stream() {
            body
        } else {
            Body::new(DeadlineBody {
                inner: body,
                sleep: Box::pin(tokio::time::sleep(self.body_timeout)),
                limit: self.body_timeout,
            })
        };
        next.run(Request::from_parts(parts, body)).await
    }

    /// A loopback name (`localhost`, a loopback IP), with any port, or an allowed host.
    fn host_allowed(&self, raw: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(raw) else {
            return false;
        };
        let text = text.trim().to_ascii_lowercase();
        if self.allowed.contains(&text) {
            return true;
        }
        let Some(name) = host_name(&text) else {
            return false;
        };
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
        {
            return true;
        }
        self.allowed.iter().any(|a| a == name)
    }
}

/// The name of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`), `None` when it is
/// not one.
fn host_name(text: &str) -> Option<&str> {
    if text.is_empty() || text.contains(['/', '@', ' ', '\\']) {
        return None;
    }
    if text.starts_with('[') {
        let end = text.find(']')?;
        let rest = &text[end + 1..];
        if !(rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return Some(&text[..=end]);
    }
    match text.rsplit_once(':') {
        Some((name, port)) if is_port(port) && !name.contains(':') => Some(name),
        Some(_) => None,
        None => Some(text),
    }
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(allowed: &[&str]) -> Guard {
        Guard {
            check_host: true,
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            body_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn loopback_names_pass_and_others_need_allowed_host() {
        let g = guard(&["gw.example:8443", "console.internal"]);
        for ok in [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1:9",
            "127.8.0.1",
            "[::1]:80",
            "[::1]",
            "gw.example:8443",
            "console.internal:1234",
        ] {
            assert!(g.host_allowed(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:80",
            "gw.example:80",
            "127.0.0.1.evil.example",
            "localhost.evil.example:80",
            "user@localhost",
            "",
            "[::2]:80",
            "0.0.0.0",
            "localhost:80:80",
        ] {
            assert!(!g.host_allowed(bad.as_bytes()), "{bad}");
        }
    }
}
