//! The shipped Grafana dashboard and Prometheus alert rules (deploy/observability/) in a real
//! Prometheus (Debian's package: `make prometheus`) scraping real Envoys with the real `.wasm`.
//! One Envoy has a listener per plugin configuration (one VM: the same `vm_config`), a second
//! one `auto_k`; the traffic moves every panel: filter mode, skips of several reasons,
//! shadowed requests with calls in their answers, access rules denying and auditing, the loop
//! guard, made-up tools, search mode's rounds and a search storm, hybrid ranking whose
//! embeddings service is down, and auto_k from `top_k` through the pooled k to a calibrated k
//! capped at `max_k`. Every query of the dashboard (its variables set as Grafana sets them) and
//! every rule's expression goes through Prometheus's `/api/v1/query`: each must evaluate, and
//! each the traffic moved must return data, with the labels its legend names; every rule must
//! load healthy, and those the traffic trips must be pending. `promtool test rules` runs the
//! rules' unit tests (alerts_test.yaml). With `TOOLSIFT_DASHBOARD_PNG=PATH` the run also draws
//! the dashboard's panels from Prometheus's answers (docs/book/src/images/dashboard.png, the
//! book's Monitoring page).

use crate::common;

use common::llm::{request, with_calls};
use common::{Gateway, Response, repo};
use prometheus::{Prometheus, Series};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

#[path = "../benches/shared/listeners.rs"]
mod listeners;
mod picture;
mod prometheus;
mod promql;

const DASHBOARD: &str = "deploy/observability/grafana-dashboard.json";
const ALERTS: &str = "deploy/observability/alerts.yaml";
const ALERT_TESTS: &str = "deploy/observability/alerts_test.yaml";

/// The panels the dashboard must have (issue 47's list), by title.
const PANELS: &[&str] = &[
    "Requests by outcome",
    "Tools in and out per second",
    "Tokens saved per second",
    "Filter time p50 and p99",
    "Shadow: share of called tools within top_k",
    "Shadow: calls and misses per second",
    "Access denials by surface",
    "Access would-denials by surface (audit)",
    "Loops, unknown tools, search rounds and storms",
    "Skipped requests by reason",
    "auto_k: k chosen per plugin",
    "auto_k: where k came from, and capped",
    "auto_k: shadowed calls kept against keep",
];

/// The alerts the rules must have.
const RULES: &[&str] = &[
    "ToolsiftShadowMissesAboveTarget",
    "ToolsiftFailOpenSkipsRising",
    "ToolsiftWasmVmReloaded",
    "ToolsiftWasmVmsCreated",
    "ToolsiftEmbeddingsFailing",
    "ToolsiftAutoKRecallBelowTarget",
];

/// Series the test's traffic cannot move: a VM reload needs the filter to trap, and every VM
/// was created before Prometheus's first scrape. Their queries must evaluate, and the series
/// be there, but may return nothing (or zero).
const UNMOVED: &[&str] = &[
    "envoy_wasm_.+_vm_reload",
    "envoy_wasm_envoy_wasm_runtime_v8_created",
];

/// The rules the traffic trips (pending: each has a `for` longer than the run), and those it
/// cannot (the same VM series).
const TRIPPED: &[&str] = &[
    "ToolsiftShadowMissesAboveTarget",
    "ToolsiftFailOpenSkipsRising",
    "ToolsiftEmbeddingsFailing",
    "ToolsiftAutoKRecallBelowTarget",
];
const QUIET: &[&str] = &["ToolsiftWasmVmReloaded", "ToolsiftWasmVmsCreated"];

/// The skip reasons the traffic makes, each counted in `toolsift.skipped.<reason>`.
const SKIPS: &[&str] = &["no_tools", "few_tools", "malformed_json", "not_llm"];

/// The Grafana variables, as Grafana sets them for the test: every plugin (`All`, whose
/// `allValue` is `.*`), a rate window longer than the run, k = 5.
fn substituted(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$plugin", ".*")
        .replace("$k", "5")
}

