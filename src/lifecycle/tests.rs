//! The core's lifecycle driven event by event, as the adapter drives it, without Envoy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::*;
use crate::config::Config;

fn engine(config: &str) -> Engine {
    Engine::new(Config::from_json(config.as_bytes()).unwrap())
}

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    HeaderMap::new(crate::pairs::encode(pairs))
}

pub(super) const CHAT: &[(&str, &str)] = &[
    (":method", "POST"),
    (":path", "/v1/chat/completions"),
    (":authority", "api.openai.com"),
    ("content-type", "application/json"),
    ("content-length", "1234"),
    ("accept-encoding", "gzip"),
];

/// The headers phase of `pairs` under `engine`, with the caller named by `x-group` when the
/// configuration has access rules (as the adapter reads it).
fn headers(engine: &Engine, request: &mut Request, pairs: &[(&str, &str)]) -> Vec<Action> {
    let headers = map(pairs);
    let identity = engine.policy().map(|policy| {
        let caller = policy.caller(|n| headers.get(n), |_, _| Vec::new());
        (policy.grant(&caller), caller)
    });
    let head = Head {
        headers: &headers,
        end_of_stream: false,
        identity,
    };
    let mut sampler = Sampler::new(7);
    request.on_headers(engine, head, Some(&mut sampler))
}

fn removed(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RemoveRequestHeader { name, .. } => Some(*name),
            _ => None,
        })
        .collect()
}

fn reply(actions: &[Action]) -> Option<(u16, &str)> {
    actions.iter().find_map(|a| match a {
        Action::Reply { status, body } => Some((*status, body.as_str())),
        _ => None,
    })
}

#[test]
fn an_llm_request_is_buffered_without_content_length() {
    let engine = engine(r#"{"top_k":2}"#);
    let mut request = Request::new();
    let actions = headers(&engine, &mut request, CHAT);
    assert_eq!(removed(&actions), ["content-length"]);
    assert!(matches!(
        actions.first(),
        Some(Action::RemoveRequestHeader { required: true, .. })
    ));
    assert_eq!(
        request.buffering,
        Some(Reader::Dialect(Dialect::OpenaiChat))
    );
    assert!(reply(&actions).is_none());
    // Nothing decided yet: nothing to say in the answer's headers.
    assert!(request.on_response_headers(Some(&engine.config)).is_empty());
}

#[test]
fn a_get_passes_uncounted_as_not_llm() {
    let engine = engine(r#"{"top_k":2}"#);
    let mut request = Request::new();
    let actions = headers(&engine, &mut request, &[(":method", "GET"), (":path", "/")]);
    assert!(matches!(
        actions.as_slice(),
        [Action::Count(Counter::Skipped(Skip::NotLlm), 1)]
    ));
    assert_eq!(request.buffering, None);
    assert_eq!(request.outcome, None);
}

#[test]
fn a_compressed_request_is_rejected_under_on_error_reject() {
    let mut pairs = CHAT.to_vec();
    pairs.push(("content-encoding", "gzip"));
    for (config, rejected) in [
        (r#"{"top_k":2}"#, false),
        (r#"{"top_k":2,"on_error":"reject"}"#, true),
    ] {
        let engine = engine(config);
        let mut request = Request::new();
        let actions = headers(&engine, &mut request, &pairs);
        assert_eq!(reply(&actions).map(|(s, _)| s), rejected.then_some(400));
        assert!(matches!(request.outcome, Some(Outcome::Skipped(_))));
        let said = request.on_response_headers(Some(&engine.config));
        assert!(matches!(
            said.as_slice(),
            [Action::Record { header, tokens: None }, Action::AddResponseHeader { name: "x-toolsift", .. }]
                if header == "skipped=compressed"
        ));
    }
}

#[test]
fn the_response_header_is_left_out_when_configured_off() {
    let engine = engine(r#"{"top_k":2,"response_header":false}"#);
    let mut request = Request::new();
    request.outcome = Some(Outcome::Denied {
        total: 3,
        denied: 3,
    });
    let said = request.on_response_headers(Some(&engine.config));
    assert!(matches!(said.as_slice(), [Action::Record { .. }]));
}

pub(super) const ACCESS: &str = r#"{"top_k":2,"access":{"identity":[{"header":"x-group"}],"default":"deny",
    "rules":[{"when":["sre"],"allow":["get_*"]}],"unknown_paths":"deny"}}"#;

#[test]
fn under_access_rules_the_answer_is_guarded_and_asked_uncompressed() {
    let engine = engine(ACCESS);
    let mut request = Request::new();
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-group", "sre"));
    let actions = headers(&engine, &mut request, &pairs);
    assert_eq!(removed(&actions), ["content-length", "accept-encoding"]);
    assert!(actions.iter().any(|a| matches!(a, Action::Guard(_))));
    assert!(request.grant.is_some());
}

#[test]
fn under_access_rules_an_unknown_path_is_answered() {
    let engine = engine(ACCESS);
    let mut request = Request::new();
    let pairs = [(":method", "POST"), (":path", "/v1/unheard_of")];
    let actions = headers(&engine, &mut request, &pairs);
    assert!(matches!(
        actions.first(),
        Some(Action::Count(Counter::AccessUnknownPaths, 1))
    ));
    let (status, body) = reply(&actions).unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("unknown_path"));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Count(Counter::AccessUnknownPathsRefused, 1)))
    );
    assert_eq!(request.outcome, Some(Outcome::UnknownPath));
    let said = request.on_response_headers(Some(&engine.config));
    let recorded = said.iter().find_map(|a| match a {
        Action::Record { header, tokens } => {
            assert_eq!(*tokens, None, "nothing was filtered");
            Some(header.as_str())
        }
        _ => None,
    });
    assert_eq!(
        recorded,
        Some("kept=0 total=0 access=refused refused=unknown_path")
    );
}

#[test]
fn under_access_rules_an_unreadable_stream_is_refused() {
    let engine = engine(ACCESS);
    let mut request = Request::new();
    let pairs = [
        (":method", "POST"),
        (
            ":path",
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        ),
        ("content-type", "application/json"),
        ("x-group", "sre"),
    ];
    let actions = headers(&engine, &mut request, &pairs);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Count(Counter::AccessUnsupportedStream, 1)))
    );
    assert_eq!(reply(&actions).map(|(s, _)| s), Some(400));
    assert_eq!(request.buffering, None);
}

#[test]
fn search_mode_keeps_the_headers_for_its_follow_ups_and_holds_them() {
    let engine = engine(
        r#"{"mode":"search","search":{"hold_headers":true,"memory":{"session":{"header":"x-session"}}}}"#,
    );
    let mut request = Request::new();
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-session", "s1"));
    let actions = headers(&engine, &mut request, &pairs);
    assert_eq!(removed(&actions), ["content-length", "accept-encoding"]);
    assert!(matches!(actions.last(), Some(Action::HoldHeaders)));
    let (kept, stream) = request.search_headers.clone().unwrap();
    assert!(!stream);
    assert!(kept.iter().any(|(n, v)| n == "x-session" && v == "s1"));
    assert_eq!(request.session_header.as_deref(), Some(&b"s1"[..]));
    assert_ne!(request.alias_owner, 0);
    assert!(request.answer_headers.is_none());
}

