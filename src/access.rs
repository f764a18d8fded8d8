//! Who may see and call which tool: the `access` section, compiled once into a [`Policy`], and
//! the one place that answers "may this caller see (or call) this tool?".
//!
//! Every surface asks it: filter mode drops denied tools before ranking cuts, search mode
//! searches only allowed ones, the response side refuses a model's call of a denied tool, and
//! MCP lists, finds and forwards only allowed ones. None keeps a copy of the rules.
//!
//! A request's identity is a set of values ([`Caller`]): JWT claims that Envoy's `jwt_authn`
//! wrote into dynamic metadata, or a header an earlier filter set. [`Policy::grant`] picks the
//! rules whose `when` names one of them (`*`: every caller), once per request; the
//! [`Grant`] then decides each tool:
//! 1. no identity where the configuration reads one: denied (nothing is allowed);
//! 2. a name matching a `deny` pattern, or annotations matching `deny_annotations`, of any
//!    applicable rule: denied (deny wins);
//! 3. a name matching an `allow` pattern of any applicable rule: allowed;
//! 4. otherwise `default`.
//!
//! Calls are also checked against `arguments`: every applicable rule naming the tool restricts
//! the values the call may pass.
//!
//! Pure Rust: the filter reads the identity from Envoy, everything after is decided here.

use crate::glob::Glob;
use crate::json::{objects, optional_whole_number, variant};
use serde::Deserialize;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

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

/// What [`source`] takes for a claim's path: not blank, dot-separated names none of them empty.
#[cfg(not(target_arch = "wasm32"))]
fn claim_pattern() -> String {
    let space = crate::json::rules::WHITESPACE;
    format!(r"^(?:[^.]*[^.{space}][^.]*|[^.]+(?:\.[^.]+)+)$")
}

/// What [`hint`] reads: an annotation's name, optionally `: true` or `: false`, spaces around.
#[cfg(not(target_arch = "wasm32"))]
fn annotation_pattern() -> String {
    let space = format!("[{}]*", crate::json::rules::WHITESPACE);
    let names: Vec<&str> = Hint::ALL.iter().map(|h| h.name()).collect();
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

/// A configuration error in `access`: the field's path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub why: String,
}

fn field_error(field: impl Into<String>, why: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        why: why.into(),
    }
}

/// An MCP tool annotation a rule can deny on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    Destructive,
    ReadOnly,
    OpenWorld,
    Idempotent,
}

impl Hint {
    const ALL: [Hint; 4] = [
        Hint::Destructive,
        Hint::ReadOnly,
        Hint::OpenWorld,
        Hint::Idempotent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Hint::Destructive => "destructiveHint",
            Hint::ReadOnly => "readOnlyHint",
            Hint::OpenWorld => "openWorldHint",
            Hint::Idempotent => "idempotentHint",
        }
    }
}

/// The annotations a tool declares (MCP `annotations`); a hint it does not declare is `None`
/// and matches no rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Annotations {
    hints: [Option<bool>; 4],
}

impl Annotations {
    /// The `annotations` of a tool's JSON object text (an MCP tool definition); none when it
    /// has none or is not JSON.
    pub fn of_tool(tool: &str) -> Annotations {
        if !tool.contains("Hint") {
            return Annotations::default();
        }
        #[derive(Deserialize)]
        struct Tool {
            #[serde(default)]
            annotations: Option<BTreeMap<String, Value>>,
        }
        let Ok(Tool {
            annotations: Some(declared),
        }) = serde_json::from_str::<Tool>(tool)
        else {
            return Annotations::default();
        };
        let mut hints = [None; 4];
        for (slot, hint) in hints.iter_mut().zip(Hint::ALL) {
            *slot = declared.get(hint.name()).and_then(Value::as_bool);
        }
        Annotations { hints }
    }

    pub fn with(mut self, hint: Hint, value: bool) -> Annotations {
        if let Some(slot) = self.hints.get_mut(hint as usize) {
            *slot = Some(value);
        }
        self
    }

    fn get(&self, hint: Hint) -> Option<bool> {
        self.hints.get(hint as usize).copied().flatten()
    }
}

/// The caller's identity values, sorted and without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    values: Vec<String>,
}

impl Caller {
    pub fn new(values: impl IntoIterator<Item = String>) -> Caller {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
        values.sort_unstable();
        values.dedup();
        Caller { values }
    }

    /// A caller with no identity values.
    pub fn anonymous() -> Caller {
        Caller::default()
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    pub fn is_identified(&self) -> bool {
        !self.values.is_empty()
    }

    /// The identity as text (a JSON array), for cache keys that must never cross callers.
    pub fn key(&self) -> String {
        serde_json::to_string(&self.values).unwrap_or_default()
    }
}

/// The identity values a claim holds: a string (split as `split` says; by default at spaces
/// and commas, as OAuth scopes are written), or an array whose every string is one value,
/// spaces and commas included (a group "contractors admins" is not `admins`); numbers and
/// booleans as their JSON text.
pub fn claim_values(claim: &Value, prefix: &str, split: Split, out: &mut Vec<String>) {
    match claim {
        Value::String(s) => split_values(s, prefix, split, out),
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::String(s) => out.push(format!("{prefix}{s}")),
                    Value::Number(_) | Value::Bool(_) => out.push(format!("{prefix}{item}")),
                    _ => {}
                }
            }
        }
        Value::Number(_) | Value::Bool(_) => out.push(format!("{prefix}{claim}")),
        _ => {}
    }
}

/// The values of a header or claim string, split as `split` says; empty values are none.
pub fn split_values(text: &str, prefix: &str, split: Split, out: &mut Vec<String>) {
    let separators: &[char] = match split {
        Split::None => &[],
        Split::Space => &[' ', '\t'],
        Split::Comma => &[','],
        Split::Both => &[' ', ',', '\t'],
    };
    out.extend(
        text.split(separators)
            .map(|v| v.trim_matches([' ', '\t']))
            .filter(|v| !v.is_empty())
            .map(|v| format!("{prefix}{v}")),
    );
}

/// The claim at a dot-separated `path` in a JWT payload.
pub fn claim_at<'a>(payload: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(payload, |at, key| at.get(key))
}

/// Why a tool or a call is denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The configuration reads an identity and the request carries none.
    NoIdentity,
    /// A `deny` pattern of rule `rule` (0-based) matched the name.
    Rule { rule: usize, pattern: String },
    /// A `deny_annotations` entry of rule `rule` matched the tool's annotations.
    Annotation { rule: usize, hint: &'static str },
    /// No rule allowed it and `default` is `deny`.
    Default,
    /// A pattern of rule `rule` speaks of a remote MCP connector's tools, and what it allows
    /// cannot be written as the connector's list of allowed tools: toolsift does not see the
    /// tools the server offers (the provider lists them), so the connector is denied whole.
    Unlisted { rule: usize, pattern: String },
    /// An argument's value is not one rule `rule` allows.
    Argument {
        rule: usize,
        argument: String,
        value: String,
    },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NoIdentity => f.write_str("the request carries no caller identity"),
            Why::Rule { rule, pattern } => {
                write!(f, "denied by access rule {rule} (`{pattern}`)")
            }
            Why::Annotation { rule, hint } => {
                write!(f, "access rule {rule} denies tools annotated {hint}")
            }
            Why::Default => f.write_str("not allowed for this caller"),
            Why::Unlisted { rule, pattern } => write!(
                f,
                "access rule {rule} (`{pattern}`) governs this MCP connector's tools by a \
                 pattern, and toolsift cannot list the tools the server offers"
            ),
            Why::Argument {
                rule,
                argument,
                value,
            } => write!(
                f,
                "argument `{argument}` may not be {value} (access rule {rule})"
            ),
        }
    }
}

impl Why {
    /// The rule that decided: `None` for the `default` verdict (no identity, no rule allowed).
    pub fn rule(&self) -> Option<usize> {
        match self {
            Why::NoIdentity | Why::Default => None,
            Why::Rule { rule, .. }
            | Why::Annotation { rule, .. }
            | Why::Unlisted { rule, .. }
            | Why::Argument { rule, .. } => Some(*rule),
        }
    }
}

/// Where a denial happened, for the stats (`toolsift.access.denied.<surface>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Surface {
    /// LLM requests refused whole (HTTP 403): no identity, no tool left, a `tool_choice` of a
    /// denied tool under `denied: "refused"`, a signed request carrying denied tools.
    Request,
    /// Function tools left out of LLM requests' tools arrays (and out of search results).
    Tools,
    /// Model calls of denied tools (or with refused arguments) kept from the client.
    Call,
    /// MCP requests refused whole: no identity, or nothing the gateway can govern.
    McpRequest,
    /// Server tools left out of what an MCP client can list or find.
    McpTools,
    /// MCP `tools/call`s (direct or through `call_tool`) refused before the server.
    McpCall,
}

