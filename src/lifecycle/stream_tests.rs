//! Whole streams through the core's one entry ([`Stream`], a worker's [`Shared`]) on the
//! model of Envoy ([`super::proxy_model`]), callback by callback in Envoy's order, reading
//! what Envoy would hold after them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::tests::{ACCESS, CHAT, TOOLS, chat, chat_call, offered};
use super::*;
use crate::config::Config;
use crate::embeddings::MemoryBytes;
use crate::lifecycle::proxy::{Buffer, Headers};
use crate::lifecycle::proxy_model::Envoy as FakeEnvoy;
use crate::stats::{Fixed, Stat};
use std::time::Duration;

fn worker(envoy: &FakeEnvoy, config: &str) -> Shared<MemoryBytes> {
    let config = Config::from_json(config.as_bytes()).unwrap();
    Shared::new(envoy, config, MemoryBytes::default(), 1).unwrap()
}

/// The request's headers and its whole body, in two body callbacks.
fn send_request(envoy: &FakeEnvoy, shared: &Shared<MemoryBytes>, stream: &mut Stream, body: &[u8]) {
    envoy.set_map(Headers::Request, CHAT);
    assert_eq!(
        stream.on_request_headers(envoy, shared, false),
        Flow::Continue
    );
    envoy.set_body(Buffer::RequestBody, body);
    let half = body.len() / 2;
    assert_eq!(
        stream.on_request_body(envoy, shared, half, false),
        Flow::Pause
    );
    assert_eq!(
        stream.on_request_body(envoy, shared, body.len(), true),
        Flow::Continue
    );
}

