//! The `search` section: search mode's meta-tool and its loop, the providers' own tool search,
//! and the memory of found tools. Its feature, [`crate::search`], sits above `config` in the
//! layers (it reads the configuration).

use super::{ConfigError, invalid};
use crate::json::{object, objects, optional_object, whole_number};
use serde::Deserialize;

/// The name of the optional second meta-tool of search mode.
pub const USE_TOOL_NAME: &str = "use_tool";

/// Search mode's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Search {
    /// The meta-tool's name (a request whose client has a tool of that name gets
    /// `find_tools_2`, `_3`, …: a client tool is never shadowed).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(
            regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"),
            extend("not" = {"const": USE_TOOL_NAME})
        )
    )]
    pub tool_name: String,
    /// Best-ranked tools shown from the start, besides the pinned ones.
    #[serde(deserialize_with = "whole_number")]
    pub eager_k: usize,
    /// Follow-up requests answering the meta-tool, at most (1–10); the last goes without it.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 10)))]
    pub max_search_rounds: usize,
    /// `find_tools` calls answered in one request's loop, at most (1–100): a model that
    /// searches more is stopped with its last answer (a search storm). On MCP routes with
    /// `search.memory`: in one session between calls of real tools; one more is an error result.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 100)))]
    pub max_searches: usize,
    /// The meta-tool's description lists the names of the deferred tools.
    pub catalog_hint: bool,
    /// Also show `use_tool(query, params)`, resolved by the gateway into a direct call.
    pub use_tool: bool,
    /// The longest one follow-up request may take (filter mode's follow-ups for made-up calls
    /// too), 1–600000.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 600_000)))]
    pub timeout_ms: usize,
    /// Models whose provider searches deferred tools itself: their requests get the
    /// provider's search tool and `defer_loading: true` on the deferred tools instead of the
    /// gateway's `find_tools` loop. The first rule whose `model` matches applies.
    #[serde(deserialize_with = "objects")]
    pub native_search: Vec<NativeSearch>,
    /// Hold the request and response headers until the bodies are read: `native_search` can
    /// then add `anthropic-beta`, the follow-ups copy the request as the router rewrote it, and
    /// the response gets `x-toolsift-search` and a failed follow-up's status. Needs Envoy's
    /// `allow_on_headers_stop_iteration: true` (which Istio's WasmPlugin and Envoy Gateway
    /// cannot set); without it the filter notices, resumes the request, and stops holding.
    /// In filter mode too, with `unknown_tools.answer`.
    pub hold_headers: bool,
    /// Memory of found tools, on LLM and MCP routes: tools a session's earlier turns found are
    /// offered again without another search. Off unless set; `{}` takes every default.
    // How: `crate::search::memory`.
    #[serde(deserialize_with = "optional_object")]
    pub memory: Option<Memory>,
}

/// `search.memory`: where a request's session comes from, and how much is kept how long.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Memory {
    /// What names a request's session.
    #[serde(deserialize_with = "object")]
    pub session: SessionSource,
    /// A session's memory is forgotten this long after its last request (1–2592000).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 2_592_000)))]
    pub ttl_seconds: usize,
    /// Bytes the memory of every session together takes at most, in the shared data of one
    /// Envoy (all its workers), 1 KiB to 1 GiB; the least recently used sessions go first.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(range(min = MIN_MEMORY_BYTES, max = MAX_MEMORY_BYTES))
    )]
    pub max_bytes: usize,
    /// Tools one session remembers at most (1–100): the ones found last stay.
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 100)))]
    pub max_tools: usize,
}

/// `search.memory.session`: what names a request's session.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = session_rules))]
pub struct SessionSource {
    /// A request header naming the session (`x-session-id`, lower case); it wins over the
    /// body's fields, and on MCP routes over `Mcp-Session-Id`.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = r"^[a-z0-9_.-]+$"))
    )]
    pub header: Option<String>,
    /// Without the header, the provider's own fields name the session: OpenAI Chat and
    /// Responses `prompt_cache_key`, `user`, `safety_identifier` (the first one set); Anthropic
    /// `metadata.user_id`. With `false` only the header does (then `header` is required).
    pub provider_fields: bool,
}

impl Default for SessionSource {
    fn default() -> Self {
        SessionSource {
            header: None,
            provider_fields: true,
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            session: SessionSource::default(),
            ttl_seconds: 3600,
            max_bytes: 4 * 1024 * 1024,
            max_tools: 20,
        }
    }
}

/// The least `search.memory.max_bytes`: a few sessions.
pub const MIN_MEMORY_BYTES: usize = 1024;
/// The most `search.memory.max_bytes`: shared data is the Envoy process's memory.
pub const MAX_MEMORY_BYTES: usize = 1024 * 1024 * 1024;

