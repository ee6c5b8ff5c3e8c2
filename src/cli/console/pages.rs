//! The console's HTML, as maud templates (checked at compile time; every interpolation is
//! escaped). No inline script or style: the strict Content-Security-Policy allows only the
//! script and style sheet the console serves itself.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use super::store::Snapshot;
use crate::engine::{EXPIRY_REVIEWER, Review, status_word};

/// What a page needs to know of its viewer.
pub struct Viewer<'a> {
    /// The reviewer's name.
    pub name: &'a str,
    /// The session's CSRF token.
    pub csrf: &'a str,
}

/// A whole page around `body`.
pub fn layout(title: &str, viewer: Option<&Viewer<'_>>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate console" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "toolgate console" }
                    @if let Some(v) = viewer {
                        span.who { "Signed in as " strong { (v.name) } }
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(v.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login page (`error`: why the last attempt failed).
pub fn login(csrf: &str, error: Option<&str>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            section.login {
                h1 { "Log in" }
                @if let Some(e) = error { p.error role="alert" { (e) } }
                form method="post" action="/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="token" { "Access token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button type="submit" { "Log in" }
                }
            }
        },
    )
}

/// The reviews page: the live part (`fragment`) in `#reviews`, which `console.js` replaces
/// from the server-sent events of `/events`.
pub fn index(viewer: &Viewer<'_>, snap: &Snapshot, now: DateTime<Utc>, runs: bool) -> Markup {
    layout(
        "Reviews",
        Some(viewer),
        html! {
            div #reviews data-live="/events" {
                (fragment(viewer, snap, now, runs))
            }
        },
    )
}

