//! The loop guard in the real Envoy, with the real `.wasm`, in front of the demo upstream: an
//! agent whose conversation calls the same tool with the same arguments twice (written
//! differently) gets that tool taken out of its next request, in every dialect; other
//! arguments, an exempt tool and a new question leave it alone.

use crate::common;

use common::llm::{called, request, tool_names, upstream_log};
use common::{DIALECTS, Gateway, http};
use serde_json::{Value, json};

const TOOL: &str = "get_current_weather";

/// `body` with the agent's turns after the question: each of `calls` (arguments) a call of
/// the weather tool, made by the model and answered by the client.
fn with_calls(dialect: &str, body: Value, calls: &[Value]) -> Value {
    let calls: Vec<(&str, Value)> = calls.iter().map(|a| (TOOL, a.clone())).collect();
    common::llm::with_calls(dialect, body, &calls)
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

/// The latest tool result of a body [`with_calls`] wrote, as the client sent it: where
/// `dialect` keeps the result's text, and that text with `note` appended as the dialect
/// appends it.
fn noted_result(dialect: &str, body: &mut Value, note: &str) {
    let appended = |text: &mut Value| {
        *text = json!(format!("{}\n\n{note}", text.as_str().unwrap()));
    };
    let last = |body: &mut Value, key: &str| -> Value {
        body[key].as_array().unwrap().last().unwrap().clone()
    };
    let key = match dialect {
        "openai_responses" => "input",
        "gemini" => "contents",
        _ => "messages",
    };
    let mut result = last(body, key);
    match dialect {
        "openai_chat" | "ollama" => appended(&mut result["content"]),
        "openai_responses" => appended(&mut result["output"]),
        "anthropic" => appended(&mut result["content"][0]["content"]),
        "gemini" => appended(&mut result["parts"][0]["functionResponse"]["response"]["output"]),
        "bedrock" => result["content"][0]["toolResult"]["content"]
            .as_array_mut()
            .unwrap()
            .push(json!({"text": note})),
        other => panic!("{other}"),
    }
    *body[key].as_array_mut().unwrap().last_mut().unwrap() = result;
}

fn without_tools(dialect: &str, mut body: Value) -> Value {
    match dialect {
        "bedrock" => body["toolConfig"]["tools"] = Value::Null,
        _ => body["tools"] = Value::Null,
    }
    body
}

/// With `note`, the looping tool's latest result reaches the provider with the guidance after
/// it, in every dialect, streamed or not (the request is the same either way); every other
/// byte the client wrote outside the tools arrives as written; the header and the stat say so.
#[test]
fn the_looping_tools_latest_result_carries_the_note_in_every_dialect() {
    let gw = Gateway::start(
        r#"{"top_k":5,"loop_guard":{"note":{"text":"Stop calling {tool}.",
            "tools":{"get_current_*":"{tool} keeps saying the same: answer with what you have."}}}}"#,
    );
    let note = format!("{TOOL} keeps saying the same: answer with what you have.");
    let paris = json!({"location": "Paris"});
    let echo = [("x-demo-echo", "raw")];
    let mut requests = 0;
    for dialect in DIALECTS {
        for stream in [false, true] {
            let (path, question) = request(dialect, stream);
            let looping = with_calls(dialect, question, &[paris.clone(), paris.clone()]);
            let sent = serde_json::to_string_pretty(&looping).unwrap();
            let r = gw.post(&path, &echo, sent.as_bytes());
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            requests += 1;
            let header = r.header("x-toolsift").unwrap_or_default();
            assert!(
                header.contains(&format!(" loop=evicted:{TOOL} noted={TOOL}")),
                "{dialect}: {header}"
            );
            // What the provider received: the client's body, the tools cut, the note added.
            let received = r.text();
            let received_value: Value = serde_json::from_str(&received).unwrap();
            assert!(
                !tool_names(dialect, &received_value)
                    .iter()
                    .any(|t| t == TOOL)
            );
            let mut expected = looping.clone();
            noted_result(dialect, &mut expected, &note);
            assert_eq!(
                without_tools(dialect, received_value),
                without_tools(dialect, expected),
                "{dialect} stream={stream}: {received}"
            );
            // Byte for byte: outside the tools array, the note is all that changed.
            let path: &[&str] = if dialect == "bedrock" {
                &["toolConfig", "tools"]
            } else {
                &["tools"]
            };
            let cut = |text: &str| {
                let span = toolsift::json::find_path(text, path).unwrap();
                format!("{}T{}", &text[..span.start], &text[span.end..])
            };
            let escaped = Value::from(note.as_str()).to_string();
            let inserted = if dialect == "bedrock" {
                format!(r#",{{"text":{escaped}}}"#)
            } else {
                format!(r"\n\n{}", &escaped[1..escaped.len() - 1])
            };
            assert_eq!(cut(&received).matches(&inserted).count(), 1, "{received}");
            assert_eq!(
                cut(&received).replacen(&inserted, "", 1),
                cut(&sent),
                "{dialect}"
            );
        }
    }
    assert_eq!(gw.stat("toolsift.loop.noted"), requests);
    assert_eq!(gw.stat("toolsift.loop.evicted"), requests);
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
        (
            r#"{"loop_guard":{"note":{"text":" "}}}"#,
            "loop_guard.note.text",
        ),
        (
            r#"{"loop_guard":{"note":{"tools":{"get_*":""}}}}"#,
            "loop_guard.note.tools.get_*",
        ),
        (
            r#"{"loop_guard":{"note":{"txt":"a"}}}"#,
            "unknown field `txt`",
        ),
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
    let gw = Gateway::start(r#"{"mode":"search","min_tools":20,"loop_guard":{"note":{}}}"#);
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
        // The default note, on the looping tool's latest result, in both rounds.
        let default_note = toolsift::loop_guard::DEFAULT_NOTE.replace("{tool}", TOOL);
        for round in &log {
            let mut expected = with_calls(
                dialect,
                request(dialect, false).1,
                &[paris.clone(), paris.clone()],
            );
            noted_result(dialect, &mut expected, &default_note);
            let key = if dialect == "gemini" {
                "contents"
            } else {
                "messages"
            };
            let sent_results = &round["body"][key];
            let n = expected[key].as_array().unwrap().len();
            assert_eq!(
                sent_results.as_array().unwrap()[..n],
                expected[key].as_array().unwrap()[..],
                "{dialect}"
            );
        }
        assert!(
            r.header("x-toolsift")
                .unwrap()
                .contains(&format!(" noted={TOOL}")),
            "{dialect}"
        );
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
