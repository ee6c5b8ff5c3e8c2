//! Issue 27: `toolgate console` over HTTP and in a real browser, review expiry in the
//! console on both stores, and webhook notifications (signed, and a dead webhook delaying no
//! decision).
//!
//! The browser test drives Debian's headless `chromium` over the DevTools protocol
//! (tests/console_support/cdp.rs); without Chromium it is skipped, except under `CI=true`,
//! where it fails. The Redis cases need `TOOLGATE_TEST_REDIS_URL`.

mod console_support;
use console_support::harness::*;
#[cfg(feature = "mcp")]
mod mcp_client;
mod redis_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::engine::{
    DecisionCode, EXPIRY_REVIEWER, FileReviewStore, GovernanceEngine, Notifier, NotifyConfig,
    NotifyKind, Review, ReviewStatus, ReviewStore, ReviewVerdict,
};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_over_http_login_csrf_decide_conflict_audit_and_webhooks() {
    let fx = Fixture::new();
    let (hook, mut hooks) = receiver().await;
    let notify = vec![
        "--notify".to_string(),
        hook.clone(),
        "--notify-secret-file".into(),
        fx.s("secret"),
    ];
    let console = Console::start(
        &fx,
        &[
            "--reviews".into(),
            fx.s("reviews.json"),
            "--store".into(),
            fx.s("audit"),
        ],
        &notify,
    );
    let base = console.base.clone();

    // Security headers and the login cookie.
    let form = http().get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(
        form.headers()["content-security-policy"].to_str().unwrap(),
        CSP
    );
    let c = set_cookie(form.headers(), "toolgate_login").unwrap();
    assert!(
        c.contains("HttpOnly") && c.contains("SameSite=Strict"),
        "{c}"
    );
    // Not logged in: the page sends to the login; the events refuse.
    let home = http().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(home.headers()["location"], "/login");

    // A wrong token cannot log in.
    let (status, body) = login(&base, "not-the-token").await.unwrap_err();
    assert_eq!(status, 401);
    assert!(body.contains("That token is not valid."), "{body}");
    // A login without its CSRF token is refused.
    let res = http()
        .post(format!("{base}/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    assert!(set_cookie(res.headers(), "toolgate_session").is_none());

    let (cookie, csrf) = login(&base, TOKEN).await.unwrap();

    // A review raised by `toolgate replay` in another process shows up live.
    let trace = fx.trace("t1.jsonl", "run-1", 500);
    let started = Instant::now();
    let out = fx.replay(&trace, &notify);
    let exited = Instant::now();
    assert!(out.contains("BLOCKED_HITL_REQUESTED"), "{out}");
    let id = reviews_in(&fx)[0].id.clone();
    let html = await_event(&base, &cookie, |h| h.contains(&id)).await;
    let seen = Instant::now();
    eprintln!(
        "MEASURE console (SSE, file store): review visible {} ms after replay exited ({} ms after it started)",
        seen.duration_since(exited).as_millis(),
        seen.duration_since(started).as_millis()
    );
    for part in [
        "support-bot",
        "cust-1001",
        "refund",
        "big-refund",
        "a lead must approve refunds over 100",
        "parcel arrived damaged",
    ] {
        assert!(html.contains(part), "{part} not in {html}");
    }
    let created = next_signed(&mut hooks, "review.created").await;
    assert_eq!(created["review"]["id"], json!(id));

    // POSTs without or with a wrong CSRF token are refused.
    for form in [
        vec![("verdict", "approve")],
        vec![("verdict", "approve"), ("csrf", "0000")],
    ] {
        let res = decide(&base, &id, &cookie, &form).await;
        assert_eq!(res.status().as_u16(), 403);
    }
    assert_eq!(reviews_in(&fx)[0].status, ReviewStatus::Pending);

    // Approve with a comment; a second decision is a conflict.
    let res = decide(
        &base,
        &id,
        &cookie,
        &[
            ("verdict", "approve"),
            ("csrf", csrf.as_str()),
            ("comment", "customer is gold"),
        ],
    )
    .await;
    assert_eq!(res.status().as_u16(), 303);
    let r = reviews_in(&fx).remove(0);
    assert_eq!(
        (r.status, r.decided_by.as_deref(), r.comment.as_deref()),
        (
            ReviewStatus::Approved,
            Some("alice"),
            Some("customer is gold")
        )
    );
    let res = decide(
        &base,
        &id,
        &cookie,
        &[("verdict", "deny"), ("csrf", csrf.as_str())],
    )
    .await;
    assert_eq!(res.status().as_u16(), 409);
    let text = res.text().await.unwrap();
    assert!(
        text.contains("conflict") && text.contains("approved by alice"),
        "{text}"
    );
    let decided = next_signed(&mut hooks, "review.decided").await;
    assert_eq!(
        (&decided["review"]["id"], &decided["review"]["decidedBy"]),
        (&json!(id), &json!("alice"))
    );

    // The next replay of the same call (in another run) is allowed.
    let again = fx.trace("t1b.jsonl", "run-1b", 500);
    let out = fx.replay(&again, &[]);
    assert!(out.contains("ALLOWED_HITL_APPROVED"), "{out}");

    // The decision is a verifiable `review.decided` event in the audit store.
    let events: Vec<Value> = walk_jsonl(&fx.path("audit"))
        .into_iter()
        .filter(|e| e["kind"] == "review.decided")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            &events[0]["reviewId"],
            &events[0]["decidedBy"],
            &events[0]["comment"]
        ),
        (&json!(id), &json!("alice"), &json!("customer is gold"))
    );
    let verify = Command::new(bin())
        .args(["verify", &fx.s("audit")])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // The run page: decisions in order and the chain's status.
    let run = page(&base, "/runs/run-1?agent=support-bot", &cookie).await;
    assert!(run.contains("Chain verified"), "{run}");
    assert!(run.contains("BLOCKED_HITL_REQUESTED"), "{run}");
    drop(console);
}

