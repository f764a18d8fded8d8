//! Unknown tools in filter mode, in the real Envoy with the real `.wasm`: a call in the
//! model's latest turn of a tool the request does not carry (a made-up name) is counted and
//! named in `x-toolsift`, in every dialect; a real tool, a provider built-in, and a made-up
//! call of an earlier turn are not. With `unknown_tools.answer`, a made-up call in the model's
//! answer never reaches the client: the gateway answers it to the model in a follow-up (the
//! demo upstream's scripted model makes it up with `x-demo-call`).

use crate::common;

use common::llm::{called, request, tool_names, upstream_log, with_calls};
use common::{DIALECTS, Gateway, Response};
use serde_json::{Value, json};

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

/// Filter mode answering made-up calls, with the headers held (`envoy.yaml` has Envoy's
/// `allow_on_headers_stop_iteration`) so that `x-toolsift-search` reports the answers.
const ANSWER: &str =
    r#"{"top_k":5,"unknown_tools":{"answer":true},"search":{"hold_headers":true}}"#;

/// Every case the follow-ups serve: each dialect whole and streamed, but Bedrock's binary
/// `converse-stream` (not followed up: its answer reaches the client as the model made it).
fn cases() -> Vec<(&'static str, bool)> {
    DIALECTS
        .iter()
        .flat_map(|d| [(*d, false), (*d, true)])
        .filter(|(d, stream)| !(*d == "bedrock" && *stream))
        .collect()
}

/// The scripted model, asked `dialect`'s weather question, first calls `call` (made up or
/// not, whether offered or not), then, once its conversation holds a tool result, `REAL`.
fn ask(gw: &Gateway, dialect: &str, stream: bool, call: &str) -> Response {
    let r = ask_with(gw, dialect, stream, call, &[]);
    assert_eq!(r.status, 200, "{dialect} {stream}: {}", r.text());
    r
}