#[test]
fn search_mode_counts_an_answer_it_cannot_follow_up() {
    let engine = engine(r#"{"mode":"search"}"#);
    let mut request = Request::new();
    // A header value that is not text: the follow-ups could not carry it.
    let bytes = crate::pairs::encode(&[
        (&b":method"[..], &b"POST"[..]),
        (b":path", b"/v1/chat/completions"),
        (b"content-type", b"application/json"),
        (b"x-odd", b"\xff"),
    ]);
    let headers = HeaderMap::new(bytes);
    let head = Head {
        headers: &headers,
        end_of_stream: false,
        identity: None,
    };
    let actions = request.on_headers(&engine, head, None);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Count(Counter::SearchUnsupported, 1)))
    );
    assert!(request.search_headers.is_none());
    assert!(!actions.iter().any(|a| matches!(a, Action::HoldHeaders)));
}

#[test]
fn unknown_tools_answer_keeps_the_headers_in_filter_mode() {
    let engine = engine(r#"{"unknown_tools":{"answer":true}}"#);
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    assert!(request.answer_headers.is_some());
    assert!(request.search_headers.is_none());
}

#[test]
fn shadow_draws_with_the_headers() {
    let engine = engine(r#"{"shadow":{"sample":1.0}}"#);
    let mut request = Request::new();
    let actions = headers(&engine, &mut request, CHAT);
    assert_eq!(request.shadow_drawn, Some(true));
    assert_eq!(removed(&actions), ["content-length", "accept-encoding"]);
}

#[test]
fn mcp_paths_go_to_the_mcp_machine() {
    let engine = engine(r#"{"mcp":{"paths":["/mcp"]}}"#);
    let route_of = |path| {
        route(
            &engine.config,
            &map(&[(":method", "POST"), (":path", path)]),
        )
    };
    assert_eq!(route_of("/mcp"), Route::Mcp);
    assert_eq!(route_of("/mcp?x=1"), Route::Mcp);
    assert_eq!(route_of("/v1/chat/completions"), Route::Llm);
}

/// A chat request with `tools`, its user asking `question`.
pub(super) fn chat(tools: &[&str], question: &str) -> Vec<u8> {
    let tools: Vec<_> = tools
        .iter()
        .map(|name| {
            serde_json::json!({"type": "function", "function": {
                "name": name, "description": format!("{} things", name.replace('_', " ")),
                "parameters": {"type": "object", "properties": {}}}})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": question}],
        "tools": tools,
    }))
    .unwrap()
}

pub(super) const TOOLS: &[&str] = &[
    "get_weather",
    "get_forecast",
    "send_email",
    "create_invoice",
    "list_pods",
    "scale_deployment",
    "query_database",
    "read_file",
];

/// What the adapter does with a body phase's actions, on an Envoy that is a byte buffer: the
/// body as the upstream gets it, the local reply if any, and the counts.
#[derive(Default)]
struct Upstream {
    body: Vec<u8>,
    reply: Option<(u16, String)>,
    counts: Vec<(Counter, usize)>,
    state: Vec<(&'static str, String)>,
}

impl Upstream {
    fn perform(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Count(counter, n) => self.counts.push((counter, n)),
                Action::ReplaceBody { drain, bytes } => {
                    self.body.splice(..drain, bytes);
                }
                Action::Reply { status, body } => self.reply = Some((status, body)),
                Action::Record { header, tokens } => {
                    let mut record = super::record::Record::default();
                    record.set_head(&header, tokens);
                    self.state.push(("toolsift", record.value()));
                }
                Action::AddResponseHeader { name, value } => self.state.push((name, value)),
                _ => {}
            }
        }
    }

    fn counted(&self, counter: Counter) -> usize {
        self.counts
            .iter()
            .filter(|(c, _)| *c == counter)
            .map(|(_, n)| n)
            .sum()
    }

    fn tools(&self) -> Vec<String> {
        offered(std::str::from_utf8(&self.body).unwrap())
    }

    /// The first value recorded or added under `name` (a filter state, a response header).
    fn recorded(&self, name: &str) -> Option<&str> {
        let found = self.state.iter().find(|(n, _)| *n == name);
        found.map(|(_, v)| v.as_str())
    }
}

/// The body phase's first step: `sent` read as the headers phase said, with no alias stored.
fn read(engine: &mut Engine, request: &mut Request, sent: &[u8]) -> (Vec<u8>, Read) {
    let reader = request.buffering.expect("the body is buffered");
    let mut body = sent.to_vec();
    let store = crate::embeddings::MemoryBytes::default();
    let read = request.on_body(engine, reader, &mut body, &store, 1_000);
    (body, read)
}

/// The body phase's first step, which must analyse `sent`: the body as read, the analysis,
/// and the upstream with `sent` in its buffer and the step's actions performed.
fn analysed(
    engine: &mut Engine,
    request: &mut Request,
    sent: &[u8],
) -> (Vec<u8>, crate::pipeline::Analysis, Upstream) {
    let (body, Read::Analysed { actions, analysis }) = read(engine, request, sent) else {
        panic!("analysed");
    };
    let mut upstream = Upstream {
        body: sent.to_vec(),
        ..Upstream::default()
    };
    upstream.perform(actions);
    (body, analysis, upstream)
}

/// Filter mode from the request's headers to the answer's: the body the upstream gets carries
/// the `top_k` tools the question needs, and the answer's headers say so.
#[test]
fn filter_mode_lifecycle() {
    let mut engine = engine(r#"{"top_k":2,"min_tools":3,"debug":true}"#);
    let mut request = Request::new();
    let actions = headers(&engine, &mut request, CHAT);
    let mut upstream = Upstream::default();
    upstream.perform(actions);
    let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
    upstream.body = sent.clone();
    let (
        body,
        Read::Analysed {
            actions,
            mut analysis,
        },
    ) = read(&mut engine, &mut request, &sent)
    else {
        panic!("analysed");
    };
    assert_eq!(request.buffering, None);
    upstream.perform(actions);
    assert_eq!(
        upstream.body, sent,
        "nothing rewritten before the tools are read"
    );
    let actions = request
        .apply(&engine.config, &mut analysis, &body, Ranked::Keyword)
        .unwrap();
    upstream.perform(actions);
    let kept = upstream.tools();
    assert_eq!(kept.len(), 2);
    assert!(kept.iter().any(|t| t == "get_forecast"), "{kept:?}");
    assert_eq!(upstream.counted(Counter::Rewritten), 1);
    assert_eq!(upstream.counted(Counter::ToolsIn), TOOLS.len());
    assert_eq!(upstream.counted(Counter::ToolsOut), 2);
    assert_eq!(upstream.counted(Counter::CatalogCacheMisses), 1);
    // The tools' tokens as sent and as forwarded wait for the record.
    let (before, after) = request.tokens.unwrap();
    assert!(before > after && after > 0, "{before}/{after}");
    assert!(
        upstream.state.is_empty(),
        "nothing recorded before the answer"
    );
    upstream.perform(request.on_response_headers(Some(&engine.config)));
    let header = |name| {
        upstream
            .state
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    };
    let total = TOOLS.len();
    assert_eq!(
        header("x-toolsift").as_deref(),
        Some(format!("kept=2 total={total}").as_str())
    );
    assert_eq!(
        header("toolsift"),
        Some(format!("kept=2 total={total} tokens={before}/{after}"))
    );
    assert!(header("x-toolsift-tools").unwrap().contains("get_forecast"));

    // The same tools again: the catalog is cached.
    let mut again = Request::new();
    headers(&engine, &mut again, CHAT);
    let (_, Read::Analysed { actions, .. }) = read(&mut engine, &mut again, &sent) else {
        panic!("analysed");
    };
    let mut upstream = Upstream::default();
    upstream.perform(actions);
    assert_eq!(upstream.counted(Counter::CatalogCacheHits), 1);
}

/// Under access rules a caller that may see none of the request's tools is answered with a
/// 403, and nothing goes upstream.
#[test]
fn a_request_with_no_tool_its_caller_may_see_is_refused() {
    let mut engine = engine(ACCESS);
    let mut request = Request::new();
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-group", "finance"));
    headers(&engine, &mut request, &pairs);
    let sent = chat(TOOLS, "what is the weather?");
    let (_, Read::Answered(actions)) = read(&mut engine, &mut request, &sent) else {
        panic!("refused");
    };
    let mut upstream = Upstream::default();
    upstream.perform(actions);
    assert_eq!(upstream.reply.as_ref().map(|(s, _)| *s), Some(403));
    assert_eq!(
        upstream.counted(Counter::Denied(crate::access::Surface::Request)),
        1
    );
    assert!(matches!(request.outcome, Some(Outcome::Denied { .. })));
}

/// Under access rules, filter mode: the caller's allowed tools go upstream, and the model's
/// answer passes the guard the headers phase set up, which replaces a call of a tool the
/// caller may not use with a refusal.
#[test]
fn an_answer_calling_a_denied_tool_is_refused() {
    use crate::search::respond::{Flow, Responder};
    use crate::search::respond_model::Envoy;
    let mut engine = engine(ACCESS);
    let mut request = Request::new();
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-group", "sre"));
    let actions = headers(&engine, &mut request, &pairs);
    let session = actions.into_iter().find_map(|a| match a {
        Action::Guard(session) => Some(session),
        _ => None,
    });
    let mut guard = Responder::new(*session.unwrap(), false, false);
    let sent = chat(TOOLS, "what is the weather?");
    let (body, mut analysis, mut upstream) = analysed(&mut engine, &mut request, &sent);
    upstream.perform(
        request
            .apply(&engine.config, &mut analysis, &body, Ranked::Keyword)
            .unwrap(),
    );
    assert!(upstream.tools().iter().all(|t| t.starts_with("get_")));
    assert_eq!(
        upstream.counted(Counter::Denied(crate::access::Surface::Tools)),
        TOOLS.len() - 2
    );
    // The model calls `send_email` all the same.
    let answer = serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "send_email", "arguments": "{}"}}]}}]
    })
    .to_string();
    let envoy = Envoy::default();
    let head = json_head();
    assert_eq!(guard.on_headers(&envoy, &head).flow, Flow::Continue);
    envoy.feed(&mut guard, answer.as_bytes(), true);
    let client = envoy.client_text();
    assert!(!client.contains("\"send_email\""), "{client}");
    assert!(
        client.contains("send_email"),
        "the refusal names it: {client}"
    );
    assert_eq!(
        envoy.counted(crate::search::respond::Event::Refused(1)),
        1,
        "{client}"
    );
}

