//! The console's HTML, as maud templates (checked at compile time; every interpolation is
//! escaped). No inline script or style: the strict Content-Security-Policy allows only the
//! script and style sheet the console serves itself.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::layout::{Viewer, layout};
use super::store::Snapshot;
use super::text::{self, visible};
use crate::engine::{EXPIRY_REVIEWER, Review, status_word};

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

/// Pending reviews on one page of the list.
pub const PAGE_SIZE: usize = 25;
/// Characters of a review's arguments shown on the list at most (about): past it, the card
/// links to the review's own page, where the arguments are whole and the decision is made.
pub const LIST_ARGS_CHARS: usize = 2_000;
/// Characters of one string value shown on the list at most.
pub const LIST_STRING_CHARS: usize = 300;
/// Characters of a decided review's arguments shown in the decided table.
pub const DECIDED_ARGS_CHARS: usize = 300;
/// Agents (and tools) named in the list's summary at most.
const SUMMARY: usize = 20;

/// Which page of which pending reviews a list shows (`/?page=2&agent=…&tool=…&rule=…`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct ListQuery {
    /// The page, from 1.
    #[serde(default)]
    pub page: Option<usize>,
    /// Only this agent's reviews.
    #[serde(default)]
    pub agent: Option<String>,
    /// Only this tool's.
    #[serde(default)]
    pub tool: Option<String>,
    /// Only this rule's.
    #[serde(default)]
    pub rule: Option<String>,
}

impl ListQuery {
    fn filter(v: &Option<String>) -> Option<&str> {
        v.as_deref().filter(|x| !x.is_empty())
    }

    fn matches(&self, r: &Review) -> bool {
        Self::filter(&self.agent).is_none_or(|a| r.agent_id == a)
            && Self::filter(&self.tool).is_none_or(|t| r.tool_name == t)
            && Self::filter(&self.rule).is_none_or(|x| r.rule_id == x)
    }

    fn filtered(&self) -> bool {
        Self::filter(&self.agent).is_some()
            || Self::filter(&self.tool).is_some()
            || Self::filter(&self.rule).is_some()
    }

    /// The query string (with `?`) of page `page` of this filter.
    pub fn href(&self, page: usize) -> String {
        let mut q = vec![format!("page={page}")];
        for (k, v) in [
            ("agent", &self.agent),
            ("tool", &self.tool),
            ("rule", &self.rule),
        ] {
            if let Some(v) = Self::filter(v) {
                q.push(format!("{k}={}", urlencode(v)));
            }
        }
        format!("?{}", q.join("&"))
    }
}

/// What every page of a console knows of it.
#[derive(Debug, Clone)]
pub struct PageContext {
    /// Whether run pages are served (`--store`).
    pub runs: bool,
    /// How long an approval lasts on this store (`None`: until someone expires it).
    pub approval_lasts: Option<std::time::Duration>,
}

/// The reviews page: the live part (`fragment`) in `#reviews`, which `console.js` replaces
/// from the server-sent events of `/events` (of the same page and filter).
pub fn index(
    viewer: &Viewer<'_>,
    snap: &Snapshot,
    now: DateTime<Utc>,
    ctx: &PageContext,
    q: &ListQuery,
) -> Markup {
    let live = format!("/events{}", q.href(q.page.unwrap_or(1).max(1)));
    layout(
        "Reviews",
        Some(viewer),
        html! {
            div #reviews data-live=(live) {
                (fragment(viewer, snap, now, ctx, q))
            }
        },
    )
}

