//! Custom request shapes (`custom`) through the real Envoy and `.wasm`: requests of a JSON shape
//! of no LLM API, sent to a custom route, reach the demo upstream (`x-demo-echo: raw` answers
//! with the body exactly as it arrived) with the dropped tools gone and every other byte as
//! the client wrote it.

use crate::common;

use common::{Gateway, catalog};
use serde_json::Value;
use serde_json::value::RawValue;

const RAW: (&str, &str) = ("x-demo-echo", "raw");
const QUESTION: &str = "What is the current weather in Paris?";

/// The kept tools the debug header lists, in rank order.
fn kept_names(r: &common::Response) -> Vec<String> {
    r.header("x-toolsift-tools")
        .unwrap_or_else(|| panic!("no x-toolsift-tools: {:?}", r.headers))
        .split(',')
        .map(str::to_owned)
        .collect()
}

fn name_of(tool: &Value) -> &str {
    tool["function"]["name"].as_str().unwrap()
}

/// A gateway's own request shape: the tools under `payload.functions`, each in a `spec`
/// wrapper with its schema under `schema`, the question in the last turn's parts; pretty
/// printed, with spellings a re-serialising proxy would change (`0.20`, `\u00e9`).
fn json_shaped_body() -> (String, String) {
    let tools: Vec<Value> = catalog()
        .iter()
        .map(|t| {
            let f = &t["function"];
            serde_json::json!({"spec": {"name": f["name"], "description": f["description"],
                "schema": f["parameters"]}, "owner": "team"})
        })
        .collect();
    let tools = serde_json::to_string_pretty(&tools).unwrap();
    let body = format!(
        "{{\n  \"conversation\": [\n    {{\"parts\": [{{\"text\": \"Caf\\u00e9 bot\"}}]}},\n    {{\"parts\": [{{\"text\": \"{QUESTION}\"}}]}}\n  ],\n  \"payload\": {{\"functions\": {tools}, \"mode\": \"auto\"}},\n  \"temperature\": 0.20\n}}"
    );
    (body, tools)
}

#[test]
fn a_json_shape_of_its_own_is_filtered_byte_for_byte() {
    let config = r#"{"debug": true, "top_k": 3, "min_tools": 5, "custom": {
        "paths": ["/wso2/*"],
        "query_path": "$.conversation[-1].parts[*].text",
        "tools_path": "$.payload.functions[*].spec",
        "fields": {"parameters": "schema"}}}"#;
    let gw = Gateway::start(config);
    let (body, tools) = json_shaped_body();
    let r = gw.post("/wso2/v1/chat/completions", &[RAW], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("kept=3 total=80"));
    let kept = kept_names(&r);
    assert_eq!(kept.len(), 3);
    assert_eq!(kept[0], "get_current_weather");

    // Outside the tools array, the bytes the client sent; inside, the kept tools byte for
    // byte, in the client's order, with the client's separators.
    let forwarded = r.text();
    let at = body.find(&tools).unwrap();
    let (before, after) = (&body[..at], &body[at + tools.len()..]);
    assert!(forwarded.starts_with(before) && forwarded.ends_with(after));
    let array = &forwarded[before.len()..forwarded.len() - after.len()];
    let items: Vec<&RawValue> = serde_json::from_str(array).unwrap();
    let original: Vec<&RawValue> = serde_json::from_str(&tools).unwrap();
    let expected: Vec<&str> = original
        .iter()
        .map(|t| t.get())
        .filter(|t| {
            let v: Value = serde_json::from_str(t).unwrap();
            kept.iter()
                .any(|k| k == v["spec"]["name"].as_str().unwrap())
        })
        .collect();
    assert_eq!(items.iter().map(|i| i.get()).collect::<Vec<_>>(), expected);
    assert!(array.starts_with("[\n  {") && array.ends_with("}\n]"));
    assert!(forwarded.contains("Caf\\u00e9 bot") && forwarded.contains("0.20"));

    // The custom route wins over the dialect its path names: a Chat Completions body there has
    // no `payload.functions`, so it passes as it is.
    let chat = serde_json::json!({"messages": [{"role": "user", "content": QUESTION}],
        "tools": catalog()})
    .to_string();
    let r = gw.post("/wso2/v1/chat/completions", &[RAW], chat.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("skipped=no_tools"));
    assert_eq!(r.text(), chat);
    // Other paths are read by their dialect as before.
    let r = gw.post("/v1/chat/completions", &[RAW], chat.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("kept=3 total=80"));
    let sent: Value = serde_json::from_str(&r.text()).unwrap();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(name_of)
        .collect();
    assert!(names.contains(&"get_current_weather"), "{names:?}");

    // The same catalog again: a cache hit, the same decision.
    let again = gw.post("/wso2/v1/chat/completions", &[RAW], body.as_bytes());
    assert_eq!(again.text(), forwarded);
    assert_eq!(gw.stat("toolsift.rewritten"), 3);
    assert_eq!(gw.stat("toolsift.skipped.no_tools"), 1);
    assert_eq!(gw.stat("toolsift.tools_in"), 240);
    assert_eq!(gw.stat("toolsift.tools_out"), 9);
    assert!(gw.stat("toolsift.catalog_cache.hits") >= 1);
    assert!(!gw.log_text().contains("panicked"));
}

