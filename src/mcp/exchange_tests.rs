#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::*;
use crate::config::mcp::Mcp;
use std::cell::RefCell;

/// A request the gateway sent: body, method, name, timeout.
type Sent = (String, String, Option<String>, u64);

/// Hybrid ranking's pieces: the vector cache, the embeddings settings, the configuration.
type Vectors = (
    crate::embeddings::VectorCache<crate::embeddings::MemoryBytes>,
    crate::config::embeddings::Embeddings,
    Config,
);

#[derive(Default)]
struct Mock {
    vectors: Option<Vectors>,
    embedded: RefCell<Vec<Vec<String>>>,
    sent: RefCell<Vec<Sent>>,
    /// The `Mcp-Param-*` headers of each request sent.
    params: RefCell<Vec<Vec<(String, String)>>>,
    answered: RefCell<Vec<(u16, String, String)>>,
    events: RefCell<Vec<Event>>,
    generation: RefCell<u64>,
    now: u64,
    refuse: bool,
    suggestions: Option<std::rc::Rc<crate::suggestions::Suggestions>>,
    /// The shared store `search.memory` keeps sessions in.
    store: crate::embeddings::MemoryBytes,
    /// The request body Envoy buffered, and the response chunk passing.
    request_body: Vec<u8>,
    response_body: RefCell<Vec<u8>>,
    /// The route's cluster.
    cluster: Option<String>,
    /// The servers whose tool list changed.
    changed: RefCell<Vec<String>>,
}

impl Host for Mock {
    type Store = crate::embeddings::MemoryBytes;

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        let (cache, embeddings, config) = self.vectors.as_ref()?;
        Some(Hybrid {
            source: crate::embeddings::Source {
                provider: "test",
                model: &embeddings.model,
                dimensions: embeddings.dimensions,
                cache,
                roles: embeddings.roles.as_ref(),
                query_sentences: embeddings.query_sentences,
            },
            embeddings,
            config,
        })
    }

    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>> {
        self.suggestions.clone()
    }

    fn store(&self) -> &Self::Store {
        &self.store
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let mut embedded = self.embedded.borrow_mut();
        embedded.push(inputs.iter().map(|i| (*i).to_owned()).collect());
        Some(1000 + embedded.len() as u32)
    }

    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32> {
        if self.refuse {
            return None;
        }
        self.params.borrow_mut().push(params.to_vec());
        let mut sent = self.sent.borrow_mut();
        sent.push((body.into(), method.into(), name.map(Into::into), timeout_ms));
        Some(sent.len() as u32)
    }
    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        self.answered.borrow_mut().push((
            status,
            content_type.into(),
            String::from_utf8(body.to_vec()).unwrap(),
        ));
    }
    fn now_millis(&self) -> u64 {
        self.now
    }
    fn generation(&self, _server: &str) -> u64 {
        *self.generation.borrow()
    }
    fn tools_changed(&self, server: &str) {
        *self.generation.borrow_mut() += 1;
        self.changed.borrow_mut().push(server.to_owned());
    }
    fn request_body(&self, len: usize) -> Vec<u8> {
        self.request_body[..len.min(self.request_body.len())].to_vec()
    }
    fn response_body(&self, len: usize) -> Vec<u8> {
        let chunk = self.response_body.borrow();
        chunk[..len.min(chunk.len())].to_vec()
    }
    fn upstream_cluster(&self) -> Option<String> {
        self.cluster.clone()
    }
    fn count(&self, event: Event) {
        self.events.borrow_mut().push(event);
    }
}

impl Mock {
    fn last_sent(&self) -> Value {
        serde_json::from_str(&self.sent.borrow().last().unwrap().0).unwrap()
    }
    fn answer(&self) -> (u16, Value) {
        let (status, _, body) = self.answered.borrow().last().cloned().unwrap();
        (status, serde_json::from_str(&body).unwrap())
    }
}

fn tool(name: &str, description: &str) -> String {
    format!(
        r#"{{"name":"{name}","description":"{description}","inputSchema":{{"type":"object","properties":{{"q":{{"type":"string"}}}}}}}}"#
    )
}

fn catalog_tools() -> Vec<String> {
    vec![
        tool("get_weather", "Current weather for a city"),
        tool("send_email", "Send an email message to a recipient"),
        tool("create_issue", "Create a GitHub issue in a repository"),
        tool("list_files", "List the files in a directory"),
        tool("weather_alerts", "Severe weather alerts for a region"),
    ]
}

fn list_answer(id: &str, tools: &[String], cursor: Option<&str>, extra: &str) -> CallAnswer {
    let cursor = cursor.map_or(String::new(), |c| format!(",\"nextCursor\":\"{c}\""));
    CallAnswer {
        status: Some(200),
        content_type: "application/json".into(),
        body: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{}]{cursor}{extra}}}}}"#,
            tools.join(",")
        )
        .into_bytes(),
    }
}

fn sse(messages: &[String]) -> CallAnswer {
    let mut body = String::new();
    for m in messages {
        body.push_str(&format!("event: message\ndata: {m}\n\n"));
    }
    CallAnswer {
        status: Some(200),
        content_type: "text/event-stream".into(),
        body: body.into_bytes(),
    }
}

struct Setup {
    config: Config,
    mcp: Mcp,
    cache: CatalogCache,
    /// `gating.rules`, compiled as the filter's engine compiles them.
    rules: crate::gating::Rules,
}

impl Setup {
    fn new(config: &str) -> Setup {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mcp = config.mcp.clone().unwrap_or_default();
        let rules = crate::pipeline::Engine::new(config.clone())
            .gating_rules()
            .clone();
        Setup {
            config,
            mcp,
            cache: CatalogCache::new(1 << 20),
            rules,
        }
    }

    fn settings(&self) -> Settings<'_> {
        Settings {
            config: &self.config,
            mcp: &self.mcp,
            gating: Some(&self.rules).filter(|r| !r.is_empty()),
        }
    }

    /// Runs `body` through a new exchange; the catalog pages (when fetched) come from `pages`.
    fn run(
        &mut self,
        host: &Mock,
        revision: &str,
        body: &str,
        pages: &[Vec<String>],
    ) -> (Exchange, Step) {
        let head = Head {
            server: "mcp|localhost".into(),
            revision: revision.into(),
            ..Head::default()
        };
        self.run_head(host, head, body, pages)
    }

    /// [`Setup::run`] for a request with these headers (its caller, its credentials).
    fn run_head(
        &mut self,
        host: &Mock,
        head: Head,
        body: &str,
        pages: &[Vec<String>],
    ) -> (Exchange, Step) {
        let mut exchange = Exchange::new(head);
        let settings = Settings {
            config: &self.config,
            mcp: &self.mcp,
            gating: Some(&self.rules).filter(|r| !r.is_empty()),
        };
        let mut step = exchange.on_body(host, &mut self.cache, &settings, body.as_bytes());
        let mut page = 0;
        while step == Step::Wait {
            let sent = host.last_sent();
            let waits_for_it = exchange.token() == Some(host.sent.borrow().len() as u32);
            if sent["method"] != "tools/list" || !waits_for_it {
                break;
            }
            let id = sent["id"].to_string();
            let more = (page + 1 < pages.len()).then(|| (page + 2).to_string());
            let answer = list_answer(&id, &pages[page], more.as_deref(), "");
            page += 1;
            let token = exchange.token().unwrap();
            step = exchange.on_call(host, &mut self.cache, &settings, token, answer);
        }
        (exchange, step)
    }
}