/// The body is buffered until its end, and a body larger than `max_body_bytes` goes on unread
/// (counted, and said in the answer's headers).
#[test]
fn the_body_is_buffered_to_its_end_unless_too_large() {
    let engine = engine(r#"{"top_k":2,"max_body_bytes":2000}"#);
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let config = Some(&engine.config);
    assert!(matches!(
        request.on_body_chunk(config, 600, false),
        Chunk::Buffer
    ));
    assert!(matches!(
        request.on_body_chunk(config, 900, true),
        Chunk::Read(Reader::Dialect(Dialect::OpenaiChat))
    ));
    let Chunk::Skip(actions) = request.on_body_chunk(config, 2001, false) else {
        panic!("too large");
    };
    assert!(matches!(
        actions.as_slice(),
        [Action::Count(Counter::Skipped(Skip::TooLarge), 1)]
    ));
    assert!(matches!(
        request.outcome,
        Some(Outcome::Skipped(Skipped {
            reason: Skip::TooLarge,
            ..
        }))
    ));
    // Let through: the rest of the body passes.
    assert!(matches!(
        request.on_body_chunk(config, 3000, true),
        Chunk::Pass
    ));
}

/// Filter mode answering made-up calls: a Responses request naming a response id the client
/// was shown goes upstream naming the stored one, even with no tools to filter.
#[test]
fn a_responses_alias_is_resolved_before_the_tools_are_read() {
    let mut engine = engine(r#"{"unknown_tools":{"answer":true}}"#);
    let store = crate::embeddings::MemoryBytes::default();
    let mut pairs = CHAT.to_vec();
    pairs[1] = (":path", "/v1/responses");
    let mut request = Request::new();
    headers(&engine, &mut request, &pairs);
    crate::search::alias::remember(
        &store,
        "resp_shown",
        "resp_real",
        request.alias_owner,
        1_000,
    );
    let sent = br#"{"model":"gpt-4o","previous_response_id":"resp_shown","input":"go on"}"#;
    let mut body = sent.to_vec();
    let reader = request.buffering.unwrap();
    let Read::Skipped { actions, skipped } =
        request.on_body(&mut engine, reader, &mut body, &store, 1_000)
    else {
        panic!("nothing to filter");
    };
    assert_eq!(skipped.reason, Skip::NoTools);
    let mut upstream = Upstream {
        body: sent.to_vec(),
        ..Upstream::default()
    };
    upstream.perform(actions);
    let v: serde_json::Value = serde_json::from_slice(&upstream.body).unwrap();
    assert_eq!(v["previous_response_id"], "resp_real");
}

/// A chat answer calling `name` with `arguments`.
pub(super) fn chat_call(id: &str, name: &str, arguments: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments}}]}}]
    })
    .to_string()
}

