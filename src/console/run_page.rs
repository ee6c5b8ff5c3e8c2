//! The run page: a run's events in order, with its chain's verify status.

use maud::{Markup, html};
use serde_json::Value;

use super::layout::{Viewer, layout};
use super::runs::RunRow;
use super::text::visible;

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
                h1 { "Run " code { (visible(run_id, false)) } }
                p { "Agent " code { (visible(agent, false)) } }
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
        tr { td { (row.seq) } td { (visible(&row.ts, false)) } td { code { (visible(&row.kind, false)) } } td { code { (visible(tool, false)) } }
             td { (visible(&decision, false)) } td { (visible(&details.join(" · "), false)) } }
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
