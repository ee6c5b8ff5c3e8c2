//! (on both stores) hitl: a review request pauses the run (its abort flag lives in the state
//! store); resuming it lifts the pause, and the approved call then proceeds.

use serde_json::json;
use toolgate::engine::{DecisionCode, ReviewStatus};
use toolgate::policy::EffectType;

use crate::common::*;

const REFUND: &str = r#"[{"id": "big-refund", "name": "big refund", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
    "condition": {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100},
    "effect": {"type": "hitl", "reason": "a lead must approve"}}]"#;

store_test! {
    async fn hitl_pauses_the_run_until_resumed(store) {
        let clock = clock();
        let engine = store.engine(REFUND, &clock);
        let run = engine.start_run(ctx_user("r1", "support", "u1", &[]));
        let big = || json!({"amount": 200});
        let d = run.before_tool(call("c1", "refund", big())).await;
        assert_eq!(
            (d.effect, d.code, d.abort_run),
            (EffectType::Hitl, DecisionCode::BlockedHitlRequested, true)
        );
        assert!(run.is_aborted());
        let review = d.hitl.expect("hitl info").review_id;
        for id in ["c2", "c3"] {
            let d = run.before_tool(call(id, "lookup", json!({}))).await;
            assert_eq!(d.code, DecisionCode::BlockedRunAborted, "{id}");
        }
        let approved = engine.reviews().approve(&review).expect("approve");
        assert_eq!(approved.status, ReviewStatus::Approved);
        // Still paused until resumed.
        let d = run.before_tool(call("c4", "lookup", json!({}))).await;
        assert_eq!(d.code, DecisionCode::BlockedRunAborted);
        run.resume();
        assert!(!run.is_aborted());
        let d = run.before_tool(call("c5", "refund", big())).await;
        assert_eq!(
            (d.effect, d.code),
            (EffectType::Allow, DecisionCode::AllowedHitlApproved)
        );
        assert!(run.before_tool(call("c6", "lookup", json!({}))).await.is_allowed());
        assert!(!run.is_aborted());
    }
}
