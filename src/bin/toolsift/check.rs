//! `toolsift check CONFIG.yaml…`: reads Envoy configurations (a bootstrap, or any YAML holding
//! Wasm filters, such as an Istio `EnvoyFilter`), finds every toolsift filter, parses its plugin
//! configuration with the filter's own parser, and reports what would make it misbehave, each
//! finding with its line:
//!
//! - a plugin configuration the filter would refuse (Envoy would not start);
//! - `search.hold_headers` without `allow_on_headers_stop_iteration: true` (in search mode, or
//!   with `unknown_tools.answer`);
//! - a listener (or virtual host or route) buffer limit below `max_body_bytes`;
//! - a cluster the configuration calls (hybrid ranking's `embeddings.cluster`, `gating.mcp.cluster`,
//!   `suggestions.mcp.cluster`) that is not defined;
//! - a stream idle timeout shorter than the search follow-ups (or filter mode's follow-ups for
//!   made-up calls, `unknown_tools.answer`) may need (`search.timeout_ms` ×
//!   `search.max_search_rounds`, or × `unknown_tools.max_rounds`): no byte moves on the client's stream
//!   while they run, and Envoy ends an idle stream (its route `timeout` bounds only the first
//!   answer: measured, a follow-up outlives it);
//! - a decompressor placed after toolsift in the same filter chain;
//! - `mcp` without Envoy's buffer filter after toolsift, on for the MCP routes: every request
//!   the gateway answers would reach the MCP server as its headers and a reset.
//!
//! Listener-level rules need the listener: they are applied to `static_resources` only
//! (routes from RDS and clusters from CDS are not known here).
//!
//! Exit codes: 0 clean, 1 findings, 2 a file that cannot be read as YAML.

use std::path::PathBuf;
use std::process::ExitCode;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use toolsift::config::{Config, Mode, Ranking};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Envoy configuration files (YAML; JSON is YAML too).
    #[arg(value_name = "CONFIG.yaml", required = true)]
    configs: Vec<PathBuf>,
    /// Warnings alone do not make the exit code 1 (errors still do).
    #[arg(long)]
    allow_warnings: bool,
}

const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const HCM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// Envoy's default `per_connection_buffer_limit_bytes`.
const DEFAULT_BUFFER_LIMIT: u64 = 1 << 20;
/// Envoy's default `stream_idle_timeout` of the HTTP connection manager.
const DEFAULT_STREAM_IDLE_TIMEOUT_MS: u64 = 300_000;

// ---------------------------------------------------------------------------------------------
// A YAML tree that keeps each node's line
// ---------------------------------------------------------------------------------------------

/// A YAML node and its line (1-based): a mapping value's is its key's, so a finding about
/// `configuration:` or a block scalar names the line with the key.
#[derive(Debug)]
struct Node {
    line: usize,
    value: Value,
}

#[derive(Debug)]
enum Value {
    Scalar(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
    Null,
}

impl Node {
    fn from_yaml(yaml: &MarkedYaml<'_>) -> Node {
        let value = match &yaml.data {
            YamlData::Value(Scalar::Null) | YamlData::BadValue | YamlData::Alias(_) => Value::Null,
            YamlData::Value(Scalar::Boolean(b)) => Value::Scalar(b.to_string()),
            YamlData::Value(Scalar::Integer(i)) => Value::Scalar(i.to_string()),
            YamlData::Value(Scalar::FloatingPoint(f)) => Value::Scalar(f.to_string()),
            YamlData::Value(Scalar::String(s)) => Value::Scalar(s.to_string()),
            YamlData::Representation(s, _, _) => Value::Scalar(s.to_string()),
            YamlData::Sequence(items) => Value::Seq(items.iter().map(Node::from_yaml).collect()),
            YamlData::Mapping(map) => Value::Map(
                map.iter()
                    .map(|(k, v)| {
                        let key = match Node::from_yaml(k).value {
                            Value::Scalar(s) => s,
                            _ => String::new(),
                        };
                        let mut value = Node::from_yaml(v);
                        value.line = k.span.start.line();
                        (key, value)
                    })
                    .collect(),
            ),
            YamlData::Tagged(_, inner) => return Node::from_yaml(inner),
        };
        Node {
            line: yaml.span.start.line(),
            value,
        }
    }

    fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The node at `keys`, one mapping key after the other.
    fn at(&self, keys: &[&str]) -> Option<&Node> {
        keys.iter().try_fold(self, |node, key| node.get(key))
    }

    fn str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s) => Some(s),
            _ => None,
        }
    }

    fn items(&self) -> &[Node] {
        match &self.value {
            Value::Seq(items) => items,
            _ => &[],
        }
    }

    fn children(&self) -> Vec<&Node> {
        match &self.value {
            Value::Seq(items) => items.iter().collect(),
            Value::Map(entries) => entries.iter().map(|(_, v)| v).collect(),
            _ => Vec::new(),
        }
    }

    fn is_true(&self) -> bool {
        self.str() == Some("true")
    }

    /// A whole number (`33554432`, or `"33554432"` as protobuf's JSON allows for uint64).
    fn number(&self) -> Option<u64> {
        self.str()?.trim().parse().ok()
    }
}

/// A protobuf Duration as YAML writes it (`300s`, `1.5s`), in milliseconds.
fn duration_ms(text: &str) -> Option<u64> {
    let seconds: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| (seconds * 1000.0).round() as u64)
}

fn show_bytes(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

// ---------------------------------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Severity {
    Error,
    Warning,
}

#[derive(Debug)]
struct Finding {
    line: usize,
    severity: Severity,
    message: String,
}

/// One toolsift filter found in the file.
struct Filter<'a> {
    /// The Wasm filter's `config` (root_id, vm_config, configuration, …).
    wasm: &'a Node,
    config: Option<Config>,
}

fn is_toolsift(typed_config: &Node) -> bool {
    if typed_config.get("@type").and_then(Node::str) != Some(WASM_TYPE) {
        return false;
    }
    let Some(config) = typed_config.get("config") else {
        return false;
    };
    let mentions = |keys: &[&str]| {
        config
            .at(keys)
            .and_then(Node::str)
            .is_some_and(|s| s.contains("toolsift"))
    };
    mentions(&["root_id"])
        || mentions(&["name"])
        || mentions(&["vm_config", "code", "local", "filename"])
        || mentions(&["vm_config", "code", "remote", "http_uri", "uri"])
}

/// Every toolsift Wasm filter config (`typed_config` of the filter) anywhere below `node`.
fn find_toolsift<'a>(node: &'a Node, out: &mut Vec<&'a Node>) {
    if is_toolsift(node) {
        out.push(node);
        return;
    }
    for child in node.children() {
        find_toolsift(child, out);
    }
}

/// Parses the filter's plugin configuration; a configuration the filter refuses is an error.
fn parse_filter<'a>(typed_config: &'a Node, findings: &mut Vec<Finding>) -> Filter<'a> {
    let wasm = typed_config.get("config").unwrap_or(typed_config);
    let configuration = wasm.get("configuration");
    // A StringValue (`{"@type": …StringValue, value: "…"}`), or absent: all defaults.
    let (line, json) = match configuration {
        None => (wasm.line, String::new()),
        Some(c) => match c.get("value").or(Some(c)).and_then(Node::str) {
            Some(text) => (c.get("value").map_or(c.line, |v| v.line), text.to_owned()),
            None => {
                findings.push(Finding {
                    line: c.line,
                    severity: Severity::Error,
                    message: "the plugin configuration is not a StringValue holding JSON".into(),
                });
                return Filter { wasm, config: None };
            }
        },
    };
    match Config::from_json(json.as_bytes()) {
        Ok(config) => {
            // Headers are held for search mode's follow-ups, and for filter mode's answers to
            // made-up calls (`unknown_tools.answer`).
            if config.follow_up_rounds().is_some()
                && config.search.hold_headers
                && !wasm
                    .get("allow_on_headers_stop_iteration")
                    .is_some_and(Node::is_true)
            {
                findings.push(Finding {
                    line: wasm.line,
                    severity: Severity::Warning,
                    message: "search.hold_headers without `allow_on_headers_stop_iteration: \
                              true`: each worker's first held request waits 1 s to be resumed, \
                              then the worker stops holding headers (README.md, Search mode)"
                        .into(),
                });
            }
            let passes_unknown = config.access.as_ref().is_some_and(|a| {
                a.mode == toolsift::access::Mode::Enforce
                    && a.unknown_paths == toolsift::access::UnknownPaths::Pass
            });
            if passes_unknown {
                findings.push(Finding {
                    line,
                    severity: Severity::Warning,
                    message: "access rules without `\"unknown_paths\": \"deny\"`: a request \
                              on a path toolsift does not recognise (no LLM API's, custom or \
                              MCP route's) passes ungoverned, whatever it carries (README.md, \
                              Access control)"
                        .into(),
                });
            }
            Filter {
                wasm,
                config: Some(config),
            }
        }
        Err(e) => {
            findings.push(Finding {
                line,
                severity: Severity::Error,
                message: format!("Envoy would not load this filter: {e}"),
            });
            Filter { wasm, config: None }
        }
    }
}