/// The live part of the reviews page: pending reviews, then decided ones.
pub fn fragment(viewer: &Viewer<'_>, snap: &Snapshot, now: DateTime<Utc>, runs: bool) -> Markup {
    html! {
        section.pending {
            h2 { "Waiting for review " span.count { (snap.pending.len()) @if snap.more_pending { "+" } } }
            @if snap.pending.is_empty() {
                p.empty { "No review is waiting." }
            }
            @for (i, r) in snap.pending.iter().enumerate() {
                (pending_card(viewer, r, snap.pending.len() - i - 1, now, runs))
            }
        }
        section.decided {
            h2 { "Decided" }
            @if snap.decided.is_empty() {
                p.empty { "Nothing decided yet." }
            } @else {
                table {
                    thead { tr { th { "Decision" } th { "By" } th { "When" } th { "Call" } th { "Comment" } } }
                    tbody {
                        @for r in &snap.decided {
                            tr.decided data-review-id=(r.id) {
                                td { span class={ "status " (status_word(r.status)) } { (status_word(r.status)) } }
                                td { (reviewer(r)) }
                                td { @if let Some(at) = r.decided_at { time datetime=(rfc(at)) { (ago(at, now)) } } }
                                td { code { (r.tool_name) } " by " code { (r.agent_id) } " · rule " code { (r.rule_id) } " "
                                     @if runs { a href=(run_href(r)) { "run" } } }
                                td { (r.comment.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn reviewer(r: &Review) -> Markup {
    match r.decided_by.as_deref() {
        Some(EXPIRY_REVIEWER) => {
            html! { em { "expired (" (r.on_expire.map(|o| o.as_str()).unwrap_or("")) ")" } }
        }
        Some(by) => html! { (by) },
        None => html! { em { "unknown" } },
    }
}

fn pending_card(
    viewer: &Viewer<'_>,
    r: &Review,
    later: usize,
    now: DateTime<Utc>,
    runs: bool,
) -> Markup {
    html! {
        article.review #{ "review-" (r.id) } data-review-id=(r.id) {
            header {
                h3 { "Call " code { (r.tool_name) } }
                span.age { "raised " time datetime=(rfc(r.created_at)) { (ago(r.created_at, now)) } }
            }
            dl {
                dt { "Agent" } dd { code { (r.agent_id) } }
                dt { "End user" } dd { @if let Some(u) = &r.enduser_id { code { (u) } } @else { em { "none" } } }
                dt { "Rule" } dd { code { (r.rule_id) } @if let Some(reason) = &r.reason { " — " (reason) } }
                dt { "Run" } dd {
                    @if runs { a href=(run_href(r)) { code { (r.run_id) } } } @else { code { (r.run_id) } }
                    " · call " code { (r.call_id) }
                }
                dt { "Waiting" } dd { (later) " later " (if later == 1 { "call" } else { "calls" }) " waiting behind it" }
                @if let Some(exp) = r.expires_at {
                    dt { "Expires" } dd {
                        time datetime=(rfc(exp)) { (until(exp, now)) }
                        " (then " (r.on_expire.map(|o| if o == crate::policy::OnExpire::Allow { "approved" } else { "denied" }).unwrap_or("asked again")) ")"
                    }
                }
            }
            h4 { "Arguments" }
            pre.args { (pretty(&r.args)) }
            form.decide method="post" action={ "/reviews/" (r.id) "/decide" } {
                input type="hidden" name="csrf" value=(viewer.csrf);
                label { "Comment (optional) " textarea name="comment" rows="2" maxlength="2000" {} }
                div.buttons {
                    button.approve type="submit" name="verdict" value="approve" { "Approve" }
                    button.deny type="submit" name="verdict" value="deny" { "Deny" }
                }
            }
        }
    }
}

/// A message page (conflicts, errors) with a way back.
pub fn message(viewer: Option<&Viewer<'_>>, title: &str, text: &str) -> Markup {
    layout(
        title,
        viewer,
        html! {
            section.message {
                h1 { (title) }
                p role="alert" { (text) }
                p { a href="/" { "Back to the reviews" } }
            }
        },
    )
}

/// One row of a run page.
pub struct RunRow {
    /// `seq`.
    pub seq: u64,
    /// `ts`.
    pub ts: String,
    /// `kind`.
    pub kind: String,
    /// The body.
    pub body: Value,
}

/// A run's events in order, with its chain's verify status.
pub fn run_page(
    viewer: &Viewer<'_>,
    run_id: &str,
    agent: &str,
    rows: &[RunRow],
    verify: Result<(u64, Vec<String>), String>,
) -> Markup {
    layout(
        &format!("Run {run_id}"),
        Some(viewer),
        html! {
            section.run {
                h1 { "Run " code { (run_id) } }
                p { "Agent " code { (agent) } }
                @match &verify {
                    Ok((n, breaks)) if breaks.is_empty() => {
                        p.verify.ok { "Chain verified: " (n) " events, no break." }
                    }
                    Ok((n, breaks)) => {
                        div.verify.broken {
                            p { "Chain broken: " (breaks.len()) " break(s) in " (n) " events." }
                            ul { @for b in breaks { li { (b) } } }
                        }
                    }
                    Err(e) => { p.verify.broken { "Not verified: " (e) } }
                }
                @if rows.is_empty() { p.empty { "No events of this run are stored." } }
                @else {
                    table.events {
                        thead { tr { th { "#" } th { "Time" } th { "Event" } th { "Tool" } th { "Decision" } th { "Details" } } }
                        tbody {
                            @for row in rows { (run_row(row)) }
                        }
                    }
                }
                p { a href="/" { "Back to the reviews" } }
            }
        },
    )
}

fn run_row(row: &RunRow) -> Markup {
    let b = &row.body;
    let tool = b["tool"]["name"].as_str().unwrap_or("");
    let d = &b["decision"];
    let decision = match (d["effect"].as_str(), d["code"].as_str()) {
        (Some(e), Some(c)) => format!("{e} {c}"),
        _ => match row.kind.as_str() {
            "review.decided" => format!(
                "{} by {}",
                b["status"].as_str().unwrap_or(""),
                b["decidedBy"].as_str().unwrap_or("?")
            ),
            _ => String::new(),
        },
    };
    let mut details = Vec::new();
    if let Some(r) = d["ruleId"].as_str() {
        details.push(format!("rule {r}"));
    }
    if let Some(r) = d["reason"].as_str() {
        details.push(r.to_string());
    }
    if let Some(id) = d["hitl"]["reviewId"].as_str() {
        details.push(format!("review {id}"));
    }
    if let Some(e) = b.get("evaluation").filter(|e| !e.is_null()) {
        details.push(format!("evaluation {}", compact(e, 300)));
    }
    if let Some(m) = b["message"].as_str() {
        details.push(m.to_string());
    }
    if let Some(c) = b["comment"].as_str() {
        details.push(format!("“{c}”"));
    }
    html! {
        tr { td { (row.seq) } td { (row.ts) } td { code { (row.kind) } } td { code { (tool) } }
             td { (decision) } td { (details.join(" · ")) } }
    }
}

fn compact(v: &Value, max: usize) -> String {
    let s = v.to_string();
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn run_href(r: &Review) -> String {
    format!(
        "/runs/{}?agent={}",
        urlencode(&r.run_id),
        urlencode(&r.agent_id)
    )
}

/// Percent-encodes everything but unreserved characters.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn span_text(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86400 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        s => format!("{} d", s / 86400),
    }
}

fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ago", span_text((now - t).num_seconds().max(0)))
}

fn until(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (t - now).num_seconds();
    if s <= 0 {
        "now".into()
    } else {
        format!("in {}", span_text(s))
    }
}
