//! The `access` section as written: what the operator configures, checked against the JSON
//! schema. [`super::policy`] compiles it.

use crate::json::{objects, optional_whole_number, variant};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The `access` section as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = access_rules))]
pub struct AccessConfig {
    /// `enforce` (the default) or `audit`: every decision made, counted and logged, none
    /// carried out.
    #[serde(default, deserialize_with = "variant")]
    pub mode: Mode,
    /// Where the caller's identity values come from, all of them read. Sources named and no
    /// value found: the request is refused. Empty: every caller alike, only `"when": ["*"]`
    /// rules apply.
    #[serde(default, deserialize_with = "objects")]
    pub identity: Vec<IdentitySource>,
    /// What a tool no rule allows or denies gets.
    #[serde(default, deserialize_with = "variant")]
    pub default: Effect,
    /// The rules; each tool is decided over the ones that apply to the caller.
    #[serde(default, deserialize_with = "objects")]
    pub rules: Vec<RuleConfig>,
    /// How a denied tool looks to the caller.
    #[serde(default, deserialize_with = "variant")]
    pub denied: Denied,
    /// What a request on a path toolsift does not recognise gets (a path that is no LLM
    /// API's, and not in `custom.paths` or `mcp.paths`): `pass` (the default: it goes on
    /// ungoverned) or `deny` (answered with `unknown_paths_status`). Counted either way
    /// (`toolsift.access.unknown_paths`).
    #[serde(default, deserialize_with = "variant")]
    pub unknown_paths: UnknownPaths,
    /// The status `"unknown_paths": "deny"` answers with: 404 (the default) or 403.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(extend("enum" = [403, 404, null])))]
    pub unknown_paths_status: Option<u16>,
}

/// `unknown_paths_status` goes with `"unknown_paths": "deny"`.
#[cfg(not(target_arch = "wasm32"))]
fn access_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{add, set};
    add(
        schema,
        [(
            "`unknown_paths_status` goes with `unknown_paths: \"deny\"`.",
            serde_json::json!({
                "if": set("unknown_paths_status"),
                "then": {
                    "required": ["unknown_paths"],
                    "properties": {"unknown_paths": {"const": "deny"}}
                }
            }),
        )],
    );
}

/// What a request on a path toolsift does not recognise gets under access rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum UnknownPaths {
    /// It goes on ungoverned, whatever it carries.
    #[default]
    Pass,
    /// It is answered with `unknown_paths_status` (404 unless set to 403).
    Deny,
}

/// One source of identity values: JWT claims in dynamic metadata, or a header.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = identity_rules))]
pub struct IdentitySource {
    /// The dynamic-metadata namespace (`envoy.filters.http.jwt_authn`).
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub metadata: Option<String>,
    /// The claim's path in the JWT payload, dot-separated (`groups`, `realm_access.roles`).
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(regex(pattern = claim_pattern())))]
    pub claim: Option<String>,
    /// The `payload_in_metadata` key the payload sits under; unset, every payload in the
    /// namespace is read (Istio names it after the issuer).
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub key: Option<String>,
    /// A request header holding the values.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::pairs::HEADER_NAME_PATTERN))
    )]
    pub header: Option<String>,
    /// Prepended to every value of this source (`tenant:`), so rules can tell sources apart.
    #[serde(default)]
    pub prefix: String,
    /// How a header, or a claim that is one string, is split into values: `both` (the
    /// default: at spaces and commas, as OAuth scopes are written), `space`, `comma`, or
    /// `none` (the whole text is one value: a tenant named `acme corp`). An array claim's
    /// strings are never split.
    #[serde(default, deserialize_with = "variant")]
    pub split: Split,
}

/// What [`super::identity::source`] takes for a claim's path: not blank, dot-separated names
/// none of them empty.
#[cfg(not(target_arch = "wasm32"))]
fn claim_pattern() -> String {
    let space = crate::json::rules::WHITESPACE;
    format!(r"^(?:[^.]*[^.{space}][^.]*|[^.]+(?:\.[^.]+)+)$")
}