impl Surface {
    pub const ALL: [Surface; 6] = [
        Surface::Request,
        Surface::Tools,
        Surface::Call,
        Surface::McpRequest,
        Surface::McpTools,
        Surface::McpCall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Surface::Request => "request",
            Surface::Tools => "tools",
            Surface::Call => "call",
            Surface::McpRequest => "mcp_request",
            Surface::McpTools => "mcp_tools",
            Surface::McpCall => "mcp_call",
        }
    }
}

/// One tool's (or call's) outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied(Why),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed)
    }
}

/// A rule, compiled.
#[derive(Debug, Clone)]
struct Rule {
    name: Option<String>,
    when: Vec<Glob>,
    allow: Vec<Glob>,
    deny: Vec<Glob>,
    deny_annotations: Vec<(Hint, bool)>,
    /// The tools whose arguments the rule restricts, and how.
    arguments: Vec<(Glob, Vec<Allowed>)>,
}

/// An argument and the values (patterns) a call may pass for it.
type Allowed = (String, Vec<Glob>);

impl Rule {
    fn applies_to(&self, caller: &Caller) -> bool {
        self.when
            .iter()
            .any(|w| w.as_str() == "*" || caller.values().iter().any(|v| w.matches(v)))
    }
}

/// Where one identity source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A claim of the JWT payloads in a dynamic-metadata namespace.
    Claim {
        namespace: String,
        key: Option<String>,
        claim: String,
        prefix: String,
        split: Split,
    },
    /// A request header (lower-case name).
    Header {
        name: String,
        prefix: String,
        split: Split,
    },
}

/// The `access` section, compiled: built once in `on_configure`, shared by every request.
#[derive(Debug, Clone)]
pub struct Policy {
    sources: Vec<Source>,
    default: Effect,
    rules: Vec<Rule>,
    pub denied: Denied,
    mode: Mode,
    /// `access_shadow`: a second policy decided beside this one, never enforced.
    shadow: Option<Rc<Policy>>,
    /// `"unknown_paths": "deny"`: the status an unrecognised path is answered with.
    unknown_paths: Option<u16>,
}

impl Policy {
    /// Checks and compiles `access`; an error names the field (`rules[2].deny[0]`, relative to
    /// the section).
    pub fn new(config: &AccessConfig) -> Result<Policy, FieldError> {
        let mut sources = Vec::new();
        for (i, s) in config.identity.iter().enumerate() {
            sources.push(
                source(s)
                    .map_err(|(field, why)| field_error(format!("identity[{i}]{field}"), why))?,
            );
        }
        let mut rules: Vec<Rule> = Vec::new();
        for (i, r) in config.rules.iter().enumerate() {
            let compiled =
                rule(r).map_err(|(field, why)| field_error(format!("rules[{i}].{field}"), why))?;
            if let Some(name) = &compiled.name {
                if rules.iter().any(|other| other.name.as_ref() == Some(name)) {
                    return Err(field_error(
                        format!("rules[{i}].name"),
                        format!("`{name}` names another rule too: names must be unique"),
                    ));
                }
            }
            rules.push(compiled);
        }
        let unknown_paths = match (config.unknown_paths, config.unknown_paths_status) {
            (_, Some(status)) if status != 403 && status != 404 => {
                return Err(field_error(
                    "unknown_paths_status",
                    format!("{status}: 404 or 403"),
                ));
            }
            (UnknownPaths::Pass, Some(_)) => {
                return Err(field_error(
                    "unknown_paths_status",
                    "goes with `\"unknown_paths\": \"deny\"`",
                ));
            }
            (UnknownPaths::Pass, None) => None,
            (UnknownPaths::Deny, status) => Some(status.unwrap_or(404)),
        };
        Ok(Policy {
            sources,
            default: config.default,
            rules,
            denied: config.denied,
            mode: config.mode,
            shadow: None,
            unknown_paths,
        })
    }

    /// This policy with `access_shadow` (`shadow`) decided beside it. A shadow that reads no
    /// identity of its own reads this policy's; one in `audit` mode is refused (a shadow is
    /// never enforced), the error's field relative to the shadow's section.
    pub fn with_shadow(mut self, shadow: &AccessConfig) -> Result<Policy, FieldError> {
        if shadow.mode == Mode::Audit {
            return Err(field_error(
                "mode",
                "a shadow policy is never enforced: leave `mode` out",
            ));
        }
        if shadow.unknown_paths != UnknownPaths::Pass {
            return Err(field_error(
                "unknown_paths",
                "a shadow policy answers no request: set it in `access`",
            ));
        }
        let mut compiled = Policy::new(shadow)?;
        if compiled.sources.is_empty() {
            compiled.sources = self.sources.clone();
        }
        self.shadow = Some(Rc::new(compiled));
        Ok(self)
    }

    /// `access_shadow`, compiled, if configured.
    pub fn shadow(&self) -> Option<&Rc<Policy>> {
        self.shadow.as_ref()
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The status a request on a path toolsift does not recognise is answered with
    /// (`"unknown_paths": "deny"`; in audit mode never); `None`: it passes.
    pub fn unknown_path_status(&self) -> Option<u16> {
        self.unknown_paths.filter(|_| self.mode == Mode::Enforce)
    }

    /// The names of the named rules, in order (their counters are defined at configure time).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().filter_map(|r| r.name.as_deref())
    }

    /// What logs call rule `rule`: its `name`, `#N` when it has none, `default` for `None`.
    pub fn rule_label(&self, rule: Option<usize>) -> String {
        match rule {
            None => "default".to_owned(),
            Some(i) => match self.rules.get(i).and_then(|r| r.name.as_deref()) {
                Some(name) => name.to_owned(),
                None => format!("#{i}"),
            },
        }
    }

    /// Where the caller's identity comes from.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// The caller of a request: the values of every identity source. `header` gives a request
    /// header's bytes (a value that is not UTF-8 gives nothing); `payloads` the JWT payloads
    /// in a dynamic-metadata namespace (all of them, or the one under `key`).
    pub fn caller<'h>(
        &self,
        header: impl Fn(&str) -> Option<&'h [u8]>,
        mut payloads: impl FnMut(&str, Option<&str>) -> Vec<Value>,
    ) -> Caller {
        let mut values = Vec::new();
        for source in &self.sources {
            match source {
                Source::Header {
                    name,
                    prefix,
                    split,
                } => {
                    if let Some(text) = header(name).and_then(|v| std::str::from_utf8(v).ok()) {
                        split_values(text, prefix, *split, &mut values);
                    }
                }
                Source::Claim {
                    namespace,
                    key,
                    claim,
                    prefix,
                    split,
                } => {
                    for payload in payloads(namespace, key.as_deref()) {
                        if let Some(value) = claim_at(&payload, claim) {
                            claim_values(value, prefix, *split, &mut values);
                        }
                    }
                }
            }
        }
        Caller::new(values)
    }

    /// Whether the configuration reads an identity (and so requires one).
    pub fn requires_identity(&self) -> bool {
        !self.sources.is_empty()
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// What `caller` may do: the rules that apply to it, picked once per request (and, with
    /// `access_shadow`, the shadow's for the same caller).
    pub fn grant(self: &Rc<Self>, caller: &Caller) -> Grant {
        self.grant_with(caller, None)
    }

    /// [`Policy::grant`], the shadow's rules picked for `shadow_caller` when the shadow reads
    /// an identity of its own (`None`: the same caller).
    pub fn grant_with(self: &Rc<Self>, caller: &Caller, shadow_caller: Option<&Caller>) -> Grant {
        let mut grant = self.bare_grant(caller);
        if let Some(shadow) = &self.shadow {
            grant.shadow = Some(Rc::new(shadow.bare_grant(shadow_caller.unwrap_or(caller))));
        }
        grant
    }

    fn bare_grant(self: &Rc<Self>, caller: &Caller) -> Grant {
        let identified = caller.is_identified() || !self.requires_identity();
        let applicable = if identified {
            (0..self.rules.len())
                .filter(|&i| self.rules.get(i).is_some_and(|r| r.applies_to(caller)))
                .collect()
        } else {
            Vec::new()
        };
        Grant {
            policy: Rc::clone(self),
            applicable: applicable.into(),
            identified,
            shadow: None,
            ledger: Ledger::default(),
        }
    }
}

