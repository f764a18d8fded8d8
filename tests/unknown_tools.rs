//! Unknown tools in filter mode, in the real Envoy with the real `.wasm`: a call in the
//! model's latest turn of a tool the request does not carry (a made-up name) is counted and
//! named in `x-toolsift`, in every dialect; a real tool, a provider built-in, and a made-up
//! call of an earlier turn are not.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::llm::{request, with_calls};
use common::{DIALECTS, Gateway};
use serde_json::json;

const MADE_UP: &str = "get_weather_everywhere";
const REAL: &str = "get_current_weather";

#[test]
fn a_made_up_name_in_the_latest_turn_is_counted_once_in_every_dialect() {
    let gw = Gateway::start(r#"{"top_k":5}"#);
    let args = json!({"location": "Paris"});
    let header = |dialect: &str, calls: &[(&str, serde_json::Value)]| {
        let (path, question) = request(dialect, false);
        let body = with_calls(dialect, question, calls);
        let r = gw.post(&path, &[], body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        r.header("x-toolsift").unwrap_or_default().to_owned()
    };
    for dialect in DIALECTS {
        let made_up = header(dialect, &[(REAL, args.clone()), (MADE_UP, args.clone())]);
        assert!(
            made_up.starts_with("kept=5 total=80")
                && made_up.ends_with(&format!(" unknown={MADE_UP}")),
            "{dialect}: {made_up}"
        );
        // The next turn called a real tool: the made-up call was counted already.
        let later = header(dialect, &[(MADE_UP, args.clone()), (REAL, args.clone())]);
        assert!(!later.contains("unknown="), "{dialect}: {later}");
        let real = header(dialect, &[(REAL, args.clone())]);
        assert!(!real.contains("unknown="), "{dialect}: {real}");
    }
    assert_eq!(gw.stat("toolsift.unknown_tools"), DIALECTS.len() as u64);
}

/// A call of a provider built-in the request carries (Anthropic's `bash`) is no made-up name.
#[test]
fn a_called_built_in_is_known() {
    let gw = Gateway::start(r#"{"top_k":5}"#);
    let (path, question) = request("anthropic", false);
    let mut body = with_calls("anthropic", question, &[("bash", json!({"command": "ls"}))]);
    body["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "bash_20250124", "name": "bash"}));
    let r = gw.post(&path, &[], body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let header = r.header("x-toolsift").unwrap_or_default();
    assert!(!header.contains("unknown="), "{header}");
    assert_eq!(gw.stat("toolsift.unknown_tools"), 0);
}
