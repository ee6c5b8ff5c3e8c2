//! The file sink on a full disk (a file size limit stands in for it: `ulimit -f`, with
//! SIGXFSZ ignored so writes past it fail with EFBIG as they would with ENOSPC).
//!
//! A batch that fails half-way used to leave its first part on disk: a torn last line, with
//! the next batch appended after it, and `toolgate replay --audit` exited 0 although events
//! were lost. Now the file is cut back to its last whole batch (every line is whole JSON) and
//! the run exits 1 naming the loss.

use std::process::Command;

#[test]
fn a_failed_batch_leaves_no_torn_line_and_the_replay_fails() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    let root = env!("CARGO_MANIFEST_DIR");
    // 4 KiB (bash counts 1024-byte blocks): the trace's trail is ~16 KiB.
    let out = Command::new("bash")
        .args(["-c", "trap '' XFSZ; ulimit -f 4; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--trace"])
        .arg(format!("{root}/examples/traces/support.jsonl"))
        .arg("--policy")
        .arg(format!("{root}/policies/customer-support.json"))
        .arg("--audit")
        .arg(&audit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("events not written"), "{stderr}");
    let mut files = 0;
    for f in std::fs::read_dir(&audit).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        files += 1;
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "a torn last line: {text:?}"
        );
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("a line that is not whole JSON ({e}): {line}"));
        }
        assert!(text.len() <= 4096, "{}", text.len());
    }
    assert!(files > 0);
}
