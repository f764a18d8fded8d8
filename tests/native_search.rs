//! Requests that carry the provider's own tool search, through the real Envoy: the recorded
//! shapes of `tests/conformance/*/native-search-*.request.json` (Anthropic's tool search tool,
//! `tool_reference` blocks in the history, OpenAI Responses `tool_search` and namespaces) and
//! a real streamed request with Anthropic's tool search from `../shared/conformance` reach
//! the upstream as the client sent them, byte for byte, in filter and in search mode, and say
//! so (`skipped=native_search`, `toolsift.skipped.native_search`). Under access rules the
//! caller's denied tools still leave them, and nothing else changes.

use crate::common;

use common::llm::upstream_log;
use common::{Gateway, http};
use serde_json::{Value, json};
use std::path::Path;

/// Every recorded native-search request: (API path, fixture name, body bytes).
fn fixtures() -> Vec<(&'static str, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
    let mut out = Vec::new();
    for (folder, path) in [
        ("anthropic-messages", "/v1/messages"),
        ("openai-responses", "/v1/responses"),
    ] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_str().unwrap();
                name.starts_with("native-search") && name.ends_with(".request.json")
            })
            .collect();
        files.sort();
        for file in files {
            let name = file.file_name().unwrap().to_str().unwrap().to_owned();
            out.push((path, name, std::fs::read_to_string(&file).unwrap()));
        }
    }
    // Real traffic: a streamed request with Anthropic's tool search and deferred tools.
    let recorded = "anthropic-messages/text-server-tool-then-tool-use-stream.request.json";
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance");
    if let Ok(body) = std::fs::read_to_string(shared.join(recorded)) {
        out.push(("/v1/messages", recorded.to_owned(), body));
    }
    assert!(out.len() >= 6, "the recorded shapes: {out:?}");
    out
}

/// Function tools at the top of a request's tools array (what toolsift counts).
fn function_count(body: &str) -> usize {
    let body: Value = serde_json::from_str(body).unwrap();
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => t.get("input_schema").is_some(),
            Some(kind) => kind == "function",
        })
        .count()
}

/// In filter mode (one tool kept of any larger array) and in search mode, each recorded shape
/// reaches the upstream as the client's exact bytes.
#[test]
fn recorded_shapes_pass_untouched_in_every_mode() {
    let fixtures = fixtures();
    for mode in ["filter", "search"] {
        let config = json!({"mode": mode, "top_k": 1, "min_tools": 0, "debug": true});
        let gw = Gateway::start(&config.to_string());
        for (path, name, body) in &fixtures {
            // `raw`: the upstream answers with the bytes that reached it, unread.
            let r = gw.post(path, &[("x-demo-echo", "raw")], body.as_bytes());
            assert_eq!(r.status, 200, "{mode} {name}: {}", r.text());
            assert_eq!(
                &r.text(),
                body,
                "{mode} {name}: the upstream got the client's bytes"
            );
            let n = function_count(body);
            assert_eq!(
                r.header("x-toolsift").unwrap(),
                format!("kept={n} total={n} skipped=native_search"),
                "{mode} {name}"
            );
            assert_eq!(
                r.header("x-toolsift-tools"),
                None,
                "{mode} {name}: nothing ranked"
            );
        }
        assert_eq!(
            gw.stat("toolsift.skipped.native_search"),
            fixtures.len() as u64,
            "{mode}"
        );
        assert_eq!(gw.stat("toolsift.search.native"), fixtures.len() as u64);
        assert_eq!(gw.stat("toolsift.rewritten"), 0, "{mode}");
        assert_eq!(gw.stat("toolsift.errors"), 0, "{mode}");
    }
}