/// One query of the dashboard or one rule: where it is, and its expression.
pub struct Query {
    pub panel: String,
    pub legend: String,
    pub expr: String,
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join(DASHBOARD)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            out.push(Query {
                panel: title.to_owned(),
                legend: target["legendFormat"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                expr: target["expr"].as_str().unwrap().to_owned(),
            });
        }
    }
    out
}

fn rules() -> Vec<Value> {
    let docs = common::yaml::load_file(ALERTS);
    assert_eq!(docs.len(), 1, "{ALERTS}: one document");
    docs[0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

fn rule_queries() -> Vec<Query> {
    rules()
        .iter()
        .map(|r| Query {
            panel: format!("alert {}", r["alert"].as_str().unwrap()),
            legend: String::new(),
            expr: r["expr"].as_str().unwrap().to_owned(),
        })
        .collect()
}

/// Whether `toolsift schema` knows `stat_prefix` (per-plugin stats): then each listener gets
/// its own, and the `toolsift_plugin` label must be on every toolsift series.
fn has_stat_prefix() -> bool {
    let (code, schema) = common::toolsift(&["schema"]);
    assert_eq!(code, 0, "{schema}");
    schema.contains("\"stat_prefix\"")
}

/// The stats tag that names a plugin's `stat_prefix` (`wasmcustom.P.toolsift.x` becomes
/// `toolsift_x{toolsift_plugin="P"}`), added when the rendered configuration lacks it.
fn with_plugin_tag(yaml: String) -> String {
    if yaml.contains("toolsift_plugin") {
        return yaml;
    }
    yaml.replacen(
        "stats_config:\n",
        "stats_config:\n  stats_tags:\n  - tag_name: toolsift_plugin\n    regex: '^wasmcustom\\.((\\w+)\\.)toolsift\\.'\n",
        1,
    )
}

/// Each listener's name and plugin configuration.
fn listener_configs(prefix: bool) -> Vec<(&'static str, Value)> {
    let access = |mode: &str| {
        json!({"top_k": 5, "access": {
            "mode": mode,
            "identity": [{"header": "x-group"}],
            "default": "allow",
            "rules": [
                {"name": "no-slack", "when": ["*"], "deny": ["send_slack_message"]},
                {"name": "lockout", "when": ["blocked"], "deny": ["*"]}
            ]
        }})
    };
    let mut out = vec![
        (
            "filter",
            json!({"top_k": 5, "min_tools": 20, "loop_guard": {}}),
        ),
        ("shadow", json!({"top_k": 5, "shadow": {"sample": 1}})),
        ("access", access("enforce")),
        ("audit", access("audit")),
        (
            "search",
            json!({"mode": "search", "min_tools": 20,
                   "search": {"hold_headers": true, "max_searches": 1, "max_search_rounds": 5}}),
        ),
        (
            "hybrid",
            json!({"top_k": 5, "ranking": "hybrid",
                   "embeddings": {"cluster": "embeddings", "model": "all-MiniLM-L6-v2",
                                  "timeout_ms": 300}}),
        ),
        (
            // The demo upstream plays a working embeddings service.
            "hybrid_ok",
            json!({"top_k": 5, "ranking": "hybrid",
                   "embeddings": {"cluster": "llm", "path": "/embeddings/ok",
                                  "model": "all-MiniLM-L6-v2", "dimensions": 16, "max_batch": 128,
                                  "timeout_ms": 5000}}),
        ),
    ];
    if prefix {
        for (name, config) in &mut out {
            config["stat_prefix"] = json!(name);
        }
    }
    out
}

/// The second Envoy's plugin: `auto_k` on shadowed traffic (every request shadowed, so that the
/// run is short), a target (0.95) that a call of the 9th tool puts past `max_k`.
fn auto_k_config(prefix: bool) -> Vec<(&'static str, Value)> {
    let mut config = json!({"top_k": 3, "min_tools": 10, "shadow": {"sample": 1},
        "auto_k": {"keep": 0.95, "min_calls": 20, "max_k": 6, "period_s": 1}});
    // The same with the fleet's calibration: the fixture request's catalog has calls of its
    // own there (all in slot 2), and every catalog's pooled calls send another to slot 4.
    let (_, question) = request("openai_chat", false);
    let names = question["tools"].as_array().unwrap().iter();
    let catalog = toolsift::shadow::catalog_name(toolsift::rank::catalog_id(
        names.map(|t| t["function"]["name"].as_str().unwrap()),
    ));
    let mut fleet = config.clone();
    fleet["auto_k"]["calibration"] = json!({"version": 1, "max_k": 6,
        "pooled": {"calls": 200, "slots": [[2, 100], [4, 100]]},
        "catalogs": [{"catalog": catalog, "calls": 100, "slots": [[2, 100]]}]});
    if prefix {
        config["stat_prefix"] = json!("auto_k");
        fleet["stat_prefix"] = json!("auto_k_fleet");
    }
    vec![("auto_k", config), ("auto_k_fleet", fleet)]
}

/// One Envoy with a listener per configuration; the ports by listener name. The `embeddings`
/// cluster points at a port nothing listens on.
fn start(configs: &[(&'static str, Value)]) -> (Gateway, BTreeMap<&'static str, u16>) {
    let first = configs[0].1.to_string();
    let mut ports = BTreeMap::new();
    // Its own Envoy: the test reads /stats/prometheus whole.
    let gw = Gateway::start_alone_rendered(&[], |p| {
        let yaml = common::render_envoy_yaml(&first, p.listener, p.admin, p.upstream);
        ports.clear();
        ports.insert(configs[0].0, p.listener);
        let mut copies = String::new();
        for (name, config) in &configs[1..] {
            let port = Gateway::free_port();
            ports.insert(*name, port);
            let to = config.to_string();
            copies.push_str(&listeners::listener_copy(
                &yaml,
                &format!("llm_{name}"),
                port,
                Some((&first, &to)),
            ));
        }
        let closed = Gateway::free_port();
        let yaml = yaml
            .replacen("  clusters:", &format!("{copies}  clusters:"), 1)
            .replace("port_value: 18100", &format!("port_value: {closed}"));
        with_plugin_tag(yaml)
    });
    (gw, ports)
}

fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    common::http(port, "POST", path, &all, body.to_string().as_bytes())
}

fn x_toolsift(r: &Response) -> String {
    r.header("x-toolsift").unwrap_or_default().to_owned()
}

/// The scripted model (the demo upstream) wanting the weather and calling `call`.
fn scripted<'a>(call: &'a str, group: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-call", call),
        ("x-group", group),
    ]
}

/// Traffic that moves every panel but auto_k's, each step checked as it goes.
fn drive(ports: &BTreeMap<&str, u16>) {
    let (chat, question) = request("openai_chat", false);
    let paris = json!({"location": "Paris", "days": 1});

    // Filter mode, in three dialects: cut to 5 of 80.
    let filter = ports["filter"];
    for dialect in ["openai_chat", "anthropic", "gemini"] {
        let (path, body) = request(dialect, false);
        let r = post(filter, &path, &[], &body);
        assert_eq!(x_toolsift(&r), "kept=5 total=80", "{dialect}: {}", r.text());
    }
    // The same call twice (a loop, evicted), and a call of a tool that does not exist.
    for (second, expected) in [
        ("get_current_weather", "loop=evicted:get_current_weather"),
        ("get_weather_now", "unknown=get_weather_now"),
    ] {
        let calls = [
            ("get_current_weather", paris.clone()),
            (second, paris.clone()),
        ];
        let body = with_calls("openai_chat", question.clone(), &calls);
        let header = x_toolsift(&post(filter, &chat, &[], &body));
        assert!(header.contains(expected), "{header}");
    }
    // Skips: no tools, few tools (under min_tools), a body that is not JSON, not an LLM path
    // (checked in the scrape: `SKIPS`).
    let mut no_tools = question.clone();
    no_tools.as_object_mut().unwrap().remove("tools");
    let mut few = question.clone();
    few["tools"] = json!(question["tools"].as_array().unwrap()[..3]);
    for (path, body) in [
        (chat.as_str(), no_tools.to_string()),
        (chat.as_str(), few.to_string()),
        (
            chat.as_str(),
            r#"{"model": "gpt-4o", "tools": ["#.to_owned(),
        ),
        ("/not/an/llm/api", "{}".to_owned()),
    ] {
        let r = common::http(
            filter,
            "POST",
            path,
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert!(r.status < 500, "{path}: {} {}", r.status, r.text());
    }

    // Shadow: every request forwarded uncut, the answer's call measured (9th: missed; 2nd:
    // kept): half missed, over more calls than the shadow-miss alert needs (20).
    for i in 0..SHADOW_CALLS {
        let call = AUTO_K_CALLS[i % 2];
        let r = post(ports["shadow"], &chat, &scripted(call, "staff"), &question);
        assert!(x_toolsift(&r).contains("shadow="), "{}", x_toolsift(&r));
    }

    // An answer shadow cannot read: the scripted model refuses a request without its header.
    let r = post(
        ports["shadow"],
        &chat,
        &[("x-demo-model", "scripted")],
        &question,
    );
    assert_eq!(r.status, 400, "{}", r.text());

    // Access rules, enforced and audited: a denied tool and the model's call of it; a caller
    // refused whole.
    for name in ["access", "audit"] {
        let r = post(
            ports[name],
            &chat,
            &scripted("send_slack_message", "interns"),
            &question,
        );
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        let r = post(
            ports[name],
            &chat,
            &scripted("get_current_weather", "blocked"),
            &question,
        );
        let expected = if name == "access" { 403 } else { 200 };
        assert_eq!(r.status, expected, "{name}: {}", r.text());
    }

    // Search mode: a made-up call answered to the model, then a model that keeps searching
    // past `max_searches` (a storm).
    let search = ports["search"];
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-call", "get_weather_now"),
        ("x-demo-script", "search"),
    ];
    let r = post(search, &chat, &headers, &question);
    assert_eq!(r.status, 200, "{}", r.text());
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
        ("x-demo-script", "always-search"),
    ];
    let r = post(search, &chat, &headers, &question);
    assert_eq!(r.status, 200, "{}", r.text());

    // Hybrid ranking, the embeddings service down: ranked by keyword; and up.
    let r = post(ports["hybrid"], &chat, &[], &question);
    assert!(
        x_toolsift(&r).contains("fallback=status"),
        "{}",
        x_toolsift(&r)
    );
    let r = post(ports["hybrid_ok"], &chat, &[], &question);
    assert!(
        x_toolsift(&r).contains("ranking=hybrid"),
        "{}",
        x_toolsift(&r)
    );
}

