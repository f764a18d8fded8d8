//! Suggestions: tools the caller does not have, offered when a search finds nothing good.
//!
//! A second catalog (inline in the configuration, or an MCP server's `tools/list` fetched
//! through an Envoy cluster) is ranked against a `find_tools` query whose best match scores
//! below `min_score`. Up to `k` of its tools are added to the search's result, each marked
//! `"suggested": true` with where to get it, and without a schema: a suggestion is never
//! callable. A model that calls one anyway calls a tool that does not exist, and is answered
//! like any made-up name. Tools the caller's access rules deny are never suggested.

use crate::access::{Annotations, Grant};
use crate::dialects::Dialect;
use crate::index::FieldWeights;
use crate::json::{optional_object, whole_number};
use crate::rank::{Catalog, mcp_tools_container};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `suggestions` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = suggestions_rules))]
pub struct SuggestionsConfig {
    /// A search whose best match scores below this (BM25, the ranking `x-toolsift-tools`
    /// shows) gets suggestions; `0`: only a search that found nothing.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub min_score: f32,
    /// Suggestions added to one search's result, at most (1–20).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = MAX_K)))]
    pub k: usize,
    /// Where to get a suggested tool, for tools that do not say (`source` on the tool).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub source: String,
    /// The second catalog, inline: MCP tool definitions (`name` required, `description`, ...),
    /// each with an optional `source`.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(transform = inline_tools_schema))]
    pub tools: Vec<Map<String, Value>>,
    /// The second catalog fetched from an MCP server (2026-07-28 revision: no session).
    #[serde(deserialize_with = "optional_object")]
    pub mcp: Option<SuggestionServer>,
}

/// `suggestions.tools`: each with a `name` not blank, and a `source` that is a string.
#[cfg(not(target_arch = "wasm32"))]
fn inline_tools_schema(schema: &mut schemars::Schema) {
    schema.insert(
        "items".into(),
        serde_json::json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {
                    "type": "string",
                    "pattern": crate::json::rules::NOT_BLANK,
                    "description": "The tool's name, not blank."
                },
                "source": {
                    "type": "string",
                    "description": "Where to get this tool, for the model; \
                        `suggestions.source` when unset."
                }
            }
        }),
    );
}

/// Something to suggest: `tools`, `mcp`, or both.
#[cfg(not(target_arch = "wasm32"))]
fn suggestions_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{any_of, filled, set};
    any_of(
        schema,
        "`suggestions` needs `tools` or `mcp` (something to suggest).",
        vec![set("mcp"), filled("tools")],
    );
}

impl Default for SuggestionsConfig {
    fn default() -> Self {
        SuggestionsConfig {
            min_score: 0.0,
            k: 3,
            source: "not connected to this agent: ask the platform team to add it".to_owned(),
            tools: Vec::new(),
            mcp: None,
        }
    }
}

/// `suggestions.mcp`: the MCP server whose tools are suggested, fetched by every worker when
/// Envoy starts and again every `refresh_seconds`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SuggestionServer {
    /// The Envoy cluster of the server.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(min = 1)))]
    pub cluster: String,
    /// Its endpoint's path.
    #[serde(default = "default_path")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(regex(pattern = r"^/")))]
    pub path: String,
    /// `:authority` of the call; the cluster name when unset.
    #[serde(default)]
    pub authority: Option<String>,
    /// Extra request headers, for example `{"authorization": "Bearer …"}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Where to get this server's tools, for the model; `MCP server <cluster>` when unset.
    #[serde(default)]
    pub source: Option<String>,
    /// How often each worker fetches its list again (10–86400).
    #[serde(default = "default_refresh_seconds", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 10, max = 86_400)))]
    pub refresh_seconds: u64,
    /// The longest one page may take.
    #[serde(default = "default_timeout_ms", deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 600_000)))]
    pub timeout_ms: u64,
}

fn default_path() -> String {
    "/mcp".to_owned()
}
fn default_refresh_seconds() -> u64 {
    300
}
fn default_timeout_ms() -> u64 {
    5_000
}

/// The most suggestions one search may get: they cost the model tokens, and a long list of
/// tools it cannot call is no help.
const MAX_K: usize = 20;

impl SuggestionServer {
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.cluster)
    }

    /// What the model reads as where to get this server's tools.
    pub fn source(&self) -> String {
        self.source
            .clone()
            .unwrap_or_else(|| format!("MCP server {}", self.cluster))
    }
}

