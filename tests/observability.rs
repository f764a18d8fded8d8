//! The shipped Grafana dashboard and Prometheus alert rules (deploy/observability/) against a
//! real Envoy's `/stats/prometheus`: one Envoy, the real `.wasm`, one listener per plugin
//! configuration (one VM: the same `vm_config`), and traffic that moves every panel: filter
//! mode, skips of several reasons, shadowed requests with calls in their answers, access rules
//! denying and auditing, the loop guard, made-up tools, search mode's rounds and a search storm,
//! hybrid ranking whose embeddings service is down. The scrape is read with
//! `prometheus_client`'s parser; every metric each panel's and rule's expression reads must be
//! there with the labels it uses, and must have counted something (a VM reload aside: only a
//! trap makes one). With `TOOLSIFT_DASHBOARD_PNG=PATH` the run also draws the dashboard's
//! panels from that scrape (docs/book/src/images/dashboard.png, the book's Monitoring page).

use crate::common;

use common::llm::{request, with_calls};
use common::{Gateway, Response, repo};
use promql::{Sample, Selector};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "../benches/shared/listeners.rs"]
mod listeners;
mod picture;
mod promql;

const DASHBOARD: &str = "deploy/observability/grafana-dashboard.json";
const ALERTS: &str = "deploy/observability/alerts.yaml";

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
];

/// The alerts the rules must have.
const RULES: &[&str] = &[
    "ToolsiftShadowMissesAboveTarget",
    "ToolsiftFailOpenSkipsRising",
    "ToolsiftWasmVmReloaded",
    "ToolsiftEmbeddingsFailing",
];

/// Series no test traffic can move: a VM reload needs the filter to trap.
const NEVER_MOVED: &[&str] = &["envoy_wasm_.+_vm_reload"];

/// The skip reasons the traffic makes, each counted in `toolsift.skipped.<reason>`.
const SKIPS: &[&str] = &["no_tools", "few_tools", "malformed_json", "not_llm"];

/// The Grafana variables, as the test sets them: every plugin, the rate window, k = 5.
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