impl Memory {
    fn check(&self) -> Result<(), ConfigError> {
        if let Some(header) = &self.session.header {
            // HTTP/2 header names are lower-case tokens; Envoy hands them over lower-cased.
            let token = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
            if header.is_empty() || !header.bytes().all(token) {
                return Err(invalid(
                    "search.memory.session.header",
                    "must be a lower-case header name (letters, digits, `-`, `_`, `.`)",
                ));
            }
        } else if !self.session.provider_fields {
            return Err(invalid(
                "search.memory.session",
                "names no session: set `header`, or leave `provider_fields` on",
            ));
        }
        if !(1..=30 * 24 * 3600).contains(&self.ttl_seconds) {
            return Err(invalid(
                "search.memory.ttl_seconds",
                "must be 1..=2592000 (30 days)",
            ));
        }
        if !(MIN_MEMORY_BYTES..=MAX_MEMORY_BYTES).contains(&self.max_bytes) {
            return Err(invalid(
                "search.memory.max_bytes",
                format_args!("must be {MIN_MEMORY_BYTES}..={MAX_MEMORY_BYTES} (1 KiB to 1 GiB)"),
            ));
        }
        if !(1..=100).contains(&self.max_tools) {
            return Err(invalid("search.memory.max_tools", "must be 1..=100"));
        }
        Ok(())
    }
}

/// One `search.native_search` rule.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NativeSearch {
    /// Glob (`*`, `?`) over the request body's `model`; not empty.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub model: String,
    /// The search tool entry added first to the tools array. Unset: the provider's own
    /// (Anthropic Messages `tool_search_tool_bm25_20251119`, OpenAI Responses `tool_search`);
    /// required for OpenAI Chat Completions servers that have one (OpenRouter's
    /// `{"type":"openrouter:tool_search"}`). Gemini and Bedrock have no deferral: rules never
    /// apply to them.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(transform = search_tool_schema))]
    pub tool: Option<serde_json::Map<String, serde_json::Value>>,
    /// Anthropic Messages: the `anthropic-beta` value the provider needs for tool search,
    /// added to the request's own; `""` for none.
    #[serde(default = "default_anthropic_beta")]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = r"^[A-Za-z0-9_.-]*$"))
    )]
    pub anthropic_beta: String,
}

/// `search.native_search[].tool`: an object with a string `type`.
#[cfg(not(target_arch = "wasm32"))]
fn search_tool_schema(schema: &mut schemars::Schema) {
    schema.insert("required".into(), serde_json::json!(["type"]));
    schema.insert(
        "properties".into(),
        serde_json::json!({"type": {
            "type": "string",
            "description": "The entry's `type`, as the provider names its search tool; the \
                entry's other keys go as written."
        }}),
    );
}

/// The beta Anthropic's tool search tool was released under.
pub const TOOL_SEARCH_BETA: &str = "advanced-tool-use-2025-11-20";

fn default_anthropic_beta() -> String {
    TOOL_SEARCH_BETA.to_owned()
}

impl NativeSearch {
    fn check(&self, at: &str) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(invalid(&format!("{at}.model"), "must not be empty"));
        }
        if let Some(tool) = &self.tool {
            if !tool.get("type").is_some_and(serde_json::Value::is_string) {
                return Err(invalid(
                    &format!("{at}.tool"),
                    "must be a tool object with a string `type`",
                ));
            }
        }
        let token = |b: u8| b.is_ascii_alphanumeric() || b"-_.".contains(&b);
        if !self.anthropic_beta.bytes().all(token) {
            return Err(invalid(
                &format!("{at}.anthropic_beta"),
                "must be one beta name (letters, digits, `-`, `_`, `.`)",
            ));
        }
        Ok(())
    }
}

impl Default for Search {
    fn default() -> Self {
        Search {
            tool_name: "find_tools".to_owned(),
            eager_k: 0,
            max_search_rounds: 3,
            max_searches: 5,
            catalog_hint: false,
            use_tool: false,
            timeout_ms: 120_000,
            native_search: Vec::new(),
            hold_headers: false,
            memory: None,
        }
    }
}

impl Search {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let valid_name = |n: &str| {
            (1..=64).contains(&n.len())
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if !valid_name(&self.tool_name) {
            return Err(invalid(
                "search.tool_name",
                "must be 1 to 64 letters, digits, `_` or `-` (what every LLM API accepts)",
            ));
        }
        if self.tool_name == USE_TOOL_NAME {
            return Err(invalid(
                "search.tool_name",
                "`use_tool` is the other meta-tool",
            ));
        }
        if !(1..=100).contains(&self.max_searches) {
            return Err(invalid("search.max_searches", "must be 1..=100"));
        }
        if !(1..=10).contains(&self.max_search_rounds) {
            return Err(invalid("search.max_search_rounds", "must be 1..=10"));
        }
        if !(1..=600_000).contains(&self.timeout_ms) {
            return Err(invalid("search.timeout_ms", "must be 1..=600000"));
        }
        for (i, rule) in self.native_search.iter().enumerate() {
            rule.check(&format!("search.native_search[{i}]"))?;
        }
        if let Some(memory) = &self.memory {
            memory.check()?;
        }
        Ok(())
    }
}