impl SuggestionsConfig {
    /// Checks the section; an error is the field (under `suggestions.`) and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let err = |field: &str, why: &str| Err((field.to_owned(), why.to_owned()));
        if !self.min_score.is_finite() || self.min_score < 0.0 {
            return err("min_score", "must be a finite number >= 0");
        }
        if !(1..=MAX_K).contains(&self.k) {
            return err("k", &format!("must be 1..={MAX_K}"));
        }
        if self.source.trim().is_empty() {
            return err("source", "must not be empty");
        }
        if self.tools.is_empty() && self.mcp.is_none() {
            return err("tools", "give `tools` or `mcp` (nothing to suggest)");
        }
        for (i, tool) in self.tools.iter().enumerate() {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.trim().is_empty() {
                return err(&format!("tools[{i}].name"), "must be a non-empty string");
            }
            if tool.get("source").is_some_and(|s| !s.is_string()) {
                return err(&format!("tools[{i}].source"), "must be a string");
            }
        }
        if let Some(server) = &self.mcp {
            if server.cluster.is_empty() {
                return err("mcp.cluster", "must name an Envoy cluster");
            }
            if !server.path.starts_with('/') {
                return err("mcp.path", "must start with `/`");
            }
            if !(10..=86_400).contains(&server.refresh_seconds) {
                return err("mcp.refresh_seconds", "must be 10..=86400");
            }
            if !(1..=600_000).contains(&server.timeout_ms) {
                return err("mcp.timeout_ms", "must be 1..=600000");
            }
        }
        Ok(())
    }

    /// The inline tools as (name, JSON object without `source`, source).
    fn inline(&self) -> Vec<(String, String, String)> {
        self.tools
            .iter()
            .map(|tool| {
                let mut tool = tool.clone();
                let source = match tool.remove("source") {
                    Some(Value::String(s)) => s,
                    _ => self.source.clone(),
                };
                let name = tool
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                (name, Value::Object(tool).to_string(), source)
            })
            .collect()
    }
}

/// One tool that can be suggested.
struct Suggestable {
    name: String,
    /// Its MCP definition (JSON object text).
    raw: String,
    /// Where to get it, as the model reads it.
    source: String,
    annotations: Annotations,
}

/// The second catalog, ranked, and where each of its tools can be had.
pub struct Suggestions {
    tools: Vec<Suggestable>,
    /// The index over `tools` (entry i is tool i); `None` when there are none.
    index: Option<Catalog>,
    min_score: f32,
    k: usize,
}

impl Suggestions {
    /// The inline tools of `config`, plus `fetched` (the suggestion server's tools: name and
    /// JSON object, once it answered); a name seen twice is the first (inline ones first).
    pub fn new(config: &SuggestionsConfig, fetched: Vec<(String, String)>) -> Suggestions {
        let server_source = config
            .mcp
            .as_ref()
            .map(SuggestionServer::source)
            .unwrap_or_default();
        let fetched = fetched
            .into_iter()
            .map(|(name, raw)| (name, raw, server_source.clone()));
        let mut tools: Vec<Suggestable> = Vec::new();
        for (name, raw, source) in config.inline().into_iter().chain(fetched) {
            if name.is_empty() || tools.iter().any(|t| t.name == name) {
                continue;
            }
            let annotations = Annotations::of_tool(&raw);
            tools.push(Suggestable {
                name,
                raw,
                source,
                annotations,
            });
        }
        let container =
            mcp_tools_container(tools.iter().map(|t| (t.name.as_str(), t.raw.as_str())));
        let index = (!tools.is_empty())
            .then(|| Catalog::build(Dialect::Anthropic, &container, FieldWeights::default()).ok())
            .flatten();
        Suggestions {
            tools,
            index,
            min_score: config.min_score,
            k: config.k,
        }
    }

    /// Tools the second catalog holds.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether a search whose best match scored `best` (`None`: nothing matched) gets
    /// suggestions.
    pub fn wanted(&self, best: Option<f32>) -> bool {
        best.is_none_or(|b| b < self.min_score)
    }

    /// Up to `k` suggestions for `query`, best first, as the search result lists them: none
    /// that `has` says the caller has already, and none that `grant` denies.
    pub fn suggest(
        &self,
        query: &str,
        has: impl Fn(&str) -> bool,
        grant: Option<&Grant>,
    ) -> Vec<Value> {
        let Some(index) = &self.index else {
            return Vec::new();
        };
        index
            .rank(query)
            .iter()
            .filter(|s| s.score > 0.0)
            .filter_map(|s| self.tools.get(s.entry))
            .filter(|tool| !has(&tool.name))
            .filter(|tool| grant.is_none_or(|g| g.shows(&tool.name, &tool.annotations)))
            .take(self.k)
            .map(Suggestable::entry)
            .collect()
    }
}

impl Suggestable {
    /// A suggestion as the model reads it: what the tool does and where to get it, never its
    /// schema.
    fn entry(&self) -> Value {
        let definition: Value = serde_json::from_str(&self.raw).unwrap_or(Value::Null);
        let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or("");
        let mut entry = Map::new();
        entry.insert("name".into(), Value::String(self.name.clone()));
        if !text("title").is_empty() {
            entry.insert("title".into(), Value::String(text("title").to_owned()));
        }
        entry.insert(
            "description".into(),
            Value::String(text("description").to_owned()),
        );
        entry.insert("suggested".into(), Value::Bool(true));
        entry.insert("source".into(), Value::String(self.source.clone()));
        Value::Object(entry)
    }
}