fn call(id: u32, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

#[test]
fn tools_list_shows_the_meta_tools_and_pinned_ones_from_every_page() {
    let mut s = Setup::new(r#"{"always_include":["list_*"],"mcp":{}}"#);
    let host = Mock::default();
    let tools = catalog_tools();
    let (exchange, step) = s.run(
        &host,
        "2025-11-25",
        LIST,
        &[tools[..2].to_vec(), tools[2..].to_vec()],
    );
    assert_eq!(step, Step::Answered);
    let sent = host.sent.borrow().clone();
    assert_eq!(sent.len(), 2, "two pages");
    assert_eq!(host.last_sent()["params"]["cursor"], "2");
    let (status, answer) = host.answer();
    assert_eq!(status, 200);
    assert_eq!(answer["id"], 1);
    let names: Vec<&str> = answer["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["find_tools", "call_tool", "list_files"]);
    assert!(
        answer["result"].get("resultType").is_none(),
        "not before 2026-07-28"
    );
    assert_eq!(
        exchange.header_value(),
        Some("mcp=tools/list kept=1 total=5")
    );
    // Cached: the next list asks the server nothing.
    let (_, step) = s.run(&host, "2025-11-25", LIST, &[]);
    assert_eq!(step, Step::Answered);
    assert_eq!(host.sent.borrow().len(), 2);
    assert!(host.events.borrow().contains(&Event::CatalogHit));
}

#[test]
fn find_tools_ranks_the_whole_catalog() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    let body = call(
        2,
        "find_tools",
        r#"{"query":"what's the weather in Paris","limit":1}"#,
    );
    let (exchange, step) = s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
    assert_eq!(step, Step::Answered);
    let (status, answer) = host.answer();
    assert_eq!(status, 200);
    let result = &answer["result"];
    assert_eq!(result["resultType"], "complete");
    let found = result["structuredContent"]["tools"].as_array().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["name"], "get_weather");
    assert_eq!(found[0]["inputSchema"]["type"], "object");
    assert!(found[0]["score"].as_f64().unwrap() > 0.0);
    assert_eq!(found[0]["matched"], json!(["bm25"]));
    assert_eq!(
        found[0]["_meta"]["toolsift/schemaVersion"]
            .as_str()
            .unwrap()
            .len(),
        16
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
    assert_eq!(
        exchange.header_value(),
        Some("mcp=find_tools found=get_weather total=5")
    );
}

#[test]
fn a_find_tools_that_finds_nothing_good_gets_suggestions_never_callable() {
    let config = r#"{"mcp":{},"suggestions":{"min_score":100,"tools":[
        {"name":"book_meeting_room","description":"Book a meeting room for a team","source":"the calendar server"},
        {"name":"get_weather","description":"the server has it: never suggested"}]}}"#;
    let mut s = Setup::new(config);
    let engine = crate::pipeline::Engine::new(s.config.clone());
    let host = Mock {
        suggestions: engine.suggestions().cloned(),
        ..Mock::default()
    };
    let body = call(
        2,
        "find_tools",
        r#"{"query":"book a room for the weather team"}"#,
    );
    let (exchange, step) = s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
    assert_eq!(step, Step::Answered);
    let result = &host.answer().1["result"]["structuredContent"];
    assert_eq!(result["tools"][0]["name"], "get_weather", "{result}");
    let suggested = result["suggestions"].as_array().unwrap();
    assert_eq!(suggested.len(), 1, "{result}");
    assert_eq!(suggested[0]["name"], "book_meeting_room");
    assert_eq!(suggested[0]["suggested"], true);
    assert_eq!(suggested[0]["source"], "the calendar server");
    assert!(suggested[0].get("inputSchema").is_none());
    assert!(host.events.borrow().contains(&Event::Suggested(1)));
    assert!(
        exchange
            .header_value()
            .unwrap()
            .ends_with(" suggested=book_meeting_room")
    );
    // Calling a suggestion is calling a tool the server did not list: never sent.
    let sent = host.sent.borrow().len();
    let body = call(3, "book_meeting_room", "{}");
    s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
    assert_eq!(host.sent.borrow().len(), sent, "the server never sees it");
    assert!(
        host.answer().1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("find_tools")
    );
    // A good match scores above min_score: no suggestions.
    let mut s = Setup::new(&config.replace(r#""min_score":100"#, r#""min_score":0.1"#));
    let host = Mock {
        suggestions: crate::pipeline::Engine::new(s.config.clone())
            .suggestions()
            .cloned(),
        ..Mock::default()
    };
    let body = call(
        2,
        "find_tools",
        r#"{"query":"book a room for the weather team"}"#,
    );
    s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
    assert!(
        host.answer().1["result"]["structuredContent"]
            .get("suggestions")
            .is_none()
    );
}

#[test]
fn find_tools_without_a_query_is_an_error_result_never_the_catalog() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    for args in [r#"{}"#, r#"{"query":"  "}"#, r#"{"query":5}"#] {
        let host = Mock::default();
        let (_, step) = s.run(
            &host,
            "2025-11-25",
            &call(3, "find_tools", args),
            &[catalog_tools()],
        );
        assert_eq!(step, Step::Answered);
        let (_, answer) = host.answer();
        assert_eq!(answer["result"]["isError"], true, "{args}");
        assert!(answer["result"].get("structuredContent").is_none());
    }
}

#[test]
fn call_tool_becomes_the_real_call_with_the_clients_id() {
    let mut s = Setup::new(r#"{"mcp":{"timeout_ms":900}}"#);
    let host = Mock::default();
    let body = r#"{"jsonrpc":"2.0","id":"c-9","method":"tools/call","params":{"name":"call_tool","arguments":{"name":"send_email","arguments":{"to":"a@b"}},"_meta":{"progressToken":4,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let (mut exchange, step) = s.run(&host, MODERN_REVISION, body, &[catalog_tools()]);
    assert_eq!(step, Step::Wait);
    let sent = host.sent.borrow().last().cloned().unwrap();
    assert_eq!(
        (sent.1.as_str(), sent.2.as_deref(), sent.3),
        ("tools/call", Some("send_email"), 900)
    );
    let call: Value = serde_json::from_str(&sent.0).unwrap();
    assert_eq!(call["id"], "c-9");
    assert_eq!(call["params"]["name"], "send_email");
    assert_eq!(call["params"]["arguments"], json!({"to": "a@b"}));
    assert_eq!(
        call["params"]["_meta"],
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})
    );
    // The catalog page carried the client's envelope too.
    let page: Value = serde_json::from_str(&host.sent.borrow()[0].0).unwrap();
    assert_eq!(
        page["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    let answer = sse(&[
        r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.into(),
        r#"{"jsonrpc":"2.0","id":"c-9","result":{"content":[]}}"#.into(),
    ]);
    let body = answer.body.clone();
    let token = exchange.token().unwrap();
    let settings = s.settings();
    let step = exchange.on_call(&host, &mut CatalogCache::new(1), &settings, token, answer);
    assert_eq!(step, Step::Answered);
    let (status, content_type, answered) = host.answered.borrow().last().cloned().unwrap();
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    assert_eq!(answered.as_bytes(), body, "the server's answer, as it was");
    assert_eq!(*host.generation.borrow(), 1, "list_changed seen");
}

#[test]
fn unknown_tools_never_reach_the_server() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let gating = tool(catalog::GATING_TOOL, "gating");
    let mut tools = catalog_tools();
    tools.push(gating);
    for (revision, status) in [("2025-11-25", 200), (MODERN_REVISION, 400)] {
        for body in [
            call(5, "delete_everything", "{}"),
            call(5, catalog::GATING_TOOL, r#"{"query":"x"}"#),
            call(5, "call_tool", r#"{"name":"delete_everything"}"#),
            call(5, "call_tool", r#"{"arguments":{}}"#),
            call(5, "find_tools_2", "{}"),
        ] {
            let host = Mock::default();
            s.cache = CatalogCache::new(1 << 20);
            let (_, step) = s.run(&host, revision, &body, &[tools.clone()]);
            assert_eq!(step, Step::Answered, "{body}");
            assert!(
                host.sent.borrow().iter().all(|c| c.1 == "tools/list"),
                "{body}"
            );
            let (got, answer) = host.answer();
            assert_eq!(got, status);
            assert_eq!(answer["error"]["code"], -32602);
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("find_tools")
            );
        }
    }
    // A listed tool passes through.
    let host = Mock::default();
    let (exchange, step) = s.run(
        &host,
        "2025-11-25",
        &call(6, "get_weather", "{}"),
        &[tools.clone()],
    );
    assert_eq!(step, Step::Pass);
    assert!(host.answered.borrow().is_empty());
    assert_eq!(exchange.header_value(), Some("mcp=call tool=get_weather"));
}

#[test]
fn a_server_tool_named_like_a_meta_tool_is_never_shadowed() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let mut tools = catalog_tools();
    tools.push(tool("find_tools", "the server's own search"));
    let host = Mock::default();
    s.run(&host, "2025-11-25", LIST, &[tools.clone()]);
    let (_, answer) = host.answer();
    assert_eq!(answer["result"]["tools"][0]["name"], "find_tools_2");
    // The server's find_tools is called directly; find_tools_2 is the gateway's.
    let (_, step) = s.run(
        &host,
        "2025-11-25",
        &call(7, "find_tools", r#"{"query":"x"}"#),
        &[],
    );
    assert_eq!(step, Step::Pass);
    let (_, step) = s.run(
        &host,
        "2025-11-25",
        &call(8, "find_tools_2", r#"{"query":"email"}"#),
        &[],
    );
    assert_eq!(step, Step::Answered);
    assert_eq!(
        host.answer().1["result"]["structuredContent"]["tools"][0]["name"],
        "send_email"
    );
}

#[test]
fn gating_rules_exclude_and_claim_in_find_tools() {
    // The configuration's own gating, no server tool: the same effect as a server's verdict.
    let mut s = Setup::new(
        r#"{"mcp":{},"gating":{"rules":[
            {"when":{"words":["weather"]},"exclude":["get_weather*"]},
            {"when":{"regex":"(?i)alerts?"},"claim":"send_email"}]}}"#,
    );
    let host = Mock::default();
    let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
    let (exchange, step) = s.run(&host, "2025-11-25", &body, &[catalog_tools()]);
    assert_eq!(step, Step::Answered);
    let names: Vec<String> = host.answer().1["result"]["structuredContent"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["send_email", "weather_alerts"]);
    let header = exchange.header_value().unwrap();
    assert!(
        header.ends_with("gating=excluded:1,claimed:send_email"),
        "{header}"
    );
    assert!(host.events.borrow().contains(&Event::Excluded(1)));
    // No call was made for the verdict: only the catalog's pages went to the server.
    assert!(only_lists_sent(&host));
}