/// The function names a chat request body offers the model.
pub(super) fn offered(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Search mode from the request's headers to the client's answer, over several rounds: the
/// upstream sees only `find_tools`; the model searches twice, each search answered by a
/// follow-up that offers what it found; its third turn calls a found tool, which is what the
/// client gets.
#[test]
fn search_mode_lifecycle_over_several_rounds() {
    use crate::search::respond::{Answer, Flow};
    use crate::search::respond_model::Envoy;
    let mut engine = engine(r#"{"mode":"search","top_k":2,"min_tools":3}"#);
    let mut request = Request::new();
    let mut upstream = Upstream::default();
    upstream.perform(headers(&engine, &mut request, CHAT));
    assert!(request.search_headers.is_some());
    let sent = chat(
        TOOLS,
        "what is the weather forecast for Paris, and mail it to Ann",
    );
    upstream.body = sent.clone();
    let (body, Read::Analysed { actions, analysis }) = read(&mut engine, &mut request, &sent)
    else {
        panic!("analysed");
    };
    upstream.perform(actions);
    let store = crate::embeddings::MemoryBytes::default();
    let Searched::Planned { actions, search } = request
        .plan_search(
            &engine,
            &analysis,
            &body,
            Ranked::Keyword,
            false,
            &store,
            1_000,
        )
        .unwrap()
    else {
        panic!("planned");
    };
    upstream.perform(actions);
    assert_eq!(upstream.tools(), ["find_tools"]);
    assert_eq!(upstream.counted(Counter::SearchRequests), 1);
    assert_eq!(upstream.counted(Counter::ToolsIn), TOOLS.len());
    assert_eq!(upstream.counted(Counter::ToolsOut), 0);
    upstream.perform(request.on_response_headers(Some(&engine.config)));
    let said = upstream.state.iter().find(|(n, _)| *n == "x-toolsift");
    assert_eq!(
        said.map(|(_, v)| v.as_str()),
        Some(format!("kept=0 total={} search=search", TOOLS.len()).as_str())
    );

    // The answer's side: the loop the core handed over.
    let mut responder = search.expect("a search loop").responder;
    let envoy = Envoy::default();
    let head = json_head();
    responder.on_headers(&envoy, &head);
    let first = chat_call("c1", "find_tools", r#"{"query":"weather forecast"}"#);
    assert_eq!(
        envoy.feed(&mut responder, first.as_bytes(), true),
        Flow::Pause
    );
    let turns = [
        chat_call("c2", "find_tools", r#"{"query":"send an email"}"#),
        chat_call("c3", "send_email", r#"{"to":"ann"}"#),
    ];
    for turn in turns {
        let token = responder.token().expect("a follow-up is out");
        envoy.answer(
            &mut responder,
            token,
            Answer {
                status: Some(200),
                content_type: Some("application/json".into()),
                body: turn.into_bytes(),
            },
        );
    }
    assert!(responder.token().is_none(), "the loop ended");
    let follow_ups = envoy.follow_ups.borrow();
    assert_eq!(follow_ups.len(), 2);
    assert!(offered(&follow_ups[0]).contains(&"get_forecast".to_owned()));
    let second = offered(&follow_ups[1]);
    assert!(
        second.contains(&"get_forecast".to_owned()) && second.contains(&"send_email".to_owned()),
        "found tools stay offered: {second:?}"
    );
    let client = envoy.client_text();
    assert!(client.contains("\"send_email\""), "{client}");
    assert!(!client.contains("find_tools"), "{client}");
}

/// The response side around the search loop ([`super::Response`]): the follow-ups carry the
/// client's headers less those of one connection or one body (or the routed ones, when they
/// can be read); once the loop ends, what it found is remembered for the session (the next
/// turn's plan shows it) and the loop is recorded for the access log, once.
#[test]
fn an_ended_search_loop_is_remembered_and_recorded_once() {
    use super::Response;
    use crate::search::respond::{Answer, Flow};
    use crate::search::respond_model::Envoy;
    let config = r#"{"mode":"search","top_k":2,"min_tools":3,
        "search":{"memory":{"session":{"header":"x-session"}}}}"#;
    let mut engine = engine(config);
    let mut pairs = CHAT.to_vec();
    pairs.push(("x-session", "s1"));
    let envoy = Envoy {
        now_seconds: 1_000,
        ..Envoy::default()
    };
    let plan = |engine: &mut Engine, text: &str| {
        let mut request = Request::new();
        headers(engine, &mut request, &pairs);
        let sent = chat(TOOLS, text);
        let (body, Read::Analysed { analysis, .. }) = read(engine, &mut request, &sent) else {
            panic!("analysed");
        };
        let planned = request.plan_search(
            engine,
            &analysis,
            &body,
            Ranked::Keyword,
            false,
            &envoy.store,
            envoy.now_seconds,
        );
        let Ok(Searched::Planned { actions, search }) = planned else {
            panic!("planned");
        };
        (actions, search.expect("a search loop"))
    };
    let (_, search) = plan(&mut engine, "what is the weather forecast for Paris");
    let (mut response, follow_ups) = Response::from_loop(*search);
    let seen = follow_ups.headers(None);
    assert!(seen.iter().any(|(n, v)| n == "x-session" && v == "s1"));
    assert!(!seen.iter().any(|(n, _)| n == "content-length"), "{seen:?}");
    let routed = vec![
        (":path".to_owned(), "/v2/chat".to_owned()),
        ("Content-Length".to_owned(), "10".to_owned()),
    ];
    assert_eq!(
        follow_ups.headers(Some(routed)),
        [(":path".to_owned(), "/v2/chat".to_owned())],
        "the routed headers, when they can be read"
    );
    assert!(response.searches());

    response.on_headers(&envoy, &json_head());
    let first = chat_call("c1", "find_tools", r#"{"query":"weather forecast"}"#);
    envoy
        .buffer
        .borrow_mut()
        .extend_from_slice(first.as_bytes());
    let size = envoy.buffer.borrow().len();
    assert_eq!(response.on_body(Some(&envoy), size, true), Flow::Pause);
    assert!(
        envoy.recorded.borrow().is_empty(),
        "not before the loop ends"
    );
    let token = response.token().expect("a follow-up is out");
    let last = chat_call("c2", "get_forecast", r#"{"city":"Paris"}"#);
    let answer = Answer {
        status: Some(200),
        content_type: Some("application/json".into()),
        body: last.into_bytes(),
    };
    assert!(response.on_call(Some(&envoy), token, answer));
    assert!(response.token().is_none(), "the loop ended");
    let recorded = envoy.recorded.borrow().clone();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(recorded[0].contains("rounds=1"), "{recorded:?}");
    assert_eq!(response.on_trailers(Some(&envoy)), Flow::Continue);
    assert_eq!(envoy.recorded.borrow().len(), 1, "recorded once");

    // The session's next turn: what the loop found is shown before any search.
    let (actions, _) = plan(&mut engine, "and tomorrow?");
    let mut upstream = Upstream {
        body: chat(TOOLS, "and tomorrow?"),
        ..Upstream::default()
    };
    upstream.perform(actions);
    assert!(
        upstream.tools().contains(&"get_forecast".to_owned()),
        "{:?}",
        upstream.tools()
    );
}

/// A whole JSON answer's headers, as the response side reads them.
fn json_head() -> crate::search::respond::Head {
    crate::search::respond::Head {
        status: Some("200".into()),
        content_type: Some("application/json".into()),
        content_encoding: None,
        end_of_stream: false,
    }
}

/// Filter mode with `unknown_tools.answer`: the request goes upstream filtered, and the
/// answer's call of a tool the request never carried is answered to the model in a follow-up
/// that continues what the upstream got; the client gets the model's next turn instead.
#[test]
fn a_made_up_call_is_answered_to_the_model_not_the_client() {
    use crate::search::respond::{Answer, Flow};
    use crate::search::respond_model::Envoy;
    let mut engine = engine(r#"{"top_k":2,"min_tools":3,"unknown_tools":{"answer":true}}"#);
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
    let (body, mut analysis, mut upstream) = analysed(&mut engine, &mut request, &sent);
    let store = crate::embeddings::MemoryBytes::default();
    let searched = request
        .plan_search(
            &engine,
            &analysis,
            &body,
            Ranked::Keyword,
            false,
            &store,
            1_000,
        )
        .unwrap();
    assert!(matches!(searched, Searched::Filter), "filter mode writes");
    upstream.perform(
        request
            .apply(&engine.config, &mut analysis, &body, Ranked::Keyword)
            .unwrap(),
    );
    assert_eq!(upstream.tools().len(), 2);
    let answering = request
        .answer_unknown(&engine.config, &analysis, upstream.body.clone(), false)
        .expect("a loop answering made-up calls");
    let mut responder = answering.responder;
    let envoy = Envoy::default();
    responder.on_headers(&envoy, &json_head());
    let made_up = chat_call("c1", "book_flight", r#"{"to":"Paris"}"#);
    assert_eq!(
        envoy.feed(&mut responder, made_up.as_bytes(), true),
        Flow::Pause
    );
    let token = responder
        .token()
        .expect("the made-up call answered in a follow-up");
    let text = serde_json::json!({
        "id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Sunny, 24 degrees."}}]
    })
    .to_string();
    envoy.answer(
        &mut responder,
        token,
        Answer {
            status: Some(200),
            content_type: Some("application/json".into()),
            body: text.into_bytes(),
        },
    );
    let follow_ups = envoy.follow_ups.borrow();
    assert_eq!(follow_ups.len(), 1);
    assert!(follow_ups[0].contains("book_flight"), "{}", follow_ups[0]);
    assert_eq!(
        offered(&follow_ups[0]),
        upstream.tools(),
        "it continues what went upstream"
    );
    let client = envoy.client_text();
    assert!(client.contains("Sunny"), "{client}");
    assert!(!client.contains("book_flight"), "{client}");
}

/// An embeddings answer for `inputs`: one vector per text, a hashed bag of its words (texts
/// that share words are near), as the OpenAI embeddings API shapes it.
fn embeddings_answer(inputs: &[String]) -> crate::mcp::exchange::CallAnswer {
    let bag = |text: &str| {
        let mut v = vec![0.01f32; 8];
        for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
            if !word.is_empty() {
                v[xxhash_rust::xxh3::xxh3_64(word.as_bytes()) as usize % 8] += 1.0;
            }
        }
        v
    };
    let data: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| serde_json::json!({"index": index, "embedding": bag(text)}))
        .collect();
    crate::mcp::exchange::CallAnswer {
        status: Some(200),
        content_type: "application/json".into(),
        body: serde_json::json!({ "data": data }).to_string().into_bytes(),
    }
}

/// An engine with hybrid ranking (`top_k` 2; the embeddings settings `cluster` and `model`
/// with `extra`'s), its embeddings settings, and an empty vector cache.
fn hybrid_engine(
    extra: &str,
) -> (
    Engine,
    crate::config::embeddings::Embeddings,
    crate::embeddings::VectorCache<crate::embeddings::MemoryBytes>,
) {
    let mut embeddings: serde_json::Value = serde_json::from_str(extra).unwrap();
    embeddings["cluster"] = "e".into();
    embeddings["model"] = "m".into();
    let config = serde_json::json!({"top_k": 2, "min_tools": 3, "ranking": "hybrid",
        "embeddings": embeddings});
    let engine = engine(&config.to_string());
    let e = engine.config.embeddings.clone().unwrap();
    let cache = crate::embeddings::VectorCache::new(Default::default(), 1000, "v.");
    (engine, e, cache)
}

/// Where hybrid ranking's vectors come from, in `cache` under `e`.
fn vector_source<'a>(
    e: &'a crate::config::embeddings::Embeddings,
    cache: &'a crate::embeddings::VectorCache<crate::embeddings::MemoryBytes>,
) -> crate::embeddings::Source<'a, crate::embeddings::MemoryBytes> {
    crate::embeddings::Source {
        provider: "test",
        model: &e.model,
        dimensions: e.dimensions,
        cache,
        roles: e.roles.as_ref(),
        query_sentences: e.query_sentences,
    }
}

/// Hybrid ranking in the body phase: a new catalog's first request asks for its question's
/// and its tools' vectors in one call and is ranked with the answer; the next request with
/// the same tools is ranked from the cache at once; a call that timed out with tools in it
/// leaves them to the background fetch, and the request goes on by keyword.
#[test]
fn hybrid_ranking_waits_for_one_call_then_ranks_from_the_cache() {
    let (mut engine, e, cache) = hybrid_engine(r#"{"max_batch":32}"#);
    let source = vector_source(&e, &cache);
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
    let (_, mut analysis, _) = analysed(&mut engine, &mut request, &sent);
    let hybrid::Start::Call(call) = hybrid::start(&source, &engine.config, &e, &mut analysis)
    else {
        panic!("nothing cached: a call");
    };
    assert_eq!(call.inputs.len(), 1 + TOOLS.len(), "{:?}", call.inputs);
    let answer = embeddings_answer(&call.inputs);
    let answered = call.answered(&source, &engine.config, &e, &mut analysis, &answer);
    assert_eq!(answered.ranked, Ranked::Hybrid);
    assert!(answered.backfill.is_none());

    // Another question, the same tools: only the question is missing.
    let mut again = Request::new();
    headers(&engine, &mut again, CHAT);
    let sent = chat(TOOLS, "scale the checkout deployment to five pods");
    let (_, mut analysis, _) = analysed(&mut engine, &mut again, &sent);
    let hybrid::Start::Call(call) = hybrid::start(&source, &engine.config, &e, &mut analysis)
    else {
        panic!("the question is new: a call");
    };
    assert_eq!(call.inputs.len(), 1, "{:?}", call.inputs);
    let answer = embeddings_answer(&call.inputs);
    let answered = call.answered(&source, &engine.config, &e, &mut analysis, &answer);
    assert_eq!(answered.ranked, Ranked::Hybrid);
    // The same question again: everything is cached, no call.
    let mut third = Request::new();
    headers(&engine, &mut third, CHAT);
    let (_, mut analysis, _) = analysed(&mut engine, &mut third, &sent);
    assert!(matches!(
        hybrid::start(&source, &engine.config, &e, &mut analysis),
        hybrid::Start::Ranked(Ranked::Hybrid, None)
    ));

    // New tools whose call times out (Envoy answers 504): keyword, and the tools are left to
    // the background fetch.
    let mut other = Request::new();
    headers(&engine, &mut other, CHAT);
    let renamed: Vec<String> = TOOLS.iter().map(|t| format!("{t}_v2")).collect();
    let renamed: Vec<&str> = renamed.iter().map(String::as_str).collect();
    let sent = chat(&renamed, "what is the weather forecast for Paris tomorrow?");
    let (_, mut analysis, _) = analysed(&mut engine, &mut other, &sent);
    let hybrid::Start::Call(call) = hybrid::start(&source, &engine.config, &e, &mut analysis)
    else {
        panic!("new tools: a call");
    };
    let timeout = crate::mcp::exchange::CallAnswer {
        status: Some(504),
        content_type: String::new(),
        body: Vec::new(),
    };
    let answered = call.answered(&source, &engine.config, &e, &mut analysis, &timeout);
    assert_eq!(
        answered.ranked,
        Ranked::Fallback(crate::embeddings::Fallback::Timeout)
    );
    assert_eq!(answered.backfill.map(|b| b.len()), Some(TOOLS.len()));
}

/// The gating server's answer to the call `gate` asked for: a JSON-RPC result whose
/// `structuredContent` is `verdict`.
fn gating_answer(verdict: serde_json::Value) -> crate::mcp::exchange::CallAnswer {
    let id: u64 = crate::mcp::exchange::GATING_ID.parse().unwrap();
    crate::mcp::exchange::CallAnswer {
        status: Some(200),
        content_type: "application/json".to_owned(),
        body: serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": id, "result": {"content": [], "structuredContent": verdict}
        }))
        .unwrap(),
    }
}