fn source(s: &IdentitySource) -> Result<Source, (String, String)> {
    let nonempty = |field: &str, v: &Option<String>| -> Result<Option<String>, (String, String)> {
        match v {
            Some(v) if v.trim().is_empty() => {
                Err((format!(".{field}"), "must not be empty".into()))
            }
            other => Ok(other.clone()),
        }
    };
    let metadata = nonempty("metadata", &s.metadata)?;
    let claim = nonempty("claim", &s.claim)?;
    let key = nonempty("key", &s.key)?;
    let header = nonempty("header", &s.header)?;
    match (metadata, header) {
        (Some(namespace), None) => {
            let claim = claim.ok_or_else(|| {
                (
                    ".claim".to_owned(),
                    "required with `metadata`: the claim's path in the JWT payload".to_owned(),
                )
            })?;
            if claim.split('.').any(str::is_empty) {
                return Err((
                    ".claim".into(),
                    "a dot-separated path of claim names".into(),
                ));
            }
            Ok(Source::Claim {
                namespace,
                key,
                claim,
                prefix: s.prefix.clone(),
                split: s.split,
            })
        }
        (None, Some(name)) => {
            if claim.is_some() || key.is_some() {
                return Err((
                    String::new(),
                    "`claim` and `key` go with `metadata`, not `header`".into(),
                ));
            }
            if !crate::pairs::is_header_name(&name) {
                return Err((".header".into(), "not a valid header name".into()));
            }
            Ok(Source::Header {
                name: name.to_ascii_lowercase(),
                prefix: s.prefix.clone(),
                split: s.split,
            })
        }
        (Some(_), Some(_)) => Err((
            String::new(),
            "one of `metadata` (with `claim`) or `header`, not both".into(),
        )),
        (None, None) => Err((
            String::new(),
            "needs `metadata` (with `claim`) or `header`".into(),
        )),
    }
}

fn globs(field: &str, patterns: &[String]) -> Result<Vec<Glob>, (String, String)> {
    patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.is_empty() {
                Err((format!("{field}[{i}]"), "empty pattern".to_owned()))
            } else {
                Ok(Glob::new(p))
            }
        })
        .collect()
}

fn hint(text: &str) -> Option<(Hint, bool)> {
    let (name, value) = match text.split_once(':') {
        Some((name, value)) => (name.trim(), value.trim()),
        None => (text.trim(), "true"),
    };
    let hint = Hint::ALL.into_iter().find(|h| h.name() == name)?;
    let value = match value {
        "true" => true,
        "false" => false,
        _ => return None,
    };
    Some((hint, value))
}

