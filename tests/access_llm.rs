//! Access rules on LLM traffic in the real Envoy with the real .wasm, the caller named by a
//! header (`x-group`): in every dialect, filter and search mode, streamed and not, a caller
//! never sees another group's tools (what the demo upstream received), `find_tools` never
//! finds a denied tool, and a model's call of a denied tool (the scripted model's
//! `x-demo-call`: a tool it was not given) never reaches the client.

use crate::common;

use common::DIALECTS;
use common::llm::{request, tool_names, upstream_log};
use common::{Gateway, Response, http};
use serde_json::{Value, json};

/// What the group `travel` may use; `comms` has the messaging tools.
const TRAVEL: [&str; 9] = [
    "get_current_weather",
    "get_weather_forecast",
    "search_flights",
    "search_hotels",
    "book_hotel",
    "geocode_address",
    "get_directions",
    "get_current_time",
    "convert_units",
];
const WANT: &str = "get_current_weather";
/// A `comms` tool: denied to `travel`.
const DENIED: &str = "send_slack_message";
const REFUSAL: &str = "Tool `send_slack_message` is not available.";

fn start(mode: &str) -> Gateway {
    let config = json!({
        "mode": mode,
        "min_tools": 20,
        "access": {
            "identity": [{"header": "x-group"}],
            "default": "deny",
            "rules": [
                {"when": ["travel"], "allow": TRAVEL},
                {"when": ["comms"], "allow": ["send_slack_message", "list_slack_channels",
                    "search_slack_messages", "send_email", "search_emails", "get_email",
                    "get_current_time"]}
            ]
        }
    });
    Gateway::start(&config.to_string())
}

/// Sends `dialect`'s request as a `travel` caller to the scripted model wanting `WANT`.
fn ask(gw: &Gateway, dialect: &str, stream: bool, extra: &[(&str, &str)]) -> Response {
    http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
    let (path, body) = request(dialect, stream);
    let mut headers: Vec<(&str, &str)> = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", WANT),
        ("x-group", "travel"),
    ]
    .into_iter()
    .filter(|(name, _)| !extra.iter().any(|(n, _)| n == name))
    .collect();
    headers.extend_from_slice(extra);
    let r = gw.post(&path, &headers, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{dialect} stream={stream}: {}", r.text());
    r
}

/// Every tool any request upstream offered the model is one `travel` may use (or the
/// meta-tool).
fn only_travel_tools_reached_the_model(gw: &Gateway, dialect: &str) -> Vec<Value> {
    let log = upstream_log(gw);
    assert!(!log.is_empty(), "{dialect}: nothing reached the upstream");
    for entry in &log {
        for tool in tool_names(dialect, &entry["body"]) {
            assert!(
                tool == "find_tools" || TRAVEL.contains(&tool.as_str()),
                "{dialect}: {tool} reached the model"
            );
        }
    }
    log
}

/// The tools a response calls, each once (a Responses stream names a call in its
/// `output_item.added` and again in `response.completed`).
fn called(dialect: &str, r: &Response) -> Vec<String> {
    let mut calls = common::llm::called(dialect, r);
    calls.dedup();
    calls
}

/// The client got the calls `allowed` and, in place of the denied one, the refusal.
fn refused_in_words(dialect: &str, r: &Response, allowed: &[&str]) {
    let calls = called(dialect, r);
    assert_eq!(calls, allowed, "{dialect}: {}", r.text());
    assert!(r.text().contains(REFUSAL), "{dialect}: {}", r.text());
}