/// `_tool_gating` in filter mode: `gating.rules` decide at once, the gating server is asked
/// once, both verdicts shape the selection, and the claimed tool is named by `tool_choice` in
/// the body the upstream gets.
#[test]
fn gating_lifecycle_asks_the_server_once_and_writes_the_claim() {
    let mut engine = engine(
        r#"{"top_k":3,"min_tools":3,"gating":{"mcp":{"cluster":"gating","path":"/mcp"},
            "claim":"tool_choice","rules":[{"when":{"words":["weather"]},"exclude":["get_*"]}]}}"#,
    );
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let sent = chat(TOOLS, "email the weather forecast to the team");
    let (body, mut analysis, mut upstream) = analysed(&mut engine, &mut request, &sent);
    let reader = analysis.reader;
    let gating::Gate::Ask(actions, call) = request.gate(&engine, &analysis, reader, &body) else {
        panic!("the gating server is asked");
    };
    upstream.perform(actions);
    assert_eq!(upstream.counted(Counter::GatingExcluded), 2, "the rule's");
    assert_eq!(call.cluster, "gating");
    assert!(
        call.headers
            .contains(&(":path".to_owned(), "/mcp".to_owned()))
    );
    assert!(call.body.contains("email the weather forecast to the team"));
    // Asked once per request.
    assert!(matches!(
        request.gate(&engine, &analysis, reader, &body),
        gating::Gate::Rank(a) if a.is_empty()
    ));

    let answer =
        gating_answer(serde_json::json!({"exclude": ["list_pods"], "claim": "send_email"}));
    let gate = request.gating_answered(&engine.config, &analysis, reader, &body, Some(&answer));
    let gating::Gate::Rank(actions) = gate else {
        panic!("ranked with the verdict");
    };
    upstream.perform(actions);
    assert_eq!(upstream.counted(Counter::GatingCalls), 1);
    assert_eq!(upstream.counted(Counter::GatingFailed), 0);
    assert_eq!(upstream.counted(Counter::GatingExcluded), 3);
    assert_eq!(upstream.counted(Counter::GatingClaimed), 1);

    request.apply_verdict(&engine.config, &mut analysis);
    let actions = request
        .apply(&engine.config, &mut analysis, &body, Ranked::Keyword)
        .unwrap();
    upstream.perform(actions);
    let written = upstream.body.clone();
    let choice = request.claimed_tool_choice(reader, || written);
    upstream.perform(choice.into_iter().collect());
    let kept = upstream.tools();
    assert!(kept.iter().any(|t| t == "send_email"), "{kept:?}");
    for excluded in ["get_weather", "get_forecast", "list_pods"] {
        assert!(
            !kept.iter().any(|t| t == excluded),
            "{excluded} in {kept:?}"
        );
    }
    let sent_upstream: serde_json::Value = serde_json::from_slice(&upstream.body).unwrap();
    assert_eq!(
        sent_upstream["tool_choice"]["function"]["name"], "send_email",
        "{sent_upstream}"
    );
    upstream.perform(request.on_response_headers(Some(&engine.config)));
    let header = upstream.recorded("x-toolsift").unwrap();
    assert!(
        header.ends_with("gating=excluded:3,claimed:send_email"),
        "{header}"
    );
}