#[test]
fn gating_excludes_and_claims() {
    let mut s = Setup::new(r#"{"mcp":{"gating_timeout_ms":250}}"#);
    let mut tools = catalog_tools();
    tools.push(
        r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}}"#
            .to_owned(),
    );
    let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
    let verdict = |answer: &str| {
        sse(&[format!(
            r#"{{"jsonrpc":"2.0","id":7400000999,"result":{answer}}}"#
        )])
    };
    let run = |s: &mut Setup, answer: CallAnswer| {
        let host = Mock::default();
        let (mut exchange, step) = s.run(&host, "2025-11-25", &body, &[tools.clone()]);
        assert_eq!(step, Step::Wait);
        let sent = host.sent.borrow().last().cloned().unwrap();
        assert_eq!((sent.2.as_deref(), sent.3), (Some("_tool_gating"), 250));
        let gating: Value = serde_json::from_str(&sent.0).unwrap();
        assert_eq!(
            gating["params"]["arguments"],
            json!({"message": "weather alerts"})
        );
        let token = exchange.token().unwrap();
        let settings = Settings {
            config: &s.config,
            mcp: &s.mcp,
            gating: None,
        };
        let step = exchange.on_call(&host, &mut s.cache, &settings, token, answer);
        assert_eq!(step, Step::Answered);
        let names: Vec<String> = host.answer().1["result"]["structuredContent"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        (
            names,
            exchange.header_value().unwrap().to_owned(),
            host.events.borrow().clone(),
        )
    };
    let (plain, _, _) = run(&mut s, verdict(r#"{"structuredContent":{}}"#));
    assert_eq!(plain, ["weather_alerts", "get_weather"]);
    let (names, header, events) = run(
        &mut s,
        verdict(r#"{"structuredContent":{"exclude":["get_weather"],"claim":"send_email"}}"#),
    );
    assert_eq!(names, ["send_email", "weather_alerts"]);
    assert!(
        header.ends_with("gating=excluded:1,claimed:send_email"),
        "{header}"
    );
    assert!(events.contains(&Event::Claimed) && events.contains(&Event::Excluded(1)));
    // Fail-open: no answer, an error, garbage.
    for answer in [
        CallAnswer::default(),
        verdict(r#"{"isError":true,"structuredContent":{"exclude":["weather_alerts"]}}"#),
        CallAnswer {
            status: Some(500),
            ..verdict(r#"{"structuredContent":{"exclude":["weather_alerts"]}}"#)
        },
        sse(&["not json".into()]),
    ] {
        let (names, _, events) = run(&mut s, answer);
        assert_eq!(names, plain);
        assert!(events.contains(&Event::GatingFailed));
    }
}

#[test]
fn without_a_catalog_requests_pass_or_get_an_error() {
    let s = Setup::new(r#"{"mcp":{}}"#);
    for answer in [
        CallAnswer::default(),
        CallAnswer {
            status: Some(404),
            content_type: "application/json".into(),
            body: b"{}".to_vec(),
        },
        CallAnswer {
            status: Some(200),
            content_type: "application/json".into(),
            body: br#"{"jsonrpc":"2.0","id":7400000001,"error":{"code":1,"message":"no"}}"#
                .to_vec(),
        },
        CallAnswer {
            status: Some(200),
            content_type: "text/event-stream".into(),
            body: b"\xff\xfe".to_vec(),
        },
        CallAnswer {
            status: Some(200),
            content_type: "application/json".into(),
            body: br#"{"jsonrpc":"2.0","id":7400000001,"result":{"tools":5}}"#.to_vec(),
        },
    ] {
        for (body, passes) in [
            (LIST.to_owned(), true),
            (call(1, "x", "{}"), true),
            (call(1, "find_tools", r#"{"query":"a"}"#), false),
        ] {
            let host = Mock::default();
            let mut exchange = Exchange::new(Head::default());
            let settings = s.settings();
            let mut cache = CatalogCache::new(1 << 20);
            assert_eq!(
                exchange.on_body(&host, &mut cache, &settings, body.as_bytes()),
                Step::Wait
            );
            let step = exchange.on_call(&host, &mut cache, &settings, 1, answer.clone());
            if passes {
                assert_eq!(step, Step::Pass);
                assert!(host.answered.borrow().is_empty());
            } else {
                assert_eq!(step, Step::Answered);
                let (status, a) = host.answer();
                assert_eq!(status, if answer.status == Some(404) { 404 } else { 200 });
                assert_eq!(a["error"]["code"], -32603);
            }
        }
    }
    // A host that cannot send: the same.
    let host = Mock {
        refuse: true,
        ..Mock::default()
    };
    let mut exchange = Exchange::new(Head::default());
    let settings = s.settings();
    assert_eq!(
        exchange.on_body(&host, &mut CatalogCache::new(1), &settings, LIST.as_bytes()),
        Step::Pass
    );
}

#[test]
fn everything_else_passes_untouched() {
    let s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
        "not json",
        "",
    ] {
        let mut exchange = Exchange::new(Head::default());
        let settings = s.settings();
        assert_eq!(
            exchange.on_body(&host, &mut CatalogCache::new(1), &settings, body.as_bytes()),
            Step::Pass,
            "{body}"
        );
    }
    assert!(host.sent.borrow().is_empty());
}

#[test]
fn answers_to_unknown_tokens_are_ignored() {
    let s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    let mut exchange = Exchange::new(Head::default());
    let settings = s.settings();
    let mut cache = CatalogCache::new(1 << 20);
    assert_eq!(
        exchange.on_body(&host, &mut cache, &settings, LIST.as_bytes()),
        Step::Wait
    );
    assert_eq!(
        exchange.on_call(&host, &mut cache, &settings, 99, CallAnswer::default()),
        Step::Wait
    );
    assert!(host.answered.borrow().is_empty());
}

impl Setup {
    /// `tools/list` answered from one page of `tools` with the caching hints `extra`.
    fn list_once(&mut self, host: &Mock, head: Head, tools: &[String], extra: &str) -> Value {
        let mut exchange = Exchange::new(head);
        let settings = Settings {
            config: &self.config,
            mcp: &self.mcp,
            gating: Some(&self.rules).filter(|r| !r.is_empty()),
        };
        exchange.on_body(host, &mut self.cache, &settings, LIST.as_bytes());
        let answer = list_answer("7400000001", tools, None, extra);
        assert_eq!(
            exchange.on_call(host, &mut self.cache, &settings, 1, answer),
            Step::Answered
        );
        host.answer().1
    }
}

#[test]
fn ttl_zero_is_never_cached_and_names_stay_stable() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let head = Head {
        revision: MODERN_REVISION.into(),
        ..Head::default()
    };
    let answer = s.list_once(
        &Mock::default(),
        head,
        &catalog_tools(),
        r#","ttlMs":0,"cacheScope":"public""#,
    );
    assert!(s.cache.is_empty());
    let result = &answer["result"];
    assert_eq!(
        (result["ttlMs"].as_u64(), result["cacheScope"].as_str()),
        (Some(0), Some("public"))
    );
}

#[test]
fn resources_list_adds_the_capabilities_and_read_answers_it() {
    let s = Setup::new(r#"{"mcp":{}}"#);
    let settings = s.settings();
    let list = r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#;
    for (answer, count) in [
        (
            CallAnswer {
                status: Some(200),
                content_type: "application/json".into(),
                body: br#"{"jsonrpc":"2.0","id":4,"result":{"resources":[{"uri":"file:///a","name":"a"}]}}"#
                    .to_vec(),
            },
            2,
        ),
        (
            CallAnswer {
                status: Some(404),
                content_type: "application/json".into(),
                body: br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found"}}"#
                    .to_vec(),
            },
            1,
        ),
        (CallAnswer::default(), 1),
    ] {
        let host = Mock::default();
        let mut exchange = Exchange::new(Head::default());
        let mut cache = CatalogCache::new(1);
        assert_eq!(exchange.on_body(&host, &mut cache, &settings, list.as_bytes()), Step::Wait);
        assert_eq!(host.sent.borrow()[0].0, list, "the client's request, as it was");
        assert_eq!(exchange.on_call(&host, &mut cache, &settings, 1, answer), Step::Answered);
        let (status, answer) = host.answer();
        let resources = answer["result"]["resources"].as_array().unwrap();
        assert_eq!((status, resources.len()), (200, count));
        assert_eq!(resources[count - 1]["uri"], CAPABILITIES_URI);
    }
    // Later pages are the server's alone.
    let host = Mock::default();
    let page = r#"{"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":"2"}}"#;
    let step = Exchange::new(Head::default()).on_body(
        &host,
        &mut CatalogCache::new(1),
        &settings,
        page.as_bytes(),
    );
    assert_eq!(step, Step::Pass);
    let read = r#"{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"toolsift://capabilities"}}"#;
    let mut exchange = Exchange::new(Head {
        revision: MODERN_REVISION.into(),
        ..Head::default()
    });
    assert_eq!(
        exchange.on_body(&host, &mut CatalogCache::new(1), &settings, read.as_bytes()),
        Step::Answered
    );
    let contents = &host.answer().1["result"]["contents"][0];
    let text: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["search"]["backends"], json!(["keyword"]));
    assert!(host.sent.borrow().is_empty());
}

/// A vector for `text`: a hashed bag of its words (texts that share words are near).
fn bag(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; 16];
    for word in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = xxhash_rust::xxh3::xxh3_64(word.as_bytes()) as usize;
        v[h % 16] += 1.0;
    }
    v[0] += 0.01;
    v
}

#[test]
fn hybrid_ranking_embeds_the_catalog_and_fuses_the_channels() {
    let config = Config::from_json(
        br#"{"ranking":"hybrid","embeddings":{"cluster":"e","model":"m","max_batch":3},"mcp":{}}"#,
    )
    .unwrap();
    let embeddings = config.embeddings.clone().unwrap();
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    s.config = config.clone();
    let cache =
        crate::embeddings::VectorCache::new(crate::embeddings::MemoryBytes::default(), 100, "v.");
    let host = Mock {
        vectors: Some((cache, embeddings, config)),
        ..Mock::default()
    };
    let body = call(
        2,
        "find_tools",
        r#"{"query":"storm warnings for my region"}"#,
    );
    let answer_embeddings = |inputs: &[String]| {
        CallAnswer {
        status: Some(200),
        content_type: "application/json".into(),
        body: json!({"data": inputs.iter().enumerate().map(|(i, t)| json!({"index": i, "embedding": bag(t)})).collect::<Vec<_>>()})
            .to_string()
            .into_bytes(),
    }
    };
    // Five tools, three per call: the first search embeds the query and three tools, and goes
    // by keyword; the second embeds the rest and is fused.
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let (mut exchange, step) = s.run(&host, "2025-11-25", &body, &[catalog_tools()]);
        if step == Step::Wait {
            let inputs = host.embedded.borrow().last().cloned().unwrap();
            let token = exchange.token().unwrap();
            let settings = Settings {
                config: &s.config,
                mcp: &s.mcp,
                gating: None,
            };
            let step = exchange.on_call(
                &host,
                &mut s.cache,
                &settings,
                token,
                answer_embeddings(&inputs),
            );
            assert_eq!(step, Step::Answered);
        }
        let found = host.answer().1["result"]["structuredContent"]["tools"].clone();
        rounds.push(found);
    }
    let calls = host.embedded.borrow().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].len(), 4, "the query and max_batch tools");
    assert_eq!(calls[1].len(), 2, "the last two tools");
    assert_eq!(
        rounds[0][0]["matched"],
        json!(["bm25"]),
        "keyword while incomplete"
    );
    let matched = rounds[1][0]["matched"].as_array().unwrap();
    assert!(matched.contains(&json!("vector")), "{matched:?}");
    assert_eq!(rounds[1], rounds[2], "the third search needs no call");
    assert!(host.events.borrow().contains(&Event::RankedHybrid));
    // A failing service: by keyword.
    let (mut exchange, _) = s.run(
        &host,
        "2025-11-25",
        &call(3, "find_tools", r#"{"query":"new words entirely"}"#),
        &[],
    );
    let token = exchange.token().unwrap();
    let settings = Settings {
        config: &s.config,
        mcp: &s.mcp,
        gating: None,
    };
    let step = exchange.on_call(
        &host,
        &mut s.cache,
        &settings,
        token,
        CallAnswer {
            status: Some(503),
            ..CallAnswer::default()
        },
    );
    assert_eq!(step, Step::Answered);
    assert!(
        host.events
            .borrow()
            .contains(&Event::Fallback(Fallback::Status))
    );
}

// Access rules ------------------------------------------------------------------------------

use crate::access::Caller;

/// Team `a` may use the weather tools and list files; team `b` may mail and file issues, but
/// only to `*@example.com`; every caller is kept from destructive tools and from `*delete*`.
const ACCESS: &str = r#"{
    "identity": [{"header": "x-team"}],
    "default": "deny",
    "rules": [
        {"when": ["a"], "allow": ["get_*", "weather_*", "list_*"]},
        {"when": ["b"], "allow": ["send_*", "create_*"], "arguments": {"send_email": {"to": ["*@example.com"]}}},
        {"when": ["*"], "deny": ["*delete*"], "deny_annotations": ["destructiveHint"]}
    ],
    "denied": "DENIED"
}"#;

const REVISIONS: [&str; 2] = ["2025-11-25", MODERN_REVISION];

/// The catalog with two tools team `a` may not have whatever its rules allow: a `*delete*` one
/// and a destructive one.
fn governed_tools() -> Vec<String> {
    let mut tools = catalog_tools();
    tools.push(tool("get_then_delete", "Read a record, then delete it"));
    tools.push(
        r#"{"name":"get_wiped","description":"Wipe the weather cache","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}"#
            .to_owned(),
    );
    tools
}

/// The configuration with [`ACCESS`] (`denied`: hidden or refused).
fn access_config(denied: &str) -> String {
    let access = ACCESS.replace("DENIED", denied);
    format!(
        r#"{{"always_include":["get_weather","send_email","get_wiped"],"mcp":{{}},"access":{access}}}"#
    )
}

fn setup(denied: &str) -> Setup {
    Setup::new(&access_config(denied))
}

impl Setup {
    /// The headers of a request from a caller with `values` (`x-team`), on `revision`.
    fn head(&self, revision: &str, values: &[&str]) -> Head {
        let policy = Rc::new(self.config.policy().unwrap().unwrap());
        let caller = Caller::new(values.iter().map(|v| (*v).to_owned()));
        Head {
            server: "mcp|localhost".into(),
            revision: revision.into(),
            auth: auth_context([&b"Bearer shared"[..]], Some(&caller)),
            grant: Some(policy.grant(&caller)),
            routing: RoutingHeaders::default(),
            session: None,
        }
    }

    fn run_as(
        &mut self,
        host: &Mock,
        revision: &str,
        values: &[&str],
        body: &str,
    ) -> (Exchange, Step) {
        let head = self.head(revision, values);
        self.run_head(host, head, body, &[governed_tools()])
    }
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn only_lists_sent(host: &Mock) -> bool {
    host.sent.borrow().iter().all(|c| c.1 == "tools/list")
}

#[test]
fn a_caller_lists_only_the_always_include_tools_its_rules_allow() {
    for revision in REVISIONS {
        for denied in ["hidden", "refused"] {
            let mut s = setup(denied);
            let host = Mock::default();
            let (exchange, step) = s.run_as(&host, revision, &["a"], LIST);
            assert_eq!(step, Step::Answered);
            let (_, answer) = host.answer();
            let tools = &answer["result"]["tools"];
            // get_wiped is pinned but destructive; send_email is pinned but team b's.
            assert_eq!(names(tools), ["find_tools", "call_tool", "get_weather"]);
            assert!(
                tools[0]["description"]
                    .as_str()
                    .unwrap()
                    .starts_with("Search this server's 3 tools"),
                "only what the caller can find is counted: {}",
                tools[0]["description"]
            );
            assert_eq!(
                exchange.header_value(),
                Some("mcp=tools/list kept=1 total=7 denied=4")
            );
            assert!(
                host.events
                    .borrow()
                    .contains(&Event::Denied(Surface::McpTools, 4))
            );
            let (_, step) = s.run_as(&host, revision, &["b"], LIST);
            assert_eq!(step, Step::Answered);
            let (_, answer) = host.answer();
            assert_eq!(
                names(&answer["result"]["tools"]),
                ["find_tools", "call_tool", "send_email"]
            );
        }
    }
}

#[test]
fn a_list_the_server_calls_public_is_answered_private_under_access_rules() {
    let mut s = setup("hidden");
    let head = s.head(MODERN_REVISION, &["a"]);
    let answer = s.list_once(
        &Mock::default(),
        head,
        &governed_tools(),
        r#","ttlMs":60000,"cacheScope":"public""#,
    );
    assert_eq!(answer["result"]["cacheScope"], "private");
}

#[test]
fn find_tools_finds_only_allowed_tools_before_the_limit() {
    for revision in REVISIONS {
        let mut s = setup("hidden");
        let host = Mock::default();
        let body = call(
            2,
            "find_tools",
            r#"{"query":"what's the current weather in Paris","limit":1}"#,
        );
        // Without rules for it, get_weather would come first. It is pinned: listed already.
        let (exchange, _) = s.run_as(&host, revision, &["a"], &body);
        let found = &host.answer().1["result"]["structuredContent"]["tools"];
        assert_eq!(names(found), ["get_weather"]);
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools found=get_weather total=7 denied=4 note=listed_already")
        );
        // Team b may have no weather tool: the limit is filled from what it may see, or the
        // search finds nothing; never a weather tool.
        let body = call(3, "find_tools", r#"{"query":"weather","limit":5}"#);
        let (exchange, _) = s.run_as(&host, revision, &["b"], &body);
        let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools found= total=7 denied=5")
        );
        // A search for a denied tool by its own words finds the allowed ones only.
        let body = call(
            4,
            "find_tools",
            r#"{"query":"read a record then delete it"}"#,
        );
        s.run_as(&host, revision, &["a"], &body);
        let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
        assert!(!found.contains(&"get_then_delete".to_owned()), "{found:?}");
        assert!(only_lists_sent(&host));
    }
}

/// Every way to call `name` with `arguments` that the gateway sees: directly, and with
/// `call_tool`.
fn calls_of(name: &str, arguments: &str) -> [String; 2] {
    [
        call(5, name, arguments),
        call(
            5,
            "call_tool",
            &format!(r#"{{"name":"{name}","arguments":{arguments}}}"#),
        ),
    ]
}

#[test]
fn a_denied_call_hidden_is_answered_as_an_unknown_tool_and_never_reaches_the_server() {
    for revision in REVISIONS {
        let mut s = setup("hidden");
        // What a tool the server never listed gets.
        let host = Mock::default();
        s.run_as(&host, revision, &["a"], &call(5, "no_such_tool", "{}"));
        let (unknown_status, unknown) = host.answer();
        let unknown_message = unknown["error"]["message"].as_str().unwrap().to_owned();
        for (name, arguments) in [
            ("send_email", r#"{"to":"a@example.com"}"#),
            ("get_then_delete", "{}"),
            ("get_wiped", "{}"),
        ] {
            for body in calls_of(name, arguments) {
                let host = Mock::default();
                let (exchange, step) = s.run_as(&host, revision, &["a"], &body);
                assert_eq!(step, Step::Answered, "{body}");
                assert!(only_lists_sent(&host), "{body}");
                let (status, answer) = host.answer();
                assert_eq!(status, unknown_status);
                assert_eq!(answer["error"]["code"], -32602);
                assert_eq!(
                    answer["error"]["message"].as_str().unwrap(),
                    unknown_message.replace("no_such_tool", name)
                );
                assert_eq!(
                    exchange.header_value().unwrap(),
                    format!("mcp=refused tool={name} reason=access")
                );
                let events = host.events.borrow();
                assert!(events.contains(&Event::Denied(Surface::McpCall, 1)));
                assert!(!events.contains(&Event::Unknown), "not counted as unknown");
            }
        }
    }
}

#[test]
fn a_denied_call_refused_says_why() {
    for (revision, status) in [("2025-11-25", 200), (MODERN_REVISION, 403)] {
        let mut s = setup("refused");
        for (name, why) in [
            ("send_email", "not allowed for this caller"),
            ("get_then_delete", "denied by access rule 2 (`*delete*`)"),
            (
                "get_wiped",
                "access rule 2 denies tools annotated destructiveHint",
            ),
        ] {
            for body in calls_of(name, "{}") {
                let host = Mock::default();
                let (exchange, step) = s.run_as(&host, revision, &["a"], &body);
                assert_eq!(step, Step::Answered);
                assert!(only_lists_sent(&host), "{body}");
                let (got, answer) = host.answer();
                assert_eq!(got, status);
                assert_eq!(answer["id"], 5);
                assert_eq!(answer["error"]["code"], -32003);
                assert_eq!(
                    answer["error"]["message"].as_str().unwrap(),
                    format!("toolsift: access denied: tool `{name}`: {why}")
                );
                assert_eq!(
                    exchange.header_value().unwrap(),
                    format!("mcp=refused tool={name} reason=access")
                );
            }
        }
        // A tool the server never listed is still just unknown.
        let host = Mock::default();
        s.run_as(&host, revision, &["a"], &call(5, "no_such_tool", "{}"));
        assert_eq!(host.answer().1["error"]["code"], -32602);
    }
}

#[test]
fn arguments_the_rules_refuse_never_reach_the_server() {
    for revision in REVISIONS {
        for denied in ["hidden", "refused"] {
            let mut s = setup(denied);
            for body in calls_of("send_email", r#"{"to":"boss@evil.test","body":"hi"}"#) {
                let host = Mock::default();
                let (exchange, step) = s.run_as(&host, revision, &["b"], &body);
                assert_eq!(step, Step::Answered);
                assert!(only_lists_sent(&host), "{body}");
                let (status, answer) = host.answer();
                let message = answer["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(r#"`to` may not be "boss@evil.test""#),
                    "{message}"
                );
                match denied {
                    "hidden" => {
                        assert_eq!(answer["error"]["code"], -32602);
                        assert!(!message.contains("rule"), "{message}");
                        assert_eq!(
                            status,
                            if revision == MODERN_REVISION {
                                400
                            } else {
                                200
                            }
                        );
                    }
                    _ => {
                        assert_eq!(answer["error"]["code"], -32003);
                        assert_eq!(
                            status,
                            if revision == MODERN_REVISION {
                                403
                            } else {
                                200
                            }
                        );
                    }
                }
                assert_eq!(
                    exchange.header_value(),
                    Some("mcp=refused tool=send_email reason=arguments")
                );
            }
            // Allowed values go through: directly as the client sent them, with call_tool as
            // the gateway's own call.
            let [direct, meta] = calls_of("send_email", r#"{"to":"boss@example.com"}"#);
            let host = Mock::default();
            let (_, step) = s.run_as(&host, revision, &["b"], &direct);
            assert_eq!(step, Step::Pass);
            let (_, step) = s.run_as(&host, revision, &["b"], &meta);
            assert_eq!(step, Step::Wait);
            assert_eq!(
                host.last_sent()["params"]["arguments"],
                json!({"to": "boss@example.com"})
            );
            // What is checked is what would be sent: a repeated member is read as the server
            // reads it (the last one).
            let repeated = call(
                6,
                "send_email",
                r#"{"to":"boss@example.com","to":"boss@evil.test"}"#,
            );
            let (_, step) = s.run_as(&host, revision, &["b"], &repeated);
            assert_eq!(step, Step::Answered);
        }
    }
}

#[test]
fn gating_claims_and_the_gating_tool_follow_the_rules() {
    let gating = r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}"#;
    let mut tools = governed_tools();
    tools.push(gating.to_owned());
    let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
    // Team a may call the gating tool; its claim of a tool team a may not see is dropped.
    let config = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],"rules":[
        {"when":["a"],"allow":["weather_*","get_*","_tool_gating"]},
        {"when":["b"],"allow":["weather_*","get_*"]}]}}"#;
    let mut s = Setup::new(config);
    let host = Mock::default();
    let head = s.head("2025-11-25", &["a"]);
    let (mut exchange, step) = s.run_head(&host, head, &body, &[tools.clone()]);
    assert_eq!(step, Step::Wait, "the gating tool is called");
    let verdict = sse(&[
        r#"{"jsonrpc":"2.0","id":7400000999,"result":{"structuredContent":{"claim":"send_email"}}}"#
            .to_owned(),
    ]);
    let token = exchange.token().unwrap();
    let settings = Settings {
        config: &s.config,
        mcp: &s.mcp,
        gating: None,
    };
    assert_eq!(
        exchange.on_call(&host, &mut s.cache, &settings, token, verdict),
        Step::Answered
    );
    let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
    assert_eq!(found[0], "weather_alerts", "{found:?}");
    assert!(!found.contains(&"send_email".to_owned()));
    assert!(!exchange.header_value().unwrap().contains("claimed"));
    // Team b may not call it: the search goes on without it.
    let host = Mock::default();
    let head = s.head("2025-11-25", &["b"]);
    let (_, step) = s.run_head(&host, head, &body, &[tools]);
    assert_eq!(step, Step::Answered);
    assert!(only_lists_sent(&host), "no gating call");
    let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
    assert_eq!(found[0], "weather_alerts", "{found:?}");
}

