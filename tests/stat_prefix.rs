//! `stat_prefix`: every stat a plugin defines named under it (`<prefix>.toolsift.*`), as Envoy's
//! own filters name theirs, and the shipped `toolsift_plugin` tag turning the prefix into a
//! Prometheus label; its log lines headed with it; a bad one stopping Envoy. Two plugins in one
//! Envoy (a filter-mode route and an MCP route) are tests/mcp/test_stat_prefix.py.

use crate::common;

use common::llm::request;
use common::{Gateway, envoy_refuses};
use serde_json::json;

/// The tool the scripted model calls: 9th for the question among the 80 fixture tools
/// (tests/shadow.rs).
const NINTH: &str = "merge_pull_request";

/// `/stats/prometheus` once its sample `series` counts something (histograms come with the
/// stats flush, every 5 s), or after 20 s.
fn prometheus_once(gw: &Gateway, series: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = gw.admin_get("/stats/prometheus");
        if sample(&text, series).is_some_and(|n| n > 0) || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// The value of the Prometheus sample `series` (name and labels, as Envoy writes them).
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

#[test]
fn every_stat_of_a_prefixed_plugin_is_named_under_its_prefix_and_labelled_by_it() {
    // Shadowed (a histogram with buckets of its own in envoy.yaml) and audited (counters the
    // access rules define at run time): every kind of stat the plugin defines.
    let config = json!({
        "stat_prefix": "llm",
        "top_k": 5,
        "debug": true,
        "shadow": {"sample": 1},
        "access": {
            "mode": "audit",
            "identity": [{"header": "x-group"}],
            "default": "allow",
            "rules": [{"name": "no-merge", "when": ["*"], "deny": [NINTH]}]
        }
    });
    // The per-request lines are at debug level (`debug: true`), Envoy's `wasm` logger too.
    let debug = ["--component-log-level", "wasm:debug"];
    let gw = Gateway::start_with(&config.to_string(), &debug, |yaml| yaml);
    let (path, body) = request("openai_chat", false);
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-call", NINTH),
        ("x-group", "interns"),
    ];
    let r = gw.post(&path, &headers, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=80 total=80 denied=0 shadow=would_keep:5")
    );
    // /stats: under the prefix, and nothing left outside it.
    assert_eq!(gw.stat("llm.toolsift.requests"), 1);
    assert_eq!(gw.stat("llm.toolsift.tools_in"), 80);
    assert_eq!(gw.stat("llm.toolsift.shadow.requests"), 1);
    assert_eq!(gw.stat("llm.toolsift.shadow.missed"), 1);
    assert_eq!(gw.stat("llm.toolsift.access.would_deny.call"), 1);
    assert_eq!(gw.stat("llm.toolsift.access.rule.no-merge.would_deny"), 2);
    let stats = gw.admin_get("/stats");
    let unprefixed: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("wasmcustom.toolsift."))
        .collect();
    assert!(unprefixed.is_empty(), "{unprefixed:?}");
    assert!(stats.contains("wasmcustom.llm.toolsift.skipped.few_tools: 0"));
    assert!(stats.contains("wasmcustom.llm.toolsift.embeddings.fallback."));
    // /stats/prometheus: toolsift's names, the plugin a label (the shipped `toolsift_plugin`
    // tag); the shadow histogram with envoy.yaml's buckets (3 is none of Envoy's defaults).
    let count = "toolsift_shadow_call_rank_count{toolsift_plugin=\"llm\"}";
    let text = prometheus_once(&gw, count);
    let llm = |name: &str| sample(&text, &format!("{name}{{toolsift_plugin=\"llm\"}}"));
    assert_eq!(llm("toolsift_requests"), Some(1), "{text}");
    assert_eq!(llm("toolsift_tools_in"), Some(80));
    assert_eq!(llm("toolsift_access_would_deny_call"), Some(1));
    assert_eq!(llm("toolsift_shadow_call_rank_count"), Some(1));
    let bucket = |le: &str| {
        sample(
            &text,
            &format!("toolsift_shadow_call_rank_bucket{{toolsift_plugin=\"llm\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("8"), Some(0), "{text}");
    assert_eq!(bucket("9"), Some(1));
    assert_eq!(bucket("3"), Some(0));
    assert!(
        !text
            .lines()
            .any(|l| l.contains("llm_toolsift") || l.starts_with("toolsift_requests ")),
        "{text}"
    );
    // Its log lines name it: what it logs when configured, and what it logs per request.
    let log = gw.log_containing("[llm] toolsift: access");
    assert!(log.contains("[llm] configured: top_k=5"), "{log}");
    assert!(log.contains("[llm] toolsift: access would_deny"), "{log}");
}

#[test]
fn a_bad_stat_prefix_keeps_envoy_from_starting() {
    for prefix in ["a.b", &"p".repeat(65)] {
        let config = json!({ "stat_prefix": prefix }).to_string();
        let (refused, log) = envoy_refuses(&config);
        assert!(refused, "Envoy started with {config}");
        assert!(log.contains("field `stat_prefix`"), "{config}:\n{log}");
    }
}