/// The admin's `/stats/prometheus`, read by prometheus_client's parser.
fn scrape(gw: &Gateway) -> Vec<Sample> {
    let text = gw.admin_get("/stats/prometheus");
    let python = repo().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} not found: `make test` installs the test packages",
        python.display()
    );
    let mut child = std::process::Command::new(python)
        .arg(repo().join("tests/observability/parse_scrape.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "prometheus_client refused the scrape: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    parsed
        .into_iter()
        .map(|s| Sample {
            name: s["name"].as_str().unwrap().to_owned(),
            labels: serde_json::from_value(s["labels"].clone()).unwrap(),
            value: s["value"].as_f64().unwrap(),
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

/// Traffic that moves every panel, each step checked as it goes.
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

    // Shadow: every request forwarded uncut, the answer's call measured (9th: missed; 2nd: kept).
    for call in ["merge_pull_request", "get_weather_forecast"] {
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

/// The scrape once Envoy's stats flush (every 5 s) has published the histograms.
fn flushed_scrape(gw: &Gateway) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let scrape = scrape(gw);
        let count = |name: &str| -> f64 {
            scrape
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.value)
                .sum()
        };
        if count("toolsift_filter_time_us_count") > 0.0
            && count("toolsift_shadow_call_rank_count") >= 2.0
            || Instant::now() > deadline
        {
            return scrape;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What is wrong with `query` against `scrape`, or that it counted nothing.
fn query_problems(query: &Query, scrape: &[Sample], optional: &[&str]) -> Vec<String> {
    let expr = substituted(&query.expr);
    let mut out = promql::problems(&expr, scrape, optional);
    for selector in promql::analyse(&expr).selectors {
        let never = selector
            .matchers
            .iter()
            .any(|m| m.label == "__name__" && NEVER_MOVED.contains(&m.value.as_str()));
        if !never && promql::total(&selector, scrape) <= 0.0 {
            out.push(format!("{}: nothing counted", selector.text()));
        }
    }
    out.into_iter()
        .map(|p| format!("{} ({}): {p}", query.panel, query.legend))
        .collect()
}

#[test]
fn every_panel_and_alert_rule_reads_metrics_a_real_envoy_exports() {
    let prefix = has_stat_prefix();
    let configs = listener_configs(prefix);
    let (gw, ports) = start(&configs);
    drive(&ports);
    let scrape = flushed_scrape(&gw);
    assert!(!gw.log_text().contains("panicked"), "{}", gw.log_text());
    for reason in SKIPS {
        let skipped = Selector {
            name: Some(format!("toolsift_skipped_{reason}")),
            matchers: Vec::new(),
        };
        assert!(
            promql::total(&skipped, &scrape) > 0.0,
            "{reason} not counted"
        );
    }

    let dashboard = dashboard();
    let mut queries = dashboard_queries(&dashboard);
    queries.extend(rule_queries());
    // Without per-plugin stats the plugin label is absent, and grouping by it harmless.
    let optional: &[&str] = if prefix { &[] } else { &["toolsift_plugin"] };
    let problems: Vec<String> = queries
        .iter()
        .flat_map(|q| query_problems(q, &scrape, optional))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    if prefix {
        // Each listener's stats under its own plugin label.
        for (name, _) in &configs {
            let requests = Selector {
                name: Some("toolsift_requests".into()),
                matchers: vec![promql::Matcher {
                    label: "toolsift_plugin".into(),
                    op: "=".into(),
                    value: (*name).into(),
                }],
            };
            assert!(
                promql::total(&requests, &scrape) > 0.0,
                "{name}: no requests"
            );
        }
    }
    if let Ok(path) = std::env::var("TOOLSIFT_DASHBOARD_PNG") {
        let svg = picture::dashboard_svg(&dashboard, &scrape, substituted);
        picture::write_png(&repo().join(path), &svg);
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

/// The check itself fails where it should: a misspelt metric, a label no series has, a
/// grouping label nothing carries, an unknown function, a `_total` Prometheus would not have.
#[test]
fn the_expression_check_finds_what_is_missing() {
    let sample = |name: &str, labels: &[(&str, &str)], value: f64| Sample {
        name: name.to_owned(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        value,
    };
    let scrape = vec![
        sample("toolsift_requests", &[], 3.0),
        sample("toolsift_skipped_no_tools", &[], 1.0),
        sample("toolsift_filter_time_us_bucket", &[("le", "5")], 1.0),
    ];
    let fine = [
        r#"sum by (toolsift_plugin) (rate(toolsift_requests{toolsift_plugin=~".*"}[5m]))"#,
        r#"sum by (reason) (rate(label_replace({__name__=~"toolsift_skipped_.+"}, "reason", "$1", "__name__", "toolsift_skipped_(.+)")[5m:]))"#,
        r#"histogram_quantile(0.99, sum by (le) (rate(toolsift_filter_time_us_bucket[5m])))"#,
        r#"sum by (instance) (toolsift_requests) > 0 and toolsift_requests"#,
    ];
    for expr in fine {
        assert_eq!(
            promql::problems(expr, &scrape, &["toolsift_plugin"]),
            Vec::<String>::new(),
            "{expr}"
        );
    }
    let wrong = [
        ("rate(toolsift_request[5m])", "matches no series"),
        ("rate(toolsift_requests_total[5m])", "matches no series"),
        (r#"toolsift_requests{route="chat"}"#, "matches no series"),
        (
            r#"rate({__name__=~"toolsift_skip_.+"}[5m])"#,
            "matches no series",
        ),
        (
            "sum by (reason) (rate(toolsift_requests[5m]))",
            "grouped by reason",
        ),
        (
            "sum by (toolsift_plugin) (toolsift_requests)",
            "grouped by toolsift_plugin",
        ),
        (
            r#"toolsift_requests{toolsift_plugin="chat"}"#,
            "no series carries the label",
        ),
    ];
    for (expr, problem) in wrong {
        let found = promql::problems(expr, &scrape, &[]);
        assert!(
            found.iter().any(|p| p.contains(problem)),
            "{expr}: {found:?}"
        );
    }
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
