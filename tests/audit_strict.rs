//! Strict verify: a stored line that is not byte for byte the canonical JSON of its content is
//! a break ("not canonical"), even when its content (and so its hash) is intact.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use toolgate::audit::{BreakKind, canonical_json, verify_paths};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

/// The example support trace's audit trail, as lines (all canonical: written by the file sink).
fn trail(dir: &Path) -> Vec<String> {
    let audit = dir.join("audit");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = toolgate()
        .arg("replay")
        .arg("--policy")
        .arg(root.join("policies/customer-support.json"))
        .arg("--trace")
        .arg(root.join("examples/traces/support.jsonl"))
        .arg("--audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::read_to_string(audit.join("2026-01-05.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Line 3 of the trail (0-based index 2): r-101's `tool.result` of c1, which has
/// `"durationMs":140` and `"kind":"tool.result"`.
const AT: usize = 2;

fn check(dir: &Path, orig: &[String], name: &str, edit: impl Fn(&str) -> String) {
    let mut lines = orig.to_vec();
    let edited = edit(&lines[AT]);
    assert_ne!(edited, lines[AT], "{name}: the edit changed nothing");
    // The content is unchanged: the edited line parses to a value of the same canonical form
    // (so the same hash).
    let a: serde_json::Value = serde_json::from_str(&edited).unwrap();
    let b: serde_json::Value = serde_json::from_str(&lines[AT]).unwrap();
    assert_eq!(canonical_json(&a), canonical_json(&b), "{name}");
    lines[AT] = edited;
    let path: PathBuf = dir.join(format!("{name}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let report = verify_paths(&[&path]);
    assert_eq!(report.breaks.len(), 1, "{name}: {:#?}", report.breaks);
    let br = &report.breaks[0];
    assert_eq!(
        (br.kind, br.line, br.run_id.as_deref(), br.seq),
        (
            BreakKind::NotCanonical,
            Some(AT + 1),
            Some("r-101"),
            Some(2)
        ),
        "{name}: {br}"
    );
    let out = toolgate().arg("verify").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{name}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!(
        "{}:{} run r-101 seq 2: not canonical",
        path.display(),
        AT + 1
    );
    assert!(stdout.contains(&want), "{name}: {stdout}");
}

#[test]
fn every_non_canonical_spelling_of_an_intact_event_is_a_break() {
    let dir = tempfile::tempdir().unwrap();
    let orig = trail(dir.path());
    assert!(orig[AT].contains("\"durationMs\":140"), "{}", orig[AT]);
    assert!(
        orig[AT].contains("\"kind\":\"tool.result\""),
        "{}",
        orig[AT]
    );
    // The intact trail passes.
    let intact = dir.path().join("intact.jsonl");
    std::fs::write(&intact, orig.join("\n") + "\n").unwrap();
    assert!(verify_paths(&[&intact]).is_ok());

    check(dir.path(), &orig, "space", |l| l.replacen("\":", "\": ", 1));
    check(dir.path(), &orig, "trailing-space", |l| format!("{l} "));
    check(dir.path(), &orig, "crlf", |l| format!("{l}\r"));
    check(dir.path(), &orig, "key-order", |l| {
        // Move the first member ("agentId") to the end.
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let first = format!("\"agentId\":{},", v["agentId"]);
        let rest = l.replacen(&first, "", 1);
        format!(
            "{},{}}}",
            &rest[..rest.len() - 1],
            first.trim_end_matches(',')
        )
    });
    check(dir.path(), &orig, "escape", |l| {
        l.replacen("\"tool.result\"", "\"too\\u006c.result\"", 1)
    });
    check(dir.path(), &orig, "escape-underscore", |l| {
        l.replacen("\"name\":\"kb_search\"", "\"name\":\"kb\\u005fsearch\"", 1)
    });
    check(dir.path(), &orig, "exponent", |l| {
        l.replacen("\"durationMs\":140", "\"durationMs\":1.4e2", 1)
    });
    check(dir.path(), &orig, "duplicate-key", |l| {
        l.replacen(
            "\"kind\":\"tool.result\"",
            "\"kind\":\"tool.result\",\"kind\":\"tool.result\"",
            1,
        )
    });
}