fn rule(r: &RuleConfig) -> Result<Rule, (String, String)> {
    if r.when.is_empty() {
        return Err((
            "when".into(),
            "must name at least one identity value (`*`: every caller)".into(),
        ));
    }
    if r.allow.is_empty()
        && r.deny.is_empty()
        && r.deny_annotations.is_empty()
        && r.arguments.is_empty()
    {
        return Err((
            "allow".into(),
            "a rule needs `allow`, `deny`, `deny_annotations` or `arguments`".into(),
        ));
    }
    let deny_annotations = r
        .deny_annotations
        .iter()
        .enumerate()
        .map(|(i, a)| {
            hint(a).ok_or_else(|| {
                (
                    format!("deny_annotations[{i}]"),
                    format!(
                        "`{a}` is not an MCP tool annotation: destructiveHint, readOnlyHint, \
                         openWorldHint or idempotentHint, optionally `: true` or `: false`"
                    ),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let mut arguments = Vec::new();
    for (tool, constraints) in &r.arguments {
        if tool.is_empty() {
            return Err(("arguments".into(), "empty tool pattern".into()));
        }
        let mut compiled = Vec::new();
        for (argument, values) in constraints {
            let at = format!("arguments.{tool}.{argument}");
            if argument.is_empty() {
                return Err((format!("arguments.{tool}"), "empty argument name".into()));
            }
            if values.is_empty() {
                return Err((at, "must list at least one allowed value".into()));
            }
            compiled.push((argument.clone(), globs(&at, values)?));
        }
        arguments.push((Glob::new(tool), compiled));
    }
    if let Some(name) = &r.name {
        let fits = |b: u8| b.is_ascii_alphanumeric() || b"_-.".contains(&b);
        if name.is_empty() || !name.bytes().all(fits) {
            return Err((
                "name".into(),
                "letters, digits, `_`, `-` and `.` only (it becomes part of metric names)".into(),
            ));
        }
    }
    Ok(Rule {
        name: r.name.clone(),
        when: globs("when", &r.when)?,
        allow: globs("allow", &r.allow)?,
        deny: globs("deny", &r.deny)?,
        deny_annotations,
        arguments,
    })
}

/// What one caller may do: the policy and the rules that apply to the caller.
#[derive(Debug, Clone)]
pub struct Grant {
    policy: Rc<Policy>,
    applicable: Rc<[usize]>,
    /// The caller has the identity the policy needs.
    identified: bool,
    /// `access_shadow`'s grant for the same request.
    shadow: Option<Rc<Grant>>,
    /// The request's decisions worth reporting, shared by the grant's clones.
    ledger: Ledger,
}

impl Grant {
    pub fn denied_mode(&self) -> Denied {
        self.policy.denied
    }

    /// The caller has the identity the policy needs (without it, every tool is denied).
    pub fn is_identified(&self) -> bool {
        self.identified
    }

    /// Whether a decision of this grant can depend on a tool's annotations (an applicable rule
    /// has `deny_annotations`): a tool whose annotations cannot be read may then not be allowed
    /// by its name alone.
    pub fn reads_annotations(&self) -> bool {
        self.rules().any(|(_, r)| !r.deny_annotations.is_empty())
    }

    /// What the decisions of this grant depend on, besides the tool: two callers with the same
    /// key get the same decision for every tool, so a cache keyed by it never crosses what
    /// callers may see.
    pub fn key(&self) -> (bool, Rc<[usize]>) {
        (self.identified, Rc::clone(&self.applicable))
    }

    fn rules(&self) -> impl Iterator<Item = (usize, &Rule)> {
        self.applicable
            .iter()
            .filter_map(|&i| self.policy.rules.get(i).map(|r| (i, r)))
    }

    /// Whether the caller may see (and so call) tool `name` with `annotations`.
    pub fn tool(&self, name: &str, annotations: &Annotations) -> Decision {
        if !self.identified {
            return Decision::Denied(Why::NoIdentity);
        }
        let mut allowed = false;
        for (i, rule) in self.rules() {
            if let Some(p) = rule.deny.iter().find(|p| p.matches(name)) {
                return Decision::Denied(Why::Rule {
                    rule: i,
                    pattern: p.as_str().to_owned(),
                });
            }
            if let Some((hint, _)) = rule
                .deny_annotations
                .iter()
                .find(|(hint, value)| annotations.get(*hint) == Some(*value))
            {
                return Decision::Denied(Why::Annotation {
                    rule: i,
                    hint: hint.name(),
                });
            }
            allowed = allowed || rule.allow.iter().any(|p| p.matches(name));
        }
        if allowed || self.policy.default == Effect::Allow {
            Decision::Allowed
        } else {
            Decision::Denied(Why::Default)
        }
    }

    /// Per tool of a catalog of `n` entries, whether the caller may see it: `tool(e)` gives
    /// entry `e`'s name and annotations, `None` for what access rules do not govern (provider
    /// built-ins: always kept). The same decisions as [`Grant::tool`] one by one, from what each
    /// applicable rule says of every tool, worked out once per catalog in `matches`.
    pub fn mask<'a>(
        &self,
        n: usize,
        tool: impl Fn(usize) -> Option<(&'a str, Annotations)>,
        matches: &RuleMatches,
    ) -> Vec<bool> {
        let words = n.div_ceil(64);
        let (mut allow, mut deny) = (vec![0u64; words], vec![0u64; words]);
        if self.identified {
            for (i, rule) in self.rules() {
                let bits = matches.bits(i, rule, n, &tool);
                for (w, b) in allow.iter_mut().zip(bits.allow.iter()) {
                    *w |= b;
                }
                for (w, b) in deny.iter_mut().zip(bits.deny.iter()) {
                    *w |= b;
                }
            }
        }
        let bit = |set: &[u64], e: usize| set.get(e / 64).is_some_and(|w| w >> (e % 64) & 1 == 1);
        let default_allow = self.policy.default == Effect::Allow;
        (0..n)
            .map(|e| match tool(e) {
                None => true,
                Some(_) => self.identified && !bit(&deny, e) && (default_allow || bit(&allow, e)),
            })
            .collect()
    }

    /// Whether the caller may call tool `name` with `arguments` (JSON object text): the tool
    /// must be allowed, and every applicable rule that restricts its arguments satisfied.
    /// An argument the call does not pass (or passes as `null`) is not checked; an object
    /// value never satisfies a restriction.
    pub fn call(&self, name: &str, annotations: &Annotations, arguments: &str) -> Decision {
        let seen = self.tool(name, annotations);
        if !seen.allowed() {
            return seen;
        }
        self.arguments(name, arguments)
    }

    /// [`Grant::call`] of a tool that goes by several names (a Responses namespace's
    /// function: `crm.get_customer` and `get_customer`, see [`Grant::tool_named`]): every
    /// rule restricting the arguments of one of its names is satisfied.
    pub fn call_named(&self, names: &[&str], arguments: &str) -> Decision {
        let seen = self.tool_named(names);
        if !seen.allowed() {
            return seen;
        }
        for name in names {
            let decision = self.arguments(name, arguments);
            if !decision.allowed() {
                return decision;
            }
        }
        Decision::Allowed
    }

    /// Whether `arguments` satisfy every applicable rule restricting the arguments of `name`.
    fn arguments(&self, name: &str, arguments: &str) -> Decision {
        let mut parsed: Option<Option<serde_json::Map<String, Value>>> = None;
        for (i, rule) in self.rules() {
            for (tool, constraints) in &rule.arguments {
                if !tool.matches(name) {
                    continue;
                }
                let args = parsed.get_or_insert_with(|| serde_json::from_str(arguments).ok());
                for (argument, allowed) in constraints {
                    let value = args.as_ref().and_then(|a| a.get(argument));
                    if let Some(refused) = value.and_then(|v| refused_value(v, allowed)) {
                        return Decision::Denied(Why::Argument {
                            rule: i,
                            argument: argument.clone(),
                            value: refused,
                        });
                    }
                }
            }
        }
        Decision::Allowed
    }
}

/// A remote MCP connector a request hands the provider: an Anthropic `mcp_servers` entry or
/// an OpenAI Responses `mcp` tool. The provider connects to the server itself and runs its
/// tools; toolsift sees only this entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connector {
    /// Its `name` (Anthropic) or `server_label` (Responses): the rules call it `mcp:<label>`.
    pub label: String,
    /// The host of its URL, lower case (empty when it has none): the rules call it
    /// `mcp_url:<host>`.
    pub host: String,
    /// The tools the client allows it (`allowed_tools`); `None`: every tool the server offers.
    pub tools: Option<Vec<String>>,
}

impl Connector {
    /// What the rules call the connector.
    pub fn name(&self) -> String {
        format!("mcp:{}", self.label)
    }

    /// What the rules call its URL.
    pub fn url_name(&self) -> String {
        format!("mcp_url:{}", self.host)
    }

    /// What the rules call its tool `tool`: `mcp:<label>/<tool>`.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("mcp:{}/{tool}", self.label)
    }
}

/// Patterns that can speak of a connector's tools, each with its rule.
type Speaking<'a> = Vec<(usize, &'a Glob)>;

/// What becomes of a connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorVerdict {
    /// It goes as the client wrote it.
    Keep,
    /// It goes with these tools allowed, and no other (its allowed-tools list written).
    Narrow(Vec<String>),
    /// It leaves the request (`hidden`), or the request is refused (`refused`); `name` is what
    /// the denial is about (`mcp:<label>`, `mcp_url:<host>`).
    Denied { name: String, why: Why },
}

impl Grant {
    /// Whether the caller may see a tool that goes by several names (a Responses namespace's
    /// function: `crm.get_customer` and `get_customer`): denied when one name is denied by a
    /// rule, allowed when one is allowed.
    pub fn tool_named(&self, names: &[&str]) -> Decision {
        let none = Annotations::default();
        let mut decided = Decision::Denied(Why::Default);
        for name in names {
            match self.tool(name, &none) {
                Decision::Denied(Why::Default) => {}
                Decision::Allowed => decided = Decision::Allowed,
                denied => return denied,
            }
        }
        decided
    }

    /// [`Grant::tool_named`] on the `tools` surface, recorded and enforced as the mode says
    /// (under the first name).
    pub fn judge_named(&self, names: &[&str]) -> Decision {
        let decision = self.tool_named(names);
        let first = names.first().copied();
        self.judge(Surface::Tools, first, decision, |s| s.tool_named(names))
    }

    /// What becomes of `connector`. It needs both its names allowed, `mcp:<label>` and
    /// `mcp_url:<host>`, each decided like a tool (a label is the client's to choose; the
    /// host is where the provider connects). Its tools (`mcp:<label>/<tool>`) follow it unless
    /// a rule's pattern can speak of them:
    /// - a tool is denied by a `deny` pattern that matches its name; it is allowed by an
    ///   `allow` that matches it, and by `default: "allow"`, no `allow` that can speak of the
    ///   connector's tools, or one that covers them all (`mcp:github/*`); otherwise not;
    /// - the tools are those the client allows (`allowed_tools`), else, when only `allow`s
    ///   can let them through, those the `allow`s name exactly; otherwise they are unknown
    ///   (the provider lists them) and a `deny` (or an `allow` that names none exactly) that
    ///   can speak of them denies the connector whole;
    /// - a connector left with no tool is denied.
    pub fn connector(&self, connector: &Connector) -> ConnectorVerdict {
        let none = Annotations::default();
        let denied = |name: String, why: Why| ConnectorVerdict::Denied { name, why };
        if !self.identified {
            return denied(connector.name(), Why::NoIdentity);
        }
        for name in [connector.name(), connector.url_name()] {
            if let Decision::Denied(why) = self.tool(&name, &none) {
                return denied(name, why);
            }
        }
        let under = format!("mcp:{}/", connector.label);
        let (denies, allows) = self.speaking_of(&under);
        // Open: every tool the server offers may be allowed (`default: "allow"`, no `allow`
        // that can speak of them, or one that covers them all); else only what an `allow`
        // names.
        let open = self.policy.default == Effect::Allow
            || allows.is_empty()
            || allows.iter().any(|(_, p)| p.covers_all_under(&under));
        let tools: Vec<String> = match (&connector.tools, open) {
            (Some(tools), _) => tools.clone(),
            (None, false) => {
                let mut named: Vec<String> = Vec::new();
                for (_, p) in &allows {
                    let tool = p.as_str().strip_prefix(&under).filter(|_| p.is_exact());
                    if let Some(tool) = tool.filter(|t| !t.is_empty()) {
                        if !named.iter().any(|n| n == tool) {
                            named.push(tool.to_owned());
                        }
                    }
                }
                if named.is_empty() {
                    let (rule, p) = allows.first().copied().unzip();
                    return denied(
                        connector.name(),
                        Why::Unlisted {
                            rule: rule.unwrap_or_default(),
                            pattern: p.map(|p| p.as_str().to_owned()).unwrap_or_default(),
                        },
                    );
                }
                named
            }
            (None, true) => {
                return match denies.first() {
                    Some((rule, p)) => denied(
                        connector.name(),
                        Why::Unlisted {
                            rule: *rule,
                            pattern: p.as_str().to_owned(),
                        },
                    ),
                    None => ConnectorVerdict::Keep,
                };
            }
        };
        let mut first_denial = None;
        let mut kept = Vec::new();
        for tool in &tools {
            match self.connector_tool(connector, tool, &denies, &allows) {
                Decision::Allowed => kept.push(tool.clone()),
                Decision::Denied(why) => {
                    first_denial.get_or_insert(why);
                }
            }
        }
        if kept.is_empty() {
            return denied(connector.name(), first_denial.unwrap_or(Why::Default));
        }
        if connector.tools.as_ref() == Some(&kept) {
            ConnectorVerdict::Keep
        } else {
            ConnectorVerdict::Narrow(kept)
        }
    }

    /// The `deny` and `allow` patterns of the applicable rules that can match a name under
    /// `under` (`mcp:<label>/`), with their rules.
    fn speaking_of(&self, under: &str) -> (Speaking<'_>, Speaking<'_>) {
        let speaking = |patterns: fn(&Rule) -> &[Glob]| -> Speaking<'_> {
            self.rules()
                .flat_map(|(i, r)| patterns(r).iter().map(move |p| (i, p)))
                .filter(|(_, p)| p.may_match_under(under))
                .collect()
        };
        (speaking(|r| &r.deny), speaking(|r| &r.allow))
    }

    /// Whether the caller may use `tool` of `connector`, given the patterns that can speak of
    /// its tools (see [`Grant::connector`]).
    fn connector_tool(
        &self,
        connector: &Connector,
        tool: &str,
        denies: &[(usize, &Glob)],
        allows: &[(usize, &Glob)],
    ) -> Decision {
        let name = connector.tool_name(tool);
        if let Some((rule, p)) = denies.iter().find(|(_, p)| p.matches(&name)) {
            return Decision::Denied(Why::Rule {
                rule: *rule,
                pattern: p.as_str().to_owned(),
            });
        }
        let under = format!("mcp:{}/", connector.label);
        let allowed = self.policy.default == Effect::Allow
            || allows.is_empty()
            || allows
                .iter()
                .any(|(_, p)| p.matches(&name) || p.covers_all_under(&under));
        if allowed {
            Decision::Allowed
        } else {
            Decision::Denied(Why::Default)
        }
    }

    /// [`Grant::connector`], recorded on the `tools` surface (the connector, or each tool
    /// taken from the client's list) and enforced as the mode says: in audit mode every
    /// connector is kept as written.
    pub fn judge_connector(&self, connector: &Connector) -> ConnectorVerdict {
        let verdict = self.connector(connector);
        let as_decision = |v: &ConnectorVerdict| match v {
            ConnectorVerdict::Denied { why, .. } => Decision::Denied(why.clone()),
            _ => Decision::Allowed,
        };
        let name = match &verdict {
            ConnectorVerdict::Denied { name, .. } => name.clone(),
            _ => connector.name(),
        };
        let judged = self.judge(Surface::Tools, Some(&name), as_decision(&verdict), |s| {
            as_decision(&s.connector(connector))
        });
        if let (ConnectorVerdict::Narrow(kept), Some(tools)) = (&verdict, &connector.tools) {
            let under = format!("mcp:{}/", connector.label);
            let (denies, allows) = self.speaking_of(&under);
            for tool in tools.iter().filter(|t| !kept.contains(t)) {
                let decision = self.connector_tool(connector, tool, &denies, &allows);
                let name = connector.tool_name(tool);
                self.judge(Surface::Tools, Some(&name), decision, |s| {
                    match s.connector(connector) {
                        ConnectorVerdict::Keep => Decision::Allowed,
                        ConnectorVerdict::Narrow(k) if k.contains(tool) => Decision::Allowed,
                        ConnectorVerdict::Narrow(_) => Decision::Denied(Why::Default),
                        ConnectorVerdict::Denied { why, .. } => Decision::Denied(why),
                    }
                });
            }
        }
        match judged {
            Decision::Allowed if !self.enforces() => ConnectorVerdict::Keep,
            _ => verdict,
        }
    }
}

