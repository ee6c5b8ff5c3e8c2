//! Runs the examples and checks the key lines of their output.
//!
//! The examples run through `cargo run --quiet --example <name>` (with the cargo that runs the
//! tests and the same target directory), so what runs is the current source. The variables
//! cargo sets for a test process (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`...) are removed first:
//! some dependencies' build scripts track them, and inheriting them would make the inner cargo
//! rebuild those dependencies (and the next outer build rebuild them back).

use std::process::Command;

fn run_example(name: &str) -> String {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["run", "--quiet", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_for_tests = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_")
            || matches!(
                &*key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_for_tests {
            cmd.env_remove(&*key);
        }
    }
    let out = cmd.output().expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The decision line printed for step `n` (the line after `[ n] tool args`).
fn decision_of(out: &str, step: &str) -> String {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.starts_with(step) {
            return lines.next().unwrap_or_default().trim().to_string();
        }
    }
    panic!("no step {step} in:\n{out}");
}

#[test]
fn wrap_dispatch_blocks_continues_and_stops_on_hitl() {
    let out = run_example("wrap_dispatch");
    let expect = [
        (
            "[ 1] read_file",
            "tool=read_file effect=allow code=ALLOWED rule=-",
        ),
        (
            "[ 4] write_file",
            "tool=write_file effect=block code=BLOCKED_RULE rule=writes-stay-in-workspace",
        ),
        (
            "[ 5] shell",
            "tool=shell effect=block code=BLOCKED_RULE rule=block-recursive-force-delete",
        ),
        (
            "[ 6] http_get",
            "tool=http_get effect=block code=BLOCKED_RULE rule=block-network-tools",
        ),
        (
            "[ 7] git_push",
            "tool=git_push effect=block code=BLOCKED_RULE rule=push-requires-tests",
        ),
        ("[ 8] run_tests", "tool=run_tests effect=allow code=ALLOWED"),
        (
            "[ 9] git_push",
            "tool=git_push effect=block code=BLOCKED_RULE rule=no-force-push",
        ),
        ("[10] git_push", "tool=git_push effect=allow code=ALLOWED"),
        (
            "[12] git_push",
            "tool=git_push effect=block code=BLOCKED_RULE rule=no-network-after-secrets",
        ),
        (
            "[13] deploy",
            "tool=deploy effect=hitl code=BLOCKED_HITL_REQUESTED rule=prod-deploy-needs-approval",
        ),
    ];
    for (step, want) in expect {
        let got = decision_of(&out, step);
        assert!(got.starts_with(want), "step {step}: {got}\nwanted: {want}");
    }
    assert!(out.contains("agent: continues without write_file"), "{out}");
    assert!(
        out.contains("agent: stops the run (1 of 14 steps not attempted)"),
        "{out}"
    );
    assert!(
        !out.contains("[14]"),
        "the agent must stop at the hitl: {out}"
    );
    assert!(
        out.contains("run-1 stopped: waiting for human review (aborted: true)"),
        "{out}"
    );
    assert!(
        out.contains("review pending: rule=prod-deploy-needs-approval tool=deploy"),
        "{out}"
    );
    assert!(
        out.contains(
            "tool=deploy effect=allow code=ALLOWED_HITL_APPROVED rule=prod-deploy-needs-approval"
        ),
        "{out}"
    );
    assert!(out.trim_end().ends_with("run-2 completed"), "{out}");
}

#[test]
fn signals_and_subjects_allow_and_block() {
    let out = run_example("signals_and_subjects");
    let expect = [
        ("[1] crm_get_customer", "effect=allow code=ALLOWED rule=-"),
        (
            "[2] crm_get_customer",
            "effect=block code=BLOCKED_RULE rule=pii-needs-identified-customer",
        ),
        ("[3] issue_credit", "effect=allow code=ALLOWED rule=-"),
        (
            "[4] issue_credit",
            "effect=block code=BLOCKED_RULE rule=no-credit-for-difficult-customers",
        ),
        (
            "[5] issue_credit",
            "effect=block code=BLOCKED_RULE rule=no-credit-for-difficult-customers",
        ),
        (
            "[6] issue_credit",
            "effect=block code=BLOCKED_RULE rule=no-credit-for-difficult-customers",
        ),
    ];
    for (step, want) in expect {
        let got = decision_of(&out, step);
        assert!(got.starts_with(want), "step {step}: {got}\nwanted: {want}");
    }
    for want in [
        r#"signal: crm.isDifficultCustomer args={"channel":"chat","customerId":"C-1001"} value=false"#,
        r#"signal: crm.isDifficultCustomer args={"channel":"chat","customerId":"C-2002"} value=true"#,
        r#"signal: crm.isDifficultCustomer args={"channel":"chat","customerId":"C-9999"} error="the provider failed: unknown customer C-9999""#,
        r#"missing=["signal crm.isDifficultCustomer: binding \"customerId\" resolved to nothing"]"#,
    ] {
        assert!(out.contains(want), "missing line {want}:\n{out}");
    }
}