/// A console over `store_args` decides the overdue review `r` (already in the store) by its
/// `onExpire`, shows it decided, and notifies the webhook.
async fn console_expires(fx: &Fixture, store_args: &[String], r: &Review, want: ReviewStatus) {
    let (hook, mut hooks) = receiver().await;
    let console = Console::start(
        fx,
        store_args,
        &[
            "--notify".into(),
            hook,
            "--notify-secret-file".into(),
            fx.s("secret"),
        ],
    );
    let (cookie, _) = login(&console.base, TOKEN).await.unwrap();
    let word = if want == ReviewStatus::Approved {
        "approved"
    } else {
        "denied"
    };
    let id = r.id.clone();
    let html = await_event(&console.base, &cookie, |h| {
        h.contains(&format!("data-review-id=\"{id}\"")) && !h.contains(&format!("review-{id}"))
    })
    .await;
    assert!(html.contains(word), "{html}");
    let decided = next_signed(&mut hooks, "review.decided").await;
    assert_eq!(
        (
            &decided["review"]["id"],
            &decided["review"]["decidedBy"],
            &decided["review"]["status"]
        ),
        (&json!(r.id), &json!(EXPIRY_REVIEWER), &json!(word))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_decides_expired_reviews_on_the_file_store_and_on_redis() {
    use toolgate::policy::OnExpire;
    let fx = Fixture::new();
    let file = FileReviewStore::new(fx.path("reviews.json"));
    let r = file.insert_if_absent(overdue(1, OnExpire::Deny));
    console_expires(
        &fx,
        &["--reviews".into(), fx.s("reviews.json")],
        &r,
        ReviewStatus::Denied,
    )
    .await;
    let stored = file.try_list().unwrap().remove(0);
    assert_eq!(
        (
            stored.status,
            stored.decided_by.as_deref(),
            stored.decided_at
        ),
        (ReviewStatus::Denied, Some(EXPIRY_REVIEWER), r.expires_at)
    );

    let Some(url) = redis_support::url() else {
        return;
    };
    let prefix = format!("tgtest:console-exp:{}", uuid::Uuid::now_v7().simple());
    let mut cfg = toolgate::state::redis::RedisConfig::new(&url);
    cfg.prefix = prefix.clone();
    cfg.timeout = Duration::from_secs(2);
    let redis = toolgate::state::redis::RedisReviewStore::new(&cfg).unwrap();
    let r = redis.insert_if_absent(overdue(2, OnExpire::Allow));
    console_expires(
        &fx,
        &[
            "--state".into(),
            url.clone(),
            "--state-prefix".into(),
            prefix,
        ],
        &r,
        ReviewStatus::Approved,
    )
    .await;
    let stored = redis.try_list().unwrap().remove(0);
    assert_eq!(
        (stored.status, stored.decided_by.as_deref()),
        (ReviewStatus::Approved, Some(EXPIRY_REVIEWER))
    );
}

/// A webhook that accepts connections and never answers delays no decision: notifications
/// leave the decision path through a bounded queue that is never waited on (`Notifier::send`
/// uses `try_send`), so every decision below completes while the webhook hangs, and so do
/// more sends than the queue holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_webhook_delays_no_decision() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", dead.local_addr().unwrap());
    // Accept and hold every connection, never answering.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in dead.incoming().flatten() {
            held.push(s);
        }
    });
    let engine = GovernanceEngine::builder()
        .policy(toolgate::policy::parse_policy(POLICY, None).unwrap())
        .notify(NotifyConfig::new(vec![url.clone()]))
        .build()
        .unwrap();
    let run = |id: &str| engine.start_run(toolgate::engine::RunContext::new(id, "support-bot"));
    let call = || toolgate::engine::ToolCall::new("c1", "refund", json!({"amount": 500}));
    let d = run("r1").before_tool(call()).await;
    assert_eq!(d.code, DecisionCode::BlockedHitlRequested);
    let id = d.hitl.unwrap().review_id;
    engine
        .reviews()
        .decide(
            &id,
            &ReviewVerdict::new(ReviewStatus::Approved, chrono::Utc::now()).by("alice"),
        )
        .unwrap();
    assert_eq!(
        run("r2").before_tool(call()).await.code,
        DecisionCode::AllowedHitlApproved
    );
    // Far more notifications than the queue holds: each send returns (the excess is dropped).
    let notifier = Notifier::start(NotifyConfig::new(vec![url]));
    let review = engine.reviews().list().remove(0);
    for _ in 0..(toolgate::engine::NOTIFY_QUEUE + 100) {
        notifier.send(NotifyKind::Created, &review);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_browser_logs_in_sees_a_review_live_and_approves_it_with_and_without_javascript() {
    let Some(chromium) = console_support::cdp::chromium_path() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and no Chromium: install Debian's `chromium` (see .ci/run)"
        );
        eprintln!("skipped: no chromium on PATH");
        return;
    };
    let fx = Fixture::new();
    let console = Console::start(
        &fx,
        &[
            "--reviews".into(),
            fx.s("reviews.json"),
            "--store".into(),
            fx.s("audit"),
        ],
        &[],
    );
    let base = console.base.clone();
    let (b, base2) = (base.clone(), base.clone());
    let chromium2 = chromium.clone();
    // The DevTools client is blocking: it runs on a thread of its own, step by step, driven
    // from here through a channel of closures.
    let (tx, rx) =
        std::sync::mpsc::channel::<Box<dyn FnOnce(&mut console_support::cdp::Browser) + Send>>();
    let driver = std::thread::spawn(move || {
        let mut browser = console_support::cdp::Browser::start(&chromium2);
        for step in rx {
            step(&mut browser);
        }
    });
    let step = |f: Box<dyn FnOnce(&mut console_support::cdp::Browser) -> Value + Send>| {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        tx.send(Box::new(move |br| {
            let _ = done_tx.send(f(br));
        }))
        .unwrap();
        async move {
            tokio::task::spawn_blocking(move || done_rx.recv().expect("browser step"))
                .await
                .unwrap()
        }
    };

    // A wrong token cannot log in.
    let b1 = b.clone();
    let html = step(Box::new(move |br| {
        br.goto(&format!("{b1}/login"));
        br.focus("#token");
        br.type_text("wrong-token");
        br.clear_events();
        br.click("form button[type=submit]");
        br.wait_event("Page.loadEventFired", Duration::from_secs(20));
        let cookies = br.cookies(&b1);
        json!({"html": br.html(), "session": cookies.iter().any(|c| c["name"] == "toolgate_session")})
    }))
    .await;
    assert!(
        html["html"]
            .as_str()
            .unwrap()
            .contains("That token is not valid.")
    );
    assert_eq!(html["session"], json!(false));

    // The right one can.
    let b1 = b.clone();
    let page = step(Box::new(move |br| {
        br.goto(&format!("{b1}/login"));
        br.focus("#token");
        br.type_text(TOKEN);
        br.clear_events();
        br.click("form button[type=submit]");
        br.wait_event("Page.loadEventFired", Duration::from_secs(20));
        // Resolves (with the page's clock) when a review card appears in the live box.
        br.eval(
            "window.__seen = new Promise(function (resolve) {
               var box = document.getElementById('reviews');
               function look() { if (box.querySelector('article.review')) { resolve(performance.now()); return true; } return false; }
               if (!look()) { new MutationObserver(look).observe(box, {childList: true, subtree: true}); }
             }); 'ok'",
        );
        let cookie = br
            .cookies(&b1)
            .into_iter()
            .find(|c| c["name"] == "toolgate_session")
            .map(|c| c["value"].clone())
            .unwrap_or(Value::Null);
        json!({"html": br.html(), "cookie": cookie})
    }))
    .await;
    assert!(
        page["html"].as_str().unwrap().contains("Signed in as"),
        "{page}"
    );
    let cookie = page["cookie"].as_str().expect("session cookie").to_string();

    // A review raised by `toolgate replay` in another process appears without reloading.
    let trace = fx.trace("t1.jsonl", "run-1", 500);
    let started = Instant::now();
    let out = fx.replay(&trace, &[]);
    let exited = Instant::now();
    assert!(out.contains("BLOCKED_HITL_REQUESTED"), "{out}");
    let seen = step(Box::new(|br| {
        // How long ago (ms) the card appeared, by the page's clock.
        br.eval(
            "Promise.race([
               window.__seen.then(function (t) { return performance.now() - t; }),
               new Promise(function (_, reject) { setTimeout(function () { reject(new Error('no review card within 30 s')); }, 30000); })
             ])",
        )
    }))
    .await;
    let seen_at = Instant::now() - Duration::from_micros((seen.as_f64().unwrap() * 1000.0) as u64);
    eprintln!(
        "MEASURE console (browser, file store): review visible on the open page {} ms after replay exited ({} ms after it started; poll 200 ms)",
        seen_at.saturating_duration_since(exited).as_millis(),
        seen_at.saturating_duration_since(started).as_millis()
    );
    let id = reviews_in(&fx)[0].id.clone();

    // The screenshot of the README.
    let png = step(Box::new(|br| {
        use base64::Engine as _;
        json!(base64::engine::general_purpose::STANDARD.encode(br.screenshot()))
    }))
    .await;
    {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"));
        std::fs::write(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console.png"),
            bytes,
        )
        .unwrap();
    }

    // Approve it with a comment, clicking the button.
    let html = step(Box::new(|br| {
        br.focus("article.review textarea");
        br.type_text("checked with the customer");
        br.clear_events();
        br.click("article.review button.approve");
        // The page the form's POST redirects to: the first load event that shows it (one
        // queued from earlier, if any, is passed over).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            br.wait_event(
                "Page.loadEventFired",
                deadline.saturating_duration_since(Instant::now()),
            );
            let html = br.html();
            if html.contains("No review is waiting.") || Instant::now() >= deadline {
                break json!(html);
            }
        }
    }))
    .await;
    assert!(
        html.as_str().unwrap().contains("No review is waiting."),
        "after approving: {html}"
    );
    let r = reviews_in(&fx).remove(0);
    assert_eq!(
        (
            r.id.as_str(),
            r.status,
            r.decided_by.as_deref(),
            r.comment.as_deref()
        ),
        (
            id.as_str(),
            ReviewStatus::Approved,
            Some("alice"),
            Some("checked with the customer")
        )
    );
    let again = fx.trace("t1b.jsonl", "run-1b", 500);
    let out = fx.replay(&again, &[]);
    assert!(out.contains("ALLOWED_HITL_APPROVED"), "{out}");

    // Without JavaScript the form still approves.
    step(Box::new(|br| {
        br.call(
            "Emulation.setScriptExecutionDisabled",
            json!({"value": true}),
        );
        Value::Null
    }))
    .await;
    let trace2 = fx.trace("t2.jsonl", "run-2", 700);
    let out = fx.replay(&trace2, &[]);
    assert!(out.contains("BLOCKED_HITL_REQUESTED"), "{out}");
    let id2 = reviews_in(&fx)
        .into_iter()
        .find(|r| r.status == ReviewStatus::Pending)
        .unwrap()
        .id;
    let needle = id2.clone();
    await_event(&base2, &cookie, move |h| h.contains(&needle)).await;
    let b1 = b.clone();
    let html = step(Box::new(move |br| {
        br.goto(&format!("{b1}/"));
        let before = br.html();
        br.clear_events();
        br.click("article.review button.approve");
        br.wait_event("Page.loadEventFired", Duration::from_secs(20));
        json!({"before": before, "after": br.html()})
    }))
    .await;
    assert!(html["before"].as_str().unwrap().contains(&id2));
    assert!(
        html["after"]
            .as_str()
            .unwrap()
            .contains("No review is waiting.")
    );
    let r = reviews_in(&fx).into_iter().find(|r| r.id == id2).unwrap();
    assert_eq!(
        (r.status, r.decided_by.as_deref()),
        (ReviewStatus::Approved, Some("alice"))
    );

    // A POST without the CSRF token, with the browser's session, is refused.
    let res = decide(&base, &id2, &cookie, &[("verdict", "deny")]).await;
    assert_eq!(res.status().as_u16(), 403);
    drop(tx);
    driver.join().unwrap();
    drop(console);
}