/// The tools the scripted model calls in the shadow and auto_k traffic, in turn: the 9th for
/// the fixture question, which `top_k` 5 and a k capped at 6 miss, and the 2nd, which any k
/// keeps.
const AUTO_K_CALLS: [&str; 2] = ["merge_pull_request", "get_weather_forecast"];

/// Shadowed requests to the plugin without auto_k.
const SHADOW_CALLS: usize = 24;

/// Shadowed requests to the auto_k plugin: the first with `top_k` (no calls yet), then, after
/// two periods, a catalog of its own with the pooled k, and the first catalog's own k, capped at
/// `max_k` (the target needs the 9th tool). Half the calls are kept: below `keep`, over more
/// calls than the recall alert needs (200). Returns the shadowed calls made.
fn drive_auto_k(port: u16) -> usize {
    let (chat, question) = request("openai_chat", false);
    // Another catalog: the same tools less the last one.
    let mut other = question.clone();
    other["tools"].as_array_mut().unwrap().pop();
    let mut sources = std::collections::BTreeSet::new();
    let mut calls = 0;
    let mut ask = |body: &Value, n: usize| {
        for i in 0..n {
            let r = post(port, &chat, &scripted(AUTO_K_CALLS[i % 2], "staff"), body);
            let header = x_toolsift(&r);
            assert!(header.contains(" shadow="), "{header}");
            let k = header.split(' ').find_map(|i| i.strip_prefix("k="));
            let source = k.unwrap_or_else(|| panic!("no k= in {header}"));
            sources.insert(source.split(':').next().unwrap().to_owned());
            if header.contains(" capped=") {
                sources.insert("capped".to_owned());
            }
            calls += 1;
        }
    };
    ask(&question, 24);
    // A k changes once more than `period_s` whole seconds have passed.
    std::thread::sleep(Duration::from_millis(2100));
    ask(&other, 4);
    ask(&question, 190);
    for source in ["default", "pooled", "auto", "capped"] {
        assert!(sources.contains(source), "no {source} k: {sources:?}");
    }
    calls
}

