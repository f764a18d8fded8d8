//! Audit mode, `access_shadow` and the loop guard's `report_only` in the real Envoy with the
//! real `.wasm`, in front of the demo upstream's scripted model: an audited request reaches the
//! upstream exactly as the client sent it, the model's call of a tool the rules would deny
//! reaches the client, and the access log and counters say what would have been denied, by
//! which rule; a shadow policy is reported where it differs and never enforced; a looping
//! conversation under `report_only` is detected and counted and reaches the upstream
//! unchanged.

use crate::common;

use common::llm::{called, request, tool_names, upstream_log};
use common::{Gateway, Response, http};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The shipped access log, written to `log`: its `toolsift` record carries the verdicts.
fn with_access_log(yaml: &str, log: &Path) -> String {
    common::access_log_to_file(yaml, log)
}

/// The access verdicts of a logged line's record (`verdicts=a,b`), each
/// `verdict:surface:rule:tool`.
fn verdicts(line: &Value) -> Vec<String> {
    let (_, own) = common::record(line);
    let list = own.get("verdicts").cloned().unwrap_or_default();
    list.split(',').map(str::to_owned).collect()
}

fn log_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("toolsift-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn start(config: &Value, log: &Path) -> Gateway {
    Gateway::start_with(&config.to_string(), &[], |yaml| with_access_log(&yaml, log))
}

/// Sends `dialect`'s request as an `interns` caller; the scripted model calls `call`.
fn ask(gw: &Gateway, dialect: &str, stream: bool, call: &str) -> (Value, Response) {
    http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
    let (path, body) = request(dialect, stream);
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-call", call),
        ("x-group", "interns"),
    ];
    let r = gw.post(&path, &headers, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{dialect} stream={stream}: {}", r.text());
    (body, r)
}

/// The catalog's tools whose names start with `search_`.
fn search_tools() -> Vec<String> {
    common::catalog()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .filter(|n| n.starts_with("search_"))
        .map(str::to_owned)
        .collect()
}

const RULES: &str = r#"[
    {"name": "no-slack", "when": ["*"], "deny": ["send_slack_message"]},
    {"when": ["interns"], "deny": ["search_*"]}
]"#;

