//! What `toolgate mcp-proxy` does not change reaches the other side byte for byte: key order,
//! number spelling, string escapes, spacing, unknown fields and `_meta`, in both directions.
#![cfg(all(feature = "mcp", unix))]

mod mcp_client;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use mcp_client::{Setup, TOOLGATE};
use serde_json::Value;

/// A client that writes and reads raw lines.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Raw {
    fn start(cmd: &mut Command) -> Raw {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line, without its newline.
    fn line(&mut self) -> String {
        let mut l = String::new();
        assert!(self.stdout.read_line(&mut l).unwrap() > 0, "output closed");
        l.trim_end_matches('\n').to_string()
    }

    /// The line answering request `id` (other lines are skipped).
    fn answer(&mut self, id: u64) -> String {
        loop {
            let l = self.line();
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["id"] == id && v.get("method").is_none() {
                return l;
            }
        }
    }

    /// Sends a request line with this id and returns the raw answer line.
    fn request(&mut self, id: u64, method: &str, params: &str) -> String {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ));
        self.answer(id)
    }

    fn finish(mut self) -> Option<i32> {
        self.stdin.take();
        self.child.wait().unwrap().code()
    }
}

/// The same session, directly with the fixture server and through the gateway: every answer
/// toolgate lets through unchanged is the same line.
fn session(mut peer: Raw) -> Vec<String> {
    let init = peer.request(
        1,
        "initialize",
        r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}"#,
    );
    peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let lines = vec![
        init,
        peer.request(2, "tools/list", "{}"),
        peer.request(
            3,
            "fixture/echo",
            r#"{"zeta":1,"alpha":{"y":[1.5,"é"],"b":null},"_meta":{"x-trace":"t1"}}"#,
        ),
        peer.request(
            4,
            "tools/call",
            r#"{"name":"echo","arguments":{"text":"hi"}}"#,
        ),
        peer.request(5, "ping", "{}"),
    ];
    assert_eq!(peer.finish(), Some(0));
    lines
}

#[test]
fn answers_toolgate_does_not_change_are_the_servers_bytes() {
    let fixture = mcp_client::fixture();
    let direct = session(Raw::start(&mut Command::new(&fixture)));
    let s = Setup::new();
    let through = session(Raw::start(
        Command::new(TOOLGATE)
            .args(["mcp-proxy", "--policy"])
            .arg(s.path("policy.json"))
            .arg("--audit")
            .arg(s.path("audit"))
            .args(["--", &fixture]),
    ));
    for (d, t) in direct.iter().zip(&through) {
        assert_eq!(d, t);
    }
    // The fixture (rmcp) writes keys in its structs' order ("jsonrpc" before "id", "type"
    // before "text", "_meta" last), which a parse-and-serialize round trip would sort.
    let call = &through[3];
    assert!(
        call.starts_with(
            r#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}]"#
        ),
        "{call}"
    );
    assert!(
        call.contains(r#""_meta":{"fixture":{"tool":"echo"}}"#),
        "{call}"
    );
    let round_trip = serde_json::to_string(&serde_json::from_str::<Value>(call).unwrap()).unwrap();
    assert_ne!(&round_trip, call);
    let echo: Value = serde_json::from_str(&through[2]).unwrap();
    assert_eq!(
        echo["result"]["echo"]["_meta"]["x-trace"], "t1",
        "{}",
        through[2]
    );
}

/// A scripted server (sh): it first sends a notification, records every line it gets, answers
/// the gateway's own `tools/list` (gateway id 2) and the `tools/call` (gateway id 3) with
/// `RESULT`.
const SCRIPT: &str = r#"printf '%s\n' "$NOTE"
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$RECORD"
  case "$line" in
    *'"tools/list"'*) printf '%s\n' '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}' ;;
    *'"tools/call"'*) printf '%s\n' "$RESULT" ;;
  esac
done"#;

/// Lines cross unchanged but for their ids: the upstream sees the gateway's ids (1 for the
/// first request forwarded, 2 for the gateway's own `tools/list`, 3 for the call), the client
/// gets its own id back, spelled as it wrote it, in the same place.
#[test]
fn client_and_server_lines_cross_the_gateway_unchanged_but_for_ids() {
    let note = r#"{"method":"notifications/x-odd","params":{"z":[1.0e3,-0.0,12345678901234567890],"a":"\u00e9\/","_meta":{"y":1,"b":{"d":true,"c":null}}},"jsonrpc":"2.0"}"#;
    let result = |id: &str| {
        format!(
            r#"{{"result":{{"structuredContent":{{"z":1,"a":2}},"content":[{{"text":"hi","type":"text"}}],"_meta":{{"y":1,"b":0.10}}}},"id":{id},"jsonrpc":"2.0"}}"#
        )
    };
    let sent = |ids: [&str; 2]| {
        [
            format!(
                r#"{{"params":{{"zeta":1,"alpha":[1.50,"\u0041"],"_meta":{{"z":0,"a":1}}}},"id":{},"method":"fixture/echo","jsonrpc":"2.0"}}"#,
                ids[0]
            ),
            r#"{"method":"notifications/x-custom", "params": {"b": 1, "a": 1e2}, "jsonrpc": "2.0"}"#
                .to_string(),
            format!(
                r#"{{"params":{{"name":"echo","arguments":{{"text":"hi","zz":1,"aa":2}},"_meta":{{"k":"v"}}}},"jsonrpc":"2.0","method":"tools/call","id" : {}}}"#,
                ids[1]
            ),
        ]
    };
    let s = Setup::new();
    let record = s.path("record.jsonl");
    let mut p = Raw::start(
        Command::new(TOOLGATE)
            .args(["mcp-proxy", "--policy"])
            .arg(s.path("policy.json"))
            .args(["--", "sh", "-c", SCRIPT])
            .env("NOTE", note)
            .env("RESULT", result("3"))
            .env("RECORD", &record),
    );
    assert_eq!(p.line(), note);
    for line in sent([r#""r1""#, "9.0"]) {
        p.send(&line);
    }
    let answer = loop {
        let l = p.line();
        if l.contains("structuredContent") {
            break l;
        }
    };
    assert_eq!(answer, result("9.0"));
    assert_eq!(p.finish(), Some(0));

    let recorded = std::fs::read_to_string(&record).unwrap();
    let mut recorded: Vec<&str> = recorded
        .lines()
        .filter(|l| !l.contains("tools/list"))
        .collect();
    let mut expected = sent(["1", "3"]).to_vec();
    recorded.sort_unstable();
    expected.sort_unstable();
    assert_eq!(recorded, expected);
}
