//! The `gating` section: `_tool_gating` for LLM requests. Its rules (`gating.rules`) are
//! [`crate::gating`]'s, below `config` in the layers; the rest (the gating server, what a claim
//! does) configures what sits above `config`: the call to the server ([`crate::mcp::llm`]) and
//! the claim applied to the request ([`crate::lifecycle`]).

use super::{ConfigError, check_service, invalid};
use crate::json::{objects, optional_object, variant, whole_number};
use serde::Deserialize;

/// `_tool_gating` for LLM requests: before the tools are chosen (filter mode), the latest user
/// text goes to an MCP server's gating tool (`mcp`), to rules of the configuration (`rules`),
/// or both; their exclusions add up, and a rule's claim comes before the server's.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = gating_rules))]
pub struct Gating {
    /// The MCP server whose `_tool_gating` tool is asked.
    #[serde(default, deserialize_with = "optional_object")]
    pub mcp: Option<GatingMcp>,
    /// What a claim does.
    #[serde(default, deserialize_with = "variant")]
    pub claim: ClaimMode,
    /// Gating without a server: text that matches a rule excludes tools or claims one, as a
    /// server's `_tool_gating` answer would. `gating` needs `mcp`, `rules` or both.
    #[serde(default, deserialize_with = "objects")]
    pub rules: Vec<crate::gating::GatingRule>,
}

impl Gating {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if let Some(mcp) = &self.mcp {
            mcp.check()?;
        }
        if self.mcp.is_none() && self.rules.is_empty() {
            return Err(invalid(
                "gating",
                "needs `mcp` (a gating server), `rules`, or both",
            ));
        }
        crate::gating::Rules::new(&self.rules)
            .map_err(|(field, why)| invalid(&format!("gating.rules{field}"), why))?;
        Ok(())
    }
}

/// What a `_tool_gating` claim does to an LLM request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    /// `tool_choice` names the claimed tool (in the dialect's form).
    #[default]
    ToolChoice,
    /// The gateway answers with a call of the claimed tool, without calling the model
    /// (non-streaming requests; streaming ones get `tool_choice`).
    Answer,
}

/// The MCP server whose `_tool_gating` tool LLM requests consult.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GatingMcp {
    /// The Envoy cluster of the MCP server.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub cluster: String,
    /// Its endpoint's path.
    #[serde(default = "default_mcp_path")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(regex(pattern = r"^/")))]
    pub path: String,
    /// `:authority` of the call; the cluster name when unset (the SDK's servers accept only
    /// `localhost` / `127.0.0.1` unless told otherwise).
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub authority: Option<String>,
    /// Extra request headers, for example `{"authorization": "Bearer …"}`.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(extend("propertyNames" = {"pattern": crate::pairs::HEADER_NAME_PATTERN}))
    )]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The longest a request waits for the verdict (1–60000); then it goes on without it.
    #[serde(
        default = "default_gating_timeout_ms",
        deserialize_with = "whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 60_000)))]
    pub timeout_ms: usize,
    /// The gating tool's argument that gets the text.
    #[serde(default = "default_gating_argument")]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub argument: String,
}

fn default_mcp_path() -> String {
    "/mcp".to_owned()
}
fn default_gating_timeout_ms() -> usize {
    300
}
fn default_gating_argument() -> String {
    "query".to_owned()
}

impl GatingMcp {
    fn check(&self) -> Result<(), ConfigError> {
        check_service(
            "gating.mcp",
            &self.cluster,
            &self.path,
            self.authority.as_deref(),
            &self.headers,
            self.timeout_ms,
        )?;
        if self.argument.trim().is_empty() {
            return Err(invalid("gating.mcp.argument", "must not be empty"));
        }
        Ok(())
    }

    /// The authority the call is sent to.
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.cluster)
    }
}

/// `gating` needs a server, rules, or both.
#[cfg(not(target_arch = "wasm32"))]
fn gating_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{any_of, filled, set};
    any_of(
        schema,
        "`gating` needs `mcp` (a gating server), `rules`, or both.",
        vec![set("mcp"), filled("rules")],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn gating_settings() {
        let c = Config::from_json(br#"{"gating":{"mcp":{"cluster":"tools"},"claim":"answer"}}"#)
            .unwrap();
        let g = c.gating.unwrap();
        assert_eq!(g.claim, ClaimMode::Answer);
        let mcp = g.mcp.unwrap();
        assert_eq!(
            (mcp.path.as_str(), mcp.authority(), mcp.timeout_ms),
            ("/mcp", "tools", 300)
        );
        let err = |json: &str| Config::from_json(json.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"gating":{"mcp":{"cluster":" "}}}"#).contains("`gating.mcp.cluster`"));
        // Rules alone are a gating of their own; errors name the rule's field.
        let rules = Config::from_json(
            br#"{"gating":{"rules":[{"when":{"words":["invoice"]},"exclude":["k8s_*"]}]}}"#,
        )
        .unwrap();
        assert!(rules.gating.unwrap().mcp.is_none());
        assert!(err(r#"{"gating":{}}"#).contains("`gating`: needs `mcp`"));
        assert!(
            err(r#"{"gating":{"rules":[{"when":{"regex":"(x"},"claim":"a"}]}}"#)
                .contains("`gating.rules[0].when.regex`")
        );
        assert!(
            err(r#"{"gating":{"mcp":{"cluster":"c","path":"mcp"}}}"#).contains("`gating.mcp.path`")
        );
        assert!(
            err(r#"{"gating":{"mcp":{"cluster":"c","timeout_ms":0}}}"#)
                .contains("`gating.mcp.timeout_ms`")
        );
        assert!(
            err(r#"{"gating":{"mcp":{"cluster":"c","headers":{":path":"/"}}}}"#)
                .contains("`gating.mcp.headers.:path`")
        );
        assert!(
            err(r#"{"gating":{"mcp":{"cluster":"c"},"claim":"model"}}"#)
                .contains("field `gating.claim`: unknown variant")
        );
        assert!(err(r#"{"gating":{"claim":"answer"}}"#).contains("needs `mcp`"));
        assert!(
            err(r#"{"gating":{"mcp":{"cluster":"c","argument":""}}}"#)
                .contains("`gating.mcp.argument`")
        );
    }
}