/// Requests to the plugin with the fleet's calibration: the fixture's catalog with the fleet's
/// own k, another with the fleet's pooled k. Returns the shadowed calls made.
fn drive_fleet(port: u16) -> usize {
    let (chat, question) = request("openai_chat", false);
    let mut other = question.clone();
    other["tools"].as_array_mut().unwrap().pop();
    for (body, k) in [(&question, "k=fleet:2"), (&other, "k=fleet_pooled:4")] {
        for _ in 0..3 {
            let r = post(port, &chat, &scripted(AUTO_K_CALLS[1], "staff"), body);
            let header = x_toolsift(&r);
            assert!(header.contains(k), "{k}: {header}");
        }
    }
    6
}

/// `{{label}}`s of a legend.
fn legend_labels(legend: &str) -> Vec<&str> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|part| part.split_once("}}").map(|(label, _)| label.trim()))
        .collect()
}

/// What is wrong with `query` as Prometheus answers it: an error; no series, or none that
/// counted something, for a query the traffic moved; a series its legend cannot name
/// (`optional` labels let go).
fn query_problems(prometheus: &Prometheus, query: &Query, optional: &[&str]) -> Vec<String> {
    let expr = substituted(&query.expr);
    let at = |problem: String| format!("{} ({}): {problem}\n  {expr}", query.panel, query.legend);
    let answer = match prometheus.query(&expr) {
        Ok(answer) => answer,
        Err(e) => return vec![at(e)],
    };
    let analysis = promql::analyse(&expr);
    let unmoved = analysis.selectors.iter().any(|s| {
        let by_name = s.matchers.iter().find(|m| m.label == "__name__");
        let name = s.name.as_deref().or(by_name.map(|m| m.value.as_str()));
        name.is_some_and(|n| UNMOVED.contains(&n))
    });
    let mut out = Vec::new();
    if unmoved {
        // Nothing to count, but the series it reads are there.
        for selector in &analysis.selectors {
            match prometheus.query(&selector.text()) {
                Ok(found) if !found.is_empty() => {}
                Ok(_) => out.push(at(format!("{} matches no series", selector.text()))),
                Err(e) => out.push(at(e)),
            }
        }
    } else if !answer.iter().any(|s| s.value.is_finite() && s.value > 0.0) {
        out.push(at(format!("no data, or nothing counted: {answer:?}")));
    }
    let legend = substituted(&query.legend);
    for label in legend_labels(&legend) {
        let unnamed = |s: &&Series| s.labels.get(label).is_none_or(String::is_empty);
        if !optional.contains(&label) && answer.iter().any(|s| unnamed(&s)) {
            out.push(at(format!(
                "a series without the legend's {label}: {answer:?}"
            )));
        }
    }
    out
}