/// What one file holds: its findings and how many toolsift filters.
struct Report {
    findings: Vec<Finding>,
    filters: usize,
}

fn check_document(doc: &Node) -> Report {
    let mut findings = Vec::new();
    let mut all = Vec::new();
    find_toolsift(doc, &mut all);
    let static_resources = doc.get("static_resources");
    let clusters: Vec<&str> = static_resources
        .and_then(|s| s.get("clusters"))
        .map(|c| {
            c.items()
                .iter()
                .filter_map(|c| c.get("name")?.str())
                .collect()
        })
        .unwrap_or_default();
    let has_cds = doc.at(&["dynamic_resources", "cds_config"]).is_some();
    let is_bootstrap = static_resources.is_some();

    // Filters inside a listener get the listener-level rules.
    let mut seen = Vec::new();
    let listeners = static_resources
        .and_then(|s| s.get("listeners"))
        .map(Node::items)
        .unwrap_or_default();
    for listener in listeners {
        let limit = listener.get("per_connection_buffer_limit_bytes");
        let listener_limit = (
            limit.map_or(listener.line, |n| n.line),
            limit.and_then(Node::number).unwrap_or(DEFAULT_BUFFER_LIMIT),
            limit.is_some(),
        );
        let mut chains: Vec<&Node> = listener
            .get("filter_chains")
            .map(|c| c.items().iter().collect())
            .unwrap_or_default();
        chains.extend(listener.get("default_filter_chain"));
        for chain in chains {
            for network_filter in chain.get("filters").map(Node::items).unwrap_or_default() {
                let Some(hcm) = network_filter.get("typed_config") else {
                    continue;
                };
                if hcm.get("@type").and_then(Node::str) != Some(HCM_TYPE) {
                    continue;
                }
                check_hcm(
                    hcm,
                    listener_limit,
                    &clusters,
                    has_cds,
                    &mut findings,
                    &mut seen,
                );
            }
        }
    }
    // The others (an Istio EnvoyFilter's patch, …): their own configuration only.
    for typed_config in &all {
        if !seen.iter().any(|s| std::ptr::eq(*s, *typed_config)) {
            let filter = parse_filter(typed_config, &mut findings);
            if is_bootstrap {
                check_clusters(&filter, &clusters, has_cds, &mut findings);
            }
        }
    }
    if all.is_empty() {
        findings.push(Finding {
            line: doc.line,
            severity: Severity::Error,
            message: "no toolsift Wasm filter found (a Wasm filter whose root_id, name or code \
                      names toolsift)"
                .into(),
        });
    }
    Report {
        findings,
        filters: all.len(),
    }
}

