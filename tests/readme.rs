//! The README's quick start shows what the first command really prints.

use assert_cmd::Command;

#[test]
fn readme_quick_start_output_is_current() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let start = readme
        .find("```\nLINE  RUN")
        .expect("the quick-start output block")
        + 4;
    let end = start + readme[start..].find("```").unwrap();
    let shown = &readme[start..end];
    let out = Command::cargo_bin("toolgate")
        .unwrap()
        .args([
            "replay",
            "--policy",
            "policies/customer-support.json",
            "--trace",
            "examples/traces/support.jsonl",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), shown);
    assert!(readme.contains("cargo run -- replay --policy policies/customer-support.json --trace examples/traces/support.jsonl"));
    assert!(readme.contains("\ncargo test\n"));
}