/// Under `gating.claim: "answer"` a claim of one of the request's tools is answered at once,
/// in the dialect's answer, and nothing goes upstream; a gating call that fails leaves the
/// request to the rules alone.
#[test]
fn a_claim_under_answer_is_answered_without_the_model() {
    let mut engine = engine(
        r#"{"min_tools":3,"gating":{"mcp":{"cluster":"gating","path":"/mcp"},"claim":"answer",
            "rules":[{"when":{"words":["page"]},"claim":"send_email","arguments":{"to":"oncall"}}]}}"#,
    );
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let sent = chat(TOOLS, "page the on-call engineer");
    let (body, analysis, mut upstream) = analysed(&mut engine, &mut request, &sent);
    let reader = analysis.reader;
    let gating::Gate::Ask(actions, _) = request.gate(&engine, &analysis, reader, &body) else {
        panic!("the gating server is asked");
    };
    upstream.perform(actions);
    // The call could not be sent: the rules' verdict stands alone, uncounted as a call.
    let gate = request.gating_answered(&engine.config, &analysis, reader, &body, None);
    let gating::Gate::Answered(actions) = gate else {
        panic!("answered");
    };
    // The answer is counted after the reply: an adapter that cannot send it counts nothing.
    let at = |wanted: fn(&Action) -> bool| actions.iter().position(wanted).unwrap();
    assert!(
        at(|a| matches!(a, Action::Reply { .. }))
            < at(|a| matches!(a, Action::Count(Counter::GatingAnswered, _)))
    );
    upstream.perform(actions);
    assert_eq!(upstream.counted(Counter::GatingCalls), 0);
    assert_eq!(upstream.counted(Counter::GatingClaimed), 1);
    assert_eq!(upstream.counted(Counter::GatingAnswered), 1);
    assert_eq!(
        upstream.body, sent,
        "nothing rewritten: nothing goes upstream"
    );
    let (status, answer) = upstream.reply.clone().unwrap();
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let call = &answer["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "send_email", "{answer}");
    assert_eq!(call["arguments"], r#"{"to":"oncall"}"#, "{answer}");
    assert_eq!(answer["model"], "gpt-4o");
    upstream.perform(request.on_response_headers(Some(&engine.config)));
    let total = TOOLS.len();
    assert_eq!(
        upstream.recorded("x-toolsift"),
        Some(format!("kept=0 total={total} gating=excluded:0,claimed:send_email").as_str())
    );
}

/// The adapter's part in the body phase ([`BodyHost`]) on an Envoy that is a byte buffer: the
/// body as the upstream gets it, the calls sent, the phases timed, the loop left watching.
struct BodyEnvoy {
    upstream: Upstream,
    store: crate::embeddings::MemoryBytes,
    /// Whether a call can be sent (Envoy refuses a dispatch to an unknown cluster).
    sends: bool,
    asked: Vec<String>,
    embedded: Vec<Vec<String>>,
    phases: std::cell::RefCell<Vec<crate::stats::Fixed>>,
    watching: Option<Box<SearchLoop>>,
    backfilled: usize,
}

impl BodyEnvoy {
    fn new(sent: &[u8]) -> BodyEnvoy {
        BodyEnvoy {
            upstream: Upstream {
                body: sent.to_vec(),
                ..Upstream::default()
            },
            store: crate::embeddings::MemoryBytes::default(),
            sends: true,
            asked: Vec::new(),
            embedded: Vec::new(),
            phases: std::cell::RefCell::default(),
            watching: None,
            backfilled: 0,
        }
    }

    fn timed(&self, phase: crate::stats::Fixed) -> bool {
        self.phases.borrow().contains(&phase)
    }
}

impl BodyHost for BodyEnvoy {
    type Store = crate::embeddings::MemoryBytes;

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        let body = &self.upstream.body;
        Some(body.get(..size.min(body.len()))?.to_vec())
    }

    fn store(&self) -> &Self::Store {
        &self.store
    }

    fn now_seconds(&self) -> u64 {
        1_000
    }

    fn clock(&self) -> Option<std::time::SystemTime> {
        Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000))
    }

    fn phase(
        &self,
        stat: crate::stats::Fixed,
        started: Option<std::time::SystemTime>,
    ) -> Option<std::time::SystemTime> {
        self.phases.borrow_mut().push(stat);
        started
    }

    fn count(&self, _counts: crate::stats::Counts) {}

    fn perform(&mut self, actions: Vec<Action>) -> Result<Flow, Skipped> {
        let mut flow = Flow::Continue;
        for action in actions {
            match action {
                Action::Watch(search) => self.watching = Some(search),
                Action::Reply { .. } => {
                    flow = Flow::Pause;
                    self.upstream.perform(vec![action]);
                }
                other => self.upstream.perform(vec![other]),
            }
        }
        Ok(flow)
    }

    fn headers_held(&self) -> bool {
        false
    }

    fn embed(
        &mut self,
        _e: &crate::config::embeddings::Embeddings,
        inputs: &[&str],
    ) -> Option<u32> {
        self.embedded
            .push(inputs.iter().map(|s| (*s).to_owned()).collect());
        self.sends.then_some(10 + self.embedded.len() as u32)
    }

    fn ask(&mut self, call: &gating::GatingCall) -> Option<u32> {
        self.asked.push(call.cluster.clone());
        self.sends.then_some(1)
    }

    fn backfill(&mut self, _catalog: &std::rc::Rc<crate::rank::Catalog>, entries: Vec<usize>) {
        self.backfilled += entries.len();
    }
}

