//! Search mode in the real Envoy: the model (the demo upstream's scripted model) sees only
//! `find_tools`, calls it, and the gateway answers with follow-up requests until the model
//! calls the tool it wanted. Each test reads the upstream's request log to check what the
//! model saw on every round.

use crate::common;

use common::llm::{called, request, tool_names, upstream_log};
use common::{EmbedServer, Gateway, Response};
use serde_json::{Value, json};

const WANT: &str = "get_current_weather";

fn search_config(extra: Value) -> String {
    let mut c = json!({"mode": "search", "min_tools": 20, "debug": true});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c.to_string()
}

/// How the gateway is deployed, as far as holding headers goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// `search.hold_headers` with Envoy's `allow_on_headers_stop_iteration: true`: the fuller
    /// behaviour (x-toolsift-search, a failed follow-up's status, the router's rewrites).
    Held,
    /// The default, on an Envoy without the flag (as Istio's WasmPlugin and Envoy Gateway
    /// install it): nothing is held in a headers callback.
    Unheld,
    /// `search.hold_headers` on an Envoy without the flag.
    Misconfigured,
}

/// The gateway in search mode with `extra` settings, deployed as `hold` says.
fn start(hold: Hold, extra: Value) -> Gateway {
    let mut extra = extra;
    if hold != Hold::Unheld {
        if extra.get("search").is_none() {
            extra["search"] = json!({});
        }
        extra["search"]["hold_headers"] = json!(true);
    }
    Gateway::start_with(&search_config(extra), &[], move |yaml| {
        if hold == Hold::Held {
            yaml
        } else {
            let flagged = "allow_on_headers_stop_iteration: true";
            assert!(yaml.contains(flagged));
            yaml.replace(flagged, "allow_on_headers_stop_iteration: false")
        }
    })
}

/// Sends `body` through the gateway as the scripted model wanting `WANT`.
fn ask(gw: &Gateway, path: &str, body: &Value, script: &str, extra: &[(&str, &str)]) -> Response {
    let mut headers = vec![
        ("x-demo-model", "scripted"),
        ("x-demo-want", WANT),
        ("x-demo-script", script),
        ("authorization", "Bearer client-key"),
        ("x-api-key", "client-key"),
    ];
    headers.extend_from_slice(extra);
    gw.post(path, &headers, body.to_string().as_bytes())
}

/// Every dialect: the model finds the tool it could not see and calls it; the client never
/// sees `find_tools`.
fn finds_and_calls(dialect: &str, stream: bool, hold: Hold) {
    let gw = start(hold, json!({}));
    let (path, body) = request(dialect, stream);
    let r = ask(&gw, &path, &body, "search", &[]);
    assert_eq!(r.status, 200, "{dialect}: {}", r.text());
    let calls = called(dialect, &r);
    assert!(
        calls.contains(&WANT.to_owned()),
        "{dialect}: {calls:?} in {}",
        r.text()
    );
    assert!(
        !calls.iter().any(|c| c == "find_tools"),
        "{dialect}: {}",
        r.text()
    );
    match hold {
        Hold::Held => {
            let search = r.header("x-toolsift-search").unwrap_or_default().to_owned();
            assert!(search.starts_with("rounds=1 found="), "{search}");
            assert!(search.contains(WANT), "{search}");
        }
        // The response headers left before the body was read: only the body tells.
        _ => assert_eq!(r.header("x-toolsift-search"), None),
    }
    assert!(r.header("x-toolsift").unwrap().contains("search=search"));

    let log = upstream_log(&gw);
    assert_eq!(log.len(), 2, "{dialect}: one request and one follow-up");
    let (first, second) = (&log[0]["body"], &log[1]["body"]);
    let (seen1, seen2) = (tool_names(dialect, first), tool_names(dialect, second));
    // Round 1: the meta-tool alone (no pins, eager_k 0); round 2 starts with round 1's tools
    // and appends what was found.
    assert_eq!(seen1, ["find_tools"], "{dialect}");
    assert_eq!(
        seen2[..seen1.len()],
        seen1[..],
        "{dialect}: prefix-stable tools array"
    );
    assert!(
        seen2[1..].contains(&WANT.to_owned()),
        "{dialect}: {seen2:?}"
    );
    assert!(
        seen2.len() <= 1 + 5,
        "{dialect}: at most `limit` tools appended"
    );
    // The follow-up carries the client's credentials and path.
    for entry in &log {
        assert_eq!(entry["headers"]["authorization"], "Bearer client-key");
        assert_eq!(entry["headers"]["x-api-key"], "client-key");
        assert_eq!(entry["path"], path.as_str());
    }
    // The follow-up's conversation is the first's plus the model's turn and the tool result,
    // which lists the found tools' schemas.
    let conversation = |b: &Value| -> Vec<Value> {
        let key = match dialect {
            "openai_responses" => "input",
            "gemini" => "contents",
            _ => "messages",
        };
        b[key].as_array().cloned().unwrap_or_default()
    };
    let (c1, c2) = (conversation(first), conversation(second));
    assert!(c2.len() >= c1.len() + 2, "{dialect}: {c2:?}");
    assert_eq!(
        c2[..c1.len()],
        c1[..],
        "{dialect}: the conversation is only appended to"
    );
    let added = serde_json::to_string(&c2[c1.len()..]).unwrap();
    assert!(
        added.contains("find_tools"),
        "{dialect}: the model's turn: {added}"
    );
    assert!(
        added.contains(WANT) && added.contains("location"),
        "{dialect}: the result names the tools and their parameters: {added}"
    );
    assert_eq!(gw.stat("toolsift.search.rounds"), 1);
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "{log}");
    match hold {
        Hold::Misconfigured => assert_eq!(gw.stat("toolsift.search.headers_not_held"), 1),
        _ => assert_eq!(gw.stat("toolsift.search.headers_not_held"), 0),
    }
}