/// The same request without the provider's search is filtered as usual: the skip is about
/// the search, not about the tools.
#[test]
fn without_the_search_tool_the_request_is_filtered() {
    let gw = Gateway::start(r#"{"top_k":1,"min_tools":0}"#);
    let (path, body) = fixture("native-search-regex.request.json");
    let mut plain: Value = serde_json::from_str(&body).unwrap();
    plain["tools"].as_array_mut().unwrap().remove(0);
    let r = gw.post(
        path,
        &[("x-demo-echo", "raw")],
        plain.to_string().as_bytes(),
    );
    assert_eq!(r.header("x-toolsift").unwrap(), "kept=1 total=2");
    assert_eq!(gw.stat("toolsift.skipped.native_search"), 0);
}

/// The recorded native-search request `name`: its API path and body.
fn fixture(name: &str) -> (&'static str, String) {
    let (path, _, body) = fixtures().into_iter().find(|(_, n, _)| n == name).unwrap();
    (path, body)
}

/// A gateway in `mode` under access rules whose `weather` group (`x-group`) may use
/// Anthropic's regex search and `get_weather`, nothing else.
fn weather_caller_gateway(mode: &str) -> Gateway {
    let config = json!({
        "mode": mode,
        "min_tools": 0,
        "access": {
            "identity": [{"header": "x-group"}],
            "default": "deny",
            "rules": [{"when": ["weather"], "allow": ["tool_search_tool_regex", "get_weather"]}]
        }
    });
    Gateway::start(&config.to_string())
}

/// Under access rules a denied tool never reaches the model, native search or not: it leaves
/// the request, and every other byte (the provider's search tool, the deferred tools the
/// caller may use, the history) is the client's. Filter and search mode alike.
#[test]
fn access_rules_still_remove_denied_tools() {
    let (path, body) = fixture("native-search-server-result.request.json");
    for mode in ["filter", "search"] {
        let gw = weather_caller_gateway(mode);
        http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", "get_weather"),
            ("x-demo-script", "answer"),
            ("x-group", "weather"),
        ];
        let r = gw.post(path, &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{mode}: {}", r.text());
        assert_eq!(
            r.header("x-toolsift").unwrap(),
            "kept=1 total=2 denied=1 search=native",
            "{mode}"
        );
        let log = upstream_log(&gw);
        assert_eq!(log.len(), 1, "{mode}");
        let mut expected: Value = serde_json::from_str(&body).unwrap();
        expected["tools"].as_array_mut().unwrap().remove(2); // search_files
        assert_eq!(
            log[0]["body"], expected,
            "{mode}: only the denied tool left"
        );
        assert_eq!(gw.stat("toolsift.search.native"), 1, "{mode}");
        assert_eq!(gw.stat("toolsift.access.denied.tools"), 1, "{mode}");
        assert_eq!(gw.stat("toolsift.skipped.native_search"), 0, "{mode}");
    }
}

/// Under access rules the answer to a request that carries the provider's own tool search is
/// checked like any other: a model's call of a tool its caller may not use (one a history
/// suggests, or made up: the scripted model's `x-demo-call`) is replaced by a refusal in words
/// before the client gets it. Filter and search mode alike: search mode hands such a request to the
/// provider and runs no loop of its own, so the access rules' guard stays on the answer.
#[test]
fn a_denied_call_in_a_native_search_answer_is_refused() {
    let (path, body) = fixture("native-search-regex.request.json");
    for mode in ["filter", "search"] {
        let gw = weather_caller_gateway(mode);
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", "get_weather"),
            ("x-demo-call", "get_weather,search_files"),
            ("x-group", "weather"),
        ];
        let r = gw.post(path, &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{mode}: {}", r.text());
        let answer: Value = serde_json::from_slice(&r.body).unwrap();
        let called: Vec<&str> = answer["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|block| block["type"] == "tool_use")
            .filter_map(|block| block["name"].as_str())
            .collect();
        assert_eq!(called, ["get_weather"], "{mode}: {answer}");
        assert!(
            r.text().contains("Tool `search_files` is not available."),
            "{mode}: {answer}"
        );
        assert_eq!(gw.stat("toolsift.access.denied.call"), 1, "{mode}");
    }
}