const GATED_HYBRID: &str = r#"{"top_k":3,"min_tools":3,"ranking":"hybrid",
    "embeddings":{"cluster":"e","model":"m","max_batch":32},
    "gating":{"mcp":{"cluster":"gating","path":"/mcp"},"claim":"tool_choice"}}"#;

/// The body phase in one pass from the adapter's side: the whole body in, the gating server
/// asked and the request paused; its verdict in, the embeddings asked and the request paused
/// again; their answer in, the tools ranked with them and written with the claimed
/// `tool_choice`; and the answer's headers say so. Each call's answer goes back to the step
/// that sent it, in order.
#[test]
fn the_body_phase_waits_for_the_gating_server_then_the_embeddings() {
    use crate::embeddings::{MemoryBytes, VectorCache};
    let engine = std::cell::RefCell::new(engine(GATED_HYBRID));
    let vectors = (
        VectorCache::new(MemoryBytes::default(), 1000, "v."),
        "test".to_owned(),
    );
    let worker = Worker {
        engine: &engine,
        vectors: Some(&vectors),
    };
    let mut request = Request::new();
    let mut host = BodyEnvoy::new(b"");
    host.upstream
        .perform(headers(&engine.borrow(), &mut request, CHAT));
    let sent = chat(TOOLS, "email the weather forecast to the team");
    host.upstream.body = sent.clone();
    let reader = request.buffering.unwrap();

    let step = request.on_body_end(&mut host, &worker, reader, sent.len());
    assert_eq!(step.ok(), Some(Step::Waiting));
    assert_eq!(host.asked, ["gating"]);
    assert!(host.embedded.is_empty(), "ranking waits for the verdict");
    assert!(request.waits_for(1) && !request.waits_for(2));
    assert_eq!(host.upstream.body, sent, "nothing written while waiting");

    let verdict =
        gating_answer(serde_json::json!({"exclude": ["list_pods"], "claim": "send_email"}));
    let step = request.call_answered(&mut host, &worker, &verdict);
    assert_eq!(step.ok(), Some(Step::Waiting));
    assert_eq!(host.asked.len(), 1, "asked once");
    assert_eq!(host.embedded.len(), 1);
    assert_eq!(
        host.embedded[0].len(),
        1 + TOOLS.len(),
        "the question and every tool"
    );
    assert!(request.waits_for(11) && !request.waits_for(1));

    let vectors_answer = embeddings_answer(&host.embedded[0]);
    let step = request.call_answered(&mut host, &worker, &vectors_answer);
    assert_eq!(step.ok(), Some(Step::Done));
    assert!(!request.waits_for(11), "nothing pending once done");
    assert_eq!(host.upstream.counted(Counter::RankedHybrid), 1);
    assert_eq!(host.upstream.counted(Counter::GatingCalls), 1);
    assert_eq!(host.upstream.counted(Counter::Rewritten), 1);
    let kept = host.upstream.tools();
    assert!(kept.iter().any(|t| t == "send_email"), "{kept:?}");
    assert!(!kept.iter().any(|t| t == "list_pods"), "{kept:?}");
    let written: serde_json::Value = serde_json::from_slice(&host.upstream.body).unwrap();
    assert_eq!(written["tool_choice"]["function"]["name"], "send_email");
    assert!(
        host.watching.is_none(),
        "filter mode leaves the answer to the guard"
    );
    use crate::stats::Fixed;
    for phase in [
        Fixed::FilterTimeUs,
        Fixed::PhaseReadUs,
        Fixed::PhaseAssembleUs,
        Fixed::PhaseHybridUs,
        Fixed::PhaseWriteUs,
        Fixed::PhaseAnswerUs,
    ] {
        assert!(host.timed(phase), "{phase:?} timed");
    }
    host.upstream
        .perform(request.on_response_headers(Some(&engine.borrow().config)));
    let header = host.upstream.recorded("x-toolsift").unwrap();
    assert!(
        header.contains("gating=excluded:1,claimed:send_email"),
        "{header}"
    );

    // The same tools, another question, calls Envoy cannot send: one pass, no wait: the rules'
    // verdict alone (none) and keyword ranking, with why.
    let mut again = Request::new();
    let mut host = BodyEnvoy::new(b"");
    host.sends = false;
    host.upstream
        .perform(headers(&engine.borrow(), &mut again, CHAT));
    let sent = chat(TOOLS, "scale the checkout deployment to five pods");
    host.upstream.body = sent.clone();
    let step = again.on_body_end(&mut host, &worker, reader, sent.len());
    assert_eq!(step.ok(), Some(Step::Done));
    assert_eq!((host.asked.len(), host.embedded.len()), (1, 1));
    assert_eq!(host.upstream.counted(Counter::GatingCalls), 0);
    assert_eq!(
        host.upstream
            .counted(Counter::Fallback(crate::embeddings::Fallback::Dispatch)),
        1
    );
    assert_eq!(host.upstream.tools().len(), 3);
}