#[test]
fn a_real_prometheus_evaluates_every_panel_and_alert_rule_over_real_envoys() {
    let prefix = has_stat_prefix();
    let configs = listener_configs(prefix);
    let (gw, ports) = start(&configs);
    let (auto_gw, auto_ports) = start(&auto_k_config(prefix));
    let dir = repo().join(format!(
        "target/test-scratch/prometheus-{}-{}",
        std::process::id(),
        Gateway::free_port()
    ));
    let prometheus = Prometheus::start(&dir, &[gw.admin, auto_gw.admin], &repo().join(ALERTS));
    // Every target scraped before the traffic: each counter's increase starts from its zero.
    for target in prometheus.targets_up(2) {
        assert_eq!(target["lastError"], "", "{target}");
    }
    drive(&ports);
    let auto_k_calls = drive_auto_k(auto_ports["auto_k"]) + drive_fleet(auto_ports["auto_k_fleet"]);
    for (gw, name) in [(&gw, "first"), (&auto_gw, "auto_k")] {
        assert!(
            !gw.log_text().contains("panicked"),
            "{name}: {}",
            gw.log_text()
        );
    }
    // Envoy publishes histograms at its stats flush (every 5 s); Prometheus scrapes each second.
    let published = [
        ("sum(toolsift_filter_time_us_count)", 1),
        (
            "sum(toolsift_shadow_call_rank_count)",
            SHADOW_CALLS + auto_k_calls,
        ),
        ("sum(toolsift_auto_k_k_count)", auto_k_calls),
    ];
    for (expr, at_least) in published {
        let seen = prometheus.wait_for(expr, Duration::from_secs(30), |v| v >= at_least as f64);
        assert!(seen, "{expr} < {at_least}: {:?}", prometheus.query(expr));
    }
    // Each rule the traffic trips pending (or firing) at an evaluation since. Without
    // per-plugin stats the two Envoys' plugins are one series, auto_k's among them, and the
    // shadow-miss alert leaves it to auto_k's.
    let tripped_rules: Vec<&str> = TRIPPED
        .iter()
        .copied()
        .filter(|name| prefix || *name != "ToolsiftShadowMissesAboveTarget")
        .collect();
    let tripped = || {
        let rules = prometheus.rules();
        tripped_rules
            .iter()
            .all(|name| rules.get(*name).is_some_and(|r| r["state"] != "inactive"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !tripped() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }

    for reason in SKIPS {
        let expr = format!("sum(toolsift_skipped_{reason})");
        let counted = prometheus.query(&expr).unwrap();
        assert!(
            counted.iter().any(|s| s.value > 0.0),
            "{reason} not counted"
        );
    }
    if prefix {
        // Each listener's stats under its own plugin label.
        let answer = prometheus
            .query("sum by (toolsift_plugin) (toolsift_requests)")
            .unwrap();
        for (name, _) in configs.iter().chain(&auto_k_config(prefix)) {
            let requests = answer
                .iter()
                .find(|s| s.labels.get("toolsift_plugin").map(String::as_str) == Some(*name));
            assert!(
                requests.is_some_and(|s| s.value > 0.0),
                "{name}: no requests"
            );
        }
    }

    let dashboard = dashboard();
    let mut queries = dashboard_queries(&dashboard);
    queries.extend(rule_queries());
    // Without per-plugin stats the plugin label is absent, and grouping by it harmless.
    let optional: &[&str] = if prefix { &[] } else { &["toolsift_plugin"] };
    let mut problems: Vec<String> = queries
        .iter()
        .flat_map(|q| query_problems(&prometheus, q, optional))
        .collect();
    let rules = prometheus.rules();
    for name in RULES {
        let Some(rule) = rules.get(*name) else {
            problems.push(format!("Prometheus did not load {name}"));
            continue;
        };
        if rule["health"] != "ok" {
            problems.push(format!(
                "{name}: health {} {}",
                rule["health"], rule["lastError"]
            ));
        }
        let state = rule["state"].as_str().unwrap_or_default();
        if tripped_rules.contains(name) && state == "inactive" {
            problems.push(format!("{name}: not tripped by the traffic"));
        }
        if QUIET.contains(name) && state != "inactive" {
            problems.push(format!("{name}: {state}: {}", rule["alerts"]));
        }
    }
    if prefix {
        // One alert per cause: the shadow-miss alert for the plugin without auto_k, the auto_k
        // alert for the one with it, though both plugins miss half their calls.
        for (name, only) in [
            ("ToolsiftShadowMissesAboveTarget", "shadow"),
            ("ToolsiftAutoKRecallBelowTarget", "auto_k"),
        ] {
            let plugins: Vec<&str> = rules.get(name).map_or(Vec::new(), |rule| {
                rule["alerts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| a["labels"]["toolsift_plugin"].as_str().unwrap_or_default())
                    .collect()
            });
            if plugins != [only] {
                problems.push(format!(
                    "{name}: alerts for plugins {plugins:?}, not [{only:?}]"
                ));
            }
        }
    }
    if rules.len() != self::rules().len() {
        problems.push(format!("Prometheus loaded {:?}", rules.keys()));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    if let Ok(path) = std::env::var("TOOLSIFT_DASHBOARD_PNG") {
        let svg = picture::dashboard_svg(&dashboard, &prometheus, substituted);
        picture::write_png(&repo().join(path), &svg);
    }
}

/// The rules' unit tests, `promtool test rules` on synthetic series (alerts_test.yaml): each
/// alert fires on the series that should fire it, once its `for` has passed, and stays quiet
/// on series just below its threshold. Every rule has both kinds of case.
#[test]
fn every_alert_rule_passes_its_promtool_unit_tests() {
    let promtool = prometheus::installed(prometheus::PROMTOOL);
    for args in [["check", "rules", ALERTS], ["test", "rules", ALERT_TESTS]] {
        let output = std::process::Command::new(promtool)
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let docs = common::yaml::load_file(ALERT_TESTS);
    let cases: Vec<&Value> = docs[0]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .collect();
    for rule in RULES {
        let of_rule = |firing: bool| {
            cases.iter().any(|c| {
                c["alertname"] == *rule
                    && c["exp_alerts"]
                        .as_array()
                        .is_some_and(|a| a.is_empty() != firing)
            })
        };
        assert!(of_rule(true), "{ALERT_TESTS}: no case where {rule} fires");
        assert!(
            of_rule(false),
            "{ALERT_TESTS}: no case where {rule} stays quiet"
        );
    }
}

#[test]
fn the_dashboard_has_the_panels_and_variables_it_promises() {
    let dashboard = dashboard();
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for panel in PANELS {
        assert!(titles.contains(panel), "no panel {panel}: {titles:?}");
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "plugin", "k"]);
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        // The datasource is the variable, never a uid of someone's Grafana.
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            let expr = target["expr"].as_str().unwrap();
            // Every toolsift series is selected by the plugin variable, so that picking a
            // plugin narrows every panel; the expression parses.
            let analysis = promql::analyse(&substituted(expr));
            for selector in &analysis.selectors {
                let toolsift = selector.name.as_deref().unwrap_or_else(|| {
                    &selector
                        .matchers
                        .iter()
                        .find(|m| m.label == "__name__")
                        .unwrap()
                        .value
                });
                if toolsift.starts_with("toolsift_") {
                    assert!(
                        expr.contains(r#"toolsift_plugin=~"$plugin""#)
                            && selector
                                .matchers
                                .iter()
                                .any(|m| m.label == "toolsift_plugin"),
                        "{title}: {} without the plugin variable",
                        selector.text()
                    );
                }
            }
        }
    }
}

#[test]
fn the_alert_rules_are_named_and_explained() {
    let rules = rules();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for rule in RULES {
        assert!(names.contains(rule), "no rule {rule}: {names:?}");
    }
    for rule in &rules {
        let name = rule["alert"].as_str().unwrap();
        assert!(rule["labels"]["severity"].is_string(), "{name}: severity");
        assert!(
            rule["annotations"]["summary"].is_string(),
            "{name}: summary"
        );
        assert!(
            rule["annotations"]["description"].is_string(),
            "{name}: description"
        );
        promql::analyse(rule["expr"].as_str().unwrap());
    }
}

/// The expression reader the plugin-variable check relies on refuses what Prometheus would:
/// an unknown function, an unbalanced parenthesis, a bad range, a variable left in.
#[test]
fn the_expression_reader_refuses_broken_expressions() {
    for broken in [
        "rates(toolsift_requests[5m])",
        "sum(rate(toolsift_requests[5m])",
        "rate(toolsift_requests[5 minutes])",
        r#"rate(toolsift_requests{toolsift_plugin=~"$plugin"}[5m])"#,
    ] {
        let refused = std::panic::catch_unwind(|| promql::analyse(broken));
        assert!(refused.is_err(), "{broken} must be refused");
    }
}