/// `search.memory.session` names a session: without `provider_fields`, `header` is needed.
#[cfg(not(target_arch = "wasm32"))]
fn session_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{add, set};
    add(
        schema,
        [(
            "`provider_fields: false` needs `header`.",
            serde_json::json!({
                "if": {
                    "required": ["provider_fields"],
                    "properties": {"provider_fields": {"const": false}}
                },
                "then": set("header")
            }),
        )],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Mode};

    #[test]
    fn search_memory_is_checked_field_by_field() {
        let c = Config::from_json(
            br#"{"mode":"search","search":{"memory":{"session":{"header":"x-session-id"},
                "ttl_seconds":60,"max_bytes":65536,"max_tools":10}}}"#,
        )
        .unwrap();
        let m = c.search.memory.unwrap();
        assert_eq!(m.session.header.as_deref(), Some("x-session-id"));
        assert!(m.session.provider_fields);
        assert_eq!((m.ttl_seconds, m.max_bytes, m.max_tools), (60, 65536, 10));
        assert_eq!(
            Config::from_json(br#"{"search":{"memory":{}}}"#)
                .unwrap()
                .search
                .memory,
            Some(Memory::default())
        );
        for (memory, field) in [
            (
                r#"{"session":{"header":"X-Session"}}"#,
                "search.memory.session.header",
            ),
            (
                r#"{"session":{"header":""}}"#,
                "search.memory.session.header",
            ),
            (
                r#"{"session":{"provider_fields":false}}"#,
                "search.memory.session",
            ),
            (r#"{"ttl_seconds":0}"#, "search.memory.ttl_seconds"),
            (r#"{"ttl_seconds":2592001}"#, "search.memory.ttl_seconds"),
            (r#"{"max_bytes":1023}"#, "search.memory.max_bytes"),
            (r#"{"max_tools":0}"#, "search.memory.max_tools"),
            (r#"{"max_tools":101}"#, "search.memory.max_tools"),
            (r#"{"ttl":5}"#, "search.memory.ttl"),
            (
                r#"{"session":{"cookie":"s"}}"#,
                "search.memory.session.cookie",
            ),
            (r#"{"max_bytes":"big"}"#, "search.memory.max_bytes"),
        ] {
            let config = format!(r#"{{"search":{{"memory":{memory}}}}}"#);
            let err = Config::from_json(config.as_bytes()).unwrap_err().0;
            assert!(err.contains(&format!("field `{field}`")), "{memory}: {err}");
        }
    }

    #[test]
    fn search_mode_settings() {
        let c = Config::from_json(br#"{"mode":"search","search":{"eager_k":2}}"#).unwrap();
        assert_eq!(c.mode, Mode::Search);
        assert_eq!(
            (
                c.search.tool_name.as_str(),
                c.search.eager_k,
                c.search.max_search_rounds
            ),
            ("find_tools", 2, 3)
        );
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"mode":"find"}"#).contains("field `mode`: unknown variant"));
        assert!(err(r#"{"search":{"tool_name":"find tools"}}"#).contains("`search.tool_name`"));
        assert!(
            err(r#"{"search":{"max_search_rounds":0}}"#).contains("`search.max_search_rounds`")
        );
        assert!(err(r#"{"search":{"rounds":2}}"#).contains("unknown field `rounds`"));
    }

    #[test]
    fn native_search_rules() {
        let c = Config::from_json(
            br#"{"mode":"search","search":{"native_search":[{"model":"claude-*"},
                {"model":"or/*","tool":{"type":"openrouter:tool_search"},"anthropic_beta":""}]}}"#,
        )
        .unwrap();
        let rules = &c.search.native_search;
        assert_eq!(rules[0].anthropic_beta, TOOL_SEARCH_BETA);
        assert_eq!(rules[0].tool, None);
        assert_eq!(rules[1].anthropic_beta, "");
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        let rule = |r: &str| format!(r#"{{"search":{{"native_search":[{{"model":"m"}},{r}]}}}}"#);
        assert!(err(&rule(r#"{"model":" "}"#)).contains("`search.native_search[1].model`"));
        assert!(
            err(&rule(r#"{"model":"m","tool":{"name":"x"}}"#))
                .contains("`search.native_search[1].tool`")
        );
        assert!(
            err(&rule(r#"{"model":"m","anthropic_beta":"a,b"}"#))
                .contains("`search.native_search[1].anthropic_beta`")
        );
        assert!(err(&rule(r#"{"models":"m"}"#)).contains("unknown field `models`"));
        assert!(err(&rule(r#"{}"#)).contains("missing field `model`"));
    }
}
