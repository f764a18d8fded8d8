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
//! Every plugin configuration is also validated against the configuration's JSON Schema
//! (`toolsift schema`): each violation is an error naming the field's path, all of them at
//! once (the filter's parser stops at the first). Plugin configurations written in Kubernetes
//! manifests are found too: an Istio `WasmPlugin`'s `pluginConfig` and an Envoy Gateway
//! `EnvoyExtensionPolicy`'s `wasm[].config` (their own rules only: the listener is not there),
//! each violation on the line of the field.
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
    /// The scalar's text, and what it was written as.
    Scalar(String, Kind),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
    Null,
}

/// What a scalar was written as: a manifest's plugin configuration is read as the JSON it
/// becomes (`5` a number, `"5"` a string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Bool,
    Int,
    Float,
}

impl Node {
    fn from_yaml(yaml: &MarkedYaml<'_>) -> Node {
        let value = match &yaml.data {
            YamlData::Value(Scalar::Null) | YamlData::BadValue | YamlData::Alias(_) => Value::Null,
            YamlData::Value(Scalar::Boolean(b)) => Value::Scalar(b.to_string(), Kind::Bool),
            YamlData::Value(Scalar::Integer(i)) => Value::Scalar(i.to_string(), Kind::Int),
            YamlData::Value(Scalar::FloatingPoint(f)) => Value::Scalar(f.to_string(), Kind::Float),
            YamlData::Value(Scalar::String(s)) => Value::Scalar(s.to_string(), Kind::Str),
            YamlData::Representation(s, _, _) => Value::Scalar(s.to_string(), Kind::Str),
            YamlData::Sequence(items) => Value::Seq(items.iter().map(Node::from_yaml).collect()),
            YamlData::Mapping(map) => Value::Map(
                map.iter()
                    .map(|(k, v)| {
                        let key = match Node::from_yaml(k).value {
                            Value::Scalar(s, _) => s,
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
            Value::Scalar(s, _) => Some(s),
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

    /// The JSON this YAML is (a manifest's plugin configuration, as Istio and Envoy Gateway
    /// hand it to the filter).
    fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as Json;
        match &self.value {
            Value::Null => Json::Null,
            Value::Scalar(s, Kind::Str) => Json::String(s.clone()),
            Value::Scalar(s, Kind::Bool) => Json::Bool(s == "true"),
            Value::Scalar(s, Kind::Int) => s
                .parse::<i64>()
                .map_or_else(|_| Json::String(s.clone()), Json::from),
            Value::Scalar(s, Kind::Float) => s
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or(Json::Null, Json::Number),
            Value::Seq(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The node at a path of the configuration (`search`, `native_search`, `0`, …), as deep as
    /// it goes.
    fn deepest<'a>(&'a self, path: &[PathStep]) -> &'a Node {
        let mut node = self;
        for step in path {
            let next = match (step, &node.value) {
                (PathStep::Key(key), Value::Map(_)) => node.get(key),
                (PathStep::Index(i), Value::Seq(items)) => items.get(*i),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => break,
            }
        }
        node
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

/// One step of a field's path in the plugin configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// A field's path as the filter's errors write it: `search.native_search[0].model`.
fn dotted(path: &[PathStep]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            PathStep::Key(key) if out.is_empty() => out.push_str(key),
            PathStep::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The configuration's schema, compiled once, with each optional section (`anyOf: [section,
/// null]`) taken as the section: a mistake inside `access` is then named where it is, not as
/// `access` matching neither. `null` members are left out of what is validated
/// ([`without_nulls`]); the filter's parser still refuses one where it is not allowed.
fn schema_validator() -> Option<&'static (jsonschema::Validator, serde_json::Value)> {
    static VALIDATOR: std::sync::OnceLock<Option<(jsonschema::Validator, serde_json::Value)>> =
        std::sync::OnceLock::new();
    VALIDATOR
        .get_or_init(|| {
            let mut schema = toolsift::config::json_schema();
            sections_not_null(&mut schema);
            let validator = jsonschema::validator_for(&schema).ok()?;
            Some((validator, schema))
        })
        .as_ref()
}

/// What the rule between fields (an item of a section's `allOf`) that a violation broke says,
/// if it broke one: `keyword` is the violation's place in the schema
/// (`/$defs/RuleConfig/allOf/0/anyOf`). The validator's own account of a rule's subschemas
/// says little to whoever wrote the configuration.
fn rule_of(schema: &serde_json::Value, keyword: &str) -> Option<String> {
    const ALL_OF: &str = "/allOf/";
    keyword.match_indices(ALL_OF).find_map(|(at, _)| {
        let rest = keyword.get(at + ALL_OF.len()..)?;
        let end = at + ALL_OF.len() + rest.find('/').unwrap_or(rest.len());
        let rule = schema.pointer(keyword.get(..end)?)?;
        rule.get("description")?.as_str().map(str::to_owned)
    })
}

/// Replaces every `anyOf: [X, {"type": "null"}]` in `schema` by X (its other keywords kept).
fn sections_not_null(schema: &mut serde_json::Value) {
    use serde_json::Value as Json;
    match schema {
        Json::Object(map) => {
            let one = match map.get("anyOf").and_then(Json::as_array).map(Vec::as_slice) {
                Some([only, null]) if null.get("type") == Some(&Json::from("null")) => {
                    Some(only.clone())
                }
                _ => None,
            };
            if let Some(Json::Object(only)) = one {
                map.remove("anyOf");
                for (key, value) in only {
                    map.entry(key).or_insert(value);
                }
            }
            for value in map.values_mut() {
                sections_not_null(value);
            }
        }
        Json::Array(items) => items.iter_mut().for_each(sections_not_null),
        _ => {}
    }
}

/// `json` without the object members that are `null` (an unset optional field).
fn without_nulls(json: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match json {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Where `json` breaks the configuration's schema: each field's path and why, in document
/// order of the paths.
fn schema_violations(json: &serde_json::Value) -> Vec<(Vec<PathStep>, Violation)> {
    let Some((validator, schema)) = schema_validator() else {
        return vec![(
            Vec::new(),
            Violation::Field("the configuration schema does not compile".into()),
        )];
    };
    let json = without_nulls(json);
    let mut found: Vec<(Vec<PathStep>, Violation)> = Vec::new();
    for error in validator.iter_errors(&json) {
        let path: Vec<PathStep> = error
            .instance_path()
            .iter()
            .map(|segment| match segment {
                jsonschema::paths::LocationSegment::Property(key) => {
                    PathStep::Key(key.into_owned())
                }
                jsonschema::paths::LocationSegment::Index(i) => PathStep::Index(i),
            })
            .collect();
        // An unknown key is named as the field it would be, as the parser names it.
        if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
            error.kind()
        {
            for key in unexpected {
                let mut path = path.clone();
                path.push(PathStep::Key(key.clone()));
                found.push((path, Violation::Field("unknown field".to_owned())));
            }
            continue;
        }
        let why = match rule_of(schema, error.schema_path().as_str()) {
            Some(rule) => Violation::Rule(rule),
            None => Violation::Field(error.to_string()),
        };
        found.push((path, why));
    }
    found.dedup();
    found
}

/// Why a configuration breaks the schema: at a field (a type, a range, a pattern, an unknown
/// key), or a rule between the fields of the object at that place, in the rule's words.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Violation {
    Field(String),
    Rule(String),
}

/// The field a filter's error names (``field `search.tool_name`: …``), if any.
fn field_of(error: &str) -> Option<&str> {
    let rest = error.split("field `").nth(1)?;
    rest.split('`').next()
}

/// Checks one plugin configuration with the filter's own parser (an error when it refuses it:
/// Envoy would not load the filter), then against the schema: every other field that breaks
/// it is an error too, naming the field (the parser stops at its first). `yaml` is the
/// configuration as a YAML node (a manifest's), for each field's line; `line` the line of
/// everything else.
fn check_plugin_config(
    text: &str,
    yaml: Option<&Node>,
    line: usize,
    findings: &mut Vec<Finding>,
) -> Option<Config> {
    let parsed = Config::from_json(text.as_bytes());
    let refused = parsed.as_ref().err().map(|e| e.0.clone());
    if let Some(e) = &refused {
        let at = match (yaml, field_of(e)) {
            (Some(node), Some(field)) => node.deepest(&steps_of(field)).line,
            _ => line,
        };
        findings.push(Finding {
            line: at,
            severity: Severity::Error,
            message: format!("Envoy would not load this filter: {e}"),
        });
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
        let said = refused.as_deref().and_then(field_of);
        for (path, violation) in schema_violations(&json) {
            let field = dotted(&path);
            // The parser's error speaks of that field, or (a rule) of one within the object.
            let within = |said: &str| {
                field.is_empty()
                    || said
                        .strip_prefix(field.as_str())
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
            };
            let why = match violation {
                _ if said == Some(field.as_str()) => continue,
                Violation::Rule(_) if said.is_some_and(within) => continue,
                Violation::Rule(why) | Violation::Field(why) => why,
            };
            let at = yaml.map_or(line, |node| node.deepest(&path).line);
            let message = match field.as_str() {
                "" => format!("the plugin configuration breaks its schema: {why}"),
                field => {
                    format!("the plugin configuration breaks its schema: field `{field}`: {why}")
                }
            };
            findings.push(Finding {
                line: at,
                severity: Severity::Error,
                message,
            });
        }
    }
    parsed.ok()
}

/// The steps of a dotted path (`search.native_search[0].model`).
fn steps_of(field: &str) -> Vec<PathStep> {
    let mut steps = Vec::new();
    for part in field.split('.') {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            steps.push(PathStep::Key(rest[..open].to_owned()));
            rest = &rest[open..];
            while let Some(index) = rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
                match index.0.parse() {
                    Ok(i) => steps.push(PathStep::Index(i)),
                    Err(_) => break,
                }
                rest = index.1;
            }
        } else {
            steps.push(PathStep::Key(rest.to_owned()));
        }
    }
    steps
}

/// A toolsift plugin configuration in a Kubernetes manifest: an Istio `WasmPlugin`'s
/// `pluginConfig`, or an Envoy Gateway `EnvoyExtensionPolicy`'s `wasm[].config`; `None` for
/// the plugin without one (all defaults). Returns the plugin's node too.
fn manifest_configs(doc: &Node) -> Vec<(&Node, Option<&Node>)> {
    let mentions = |node: &Node, keys: &[&[&str]]| {
        keys.iter().any(|k| {
            node.at(k)
                .and_then(Node::str)
                .is_some_and(|s| s.contains("toolsift"))
        })
    };
    let Some(spec) = doc.get("spec") else {
        return Vec::new();
    };
    match doc.get("kind").and_then(Node::str) {
        Some("WasmPlugin")
            if mentions(doc, &[&["metadata", "name"]])
                || mentions(spec, &[&["pluginName"], &["url"]]) =>
        {
            vec![(spec, spec.get("pluginConfig"))]
        }
        Some("EnvoyExtensionPolicy") => spec
            .get("wasm")
            .map(Node::items)
            .unwrap_or_default()
            .iter()
            .filter(|w| {
                mentions(
                    w,
                    &[
                        &["name"],
                        &["rootID"],
                        &["code", "image", "url"],
                        &["code", "http", "url"],
                    ],
                )
            })
            .map(|w| (w, w.get("config")))
            .collect(),
        _ => Vec::new(),
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
    match check_plugin_config(&json, None, line, findings) {
        Some(config) => {
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
                              then the worker stops holding headers \
                              (docs/book/src/concepts/search-mode.md, \"Where it runs\")"
                        .into(),
                });
            }
            let passes_unknown = config.access.as_ref().is_some_and(|a| {
                a.mode == toolsift::access::config::Mode::Enforce
                    && a.unknown_paths == toolsift::access::config::UnknownPaths::Pass
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
        None => Filter { wasm, config: None },
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
    // Manifests: the plugin configuration alone.
    let manifests = manifest_configs(doc);
    for (plugin, config) in &manifests {
        let text = config.map_or_else(String::new, |c| c.to_json().to_string());
        let line = config.map_or(plugin.line, |c| c.line);
        check_plugin_config(&text, *config, line, &mut findings);
    }
    Report {
        findings,
        filters: all.len() + manifests.len(),
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
/// a reset (docs/book/src/concepts/mcp.md, "What the MCP server sees"). `later` are the filters after toolsift.
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
    check_text(&text)
}

/// Checks one file's text (every YAML document in it); `Err` when it is not YAML.
fn check_text(text: &str) -> Result<Report, String> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| format!("not YAML: {e}"))?;
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
    if report.filters == 0 {
        report.findings.push(Finding {
            line: docs.first().map_or(1, |d| d.line),
            severity: Severity::Error,
            message: "no toolsift Wasm filter found (a Wasm filter whose root_id, name or code \
                      names toolsift, an Istio WasmPlugin or an Envoy Gateway \
                      EnvoyExtensionPolicy naming it)"
                .into(),
        });
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
        let found = check_text("static_resources:\n  listeners: []\n").unwrap();
        assert_eq!(found.findings.len(), 1);
        assert!(found.findings[0].message.contains("no toolsift"));
        // A file of several documents needs one filter in all of them.
        let two = "kind: Other\n---\nkind: WasmPlugin\nmetadata: {name: toolsift}\nspec: {}\n";
        let found = check_text(two).unwrap();
        assert!(found.findings.is_empty(), "{:?}", found.findings);
    }

    #[test]
    fn manifests_are_read_as_the_json_they_become() {
        let yaml = "kind: WasmPlugin\nmetadata:\n  name: toolsift\nspec:\n  pluginConfig:\n    top_k: 5\n    min_score: 0.5\n    always_include: [a]\n    debug: true\n    dialect: \"5\"\n";
        let docs = MarkedYaml::load_from_str(yaml).unwrap();
        let doc = Node::from_yaml(&docs[0]);
        let config = doc.at(&["spec", "pluginConfig"]).unwrap();
        assert_eq!(
            config.to_json(),
            serde_json::json!({"top_k": 5, "min_score": 0.5, "always_include": ["a"], "debug": true, "dialect": "5"})
        );
        let path = [PathStep::Key("always_include".into()), PathStep::Index(0)];
        assert_eq!(config.deepest(&path).line, 8);
        assert_eq!(dotted(&path), "always_include[0]");
    }
}
