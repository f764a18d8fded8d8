//! toolsift in the real Envoy, with the real `.wasm`, in front of the demo upstream.

use crate::common;

use common::{DIALECTS, Gateway, Response, envoy_refuses, tools_for};
use serde_json::Value;
use serde_json::value::RawValue;
use std::io::Write;

const DEFAULT: &str = r#"{"debug": true}"#;

fn path(dialect: &str) -> &'static str {
    match dialect {
        "openai_chat" => "/v1/chat/completions",
        "openai_responses" => "/v1/responses",
        "anthropic" => "/v1/messages",
        "gemini" => "/v1beta/models/gemini-2.5-flash:generateContent",
        "bedrock" => "/model/anthropic.claude-sonnet-4-v1:0/converse",
        "ollama" => "/api/chat",
        other => panic!("{other}"),
    }
}

/// A request body as a client would write it, pretty-printed, with number and string
/// spellings (`0.20`, `\u00e9`) that a re-serialising proxy would change. Returns the body
/// and the exact text of its tools array.
fn request(dialect: &str, query: &str) -> (String, String) {
    let tools = serde_json::to_string_pretty(&tools_for(dialect)).unwrap();
    let q = serde_json::to_string(query).unwrap();
    let body = match dialect {
        "openai_chat" => format!(
            "{{\n  \"model\": \"gpt-4.1\",\n  \"messages\": [\n    {{\"role\": \"system\", \"content\": \"Caf\\u00e9 assistant\"}},\n    {{\"role\": \"user\", \"content\": {q}}}\n  ],\n  \"tools\": {tools},\n  \"tool_choice\": \"auto\",\n  \"temperature\": 0.20\n}}"
        ),
        "openai_responses" => format!(
            "{{\n  \"model\": \"gpt-5\",\n  \"input\": [{{\"role\": \"user\", \"content\": [{{\"type\": \"input_text\", \"text\": {q}}}]}}],\n  \"tools\": {tools},\n  \"temperature\": 0.20\n}}"
        ),
        "anthropic" => format!(
            "{{\n  \"model\": \"claude-sonnet-4-5\",\n  \"max_tokens\": 1024,\n  \"system\": \"Caf\\u00e9 assistant\",\n  \"tools\": {tools},\n  \"messages\": [{{\"role\": \"user\", \"content\": [{{\"type\": \"text\", \"text\": {q}}}]}}]\n}}"
        ),
        "gemini" => format!(
            "{{\n  \"contents\": [{{\"role\": \"user\", \"parts\": [{{\"text\": {q}}}]}}],\n  \"tools\": {tools},\n  \"generationConfig\": {{\"temperature\": 0.20}}\n}}"
        ),
        "bedrock" => format!(
            "{{\n  \"messages\": [{{\"role\": \"user\", \"content\": [{{\"text\": {q}}}]}}],\n  \"toolConfig\": {{\n    \"tools\": {tools},\n    \"toolChoice\": {{\"auto\": {{}}}}\n  }},\n  \"inferenceConfig\": {{\"temperature\": 0.20}}\n}}"
        ),
        // `stream` left out: Ollama streams by default, and the filter must not care.
        "ollama" => format!(
            "{{\n  \"model\": \"llama3.2\",\n  \"messages\": [\n    {{\"role\": \"system\", \"content\": \"Caf\\u00e9 assistant\"}},\n    {{\"role\": \"user\", \"content\": {q}}}\n  ],\n  \"tools\": {tools},\n  \"options\": {{\"temperature\": 0.20}},\n  \"keep_alive\": \"5m\"\n}}"
        ),
        other => panic!("{other}"),
    };
    (body, tools)
}

/// The raw JSON of each tool in a tools array text (Gemini: each function declaration).
fn raw_items(dialect: &str, tools: &str) -> Vec<String> {
    let items: Vec<&RawValue> = serde_json::from_str(tools).unwrap();
    if dialect != "gemini" {
        return items.iter().map(|i| i.get().to_owned()).collect();
    }
    let mut out = Vec::new();
    for item in items {
        let fields: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_str(item.get()).unwrap();
        let decls: Vec<&RawValue> =
            serde_json::from_str(fields["functionDeclarations"].get()).unwrap();
        out.extend(decls.iter().map(|d| d.get().to_owned()));
    }
    out
}