#[test]
fn without_the_catalog_nothing_passes_ungoverned() {
    let failures = [
        CallAnswer::default(),
        CallAnswer {
            status: Some(503),
            content_type: "text/plain".into(),
            body: b"upstream connect error".to_vec(),
        },
        list_answer("7400000001", &["{".to_owned()], None, ""),
    ];
    let annotated = access_config("hidden");
    for revision in REVISIONS {
        for failure in &failures {
            // Names-only rules: a direct call is decided by its name.
            let names_only = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],
                "rules":[{"when":["a"],"allow":["get_*"]}],"denied":"refused"}}"#;
            for (config, body, expect) in [
                (names_only, LIST.to_owned(), "mcp=refused reason=no_catalog"),
                (
                    names_only,
                    call(1, "get_weather", "{}"),
                    "mcp=call tool=get_weather reason=no_catalog",
                ),
                (
                    names_only,
                    call(1, "send_email", "{}"),
                    "mcp=refused tool=send_email reason=access",
                ),
                // A rule reads annotations the gateway cannot see: refused.
                (
                    annotated.as_str(),
                    call(1, "get_weather", "{}"),
                    "mcp=refused tool=get_weather reason=no_catalog",
                ),
                (
                    names_only,
                    call(1, "call_tool", r#"{"name":"get_weather"}"#),
                    "mcp=pass reason=no_catalog",
                ),
            ] {
                let s = Setup::new(config);
                let host = Mock::default();
                let mut exchange = Exchange::new(s.head(revision, &["a"]));
                let settings = s.settings();
                let mut cache = CatalogCache::new(1 << 20);
                assert_eq!(
                    exchange.on_body(&host, &mut cache, &settings, body.as_bytes()),
                    Step::Wait
                );
                let step = exchange.on_call(&host, &mut cache, &settings, 1, failure.clone());
                assert_eq!(exchange.header_value(), Some(expect), "{body}");
                if expect.starts_with("mcp=call") {
                    assert_eq!(step, Step::Pass, "{body}");
                    assert!(host.answered.borrow().is_empty());
                } else {
                    assert_eq!(step, Step::Answered, "{body}");
                    assert!(host.sent.borrow().len() == 1 && only_lists_sent(&host));
                }
                if body == LIST {
                    let (_, answer) = host.answer();
                    assert_eq!(answer["error"]["code"], -32603, "never the server's list");
                    assert!(
                        host.events
                            .borrow()
                            .contains(&Event::Denied(Surface::McpRequest, 1))
                    );
                }
            }
        }
    }
}

