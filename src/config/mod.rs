//! Plugin configuration: the JSON in Envoy's `configuration` StringValue (or Istio's
//! `pluginConfig`). Parsed strictly (unknown keys are errors, so a typo never silently turns a
//! setting off), then checked; every error names the field.
//!
//! This module holds the top level and its parser. Each feature owns its section beside its
//! code (`access`, `custom`, `loop_guard`, `suggestions`, `weak_query`, `gating.rules`, …),
//! unless the feature sits above `config` in the layers (`src/lib.rs` lists them): `config`
//! importing it would close an import circle, so its section is a submodule here.

use crate::dialects::Dialect;
use crate::json::{object, optional_object, optional_whole_number, variant, whole_number};
use serde::Deserialize;
use std::fmt;

pub mod embeddings;
pub mod gating;
pub mod mcp;
pub mod search;
pub mod shadow;

use embeddings::Embeddings;
use gating::Gating;
use mcp::Mcp;
use search::Search;
use shadow::Shadow;

/// What to do with a request toolsift cannot read (malformed, oversized, compressed, …).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Send it upstream unchanged.
    #[default]
    Pass,
    /// Answer 400 with a JSON error naming toolsift and the reason.
    Reject,
}

/// Which dialect to read bodies as: from the request path (`"auto"`), or always the one named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DialectChoice {
    #[default]
    Auto,
    Fixed(Dialect),
}

impl DialectChoice {
    /// The dialect of a request to `path`.
    pub fn resolve(self, path: &str) -> Option<Dialect> {
        match self {
            DialectChoice::Auto => Dialect::from_path(path),
            DialectChoice::Fixed(dialect) => Some(dialect),
        }
    }
}

impl<'de> Deserialize<'de> for DialectChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<str>>::deserialize(deserializer)?;
        if name == "auto" {
            return Ok(DialectChoice::Auto);
        }
        Dialect::from_name(&name)
            .map(DialectChoice::Fixed)
            .ok_or_else(|| {
                let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.name()).collect();
                serde::de::Error::custom(format!(
                    "unknown dialect `{name}`, expected `auto` or one of: {}",
                    names.join(", ")
                ))
            })
    }
}

/// The schema of `dialect`: `"auto"` or the name of a dialect of [`Dialect::ALL`].
#[cfg(not(target_arch = "wasm32"))]
impl schemars::JsonSchema for DialectChoice {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DialectChoice".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = std::iter::once("auto")
            .chain(Dialect::ALL.iter().map(|d| d.name()))
            .collect();
        schemars::json_schema!({"type": "string", "enum": names})
    }
}

/// Written as it is read (the schema's default).
#[cfg(not(target_arch = "wasm32"))]
impl serde::Serialize for DialectChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(match self {
            DialectChoice::Auto => "auto",
            DialectChoice::Fixed(dialect) => dialect.name(),
        })
    }
}

/// How tools are ranked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Ranking {
    /// BM25 over each tool's text, in process: needs no other service.
    #[default]
    Keyword,
    /// Keyword channels and embeddings, fused (`embeddings` must be set). Whenever the embeddings
    /// service cannot answer in time, the request is ranked by keyword.
    Hybrid,
}

/// Channel weights of hybrid ranking's fusion, and of the transitions' channel (either ranking).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelWeights {
    /// The keyword ranking's weight (BM25 over names, descriptions and parameters).
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub bm25: f32,
    /// The weight of query words found whole in a tool's name (counted twice) or description,
    /// and of query phrases (two words in order) found there; IDF-weighted.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub exact: f32,
    /// The weight of query words that are a parameter's name.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub param_keys: f32,
    /// The weight of the embeddings: the cosine of the tool's vector with the request's.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub vector: f32,
    /// The weight of the tools the fleet called next after the request's history's calls
    /// (`auto_k.calibration.transitions`), fused with the ranking's places (keyword or
    /// hybrid; RRF k 60, the form chosen on held-out conversations). 0 turns the channel off.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub transitions: f32,
}

impl Default for ChannelWeights {
    /// BM25 and vectors 1, exact matches 0.5, parameter keys 0.25 (with `rrf_k` 1): the best
    /// of the grid over the shared datasets in `docs/tuning-notes.md`; transitions 1, chosen on
    /// half of issue 66's conversations (docs/BENCHMARKS.md).
    fn default() -> Self {
        ChannelWeights {
            bm25: 1.0,
            exact: 0.5,
            param_keys: 0.25,
            vector: 1.0,
            transitions: 1.0,
        }
    }
}

impl ChannelWeights {
    pub fn as_array(&self) -> [f32; 4] {
        [self.bm25, self.exact, self.param_keys, self.vector]
    }
}

/// What toolsift does with a request's tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Keep the `top_k` best-ranked tools.
    #[default]
    Filter,
    /// Show the model a meta-tool that searches the whole catalog, and answer it in the gateway.
    Search,
}

