//! The loop guard in the real Envoy, with the real `.wasm`, in front of the demo upstream: an
//! agent whose conversation calls the same tool with the same arguments twice (written
//! differently) gets that tool taken out of its next request, in every dialect; other
//! arguments, an exempt tool and a new question leave it alone.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use common::llm::{called, request, tool_names, upstream_log};
use common::{DIALECTS, Gateway, http};
use serde_json::{Value, json};

const TOOL: &str = "get_current_weather";

/// `body` (a request of `dialect` asking the weather) with the agent's turns after the
/// question: each of `calls` made by the model and answered by the client.
fn with_calls(dialect: &str, mut body: Value, calls: &[Value]) -> Value {
    for (i, args) in calls.iter().enumerate() {
        let id = format!("call_{i}");
        // OpenAI sends arguments as a string of JSON; the writer's own spacing is kept.
        let text = format!(" {} ", args);
        match dialect {
            "openai_chat" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": TOOL, "arguments": text}}]}));
                m.push(json!({"role": "tool", "tool_call_id": id, "content": "sunny"}));
            }
            "openai_responses" => {
                if body["input"].is_string() {
                    body["input"] = json!([{"role": "user", "content": body["input"].clone()}]);
                }
                let m = body["input"].as_array_mut().unwrap();
                m.push(json!({"type": "function_call", "call_id": id, "name": TOOL, "arguments": text}));
                m.push(json!({"type": "function_call_output", "call_id": id, "output": "sunny"}));
            }
            "anthropic" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": TOOL, "input": args}]}));
                m.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": "sunny"}]}));
            }
            "gemini" => {
                let m = body["contents"].as_array_mut().unwrap();
                m.push(json!({"role": "model", "parts": [{"functionCall": {"name": TOOL, "args": args}}]}));
                m.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": TOOL, "response": {"output": "sunny"}}}]}));
            }
            "bedrock" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": id, "name": TOOL, "input": args}}]}));
                m.push(json!({"role": "user", "content": [
                    {"toolResult": {"toolUseId": id, "content": [{"text": "sunny"}]}}]}));
            }
            "ollama" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": TOOL, "arguments": args}}]}));
                m.push(json!({"role": "tool", "content": "sunny"}));
            }
            other => panic!("{other}"),
        }
    }
    body
}

/// A new question from the user, after the agent's turns.
fn ask_again(dialect: &str, body: &mut Value) {
    let q = "And what about tomorrow?";
    match dialect {
        "openai_chat" | "ollama" => body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": q})),
        "openai_responses" => body["input"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": q})),
        "anthropic" => body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": [{"type": "text", "text": q}]})),
        "gemini" => body["contents"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "parts": [{"text": q}]})),
        "bedrock" => body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": [{"text": q}]})),
        other => panic!("{other}"),
    }
}

