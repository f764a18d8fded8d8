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
    assert_eq!(envoy.recorded("toolsift"), Some(said));
    assert_eq!(
        stream.on_response_body(&envoy, &shared, 10, true),
        Flow::Continue
    );
    stream.on_log(&envoy, &shared);

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
    let access = envoy.recorded("toolsift_access").unwrap();
    assert!(access.contains("deny:call:"), "{access}");
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