/// Filter mode, callback by callback: the body Envoy sends upstream carries the tools the
/// question needs and no `content-length`; the answer's headers and the access log say what
/// was done, and the stats count it.
#[test]
fn a_stream_in_filter_mode_from_headers_to_log() {
    let envoy = FakeEnvoy::new("openai");
    let shared = worker(&envoy, r#"{"top_k":2,"min_tools":3}"#);
    let mut stream = Stream::new(7);
    let sent = chat(TOOLS, "what is the weather forecast in Paris?");
    send_request(&envoy, &shared, &mut stream, &sent);
    assert_eq!(envoy.get(Headers::Request, "content-length"), None);
    let upstream = offered(&envoy.body(Buffer::RequestBody));
    assert_eq!(upstream.len(), 2, "{upstream:?}");
    assert!(
        upstream.contains(&"get_forecast".to_owned()),
        "{upstream:?}"
    );

    envoy.set_map(Headers::Response, &[(":status", "200")]);
    assert_eq!(
        stream.on_response_headers(&envoy, &shared, false),
        Flow::Continue
    );
    let said = envoy.get(Headers::Response, "x-toolsift").unwrap();
    assert!(
        said.starts_with(&format!("kept=2 total={}", TOOLS.len())),
        "{said}"
    );
    // The record: what the header says, and the tools' tokens as sent and as forwarded.
    let record = envoy.recorded("toolsift").unwrap();
    let tokens = record.strip_prefix(&format!("{said} tokens=")).unwrap();
    let (before, after) = tokens.split_once('/').unwrap();
    let (before, after): (u64, u64) = (before.parse().unwrap(), after.parse().unwrap());
    assert!(before > after && after > 0, "{record}");
    assert_eq!(
        stream.on_response_body(&envoy, &shared, 10, true),
        Flow::Continue
    );
    stream.on_log(&envoy, &shared);
    // One filter-state write for the whole request: each costs Envoy about 5 µs.
    assert_eq!(envoy.writes.get(), 1);
    assert_eq!(envoy.recorded.borrow().len(), 1);

    assert_eq!(envoy.stat(Fixed::Requests), 1);
    assert_eq!(envoy.stat(Fixed::ToolsIn), TOOLS.len() as u64);
    assert_eq!(envoy.stat(Fixed::ToolsOut), 2);
    assert_eq!(envoy.stat(Fixed::CatalogCacheMisses), 1);
    assert_eq!(envoy.stat(Fixed::FilterTimeUs), 1);
    assert!(envoy.calls.borrow().is_empty());
}

/// Search mode, callback by callback: the model sees `find_tools`; its call is answered by a
/// follow-up to the cluster the router picked, carrying the client's headers; the follow-up's
/// answer replaces the first in Envoy's buffer, and the response resumes.
#[test]
fn a_stream_in_search_mode_answers_find_tools_in_a_follow_up() {
    let envoy = FakeEnvoy::new("openai");
    let shared = worker(&envoy, r#"{"mode":"search","top_k":2,"min_tools":3}"#);
    let mut stream = Stream::new(7);
    let sent = chat(TOOLS, "what is the weather forecast for Paris?");
    send_request(&envoy, &shared, &mut stream, &sent);
    assert_eq!(offered(&envoy.body(Buffer::RequestBody)), ["find_tools"]);

    envoy.set_map(
        Headers::Response,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    stream.on_response_headers(&envoy, &shared, false);
    let first = chat_call("c1", "find_tools", r#"{"query":"weather forecast"}"#);
    envoy.set_body(Buffer::ResponseBody, first.as_bytes());
    assert_eq!(
        stream.on_response_body(&envoy, &shared, first.len(), true),
        Flow::Pause
    );
    let call = envoy.calls.borrow().first().cloned().unwrap();
    assert_eq!(call.cluster, "openai");
    let path = call.headers.iter().find(|(n, _)| n == ":path");
    assert_eq!(path.map(|(_, v)| v.as_str()), Some("/v1/chat/completions"));
    assert!(
        offered(&call.body).contains(&"get_forecast".to_owned()),
        "{}",
        call.body
    );

    let next = chat_call("c2", "get_forecast", r#"{"city":"Paris"}"#);
    envoy.set_map(
        Headers::CallResponse,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    envoy.set_body(Buffer::CallResponseBody, next.as_bytes());
    let token = envoy.last_token().unwrap();
    let resume = stream.on_call(&envoy, &shared, token, 2, next.len());
    assert_eq!(resume, Resume::Response);
    let client = envoy.body(Buffer::ResponseBody);
    assert!(
        client.contains("get_forecast") && !client.contains("find_tools"),
        "{client}"
    );
    assert_eq!(envoy.stat(Fixed::SearchRounds), 1);
    let search = envoy.recorded("toolsift_search").unwrap();
    assert!(search.contains("rounds=1"), "{search}");
}

/// Under access rules, callback by callback: a call of a tool the caller may not use never
/// reaches the client, and the access log lists the decisions.
#[test]
fn a_stream_under_access_rules_refuses_a_denied_call() {
    let envoy = FakeEnvoy::new("openai");
    let shared = worker(&envoy, ACCESS);
    let mut stream = Stream::new(7);
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-group", "sre"));
    envoy.set_map(Headers::Request, &pairs);
    stream.on_request_headers(&envoy, &shared, false);
    let sent = chat(TOOLS, "what is the weather?");
    envoy.set_body(Buffer::RequestBody, &sent);
    stream.on_request_body(&envoy, &shared, sent.len(), true);
    let upstream = offered(&envoy.body(Buffer::RequestBody));
    assert!(
        upstream.iter().all(|t| t.starts_with("get_")),
        "{upstream:?}"
    );

    envoy.set_map(
        Headers::Response,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    stream.on_response_headers(&envoy, &shared, false);
    let answer = chat_call("call_1", "send_email", "{}");
    envoy.set_body(Buffer::ResponseBody, answer.as_bytes());
    stream.on_response_body(&envoy, &shared, answer.len(), true);
    stream.on_log(&envoy, &shared);
    let client = envoy.body(Buffer::ResponseBody);
    assert!(!client.contains("\"send_email\""), "{client}");
    assert!(
        client.contains("send_email"),
        "the refusal names it: {client}"
    );
    assert_eq!(envoy.stat(Stat::Denied(crate::access::Surface::Call)), 1);
    // The verdict on the answer's call joins the record written at the answer's headers.
    let record = envoy.recorded("toolsift").unwrap();
    let said = envoy.get(Headers::Response, "x-toolsift").unwrap();
    assert!(record.starts_with(&format!("{said} tokens=")), "{record}");
    let verdicts = record.split(' ').find_map(|f| f.strip_prefix("verdicts="));
    let verdicts: Vec<&str> = verdicts.unwrap_or_default().split(',').collect();
    assert!(
        verdicts.iter().any(|v| v.starts_with("deny:call:")),
        "{record}"
    );
    assert_eq!(envoy.recorded.borrow().len(), 1, "one filter state");
}

/// Search mode with `search.hold_headers` where Envoy cannot hold them: the request's headers
/// are held, its body never comes, and the worker's tick hands it back to be resumed after
/// the grace time, counts it, and holds no more.
#[test]
fn a_worker_resumes_a_held_request_whose_body_never_came() {
    let envoy = FakeEnvoy::new("openai");
    let shared = worker(
        &envoy,
        r#"{"mode":"search","search":{"hold_headers":true}}"#,
    );
    let mut stream = Stream::new(7);
    envoy.set_map(Headers::Request, CHAT);
    assert_eq!(
        stream.on_request_headers(&envoy, &shared, false),
        Flow::Pause
    );
    assert_eq!(
        envoy.tick.get(),
        Some(Duration::from_millis(crate::search::hold::TICK_MS))
    );
    assert!(shared.on_tick(&envoy).is_empty(), "within the grace time");
    envoy
        .now_ms
        .set(envoy.now_ms.get() + crate::search::hold::GRACE_MS + 1);
    assert_eq!(shared.on_tick(&envoy), [7]);
    assert_eq!(envoy.stat(Fixed::SearchHeadersNotHeld), 1);
    assert_eq!(envoy.tick.get(), Some(Duration::ZERO));
    let mut next = Stream::new(8);
    assert_eq!(
        next.on_request_headers(&envoy, &shared, false),
        Flow::Continue
    );
}

/// A server's `tools/list` answer to the gateway's call `sent` (a JSON-RPC request).
fn list_answer(envoy: &FakeEnvoy, sent: &str) -> usize {
    let id = serde_json::from_str::<serde_json::Value>(sent).unwrap()["id"].clone();
    let tool = |name: &str, description: &str| {
        serde_json::json!({"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}})
    };
    let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
        tool("get_weather", "Current weather for a city"),
        tool("send_email", "Send an email message to a recipient"),
        tool("create_issue", "Create a GitHub issue in a repository"),
    ]}})
    .to_string();
    answer_json(envoy, &answer)
}

/// A call's answer of JSON in Envoy's call buffer; its size.
fn answer_json(envoy: &FakeEnvoy, body: &str) -> usize {
    envoy.set_map(
        Headers::CallResponse,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    envoy.set_body(Buffer::CallResponseBody, body.as_bytes());
    body.len()
}

/// An MCP client's message to the gateway on `/mcp`, through a new stream; its flow.
fn mcp_message(
    envoy: &FakeEnvoy,
    shared: &Shared<MemoryBytes>,
    stream: &mut Stream,
    body: &str,
) -> Flow {
    envoy.set_map(
        Headers::Request,
        &[
            (":method", "POST"),
            (":path", "/mcp"),
            (":authority", "tools.example"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            (
                "mcp-protocol-version",
                crate::mcp::exchange::MODERN_REVISION,
            ),
            ("authorization", "Bearer t"),
        ],
    );
    envoy.set_body(Buffer::RequestBody, body.as_bytes());
    assert_eq!(
        stream.on_request_headers(envoy, shared, false),
        Flow::Continue
    );
    stream.on_request_body(envoy, shared, body.len(), true)
}

/// An MCP client's `find_tools`, then `call_tool`, in two streams on one worker: the first
/// fetches the server's catalog (to the route's cluster, with the client's credentials) and is
/// answered by the gateway with the tool it finds; the second, from the cached catalog, goes
/// to the server as the real call, whose answer the client gets as it was.
#[test]
fn an_mcp_client_finds_a_tool_then_calls_it() {
    let envoy = FakeEnvoy::new("mcp-server");
    let shared = worker(&envoy, r#"{"mcp":{},"response_header":true}"#);
    let mut find = Stream::new(7);
    let body = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"find_tools","arguments":{"query":"weather in Paris","limit":1}}}"#;
    assert_eq!(mcp_message(&envoy, &shared, &mut find, body), Flow::Pause);
    let list = envoy.calls.borrow().last().cloned().unwrap();
    assert_eq!(list.cluster, "mcp-server");
    let bearer = list.headers.iter().find(|(n, _)| n == "authorization");
    assert_eq!(bearer.map(|(_, v)| v.as_str()), Some("Bearer t"));
    let size = list_answer(&envoy, &list.body);
    let token = envoy.last_token().unwrap();
    assert_eq!(
        find.on_call(&envoy, &shared, token, 2, size),
        Resume::Nothing
    );
    let (status, answer) = envoy.reply.borrow_mut().take().unwrap();
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let found = &answer["result"]["structuredContent"]["tools"];
    assert_eq!(found[0]["name"], "get_weather", "{answer}");
    envoy.set_map(
        Headers::Response,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    find.on_response_headers(&envoy, &shared, false);
    let said = envoy.get(Headers::Response, "x-toolsift").unwrap();
    assert_eq!(said, "mcp=find_tools found=get_weather total=3");
    assert_eq!(envoy.recorded("toolsift"), Some(said));

    let mut call = Stream::new(8);
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":"get_weather","arguments":{"q":"Paris"}}}}"#;
    assert_eq!(mcp_message(&envoy, &shared, &mut call, body), Flow::Pause);
    assert_eq!(
        envoy.calls.borrow().len(),
        2,
        "the catalog came from the cache"
    );
    let real = envoy.calls.borrow().last().cloned().unwrap();
    let sent: serde_json::Value = serde_json::from_str(&real.body).unwrap();
    assert_eq!(sent["params"]["name"], "get_weather");
    assert_eq!(sent["params"]["arguments"]["q"], "Paris");
    let server =
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"sunny"}]}}"#;
    let size = answer_json(&envoy, server);
    let token = envoy.last_token().unwrap();
    call.on_call(&envoy, &shared, token, 2, size);
    let (status, answer) = envoy.reply.borrow_mut().take().unwrap();
    assert_eq!((status, answer.as_str()), (200, server));
}

/// `suggestions.mcp`: the worker's tick fetches the suggestion server's `tools/list` from its
/// cluster, and the answer's tools join the engine's suggestions (counted); an answer to a
/// call the worker did not send is not its own.
#[test]
fn a_worker_fetches_the_suggestion_servers_list_on_its_tick() {
    use crate::lifecycle::proxy::Proxy;
    let envoy = FakeEnvoy::new("unused");
    let shared = worker(&envoy, r#"{"suggestions":{"mcp":{"cluster":"catalog"}}}"#);
    assert_eq!(envoy.tick.get(), Some(Duration::from_secs(1)));
    let suggested = |shared: &Shared<MemoryBytes>| {
        let engine = shared.engine.borrow();
        let suggestions = engine.suggestions().cloned().unwrap();
        suggestions
            .suggest("weather in Paris", |_| false, None)
            .len()
    };
    assert_eq!(suggested(&shared), 0);
    assert!(shared.on_tick(&envoy).is_empty());
    let call = envoy.calls.borrow().last().cloned().unwrap();
    assert_eq!(call.cluster, "catalog");
    assert!(call.body.contains("\"tools/list\""), "{}", call.body);
    assert!(!shared.on_call(&envoy, 99, || envoy.call_answer(0, 0)));
    let size = list_answer(&envoy, &call.body);
    let token = envoy.last_token().unwrap();
    assert!(shared.on_call(&envoy, token, || envoy.call_answer(2, size)));
    assert_eq!(envoy.stat(Fixed::SuggestionsFetched), 1);
    assert_eq!(suggested(&shared), 1);
    assert_eq!(
        envoy.tick.get(),
        Some(Duration::from_secs(1)),
        "fetched again later"
    );
}

/// A worker's background calls (a new catalog's tools, no request waiting) say so in
/// `x-toolsift-priority: background`, which toolsift-embed serves after the calls requests
/// wait for; a request's own call does not carry it.
#[test]
fn background_embeddings_calls_carry_the_background_header() {
    let envoy = FakeEnvoy::new("unused");
    let shared = worker(
        &envoy,
        r#"{"top_k":2,"min_tools":3,"ranking":"hybrid","embeddings":{"cluster":"embeddings","model":"m"}}"#,
    );
    let tools: Vec<String> = TOOLS
        .iter()
        .map(|n| {
            format!(r#"{{"type":"function","function":{{"name":"{n}","description":"{n}"}}}}"#)
        })
        .collect();
    let tools = format!("[{}]", tools.join(","));
    let catalog = crate::rank::Catalog::build(
        crate::dialects::Dialect::OpenaiChat,
        &tools,
        Default::default(),
    )
    .unwrap();
    let catalog = std::rc::Rc::new(catalog);
    shared.queue_backfill(&envoy, &catalog, (0..TOOLS.len()).collect());
    assert!(shared.on_tick(&envoy).is_empty());
    let background = envoy.calls.borrow().last().cloned().unwrap();
    assert_eq!(background.cluster, "embeddings");
    let header = |call: &crate::lifecycle::proxy_model::Call| {
        call.headers
            .iter()
            .find(|(n, _)| n == "x-toolsift-priority")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header(&background).as_deref(), Some("background"));
    let e = shared.engine.borrow().config.embeddings.clone().unwrap();
    hybrid::send(&envoy, &e, &["weather in Paris"]).unwrap();
    let request = envoy.calls.borrow().last().cloned().unwrap();
    assert_eq!(header(&request), None);
}

/// `auto_k.keep` is set as a gauge at configuration, before any request: the dashboard and the
/// recall alert read the target beside the share of shadowed calls kept.
#[test]
fn the_recall_target_is_a_gauge_set_at_configuration() {
    let envoy = FakeEnvoy::new("openai");
    let _shared = worker(
        &envoy,
        r#"{"top_k":2,"min_tools":3,"shadow":{"sample":0.1},"auto_k":{"keep":0.95}}"#,
    );
    assert_eq!(envoy.stat(Fixed::AutoKKeepTargetPermille), 950);
    let without = FakeEnvoy::new("openai");
    let _shared = worker(&without, r#"{"top_k":2,"min_tools":3}"#);
    assert_eq!(without.stat(Fixed::AutoKKeepTargetPermille), 0);
    assert_eq!(without.stat(Fixed::Requests), 0);
}