/// Checks that `received` is `original` with only its tools array changed, and that every
/// tool that arrived is byte-identical to one the client sent. Returns the received tools.
fn assert_spliced(dialect: &str, original: &str, tools: &str, received: &str) -> Vec<String> {
    let start = original.find(tools).expect("tools text in body");
    let end = start + tools.len();
    assert!(
        received.starts_with(&original[..start]),
        "bytes before the tools array changed"
    );
    assert!(
        received.ends_with(&original[end..]),
        "bytes after the tools array changed"
    );
    let new_tools = &received[start..received.len() - (original.len() - end)];
    let items = raw_items(dialect, new_tools);
    let mut last = 0;
    for item in &items {
        let at = tools
            .find(item.as_str())
            .unwrap_or_else(|| panic!("kept tool altered: {item}"));
        assert!(at >= last, "kept tools reordered");
        last = at;
    }
    items
}

fn tool_header(r: &Response) -> Vec<String> {
    r.header("x-toolsift-tools")
        .unwrap_or_default()
        .split(',')
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_dialect_is_cut_to_top_k_with_bytes_preserved() {
    let gw = Gateway::start(DEFAULT);
    let asks = [
        (
            "Post a message to the #deploys Slack channel saying the build is green",
            "send_slack_message",
        ),
        (
            "What will the weather be like in Lisbon over the next five days?",
            "get_weather_forecast",
        ),
        (
            "Scale the checkout deployment in Kubernetes to 6 replicas",
            "scale_deployment",
        ),
        (
            "Refund the charge ch_123 for the customer, they were billed twice",
            "refund_charge",
        ),
        (
            "Merge pull request 42 in the acme/api repository",
            "merge_pull_request",
        ),
    ];
    for dialect in DIALECTS {
        for (query, expected) in asks {
            let (body, tools) = request(dialect, query);
            let r = gw.post(path(dialect), &[("x-demo-echo", "body")], body.as_bytes());
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"), "{dialect}");
            let ranked = tool_header(&r);
            assert!(
                ranked.contains(&expected.to_owned()),
                "{dialect} {query}: {ranked:?}"
            );
            let received = r.text();
            let items = assert_spliced(dialect, &body, &tools, &received);
            assert_eq!(items.len(), 5, "{dialect}");
            assert_eq!(r.header("x-demo-tool-count"), Some("5"));
        }
    }
}

#[test]
fn same_request_gives_same_bytes_and_agent_loop_keeps_its_selection() {
    let gw = Gateway::start(DEFAULT);
    let (body, _) = request("anthropic", "Find a hotel in Kyoto for two nights in May");
    let first = gw.post("/v1/messages", &[("x-demo-echo", "body")], body.as_bytes());
    let second = gw.post("/v1/messages", &[("x-demo-echo", "body")], body.as_bytes());
    assert_eq!(first.body, second.body);
    // The next turn of the agent loop: the model called a tool and the client sends its result.
    // The client sends the same tools bytes again, as agents do.
    let (head, tail) = body.rsplit_once("]\n}").unwrap();
    assert!(tail.is_empty());
    let next_body = format!(
        "{head}, {}, {}]\n}}",
        r#"{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search_hotels", "input": {"city": "Kyoto"}}]}"#,
        r#"{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3 hotels"}]}"#
    );
    let later = gw.post("/v1/messages", &[], next_body.as_bytes());
    let mut a = first.json_tools_sorted();
    let mut b = later.upstream_tools();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the agent loop's selection changed between turns");
    assert!(gw.stat("toolsift.catalog_cache.hits") >= 2);
    assert_eq!(gw.stat("toolsift.catalog_cache.misses"), 1);
}

trait EchoTools {
    fn json_tools_sorted(&self) -> Vec<String>;
}

impl EchoTools for Response {
    /// The tool names in an echoed Anthropic body.
    fn json_tools_sorted(&self) -> Vec<String> {
        let v = self.json();
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

#[test]
fn pinned_tools_survive() {
    let gw = Gateway::start(r#"{"debug": true, "always_include": ["get_current_*"]}"#);
    let tools = serde_json::to_string(&tools_for("openai_chat")).unwrap();
    let body = format!(
        r#"{{"model":"gpt-4.1","messages":[
            {{"role":"user","content":"Why is the checkout pod crashing?"}},
            {{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"create_trello_card","arguments":"{{}}"}}}}]}},
            {{"role":"tool","tool_call_id":"c1","content":"ok"}}
        ],"tools":{tools},"tool_choice":{{"type":"function","function":{{"name":"translate_text"}}}}}}"#
    );
    let r = gw.post("/v1/chat/completions", &[], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let got = r.upstream_tools();
    for pinned in [
        "create_trello_card",
        "translate_text",
        "get_current_weather",
        "get_current_time",
    ] {
        assert!(
            got.contains(&pinned.to_owned()),
            "{pinned} missing from {got:?}"
        );
    }
    assert!(
        got.contains(&"get_pod_logs".to_owned()) || got.contains(&"get_pods".to_owned()),
        "{got:?}"
    );
    // Four pinned tools on top of the five ranked ones.
    assert_eq!(r.header("x-toolsift"), Some("kept=9 total=80"));

    // Anthropic `tool_choice: any` with a min_score that nothing reaches: still one tool.
    let gw = Gateway::start(r#"{"min_score": 1000}"#);
    let (body, _) = request("anthropic", "hello there");
    let body = body.replacen(
        "\"max_tokens\": 1024,",
        "\"max_tokens\": 1024, \"tool_choice\": {\"type\": \"any\"},",
        1,
    );
    let r = gw.post("/v1/messages", &[], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.upstream_tools().len(), 1);
}

#[test]
fn small_and_toolless_requests_pass_untouched() {
    let gw = Gateway::start(DEFAULT);
    let all = tools_for("openai_chat");
    let twenty = Value::Array(all.as_array().unwrap()[..20].to_vec());
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"send an email"}}],"tools":{twenty}}}"#
    );
    let r = gw.post(
        "/v1/chat/completions",
        &[("x-demo-echo", "body")],
        body.as_bytes(),
    );
    assert_eq!(r.body, body.as_bytes());
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=20 total=20 skipped=few_tools")
    );

    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let r = gw.post(
        "/v1/chat/completions",
        &[("x-demo-echo", "body")],
        body.as_bytes(),
    );
    assert_eq!(r.body, body.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("skipped=no_tools"));

    // Not an LLM call: no header, no body buffering.
    let r = common::http(gw.port, "GET", "/healthz", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-toolsift"), None);
    assert_eq!(gw.stat("toolsift.skipped.few_tools"), 1);
    assert_eq!(gw.stat("toolsift.skipped.no_tools"), 1);
    assert_eq!(gw.stat("toolsift.skipped.not_llm"), 1);
}