impl Grant {
    /// Whether the policy's denials are carried out (`access.mode`).
    pub fn enforces(&self) -> bool {
        self.policy.mode == Mode::Enforce
    }

    /// The request's decisions worth reporting so far.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// What becomes of `decision`, this grant's on `surface` about `tool` (`None`: the whole
    /// request): the one place a decision is recorded (`deny`, or `would_deny` in audit mode,
    /// and where `access_shadow`'s decision, `shadow`, differs), and, in audit mode, allowed.
    fn judge(
        &self,
        surface: Surface,
        tool: Option<&str>,
        decision: Decision,
        shadow: impl FnOnce(&Grant) -> Decision,
    ) -> Decision {
        if let Some(other) = &self.shadow {
            let record = |verdict, rule| Record {
                verdict,
                surface,
                rule,
                tool: tool.map(str::to_owned),
            };
            match (&decision, shadow(other)) {
                (Decision::Allowed, Decision::Denied(why)) => self.ledger.push(record(
                    Verdict::ShadowDeny,
                    other.policy.rule_label(why.rule()),
                )),
                (Decision::Denied(_), Decision::Allowed) => self.ledger.push(record(
                    Verdict::ShadowAllow,
                    other
                        .policy
                        .rule_label(tool.and_then(|t| other.allowing_rule(t))),
                )),
                _ => {}
            }
        }
        let Decision::Denied(why) = decision else {
            return Decision::Allowed;
        };
        self.ledger.push(Record {
            verdict: if self.enforces() {
                Verdict::Deny
            } else {
                Verdict::WouldDeny
            },
            surface,
            rule: self.policy.rule_label(why.rule()),
            tool: tool.map(str::to_owned),
        });
        if self.enforces() {
            Decision::Denied(why)
        } else {
            Decision::Allowed
        }
    }

    /// The first applicable rule whose `allow` names `tool` (`None`: allowed by `default`).
    fn allowing_rule(&self, tool: &str) -> Option<usize> {
        self.rules()
            .find(|(_, r)| r.allow.iter().any(|p| p.matches(tool)))
            .map(|(i, _)| i)
    }

    /// [`Grant::tool`] on `surface`, recorded and enforced as the mode says.
    pub fn judge_tool(&self, surface: Surface, name: &str, annotations: &Annotations) -> Decision {
        let decision = self.tool(name, annotations);
        self.judge(surface, Some(name), decision, |s| s.tool(name, annotations))
    }

    /// [`Grant::call_named`] on `surface`, recorded (under the first name) and enforced as the
    /// mode says.
    pub fn judge_call_named(&self, surface: Surface, names: &[&str], arguments: &str) -> Decision {
        let decision = self.call_named(names, arguments);
        self.judge(surface, names.first().copied(), decision, |s| {
            s.call_named(names, arguments)
        })
    }

    /// A call of a remote MCP connector's tool (`mcp:<label>/<tool>`) in the model's answer:
    /// the provider ran it before toolsift saw it, so it is reported, never stopped.
    pub fn note_connector_call(&self, name: &str) {
        self.ledger.push(Record {
            verdict: Verdict::ConnectorCall,
            surface: Surface::Call,
            rule: "-".to_owned(),
            tool: Some(name.to_owned()),
        });
    }

    /// [`Grant::call`] on `surface`, recorded and enforced as the mode says.
    pub fn judge_call(
        &self,
        surface: Surface,
        name: &str,
        annotations: &Annotations,
        arguments: &str,
    ) -> Decision {
        let decision = self.call(name, annotations, arguments);
        self.judge(surface, Some(name), decision, |s| {
            s.call(name, annotations, arguments)
        })
    }

    /// A refusal of the whole request on `surface` (about `tool` if one), decided by this
    /// policy (`why`, `None`: not refused) and by the shadow's (`shadow`): recorded, and whether
    /// it is carried out.
    pub fn judge_request(
        &self,
        surface: Surface,
        tool: Option<&str>,
        why: Option<Why>,
        shadow: impl FnOnce(&Grant) -> Option<Why>,
    ) -> Option<Why> {
        let as_decision = |why: Option<Why>| why.map_or(Decision::Allowed, Decision::Denied);
        let decision = as_decision(why);
        match self.judge(surface, tool, decision, |s| as_decision(shadow(s))) {
            Decision::Allowed => None,
            Decision::Denied(why) => Some(why),
        }
    }

    /// Whether the shadow policy would refuse the request for want of an identity.
    pub fn shadow_identified(&self) -> Option<bool> {
        self.shadow.as_ref().map(|s| s.identified)
    }

    /// A catalog's mask as decided ([`Grant::mask`], or one by one), `decided`, judged entry by
    /// entry on `surface` (`tool(e)`: entry `e`'s name and annotations, `None` for what is not
    /// governed): what the caller is shown. Unchanged unless the mode is `audit` (everything)
    /// or nothing needs recording.
    pub fn judge_mask<'a>(
        &self,
        surface: Surface,
        decided: Rc<[bool]>,
        tool: impl Fn(usize) -> Option<(&'a str, Annotations)>,
    ) -> Rc<[bool]> {
        let quiet = self.shadow.is_none() && decided.iter().all(|a| *a);
        if quiet {
            return decided;
        }
        let mut shown = Vec::with_capacity(decided.len());
        for (e, allowed) in decided.iter().enumerate() {
            let Some((name, annotations)) = tool(e) else {
                shown.push(*allowed);
                continue;
            };
            let decision = if *allowed {
                Decision::Allowed
            } else {
                self.tool(name, &annotations)
            };
            let judged = self.judge(surface, Some(name), decision, |s| {
                s.tool(name, &annotations)
            });
            shown.push(judged.allowed());
        }
        if self.enforces() {
            decided
        } else {
            shown.into()
        }
    }

    /// Whether the caller may see `name`, as enforced (always in audit mode); nothing recorded.
    pub fn shows(&self, name: &str, annotations: &Annotations) -> bool {
        !self.enforces() || self.tool(name, annotations).allowed()
    }
}

/// What was decided: enforced, audited, or where the shadow policy differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Deny,
    WouldDeny,
    /// `access_shadow` would deny what the enforced policy allows.
    ShadowDeny,
    /// `access_shadow` would allow what the enforced policy denies.
    ShadowAllow,
    /// A remote MCP connector's tool the provider ran (in the model's answer): reported only.
    ConnectorCall,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Deny => "deny",
            Verdict::WouldDeny => "would_deny",
            Verdict::ShadowDeny => "shadow_deny",
            Verdict::ShadowAllow => "shadow_allow",
            Verdict::ConnectorCall => "connector_call",
        }
    }
}

/// One decision worth reporting: `verdict:surface:rule:tool` in the access log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub verdict: Verdict,
    pub surface: Surface,
    /// The rule's name, `#N`, or `default`.
    pub rule: String,
    /// The tool, `None` for the whole request.
    pub tool: Option<String>,
}

/// A request's records, each once (a surface asked twice, say a tools list and a search over
/// the same catalog, decides the same), in the order made; and how many were reported.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    inner: Rc<RefCell<LedgerInner>>,
}

#[derive(Debug, Default)]
struct LedgerInner {
    records: Vec<Record>,
    seen: std::collections::BTreeSet<Record>,
    reported: usize,
}

impl Ledger {
    fn push(&self, record: Record) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            if inner.seen.insert(record.clone()) {
                inner.records.push(record);
            }
        }
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<Record> {
        self.inner
            .try_borrow()
            .map(|i| i.records.clone())
            .unwrap_or_default()
    }

    /// The records made since the last call (to be counted once).
    pub fn take_new(&self) -> Vec<Record> {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return Vec::new();
        };
        let from = inner.reported;
        inner.reported = inner.records.len();
        inner
            .records
            .get(from..)
            .map(<[Record]>::to_vec)
            .unwrap_or_default()
    }
}