/// Every cluster the configuration calls on its own (hybrid ranking's embeddings, the
/// `_tool_gating` server, the suggestion server) must be defined.
fn check_clusters(
    filter: &Filter<'_>,
    clusters: &[&str],
    has_cds: bool,
    findings: &mut Vec<Finding>,
) {
    let Some(config) = &filter.config else {
        return;
    };
    let embeddings = config
        .embeddings
        .as_ref()
        .filter(|_| config.ranking == Ranking::Hybrid)
        .map(|e| {
            (
                "hybrid ranking: the embeddings cluster",
                &e.cluster,
                "every request is ranked by keyword (fallback=dispatch)",
            )
        });
    let gating = config
        .gating
        .as_ref()
        .and_then(|g| g.mcp.as_ref())
        .map(|g| {
            (
                "gating.mcp: the cluster",
                &g.cluster,
                "requests go on without a verdict",
            )
        });
    let suggestions = config
        .suggestions
        .as_ref()
        .and_then(|s| s.mcp.as_ref())
        .map(|s| {
            (
                "suggestions.mcp: the cluster",
                &s.cluster,
                "only the inline suggestions are offered",
            )
        });
    let line = filter
        .wasm
        .get("configuration")
        .map_or(filter.wasm.line, |c| c.line);
    for (what, cluster, consequence) in [embeddings, gating, suggestions].into_iter().flatten() {
        if clusters.contains(&cluster.as_str()) {
            continue;
        }
        let (severity, why) = if has_cds {
            (
                Severity::Warning,
                "is not among the static clusters (clusters from CDS are not checked)".to_owned(),
            )
        } else {
            (Severity::Error, format!("is not defined: {consequence}"))
        };
        findings.push(Finding {
            line,
            severity,
            message: format!("{what} `{cluster}` {why}"),
        });
    }
}

/// With `mcp`, Envoy's buffer filter must follow toolsift (before the router) and be on for
/// the MCP routes: toolsift cannot hold the request headers where operators deploy it, so
/// without the filter the router sends them upstream at once, and each request the gateway
/// answers (`tools/list`, `find_tools`, a refused call) reaches the server as its headers and
/// a reset (README, "What the MCP server sees"). `later` are the filters after toolsift.
fn check_mcp_buffer(hcm: &Node, later: &[Node], toolsift: &Node, findings: &mut Vec<Finding>) {
    let is_buffer = |filter: &&Node| {
        let kind = filter
            .at(&["typed_config", "@type"])
            .and_then(Node::str)
            .unwrap_or_default();
        kind.ends_with("envoy.extensions.filters.http.buffer.v3.Buffer")
    };
    let consequence = "every request the gateway answers (tools/list, find_tools, a refused \
                       call) reaches the MCP server as its headers and a reset";
    let Some(buffer) = later.iter().find(is_buffer) else {
        findings.push(Finding {
            line: toolsift.line,
            severity: Severity::Warning,
            message: format!(
                "`mcp` is set but no buffer filter (envoy.filters.http.buffer) follows toolsift: \
                 {consequence}; put one after toolsift, on for the MCP routes (envoy-mcp.yaml)"
            ),
        });
        return;
    };
    if !buffer.get("disabled").is_some_and(Node::is_true) {
        return;
    }
    // Off by default: some route (or virtual host) of this manager must turn it on. Routes
    // from RDS are not known here.
    let Some(route_config) = hcm.get("route_config") else {
        return;
    };
    let name = buffer.get("name").and_then(Node::str).unwrap_or_default();
    let turns_on = |node: &Node| {
        node.at(&["typed_per_filter_config", name])
            .is_some_and(|per_route| !per_route.get("disabled").is_some_and(Node::is_true))
    };
    let hosts = route_config
        .get("virtual_hosts")
        .map(Node::items)
        .unwrap_or_default();
    let on_somewhere = hosts.iter().any(|host| {
        turns_on(host)
            || host
                .get("routes")
                .map(Node::items)
                .unwrap_or_default()
                .iter()
                .any(turns_on)
    });
    if !on_somewhere {
        findings.push(Finding {
            line: buffer.line,
            severity: Severity::Warning,
            message: format!(
                "the buffer filter `{name}` after toolsift is disabled and no route turns it on \
                 (typed_per_filter_config): {consequence}"
            ),
        });
    }
}