/// Filter mode's made-up tool calls.
// Answered by `crate::search::round::Session::answering`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct UnknownTools {
    /// Filter mode: a model call of a tool the request does not carry is answered to the
    /// model with an error result in a follow-up, as search mode does, never delivered.
    pub answer: bool,
    /// Follow-ups answering made-up calls, at most, per request (1–10); then a made-up call is
    /// dropped and named in words.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 10)))]
    pub max_rounds: usize,
}

impl Default for UnknownTools {
    fn default() -> Self {
        UnknownTools {
            answer: false,
            max_rounds: 2,
        }
    }
}

/// The default of `catalog_cache_bytes`: 64 MiB per worker.
pub const DEFAULT_CATALOG_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The least `catalog_cache_bytes` accepted: below it a single large catalog would not fit.
pub const MIN_CATALOG_CACHE_BYTES: usize = 1024 * 1024;

/// toolsift's plugin configuration: the JSON in the `configuration` StringValue of Envoy's Wasm
/// filter (Istio's `pluginConfig`, Envoy Gateway's `wasm[].config`). Unknown keys and wrong
/// types stop Envoy from loading the filter, with a log line naming the field.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = config_rules))]
pub struct Config {
    /// What toolsift does with a request's tools.
    #[serde(deserialize_with = "variant")]
    pub mode: Mode,
    /// Search mode's settings (`mode: "search"`; `search.timeout_ms` also bounds filter mode's
    /// follow-ups for made-up calls).
    #[serde(deserialize_with = "object")]
    pub search: Search,
    /// How many ranked tools to keep (at least 1).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub top_k: usize,
    /// Ranked tools whose BM25 score is below this are dropped (never the last kept tool).
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub min_score: Option<f32>,
    /// Budget for the kept tools' estimated tokens (characters / 4): ranked tools are added in
    /// rank order until the next one does not fit (the first one always does).
    #[serde(deserialize_with = "optional_whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub max_tool_tokens: Option<usize>,
    /// Requests with this many function tools or fewer pass untouched.
    #[serde(deserialize_with = "whole_number")]
    pub min_tools: usize,
    /// Tool names or glob patterns (`*`, `?`) that are always kept.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(inner(length(min = 1))))]
    pub always_include: Vec<String>,
    /// What to do with a request toolsift cannot read (malformed, oversized, compressed, …);
    /// under `access`, always `"reject"`.
    #[serde(deserialize_with = "variant")]
    pub on_error: OnError,
    /// Bodies larger than this pass through unread (counted as `too_large`); keep Envoy's
    /// buffer limits above it.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub max_body_bytes: usize,
    /// Add the `x-toolsift` response header.
    pub response_header: bool,
    /// Add `x-toolsift-tools` (kept tools in rank order) and log each decision, with the query,
    /// at debug level.
    pub debug: bool,
    /// Record each LLM request's OpenTelemetry GenAI attributes (provider, operation, model) as
    /// filter state `toolsift_gen_ai`, for an OpenTelemetry access log
    /// (`docs/examples/envoy-otel.yaml`). Off by default: it is one more filter-state write
    /// per request.
    pub gen_ai: bool,
    /// Rewrite requests the client signed with AWS SigV4 too. Off by default: the signature
    /// covers the payload, so a rewritten body fails it (Bedrock answers 403) unless something
    /// after toolsift signs again (Envoy's `aws_request_signing` filter) or the upstream does
    /// not check. Under `access` they are read, and refused (403) when they carry a tool the
    /// caller may not see.
    pub rewrite_signed: bool,
    /// Which dialect to read bodies as: `"auto"` (from the request path) or one dialect for
    /// every request.
    pub dialect: DialectChoice,
    /// Distinct tool catalogs whose index each worker keeps (the bytes bound may bind first:
    /// about 10 KB a catalog at 50 tools, 45 KB at 200, 230 KB at 1,000).
    #[serde(deserialize_with = "whole_number")]
    pub catalog_cache_size: usize,
    /// Bytes each worker keeps for catalogs: their indexes, the tools' parts shared between
    /// them, the tools' vectors (hybrid ranking), and catalogs still held by requests and
    /// search sessions; least recently used evicted first (at least 1 MiB).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = MIN_CATALOG_CACHE_BYTES)))]
    pub catalog_cache_bytes: usize,
    /// How tools are ranked.
    #[serde(deserialize_with = "variant")]
    pub ranking: Ranking,
    /// The embeddings service of hybrid ranking (required with `ranking: "hybrid"`).
    #[serde(deserialize_with = "optional_object")]
    pub embeddings: Option<Embeddings>,
    /// Reciprocal Rank Fusion's k (hybrid ranking): rank r in a channel adds weight / (k + r).
    /// 1 rather than the customary 60: with k = 60 the first ranks of a channel differ too
    /// little, and a tool one channel is sure of loses to tools several channels find
    /// middling (`docs/tuning-notes.md`).
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0)))]
    pub rrf_k: f32,
    /// The channels' weights in hybrid ranking's fusion.
    #[serde(deserialize_with = "object")]
    pub channel_weights: ChannelWeights,
    /// MCP routes: requests there get `find_tools` and `call_tool` over MCP, answered by the
    /// gateway, whatever `mode` says. `{}` takes every default.
    #[serde(deserialize_with = "optional_object")]
    pub mcp: Option<Mcp>,
    /// `_tool_gating` for LLM requests (filter mode): an MCP server's gating tool, rules of the
    /// configuration, or both.
    #[serde(deserialize_with = "optional_object")]
    pub gating: Option<Gating>,
    /// Requests of a JSON shape of their own, read by this section instead of a dialect.
    #[serde(deserialize_with = "optional_object")]
    pub custom: Option<crate::custom::Custom>,
    /// Who may see and call which tool. With it a request toolsift cannot read is rejected,
    /// whatever `on_error` says.
    #[serde(deserialize_with = "optional_object")]
    pub access: Option<crate::access::AccessConfig>,
    /// A second policy of `access`'s shape, decided beside it on every surface and never
    /// enforced: where the two differ is reported (`shadow_deny`, `shadow_allow`). Needs
    /// `access`.
    #[serde(deserialize_with = "optional_object")]
    pub access_shadow: Option<crate::access::AccessConfig>,
    /// Take a tool the agent calls in a loop out of its next request. `{}` takes every default.
    #[serde(deserialize_with = "optional_object")]
    pub loop_guard: Option<crate::loop_guard::LoopGuardConfig>,
    /// Tools the caller does not have, offered (never callable) when a search finds nothing
    /// good; `tools` or `mcp` required.
    #[serde(deserialize_with = "optional_object")]
    pub suggestions: Option<crate::suggestions::SuggestionsConfig>,
    /// What filter mode does with a model call of a tool the request does not carry.
    #[serde(deserialize_with = "object")]
    pub unknown_tools: UnknownTools,
    /// Shadow ranking (filter mode): a share of requests goes upstream uncut, and what the cut
    /// would have cost is measured on the model's answers.
    #[serde(deserialize_with = "optional_object")]
    pub shadow: Option<Shadow>,
    /// Filter mode: keep, per catalog, the fewest tools that hold a target share of the calls
    /// seen in shadowed answers, instead of `top_k` (which it uses until it has learned
    /// enough). Needs `shadow`.
    #[serde(deserialize_with = "optional_object")]
    pub auto_k: Option<crate::auto_k::AutoKConfig>,
    /// Filter mode: what a question the ranking cannot read gets (one in a language or script
    /// the catalog's words do not share): not cut to `top_k` by chance, but forwarded with its
    /// `max_k` best tools (by default), every tool, or cut as any other.
    #[serde(deserialize_with = "object")]
    pub weak_query: crate::weak_query::WeakQueryConfig,
    /// Names every stat of this plugin `<stat_prefix>.toolsift.*` instead of `toolsift.*`
    /// (Envoy shows `wasmcustom.<stat_prefix>.toolsift.*`), as Envoy's own filters put their
    /// `stat_prefix` first: several toolsift filters in one Envoy keep their figures apart.
    /// Its log lines then start with `[<stat_prefix>]`, and its state in the VM's shared data
    /// is kept apart from other plugins'. 1 to 64 letters, digits or `_`.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = STAT_PREFIX_PATTERN))
    )]
    pub stat_prefix: Option<String>,
}