/// [`ask`] with `extra` headers, whatever the status.
fn ask_with(
    gw: &Gateway,
    dialect: &str,
    stream: bool,
    call: &str,
    extra: &[(&str, &str)],
) -> Response {
    common::http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
    let (path, body) = request(dialect, stream);
    let mut headers = vec![
        ("x-demo-model", "scripted"),
        ("x-demo-want", REAL),
        ("x-demo-call", call),
        ("x-demo-call-args", r#"{"location":"Paris"}"#),
        ("x-demo-args", r#"{"location":"Paris"}"#),
        ("authorization", "Bearer client-key"),
        ("x-api-key", "client-key"),
    ];
    headers.extend_from_slice(extra);
    gw.post(&path, &headers, body.to_string().as_bytes())
}

/// The conversation of a request body of `dialect`.
fn conversation(dialect: &str, body: &Value) -> Vec<Value> {
    let key = match dialect {
        "openai_responses" => "input",
        "gemini" => "contents",
        _ => "messages",
    };
    match &body[key] {
        // Responses' `input` as a plain string: the follow-up makes it a user message.
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        v => v.as_array().cloned().unwrap_or_default(),
    }
}

/// With `unknown_tools.answer`, a made-up call alone in the model's turn never reaches the
/// client: the gateway sends the follow-up itself (the filtered request, the model's turn, an
/// error result naming the closest tools the model was sent), with the client's credentials,
/// and the client gets the next answer. Every dialect, streamed and not.
#[test]
fn a_made_up_call_is_answered_to_the_model_in_every_dialect() {
    let gw = Gateway::start(ANSWER);
    let cases = cases();
    for &(dialect, stream) in &cases {
        let r = ask(&gw, dialect, stream, MADE_UP);
        let what = format!("{dialect} {stream}");
        let mut calls = called(dialect, &r);
        calls.dedup();
        assert_eq!(calls, [REAL], "{what}: {}", r.text());
        assert!(!r.text().contains(MADE_UP), "{what}: {}", r.text());
        let toolsift = r.header("x-toolsift").unwrap_or_default();
        assert!(
            toolsift.starts_with("kept=5 total=80"),
            "{what}: {toolsift}"
        );
        let answered = r.header("x-toolsift-search").unwrap_or_default();
        assert!(
            answered.starts_with("rounds=1 usage=")
                && answered.ends_with(&format!(" unknown={MADE_UP}")),
            "{what}: {answered}"
        );

        let log = upstream_log(&gw);
        assert_eq!(log.len(), 2, "{what}: the request and one follow-up");
        let (first, second) = (&log[0]["body"], &log[1]["body"]);
        // The follow-up offers the tools the filter kept, no more and no fewer.
        let kept = tool_names(dialect, first);
        assert_eq!(kept.len(), 5, "{what}: {kept:?}");
        assert_eq!(tool_names(dialect, second), kept, "{what}");
        for entry in &log {
            assert_eq!(entry["headers"]["authorization"], "Bearer client-key");
            assert_eq!(entry["headers"]["x-api-key"], "client-key");
        }
        assert_eq!(log[1]["path"], log[0]["path"], "{what}");
        // Its conversation: the filtered request's, then the model's turn and the error.
        let (c1, c2) = (conversation(dialect, first), conversation(dialect, second));
        assert_eq!(c2[..c1.len()], c1[..], "{what}: only appended to");
        let added = serde_json::to_string(&c2[c1.len()..]).unwrap();
        for expected in [
            "There is no tool named `get_weather_everywhere`. Call one of the tools in your tool list instead.",
            "unknown_tool",
            "closest",
            REAL,
        ] {
            assert!(added.contains(expected), "{what}: {expected} in {added}");
        }
        assert!(!added.contains("find_tools"), "{what}: {added}");
        // The closest names are tools the model was sent.
        let closest = added
            .split("closest")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap_or_default();
        assert!(closest.contains(REAL), "{what}: {closest}");
    }
    let n = cases.len() as u64;
    assert_eq!(gw.stat("toolsift.unknown_tools.caught"), n);
    assert_eq!(gw.stat("toolsift.unknown_tools.rounds"), n);
    assert_eq!(gw.stat("toolsift.unknown_tools.failed"), 0);
    assert_eq!(gw.stat("toolsift.search.rounds"), 0, "no search mode stat");
    assert!(!gw.log_text().contains("panicked"));
}

/// Beside a real call the made-up one is dropped, and the client reads that it does not
/// exist; a call of a tool the client sent but the filter ranked out is no made-up name (the
/// client has the tool) and is delivered; without `unknown_tools.answer` (the default) the
/// client gets the made-up call as the model made it.
#[test]
fn a_made_up_call_beside_a_real_one_is_dropped_and_a_ranked_out_one_delivered() {
    let gw = Gateway::start(ANSWER);
    let ranked_out = "send_slack_message";
    for dialect in DIALECTS {
        let r = ask(&gw, dialect, false, &format!("{REAL},{MADE_UP}"));
        assert_eq!(called(dialect, &r), [REAL], "{dialect}: {}", r.text());
        assert!(
            r.text()
                .contains("Tool `get_weather_everywhere` does not exist."),
            "{dialect}: {}",
            r.text()
        );
        assert_eq!(upstream_log(&gw).len(), 1, "{dialect}: no follow-up");

        let r = ask(&gw, dialect, false, ranked_out);
        let log = upstream_log(&gw);
        assert!(
            !tool_names(dialect, &log[0]["body"]).contains(&ranked_out.to_owned()),
            "{dialect}: the filter ranked it out"
        );
        assert_eq!(called(dialect, &r), [ranked_out], "{dialect}: {}", r.text());
        assert_eq!(log.len(), 1, "{dialect}: no follow-up");
        assert_eq!(
            r.header("x-toolsift-search"),
            None,
            "{dialect}: nothing caught"
        );
    }
    assert_eq!(
        gw.stat("toolsift.unknown_tools.caught"),
        DIALECTS.len() as u64
    );
    assert_eq!(gw.stat("toolsift.unknown_tools.rounds"), 0);

    let off = Gateway::start(r#"{"top_k":5}"#);
    let r = ask(&off, "openai_chat", false, MADE_UP);
    assert_eq!(called("openai_chat", &r), [MADE_UP], "{}", r.text());
    assert_eq!(upstream_log(&off).len(), 1);
    assert_eq!(off.stat("toolsift.unknown_tools.caught"), 0);
}

/// The default deployment holds no headers: the follow-up still answers the made-up call
/// (with the client's headers as the filter saw them), and only `x-toolsift-search` is
/// missing: the access log says it; a follow-up the provider refuses gives the client the
/// provider's error.
#[test]
fn answered_without_held_headers_and_a_failed_follow_up_is_the_providers_error() {
    let log = std::env::temp_dir().join(format!("toolsift-unknown-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let gw = Gateway::start_with(
        r#"{"top_k":5,"unknown_tools":{"answer":true}}"#,
        &[],
        |yaml| common::access_log_to_file(&yaml, &log),
    );
    for stream in [false, true] {
        let r = ask(&gw, "anthropic", stream, MADE_UP);
        assert_eq!(called("anthropic", &r), [REAL], "{stream}: {}", r.text());
        assert_eq!(r.header("x-toolsift-search"), None);
        assert_eq!(upstream_log(&gw).len(), 2);
    }
    // A request with nothing made up reports nothing of the response side.
    let r = ask(&gw, "anthropic", false, REAL);
    assert_eq!(called("anthropic", &r), [REAL], "{}", r.text());
    let logged = common::access_log_lines(&log, 3);
    for line in &logged[..2] {
        let answered = line["toolsift_search"].as_str().unwrap_or_default();
        assert!(
            answered.starts_with("rounds=1 usage=")
                && answered.ends_with(&format!(" unknown={MADE_UP}")),
            "{logged:?}"
        );
    }
    assert!(
        logged[2]["toolsift_search"]
            .as_str()
            .is_none_or(|v| v.is_empty() || v == "-"),
        "{logged:?}"
    );
    drop(gw);
    let _ = std::fs::remove_file(&log);
    let held = Gateway::start(ANSWER);
    let fail = [("x-demo-fail-followup", "429")];
    let r = ask_with(&held, "openai_chat", false, MADE_UP, &fail);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(!r.text().contains(MADE_UP), "{}", r.text());
    assert_eq!(held.stat("toolsift.unknown_tools.failed"), 1);
}

/// The events of an SSE response, as JSON.
fn events(r: &Response) -> Vec<Value> {
    r.text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// A stream that opens with text goes to the client as it comes; the made-up call after the
/// text is held, answered, and the follow-up's stream continues the client's. A Responses
/// client continuing that conversation by the id it was shown reaches the one the provider
/// stored (which holds the answered call).
#[test]
fn text_then_a_made_up_call_in_a_stream_continues_with_the_next_round() {
    let gw = Gateway::start(ANSWER);
    let text_first = [
        ("x-demo-script", "text-first"),
        ("x-demo-chunk-delay-ms", "5"),
    ];
    for dialect in [
        "openai_chat",
        "openai_responses",
        "anthropic",
        "gemini",
        "ollama",
    ] {
        let r = ask_with(&gw, dialect, true, MADE_UP, &text_first);
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let mut calls = called(dialect, &r);
        calls.dedup();
        assert_eq!(calls, [REAL], "{dialect}: {}", r.text());
        assert!(!r.text().contains(MADE_UP), "{dialect}: {}", r.text());
        assert!(
            r.text().contains("look"),
            "{dialect}: the text went: {}",
            r.text()
        );
        assert_eq!(upstream_log(&gw).len(), 2, "{dialect}: one follow-up");
        if dialect != "openai_responses" {
            continue;
        }
        let events = events(&r);
        let id = |kind: &str| {
            let e = events.iter().find(|e| e["type"] == kind).unwrap();
            e["response"]["id"].as_str().unwrap().to_owned()
        };
        let shown = id("response.created");
        assert_eq!(id("response.completed"), shown, "one id for the client");
        let completed = events
            .iter()
            .find(|e| e["type"] == "response.completed")
            .unwrap();
        let output = completed["response"]["output"].as_array().unwrap();
        let call = output
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap();
        let (path, _) = request(dialect, false);
        let next = json!({"model": "gpt-4o", "previous_response_id": shown,
            "input": [{"type": "function_call_output", "call_id": call["call_id"],
                       "output": "{\"temperature_c\": 18}"}]});
        // The same client (its credentials name whose aliases it may follow).
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", REAL),
            ("x-demo-script", "answer"),
            ("authorization", "Bearer client-key"),
            ("x-api-key", "client-key"),
        ];
        let r = gw.post(&path, &headers, next.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        let received = upstream_log(&gw).last().unwrap()["body"]["previous_response_id"].clone();
        assert!(
            received.is_string() && received != json!(shown),
            "the alias was followed: {received}"
        );
    }
    assert_eq!(gw.stat("toolsift.unknown_tools.rounds"), 5);
}