/// A chat body whose system message lists every fixture tool as text tags (one per line, one
/// description with quotes, those without a description with no description tag, the text
/// with an escaped `é`), the question in `<userq>`.
fn tagged_body() -> (String, Vec<(String, String)>) {
    let tools: Vec<(String, String)> = catalog()
        .iter()
        .map(|t| {
            let name = name_of(t).to_owned();
            let mut description = t["function"]["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if name == "get_current_weather" {
                description.push_str(" (\"now\", not a forecast)");
            }
            (name, description)
        })
        .collect();
    assert!(tools.iter().any(|(_, d)| d.is_empty()));
    let mut system = String::from("Caf\u{e9} tools:\n");
    for (name, description) in &tools {
        system.push_str(&format!("<toolname>{name}</toolname>"));
        if !description.is_empty() {
            system.push_str(&format!("<tooldescription>{description}</tooldescription>"));
        }
        system.push('\n');
    }
    system.push_str("Use them well.");
    let system = serde_json::to_string(&system)
        .unwrap()
        .replace('\u{e9}', "\\u00e9");
    let body = format!(
        "{{\"model\": \"m\", \"messages\": [\n  {{\"role\": \"system\", \"content\": {system}}},\n  {{\"role\": \"user\", \"content\": \"<userq>{QUESTION}</userq>\"}}\n], \"temperature\": 0.20}}"
    );
    (body, tools)
}

#[test]
fn tools_written_as_text_tags_are_cut_out_of_the_message() {
    let config = r#"{"debug": true, "top_k": 2, "min_tools": 5, "custom": {
        "paths": ["/wso2/*"], "text_path": "$.messages[*].content", "strip_tags": true}}"#;
    let gw = Gateway::start(config);
    let (body, tools) = tagged_body();
    let r = gw.post("/wso2/v1/chat/completions", &[RAW], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("kept=2 total=80"));
    let kept = kept_names(&r);
    assert_eq!(kept[0], "get_current_weather");

    let forwarded = r.text();
    let sent: Value = serde_json::from_str(&forwarded).unwrap();
    // The kept tools' text, markup stripped; the dropped tools' lines gone.
    let mut expected = String::from("Caf\u{e9} tools:\n");
    for (name, description) in tools.iter().filter(|(n, _)| kept.contains(n)) {
        expected.push_str(&format!("{name}{description}\n"));
    }
    expected.push_str("Use them well.");
    assert_eq!(sent["messages"][0]["content"], expected.as_str());
    assert_eq!(sent["messages"][1]["content"], QUESTION);
    // Every byte outside the two strings, and the client's escapes inside them, unchanged.
    let system_at = body.find("\"Caf").unwrap();
    assert!(forwarded.starts_with(&body[..system_at]));
    assert!(forwarded[system_at..].starts_with("\"Caf\\u00e9 tools:\\n"));
    assert!(forwarded.contains("(\\\"now\\\", not a forecast)"));
    assert!(forwarded.ends_with("\"},\n  {\"role\": \"user\", \"content\": \"What is the current weather in Paris?\"}\n], \"temperature\": 0.20}"));

    // Without strip_tags the kept tools keep their tags.
    drop(gw);
    let gw = Gateway::start(&config.replace("true}}", "false}}"));
    let r = gw.post("/wso2/v1/chat/completions", &[RAW], body.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("kept=2 total=80"));
    let sent: Value = serde_json::from_str(&r.text()).unwrap();
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert_eq!(system.matches("<toolname>").count(), 2);
    assert!(system.contains("<toolname>get_current_weather</toolname>"));
    assert_eq!(
        sent["messages"][1]["content"],
        format!("<userq>{QUESTION}</userq>")
    );
    assert!(!gw.log_text().contains("panicked"));
}