/// What a `stat_prefix` may be: one element of an Envoy stat name, and one word for the
/// `toolsift_plugin` tag's regular expression (`\w+`).
pub const STAT_PREFIX_PATTERN: &str = r"^[A-Za-z0-9_]{1,64}$";

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Filter,
            search: Search::default(),
            top_k: 5,
            min_score: None,
            max_tool_tokens: None,
            min_tools: 20,
            always_include: Vec::new(),
            on_error: OnError::Pass,
            max_body_bytes: 16 * 1024 * 1024,
            response_header: true,
            debug: false,
            gen_ai: false,
            rewrite_signed: false,
            dialect: DialectChoice::Auto,
            catalog_cache_size: 1024,
            catalog_cache_bytes: DEFAULT_CATALOG_CACHE_BYTES,
            ranking: Ranking::Keyword,
            embeddings: None,
            rrf_k: 1.0,
            channel_weights: ChannelWeights::default(),
            mcp: None,
            gating: None,
            custom: None,
            access: None,
            access_shadow: None,
            loop_guard: None,
            suggestions: None,
            unknown_tools: UnknownTools::default(),
            shadow: None,
            auto_k: None,
            weak_query: crate::weak_query::WeakQueryConfig::default(),
            stat_prefix: None,
        }
    }
}