/// A review approved in the console is seen by a running `toolgate mcp-proxy --state
/// redis://…`: the held call, retried, goes through.
#[cfg(feature = "mcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_approved_in_the_console_is_seen_by_a_running_mcp_proxy_on_redis() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let s = mcp_client::Setup::new();
    let prefix = format!("tgtest:console-mcp:{}", uuid::Uuid::now_v7().simple());
    let p = |n: &str| s.path(n).display().to_string();
    let args: Vec<String> = vec![
        "--policy".into(),
        p("policy.json"),
        "--tools".into(),
        p("tools.json"),
        "--pin".into(),
        p("pins.json"),
        "--state".into(),
        url.clone(),
        "--state-prefix".into(),
        prefix.clone(),
        "--audit".into(),
        p("audit"),
    ];
    let mut proxy = mcp_client::Proxy::start(&args, &[mcp_client::fixture()]);
    proxy.initialize("2025-06-18", false);
    let r = proxy.call("publish", json!({"id": "a"}));
    assert_eq!(mcp_client::code(&r), "BLOCKED_HITL_REQUESTED", "{r}");
    let review = r["result"]["_meta"]["toolgate"]["reviewId"]
        .as_str()
        .unwrap()
        .to_string();

    let fx = Fixture::new();
    let console = Console::start(
        &fx,
        &["--state".into(), url, "--state-prefix".into(), prefix],
        &[],
    );
    let (cookie, csrf) = login(&console.base, TOKEN).await.unwrap();
    let needle = review.clone();
    await_event(&console.base, &cookie, move |h| h.contains(&needle)).await;
    let res = decide(
        &console.base,
        &review,
        &cookie,
        &[("verdict", "approve"), ("csrf", csrf.as_str())],
    )
    .await;
    assert_eq!(res.status().as_u16(), 303);

    // The same gateway process, still running, lets the retried call through.
    let r = tokio::task::spawn_blocking(move || {
        let r = proxy.call("publish", json!({"id": "a"}));
        assert_eq!(proxy.finish().code(), Some(0));
        r
    })
    .await
    .unwrap();
    assert_eq!(mcp_client::text(&r), "published \"a\"", "{r}");
}