/// What each rule says of each tool of one catalog: worked out the first time a request needs
/// the rule, kept with the catalog. It depends only on the rules and the tools' public text,
/// never on who asks, so every caller shares it, and a grant's mask is then a few word
/// operations per applicable rule (for 50 rules over 1,000 tools, 12.5 KB at most).
#[derive(Debug, Default)]
pub struct RuleMatches {
    rules: RefCell<Vec<Option<Rc<RuleBits>>>>,
}

/// One rule over one catalog: the tools it denies (by name or annotation) and allows, one bit
/// per entry.
#[derive(Debug)]
struct RuleBits {
    /// Entries covered: a [`RuleMatches`] belongs to one catalog, but a mismatch is recomputed
    /// rather than trusted.
    n: usize,
    deny: Box<[u64]>,
    allow: Box<[u64]>,
}

impl RuleMatches {
    fn bits<'a>(
        &self,
        index: usize,
        rule: &Rule,
        n: usize,
        tool: &impl Fn(usize) -> Option<(&'a str, Annotations)>,
    ) -> Rc<RuleBits> {
        let known = self
            .rules
            .try_borrow()
            .ok()
            .and_then(|r| r.get(index).cloned());
        if let Some(known) = known.flatten().filter(|k| k.n == n) {
            return known;
        }
        let words = n.div_ceil(64);
        let (mut deny, mut allow) = (vec![0u64; words], vec![0u64; words]);
        for e in 0..n {
            let Some((name, annotations)) = tool(e) else {
                continue;
            };
            let set = |bits: &mut [u64]| {
                if let Some(w) = bits.get_mut(e / 64) {
                    *w |= 1 << (e % 64);
                }
            };
            let denied = rule.deny.iter().any(|p| p.matches(name))
                || rule
                    .deny_annotations
                    .iter()
                    .any(|(hint, value)| annotations.get(*hint) == Some(*value));
            if denied {
                set(&mut deny);
            }
            if rule.allow.iter().any(|p| p.matches(name)) {
                set(&mut allow);
            }
        }
        let bits = Rc::new(RuleBits {
            n,
            deny: deny.into(),
            allow: allow.into(),
        });
        if let Ok(mut rules) = self.rules.try_borrow_mut() {
            if rules.len() <= index {
                rules.resize(index + 1, None);
            }
            if let Some(slot) = rules.get_mut(index) {
                *slot = Some(Rc::clone(&bits));
            }
        }
        bits
    }
}