/// The configuration's JSON Schema (draft 2020-12), derived from the types above and the types
/// of their sections, whose doc comments are its descriptions: what `toolsift schema` prints,
/// `docs/config.schema.json` ships and `toolsift check` validates plugin configurations with.
/// It holds what the checks hold (ranges, lengths, patterns; between fields, each section's
/// `schemars(transform)`), but for the few rules JSON Schema cannot state: a regular
/// expression's syntax (`gating.rules[].when.regex`), names unique across `access.rules`, and
/// `loop_guard.window` at least `repeats`. `tests/schema_properties.rs` holds the two to it.
#[cfg(not(target_arch = "wasm32"))]
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<Config>();
    schema.insert(
        "title".to_owned(),
        "toolsift plugin configuration".to_owned().into(),
    );
    let mut schema = schema.to_value();
    capacities(&mut schema);
    schema
}

/// Gives every number field of `schema` the largest value its type holds as it is read: a
/// count's [`crate::json::MAX_COUNT`] (or its type's, when smaller), an `f32`'s `f32::MAX` (a
/// larger number reads as infinity, which the checks refuse).
#[cfg(not(target_arch = "wasm32"))]
fn capacities(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            let most = match map.get("format").and_then(Value::as_str) {
                Some(f) if f.starts_with("uint") => Some(Value::from(crate::json::MAX_COUNT)),
                Some("float") => Some(Value::from(f64::from(f32::MAX))),
                _ => None,
            };
            if let Some(most) = most {
                let below = |v: &Value| v.as_f64() <= most.as_f64();
                if !map.get("maximum").is_some_and(below) {
                    map.insert("maximum".to_owned(), most);
                }
            }
            map.values_mut().for_each(capacities);
        }
        Value::Array(items) => items.iter_mut().for_each(capacities),
        _ => {}
    }
}

/// A configuration error, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn invalid(field: &str, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!(
        "invalid toolsift configuration: field `{field}`: {why}"
    ))
}

/// What [`Config::check`] holds between fields, said in the schema: hybrid ranking needs
/// `embeddings`; `access_shadow` needs `access`, and is neither in audit mode nor answers
/// unknown paths (a shadow is never enforced).
#[cfg(not(target_arch = "wasm32"))]
fn config_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{add, set};
    use serde_json::json;
    add(
        schema,
        [
            (
                "`ranking: \"hybrid\"` needs `embeddings`.",
                json!({
                    "if": {"required": ["ranking"], "properties": {"ranking": {"const": "hybrid"}}},
                    "then": set("embeddings")
                }),
            ),
            (
                "`access_shadow` needs `access`.",
                json!({"if": set("access_shadow"), "then": set("access")}),
            ),
            (
                "`auto_k` needs `shadow` with a `sample` above 0, and filter mode.",
                json!({
                    "if": set("auto_k"),
                    "then": {
                        "required": ["shadow"],
                        "properties": {
                            "shadow": {"type": "object", "properties": {"sample": {"exclusiveMinimum": 0}}},
                            "mode": {"not": {"const": "search"}}
                        }
                    }
                }),
            ),
            (
                "`access_shadow` is never enforced: no `mode: \"audit\"`, no \
                 `unknown_paths: \"deny\"` in it.",
                json!({"properties": {"access_shadow": {"properties": {
                    "mode": {"not": {"const": "audit"}},
                    "unknown_paths": {"not": {"const": "deny"}}
                }}}}),
            ),
        ],
    );
}