/// Search mode's body phase ends with its loop left watching the answer (it replaces the
/// guard); filter mode with `unknown_tools.answer` ends with the loop answering made-up calls,
/// built from the body as it went upstream.
#[test]
fn the_body_phase_leaves_the_loop_that_watches_the_answer() {
    for (config, watching) in [
        (r#"{"mode":"search","top_k":2,"min_tools":3}"#, true),
        (
            r#"{"top_k":2,"min_tools":3,"unknown_tools":{"answer":true}}"#,
            true,
        ),
        (r#"{"top_k":2,"min_tools":3}"#, false),
    ] {
        let engine = std::cell::RefCell::new(engine(config));
        let worker: Worker<'_, crate::embeddings::MemoryBytes> = Worker {
            engine: &engine,
            vectors: None,
        };
        let mut request = Request::new();
        let mut host = BodyEnvoy::new(b"");
        host.upstream
            .perform(headers(&engine.borrow(), &mut request, CHAT));
        let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
        host.upstream.body = sent.clone();
        let reader = request.buffering.unwrap();
        let step = request.on_body_end(&mut host, &worker, reader, sent.len());
        assert_eq!(step.ok(), Some(Step::Done), "{config}");
        assert_eq!(host.watching.is_some(), watching, "{config}");
        assert_ne!(host.upstream.body, sent, "{config}: written");
    }
}

/// A background call's answer for a new catalog's tools: their vectors cached, so that the
/// catalog's next request needs only its question embedded; an answer of another size is
/// never cached.
#[test]
fn a_background_answer_fills_the_catalogs_tool_vectors() {
    use crate::embeddings::{Fallback, tool_texts};
    let (mut engine, e, cache) = hybrid_engine(r#"{"dimensions":8}"#);
    let source = vector_source(&e, &cache);
    let mut request = Request::new();
    headers(&engine, &mut request, CHAT);
    let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
    let (_, analysis, _) = analysed(&mut engine, &mut request, &sent);
    let catalog = &analysis.catalog;
    let entries: Vec<usize> = (0..TOOLS.len()).collect();
    let texts = tool_texts(catalog, &entries);
    let mut nine = embeddings_answer(&texts);
    let data: Vec<_> = (0..texts.len())
        .map(|index| serde_json::json!({"index": index, "embedding": vec![0.5; 9]}))
        .collect();
    nine.body = serde_json::json!({ "data": data }).to_string().into_bytes();
    assert_eq!(
        hybrid::backfilled(&source, &e, catalog, &entries, &nine),
        Err(Fallback::Dimensions),
        "nine numbers where eight are configured"
    );
    assert_eq!(source.gather(catalog, "q").missing_tools.len(), TOOLS.len());
    let answer = embeddings_answer(&texts);
    assert_eq!(
        hybrid::backfilled(&source, &e, catalog, &entries, &answer),
        Ok(TOOLS.len())
    );
    assert!(source.gather(catalog, "q").missing_tools.is_empty());
}

/// A worker keeps a vector cache with hybrid ranking only, keyed by the embeddings service it
/// asks (cluster, authority, path): vectors of another service are never mixed in.
#[test]
fn a_worker_keeps_vectors_with_hybrid_ranking_only() {
    let (engine, e, _) = hybrid_engine(r#"{"path":"/v1/embeddings"}"#);
    let (_, key) =
        hybrid::worker_vectors(&engine.config, crate::embeddings::MemoryBytes::default())
            .expect("hybrid ranking keeps vectors");
    assert_eq!(key, format!("e|{}|/v1/embeddings", e.authority()));
    let keyword = self::engine(r#"{"embeddings":{"cluster":"e","model":"m"}}"#);
    assert!(
        hybrid::worker_vectors(&keyword.config, crate::embeddings::MemoryBytes::default())
            .is_none()
    );
    assert!(!keyword.config.counts_mcp());
    assert!(
        self::engine(r#"{"gating":{"rules":[{"when":{"words":["x"]},"exclude":["y"]}]}}"#)
            .config
            .counts_mcp()
    );
}

/// `gen_ai`: the body phase records the request's GenAI attributes, the model from the body;
/// without it, nothing.
#[test]
fn gen_ai_records_the_provider_operation_and_model() {
    let recorded = |config: &str, sent: &[u8]| {
        let mut engine = engine(config);
        let mut request = Request::new();
        headers(&engine, &mut request, CHAT);
        let (_, read) = read(&mut engine, &mut request, sent);
        let actions = match read {
            Read::Analysed { actions, .. } | Read::Skipped { actions, .. } => actions,
            Read::Answered(actions) => actions,
        };
        actions.into_iter().find_map(|a| match a {
            Action::RecordGenAi(value) => Some(value),
            _ => None,
        })
    };
    let sent = chat(TOOLS, "what is the weather forecast for Paris tomorrow?");
    // Analysed and filtered, or let through with too few tools.
    for on in [
        r#"{"top_k":2,"min_tools":3,"gen_ai":true}"#,
        r#"{"top_k":2,"gen_ai":true}"#,
    ] {
        assert_eq!(recorded(on, &sent).as_deref(), Some("openai chat gpt-4o"));
    }
    let on = r#"{"top_k":2,"gen_ai":true}"#;
    // A body it cannot read still has its provider and operation.
    assert_eq!(recorded(on, b"{not json").as_deref(), Some("openai chat -"));
    assert_eq!(recorded(r#"{"top_k":2}"#, &sent), None);
}