/// The live part of the reviews page: a banner when the store cannot be read, then one page of
/// the pending reviews (of the filter), then the newest decided ones.
pub fn fragment(
    viewer: &Viewer<'_>,
    snap: &Snapshot,
    now: DateTime<Utc>,
    ctx: &PageContext,
    q: &ListQuery,
) -> Markup {
    let held = snap.pending.len();
    let matching: Vec<(usize, &Review)> = snap
        .pending
        .iter()
        .enumerate()
        .filter(|(_, r)| q.matches(r))
        .collect();
    let pages = matching.len().div_ceil(PAGE_SIZE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let shown = &matching
        [((page - 1) * PAGE_SIZE).min(matching.len())..(page * PAGE_SIZE).min(matching.len())];
    html! {
        @if let Some((since, why)) = &snap.unreadable {
            div.banner.error role="alert" {
                "The review store cannot be read (since " time datetime=(rfc(*since)) { (ago(*since, now)) } "): "
                (visible(why, false)) ". The lists below are the last ones read and may be out of date."
            }
        }
        section.pending {
            h2 { "Waiting for review " span.count { (snap.pending_total) } }
            @if snap.pending_total > held {
                p.note { "The console holds the oldest " (held) " of " (snap.pending_total)
                    " pending reviews; every one of them is expired when due." }
            }
            (summary(snap, q))
            form.filter method="get" action="/" {
                label { "Agent " input type="text" name="agent" value=(ListQuery::filter(&q.agent).unwrap_or("")); }
                label { "Tool " input type="text" name="tool" value=(ListQuery::filter(&q.tool).unwrap_or("")); }
                label { "Rule " input type="text" name="rule" value=(ListQuery::filter(&q.rule).unwrap_or("")); }
                button type="submit" { "Filter" }
                @if q.filtered() { " " a href="/" { "All" } }
            }
            @if matching.is_empty() {
                p.empty { @if q.filtered() { "No pending review matches." } @else { "No review is waiting." } }
            } @else {
                p.paging {
                    "Showing " (shown.first().map_or(0, |_| (page - 1) * PAGE_SIZE + 1)) "–" ((page - 1) * PAGE_SIZE + shown.len())
                    " of " (matching.len()) @if q.filtered() { " matching" } " (oldest first) · page " (page) " of " (pages)
                    @if page > 1 { " · " a rel="prev" href=(format!("/{}", q.href(page - 1))) { "← previous page" } }
                    @if page < pages { " · " a rel="next" href=(format!("/{}", q.href(page + 1))) { "next page →" } }
                }
            }
            @for (i, r) in shown {
                (pending_card(viewer, r, held - i - 1, now, ctx, true))
            }
        }
        section.decided {
            h2 { "Decided" }
            @if snap.decided.is_empty() {
                p.empty { "Nothing decided yet." }
            } @else {
                table {
                    thead { tr { th { "Decision" } th { "By" } th { "When" } th { "Call" } th { "Arguments" } th { "Comment" } } }
                    tbody {
                        @for r in &snap.decided {
                            tr.decided data-review-id=(r.id) {
                                td { span class={ "status " (status_word(r.status)) } { (status_word(r.status)) } }
                                td { (reviewer(r)) }
                                td { @if let Some(at) = r.decided_at { time datetime=(rfc(at)) { (ago(at, now)) } } }
                                td { code { (visible(&r.tool_name, false)) } " by " code { (visible(&r.agent_id, false)) } " · rule " code { (visible(&r.rule_id, false)) } " "
                                     a href=(review_href(r)) { "review" } " "
                                     @if ctx.runs { a href=(run_href(r)) { "run" } } }
                                td { (args_block(r, DECIDED_ARGS_CHARS, 120).0) (redactions(r)) }
                                td { (visible(r.comment.as_deref().unwrap_or(""), false)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The busiest agents and tools among the held pending reviews, each a filter link.
fn summary(snap: &Snapshot, q: &ListQuery) -> Markup {
    let count = |key: fn(&Review) -> &str| {
        let mut by: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for r in &snap.pending {
            *by.entry(key(r)).or_default() += 1;
        }
        let mut v: Vec<(&str, usize)> = by.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let more = v.len().saturating_sub(SUMMARY);
        v.truncate(SUMMARY);
        (v, more)
    };
    let (agents, more_agents) = count(|r| r.agent_id.as_str());
    let (tools, more_tools) = count(|r| r.tool_name.as_str());
    let link = |k: &str, v: &str| {
        let mut q = q.clone();
        match k {
            "agent" => q.agent = Some(v.to_string()),
            _ => q.tool = Some(v.to_string()),
        }
        format!("/{}", q.href(1))
    };
    html! {
        @if agents.len() > 1 || tools.len() > 1 {
            p.summary {
                "By agent: "
                @for (a, n) in &agents { a href=(link("agent", a)) { code { (visible(a, false)) } } " (" (n) ") " }
                @if more_agents > 0 { "and " (more_agents) " more. " }
                " By tool: "
                @for (t, n) in &tools { a href=(link("tool", t)) { code { (visible(t, false)) } } " (" (n) ") " }
                @if more_tools > 0 { "and " (more_tools) " more." }
            }
        }
    }
}

fn reviewer(r: &Review) -> Markup {
    match r.decided_by.as_deref() {
        Some(EXPIRY_REVIEWER) => {
            html! { em { "expired (" (r.on_expire.map(|o| o.as_str()).unwrap_or("")) ")" } }
        }
        Some(by) => html! { (visible(by, false)) },
        None => html! { em { "unknown" } },
    }
}

/// The arguments of `r`, pretty-printed, cut to about `budget` characters (strings to
/// `max_string`); and whether anything was cut.
fn args_block(r: &Review, budget: usize, max_string: usize) -> (Markup, bool) {
    let (v, cut) = text::cut_value(&r.args, budget, max_string);
    let text = text::pretty(&v);
    (html! { pre.args { (visible(&text, true)) } }, cut)
}

/// What the engine redacted in `r`'s arguments, and by which detector.
fn redactions(r: &Review) -> Markup {
    html! {
        @if !r.redacted.is_empty() {
            p.redacted {
                "Redacted by toolgate (only the detected text, shown as "
                code { "[redacted:…]" } "): "
                @for (i, x) in r.redacted.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (visible(if x.path.is_empty() { "(the arguments)" } else { &x.path }, false)) }
                    " by " (x.detector)
                }
                "."
            }
        }
    }
}

/// What approving `r` lets through, and until when.
fn approval_note(r: &Review, ctx: &PageContext) -> Markup {
    let until = match ctx.approval_lasts {
        None => "until the review is expired (toolgate review expire)".to_string(),
        Some(d) => format!("for {} after the decision", span_text(d.as_secs() as i64)),
    };
    html! {
        p.covers {
            "Approving lets every identical call through — same agent ("
            code { (visible(&r.agent_id, false)) } "), rule, tool, these exact arguments and end user — "
            (until) "; denying blocks them as long."
        }
    }
}

/// A pending review: on the list (`list`), long arguments are cut and then the decision is
/// made on the review's own page, where they are whole.
pub fn pending_card(
    viewer: &Viewer<'_>,
    r: &Review,
    later: usize,
    now: DateTime<Utc>,
    ctx: &PageContext,
    list: bool,
) -> Markup {
    let (args, cut) = if list {
        args_block(r, LIST_ARGS_CHARS, LIST_STRING_CHARS)
    } else {
        let text = text::pretty(&r.args);
        (html! { pre.args.whole { (visible(&text, true)) } }, false)
    };
    let flagged = [&r.tool_name, &r.agent_id, &r.rule_id]
        .iter()
        .any(|s| text::has_hidden(s))
        || text::has_hidden(&text::pretty(&r.args));
    html! {
        article.review #{ "review-" (r.id) } data-review-id=(r.id) {
            header {
                h3 { "Call " code { (visible(&r.tool_name, false)) } }
                span.age { "raised " time datetime=(rfc(r.created_at)) { (ago(r.created_at, now)) } }
            }
            @if flagged {
                p.warning role="alert" { "This call holds invisible or direction-changing characters, shown as [U+…]." }
            }
            dl {
                dt { "Agent" } dd { code { (visible(&r.agent_id, false)) } }
                dt { "End user" } dd { @if let Some(u) = &r.enduser_id { code { (visible(u, false)) } } @else { em { "none" } } }
                dt { "Rule" } dd { code { (visible(&r.rule_id, false)) } @if let Some(reason) = &r.reason { " — " (visible(reason, false)) } }
                dt { "Run" } dd {
                    @if ctx.runs { a href=(run_href(r)) { code { (visible(&r.run_id, false)) } } } @else { code { (visible(&r.run_id, false)) } }
                    " · call " code { (visible(&r.call_id, false)) }
                }
                @if list {
                    dt { "Waiting" } dd { (later) " later " (if later == 1 { "call" } else { "calls" }) " waiting behind it" }
                }
                @if let Some(exp) = r.expires_at {
                    dt { "Expires" } dd {
                        time datetime=(rfc(exp)) { (until(exp, now)) }
                        " (then " (r.on_expire.map(|o| if o == crate::policy::OnExpire::Allow { "approved" } else { "denied" }).unwrap_or("asked again")) ")"
                    }
                }
            }
            h4 { "Arguments" }
            (args)
            (redactions(r))
            (approval_note(r, ctx))
            @if cut {
                p.cut { "The arguments are long and cut here. "
                    a.open href=(review_href(r)) { "Open the review" } " to see them whole and decide." }
            } @else {
                @if list { p { a.open href=(review_href(r)) { "Open the review" } } }
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
}

/// A review's own page: its whole (redacted) arguments, and the decision when it is pending.
pub fn review_page(
    viewer: &Viewer<'_>,
    r: &Review,
    now: DateTime<Utc>,
    ctx: &PageContext,
) -> Markup {
    layout(
        "Review",
        Some(viewer),
        html! {
            @if r.status == crate::engine::ReviewStatus::Pending {
                (pending_card(viewer, r, 0, now, ctx, false))
            } @else {
                article.review.done data-review-id=(r.id) {
                    header { h3 { "Call " code { (visible(&r.tool_name, false)) } " — " (status_word(r.status)) } }
                    dl {
                        dt { "By" } dd { (reviewer(r)) }
                        dt { "When" } dd { @if let Some(at) = r.decided_at { time datetime=(rfc(at)) { (ago(at, now)) } } }
                        dt { "Agent" } dd { code { (visible(&r.agent_id, false)) } }
                        dt { "Rule" } dd { code { (visible(&r.rule_id, false)) } }
                        dt { "Comment" } dd { (visible(r.comment.as_deref().unwrap_or(""), false)) }
                    }
                    h4 { "Arguments" }
                    pre.args.whole { (visible(&text::pretty(&r.args), true)) }
                    (redactions(r))
                }
            }
            p { a href="/" { "Back to the reviews" } }
        },
    )
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

fn review_href(r: &Review) -> String {
    format!("/reviews/{}", urlencode(&r.id))
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

pub(super) fn rfc(t: DateTime<Utc>) -> String {
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