#[test]
fn what_the_gateway_cannot_check_is_refused_under_access_rules() {
    for revision in REVISIONS {
        let s = setup("hidden");
        for (body, reason) in [
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
                "batch",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_email"}}]"#,
                "batch",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","name":"send_email"}}"#,
                "unreadable",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"send_email"}}"#,
                "unreadable",
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"send_email"}}"#,
                "unreadable",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_email","arguments":[]}}"#,
                "unreadable",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
                "unreadable",
            ),
            ("\u{feff}{}", "unreadable"),
        ] {
            let host = Mock::default();
            let mut exchange = Exchange::new(s.head(revision, &["a"]));
            let settings = s.settings();
            let step =
                exchange.on_body(&host, &mut CatalogCache::new(1), &settings, body.as_bytes());
            assert_eq!(step, Step::Answered, "{body}");
            assert!(host.sent.borrow().is_empty());
            let (status, answer) = host.answer();
            assert_eq!(
                (status, &answer["error"]["code"]),
                (400, &json!(-32600)),
                "{body}"
            );
            assert_eq!(
                exchange.header_value().unwrap(),
                format!("mcp=refused reason={reason}")
            );
            assert!(
                host.events
                    .borrow()
                    .contains(&Event::Denied(Surface::McpRequest, 1))
            );
        }
        // Notifications, responses and other methods cannot touch a tool: they pass.
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"s1","result":{"roots":[]}}"#,
            r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#,
        ] {
            let host = Mock::default();
            let mut exchange = Exchange::new(s.head(revision, &["a"]));
            let settings = s.settings();
            let step =
                exchange.on_body(&host, &mut CatalogCache::new(1), &settings, body.as_bytes());
            assert_eq!(step, Step::Pass, "{body}");
        }
        // Too large to read: refused, never passed unread.
        let host = Mock::default();
        let mut exchange = Exchange::new(s.head(revision, &["a"]));
        assert_eq!(exchange.too_large(&host), Step::Answered);
        assert_eq!(host.answer().0, 413);
        assert_eq!(
            Exchange::new(Head::default()).too_large(&host),
            Step::Pass,
            "without access rules it passes as before"
        );
    }
}

#[test]
fn no_identity_is_refused_at_the_headers() {
    let s = setup("hidden");
    for method in ["POST", "GET", "DELETE"] {
        let host = Mock::default();
        let mut exchange = Exchange::new(s.head(MODERN_REVISION, &[]));
        assert_eq!(exchange.on_headers(&host, method), Step::Answered);
        let (status, answer) = host.answer();
        assert_eq!(status, 403);
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], -32003);
        assert_eq!(
            answer["error"]["message"],
            "toolsift: access denied: the request carries no caller identity"
        );
        assert_eq!(
            exchange.header_value(),
            Some("mcp=refused reason=no_identity")
        );
        assert_eq!(
            *host.events.borrow(),
            [Event::Denied(Surface::McpRequest, 1)]
        );
    }
    let host = Mock::default();
    for (head, method) in [
        (s.head(MODERN_REVISION, &[]), "OPTIONS"),
        (s.head(MODERN_REVISION, &["a"]), "POST"),
        // A caller with an identity no rule names is identified: its rules decide.
        (s.head(MODERN_REVISION, &["nobody"]), "GET"),
        (Head::default(), "POST"),
    ] {
        assert_eq!(Exchange::new(head).on_headers(&host, method), Step::Pass);
    }
    assert!(host.answered.borrow().is_empty());
}