/// The rules for the toolsift filters of one HTTP connection manager.
fn check_hcm<'a>(
    hcm: &'a Node,
    listener_limit: (usize, u64, bool),
    clusters: &[&str],
    has_cds: bool,
    findings: &mut Vec<Finding>,
    seen: &mut Vec<&'a Node>,
) {
    let http_filters = hcm.get("http_filters").map(Node::items).unwrap_or_default();
    for (index, http_filter) in http_filters.iter().enumerate() {
        let Some(typed_config) = http_filter.get("typed_config").filter(|t| is_toolsift(t)) else {
            continue;
        };
        seen.push(typed_config);
        let filter = parse_filter(typed_config, findings);
        check_clusters(&filter, clusters, has_cds, findings);
        let Some(config) = &filter.config else {
            continue;
        };

        // A decompressor after toolsift: toolsift sees the compressed body and skips it.
        for later in http_filters.iter().skip(index + 1) {
            let name = later.get("name").and_then(Node::str).unwrap_or_default();
            let kind = later
                .at(&["typed_config", "@type"])
                .and_then(Node::str)
                .unwrap_or_default();
            if name.contains("decompressor") || kind.contains("decompressor") {
                findings.push(Finding {
                    line: later.line,
                    severity: Severity::Error,
                    message: format!(
                        "the decompressor `{name}` comes after toolsift: toolsift sees compressed \
                         bodies and passes them unread (skipped=compressed); put it before toolsift"
                    ),
                });
            }
        }

        if config.mcp.is_some() {
            check_mcp_buffer(
                hcm,
                http_filters.get(index + 1..).unwrap_or_default(),
                typed_config,
                findings,
            );
        }

        // Buffer limits: the listener's, unless a virtual host or route sets its own.
        let max_body = u64::try_from(config.max_body_bytes).unwrap_or(u64::MAX);
        let too_small = |limit: u64| limit < max_body;
        let buffer_message = |what: &str, limit: u64| {
            format!(
                "{what} buffer limit {} is below max_body_bytes {}: Envoy answers 413 to \
                 requests between the two before toolsift sees them",
                show_bytes(limit),
                show_bytes(max_body)
            )
        };
        let virtual_hosts = hcm
            .at(&["route_config", "virtual_hosts"])
            .map(Node::items)
            .unwrap_or_default();
        let own_limit = |node: &Node| {
            [
                "request_body_buffer_limit",
                "per_request_buffer_limit_bytes",
            ]
            .iter()
            .find_map(|key| node.get(key))
            .and_then(|n| Some((n.line, n.number()?)))
        };
        let (listener_line, listener_bytes, explicit) = listener_limit;
        let every_host_sets_its_own =
            !virtual_hosts.is_empty() && virtual_hosts.iter().all(|vh| own_limit(vh).is_some());
        if too_small(listener_bytes) && !every_host_sets_its_own {
            let what = if explicit {
                "the listener's"
            } else {
                "the listener's (Envoy's default, no per_connection_buffer_limit_bytes)"
            };
            findings.push(Finding {
                line: listener_line,
                severity: Severity::Error,
                message: buffer_message(what, listener_bytes),
            });
        }
        for host in virtual_hosts {
            let routes = host.get("routes").map(Node::items).unwrap_or_default();
            let nodes = std::iter::once((host, "the virtual host's"))
                .chain(routes.iter().map(|route| (route, "the route's")));
            for (node, what) in nodes {
                if let Some((line, bytes)) = own_limit(node) {
                    if too_small(bytes) {
                        findings.push(Finding {
                            line,
                            severity: Severity::Error,
                            message: buffer_message(what, bytes),
                        });
                    }
                }
            }
        }

        // Search mode (and `unknown_tools.answer`): while the gateway waits for its follow-ups, no byte moves on the client's
        // stream, and Envoy ends a stream idle for longer than the stream idle timeout (504
        // "stream timeout"; measured). The route's own `timeout` bounds only the first answer.
        if let Some(rounds) = config.follow_up_rounds() {
            let rounds = u64::try_from(rounds).unwrap_or(u64::MAX);
            let (what, follow_ups, field) = match config.mode {
                Mode::Search => ("search mode", "search follow-ups", "max_search_rounds"),
                Mode::Filter => (
                    "unknown_tools.answer",
                    "follow-ups for made-up calls",
                    "unknown_tools.max_rounds",
                ),
            };
            let per_round = u64::try_from(config.search.timeout_ms).unwrap_or(u64::MAX);
            let needed = per_round.saturating_mul(rounds);
            let hcm_idle = hcm.get("stream_idle_timeout");
            let mut idle_timeouts: Vec<(usize, Option<u64>, &str)> = Vec::new();
            for host in virtual_hosts {
                for route in host.get("routes").map(Node::items).unwrap_or_default() {
                    let Some(action) = route.get("route") else {
                        continue;
                    };
                    // The route's `idle_timeout` replaces the connection manager's.
                    idle_timeouts.push(match action.get("idle_timeout").or(hcm_idle) {
                        Some(t) => (t.line, t.str().and_then(duration_ms), ""),
                        None => (
                            hcm.line,
                            Some(DEFAULT_STREAM_IDLE_TIMEOUT_MS),
                            " (Envoy's default)",
                        ),
                    });
                }
            }
            idle_timeouts.dedup_by_key(|(line, _, _)| *line);
            for (line, ms, default) in idle_timeouts {
                // 0s disables the timeout; a value that is not a duration is Envoy's business.
                let Some(ms) = ms.filter(|&ms| ms != 0 && ms < needed) else {
                    continue;
                };
                findings.push(Finding {
                    line,
                    severity: Severity::Warning,
                    message: format!(
                        "{what}: the stream idle timeout {}s{default} is shorter than the \
                         {follow_ups} may need (search.timeout_ms {per_round} × \
                         {field} {rounds} = {}s): no byte reaches the client while \
                         they run, and Envoy ends the stream with 504 `stream timeout`",
                        ms as f64 / 1000.0,
                        needed as f64 / 1000.0
                    ),
                });
            }
        }
    }
}