/// What [`super::hint`] reads: an annotation's name, optionally `: true` or `: false`, spaces
/// around.
#[cfg(not(target_arch = "wasm32"))]
fn annotation_pattern() -> String {
    let space = format!("[{}]*", crate::json::rules::WHITESPACE);
    let names: Vec<&str> = super::Hint::ALL.iter().map(|h| h.name()).collect();
    format!(
        "^{space}(?:{}){space}(?::{space}(?:true|false){space})?$",
        names.join("|")
    )
}

/// An identity source is `metadata` with `claim` (and `key`), or `header` alone.
#[cfg(not(target_arch = "wasm32"))]
fn identity_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{one_of, set, unset};
    use serde_json::json;
    one_of(
        schema,
        "An identity source is `metadata` with `claim` (and `key`, if any), or `header` alone.",
        vec![
            json!({"allOf": [set("metadata"), set("claim"), unset("header")]}),
            json!({"allOf": [set("header"), unset("metadata"), unset("claim"), unset("key")]}),
        ],
    );
}

/// Where a header or a claim string is split into identity values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Not split: the whole text (trimmed) is one value.
    None,
    /// At spaces (and tabs).
    Space,
    /// At commas; the values are trimmed of the spaces around them.
    Comma,
    /// At spaces, tabs and commas.
    #[default]
    Both,
}

/// Whether the policy's denials are carried out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Denials are carried out.
    #[default]
    Enforce,
    /// Decided, counted and logged as `would_deny`; nothing denied, hidden, refused or edited.
    Audit,
}

/// What a tool gets that no applicable rule allows or denies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The tool is allowed.
    Allow,
    /// The tool is denied.
    #[default]
    Deny,
}

/// What the caller is told about a denied tool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Denied {
    /// It looks like a tool that does not exist.
    #[default]
    Hidden,
    /// It is said to be denied, with the reason (HTTP 403, a JSON-RPC error).
    Refused,
}

/// One rule as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = rule_rules))]
pub struct RuleConfig {
    /// What logs and counters call the rule (`toolsift.access.rule.<name>.denied`); unnamed,
    /// it is `#N`, its place in `rules`.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = r"^[A-Za-z0-9_.-]+$"))
    )]
    pub name: Option<String>,
    /// Identity values (globs) the rule applies to; `*` applies to every caller. Required,
    /// with one of `allow`, `deny`, `deny_annotations` or `arguments`.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(length(min = 1), inner(length(min = 1)))
    )]
    pub when: Vec<String>,
    /// Tool-name globs the rule allows.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(inner(length(min = 1))))]
    pub allow: Vec<String>,
    /// Tool-name globs the rule denies; a deny wins over every allow.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(inner(length(min = 1))))]
    pub deny: Vec<String>,
    /// MCP tool annotations that deny a tool: `destructiveHint` (declared true), or
    /// `readOnlyHint: false`.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(inner(regex(pattern = annotation_pattern()))))]
    pub deny_annotations: Vec<String>,
    /// Tool-name glob → argument name → the values (exact or globs) a call may pass.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(transform = arguments_schema))]
    pub arguments: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

/// `arguments`: tool patterns, argument names and values not empty, a value at least each.
#[cfg(not(target_arch = "wasm32"))]
fn arguments_schema(schema: &mut schemars::Schema) {
    let filled = serde_json::json!({"minLength": 1});
    schema.insert("propertyNames".into(), filled.clone());
    schema.insert(
        "additionalProperties".into(),
        serde_json::json!({
            "type": "object",
            "propertyNames": filled,
            "additionalProperties": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1}
            }
        }),
    );
}

/// A rule says something: `allow`, `deny`, `deny_annotations` or `arguments`.
#[cfg(not(target_arch = "wasm32"))]
fn rule_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{any_of, filled};
    any_of(
        schema,
        "A rule needs `allow`, `deny`, `deny_annotations` or `arguments`.",
        vec![
            filled("allow"),
            filled("deny"),
            filled("deny_annotations"),
            filled("arguments"),
        ],
    );
}
