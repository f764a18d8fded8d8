#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::testing::*;
use super::*;

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
