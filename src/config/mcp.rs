//! The `mcp` section: the routes that are MCP, and how their catalogs are read and kept. Its
//! feature, [`crate::mcp`], sits above `config` in the layers (it reads the configuration).

use super::{ConfigError, glob_match, invalid};
use crate::json::whole_number;
use serde::Deserialize;

/// MCP routes (`mcp`): requests whose path matches `paths` are MCP's Streamable HTTP transport,
/// and get search mode over MCP: `tools/list` shows `find_tools` and `call_tool`, the gateway
/// answers them from the server's catalog.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Mcp {
    /// Glob patterns (`*`, `?`) over the request path (without its query), each starting with
    /// `/` or `*`: requests there are MCP, and get `find_tools` over MCP whatever `mode` says.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(length(min = 1), inner(regex(pattern = r"^[/*]")))
    )]
    pub paths: Vec<String>,
    /// The longest a catalog page or a `call_tool` call may take (1–600000).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 600_000)))]
    pub timeout_ms: usize,
    /// The longest the `_tool_gating` call may take before `find_tools` is answered without it
    /// (1–60000).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 60_000)))]
    pub gating_timeout_ms: usize,
    /// How long a catalog stays cached when the server gives no `ttlMs` (2025-11-25 servers);
    /// a `ttlMs` of 0 is never cached.
    #[serde(deserialize_with = "whole_number")]
    pub catalog_ttl_ms: usize,
    /// Bytes of catalogs each worker keeps (least recently used evicted).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub cache_bytes: usize,
    /// `tools/list` pages read at most per catalog (1–10000).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 10_000)))]
    pub max_pages: usize,
}

impl Default for Mcp {
    fn default() -> Self {
        Mcp {
            paths: vec!["/mcp".to_owned()],
            timeout_ms: 30_000,
            gating_timeout_ms: 1_000,
            catalog_ttl_ms: 60_000,
            cache_bytes: 32 * 1024 * 1024,
            max_pages: 100,
        }
    }
}

impl Mcp {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.paths.is_empty() {
            return Err(invalid("mcp.paths", "must name at least one path pattern"));
        }
        for (i, p) in self.paths.iter().enumerate() {
            if !p.starts_with('/') && !p.starts_with('*') {
                return Err(invalid(
                    &format!("mcp.paths[{i}]"),
                    "must start with `/` or `*`",
                ));
            }
        }
        if !(1..=600_000).contains(&self.timeout_ms) {
            return Err(invalid("mcp.timeout_ms", "must be 1..=600000"));
        }
        if !(1..=60_000).contains(&self.gating_timeout_ms) {
            return Err(invalid("mcp.gating_timeout_ms", "must be 1..=60000"));
        }
        if self.cache_bytes == 0 {
            return Err(invalid("mcp.cache_bytes", "must be at least 1"));
        }
        if !(1..=10_000).contains(&self.max_pages) {
            return Err(invalid("mcp.max_pages", "must be 1..=10000"));
        }
        Ok(())
    }

    /// Whether a request to `path` is on an MCP route.
    pub fn matches(&self, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        self.paths.iter().any(|p| glob_match(p, path))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn mcp_settings() {
        let c =
            Config::from_json(br#"{"mcp":{"paths":["/mcp","/servers/*/mcp"],"timeout_ms":5000}}"#)
                .unwrap();
        let m = c.mcp.unwrap();
        assert_eq!(
            (m.timeout_ms, m.gating_timeout_ms, m.max_pages),
            (5000, 1000, 100)
        );
        assert!(m.matches("/mcp") && m.matches("/servers/github/mcp?x=1") && !m.matches("/mcpx"));
        assert_eq!(
            Config::from_json(br#"{"mcp":{}}"#)
                .unwrap()
                .mcp
                .unwrap()
                .paths,
            ["/mcp"]
        );
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"mcp":{"paths":[]}}"#).contains("`mcp.paths`"));
        assert!(err(r#"{"mcp":{"paths":["mcp"]}}"#).contains("`mcp.paths[0]`"));
        assert!(err(r#"{"mcp":{"paths":"/mcp"}}"#).contains("field `mcp.paths`: invalid type"));
        assert!(err(r#"{"mcp":{"timeout_ms":0}}"#).contains("`mcp.timeout_ms`"));
        assert!(err(r#"{"mcp":{"gating_timeout_ms":0}}"#).contains("`mcp.gating_timeout_ms`"));
        assert!(err(r#"{"mcp":{"cache_bytes":0}}"#).contains("`mcp.cache_bytes`"));
        assert!(err(r#"{"mcp":{"max_pages":0}}"#).contains("`mcp.max_pages`"));
        assert!(err(r#"{"mcp":{"path":"/mcp"}}"#).contains("unknown field `path`"));
    }
}