/// No answer had to be replaced by toolsift's error, and nothing panicked.
fn every_answer_was_checked(gw: &Gateway) {
    assert_eq!(gw.stat("toolsift.access.unchecked"), 0);
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// Every dialect's stream, and every whole answer.
fn cases() -> Vec<(&'static str, bool)> {
    DIALECTS
        .iter()
        .flat_map(|d| [(*d, false), (*d, true)])
        .collect()
}

/// The cases search mode follows: Bedrock's converse-stream is filtered instead (and its
/// answer checked as in filter mode).
fn search_cases() -> Vec<(&'static str, bool)> {
    cases()
        .into_iter()
        .filter(|(d, stream)| !(*d == "bedrock" && *stream))
        .collect()
}

#[test]
fn filter_mode_replaces_denied_calls_with_a_refusal() {
    let gw = start("filter");
    let mut refused = 0;
    for (dialect, stream) in cases() {
        // Streams say some text first: the client gets it as it comes, and the call after it
        // is held and refused.
        let script = if stream { "text-first" } else { "search" };
        let r = ask(
            &gw,
            dialect,
            stream,
            &[("x-demo-call", DENIED), ("x-demo-script", script)],
        );
        refused_in_words(dialect, &r, &[]);
        // The upstream got the caller's tools only.
        let seen = r.header("x-demo-tools").unwrap_or_default();
        assert!(!seen.is_empty(), "{dialect}: {:?}", r.headers);
        for tool in seen.split(',') {
            assert!(
                TRAVEL.contains(&tool),
                "{dialect}: {tool} reached the model"
            );
        }
        only_travel_tools_reached_the_model(&gw, dialect);
        assert!(
            r.header("x-toolsift").unwrap().contains("denied=71"),
            "{dialect}: {:?}",
            r.header("x-toolsift")
        );
        // Beside an allowed call: that call stays, the denied one is refused in words.
        let both = format!("{WANT},{DENIED}");
        let r = ask(
            &gw,
            dialect,
            stream,
            &[("x-demo-call", &both), ("x-demo-script", script)],
        );
        refused_in_words(dialect, &r, &[WANT]);
        refused += 2;
    }
    assert_eq!(gw.stat("toolsift.access.denied.call"), refused);
    // Answers without a denied call are not touched (a search-mode stat never moves).
    let r = ask(&gw, "anthropic", true, &[("x-demo-script", "text-first")]);
    assert_eq!(called("anthropic", &r), [WANT]);
    assert_eq!(gw.stat("toolsift.access.denied.call"), refused);
    assert_eq!(gw.stat("toolsift.search.held"), 0);
    every_answer_was_checked(&gw);
}

#[test]
fn search_mode_never_shows_finds_or_delivers_a_denied_tool() {
    let gw = start("search");
    for (dialect, stream) in search_cases() {
        // The model first calls a tool it was never given: it is told there is no such tool,
        // searches, finds the weather tool and calls it.
        let r = ask(
            &gw,
            dialect,
            stream,
            &[("x-demo-call", DENIED), ("x-demo-script", "search")],
        );
        let calls = called(dialect, &r);
        assert_eq!(calls, [WANT], "{dialect} {stream}: {}", r.text());
        assert!(
            !r.text().contains(DENIED),
            "{dialect} {stream}: {}",
            r.text()
        );
        let log = only_travel_tools_reached_the_model(&gw, dialect);
        assert_eq!(
            log.len(),
            3,
            "{dialect} {stream}: the refusal, the search, the call"
        );
        let second = log[1]["body"].to_string();
        assert!(
            second.contains("There is no tool named `send_slack_message`"),
            "{dialect}: {second}"
        );
        // A search for the denied tool finds none of the messaging tools: the model never
        // gets one, and says so.
        let r = ask(
            &gw,
            dialect,
            stream,
            &[
                ("x-demo-want", DENIED),
                ("x-demo-query", "send a message to a slack channel"),
            ],
        );
        assert!(called(dialect, &r).is_empty(), "{dialect}: {}", r.text());
        for entry in only_travel_tools_reached_the_model(&gw, dialect) {
            let sent = entry["body"].to_string();
            assert!(!sent.contains("slack_"), "{dialect}: {sent}");
        }
    }
    assert!(gw.stat("toolsift.access.denied.call") >= 10);
    every_answer_was_checked(&gw);
}

/// Gemini's JSON-array stream (no `alt=sse`) cannot be checked for calls of denied tools:
/// under access rules such a request is refused, and nothing goes upstream.
#[test]
fn streams_toolsift_cannot_check_are_refused_under_access_rules() {
    let gw = start("filter");
    let (_, gemini) = request("gemini", false);
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let r = gw.post(
        path,
        &[("x-group", "travel")],
        gemini.to_string().as_bytes(),
    );
    assert_eq!(r.status, 400, "{path}: {}", r.text());
    assert_eq!(r.json()["error"]["code"], "access_unsupported_stream");
    assert_eq!(gw.stat("toolsift.access.unsupported_stream"), 1);
    assert!(upstream_log(&gw).is_empty(), "nothing went upstream");
}

/// Bedrock's binary converse-stream in search mode, which does not follow it: the request is
/// filtered, and its answer checked as in filter mode (a denied call refused in words, in
/// messages whose CRCs are valid).
#[test]
fn search_mode_checks_bedrock_streams_it_does_not_follow() {
    let gw = start("search");
    let both = format!("{WANT},{DENIED}");
    let r = ask(
        &gw,
        "bedrock",
        true,
        &[("x-demo-call", &both), ("x-demo-script", "text-first")],
    );
    refused_in_words("bedrock", &r, &[WANT]);
    assert_eq!(upstream_log(&gw).len(), 1, "filtered: one request upstream");
    only_travel_tools_reached_the_model(&gw, "bedrock");
    assert_eq!(gw.stat("toolsift.access.denied.call"), 1);
    assert_eq!(gw.stat("toolsift.access.unsupported_stream"), 0);
    every_answer_was_checked(&gw);
}

/// Calls of remote MCP connectors' tools in a model's answer (Responses `mcp_call`, Anthropic
/// `mcp_tool_use`) were run by the provider before toolsift saw them: counted
/// (`toolsift.access.connector_calls`), the answer delivered as it came, nothing claimed as
/// stopped. The demo upstream echoes the request (as JSON), and the request carries the
/// answer beside its own fields.
#[test]
fn connector_calls_in_answers_are_counted_never_stopped() {
    let config = json!({"access": {"default": "allow",
        "rules": [{"when": ["*"], "deny": ["*delete*"]}]}});
    let gw = Gateway::start(&config.to_string());
    let responses = json!({"model": "gpt-5", "input": "find the repo",
        "tools": [{"type": "function", "name": "get_pod", "parameters": {}}],
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "mcp_call", "id": "mcp_1", "server_label": "github", "name": "search_repos",
             "arguments": "{}", "output": "[]"},
            {"type": "mcp_call", "id": "mcp_2", "server_label": "github", "name": "delete_repo",
             "arguments": "{}", "output": "done"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}});
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "messages": [{"role": "user", "content": "find the repo"}],
        "tools": [{"name": "get_pod", "input_schema": {"type": "object"}}],
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "search_repos",
             "server_name": "github", "input": {}},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": false,
             "content": [{"type": "text", "text": "[]"}]},
            {"type": "text", "text": "Done."}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}});
    let echo = [("x-demo-echo", "body")];
    for (path, body) in [("/v1/responses", &responses), ("/v1/messages", &anthropic)] {
        let r = gw.post(path, &echo, body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        // Delivered as it came: the provider ran the calls already, `delete_repo` too.
        assert_eq!(r.json(), *body, "{path}");
    }
    assert_eq!(gw.stat("toolsift.access.connector_calls"), 3);
    assert_eq!(gw.stat("toolsift.access.denied.call"), 0);
}