/// Checks one file; `Err` when it cannot be read as YAML.
fn check_file(path: &std::path::Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let docs = MarkedYaml::load_from_str(&text).map_err(|e| format!("not YAML: {e}"))?;
    let docs: Vec<Node> = docs.iter().map(Node::from_yaml).collect();
    if !docs.iter().any(|d| matches!(d.value, Value::Map(_))) {
        return Err("not an Envoy configuration (no YAML mapping)".into());
    }
    let mut report = Report {
        findings: Vec::new(),
        filters: 0,
    };
    for doc in docs.iter().filter(|d| matches!(d.value, Value::Map(_))) {
        let one = check_document(doc);
        report.filters += one.filters;
        report.findings.extend(one.findings);
    }
    report.findings.sort_by_key(|f| (f.line, f.severity));
    Ok(report)
}

pub fn run(args: &Args) -> ExitCode {
    let mut unreadable = false;
    let mut failing = false;
    for path in &args.configs {
        let name = path.display();
        match check_file(path) {
            Err(e) => {
                eprintln!("{name}: cannot check: {e}");
                unreadable = true;
            }
            Ok(report) => {
                for f in &report.findings {
                    let severity = match f.severity {
                        Severity::Error => "error",
                        Severity::Warning => "warning",
                    };
                    println!("{name}:{}: {severity}: {}", f.line, f.message);
                }
                let errors = report
                    .findings
                    .iter()
                    .filter(|f| f.severity == Severity::Error)
                    .count();
                let warnings = report.findings.len() - errors;
                let count = |n: usize, what: &str| match n {
                    1 => format!("1 {what}"),
                    n => format!("{n} {what}s"),
                };
                if report.findings.is_empty() {
                    println!(
                        "{name}: clean ({})",
                        count(report.filters, "toolsift filter")
                    );
                } else {
                    println!(
                        "{name}: {}, {} ({})",
                        count(errors, "error"),
                        count(warnings, "warning"),
                        count(report.filters, "toolsift filter")
                    );
                }
                if errors > 0 || (warnings > 0 && !args.allow_warnings) {
                    failing = true;
                }
            }
        }
    }
    if unreadable {
        ExitCode::from(2)
    } else if failing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Vec<(usize, Severity, String)> {
        let docs = MarkedYaml::load_from_str(yaml).unwrap();
        let doc = Node::from_yaml(&docs[0]);
        check_document(&doc)
            .findings
            .into_iter()
            .map(|f| (f.line, f.severity, f.message))
            .collect()
    }

    #[test]
    fn durations_and_lines() {
        assert_eq!(duration_ms("300s"), Some(300_000));
        assert_eq!(duration_ms("1.5s"), Some(1_500));
        assert_eq!(duration_ms("0s"), Some(0));
        assert_eq!(duration_ms("soon"), None);
        let docs = MarkedYaml::load_from_str("a:\n  b: 1\n").unwrap();
        let doc = Node::from_yaml(&docs[0]);
        assert_eq!(doc.at(&["a", "b"]).map(|n| n.line), Some(2));
    }

    #[test]
    fn no_filter_is_a_finding() {
        let found = check("static_resources:\n  listeners: []\n");
        assert_eq!(found.len(), 1);
        assert!(found[0].2.contains("no toolsift"));
    }
}