#[test]
fn openai_chat_finds_and_calls() {
    finds_and_calls("openai_chat", false, Hold::Held);
    finds_and_calls("openai_chat", false, Hold::Unheld);
}

#[test]
fn openai_responses_finds_and_calls() {
    finds_and_calls("openai_responses", false, Hold::Held);
    finds_and_calls("openai_responses", false, Hold::Unheld);
}

#[test]
fn anthropic_finds_and_calls() {
    finds_and_calls("anthropic", false, Hold::Held);
    finds_and_calls("anthropic", false, Hold::Unheld);
}

#[test]
fn gemini_finds_and_calls() {
    finds_and_calls("gemini", false, Hold::Held);
    finds_and_calls("gemini", false, Hold::Unheld);
}

#[test]
fn bedrock_finds_and_calls() {
    finds_and_calls("bedrock", false, Hold::Held);
    finds_and_calls("bedrock", false, Hold::Unheld);
}

#[test]
fn ollama_finds_and_calls() {
    finds_and_calls("ollama", false, Hold::Held);
    finds_and_calls("ollama", false, Hold::Unheld);
}

#[test]
fn ollama_stream_finds_and_calls() {
    finds_and_calls("ollama", true, Hold::Held);
    finds_and_calls("ollama", true, Hold::Unheld);
}

#[test]
fn openai_chat_stream_finds_and_calls() {
    finds_and_calls("openai_chat", true, Hold::Held);
    finds_and_calls("openai_chat", true, Hold::Unheld);
}

#[test]
fn openai_responses_stream_finds_and_calls() {
    finds_and_calls("openai_responses", true, Hold::Held);
    finds_and_calls("openai_responses", true, Hold::Unheld);
}

#[test]
fn anthropic_stream_finds_and_calls() {
    finds_and_calls("anthropic", true, Hold::Held);
    finds_and_calls("anthropic", true, Hold::Unheld);
}

#[test]
fn gemini_stream_finds_and_calls() {
    finds_and_calls("gemini", true, Hold::Held);
    finds_and_calls("gemini", true, Hold::Unheld);
}