impl Config {
    /// Parses and checks the plugin configuration. Empty input means all defaults.
    pub fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Config::default());
        }
        // serde would also accept a JSON array as a struct, positionally: only objects are clear.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ConfigError(
                "invalid toolsift configuration: expected a JSON object".to_owned(),
            ));
        }
        let mut json = serde_json::Deserializer::from_slice(bytes);
        let config: Config = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            // The path names a mistyped field; serde's own message names an unknown one
            // ("unknown field `topk`, expected one of …").
            match e.path().to_string().as_str() {
                "." => ConfigError(format!("invalid toolsift configuration: {}", e.inner())),
                path => invalid(path, e.inner()),
            }
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.top_k == 0 {
            return Err(invalid("top_k", "must be at least 1"));
        }
        if let Some(s) = self.min_score {
            if !s.is_finite() || s < 0.0 {
                return Err(invalid("min_score", "must be a finite number >= 0"));
            }
        }
        if self.max_tool_tokens == Some(0) {
            return Err(invalid("max_tool_tokens", "must be at least 1"));
        }
        if self.max_body_bytes == 0 {
            return Err(invalid("max_body_bytes", "must be at least 1"));
        }
        if self.catalog_cache_bytes < MIN_CATALOG_CACHE_BYTES {
            return Err(invalid(
                "catalog_cache_bytes",
                format_args!("must be at least {MIN_CATALOG_CACHE_BYTES} (1 MiB)"),
            ));
        }
        for (i, pattern) in self.always_include.iter().enumerate() {
            if pattern.is_empty() {
                return Err(invalid(&format!("always_include[{i}]"), "empty pattern"));
            }
        }
        if !(self.rrf_k.is_finite() && self.rrf_k >= 0.0) {
            return Err(invalid("rrf_k", "must be a finite number >= 0"));
        }
        let w = self.channel_weights;
        for (name, weight) in [
            ("bm25", w.bm25),
            ("exact", w.exact),
            ("param_keys", w.param_keys),
            ("vector", w.vector),
            ("transitions", w.transitions),
        ] {
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(invalid(
                    &format!("channel_weights.{name}"),
                    "must be a finite number >= 0",
                ));
            }
        }
        if self.ranking == Ranking::Hybrid && self.embeddings.is_none() {
            return Err(invalid("embeddings", "required when ranking is \"hybrid\""));
        }
        if let Some(e) = &self.embeddings {
            e.check()?;
        }
        if let Some(m) = &self.mcp {
            m.check()?;
        }
        if let Some(g) = &self.gating {
            g.check()?;
        }
        if let Some(c) = &self.custom {
            c.check()
                .map_err(|(field, why)| invalid(&format!("custom.{field}"), why))?;
        }
        self.policy()?;
        self.loop_guard()?;
        if let Some(s) = &self.suggestions {
            s.check()
                .map_err(|(field, why)| invalid(&format!("suggestions.{field}"), why))?;
        }
        if !(1..=10).contains(&self.unknown_tools.max_rounds) {
            return Err(invalid("unknown_tools.max_rounds", "must be 1..=10"));
        }
        if let Some(shadow) = &self.shadow {
            shadow.check()?;
        }
        self.weak_query
            .validate()
            .map_err(|(field, why)| invalid(&format!("weak_query.{field}"), why))?;
        if let Some(auto_k) = &self.auto_k {
            auto_k
                .check()
                .map_err(|(field, why)| invalid(&format!("auto_k.{field}"), why))?;
            if self.shadow.as_ref().is_none_or(|s| s.sample <= 0.0) {
                return Err(invalid(
                    "auto_k",
                    "needs `shadow` with a `sample` above 0: it learns from shadowed answers \
                     (with `calibration`, the fleet's next calibration does)",
                ));
            }
            if self.mode != Mode::Filter {
                return Err(invalid("auto_k", "applies to filter mode only"));
            }
        }
        if let Some(prefix) = &self.stat_prefix {
            let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
            if !((1..=64).contains(&prefix.len()) && prefix.bytes().all(word)) {
                return Err(invalid(
                    "stat_prefix",
                    "must be 1 to 64 letters, digits or `_` (one element of a stat name)",
                ));
            }
        }
        self.search.check()
    }

    /// Whether filter mode answers made-up tool calls to the model (`unknown_tools.answer`).
    pub fn answers_unknown_tools(&self) -> bool {
        self.mode == Mode::Filter && self.unknown_tools.answer
    }

    /// The share of requests shadow ranking samples, when it applies: filter mode with a
    /// `shadow` section (search mode cuts nothing by rank).
    pub fn shadow_sample(&self) -> Option<f64> {
        let shadow = self.shadow.as_ref()?;
        (self.mode == Mode::Filter).then_some(shadow.sample)
    }

    /// The most follow-ups one request may send: search mode's rounds, or filter mode's
    /// answers to made-up calls; `None` when the gateway sends none.
    pub fn follow_up_rounds(&self) -> Option<usize> {
        match self.mode {
            Mode::Search => Some(self.search.max_search_rounds),
            Mode::Filter if self.answers_unknown_tools() => Some(self.unknown_tools.max_rounds),
            // `auto_k.beyond`: a request past a capped k runs search mode's loop.
            Mode::Filter => self
                .auto_k
                .as_ref()
                .and_then(|a| a.beyond)
                .map(|_| self.search.max_search_rounds),
        }
    }

    /// The `loop_guard` section compiled, `None` without one; an error names the field.
    pub fn loop_guard(&self) -> Result<Option<crate::loop_guard::LoopGuard>, ConfigError> {
        self.loop_guard
            .as_ref()
            .map(|g| {
                crate::loop_guard::LoopGuard::new(g)
                    .map_err(|(field, why)| invalid(&format!("loop_guard.{field}"), why))
            })
            .transpose()
    }

    /// Whether the MCP stats are defined: with `mcp`, or with `gating` (`_tool_gating`'s
    /// counters are among them).
    pub fn counts_mcp(&self) -> bool {
        self.mcp.is_some() || self.gating.is_some()
    }

    /// The `access` section compiled, `None` without one; an error names the field.
    pub fn policy(&self) -> Result<Option<crate::access::Policy>, ConfigError> {
        let policy = self
            .access
            .as_ref()
            .map(|a| {
                crate::access::Policy::new(a)
                    .map_err(|e| invalid(&format!("access.{}", e.field), e.why))
            })
            .transpose()?;
        match (policy, &self.access_shadow) {
            (policy, None) => Ok(policy),
            (None, Some(_)) => Err(invalid(
                "access_shadow",
                "needs an `access` section to compare with (`{\"default\": \"allow\"}` \
                 denies nothing)",
            )),
            (Some(policy), Some(shadow)) => policy
                .with_shadow(shadow)
                .map(Some)
                .map_err(|e| invalid(&format!("access_shadow.{}", e.field), e.why)),
        }
    }

    /// Whether `name` matches one of the `always_include` patterns.
    pub fn always_includes(&self, name: &str) -> bool {
        self.always_include.iter().any(|p| glob_match(p, name))
    }
}

