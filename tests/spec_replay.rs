//! `replay`, its audit trail and what-if with Handlebar's current kinds (design §11): the
//! example trace examples/traces/spec-kinds.jsonl under examples/spec-kinds.json.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn rows(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn replay_decides_the_new_kinds_and_the_trail_keeps_no_card_number() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let out = toolgate()
        .args(["replay", "--format", "jsonl", "--policy"])
        .arg(repo("examples/spec-kinds.json"))
        .arg("--trace")
        .arg(repo("examples/traces/spec-kinds.jsonl"))
        .arg("--audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<(String, String, Value)> = rows(&out.stdout)
        .iter()
        .map(|r| {
            (
                format!(
                    "{}/{}",
                    r["runId"].as_str().unwrap(),
                    r["callId"].as_str().unwrap()
                ),
                r["effect"].as_str().unwrap().to_string(),
                r["ruleId"].clone(),
            )
        })
        .collect();
    let want = [
        ("r-1/c1", "allow", Value::Null),
        ("r-1/c2", "block", json!("no-cards-out")),
        // Luhn-invalid: not a card; the first external mail takes the one slot.
        ("r-1/c3", "allow", Value::Null),
        // `cc: null` exists.
        ("r-1/c4", "block", json!("no-null-cc")),
        // Not tagged external: neither counted nor limited.
        ("r-1/c5", "allow", Value::Null),
        ("r-1/c6", "block", json!("two-external-mails")),
        ("r-1/c7", "allow", Value::Null),
        // r-2's agent is not tagged prod: the policy does not apply.
        ("r-2/c1", "allow", Value::Null),
        ("r-2/c2", "allow", Value::Null),
    ];
    let want: Vec<(String, String, Value)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.clone()))
        .collect();
    assert_eq!(got, want);
    // The replay's own output names no card either.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("4111 1111 1111 1111"));

    let mut trail = String::new();
    for e in std::fs::read_dir(&audit).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            trail.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
    assert!(trail.contains("[redacted:credit_card]"), "{trail}");
    // Every copy is redacted wherever it lies (design §16), r-2's card too although no rule of
    // the policy looked at r-2 (its agentSelector does not take r-2's agent).
    let with_card: Vec<&str> = trail
        .lines()
        .filter(|l| l.contains("4111 1111 1111 1111"))
        .collect();
    assert!(with_card.is_empty(), "{with_card:?}");
    assert!(trail.contains(r#""agentTags":["prod","eu"]"#));
    toolgate().arg("verify").arg(&audit).assert().success();

    // What-if: the recorded runs under the same policy without its agentSelector decide r-2
    // too (its agent tags come back from run.started). A redacted string counts as a detection
    // of its detector, so r-1 decides as it did live, and r-2/c1's stand-in is its card.
    let mut p: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("examples/spec-kinds.json")).unwrap())
            .unwrap();
    p["policy"].as_object_mut().unwrap().remove("agentSelector");
    let open = dir.path().join("open.json");
    std::fs::write(&open, p.to_string()).unwrap();
    let out = toolgate()
        .args(["replay", "--format", "jsonl", "--policy"])
        .arg(&open)
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed: Vec<(String, String)> = rows(&out.stdout)
        .iter()
        .map(|r| {
            (
                format!(
                    "{}/{}",
                    r["runId"].as_str().unwrap(),
                    r["callId"].as_str().unwrap()
                ),
                r["newRuleId"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            ("r-2/c1".to_string(), "no-cards-out".to_string()),
            ("r-2/c2".to_string(), "login-first".to_string())
        ]
    );
}