#[test]
fn an_audited_request_reaches_the_upstream_unchanged_and_says_what_would_be_denied() {
    let log = log_path("audit");
    let config = json!({
        "min_tools": 100,
        "access": {
            "mode": "audit",
            "identity": [{"header": "x-group"}],
            "default": "allow",
            "rules": serde_json::from_str::<Value>(RULES).unwrap(),
        }
    });
    let gw = start(&config, &log);
    let cases = [
        ("openai_chat", false),
        ("anthropic", true),
        ("gemini", false),
    ];
    for (dialect, stream) in cases {
        let (sent, r) = ask(&gw, dialect, stream, "send_slack_message");
        // The upstream got the client's body as it was, every tool in it.
        let received = upstream_log(&gw);
        assert_eq!(received.len(), 1, "{dialect}");
        assert_eq!(received[0]["body"], sent, "{dialect}: the body was changed");
        assert_eq!(tool_names(dialect, &received[0]["body"]).len(), 80);
        // The model's call of the tool the rules would deny reaches the client.
        assert_eq!(called(dialect, &r), ["send_slack_message"], "{dialect}");
        let header = r.header("x-toolsift").unwrap_or_default();
        assert!(header.contains("skipped=few_tools"), "{dialect}: {header}");
    }
    let lines = common::access_log_lines(&log, cases.len());
    let search = search_tools();
    for (line, (dialect, _)) in lines.iter().zip(cases) {
        let items = verdicts(line);
        let items: Vec<&str> = items.iter().map(String::as_str).collect();
        assert!(
            items.contains(&"would_deny:tools:no-slack:send_slack_message")
                && items.contains(&"would_deny:call:no-slack:send_slack_message"),
            "{dialect}: {line}"
        );
        for tool in &search {
            assert!(
                // An unnamed rule is `#N`, percent-encoded as every name in the log is.
                items.contains(&format!("would_deny:tools:%231:{tool}").as_str()),
                "{dialect}: {tool}: {line}"
            );
        }
        // Nothing was denied: no `deny:` item, and the request passed.
        assert!(items.iter().all(|i| i.starts_with("would_deny:")), "{line}");
        assert_eq!(items.len(), search.len() + 2, "{line}");
    }
    let n = cases.len() as u64;
    assert_eq!(
        gw.stat("toolsift.access.would_deny.tools"),
        n * (search.len() as u64 + 1)
    );
    assert_eq!(gw.stat("toolsift.access.would_deny.call"), n);
    assert_eq!(gw.stat("toolsift.access.rule.no-slack.would_deny"), 2 * n);
    assert_eq!(gw.stat("toolsift.access.rule.no-slack.denied"), 0);
    assert_eq!(gw.stat("toolsift.access.denied.tools"), 0);
    assert_eq!(gw.stat("toolsift.access.denied.call"), 0);
    drop(gw);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn the_shadow_is_reported_where_it_differs_and_never_enforced() {
    let log = log_path("shadow");
    let config = json!({
        "top_k": 100,
        "access": {
            "identity": [{"header": "x-group"}],
            "default": "allow",
            "rules": [{"name": "no-slack", "when": ["*"], "deny": ["send_slack_message"]}],
        },
        // The change being watched: Slack allowed, searches denied to interns.
        "access_shadow": {
            "default": "allow",
            "rules": [{"name": "interns-no-search", "when": ["interns"], "deny": ["search_*"]}],
        }
    });
    let gw = start(&config, &log);
    let (_, r) = ask(&gw, "openai_chat", false, "search_flights");
    // Enforced: the enforced policy alone (Slack gone, searches kept and callable).
    let received = upstream_log(&gw);
    let tools = tool_names("openai_chat", &received[0]["body"]);
    assert_eq!(tools.len(), 79);
    assert!(!tools.iter().any(|t| t == "send_slack_message"));
    assert!(tools.iter().any(|t| t == "search_flights"));
    assert_eq!(called("openai_chat", &r), ["search_flights"]);
    let line = &common::access_log_lines(&log, 1)[0];
    let items = verdicts(line);
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    let search = search_tools();
    assert!(
        items.contains(&"deny:tools:no-slack:send_slack_message"),
        "{line}"
    );
    assert!(
        items.contains(&"shadow_allow:tools:default:send_slack_message"),
        "{line}"
    );
    for tool in &search {
        let item = format!("shadow_deny:tools:interns-no-search:{tool}");
        assert!(items.contains(&item.as_str()), "{line}");
    }
    assert!(
        items.contains(&"shadow_deny:call:interns-no-search:search_flights"),
        "{line}"
    );
    assert_eq!(items.len(), 2 + search.len() + 1, "{line}");
    assert_eq!(
        gw.stat("toolsift.access.shadow.would_deny.tools"),
        search.len() as u64
    );
    assert_eq!(gw.stat("toolsift.access.shadow.would_allow.tools"), 1);
    assert_eq!(gw.stat("toolsift.access.shadow.would_deny.call"), 1);
    assert_eq!(gw.stat("toolsift.access.rule.no-slack.denied"), 1);
    assert_eq!(gw.stat("toolsift.access.denied.tools"), 1);
    drop(gw);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn report_only_detects_and_counts_a_loop_and_the_upstream_gets_it_unchanged() {
    let gw = Gateway::start(
        r#"{"min_tools":100,"loop_guard":{"report_only":true,"note":{"text":"Stop calling {tool}."}}}"#,
    );
    let paris = json!({"location": "Paris", "days": 1});
    let calls = [
        ("get_current_weather", paris.clone()),
        ("get_current_weather", paris),
    ];
    for (n, dialect) in ["openai_chat", "anthropic", "bedrock"]
        .into_iter()
        .enumerate()
    {
        http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        let (path, question) = request(dialect, false);
        let body = common::llm::with_calls(dialect, question, &calls);
        let r = gw.post(
            &path,
            &[
                ("x-demo-model", "scripted"),
                ("x-demo-want", "get_current_weather"),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let header = r.header("x-toolsift").unwrap_or_default();
        assert!(
            header.contains("loop=detected:get_current_weather") && !header.contains("noted="),
            "{dialect}: {header}"
        );
        let received = upstream_log(&gw);
        assert_eq!(received[0]["body"], body, "{dialect}: the body was changed");
        assert!(!received[0]["body"].to_string().contains("Stop calling"));
        assert_eq!(gw.stat("toolsift.loop.detected"), n as u64 + 1);
    }
    assert_eq!(gw.stat("toolsift.loop.evicted"), 0);
    assert_eq!(gw.stat("toolsift.loop.noted"), 0);
}

#[test]
fn an_enforcing_loop_guard_counts_what_it_detects() {
    let gw = Gateway::start(r#"{"top_k":5,"loop_guard":{}}"#);
    let paris = json!({"location": "Paris", "days": 1});
    let calls = [
        ("get_current_weather", paris.clone()),
        ("get_current_weather", paris),
    ];
    let (path, question) = request("openai_chat", false);
    let body = common::llm::with_calls("openai_chat", question, &calls);
    let r = gw.post(&path, &[], body.to_string().as_bytes());
    let header = r.header("x-toolsift").unwrap_or_default();
    assert!(
        header.contains("loop=evicted:get_current_weather"),
        "{header}"
    );
    assert_eq!(gw.stat("toolsift.loop.detected"), 1);
    assert_eq!(gw.stat("toolsift.loop.evicted"), 1);
}