/// The note a result with suggestions carries: the model must not call them.
pub const NOTE: &str = "Suggested tools are not available here: do not call them. Tell the user \
     where to get them if they need one.";

/// Adds `suggested` (from [`Suggestions::suggest`]) and the note to a search's `result`
/// (a JSON object).
pub fn add_to(result: &mut Value, suggested: Vec<Value>) {
    if let Some(result) = result.as_object_mut() {
        result.insert("suggestions".into(), Value::Array(suggested));
        result.insert("suggestions_note".into(), Value::String(NOTE.to_owned()));
    }
}

/// The names of `suggestions` (entries made by [`Suggestions::suggest`]).
pub fn names(suggestions: &[Value]) -> Vec<&str> {
    suggestions
        .iter()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> SuggestionsConfig {
        serde_json::from_str(json).unwrap()
    }

    const INLINE: &str = r#"{
        "min_score": 5,
        "k": 2,
        "tools": [
            {"name": "create_jira_issue", "description": "Create a Jira issue in a project", "source": "the Jira MCP server"},
            {"name": "search_jira_issues", "description": "Search Jira issues with JQL"},
            {"name": "send_fax", "description": "Send a fax to a phone number"}
        ]
    }"#;

    #[test]
    fn weak_searches_get_the_best_suggestions_with_where_to_get_them() {
        let s = Suggestions::new(&config(INLINE), Vec::new());
        assert!(s.wanted(None));
        assert!(s.wanted(Some(4.9)));
        assert!(!s.wanted(Some(5.0)));
        let got = s.suggest("open a jira issue for the outage", |_| false, None);
        assert_eq!(names(&got), ["create_jira_issue", "search_jira_issues"]);
        assert_eq!(got[0]["suggested"], true);
        assert_eq!(got[0]["source"], "the Jira MCP server");
        assert_eq!(got[1]["source"], SuggestionsConfig::default().source);
        assert!(
            got[0].get("inputSchema").is_none(),
            "never callable: no schema"
        );
    }

    #[test]
    fn tools_the_caller_has_or_may_not_see_are_never_suggested() {
        let s = Suggestions::new(&config(INLINE), Vec::new());
        let got = s.suggest("jira issue", |n| n == "create_jira_issue", None);
        assert_eq!(names(&got), ["search_jira_issues"]);
        let policy = crate::access::Policy::new(
            &serde_json::from_str(
                r#"{"identity":[{"header":"x-user"}],"default":"allow","rules":[{"when":["*"],"deny":["search_jira_*"]}]}"#,
            )
            .unwrap(),
        )
        .unwrap();
        let grant = std::rc::Rc::new(policy).grant(&crate::access::Caller::new(["a".to_owned()]));
        let got = s.suggest("jira issue", |_| false, Some(&grant));
        assert_eq!(names(&got), ["create_jira_issue"]);
        assert!(s.suggest("weather tomorrow", |_| false, None).is_empty());
    }

    #[test]
    fn fetched_tools_join_the_inline_ones_and_inline_wins_a_name() {
        let mut c = config(INLINE);
        c.mcp = Some(serde_json::from_str(r#"{"cluster":"market"}"#).unwrap());
        let fetched = [
            ("send_fax", r#"{"name":"send_fax","description":"fax"}"#),
            (
                "book_meeting_room",
                r#"{"name":"book_meeting_room","description":"Book a meeting room"}"#,
            ),
        ];
        let fetched = fetched
            .iter()
            .map(|(n, r)| ((*n).to_owned(), (*r).to_owned()))
            .collect();
        let s = Suggestions::new(&c, fetched);
        assert_eq!(s.len(), 4);
        let got = s.suggest("book a meeting room", |_| false, None);
        assert_eq!(names(&got), ["book_meeting_room"]);
        assert_eq!(got[0]["source"], "MCP server market");
    }

    #[test]
    fn invalid_settings_name_their_field() {
        let field = |json: &str| config(json).check().unwrap_err().0;
        assert_eq!(field(r#"{"tools":[{"name":"a"}],"k":0}"#), "k");
        assert_eq!(field(r#"{"tools":[{"name":"a"}],"k":21}"#), "k");
        assert_eq!(
            field(r#"{"tools":[{"name":"a"}],"min_score":-1}"#),
            "min_score"
        );
        assert_eq!(field(r#"{}"#), "tools");
        assert_eq!(field(r#"{"tools":[{"description":"x"}]}"#), "tools[0].name");
        assert_eq!(
            field(r#"{"tools":[{"name":"a","source":3}]}"#),
            "tools[0].source"
        );
        assert_eq!(field(r#"{"mcp":{"cluster":"c","path":"mcp"}}"#), "mcp.path");
        assert_eq!(
            field(r#"{"mcp":{"cluster":"c","refresh_seconds":1}}"#),
            "mcp.refresh_seconds"
        );
        assert!(config(INLINE).check().is_ok());
    }
}