/// `search.hold_headers` on an Envoy that lacks `allow_on_headers_stop_iteration` (a setting
/// Istio's WasmPlugin and Envoy Gateway cannot make): the first held request is resumed after
/// the grace period instead of hanging, the filter says so once at warn and counts it, and no
/// later request is held.
#[test]
fn holding_headers_without_the_flag_degrades_instead_of_hanging() {
    finds_and_calls("anthropic", true, Hold::Misconfigured);
    let gw = start(Hold::Misconfigured, json!({}));
    for (dialect, stream) in [
        ("openai_chat", false),
        ("openai_chat", true),
        ("anthropic", false),
    ] {
        let (path, body) = request(dialect, stream);
        let started = std::time::Instant::now();
        let r = ask(&gw, &path, &body, "search", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(called(dialect, &r).contains(&WANT.to_owned()));
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
    assert_eq!(
        gw.stat("toolsift.search.headers_not_held"),
        1,
        "once, then not held"
    );
    let log = gw.log_containing("allow_on_headers_stop_iteration");
    assert_eq!(
        log.matches("allow_on_headers_stop_iteration").count(),
        1,
        "{log}"
    );
}

/// `response_header: false` only drops toolsift's headers: search mode's response side is
/// whole, and the client never gets the model's `find_tools` call.
#[test]
fn search_mode_does_not_depend_on_the_response_header() {
    for hold in [Hold::Held, Hold::Unheld] {
        let gw = start(hold, json!({"response_header": false}));
        for (dialect, stream) in [("openai_chat", false), ("anthropic", true)] {
            let (path, body) = request(dialect, stream);
            let r = ask(&gw, &path, &body, "search", &[]);
            assert_eq!(r.status, 200, "{}", r.text());
            let calls = called(dialect, &r);
            assert!(
                calls.contains(&WANT.to_owned()),
                "{hold:?} {dialect}: {}",
                r.text()
            );
            assert!(!calls.iter().any(|c| c == "find_tools"), "{}", r.text());
            assert_eq!(r.header("x-toolsift"), None);
        }
        assert_eq!(gw.stat("toolsift.search.rounds"), 2);
    }
}

/// A client tool named like the meta-tool is neither shadowed nor duplicated: the meta-tool
/// takes another name for that request (the same every turn), and the client's tool stays the
/// client's.
#[test]
fn a_client_tool_named_find_tools_keeps_its_name() {
    let gw = start(
        Hold::Unheld,
        json!({"search": {"eager_k": 0}, "always_include": ["find_tools"]}),
    );
    let (path, mut body) = request("openai_chat", false);
    let own = json!({"type": "function", "function": {"name": "find_tools",
        "description": "Find tools in the user's workshop inventory",
        "parameters": {"type": "object", "properties": {"aisle": {"type": "string"}}}}});
    body["tools"].as_array_mut().unwrap().push(own.clone());
    let r = ask(
        &gw,
        &path,
        &body,
        "search",
        &[("x-demo-search-tool", "find_tools_2")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        called("openai_chat", &r).contains(&WANT.to_owned()),
        "{}",
        r.text()
    );
    let log = upstream_log(&gw);
    assert_eq!(log.len(), 2, "the renamed meta-tool was answered");
    let first = tool_names("openai_chat", &log[0]["body"]);
    assert_eq!(
        first,
        ["find_tools_2", "find_tools"],
        "meta-tool first, then the pinned client tool"
    );
    let sent_own = log[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "find_tools")
        .unwrap()
        .clone();
    assert_eq!(sent_own, own, "the client's tool, as the client wrote it");
    // The same catalog next turn: the same names.
    let r = ask(
        &gw,
        &path,
        &body,
        "search",
        &[("x-demo-search-tool", "find_tools_2")],
    );
    assert_eq!(r.status, 200);
    let log = upstream_log(&gw);
    assert_eq!(tool_names("openai_chat", &log[2]["body"]), first);
}

/// The client's usage counts every round.
#[test]
fn usage_counts_every_round() {
    let gw = start(Hold::Held, json!({}));
    let (path, body) = request("openai_chat", false);
    let r = ask(&gw, &path, &body, "search", &[]);
    let usage = &r.json()["usage"];
    let header = r.header("x-toolsift-search").unwrap().to_owned();
    let rounds: Vec<(u64, u64)> = header
        .split("usage=")
        .nth(1)
        .unwrap()
        .split(',')
        .map(|u| {
            let (i, o) = u.split_once('/').unwrap();
            (i.parse().unwrap(), o.parse().unwrap())
        })
        .collect();
    assert_eq!(rounds.len(), 2, "{header}");
    let input: u64 = rounds.iter().map(|r| r.0).sum();
    let output: u64 = rounds.iter().map(|r| r.1).sum();
    assert_eq!(usage["prompt_tokens"], input, "{usage} vs {header}");
    assert_eq!(usage["completion_tokens"], output);
    assert_eq!(usage["total_tokens"], input + output);
}

/// A model that answers in text: the stream is released at its first output and reaches the
/// client untouched.
#[test]
fn answer_streams_through() {
    let gw = start(Hold::Unheld, json!({}));
    let dialects = [
        "openai_chat",
        "anthropic",
        "openai_responses",
        "gemini",
        "ollama",
    ];
    for dialect in dialects {
        let (path, body) = request(dialect, true);
        let r = ask(&gw, &path, &body, "answer", &[]);
        assert_eq!(r.status, 200);
        assert!(called(dialect, &r).is_empty(), "{dialect}: {}", r.text());
        let framed = match dialect {
            "ollama" => r.text().lines().count() > 1 && !r.text().contains("data: "),
            _ => r.text().contains("data: "),
        };
        assert!(
            framed,
            "{dialect}: a stream in the API's framing: {}",
            r.text()
        );
    }
    let n = dialects.len() as u64;
    assert_eq!(gw.stat("toolsift.search.released"), n);
    assert_eq!(gw.stat("toolsift.search.rounds"), 0);
    assert_eq!(upstream_log(&gw).len(), dialects.len());
}

/// A model that keeps searching: `max_search_rounds` follow-ups, the last without the
/// meta-tool, and no `find_tools` call reaches the client.
#[test]
fn round_limit() {
    let gw = start(Hold::Held, json!({"search": {"max_search_rounds": 2}}));
    let (path, body) = request("anthropic", false);
    let r = ask(&gw, &path, &body, "always-search", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let log = upstream_log(&gw);
    assert_eq!(log.len(), 3);
    let last = tool_names("anthropic", &log[2]["body"]);
    assert!(!last.iter().any(|t| t == "find_tools"), "{last:?}");
    assert!(!called("anthropic", &r).iter().any(|c| c == "find_tools"));
    assert!(called("anthropic", &r).contains(&WANT.to_owned()));
    assert!(
        r.header("x-toolsift-search")
            .unwrap()
            .starts_with("rounds=2")
    );
}

/// `find_tools` beside a real call: the search is removed and the real call returned.
#[test]
fn mixed_calls_keep_the_real_one() {
    let gw = start(Hold::Unheld, json!({"always_include": ["send_email"]}));
    for (dialect, stream) in [("openai_chat", false), ("anthropic", true)] {
        let (path, body) = request(dialect, stream);
        let r = ask(&gw, &path, &body, "mixed", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            called(dialect, &r),
            ["send_email"],
            "{dialect}: {}",
            r.text()
        );
    }
    assert_eq!(upstream_log(&gw).len(), 2, "no follow-ups");
}

/// A failing follow-up: the client gets the provider's error, or toolsift's 502 when Envoy
/// could not get one; never a dangling `find_tools` call.
#[test]
fn follow_up_failures() {
    let gw = start(Hold::Held, json!({"search": {"timeout_ms": 300}}));
    let (path, body) = request("openai_chat", false);
    let r = ask(
        &gw,
        &path,
        &body,
        "search",
        &[("x-demo-fail-followup", "429")],
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string());
    // Without held headers the status went with the first response: the provider's error
    // travels in the body (an `error` event for a stream).
    let unheld = start(Hold::Unheld, json!({"search": {"timeout_ms": 300}}));
    let r = ask(
        &unheld,
        &path,
        &body,
        "search",
        &[("x-demo-fail-followup", "429")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
    let (stream_path, stream_body) = request("anthropic", true);
    let r = ask(
        &unheld,
        &stream_path,
        &stream_body,
        "search",
        &[("x-demo-fail-followup", "429")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("event: error"), "{}", r.text());
    assert!(!called("anthropic", &r).iter().any(|c| c == "find_tools"));
    assert_eq!(unheld.stat("toolsift.search.failed"), 2);

    let (path, body) = request("openai_chat", true);
    let r = ask(
        &gw,
        &path,
        &body,
        "search",
        &[("x-demo-chunk-delay-ms", "200")],
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "toolsift_error");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("toolsift:")
    );
    assert!(gw.stat("toolsift.search.failed") >= 2);
}

/// Tools the client marks `defer_loading: true` are never shown eagerly, and no forwarded
/// tool keeps the flag.
#[test]
fn client_marked_deferral() {
    let gw = start(Hold::Unheld, json!({"search": {"eager_k": 3}}));
    let (path, mut body) = request("anthropic", false);
    for t in body["tools"].as_array_mut().unwrap() {
        if t["name"] == WANT || t["name"] == "send_email" {
            t["defer_loading"] = json!(true);
        }
    }
    let r = ask(&gw, &path, &body, "search", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let log = upstream_log(&gw);
    let first = tool_names("anthropic", &log[0]["body"]);
    assert_eq!(first.len(), 4, "meta-tool and three eager tools: {first:?}");
    assert!(
        !first.contains(&WANT.to_owned()),
        "deferred by the client: {first:?}"
    );
    for entry in &log {
        assert!(!entry["body"]["tools"].to_string().contains("defer_loading"));
    }
    assert!(called("anthropic", &r).contains(&WANT.to_owned()));
}

/// A request that carries the provider's own tool search goes upstream untouched.
#[test]
fn native_search_passes_through() {
    let gw = start(Hold::Unheld, json!({}));
    let (path, mut body) = request("anthropic", false);
    let tools = body["tools"].as_array_mut().unwrap();
    for t in tools.iter_mut().skip(3) {
        t["defer_loading"] = json!(true);
    }
    tools.push(json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}));
    let sent = body.to_string();
    let r = gw.post(&path, &[("x-demo-echo", "body")], sent.as_bytes());
    assert_eq!(
        r.header("x-toolsift").unwrap(),
        "kept=80 total=80 skipped=native_search"
    );
    assert_eq!(r.text(), sent, "the upstream got the client's bytes");
    assert_eq!(gw.stat("toolsift.search.native"), 1);
    assert_eq!(gw.stat("toolsift.skipped.native_search"), 1);
}

/// `use_tool` whose params fit the best tool becomes a direct call of that tool.
#[test]
fn use_tool_becomes_a_direct_call() {
    let gw = start(Hold::Unheld, json!({"search": {"use_tool": true}}));
    let (path, body) = request("openai_chat", false);
    let args = r#"{"location":"Paris, France"}"#;
    let r = ask(
        &gw,
        &path,
        &body,
        "use-tool",
        &[("x-demo-args", args), ("x-demo-query", "current weather")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], WANT, "{}", r.text());
    let sent: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(sent, serde_json::from_str::<Value>(args).unwrap());
    assert_eq!(upstream_log(&gw).len(), 1, "resolved without a follow-up");
}

/// A model a `native_search` rule names gets the provider's own tool search: every tool stays
/// in its place, the ones search mode defers marked `defer_loading: true`, the provider's
/// search tool first, and (Anthropic) the beta added to the client's `anthropic-beta`. The
/// response comes back untouched: there is no gateway loop.
#[test]
fn native_search_rule_hands_over_to_the_provider() {
    let gw = start(
        Hold::Held,
        json!({
            "always_include": ["send_email"],
            "search": {"native_search": [{"model": "claude-opus-*"}, {"model": "gpt-5.4*"}]}
        }),
    );
    let (path, mut body) = request("anthropic", false);
    body["model"] = json!("claude-opus-4-5");
    let r = ask(
        &gw,
        &path,
        &body,
        "answer",
        &[("anthropic-beta", "prompt-caching-2024-07-31")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-toolsift").unwrap(),
        "kept=1 total=80 search=provider"
    );
    assert_eq!(r.header("x-toolsift-search"), None, "no gateway loop");
    let log = upstream_log(&gw);
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0]["headers"]["anthropic-beta"],
        "prompt-caching-2024-07-31,advanced-tool-use-2025-11-20"
    );
    let sent = log[0]["body"]["tools"].as_array().unwrap();
    assert_eq!(
        sent[0],
        json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
    );
    let client = body["tools"].as_array().unwrap();
    assert_eq!(sent.len(), client.len() + 1, "no tool removed");
    for (got, original) in sent[1..].iter().zip(client) {
        let mut expected = original.clone();
        if original["name"] != "send_email" {
            expected["defer_loading"] = json!(true);
        }
        assert_eq!(got, &expected, "in place, only defer_loading added");
    }
    // Everything but the tools array is the client's.
    let mut rest = log[0]["body"].clone();
    rest["tools"] = body["tools"].clone();
    assert_eq!(rest, body);
    assert_eq!(gw.stat("toolsift.search.provider"), 1);

    // OpenAI Responses: its own `tool_search`, no beta header.
    let (path, mut body) = request("openai_responses", false);
    body["model"] = json!("gpt-5.4");
    let r = ask(&gw, &path, &body, "answer", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let log = upstream_log(&gw);
    let last = log.last().unwrap();
    assert_eq!(last["body"]["tools"][0], json!({"type": "tool_search"}));
    assert_eq!(last["headers"].get("anthropic-beta"), None);
    assert_eq!(gw.stat("toolsift.search.provider"), 2);
}

/// A model no rule names goes through the gateway loop as before, streaming too, even though
/// the request's headers were held for a possible beta; the client's `anthropic-beta` is
/// forwarded unchanged.
#[test]
fn native_search_rule_for_another_model() {
    let gw = start(
        Hold::Held,
        json!({"search": {"native_search": [{"model": "claude-opus-*"}]}}),
    );
    let (path, body) = request("anthropic", true);
    let r = ask(
        &gw,
        &path,
        &body,
        "search",
        &[("anthropic-beta", "prompt-caching-2024-07-31")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(called("anthropic", &r).contains(&WANT.to_owned()));
    assert!(r.header("x-toolsift").unwrap().ends_with("search=search"));
    let log = upstream_log(&gw);
    assert_eq!(log.len(), 2);
    assert_eq!(tool_names("anthropic", &log[0]["body"]), ["find_tools"]);
    for entry in &log {
        assert_eq!(
            entry["headers"]["anthropic-beta"],
            "prompt-caching-2024-07-31"
        );
        assert!(!entry["body"]["tools"].to_string().contains("defer_loading"));
    }
    assert_eq!(gw.stat("toolsift.search.provider"), 0);
}

/// Without held request headers toolsift cannot add `anthropic-beta`: a `native_search` rule
/// that needs one applies only when the client sent it, and the gateway's own search serves the
/// other requests (the provider would refuse its search tool without the beta).
#[test]
fn native_search_rule_without_held_headers() {
    let gw = start(
        Hold::Unheld,
        json!({"search": {"native_search": [{"model": "claude-opus-*"}]}}),
    );
    let (path, mut body) = request("anthropic", false);
    body["model"] = json!("claude-opus-4-5");
    let r = ask(&gw, &path, &body, "search", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("x-toolsift").unwrap().ends_with("search=search"));
    assert!(called("anthropic", &r).contains(&WANT.to_owned()));
    let beta = "advanced-tool-use-2025-11-20";
    let r = ask(&gw, &path, &body, "answer", &[("anthropic-beta", beta)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("x-toolsift").unwrap().ends_with("search=provider"));
    let log = upstream_log(&gw);
    let last = log.last().unwrap();
    assert_eq!(last["headers"]["anthropic-beta"], beta);
    assert_eq!(
        last["body"]["tools"][0]["type"],
        "tool_search_tool_bm25_20251119"
    );
}

/// With `ranking: hybrid`, the model's own search words are ranked as filter mode ranks a
/// request: embedded through the Envoy cluster (the real all-MiniLM-L6-v2 server) and fused
/// with the keyword channels. A paraphrase that shares no word with the tool is found; by
/// keyword alone it never is.
#[test]
fn hybrid_ranking_answers_find_tools() {
    const WANTED: &str = "send_slack_message";
    const SEARCH_WORDS: &str = "ping my teammates that the nightly build broke";
    let embed = EmbedServer::start();
    let run = |config: Value| {
        let mut config = config;
        config["search"] = json!({"hold_headers": true});
        let gw = Gateway::start_with(&search_config(config), &[], |yaml| {
            yaml.replace("port_value: 18100", &format!("port_value: {}", embed.port))
        });
        let (path, mut body) = request("openai_chat", false);
        body["messages"][1]["content"] = json!("Tell the team about the broken build.");
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", WANTED),
            ("x-demo-script", "search"),
            ("x-demo-query", SEARCH_WORDS),
        ];
        let r = gw.post(&path, &headers, body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        (gw, r)
    };

    let (keyword, r) = run(json!({}));
    let search = r.header("x-toolsift-search").unwrap();
    assert!(
        !search.contains(WANTED),
        "keyword ranking finds it: {search}"
    );
    assert!(!called("openai_chat", &r).contains(&WANTED.to_owned()));
    assert_eq!(keyword.stat("toolsift.search.hybrid"), 0);
    drop(keyword);

    let before = embed.stats()["inputs"].as_u64().unwrap();
    let (hybrid, r) = run(json!({
        "ranking": "hybrid",
        "embeddings": {"cluster": "embeddings", "model": "all-MiniLM-L6-v2",
                       "timeout_ms": 30000, "max_batch": 128}
    }));
    let search = r.header("x-toolsift-search").unwrap();
    assert!(
        search.starts_with("rounds=1 found=") && search.contains(WANTED),
        "{search}"
    );
    assert!(
        called("openai_chat", &r).contains(&WANTED.to_owned()),
        "{}",
        r.text()
    );
    assert_eq!(hybrid.stat("toolsift.search.hybrid"), 1);
    // The request's call embedded its question and the 80 tools; the search's call only the
    // model's search words.
    let tools = common::catalog().len() as u64;
    assert_eq!(
        embed.stats()["inputs"].as_u64().unwrap() - before,
        1 + tools + 1
    );
    let log = upstream_log(&hybrid);
    assert_eq!(tool_names("openai_chat", &log[0]["body"]), ["find_tools"]);
    assert!(tool_names("openai_chat", &log[1]["body"]).contains(&WANTED.to_owned()));
}

/// The data of every event of a streamed response, parsed.
fn events(r: &Response) -> Vec<Value> {
    r.text()
        .split("\n\n")
        .filter_map(|frame| {
            let data: Vec<&str> = frame
                .lines()
                .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

/// A streamed turn that starts with text and then calls `find_tools` ("Let me look that up."):
/// the text reaches the client as it comes, the call never does; the gateway answers it and
/// the next round's stream follows the text in the same response.
#[test]
fn text_then_search_in_a_stream() {
    for hold in [Hold::Held, Hold::Unheld] {
        text_then_search(hold);
    }
}

fn text_then_search(hold: Hold) {
    let gw = start(hold, json!({}));
    for dialect in ["anthropic", "openai_chat", "gemini", "openai_responses"] {
        let (path, body) = request(dialect, true);
        let before = upstream_log(&gw).len();
        let r = ask(
            &gw,
            &path,
            &body,
            "text-first",
            &[("x-demo-chunk-delay-ms", "5")],
        );
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let calls = called(dialect, &r);
        assert!(
            !calls.is_empty() && calls.iter().all(|c| c == WANT),
            "{dialect}: {calls:?} in {}",
            r.text()
        );
        assert!(
            r.text().contains("look"),
            "{dialect}: the text (\"Let me look that up.\", in pieces) went through: {}",
            r.text()
        );
        assert_eq!(
            upstream_log(&gw).len() - before,
            2,
            "{dialect}: one follow-up"
        );
        let events = events(&r);
        match dialect {
            "anthropic" => {
                // One message, content blocks numbered 0, 1, 2 in order: round 1's text, then
                // round 2's text and call.
                let starts: Vec<&Value> = events
                    .iter()
                    .filter(|e| e["type"] == "content_block_start")
                    .collect();
                let indices: Vec<u64> = starts
                    .iter()
                    .map(|e| e["index"].as_u64().unwrap())
                    .collect();
                assert_eq!(indices, [0, 1, 2], "{}", r.text());
                assert_eq!(starts[2]["content_block"]["name"], WANT);
                let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
                assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
                assert_eq!(kinds.last(), Some(&"message_stop"));
            }
            "openai_chat" => {
                assert!(
                    r.text().trim_end().ends_with("data: [DONE]"),
                    "{}",
                    r.text()
                );
                assert_eq!(r.text().matches("[DONE]").count(), 1);
            }
            "openai_responses" => {
                // One response: round 1's message, then round 2's items numbered after it, the
                // events numbered on, and the final output listing all three items.
                let of_kind = |kind: &str| -> Vec<&Value> {
                    events.iter().filter(|e| e["type"] == kind).collect()
                };
                assert_eq!(of_kind("response.created").len(), 1);
                let added: Vec<u64> = of_kind("response.output_item.added")
                    .iter()
                    .map(|e| e["output_index"].as_u64().unwrap())
                    .collect();
                assert_eq!(added, [0, 1, 2], "{}", r.text());
                let numbers: Vec<u64> = events
                    .iter()
                    .filter_map(|e| e["sequence_number"].as_u64())
                    .collect();
                assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
                let output = of_kind("response.completed")[0]["response"]["output"].clone();
                let kinds: Vec<&str> = output
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["type"].as_str().unwrap())
                    .collect();
                assert_eq!(kinds, ["message", "message", "function_call"]);
                // One response id from `response.created` to `response.completed` (the
                // OpenAI SDK refuses a stream whose id changes)...
                let id = |kind: &str| {
                    of_kind(kind)[0]["response"]["id"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                };
                let shown = id("response.created");
                assert_eq!(id("response.completed"), shown);
                // ...and the client's next request, answering the call it got and naming that
                // id, reaches the response the provider stored, which holds the answered search
                // and the call (the demo upstream stores responses and refuses an output for a
                // call it never produced, as OpenAI does).
                let call_id = output[2]["call_id"].as_str().unwrap();
                let mut next = body.clone();
                next["previous_response_id"] = json!(shown);
                next["input"] = json!([{"type": "function_call_output", "call_id": call_id,
                                        "output": "{\"temperature_c\": 18}"}]);
                let r = ask(&gw, &path, &next, "answer", &[]);
                assert_eq!(r.status, 200, "{}", r.text());
                let received =
                    upstream_log(&gw).last().unwrap()["body"]["previous_response_id"].clone();
                assert!(received.is_string(), "{received}");
                assert_ne!(received, json!(shown), "the alias was followed");
            }
            _ => {}
        }
    }
    assert_eq!(gw.stat("toolsift.search.rounds"), 4);
    // Four text-first streams, and the answer continuing the Responses conversation.
    assert_eq!(gw.stat("toolsift.search.released"), 5);
}

/// A route that rewrites the host and the path and adds a credential (as the shipped
/// `docs/examples` configs do for api.openai.com): the follow-ups carry what the router sent
/// upstream, not what the client sent, and neither asks for a compressed answer.
#[test]
fn follow_ups_carry_the_routers_rewrites() {
    let config = search_config(json!({"search": {"hold_headers": true}}));
    let gw = Gateway::start_with(&config, &[], |yaml| {
        yaml.replace(
            "                  cluster: llm\n",
            "                  cluster: llm\n                  host_rewrite_literal: model.internal\n                  prefix_rewrite: \"/openai/\"\n",
        )
        .replace(
            "                  timeout: 300s\n",
            "                  timeout: 300s\n                request_headers_to_add:\n                - header: { key: x-upstream-key, value: gateway-secret }\n",
        )
    });
    let (_, body) = request("openai_chat", false);
    // SDKs offer gzip, and providers use it: search mode asks for the turn uncompressed.
    let gzip = [("accept-encoding", "gzip, deflate")];
    let r = ask(&gw, "/v1/chat/completions", &body, "search", &gzip);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(called("openai_chat", &r).contains(&WANT.to_owned()));
    let log = upstream_log(&gw);
    assert_eq!(log.len(), 2);
    for entry in &log {
        assert_eq!(entry["headers"].get("accept-encoding"), None);
        assert_eq!(entry["path"], "/openai/v1/chat/completions");
        assert_eq!(entry["headers"]["host"], "model.internal");
        assert_eq!(entry["headers"]["x-upstream-key"], "gateway-secret");
        assert_eq!(entry["headers"]["authorization"], "Bearer client-key");
    }
}

const MADE_UP: &str = "get_weather_now";

/// A call of a tool that does not exist (the model misremembers a name) never reaches the
/// client: the model gets a structured error naming `find_tools` and the closest names, and
/// the loop goes on: it searches, finds the tool and calls it. Every dialect, streamed and not.
#[test]
fn a_made_up_tool_is_answered_to_the_model_and_the_loop_goes_on() {
    let gw = Gateway::start(r#"{"mode":"search","min_tools":20}"#);
    let cases = common::DIALECTS
        .iter()
        .flat_map(|d| [(*d, false), (*d, true)])
        // Bedrock's converse-stream is filtered, not searched (its binary stream is not read).
        .filter(|(d, stream)| !(*d == "bedrock" && *stream));
    let mut n = 0;
    for (dialect, stream) in cases {
        n += 1;
        common::http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        let (path, body) = request(dialect, stream);
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", WANT),
            ("x-demo-call", MADE_UP),
            ("x-demo-script", "search"),
        ];
        let r = gw.post(&path, &headers, body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{dialect} {stream}: {}", r.text());
        let mut calls = called(dialect, &r);
        calls.dedup();
        assert_eq!(calls, [WANT], "{dialect} {stream}: {}", r.text());
        assert!(
            !r.text().contains(MADE_UP),
            "{dialect} {stream}: {}",
            r.text()
        );
        let log = upstream_log(&gw);
        assert_eq!(
            log.len(),
            3,
            "{dialect} {stream}: the error, the search, the call"
        );
        let second = log[1]["body"].to_string();
        for expected in [
            "There is no tool named `get_weather_now`. Call find_tools",
            "unknown_tool",
            "closest",
            "get_weather_forecast",
        ] {
            assert!(
                second.contains(expected),
                "{dialect} {stream}: {expected} in {second}"
            );
        }
    }
    assert_eq!(gw.stat("toolsift.search.unknown_tools"), n);
    assert!(!gw.log_text().contains("panicked"));
}

/// `suggestions`: a search whose best match is weak gets tools of the second catalog, marked
/// `"suggested": true` with where to get them, in the tool result the model reads; they never
/// join the tools it may call. Every dialect, streamed and not.
#[test]
fn a_weak_search_gets_suggestions_that_never_join_the_tools() {
    let config = json!({
        "mode": "search",
        "min_tools": 20,
        "search": {"max_search_rounds": 1},
        "suggestions": {
            "min_score": 1000,
            "k": 2,
            "tools": [
                {"name": "reserve_parking_spot", "description": "Reserve a parking spot in the office garage",
                 "source": "the facilities MCP server: ask #platform to connect it"},
                {"name": "book_meeting_room", "description": "Book a meeting room"}
            ]
        }
    });
    let gw = Gateway::start(&config.to_string());
    let cases = common::DIALECTS
        .iter()
        .flat_map(|d| [(*d, false), (*d, true)])
        .filter(|(d, stream)| !(*d == "bedrock" && *stream));
    let mut n = 0;
    for (dialect, stream) in cases {
        n += 1;
        common::http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        let (path, body) = request(dialect, stream);
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", "reserve_parking_spot"),
            ("x-demo-query", "reserve a parking spot for tomorrow"),
            ("x-demo-script", "search"),
        ];
        let r = gw.post(&path, &headers, body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{dialect} {stream}: {}", r.text());
        assert!(
            !called(dialect, &r).contains(&"reserve_parking_spot".to_owned()),
            "{dialect} {stream}: {}",
            r.text()
        );
        let log = upstream_log(&gw);
        assert!(log.len() >= 2, "{dialect} {stream}: a follow-up");
        let result = log[1]["body"].to_string();
        for expected in [
            "reserve_parking_spot",
            "suggested",
            "the facilities MCP server: ask #platform to connect it",
            "do not call them",
        ] {
            assert!(
                result.contains(expected),
                "{dialect} {stream}: {expected} in {result}"
            );
        }
        for entry in &log {
            let seen = tool_names(dialect, &entry["body"]);
            assert!(
                !seen.iter().any(|t| t == "reserve_parking_spot"),
                "{dialect} {stream}: {seen:?}"
            );
        }
    }
    assert_eq!(gw.stat("toolsift.search.suggested"), n);
    assert!(!gw.log_text().contains("panicked"));
}