/// The first part of `value` no pattern of `allowed` matches (as JSON text), or `None`.
fn refused_value(value: &Value, allowed: &[Glob]) -> Option<String> {
    let fits = |text: &str| allowed.iter().any(|g| g.matches(text));
    match value {
        Value::Null => None,
        Value::String(s) => (!fits(s)).then(|| value.to_string()),
        Value::Number(_) | Value::Bool(_) => {
            let text = value.to_string();
            (!fits(&text)).then_some(text)
        }
        Value::Array(items) => items.iter().find_map(|v| match v {
            Value::Null => Some("null".to_owned()),
            other => refused_value(other, allowed),
        }),
        Value::Object(_) => Some("an object".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> Rc<Policy> {
        let config: AccessConfig = serde_json::from_str(json).unwrap();
        Rc::new(Policy::new(&config).unwrap())
    }

    fn caller(values: &[&str]) -> Caller {
        Caller::new(values.iter().map(|v| (*v).to_owned()))
    }

    const ISSUE_EXAMPLE: &str = r#"{
        "identity": [{"metadata": "envoy.filters.http.jwt_authn", "claim": "groups"}, {"header": "x-tenant"}],
        "default": "deny",
        "rules": [
            {"when": ["sre", "admins"], "allow": ["k8s_*", "get_*"]},
            {"when": ["*"], "deny": ["*delete*", "*drop*"]},
            {"when": ["finance"], "allow": ["invoice_*"], "arguments": {"invoice_*": {"currency": ["EUR", "USD"]}}},
            {"when": ["*"], "deny_annotations": ["destructiveHint"]}
        ],
        "denied": "hidden"
    }"#;

    #[test]
    fn deny_wins_allow_grants_default_decides_the_rest() {
        let p = policy(ISSUE_EXAMPLE);
        let none = Annotations::default();
        let sre = p.grant(&caller(&["sre"]));
        assert!(sre.tool("k8s_get_pods", &none).allowed());
        assert!(sre.tool("get_weather", &none).allowed());
        assert_eq!(
            sre.tool("k8s_delete_pod", &none),
            Decision::Denied(Why::Rule {
                rule: 1,
                pattern: "*delete*".into()
            })
        );
        assert_eq!(
            sre.tool("invoice_create", &none),
            Decision::Denied(Why::Default)
        );
        let destructive = Annotations::default().with(Hint::Destructive, true);
        assert_eq!(
            sre.tool("k8s_restart", &destructive),
            Decision::Denied(Why::Annotation {
                rule: 3,
                hint: "destructiveHint"
            })
        );
        // A declared false hint does not match `destructiveHint` (declared true).
        let safe = Annotations::default().with(Hint::Destructive, false);
        assert!(sre.tool("k8s_restart", &safe).allowed());
        let finance = p.grant(&caller(&["finance"]));
        assert!(finance.tool("invoice_create", &none).allowed());
        assert!(!finance.tool("k8s_get_pods", &none).allowed());
        // No identity: nothing.
        let anonymous = p.grant(&Caller::anonymous());
        assert_eq!(
            anonymous.tool("get_weather", &none),
            Decision::Denied(Why::NoIdentity)
        );
    }

    #[test]
    fn masks_decide_as_one_by_one() {
        let p = policy(ISSUE_EXAMPLE);
        let names = [
            "k8s_get_pods",
            "k8s_delete_pod",
            "get_weather",
            "invoice_create",
            "drop_table",
            "k8s_restart",
            "send_email",
        ];
        let destructive = Annotations::default().with(Hint::Destructive, true);
        let tool = |e: usize| -> Option<(&str, Annotations)> {
            // Every third entry a built-in, the restart tool destructive.
            if e % 3 == 2 {
                return None;
            }
            let name = names[e % names.len()];
            let a = if name == "k8s_restart" {
                destructive
            } else {
                Annotations::default()
            };
            Some((name, a))
        };
        let matches = RuleMatches::default();
        for who in [
            &["sre"][..],
            &["finance"],
            &["sre", "finance"],
            &["nobody"],
            &[],
        ] {
            let grant = p.grant(&caller(who));
            for n in [0, 1, 7, 64, 65, 130] {
                let mask = grant.mask(n, tool, &matches);
                let one_by_one: Vec<bool> = (0..n)
                    .map(|e| tool(e).is_none_or(|(name, a)| grant.tool(name, &a).allowed()))
                    .collect();
                assert_eq!(mask, one_by_one, "{who:?} n={n}");
            }
        }
    }

    #[test]
    fn arguments_restrict_calls() {
        let p = policy(ISSUE_EXAMPLE);
        let none = Annotations::default();
        let finance = p.grant(&caller(&["finance"]));
        assert!(
            finance
                .call("invoice_create", &none, r#"{"currency":"EUR","amount":3}"#)
                .allowed()
        );
        assert_eq!(
            finance.call("invoice_create", &none, r#"{"currency":"GBP"}"#),
            Decision::Denied(Why::Argument {
                rule: 2,
                argument: "currency".into(),
                value: "\"GBP\"".into()
            })
        );
        // Not passed: not checked. Arrays: every element. Objects: never.
        assert!(
            finance
                .call("invoice_create", &none, r#"{"amount":3}"#)
                .allowed()
        );
        assert!(
            finance
                .call("invoice_create", &none, r#"{"currency":["EUR","USD"]}"#)
                .allowed()
        );
        assert!(
            !finance
                .call("invoice_create", &none, r#"{"currency":["EUR","JPY"]}"#)
                .allowed()
        );
        assert!(
            !finance
                .call("invoice_create", &none, r#"{"currency":{"code":"EUR"}}"#)
                .allowed()
        );
        // A denied tool is denied whatever its arguments.
        assert!(
            !finance
                .call("invoice_delete", &none, r#"{"currency":"EUR"}"#)
                .allowed()
        );
    }

    fn connector(label: &str, host: &str, tools: Option<&[&str]>) -> Connector {
        Connector {
            label: label.to_owned(),
            host: host.to_owned(),
            tools: tools.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn connectors_need_their_label_and_host_and_are_narrowed_by_tool_rules() {
        let p = policy(
            r#"{"identity":[{"header":"x-group"}],"default":"deny","rules":[
            {"when":["dev"],"allow":["mcp:github","mcp_url:*.githubcopilot.com",
                                     "mcp:github/search_repos","mcp:github/get_*"]},
            {"when":["ops"],"allow":["mcp:*","mcp_url:*"]},
            {"when":["*"],"deny":["mcp_url:*.evil.example","*delete*"]}]}"#,
        );
        let dev = p.grant(&caller(&["dev"]));
        let host = "api.githubcopilot.com";
        let narrow = |tools: &[&str]| {
            ConnectorVerdict::Narrow(tools.iter().map(|t| (*t).to_owned()).collect())
        };
        // Only what the exact allows name (`get_*` cannot be listed: left out).
        assert_eq!(
            dev.connector(&connector("github", host, None)),
            narrow(&["search_repos"])
        );
        // The client's own list, filtered by every pattern.
        assert_eq!(
            dev.connector(&connector(
                "github",
                host,
                Some(&["get_issue", "delete_repo", "merge", "search_repos"])
            )),
            narrow(&["get_issue", "search_repos"])
        );
        assert_eq!(
            dev.connector(&connector("github", host, Some(&["get_issue"]))),
            ConnectorVerdict::Keep
        );
        let denied_as = |v: ConnectorVerdict| match v {
            ConnectorVerdict::Denied { name, why } => (name, why),
            other => panic!("{other:?}"),
        };
        // Either name denied: denied.
        let (name, why) = denied_as(dev.connector(&connector("github", "x.evil.example", None)));
        assert_eq!(name, "mcp_url:x.evil.example");
        assert_eq!(why.rule(), Some(2));
        let (name, why) = denied_as(dev.connector(&connector("gitlab", host, None)));
        assert_eq!((name.as_str(), why), ("mcp:gitlab", Why::Default));
        // A client list with nothing allowed: denied.
        let (_, why) = denied_as(dev.connector(&connector("github", host, Some(&["merge"]))));
        assert_eq!(why, Why::Default);
        // `ops` may use every connector, but `*delete*` may speak of its tools, which toolsift
        // cannot list: denied whole, unless the client lists them.
        let ops = p.grant(&caller(&["ops"]));
        let (_, why) = denied_as(ops.connector(&connector("any", "mcp.example", None)));
        assert!(matches!(why, Why::Unlisted { rule: 2, .. }), "{why:?}");
        assert!(why.to_string().contains("cannot list"));
        assert_eq!(
            ops.connector(&connector(
                "any",
                "mcp.example",
                Some(&["read", "delete_all"])
            )),
            narrow(&["read"])
        );
        // No identity: nothing.
        let nobody = p.grant(&Caller::anonymous());
        let (_, why) = denied_as(nobody.connector(&connector("github", host, None)));
        assert_eq!(why, Why::NoIdentity);
        // Without a rule that speaks of its tools, a connector goes whole.
        let open = policy(
            r#"{"default":"allow","rules":[{"when":["*"],"deny":["mcp_url:bad.example"]}]}"#,
        );
        let anyone = open.grant(&Caller::anonymous());
        assert_eq!(
            anyone.connector(&connector("x", "good.example", None)),
            ConnectorVerdict::Keep
        );
        // An allow that covers every tool of the connector leaves it open.
        let covering = policy(
            r#"{"rules":[{"when":["*"],"allow":["mcp:gh","mcp_url:*","mcp:gh/*","mcp:gh/x"]}]}"#,
        );
        assert_eq!(
            covering
                .grant(&Caller::anonymous())
                .connector(&connector("gh", "h", None)),
            ConnectorVerdict::Keep
        );
    }

    #[test]
    fn audit_mode_keeps_connectors_and_records_them() {
        let p = policy(
            r#"{"mode":"audit","rules":[{"when":["*"],"allow":["mcp:a","mcp_url:*","mcp:a/x"]}]}"#,
        );
        let g = p.grant(&Caller::anonymous());
        let c = connector("a", "h", Some(&["x", "y"]));
        assert_eq!(
            g.connector(&c),
            ConnectorVerdict::Narrow(vec!["x".to_owned()])
        );
        assert_eq!(g.judge_connector(&c), ConnectorVerdict::Keep);
        let records = g.ledger().records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].verdict, Verdict::WouldDeny);
        assert_eq!(records[0].tool.as_deref(), Some("mcp:a/y"));
    }

    #[test]
    fn namespace_functions_go_by_both_names() {
        let p = policy(
            r#"{"rules":[{"when":["*"],"allow":["crm.*","ping"],"deny":["*delete*","billing.refund"]},
                          {"when":["*"],"allow":["refund"],"arguments":{"crm.get_*":{"id":["1"]}}}]}"#,
        );
        let g = p.grant(&Caller::anonymous());
        let allowed = |names: &[&str]| g.tool_named(names).allowed();
        assert!(allowed(&["crm.get_customer", "get_customer"]));
        assert!(allowed(&["other.ping", "ping"]));
        assert!(!allowed(&["crm.delete_customer", "delete_customer"]));
        assert!(
            !allowed(&["billing.refund", "refund"]),
            "a deny of one name wins"
        );
        assert!(!allowed(&["other.x", "x"]));
        assert!(
            g.call_named(&["crm.get_customer", "get_customer"], r#"{"id":"1"}"#)
                .allowed()
        );
        assert!(
            !g.call_named(&["crm.get_customer", "get_customer"], r#"{"id":"2"}"#)
                .allowed()
        );
    }

    #[test]
    fn unknown_paths_are_denied_with_404_or_403() {
        let status = |json: &str| {
            let config: AccessConfig = serde_json::from_str(json).unwrap();
            Policy::new(&config).map(|p| p.unknown_path_status())
        };
        assert_eq!(status("{}"), Ok(None));
        assert_eq!(status(r#"{"unknown_paths":"deny"}"#), Ok(Some(404)));
        assert_eq!(
            status(r#"{"unknown_paths":"deny","unknown_paths_status":403}"#),
            Ok(Some(403))
        );
        assert_eq!(
            status(r#"{"unknown_paths":"deny","mode":"audit"}"#),
            Ok(None),
            "audit mode denies nothing"
        );
        let field = |json: &str| status(json).unwrap_err().field;
        assert_eq!(
            field(r#"{"unknown_paths":"deny","unknown_paths_status":500}"#),
            "unknown_paths_status"
        );
        assert_eq!(
            field(r#"{"unknown_paths_status":403}"#),
            "unknown_paths_status"
        );
        let shadow: AccessConfig = serde_json::from_str(r#"{"unknown_paths":"deny"}"#).unwrap();
        let base = Policy::new(&serde_json::from_str("{}").unwrap()).unwrap();
        assert_eq!(
            base.with_shadow(&shadow).unwrap_err().field,
            "unknown_paths"
        );
    }

    #[test]
    fn split_keeps_values_whole_as_configured() {
        let split = |text: &str, split: Split| {
            let mut out = Vec::new();
            split_values(text, "t:", split, &mut out);
            out
        };
        let text = " acme corp,beta gamma ,, ";
        assert_eq!(split(text, Split::None), ["t:acme corp,beta gamma ,,"]);
        assert_eq!(
            split(text, Split::Space),
            ["t:acme", "t:corp,beta", "t:gamma", "t:,,"]
        );
        assert_eq!(split(text, Split::Comma), ["t:acme corp", "t:beta gamma"]);
        assert_eq!(
            split(text, Split::Both),
            ["t:acme", "t:corp", "t:beta", "t:gamma"]
        );
        assert!(split("  ", Split::None).is_empty());
        // A claim string is split the same way; an array's strings never are.
        let mut out = Vec::new();
        claim_values(&serde_json::json!("acme corp"), "", Split::None, &mut out);
        claim_values(&serde_json::json!(["x y"]), "", Split::Both, &mut out);
        assert_eq!(out, ["acme corp", "x y"]);
        // Through the policy: the header `x-tenant: acme corp` is one tenant.
        let policy = Policy::new(
            &serde_json::from_str(
                r#"{"identity":[{"header":"x-tenant","split":"none"},
                               {"metadata":"jwt","claim":"org","split":"comma"}],
                    "rules":[{"when":["acme corp"],"allow":["*"]}]}"#,
            )
            .unwrap(),
        )
        .unwrap();
        let org = serde_json::json!({"org": "north, south wing"});
        let caller = policy.caller(
            |name| (name == "x-tenant").then_some(&b"acme corp"[..]),
            |_, _| vec![org.clone()],
        );
        assert_eq!(caller.values(), ["acme corp", "north", "south wing"]);
        let bad = crate::config::Config::from_json(
            br#"{"access":{"identity":[{"header":"x-tenant","split":"tabs"}]}}"#,
        );
        let why = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(why.contains("access.identity[0].split"), "{why}");
    }

    #[test]
    fn identity_values_from_claims_and_headers() {
        let payload: Value = serde_json::from_str(
            r#"{"groups":["sre","admins"],"scope":"read write","tenant":"acme","realm":{"roles":["x"]},"n":3}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        let both = Split::Both;
        claim_values(claim_at(&payload, "groups").unwrap(), "", both, &mut out);
        claim_values(
            claim_at(&payload, "scope").unwrap(),
            "scope:",
            both,
            &mut out,
        );
        claim_values(
            claim_at(&payload, "realm.roles").unwrap(),
            "",
            both,
            &mut out,
        );
        claim_values(claim_at(&payload, "n").unwrap(), "", both, &mut out);
        assert!(claim_at(&payload, "missing").is_none());
        split_values("acme, beta", "tenant:", both, &mut out);
        assert_eq!(
            Caller::new(out).values(),
            [
                "3",
                "admins",
                "scope:read",
                "scope:write",
                "sre",
                "tenant:acme",
                "tenant:beta",
                "x"
            ]
        );
        // An array's strings are whole values: no group the token does not list.
        let mut out = Vec::new();
        let groups = serde_json::json!(["contractors admins", "a,b", "", 7]);
        claim_values(&groups, "", Split::None, &mut out);
        assert_eq!(
            Caller::new(out).values(),
            ["7", "a,b", "contractors admins"]
        );
        let p = policy(ISSUE_EXAMPLE);
        let none = Annotations::default();
        let contractor = p.grant(&caller(&["contractors admins"]));
        assert!(!contractor.tool("k8s_get_pods", &none).allowed());
    }

    #[test]
    fn errors_name_the_field() {
        let err = |json: &str| {
            let config: AccessConfig = serde_json::from_str(json).unwrap();
            let e = Policy::new(&config).unwrap_err();
            format!("{}: {}", e.field, e.why)
        };
        assert!(
            err(r#"{"rules":[{"when":["a"],"allow":["x",""]}]}"#)
                .starts_with("rules[0].allow[1]: ")
        );
        assert!(err(r#"{"rules":[{"when":[],"allow":["x"]}]}"#).starts_with("rules[0].when: "));
        assert!(err(r#"{"rules":[{"when":["a"]}]}"#).starts_with("rules[0].allow: "));
        assert!(
            err(r#"{"rules":[{"when":["a"],"deny_annotations":["scaryHint"]}]}"#)
                .starts_with("rules[0].deny_annotations[0]: ")
        );
        assert!(
            err(r#"{"rules":[{"when":["a"],"arguments":{"t":{"c":[]}}}]}"#)
                .starts_with("rules[0].arguments.t.c: ")
        );
        assert!(err(r#"{"identity":[{"metadata":"m"}]}"#).starts_with("identity[0].claim: "));
        assert!(
            err(r#"{"identity":[{"header":"x","metadata":"m","claim":"c"}]}"#)
                .starts_with("identity[0]: ")
        );
        assert!(err(r#"{"identity":[{}]}"#).starts_with("identity[0]: "));
        assert!(err(r#"{"identity":[{"header":"x y"}]}"#).starts_with("identity[0].header: "));
    }

    const NAMED: &str = r#"{
        "default": "allow",
        "rules": [
            {"name": "no-shell", "when": ["*"], "deny": ["run_shell"]},
            {"when": ["interns"], "deny": ["deploy_*"]},
            {"when": ["*"], "arguments": {"pay": {"currency": ["EUR"]}}}
        ]
    }"#;

    fn labels(grant: &Grant) -> Vec<String> {
        grant
            .ledger()
            .records()
            .iter()
            .map(|r| {
                format!(
                    "{}:{}:{}:{}",
                    r.verdict.name(),
                    r.surface.name(),
                    r.rule,
                    r.tool.as_deref().unwrap_or("-")
                )
            })
            .collect()
    }

    #[test]
    fn audit_decides_records_and_allows() {
        let none = Annotations::default();
        let enforce = policy(NAMED);
        let audit = policy(&NAMED.replacen('{', r#"{"mode": "audit","#, 1));
        for p in [&enforce, &audit] {
            let g = p.grant(&caller(&["interns"]));
            let shell = g.judge_tool(Surface::Tools, "run_shell", &none);
            let deploy = g.judge_call(Surface::Call, "deploy_app", &none, "{}");
            let pay = g.judge_call(Surface::McpCall, "pay", &none, r#"{"currency":"USD"}"#);
            let fine = g.judge_tool(Surface::Tools, "get_pods", &none);
            assert!(fine.allowed());
            let verdict = if p.mode() == Mode::Audit {
                assert!(shell.allowed() && deploy.allowed() && pay.allowed());
                "would_deny"
            } else {
                assert!(!shell.allowed() && !deploy.allowed() && !pay.allowed());
                "deny"
            };
            assert_eq!(
                labels(&g),
                [
                    format!("{verdict}:tools:no-shell:run_shell"),
                    format!("{verdict}:call:#1:deploy_app"),
                    format!("{verdict}:mcp_call:#2:pay"),
                ]
            );
            // Each record once, and reported once.
            g.judge_tool(Surface::Tools, "run_shell", &none);
            assert_eq!(g.ledger().records().len(), 3);
            assert_eq!(g.ledger().take_new().len(), 3);
            assert!(g.ledger().take_new().is_empty());
        }
        assert_eq!(audit.rule_names().collect::<Vec<_>>(), ["no-shell"]);
    }

    #[test]
    fn a_mask_in_audit_mode_shows_everything_and_records_what_it_would_hide() {
        let audit = policy(&NAMED.replacen('{', r#"{"mode": "audit","#, 1));
        let g = audit.grant(&caller(&["interns"]));
        let names = ["run_shell", "get_pods", "deploy_app"];
        let tool = |e: usize| names.get(e).map(|n| (*n, Annotations::default()));
        let decided = g.mask(3, tool, &RuleMatches::default());
        assert_eq!(decided, [false, true, false]);
        let shown = g.judge_mask(Surface::Tools, decided.into(), tool);
        assert_eq!(&*shown, [true, true, true]);
        assert_eq!(
            labels(&g),
            [
                "would_deny:tools:no-shell:run_shell",
                "would_deny:tools:#1:deploy_app"
            ]
        );
    }

    #[test]
    fn the_shadow_reports_where_it_differs() {
        let none = Annotations::default();
        let config: AccessConfig = serde_json::from_str(NAMED).unwrap();
        let shadow: AccessConfig = serde_json::from_str(
            r#"{"default": "allow", "rules": [
                {"name": "no-deploys", "when": ["*"], "deny": ["deploy_*", "drop_*"]},
                {"name": "shell-ok", "when": ["*"], "allow": ["run_shell"]}
            ]}"#,
        )
        .unwrap();
        let p = Rc::new(Policy::new(&config).unwrap().with_shadow(&shadow).unwrap());
        let g = p.grant(&caller(&["staff"]));
        // Enforced: run_shell denied, drop_table allowed; the shadow the other way round.
        assert!(!g.judge_tool(Surface::Tools, "run_shell", &none).allowed());
        assert!(g.judge_tool(Surface::Tools, "drop_table", &none).allowed());
        assert!(g.judge_tool(Surface::Tools, "get_pods", &none).allowed());
        assert_eq!(
            labels(&g),
            [
                "shadow_allow:tools:shell-ok:run_shell",
                "deny:tools:no-shell:run_shell",
                "shadow_deny:tools:no-deploys:drop_table"
            ]
        );
        // Without a shadow nothing is asked of one.
        assert!(policy(NAMED).shadow().is_none());
    }

    #[test]
    fn grants_of_callers_matching_the_same_rules_share_a_key() {
        let p = policy(ISSUE_EXAMPLE);
        assert_eq!(
            p.grant(&caller(&["sre"])).key(),
            p.grant(&caller(&["admins"])).key()
        );
        assert_ne!(
            p.grant(&caller(&["sre"])).key(),
            p.grant(&caller(&["finance"])).key()
        );
        assert_ne!(
            p.grant(&caller(&["nobody"])).key(),
            p.grant(&Caller::anonymous()).key()
        );
    }

    #[test]
    fn a_grant_says_whether_annotations_can_decide() {
        let p = policy(ISSUE_EXAMPLE);
        assert!(p.grant(&caller(&["sre"])).reads_annotations());
        assert!(p.grant(&caller(&["sre"])).is_identified());
        let anonymous = p.grant(&Caller::anonymous());
        assert!(!anonymous.is_identified() && !anonymous.reads_annotations());
        let names_only = policy(r#"{"rules":[{"when":["*"],"allow":["a*"]}]}"#);
        let g = names_only.grant(&Caller::anonymous());
        assert!(g.is_identified() && !g.reads_annotations());
    }

    #[test]
    fn annotations_are_read_from_mcp_tools() {
        let a = Annotations::of_tool(
            r#"{"name":"rm","annotations":{"destructiveHint":true,"readOnlyHint":false,"title":"x"}}"#,
        );
        assert_eq!(a.get(Hint::Destructive), Some(true));
        assert_eq!(a.get(Hint::ReadOnly), Some(false));
        assert_eq!(a.get(Hint::OpenWorld), None);
        assert_eq!(
            Annotations::of_tool("{\"annotations\":7,\"Hint\":1}"),
            Annotations::default()
        );
        assert_eq!(hint("readOnlyHint: false"), Some((Hint::ReadOnly, false)));
        assert_eq!(hint("openWorldHint"), Some((Hint::OpenWorld, true)));
        assert_eq!(hint("readOnlyHint: maybe"), None);
    }
}