#[test]
fn a_caller_allowed_no_tool_is_told_so() {
    for revision in REVISIONS {
        let mut s = setup("hidden");
        for body in [
            LIST.to_owned(),
            call(2, "find_tools", r#"{"query":"weather"}"#),
        ] {
            let host = Mock::default();
            let (exchange, step) = s.run_as(&host, revision, &["nobody"], &body);
            assert_eq!(step, Step::Answered);
            let (status, answer) = host.answer();
            assert_eq!((status, &answer["error"]["code"]), (403, &json!(-32003)));
            assert_eq!(
                exchange.header_value(),
                Some("mcp=refused reason=nothing_allowed")
            );
        }
    }
}

#[test]
fn tenants_never_share_what_they_may_not_see() {
    let mut s = setup("hidden");
    // Contexts: the same credentials with other identities differ; without access rules, the
    // identity plays no part.
    let a = Caller::new(["a".to_owned()]);
    let b = Caller::new(["b".to_owned()]);
    let token = [&b"Bearer shared"[..]];
    assert_ne!(auth_context(token, Some(&a)), auth_context(token, Some(&b)));
    assert_ne!(
        auth_context([], Some(&Caller::anonymous())),
        0,
        "under access rules, even no identity is a context"
    );
    assert_eq!(auth_context([], None), 0);
    assert_ne!(
        auth_context(token, None),
        auth_context([&b"Bearer other"[..]], None)
    );
    // A list the server says nothing about is private: team b's request fetches its own, with
    // its own headers, although team a's is cached for the same credentials.
    let host = Mock::default();
    s.run_as(&host, MODERN_REVISION, &["a"], LIST);
    assert_eq!(host.sent.borrow().len(), 1);
    s.run_as(&host, MODERN_REVISION, &["b"], LIST);
    assert_eq!(host.sent.borrow().len(), 2, "b did not get a's catalog");
    s.run_as(&host, MODERN_REVISION, &["a"], LIST);
    assert_eq!(host.sent.borrow().len(), 2, "a's is still cached");
    // A public list is shared; what each caller gets depends on its own rules only, whoever
    // came first (the catalog remembers the last grant's decisions).
    let mut shared = setup("hidden");
    let public = |id: &str| {
        list_answer(
            id,
            &governed_tools(),
            None,
            r#","ttlMs":60000,"cacheScope":"public""#,
        )
    };
    let find = call(
        3,
        "find_tools",
        r#"{"query":"send an email or get the weather"}"#,
    );
    let mut seen = Vec::new();
    for team in ["a", "b", "a", "b"] {
        let host = Mock::default();
        let mut exchange = Exchange::new(shared.head(MODERN_REVISION, &[team]));
        let settings = Settings {
            config: &shared.config,
            mcp: &shared.mcp,
            gating: None,
        };
        let mut step = exchange.on_body(&host, &mut shared.cache, &settings, find.as_bytes());
        if step == Step::Wait {
            step = exchange.on_call(&host, &mut shared.cache, &settings, 1, public("7400000001"));
        }
        assert_eq!(step, Step::Answered);
        seen.push(names(
            &host.answer().1["result"]["structuredContent"]["tools"],
        ));
    }
    assert_eq!(seen[0], ["get_weather", "weather_alerts"]);
    assert_eq!(seen[1], ["send_email"]);
    assert_eq!(seen[0], seen[2]);
    assert_eq!(seen[1], seen[3]);
    assert_eq!(shared.cache.len(), 1, "one shared catalog");
}

#[test]
fn a_server_tool_the_caller_may_not_see_takes_no_meta_tool_name() {
    let mut tools = governed_tools();
    tools.push(tool("find_tools", "the server's own search"));
    let config = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],"default":"allow",
        "rules":[{"when":["b"],"deny":["find_tools"]}]}}"#;
    let mut s = Setup::new(config);
    let host = Mock::default();
    let head = s.head("2025-11-25", &["a"]);
    s.run_head(&host, head, LIST, &[tools.clone()]);
    assert_eq!(
        host.answer().1["result"]["tools"][0]["name"],
        "find_tools_2"
    );
    // Team b never learns the server has a find_tools: its meta-tool takes the name.
    let head = s.head("2025-11-25", &["b"]);
    s.run_head(&host, head, LIST, &[tools.clone()]);
    assert_eq!(host.answer().1["result"]["tools"][0]["name"], "find_tools");
    let head = s.head("2025-11-25", &["b"]);
    let (_, step) = s.run_head(
        &host,
        head,
        &call(4, "find_tools", r#"{"query":"email"}"#),
        &[tools],
    );
    assert_eq!(step, Step::Answered);
    assert_eq!(
        host.answer().1["result"]["structuredContent"]["tools"][0]["name"],
        "send_email"
    );
    let head = s.head("2025-11-25", &["a"]);
    let (_, step) = s.run_head(&host, head, &call(5, "find_tools", r#"{"query":"x"}"#), &[]);
    assert_eq!(step, Step::Pass, "team a calls the server's own");
}

#[test]
fn a_request_that_cannot_be_checked_fails_closed_under_access_rules() {
    let s = setup("hidden");
    let mut exchange = Exchange::new(s.head(MODERN_REVISION, &["a"]));
    let answer = exchange.unchecked().unwrap();
    assert_eq!((answer.status, answer.code), (500, -32603));
    assert_eq!(exchange.header_value(), Some("mcp=refused reason=internal"));
    assert_eq!(Exchange::new(Head::default()).unchecked(), None);
}

/// 2026-07-28: a request whose `Mcp-Method`/`Mcp-Name` disagree with its body gets the
/// server's `HeaderMismatch` (400) from the gateway, whatever the body asked: never an answer
/// meant for the request the headers name, and never a pass to the server around a refusal.
#[test]
fn routing_headers_that_disagree_with_the_body_are_refused() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    let routing = |method: &str, name: Option<&str>| Head {
        server: "mcp|localhost".into(),
        revision: MODERN_REVISION.into(),
        routing: RoutingHeaders {
            method: Some(method.into()),
            name: name.map(Into::into),
            params: false,
        },
        ..Head::default()
    };
    let unknown = call(3, "drop_all_tables", "{}");
    let cases = [
        (routing("tools/list", None), unknown.as_str()),
        (routing("tools/call", Some("list_files")), unknown.as_str()),
        (routing("tools/call", Some("find_tools")), LIST),
    ];
    for (head, body) in cases {
        let (exchange, step) = s.run_head(&host, head, body, &[catalog_tools()]);
        assert_eq!(step, Step::Answered, "{body}");
        let (status, answer) = host.answer();
        assert_eq!(status, 400);
        assert_eq!(answer["error"]["code"], HEADER_MISMATCH);
        assert_eq!(
            exchange.header_value(),
            Some("mcp=refused reason=header_mismatch")
        );
    }
    assert!(host.sent.borrow().is_empty(), "decided before the catalog");
    // Headers that agree: the gateway answers as usual.
    let (_, step) = s.run_head(&host, routing("tools/list", None), LIST, &[catalog_tools()]);
    assert_eq!(step, Step::Answered);
    assert_eq!(host.answer().0, 200);
}

/// Memory of found tools on MCP routes (`search.memory`): a request of session `name`.
fn in_session(revision: &str, name: Option<&str>) -> Head {
    Head {
        server: "mcp|localhost".into(),
        revision: revision.into(),
        session: name.and_then(|n| crate::search::memory::SessionKey::new(7, "test", n.as_bytes())),
        ..Head::default()
    }
}

const MEMORY: &str = r#"{"always_include":["list_*"],"mcp":{},"search":{"memory":{}}}"#;

fn find(id: u32, query: &str) -> String {
    call(
        id,
        "find_tools",
        &json!({"query": query, "limit": 1}).to_string(),
    )
}

fn structured(host: &Mock) -> Value {
    host.answer().1["result"]["structuredContent"].clone()
}

#[test]
fn a_session_lists_the_tools_it_found_after_the_pinned_ones() {
    for revision in REVISIONS {
        let mut s = Setup::new(MEMORY);
        let host = Mock::default();
        let tools = [catalog_tools()];
        let session = |name| in_session(revision, Some(name));
        s.run_head(&host, session("s1"), &find(2, "weather in Paris"), &tools);
        assert_eq!(names(&structured(&host)["tools"]), ["get_weather"]);
        s.run_head(&host, session("s1"), &find(3, "send an email"), &tools);
        let (exchange, _) = s.run_head(&host, session("s1"), LIST, &tools);
        let listed = &host.answer().1["result"];
        assert_eq!(
            names(&listed["tools"]),
            [
                "find_tools",
                "call_tool",
                "list_files",
                "get_weather",
                "send_email"
            ]
        );
        assert_eq!(
            exchange.header_value(),
            Some("mcp=tools/list kept=1 remembered=2 total=5")
        );
        if revision == MODERN_REVISION {
            // The session's list grows with its searches: never kept, never shared.
            assert_eq!(listed["ttlMs"], 0);
            assert_eq!(listed["cacheScope"], "private");
        }
        // Another session, and a request without one, list only the pinned tools.
        for head in [session("s2"), in_session(revision, None)] {
            s.run_head(&host, head, LIST, &tools);
            assert_eq!(
                names(&host.answer().1["result"]["tools"]),
                ["find_tools", "call_tool", "list_files"]
            );
        }
    }
    // Without `search.memory`, a session finds and lists as before.
    let mut s = Setup::new(r#"{"always_include":["list_*"],"mcp":{}}"#);
    let host = Mock::default();
    let head = || in_session("2025-11-25", Some("s1"));
    s.run_head(
        &host,
        head(),
        &find(2, "weather in Paris"),
        &[catalog_tools()],
    );
    s.run_head(&host, head(), LIST, &[]);
    assert_eq!(names(&host.answer().1["result"]["tools"]).len(), 3);
    assert_eq!(host.store.size(), (0, 0));
}

#[test]
fn a_session_lists_no_tool_its_caller_may_not_see_now() {
    let mut s = Setup::new(
        &access_config("hidden").replace(r#""mcp":{}"#, r#""mcp":{},"search":{"memory":{}}"#),
    );
    let host = Mock::default();
    let key = crate::search::memory::SessionKey::new(7, "test", b"s1");
    let as_team = |s: &Setup, team: &str| Head {
        session: key,
        ..s.head("2025-11-25", &[team])
    };
    let head = as_team(&s, "a");
    s.run_head(
        &host,
        head,
        &find(2, "weather alerts for a region"),
        &[governed_tools()],
    );
    assert_eq!(names(&structured(&host)["tools"]), ["weather_alerts"]);
    let head = as_team(&s, "a");
    s.run_head(&host, head, LIST, &[governed_tools()]);
    assert_eq!(
        names(&host.answer().1["result"]["tools"]),
        ["find_tools", "call_tool", "get_weather", "weather_alerts"]
    );
    // The same session key under rules that hide the tool (in the filter the key holds the
    // caller, so this is a change of rules): it is not listed.
    let head = as_team(&s, "b");
    s.run_head(&host, head, LIST, &[governed_tools()]);
    assert_eq!(
        names(&host.answer().1["result"]["tools"]),
        ["find_tools", "call_tool", "send_email"]
    );
}

#[test]
fn a_repeated_or_redundant_search_is_told_what_the_client_has() {
    let mut s = Setup::new(MEMORY);
    let host = Mock::default();
    let tools = [catalog_tools()];
    let head = || in_session("2025-11-25", Some("s1"));
    s.run_head(&host, head(), &find(2, "weather in Paris"), &tools);
    assert_eq!(names(&structured(&host)["tools"]), ["get_weather"]);
    // The same words (in another case, with a mark): the first answer, without a search.
    let (exchange, _) = s.run_head(&host, head(), &find(3, "Weather in PARIS!"), &tools);
    let answer = structured(&host);
    assert_eq!(names(&answer["tools"]), ["get_weather"]);
    assert_eq!(answer["query"], "Weather in PARIS!");
    assert!(
        answer["note"]
            .as_str()
            .unwrap()
            .starts_with("You searched for this already: call one of them"),
        "{answer}"
    );
    assert_eq!(
        exchange.header_value(),
        Some("mcp=find_tools found=get_weather total=5 note=searched_already")
    );
    // Other words whose tools the session found already.
    let (exchange, _) = s.run_head(
        &host,
        head(),
        &find(4, "current weather for a city"),
        &tools,
    );
    let answer = structured(&host);
    assert_eq!(names(&answer["tools"]), ["get_weather"]);
    assert!(answer["note"].as_str().unwrap().starts_with(LISTED_ALREADY));
    assert!(answer["tools"][0].get("inputSchema").is_none());
    assert_eq!(
        exchange.header_value(),
        Some("mcp=find_tools found=get_weather total=5 note=listed_already")
    );
    // Without a session, only the stateless part: a pinned tool is listed already.
    let (_, _) = s.run_head(
        &host,
        in_session("2025-11-25", None),
        &find(5, "list the files in a directory"),
        &tools,
    );
    let answer = structured(&host);
    assert_eq!(names(&answer["tools"]), ["list_files"]);
    assert!(answer["note"].as_str().unwrap().starts_with(LISTED_ALREADY));
    s.run_head(
        &host,
        in_session("2025-11-25", None),
        &find(6, "weather in Paris"),
        &tools,
    );
    assert!(structured(&host)["tools"][0].get("inputSchema").is_some());
}

#[test]
fn a_search_storm_ends_with_an_error_until_a_real_tool_is_called() {
    let mut s = Setup::new(r#"{"mcp":{},"search":{"max_searches":2,"memory":{}}}"#);
    let host = Mock::default();
    let tools = [catalog_tools()];
    let head = || in_session("2025-11-25", Some("s1"));
    s.run_head(&host, head(), &find(2, "weather in Paris"), &tools);
    s.run_head(&host, head(), &find(3, "weather in Paris"), &tools);
    let (exchange, _) = s.run_head(&host, head(), &find(4, "send an email"), &tools);
    let (status, answer) = host.answer();
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["isError"], true);
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "The tool search stopped after 2 searches: call one of the tools it found, or answer."
    );
    assert_eq!(
        exchange.header_value(),
        Some("mcp=find_tools stopped=max_searches")
    );
    assert!(host.events.borrow().contains(&Event::SearchStorm));
    // Another session searches on.
    s.run_head(
        &host,
        in_session("2025-11-25", Some("s2")),
        &find(5, "send an email"),
        &tools,
    );
    assert_eq!(names(&structured(&host)["tools"]), ["send_email"]);
    // A call of a real tool ends the loop: the session searches again.
    let (_, step) = s.run_head(&host, head(), &call(6, "get_weather", "{}"), &tools);
    assert_eq!(step, Step::Pass);
    s.run_head(&host, head(), &find(7, "send an email"), &tools);
    assert_eq!(names(&structured(&host)["tools"]), ["send_email"]);
    // As does call_tool.
    s.run_head(&host, head(), &find(8, "create an issue"), &tools);
    s.run_head(&host, head(), &find(9, "list files"), &tools);
    assert_eq!(host.answer().1["result"]["isError"], true);
    let sent = host.sent.borrow().len();
    s.run_head(
        &host,
        head(),
        &call(10, "call_tool", r#"{"name":"list_files","arguments":{}}"#),
        &tools,
    );
    assert_eq!(host.sent.borrow().len(), sent + 1, "the call went out");
    s.run_head(&host, head(), &find(11, "list files"), &tools);
    assert_eq!(names(&structured(&host)["tools"]), ["list_files"]);
}

/// 2026-07-28: the calls the gateway sends itself carry the `Mcp-Param-*` headers its schema
/// declares (the server refuses a call without them); a direct call that comes without them
/// (its client never saw the tool listed) is sent by the gateway, with them; one that has them,
/// and a 2025-11-25 call, pass as the client sent them.
#[test]
fn calls_carry_the_param_headers_the_tools_schema_declares() {
    let regional = r#"{"name":"query_region","description":"Query a regional database","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"sql":{"type":"string"}}}}"#;
    let pages = [vec![regional.to_owned(), tool("get_weather", "Weather")]];
    let head = |name: &str, params: bool| Head {
        server: "mcp|localhost".into(),
        revision: MODERN_REVISION.into(),
        routing: RoutingHeaders {
            method: Some("tools/call".into()),
            name: Some(name.into()),
            params,
        },
        ..Head::default()
    };
    let expected = vec![("mcp-param-region".to_owned(), "eu-west".to_owned())];
    let mut s = Setup::new(r#"{"mcp":{}}"#);

    // call_tool: the real call, with the header.
    let host = Mock::default();
    let meta = call(
        4,
        "call_tool",
        r#"{"name":"query_region","arguments":{"region":"eu-west","sql":"select 1"}}"#,
    );
    let (exchange, step) = s.run_head(&host, head("call_tool", false), &meta, &pages);
    assert_eq!(step, Step::Wait);
    assert_eq!(host.last_sent()["params"]["name"], "query_region");
    assert_eq!(host.params.borrow().last(), Some(&expected));
    assert_eq!(
        exchange.header_value(),
        Some("mcp=call_tool tool=query_region")
    );

    // A direct call without the header: sent by the gateway, with it, under the client's id.
    let host = Mock::default();
    let direct = call(
        5,
        "query_region",
        r#"{"region":"eu-west","sql":"select 1"}"#,
    );
    let (exchange, step) = s.run_head(&host, head("query_region", false), &direct, &pages);
    assert_eq!(step, Step::Wait);
    assert_eq!(host.last_sent()["id"], 5);
    assert_eq!(host.params.borrow().last(), Some(&expected));
    assert_eq!(
        exchange.header_value(),
        Some("mcp=call tool=query_region sent=gateway")
    );

    // A direct call with it, one whose declared argument is absent, a tool that declares
    // nothing, and a 2025-11-25 call: passed on.
    let passes = [
        (head("query_region", true), direct.clone()),
        (
            head("query_region", false),
            call(6, "query_region", r#"{"sql":"select 1"}"#),
        ),
        (
            head("get_weather", false),
            call(7, "get_weather", r#"{"q":"Oslo"}"#),
        ),
        (
            Head {
                server: "mcp|localhost".into(),
                revision: "2025-11-25".into(),
                ..Head::default()
            },
            direct.clone(),
        ),
    ];
    for (head, body) in passes {
        let host = Mock::default();
        let (_, step) = s.run_head(&host, head, &body, &pages);
        assert_eq!(step, Step::Pass, "{body}");
        assert!(only_lists_sent(&host), "{body}");
    }
}

/// A client's whole find-then-call exchange, event by event: `find_tools` fetches the catalog
/// and answers with the tool; `call_tool` of what it found is the real call, from the catalog
/// cached by the first, and the server's answer reaches the client as it was.
#[test]
fn find_tools_then_call_tool_of_what_it_found() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    let find = call(1, "find_tools", r#"{"query":"weather in Paris","limit":1}"#);
    let (_, step) = s.run(&host, MODERN_REVISION, &find, &[catalog_tools()]);
    assert_eq!(step, Step::Answered);
    let (_, answer) = host.answer();
    let found = answer["result"]["structuredContent"]["tools"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(found, "get_weather");
    let pages = host.sent.borrow().len();
    assert_eq!(pages, 1, "one catalog page fetched");

    let arguments = format!(r#"{{"name":"{found}","arguments":{{"city":"Paris"}}}}"#);
    let (mut exchange, step) = s.run(
        &host,
        MODERN_REVISION,
        &call(2, "call_tool", &arguments),
        &[],
    );
    assert_eq!(step, Step::Wait);
    assert_eq!(
        host.sent.borrow().len(),
        pages + 1,
        "the catalog came from the cache"
    );
    let sent = host.last_sent();
    assert_eq!(sent["method"], "tools/call");
    assert_eq!(sent["id"], 2);
    assert_eq!(sent["params"]["name"], "get_weather");
    assert_eq!(sent["params"]["arguments"], json!({"city": "Paris"}));
    let result =
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Sunny"}]}}"#;
    let token = exchange.token().unwrap();
    let settings = s.settings();
    let mut cache = CatalogCache::new(1);
    let step = exchange.on_call(&host, &mut cache, &settings, token, sse(&[result.into()]));
    assert_eq!(step, Step::Answered);
    let (status, _, answered) = host.answered.borrow().last().cloned().unwrap();
    assert_eq!(status, 200);
    assert!(answered.contains("Sunny"), "{answered}");
}

// ---------------------------------------------------------------------------------------
// One request on an MCP route (`super::super::request`), driven event by event as the adapter
// drives it: headers, body, the gateway's calls answered, the answer's headers and chunks.

mod route {
    use super::*;
    use crate::mcp::request::{Context, Flow, McpRequest, Refusal};

    fn headers(pairs: &[(&str, &str)]) -> crate::pairs::HeaderMap {
        crate::pairs::HeaderMap::new(crate::pairs::encode(pairs))
    }

    const CLIENT: [(&str, &str); 9] = [
        (":method", "POST"),
        (":authority", "tools.internal"),
        (":path", "/mcp"),
        ("content-type", "application/json"),
        ("content-length", "45"),
        ("authorization", "Bearer secret"),
        ("mcp-session-id", "s-1"),
        ("mcp-protocol-version", "2025-11-25"),
        ("accept-encoding", "gzip"),
    ];

    fn context<'a, 'b>(
        host: &'a Mock,
        cache: &'a mut CatalogCache,
        settings: &'a Settings<'b>,
    ) -> Option<Context<'a, 'b, Mock>> {
        Some(Context {
            host,
            cache,
            settings,
        })
    }

    /// `tools/list` from its headers to its answer: the body is buffered until it is whole,
    /// the catalog is fetched from the route's cluster with the client's session and
    /// credentials (less the headers of one connection or one body), the gateway answers, and
    /// what it did is recorded once and said in `x-toolsift`.
    #[test]
    fn a_tools_list_from_its_headers_to_its_answer() {
        let mut setup = Setup::new(r#"{"mcp":{},"response_header":true}"#);
        let host = Mock {
            request_body: LIST.as_bytes().to_vec(),
            cluster: Some("mcp".into()),
            ..Mock::default()
        };
        let (mut request, outgoing) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(request.on_headers(Some(&host)), Flow::Continue);
        let settings = setup.settings();
        let mut cache = CatalogCache::new(1 << 20);
        let half = LIST.len() / 2;
        assert_eq!(
            request.on_body(half, false, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "buffered until the body is whole"
        );
        assert_eq!(
            request.on_body(LIST.len(), true, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "waits for the catalog"
        );
        assert_eq!(host.last_sent()["method"], "tools/list");
        let id = host.last_sent()["id"].to_string();
        let token = request.token().unwrap();
        let answer = list_answer(&id, &catalog_tools(), None, "");
        assert_eq!(
            request.on_call(token, answer, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "answered by the gateway"
        );
        let (status, listed) = host.answer();
        assert_eq!(status, 200);
        assert!(listed["result"]["tools"].to_string().contains("find_tools"));
        let sent = outgoing.headers("tools/list", None, &[]);
        let names: Vec<&str> = sent.iter().map(|(n, _)| n.as_str()).collect();
        for kept in [
            "authorization",
            "mcp-session-id",
            "mcp-protocol-version",
            ":path",
        ] {
            assert!(names.contains(&kept), "{kept} in {names:?}");
        }
        for dropped in ["content-length", "accept-encoding", "mcp-method"] {
            assert!(!names.contains(&dropped), "{dropped} in {names:?}");
        }
        assert!(sent.contains(&(":method".into(), "POST".into())));
        assert!(sent.contains(&(
            "accept".into(),
            "application/json, text/event-stream".into()
        )));
        let report = request.on_response_headers(Some(&setup.config), Some(b"application/json"));
        let said = report.header.clone().unwrap();
        assert!(said.starts_with("mcp="), "{said}");
        assert_eq!(report.filter_state.as_deref(), Some(said.as_str()));
        let again = request.on_response_headers(Some(&setup.config), None);
        assert_eq!(again.filter_state, None, "recorded once");
        setup.config.response_header = false;
        assert_eq!(
            request
                .on_response_headers(Some(&setup.config), None)
                .header,
            None
        );
    }

    /// A client that names methods in headers gets them on the gateway's requests too, with
    /// the `Mcp-Param-*` headers of the gateway's own call in place of its own.
    #[test]
    fn method_headers_name_the_gateways_own_call() {
        let mut client = CLIENT.to_vec();
        client.extend([
            ("mcp-method", "tools/call"),
            ("mcp-name", "call_tool"),
            ("mcp-param-city", "Paris"),
        ]);
        let (_, outgoing) = McpRequest::new(&headers(&client), false, None, None);
        let params = [("mcp-param-q".to_owned(), "x".to_owned())];
        let sent = outgoing.headers("tools/call", Some("get_weather"), &params);
        assert!(sent.contains(&("mcp-method".into(), "tools/call".into())));
        assert!(sent.contains(&("mcp-name".into(), "get_weather".into())));
        assert!(sent.contains(&("mcp-param-q".into(), "x".into())));
        assert!(!sent.iter().any(|(n, _)| n == "mcp-param-city"), "{sent:?}");
        assert_eq!(sent.iter().filter(|(n, _)| n == "mcp-method").count(), 1);
    }

    /// A body over `max_body_bytes` goes on unread; under access rules it is refused. A GET
    /// (nothing to read) goes on at once.
    #[test]
    fn a_body_too_large_passes_unread_unless_access_rules_govern_it() {
        let setup = Setup::new(r#"{"mcp":{},"max_body_bytes":16}"#);
        let host = Mock::default();
        let settings = setup.settings();
        let mut cache = CatalogCache::new(1 << 20);
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(
            request.on_body(17, false, context(&host, &mut cache, &settings)),
            Flow::Continue
        );
        assert_eq!(
            request.on_body(40, true, context(&host, &mut cache, &settings)),
            Flow::Continue,
            "no longer read"
        );
        assert!(host.sent.borrow().is_empty() && host.answered.borrow().is_empty());

        let mut get = CLIENT.to_vec();
        get[0] = (":method", "GET");
        let (mut request, _) = McpRequest::new(&headers(&get), false, None, None);
        assert_eq!(
            request.on_body(5, true, context(&host, &mut cache, &settings)),
            Flow::Continue
        );

        let mut governed = super::setup("refused");
        let head_grant = governed.head("2025-11-25", &["platform"]).grant;
        let caller = Caller::new(["platform".to_owned()]);
        let identity = head_grant.map(|g| (g, caller));
        governed.config.max_body_bytes = 16;
        let settings = governed.settings();
        let (mut request, _) = McpRequest::new(&headers(&get), false, identity, None);
        assert_eq!(
            request.on_body(17, false, context(&host, &mut cache, &settings)),
            Flow::Pause
        );
        let (status, refused) = host.answer();
        assert_eq!(status, 413, "{refused}");
    }

    /// Without its host (the engine could not be had), a request passes; under access rules
    /// it is refused instead, with a JSON-RPC error counted as a denial.
    #[test]
    fn a_request_that_cannot_be_checked_is_refused_only_under_access_rules() {
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(request.on_headers::<Mock>(None), Flow::Continue);
        assert_eq!(request.on_body::<Mock>(10, true, None), Flow::Continue);

        let governed = super::setup("refused");
        let grant = governed.head("2025-11-25", &["platform"]).grant.unwrap();
        let identity = Some((grant, Caller::new(["platform".to_owned()])));
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, identity, None);
        let Flow::Refuse(Refusal {
            status,
            body,
            surface,
        }) = request.on_headers::<Mock>(None)
        else {
            panic!("refused")
        };
        assert_eq!((status, surface), (500, Surface::McpRequest));
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"]["code"].is_i64(), "{body}");
        assert_eq!(
            request.on_body::<Mock>(10, true, None),
            Flow::Continue,
            "refused once: the body is no longer read"
        );
    }

    /// A `tools/list_changed` in the server's event stream, split over two chunks, raises the
    /// generation of the server the request went to (cluster and authority), once.
    #[test]
    fn a_list_changed_in_the_stream_raises_the_servers_generation() {
        let mut get = CLIENT.to_vec();
        get[0] = (":method", "GET");
        let host = Mock {
            cluster: Some("mcp".into()),
            ..Mock::default()
        };
        let (mut request, _) = McpRequest::new(&headers(&get), true, None, None);
        request.on_response_headers(None, Some(b"Text/Event-Stream; charset=utf-8"));
        let event = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";
        let (first, second) = event.split_at(30);
        for chunk in [first, second] {
            *host.response_body.borrow_mut() = chunk.as_bytes().to_vec();
            request.on_response_body(&host, chunk.len());
        }
        assert_eq!(*host.changed.borrow(), ["mcp|tools.internal"]);
        assert_eq!(*host.events.borrow(), [Event::ListChanged]);

        let (mut json, _) = McpRequest::new(&headers(&get), true, None, None);
        json.on_response_headers(None, Some(b"application/json"));
        *host.response_body.borrow_mut() = event.as_bytes().to_vec();
        json.on_response_body(&host, event.len());
        assert_eq!(
            host.changed.borrow().len(),
            1,
            "only event streams are watched"
        );
    }
}
