#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::*;
use crate::config::Mcp;
use std::cell::RefCell;

/// A request the gateway sent: body, method, name, timeout.
type Sent = (String, String, Option<String>, u64);

/// Hybrid ranking's pieces: the vector cache, the embeddings settings, the configuration.
type Vectors = (
    crate::embeddings::VectorCache<crate::embeddings::MemoryBytes>,
    crate::config::Embeddings,
    Config,
);

#[derive(Default)]
struct Mock {
    vectors: Option<Vectors>,
    embedded: RefCell<Vec<Vec<String>>>,
    sent: RefCell<Vec<Sent>>,
    answered: RefCell<Vec<(u16, String, String)>>,
    events: RefCell<Vec<Event>>,
    generation: RefCell<u64>,
    now: u64,
    refuse: bool,
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
            },
            embeddings,
            config,
        })
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let mut embedded = self.embedded.borrow_mut();
        embedded.push(inputs.iter().map(|i| (*i).to_owned()).collect());
        Some(1000 + embedded.len() as u32)
    }

    fn send(&self, body: &str, method: &str, name: Option<&str>, timeout_ms: u64) -> Option<u32> {
        if self.refuse {
            return None;
        }
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
    fn tools_changed(&self, _server: &str) {
        *self.generation.borrow_mut() += 1;
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
}

impl Setup {
    fn new(config: &str) -> Setup {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mcp = config.mcp.clone().unwrap_or_default();
        Setup {
            config,
            mcp,
            cache: CatalogCache::new(1 << 20),
        }
    }

    fn settings(&self) -> Settings<'_> {
        Settings {
            config: &self.config,
            mcp: &self.mcp,
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
        let mut exchange = Exchange::new(Head {
            server: "mcp|localhost".into(),
            revision: revision.into(),
            auth: 0,
        });
        let settings = Settings {
            config: &self.config,
            mcp: &self.mcp,
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

#[test]
fn ttl_zero_is_never_cached_and_names_stay_stable() {
    let mut s = Setup::new(r#"{"mcp":{}}"#);
    let host = Mock::default();
    let mut exchange = Exchange::new(Head {
        revision: MODERN_REVISION.into(),
        ..Head::default()
    });
    let settings = Settings {
        config: &s.config,
        mcp: &s.mcp,
    };
    exchange.on_body(&host, &mut s.cache, &settings, LIST.as_bytes());
    let answer = list_answer(
        "7400000001",
        &catalog_tools(),
        None,
        r#","ttlMs":0,"cacheScope":"public""#,
    );
    assert_eq!(
        exchange.on_call(&host, &mut s.cache, &settings, 1, answer),
        Step::Answered
    );
    assert!(s.cache.is_empty());
    let result = &host.answer().1["result"];
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