#[test]
fn malformed_oversized_and_compressed_bodies_pass_through_and_are_counted() {
    let gw = Gateway::start(r#"{"max_body_bytes": 50000}"#);
    // Malformed: the upstream sees it as sent and rejects it itself.
    let r = gw.post("/v1/chat/completions", &[], br#"{"messages": [ oops"#);
    assert_eq!(r.status, 400);
    assert!(r.text().contains("invalid_request_error"), "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("skipped=malformed_json"));

    // Oversized, with and without content-length: passes through whole, unfiltered.
    let (body, _) = request("openai_chat", "send a slack message");
    assert!(body.len() > 50_000);
    for headers in [
        vec![("x-demo-echo", "body")],
        vec![("x-demo-echo", "body"), ("transfer-encoding", "chunked")],
    ] {
        let r = gw.post("/v1/chat/completions", &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body, body.as_bytes());
        assert_eq!(r.header("x-toolsift"), Some("skipped=too_large"));
    }

    // gzip: not read; the upstream receives the compressed bytes.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(body.as_bytes()).unwrap();
    let compressed = gz.finish().unwrap();
    let r = gw.post(
        "/v1/chat/completions",
        &[("content-encoding", "gzip")],
        &compressed,
    );
    assert_eq!(r.header("x-toolsift"), Some("skipped=compressed"));

    let r = common::http(
        gw.port,
        "POST",
        "/v1/chat/completions",
        &[("content-type", "text/plain")],
        body.as_bytes(),
    );
    assert_eq!(r.header("x-toolsift"), Some("skipped=content_type"));

    assert_eq!(gw.stat("toolsift.skipped.malformed_json"), 1);
    assert_eq!(gw.stat("toolsift.skipped.too_large"), 2);
    assert_eq!(gw.stat("toolsift.skipped.compressed"), 1);
    assert_eq!(gw.stat("toolsift.skipped.content_type"), 1);
    assert_eq!(gw.stat("toolsift.errors"), 5);
    assert_eq!(
        gw.upstream.stats()["requests"],
        5,
        "every request reached the upstream"
    );
}

#[test]
fn reject_mode_answers_a_json_400() {
    let gw = Gateway::start(r#"{"on_error": "reject"}"#);
    let r = gw.post("/v1/messages", &[], b"{not json");
    assert_eq!(r.status, 400);
    let err = r.json();
    assert_eq!(err["error"]["type"], "toolsift_error");
    assert_eq!(err["error"]["code"], "malformed_json");
    assert_eq!(r.header("x-toolsift"), Some("skipped=malformed_json"));
    let reports = r.headers.iter().filter(|(k, _)| k == "x-toolsift").count();
    assert_eq!(reports, 1, "one x-toolsift header: {:?}", r.headers);
    let r = gw.post("/v1/messages", &[("content-encoding", "br")], b"xx");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "compressed");
    assert_eq!(
        gw.upstream.stats()["requests"],
        0,
        "rejected requests never reach the upstream"
    );
    // Requests with nothing to do are not errors, even under reject.
    let r = gw.post(
        "/v1/messages",
        &[],
        br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn streaming_and_chunked_requests_are_filtered() {
    let gw = Gateway::start(DEFAULT);
    let (body, _) = request("openai_chat", "Create a Jira issue for the login bug");
    let body = body.replacen(
        "\"temperature\": 0.20",
        "\"temperature\": 0.20,\n  \"stream\": true",
        1,
    );
    let r = gw.post(
        "/v1/chat/completions",
        &[("transfer-encoding", "chunked")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    assert!(r.text().contains("data: [DONE]"));
    assert!(tool_header(&r).contains(&"create_jira_issue".to_owned()));
    assert_eq!(r.header("x-demo-tool-count"), Some("5"));
}

#[test]
fn stats_and_headers_report_what_was_done() {
    // Its own Envoy: it reads the histogram and /stats/prometheus.
    let gw = Gateway::start_alone(r#"{"response_header": true}"#);
    for dialect in DIALECTS {
        let (body, _) = request(dialect, "translate this paragraph into German");
        let r = gw.post(path(dialect), &[], body.as_bytes());
        assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
        assert_eq!(
            r.header("x-toolsift-tools"),
            None,
            "debug header only with debug: true"
        );
    }
    let n = DIALECTS.len() as u64;
    assert_eq!(gw.stat("toolsift.requests"), n);
    assert_eq!(gw.stat("toolsift.rewritten"), n);
    assert_eq!(gw.stat("toolsift.tools_in"), 80 * n);
    assert_eq!(gw.stat("toolsift.tools_out"), 5 * n);
    assert!(
        gw.stat("toolsift.tokens_saved") > n * 5000,
        "{}",
        gw.stat("toolsift.tokens_saved")
    );
    // Histograms reach /stats at the next stats flush (5 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let hist = gw.admin_get("/stats?filter=filter_time_us");
        if hist.contains("P50") && !hist.contains("No recorded values") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no filter_time_us histogram: {hist}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let prometheus = gw.admin_get("/stats/prometheus");
    assert!(
        prometheus.contains("toolsift_rewritten"),
        "prometheus names"
    );
    // Prompts never reach the logs at info level.
    assert!(!gw.log_text().contains("German"));

    let quiet = Gateway::start(r#"{"response_header": false}"#);
    let (body, _) = request("anthropic", "translate this");
    let r = quiet.post("/v1/messages", &[], body.as_bytes());
    assert_eq!(r.header("x-toolsift"), None);
    assert_eq!(r.header("x-demo-tool-count"), Some("5"));
}

/// Tool names are client data: written into a response header they are percent-encoded, so a
/// name holding CRLF cannot split the response (it did: `x-toolsift-tools: evil\r\nx-injected`).
#[test]
fn tool_names_in_headers_cannot_split_the_response() {
    let gw = Gateway::start(r#"{"debug": true, "top_k": 3}"#);
    let mut tools = common::catalog();
    tools.push(serde_json::json!({"type": "function", "function": {
        "name": "evil\r\nx-injected: yes\r\n\r\n<html>",
        "description": "Translate a paragraph into German",
        "parameters": {"type": "object", "properties": {}}}}));
    let body = serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "translate this paragraph into German"}],
        "tools": tools,
    });
    let r = gw.post("/v1/chat/completions", &[], body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-injected"), None, "{:?}", r.headers);
    let names = r.header("x-toolsift-tools").unwrap();
    assert!(
        names.contains("evil%0D%0Ax-injected:%20yes%0D%0A%0D%0A%3Chtml%3E"),
        "{names}"
    );
    assert!(!gw.log_text().contains("panicked"));
}

/// The shipped configs log each request as a JSON line with toolsift's decision (filter state
/// the filter sets), whatever the response headers carry.
#[test]
fn the_access_log_says_what_toolsift_did() {
    let log = std::env::temp_dir().join(format!("toolsift-access-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let to_file = |yaml: String| common::access_log_to_file(&yaml, &log);
    let lines = |n: usize| common::access_log_lines(&log, n);
    // Filter mode, with the response header off: the log still says.
    let gw = Gateway::start_with(r#"{"response_header": false}"#, &[], to_file);
    let (body, _) = request("openai_chat", "translate this paragraph into German");
    let r = gw.post("/v1/chat/completions", &[], body.as_bytes());
    assert_eq!(r.header("x-toolsift"), None);
    let r = gw.post(
        "/v1/chat/completions",
        &[("content-encoding", "gzip")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    let logged = lines(2);
    // One record: what `x-toolsift` would have said, and the tools' tokens as sent and as
    // forwarded.
    let (header, own) = common::record(&logged[0]);
    assert_eq!(header, "kept=5 total=80", "{logged:?}");
    let tokens = own.get("tokens").map(String::as_str).unwrap_or_default();
    let (before, after) = tokens.split_once('/').unwrap_or_default();
    let (before, after): (u64, u64) = (before.parse().unwrap(), after.parse().unwrap());
    assert!(before > after && after > 0, "{logged:?}");
    assert_eq!(own.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["status"], 200);
    assert_eq!(logged[1]["toolsift"], "skipped=compressed");
    drop(gw);
    // Search mode: the search's rounds and found tools too.
    let _ = std::fs::remove_file(&log);
    let config = r#"{"mode": "search"}"#;
    let gw = Gateway::start_with(config, &[], to_file);
    let (body, _) = request("anthropic", "What is the current weather in Paris?");
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-script", "search"),
    ];
    let r = gw.post("/v1/messages", &headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let logged = lines(1);
    assert!(
        logged[0]["toolsift"]
            .as_str()
            .unwrap()
            .ends_with("search=search")
    );
    let search = logged[0]["toolsift_search"].as_str().unwrap();
    assert!(
        search.starts_with("rounds=1 found=") && search.contains("get_current_weather"),
        "{search}"
    );
}

#[test]
fn invalid_configuration_keeps_envoy_from_starting() {
    for (config, field) in [
        (r#"{"top_k": 0}"#, "field `top_k`"),
        (r#"{"topk": 5}"#, "unknown field `topk`"),
        (r#"{"on_error": "explode"}"#, "field `on_error`"),
        (r#"{"min_tools": "20"}"#, "field `min_tools`"),
        ("not json", "invalid toolsift configuration"),
    ] {
        let (refused, log) = envoy_refuses(config);
        assert!(refused, "Envoy started with {config}");
        assert!(log.contains(field), "log does not name {field}:\n{log}");
    }
}

#[test]
fn gating_rules_exclude_and_claim_without_a_server() {
    // The operator's own `_tool_gating`: no MCP server, no call, the same effect.
    let gw = Gateway::start(
        r#"{"top_k":5,"gating":{"claim":"answer","rules":[
            {"when":{"words":["weather"]},"exclude":["get_weather_*","get_current_weather"]},
            {"when":{"regex":"(?i)\\bpage (the )?on-?call\\b"},"claim":"trigger_pagerduty_incident",
             "arguments":{"severity":"critical"}}]}}"#,
    );
    for dialect in DIALECTS {
        let (body, _) = request(dialect, "What is the current weather in Paris?");
        let r = gw.post(path(dialect), &[], body.as_bytes());
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let received = r.header("x-demo-tools").unwrap_or_default().to_owned();
        assert!(
            !received.is_empty() && !received.contains("weather"),
            "{dialect}: excluded tools reached the upstream: {received:?}"
        );
        let header = r.header("x-toolsift").unwrap();
        assert!(
            header.ends_with(" gating=excluded:2"),
            "{dialect}: {header}"
        );
    }
    // A claimed request is answered by the gateway with the call, without the model (whose
    // answers would say `toolsift_demo`).
    for dialect in ["openai_chat", "anthropic"] {
        let (body, _) = request(dialect, "Please page the on-call engineer now");
        let r = gw.post(path(dialect), &[], body.as_bytes());
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let text = r.text();
        assert!(
            text.contains("toolsift_claim") && !text.contains("toolsift_demo"),
            "{text}"
        );
        assert!(
            text.contains("trigger_pagerduty_incident") && text.contains("critical"),
            "{text}"
        );
        assert!(
            r.header("x-toolsift")
                .unwrap()
                .contains("claimed:trigger_pagerduty_incident"),
            "{:?}",
            r.header("x-toolsift")
        );
    }
    assert_eq!(
        gw.stat("toolsift.mcp.gating.excluded"),
        2 * DIALECTS.len() as u64
    );
    assert_eq!(gw.stat("toolsift.mcp.gating.answered"), 2);
}
