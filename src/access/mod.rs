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
//!
//! The files: [`config`] the section as written; [`identity`] the [`Caller`] and where its
//! values are read; [`policy`] the section compiled; [`grant`] what one caller may see and
//! call, [`mask`] the same over a whole catalog at once, [`connector`] what becomes of a remote
//! MCP connector; [`judge`] records each decision and carries it out as the mode says.

pub mod config;
pub mod connector;
pub mod grant;
pub mod identity;
pub mod judge;
pub mod mask;
pub mod policy;

pub use config::AccessConfig;
pub use grant::Grant;
pub use identity::Caller;
pub use policy::Policy;

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

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

/// The hint (and the value that matches it) a `deny_annotations` entry names.
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

/// What the access tests share: a policy read from JSON, a caller, the issue's example.
#[cfg(test)]
mod testing {
    use super::{Caller, Policy};
    use std::rc::Rc;

    pub(super) fn policy(json: &str) -> Rc<Policy> {
        let config: super::AccessConfig = serde_json::from_str(json).unwrap();
        Rc::new(Policy::new(&config).unwrap())
    }

    pub(super) fn caller(values: &[&str]) -> Caller {
        Caller::new(values.iter().map(|v| (*v).to_owned()))
    }

    pub(super) const ISSUE_EXAMPLE: &str = r#"{
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