/// Sends `body`; returns the `x-toolsift` header and the tool names the upstream received.
fn send(gw: &Gateway, path: &str, body: &Value) -> (String, String) {
    let r = gw.post(path, &[], body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    (
        r.header("x-toolsift").unwrap_or_default().to_owned(),
        r.header("x-demo-tools").unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_tool_called_twice_alike_leaves_the_next_request_in_every_dialect() {
    let gw = Gateway::start(
        r#"{"top_k":5,"loop_guard":{"repeats":2,"window":10,"exempt":["get_weather_*"]}}"#,
    );
    let paris = json!({"location": "Paris", "days": 1});
    // The same arguments in another spelling: the number form differs.
    let paris_again = serde_json::from_str::<Value>(r#"{"days":1.0,"location":"Paris"}"#).unwrap();
    let lyon = json!({"location": "Lyon", "days": 1});
    for dialect in DIALECTS {
        let (path, question) = request(dialect, false);

        // Once: the tool is pinned (called in the history), as without the guard.
        let once = with_calls(dialect, question.clone(), std::slice::from_ref(&paris));
        let (header, received) = send(&gw, &path, &once);
        assert!(!header.contains("loop="), "{dialect}: {header}");
        assert!(received.contains(TOOL), "{dialect}: {received}");

        // Twice alike: evicted, the rest of the selection unchanged in size.
        let looping = with_calls(
            dialect,
            question.clone(),
            &[paris.clone(), paris_again.clone()],
        );
        let (header, received) = send(&gw, &path, &looping);
        assert!(
            header.starts_with("kept=5 ") && header.contains(&format!(" loop=evicted:{TOOL}")),
            "{dialect}: {header}"
        );
        assert!(
            !received.contains(TOOL),
            "{dialect}: the looping tool went upstream: {received}"
        );
        assert!(!received.is_empty(), "{dialect}");

        // Other arguments: no loop.
        let other = with_calls(dialect, question.clone(), &[paris.clone(), lyon.clone()]);
        let (header, received) = send(&gw, &path, &other);
        assert!(!header.contains("loop="), "{dialect}: {header}");
        assert!(received.contains(TOOL), "{dialect}: {received}");

        // A new question from the user starts a new task: the old calls are not a loop.
        let mut asked = looping.clone();
        ask_again(dialect, &mut asked);
        let (header, _) = send(&gw, &path, &asked);
        assert!(!header.contains("loop="), "{dialect}: {header}");
    }
    let evicted = gw.stat("toolsift.loop.evicted");
    assert_eq!(evicted, DIALECTS.len() as u64);
}

#[test]
fn exempt_tools_and_tool_choice_keep_a_repeated_tool() {
    let gw = Gateway::start(r#"{"top_k":5,"loop_guard":{"exempt":["get_current_*"]}}"#);
    let paris = json!({"location": "Paris"});
    let (path, question) = request("openai_chat", false);
    let looping = with_calls("openai_chat", question, &[paris.clone(), paris.clone()]);
    let (header, received) = send(&gw, &path, &looping);
    assert!(!header.contains("loop="), "{header}");
    assert!(received.contains(TOOL), "{received}");

    let gw = Gateway::start(r#"{"top_k":5,"loop_guard":{}}"#);
    let mut forced = looping.clone();
    forced["tool_choice"] = json!({"type": "function", "function": {"name": TOOL}});
    let (header, received) = send(&gw, &path, &forced);
    assert!(!header.contains("loop="), "{header}");
    assert!(received.contains(TOOL), "{received}");
    let (header, received) = send(&gw, &path, &looping);
    assert!(header.contains(" loop=evicted:"), "{header}");
    assert!(!received.contains(TOOL), "{received}");
}

#[test]
fn invalid_loop_guard_settings_stop_envoy_naming_the_field() {
    for (config, field) in [
        (r#"{"loop_guard":{"repeats":1}}"#, "loop_guard.repeats"),
        (r#"{"loop_guard":{"window":1}}"#, "loop_guard.window"),
        (r#"{"loop_guard":{"exempt":[""]}}"#, "loop_guard.exempt[0]"),
        (r#"{"loop_guard":{"repeat":3}}"#, "unknown field `repeat`"),
    ] {
        let (refused, log) = common::envoy_refuses(config);
        assert!(refused, "Envoy started with {config}");
        assert!(log.contains(field), "{config}: {log}");
    }
}

/// Search mode: the looping tool is not shown (it would be, as a tool the conversation
/// called); a search that finds it lets it back, and the model calls it.
#[test]
fn in_search_mode_a_search_finds_an_evicted_tool_again() {
    let gw = Gateway::start(r#"{"mode":"search","min_tools":20,"loop_guard":{}}"#);
    let paris = json!({"location": "Paris"});
    for dialect in ["openai_chat", "anthropic", "gemini"] {
        http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        let (path, question) = request(dialect, false);
        let looping = with_calls(dialect, question, &[paris.clone(), paris.clone()]);
        let headers = [("x-demo-model", "scripted"), ("x-demo-want", TOOL)];
        let r = gw.post(&path, &headers, looping.to_string().as_bytes());
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        assert!(
            r.header("x-toolsift").unwrap().contains(" loop=evicted:"),
            "{dialect}: {:?}",
            r.header("x-toolsift")
        );
        let log = upstream_log(&gw);
        assert_eq!(log.len(), 2, "{dialect}: the search, then the call");
        let shown = tool_names(dialect, &log[0]["body"]);
        assert!(!shown.iter().any(|t| t == TOOL), "{dialect}: {shown:?}");
        assert!(
            tool_names(dialect, &log[1]["body"])
                .iter()
                .any(|t| t == TOOL)
        );
        assert_eq!(called(dialect, &r), [TOOL], "{dialect}: {}", r.text());
    }
}