/// The settings every service called through an Envoy cluster has (`at`: the section's path).
fn check_service(
    at: &str,
    cluster: &str,
    path: &str,
    authority: Option<&str>,
    headers: &std::collections::BTreeMap<String, String>,
    timeout_ms: usize,
) -> Result<(), ConfigError> {
    if cluster.trim().is_empty() {
        return Err(invalid(
            &format!("{at}.cluster"),
            "must name an Envoy cluster",
        ));
    }
    if !path.starts_with('/') {
        return Err(invalid(&format!("{at}.path"), "must start with `/`"));
    }
    if authority.is_some_and(|a| a.trim().is_empty()) {
        return Err(invalid(&format!("{at}.authority"), "must not be empty"));
    }
    for name in headers.keys() {
        if !crate::pairs::is_header_name(name) {
            return Err(invalid(
                &format!("{at}.headers.{name}"),
                "not a valid header name (pseudo-headers such as :path are set by toolsift)",
            ));
        }
    }
    if !(1..=60_000).contains(&timeout_ms) {
        return Err(invalid(&format!("{at}.timeout_ms"), "must be 1..=60000"));
    }
    Ok(())
}

/// `*` matches any run of characters, `?` one character; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    crate::glob::matches(pattern, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::custom::jsonpath::FieldPath;

    #[test]
    fn empty_means_defaults() {
        assert_eq!(Config::from_json(b"").unwrap(), Config::default());
        assert_eq!(Config::from_json(b"{}").unwrap(), Config::default());
    }

    /// What no JSON Schema sees (a document's keys are unique there) is refused all the same:
    /// a key written twice. The book's Limits page says so.
    #[test]
    fn a_key_written_twice_is_refused() {
        for config in [
            r#"{"top_k": 3, "top_k": 4}"#,
            r#"{"search": {"eager_k": 1, "eager_k": 2}}"#,
        ] {
            let err = Config::from_json(config.as_bytes()).unwrap_err().0;
            assert!(err.contains("duplicate field"), "{config}: {err}");
        }
    }

    /// A section is an object and a name a string: serde's derive would also read a struct
    /// from an array (its fields in order) and an enum from an object, which the schema
    /// refuses (found by tests/schema_properties.rs).
    #[test]
    fn sections_are_objects_and_names_strings() {
        for (config, field) in [
            (r#"{"search": []}"#, "search"),
            (
                r#"{"channel_weights": [1, 0.5, 0.25, 1]}"#,
                "channel_weights",
            ),
            (
                r#"{"access": {"rules": [[["*"], ["a"]]]}}"#,
                "access.rules[0]",
            ),
            (r#"{"loop_guard": {"note": []}}"#, "loop_guard.note"),
            (r#"{"auto_k": [0.5], "shadow": {"sample": 1}}"#, "auto_k"),
            (r#"{"mode": {"search": null}}"#, "mode"),
            (
                r#"{"access": {"default": {"allow": null}}}"#,
                "access.default",
            ),
        ] {
            let err = Config::from_json(config.as_bytes()).unwrap_err().0;
            assert!(
                err.contains(&format!("field `{field}`: invalid type")),
                "{config}: {err}"
            );
        }
        // The forms the schema gives still read.
        let c = Config::from_json(br#"{"mode": "search", "search": {}, "loop_guard": null}"#);
        assert_eq!(c.unwrap().mode, Mode::Search);
    }

    #[test]
    fn whole_numbers_may_be_written_as_doubles() {
        // How Istio's pluginConfig may spell them.
        let c = Config::from_json(br#"{"top_k": 5.0, "max_tool_tokens": 900.0}"#).unwrap();
        assert_eq!((c.top_k, c.max_tool_tokens), (5, Some(900)));
        // The counts of the sections too, whichever module reads them (issue 48: these were
        // plain integers, and `2.0` passed the schema but not the filter).
        let c = Config::from_json(
            br#"{"loop_guard": {"repeats": 3.0, "window": 12.0},
                "suggestions": {"k": 2.0, "mcp": {"cluster": "s", "refresh_seconds": 60.0,
                    "timeout_ms": 1000.0}},
                "access": {"unknown_paths": "deny", "unknown_paths_status": 403.0}}"#,
        )
        .unwrap();
        let guard = c.loop_guard.unwrap();
        assert_eq!((guard.repeats, guard.window), (3, 12));
        let suggestions = c.suggestions.unwrap();
        let server = suggestions.mcp.unwrap();
        assert_eq!(
            (suggestions.k, server.refresh_seconds, server.timeout_ms),
            (2, 60, 1000)
        );
        assert_eq!(c.access.unwrap().unknown_paths_status, Some(403));
        // An optional count may be null (unset), as the schema says.
        let c = Config::from_json(br#"{"max_tool_tokens": null}"#).unwrap();
        assert_eq!(c.max_tool_tokens, None);
        // Fractions, negatives and what the field's type cannot hold stay errors.
        for (config, field) in [
            (r#"{"loop_guard": {"repeats": 2.5}}"#, "loop_guard.repeats"),
            (
                r#"{"suggestions": {"k": -1, "tools": [{"name": "a"}]}}"#,
                "suggestions.k",
            ),
            (
                r#"{"access": {"unknown_paths": "deny", "unknown_paths_status": 65536}}"#,
                "access.unknown_paths_status",
            ),
        ] {
            let err = Config::from_json(config.as_bytes()).unwrap_err().0;
            assert!(
                err.contains(&format!("field `{field}`: expected a whole number")),
                "{config}: {err}"
            );
        }
    }

    #[test]
    fn parses_every_key() {
        let c = Config::from_json(
            br#"{"top_k":3,"min_score":0.5,"max_tool_tokens":900,"min_tools":10,
                "always_include":["search_*"],"on_error":"reject","max_body_bytes":1000,
                "response_header":false,"debug":true,"dialect":"anthropic","catalog_cache_size":2,
                "catalog_cache_bytes":2097152}"#,
        )
        .unwrap();
        assert_eq!(c.top_k, 3);
        assert_eq!(
            (c.catalog_cache_size, c.catalog_cache_bytes),
            (2, 2 * 1024 * 1024)
        );
        assert_eq!(
            Config::default().catalog_cache_bytes,
            DEFAULT_CATALOG_CACHE_BYTES
        );
        assert_eq!(c.on_error, OnError::Reject);
        assert_eq!(c.dialect, DialectChoice::Fixed(Dialect::Anthropic));
        assert_eq!(c.dialect.resolve("/anything"), Some(Dialect::Anthropic));
        assert_eq!(
            Config::from_json(br#"{"dialect":"auto"}"#).unwrap().dialect,
            DialectChoice::Auto
        );
    }

    #[test]
    fn errors_name_the_field() {
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"topk":5}"#).contains("unknown field `topk`"));
        assert!(err(r#"{"top_k":0}"#).contains("`top_k`"));
        assert!(err(r#"{"top_k":"5"}"#).contains("field `top_k`: invalid type"));
        assert!(err(r#"{"top_k":2.5}"#).contains("field `top_k`: expected a whole number"));
        assert!(err(r#"{"min_tools":-1}"#).contains("field `min_tools`"));
        assert!(err(r#"{"min_score":-1}"#).contains("`min_score`"));
        assert!(err(r#"{"on_error":"explode"}"#).contains("field `on_error`: unknown variant"));
        assert!(err(r#"{"always_include":[""]}"#).contains("`always_include[0]`"));
        assert!(
            err(r#"{"dialect":"cohere"}"#).contains("field `dialect`: unknown dialect `cohere`, expected `auto` or one of: openai_chat, openai_responses, anthropic, gemini, bedrock, ollama")
        );
        assert!(err("[1]").contains("expected a JSON object"));
        assert!(err(r#"{"catalog_cache_bytes":1000}"#).contains("field `catalog_cache_bytes`"));
        assert!(
            err(r#"{"catalog_cache_bytes":"64MiB"}"#)
                .contains("field `catalog_cache_bytes`: invalid type")
        );
        // Hybrid ranking's own settings at the top level.
        assert!(err(r#"{"channel_weights":{"vector":-1}}"#).contains("`channel_weights.vector`"));
        assert!(err(r#"{"rrf_k":-1}"#).contains("`rrf_k`"));
        // `access` and `access_shadow`, whose types are access's own, and Config::policy.
        assert!(
            err(r#"{"access":{"rules":[{"when":["a"],"allow":[""]}]}}"#)
                .contains("`access.rules[0].allow[0]`")
        );
        assert!(
            err(r#"{"access":{"rules":[{"when":["a"],"alow":["x"]}]}}"#)
                .contains("unknown field `alow`")
        );
        assert!(
            err(r#"{"access":{},"access_shadow":{"rules":[{"when":["a"],"allow":[""]}]}}"#)
                .contains("`access_shadow.rules[0].allow[0]`")
        );
        assert!(err(r#"{"access_shadow":{}}"#).contains("`access_shadow`"));
        assert!(
            err(r#"{"access":{},"access_shadow":{"mode":"audit"}}"#)
                .contains("`access_shadow.mode`")
        );
        assert!(
            err(r#"{"access":{"rules":[{"name":"a b","when":["a"],"allow":["x"]}]}}"#)
                .contains("`access.rules[0].name`")
        );
        assert!(
            err(r#"{"access":{"rules":[{"name":"r","when":["a"],"allow":["x"]},{"name":"r","when":["b"],"allow":["y"]}]}}"#)
                .contains("`access.rules[1].name`")
        );
    }

    #[test]
    fn unknown_tools_settings() {
        let c = Config::default();
        assert!(!c.answers_unknown_tools());
        assert_eq!(c.follow_up_rounds(), None);
        let c =
            Config::from_json(br#"{"unknown_tools":{"answer":true,"max_rounds":3.0}}"#).unwrap();
        assert!(c.answers_unknown_tools());
        assert_eq!(c.follow_up_rounds(), Some(3));
        // Search mode answers made-up calls in its own loop, bounded by its own rounds.
        let c = Config::from_json(br#"{"mode":"search","unknown_tools":{"answer":true}}"#).unwrap();
        assert!(!c.answers_unknown_tools());
        assert_eq!(c.follow_up_rounds(), Some(3));
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(
            err(r#"{"unknown_tools":{"answer":true,"max_rounds":0}}"#)
                .contains("`unknown_tools.max_rounds`: must be 1..=10")
        );
        assert!(err(r#"{"unknown_tools":{"answer":"yes"}}"#).contains("`unknown_tools.answer`"));
        assert!(err(r#"{"unknown_tools":{"rounds":2}}"#).contains("unknown field `rounds`"));
    }

    #[test]
    fn custom_shapes() {
        let c = Config::from_json(
            br#"{"custom":{"paths":["/wso2/*"],"query_path":"$.messages[-1].content",
                "tools_path":"$.payload.functions","fields":{"name":"function.name"}}}"#,
        )
        .unwrap();
        let custom = c.custom.unwrap();
        assert!(custom.matches("/wso2/v1/chat/completions?x=1") && !custom.matches("/v1/wso2"));
        assert_eq!(
            custom.fields.name,
            FieldPath::parse("function.name").unwrap()
        );
        assert_eq!(
            custom.fields.description,
            FieldPath::parse("description").unwrap()
        );
        assert!(
            Config::from_json(
                br#"{"custom":{"paths":["*"],"text_path":"$.messages[*].content","strip_tags":true}}"#
            )
            .is_ok()
        );
        let refused = |json: &str, why: &str| {
            let err = Config::from_json(json.as_bytes()).unwrap_err().0;
            assert!(err.contains(why), "{err}");
        };
        let tools = r#""paths":["/x"],"query_path":"$.q","tools_path":"$.tools""#;
        // Paths that cannot be read are refused where they are written, with the reason.
        refused(
            r#"{"custom":{"paths":["/x"],"query_path":"$..q","tools_path":"$.t"}}"#,
            "field `custom.query_path`: `$..q`: recursive descent",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"query_path":"$.q","tools_path":"tools"}}"#,
            "field `custom.tools_path`: `tools` is not a JSONPath",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"text_path":"$.m[?(@.a)]"}}"#,
            "field `custom.text_path`:",
        );
        refused(
            &format!(r#"{{"custom":{{{tools},"fields":{{"name":"a[0"}}}}}}"#),
            "field `custom.fields.name`:",
        );
        refused(
            &format!(r#"{{"custom":{{{tools},"fields":{{"name":"a[*]"}}}}}}"#),
            "`custom.fields.name`: must select one value",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"query_path":"$.q","tools_path":"$.a[*].b[*]"}}"#,
            "`custom.tools_path`",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"tools_path":"$.t"}}"#,
            "`custom.query_path`: required",
        );
        refused(
            r#"{"custom":{"paths":["/x"]}}"#,
            "`custom.tools_path`: required",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"text_path":"$.m","tools_path":"$.t"}}"#,
            "`custom.text_path`",
        );
        refused(
            &format!(r#"{{"custom":{{{tools},"strip_tags":true}}}}"#),
            "`custom.strip_tags`",
        );
        refused(
            r#"{"custom":{"paths":["/x"],"text_path":"$.m","fields":{"name":"n"}}}"#,
            "`custom.fields`",
        );
        refused(
            r#"{"custom":{"paths":[],"text_path":"$.m"}}"#,
            "`custom.paths`",
        );
        refused(
            r#"{"custom":{"paths":["x"],"text_path":"$.m"}}"#,
            "`custom.paths[0]`",
        );
        refused(r#"{"custom":{"text_path":"$.m"}}"#, "missing field `paths`");
        refused(
            &format!(r#"{{"custom":{{{tools},"fields":{{"title":"t"}}}}}}"#),
            "unknown field `title`",
        );
    }

    #[test]
    fn the_books_examples_of_custom_shapes_load() {
        let section = include_str!("../../docs/book/src/concepts/custom-shapes.md");
        let examples: Vec<&str> = section
            .split("```json\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .collect();
        assert_eq!(examples.len(), 2);
        for json in examples {
            let config = Config::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            assert!(config.custom.is_some());
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("search_*", "search_web"));
        assert!(glob_match("*_issue", "create_issue"));
        assert!(glob_match("get_?", "get_x"));
        assert!(!glob_match("get_?", "get_xy"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
    }
}
