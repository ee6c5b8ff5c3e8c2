//! Policy parsing: any text either parses or gives errors, never a panic; a parsed policy
//! round-trips through `to_json`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::policy::{parse_policy, parse_policy_value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = parse_policy(text, None) {
        let json = p.to_json();
        let again = parse_policy_value(&json, None).expect("to_json output parses");
        assert_eq!(again, p, "parse(to_json(p)) != p");
    }
});
