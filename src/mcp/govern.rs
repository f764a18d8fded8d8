//! Access rules on MCP routes: what the gateway answers when a request or a call may not reach
//! the server. Which tool a caller may see or call is decided by [`crate::access`] alone; this
//! module turns its decisions into JSON-RPC errors, statuses and the `x-toolsift` reason.
//!
//! - A request refused whole ([`Unfit`]: no identity, no tool allowed, a message the gateway
//!   cannot check) gets HTTP 403 (or 400, 413) with a JSON-RPC error, on both revisions.
//! - A refused call ([`Refusal`]) gets, with `denied: "hidden"`, what a call of a tool the server
//!   never listed gets (`-32602` naming `find_tools`; HTTP 400 on 2026-07-28, 200 before); with
//!   `denied: "refused"`, `-32003` "access denied" with the reason (HTTP 403 on 2026-07-28, 200
//!   before, as the transport maps errors to statuses).

use crate::access::config::Denied;
use crate::access::{Annotations, Decision, Grant, Surface, Why};
use crate::pipeline::Denial;

/// The JSON-RPC error code of an access denial (as ContextForge answers it).
pub const ACCESS_DENIED: i64 = -32003;
/// JSON-RPC's invalid params: a tool that does not exist, or arguments that may not be passed.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's invalid request: a message the gateway cannot check.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's internal error.
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error response to the request whose id is `id` (JSON text; `null` when unknown).
pub fn error_body(id: &str, code: i64, message: &str) -> String {
    let error = serde_json::json!({"code": code, "message": message});
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}")
}

/// Why a whole request is refused under access rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfit {
    /// The configuration reads an identity and the request carries none.
    NoIdentity,
    /// The caller may see none of the server's tools.
    NothingAllowed,
    /// A batch holding `tools/list` or `tools/call` (or a member the gateway cannot read).
    Batch,
    /// A message the gateway cannot read, which the server might read as a tools request.
    Unreadable,
    /// A body larger than `max_body_bytes`, never read.
    TooLarge,
    /// The gateway could not run its checks (the host failed it).
    Internal,
}

/// A JSON-RPC error the gateway answers with, and what `x-toolsift` says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub code: i64,
    pub message: String,
    /// `reason=` in `x-toolsift`.
    pub reason: &'static str,
    /// The stat the refusal counts in.
    pub surface: Surface,
}

impl Unfit {
    pub fn answer(self) -> Answer {
        let (status, code, reason, message) = match self {
            Unfit::NoIdentity => (
                403,
                ACCESS_DENIED,
                "no_identity",
                Denial {
                    tool: None,
                    why: Why::NoIdentity,
                }
                .message(),
            ),
            Unfit::NothingAllowed => (
                403,
                ACCESS_DENIED,
                "nothing_allowed",
                "toolsift: access denied: no tool of this server is allowed for this caller"
                    .to_owned(),
            ),
            Unfit::Batch => (
                400,
                INVALID_REQUEST,
                "batch",
                "toolsift: a batch holding tools/list or tools/call cannot be checked against \
                 the access rules; send them one at a time"
                    .to_owned(),
            ),
            Unfit::Unreadable => (
                400,
                INVALID_REQUEST,
                "unreadable",
                "toolsift: this message cannot be checked against the access rules: it is not \
                 one JSON-RPC message the gateway can read"
                    .to_owned(),
            ),
            Unfit::TooLarge => (
                413,
                INVALID_REQUEST,
                "too_large",
                "toolsift: this message is larger than the gateway reads (max_body_bytes), so \
                 it cannot be checked against the access rules"
                    .to_owned(),
            ),
            Unfit::Internal => (
                500,
                INTERNAL_ERROR,
                "internal",
                "toolsift: internal error: this message could not be checked against the \
                 access rules"
                    .to_owned(),
            ),
        };
        Answer {
            status,
            code,
            message,
            reason,
            surface: Surface::McpRequest,
        }
    }
}

/// Why a `tools/call` may not reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The rules deny the tool, or the arguments.
    Denied(Why),
    /// The server's tools could not be read, and a rule that applies to the caller decides by
    /// annotations: the tool's cannot be checked.
    Unverified,
}

/// Whether `grant`'s caller may call tool `name` with `arguments` (JSON object text, exactly
/// what the server would get). `annotations`: the tool's, from the server's catalog; `None`
/// when the catalog could not be read, and the call is then decided by its name and arguments
/// unless a rule needs the annotations.
pub fn check_call(
    grant: &Grant,
    annotations: Option<Annotations>,
    name: &str,
    arguments: &str,
) -> Option<Refusal> {
    let decided = grant.judge_call(
        Surface::McpCall,
        name,
        &annotations.unwrap_or_default(),
        arguments,
    );
    match decided {
        Decision::Denied(why) => Some(Refusal::Denied(why)),
        // In audit mode an unverifiable call passes, as every other.
        Decision::Allowed
            if annotations.is_none() && grant.reads_annotations() && grant.enforces() =>
        {
            Some(Refusal::Unverified)
        }
        Decision::Allowed => None,
    }
}

/// The answer to a call of `name` the rules deny (`why`), on a 2026-07-28 route (`modern`) or
/// not. `unknown` is what a call of a tool the server never listed gets (the hidden answer).
pub fn denied_call(mode: Denied, modern: bool, name: &str, why: &Why, unknown: String) -> Answer {
    let arguments = matches!(why, Why::Argument { .. });
    let reason = if arguments { "arguments" } else { "access" };
    let (status, code, message) = match (mode, why) {
        // The tool is one the caller can find: calling it unknown would send a model back to
        // search for it. What may not be passed is said, not which rule says so.
        (
            Denied::Hidden,
            Why::Argument {
                argument, value, ..
            },
        ) => (
            if modern { 400 } else { 200 },
            INVALID_PARAMS,
            format!("Invalid arguments for tool {name}: `{argument}` may not be {value}."),
        ),
        (Denied::Hidden, _) => (if modern { 400 } else { 200 }, INVALID_PARAMS, unknown),
        (Denied::Refused, why) => (
            if modern { 403 } else { 200 },
            ACCESS_DENIED,
            Denial {
                tool: Some(name.to_owned()),
                why: why.clone(),
            }
            .message(),
        ),
    };
    Answer {
        status,
        code,
        message,
        reason,
        surface: Surface::McpCall,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::access::{AccessConfig, Caller, Hint, Policy};
    use std::rc::Rc;

    fn grant(access: &str, values: &[&str]) -> Grant {
        let config: AccessConfig = serde_json::from_str(access).unwrap();
        let policy = Rc::new(Policy::new(&config).unwrap());
        policy.grant(&Caller::new(values.iter().map(|v| (*v).to_owned())))
    }

    const RULES: &str = r#"{"identity":[{"header":"x-team"}],"default":"deny","rules":[
        {"when":["a"],"allow":["a_*"],"arguments":{"a_pay":{"currency":["EUR"]}}},
        {"when":["*"],"deny_annotations":["destructiveHint"]}]}"#;

    #[test]
    fn calls_are_checked_by_name_annotations_and_arguments() {
        let a = grant(RULES, &["a"]);
        let known = Some(Annotations::default());
        assert_eq!(check_call(&a, known, "a_read", "{}"), None);
        assert_eq!(
            check_call(&a, known, "b_read", "{}"),
            Some(Refusal::Denied(Why::Default))
        );
        let destructive = Some(Annotations::default().with(Hint::Destructive, true));
        assert!(matches!(
            check_call(&a, destructive, "a_drop", "{}"),
            Some(Refusal::Denied(Why::Annotation { .. }))
        ));
        assert!(matches!(
            check_call(&a, known, "a_pay", r#"{"currency":"GBP"}"#),
            Some(Refusal::Denied(Why::Argument { .. }))
        ));
        // Without the catalog: by name, unless a rule reads annotations.
        assert_eq!(
            check_call(&a, None, "a_read", "{}"),
            Some(Refusal::Unverified)
        );
        assert_eq!(
            check_call(&a, None, "b_read", "{}"),
            Some(Refusal::Denied(Why::Default))
        );
        let names_only = grant(r#"{"rules":[{"when":["*"],"allow":["a_*"]}]}"#, &[]);
        assert_eq!(check_call(&names_only, None, "a_read", "{}"), None);
        assert_eq!(
            check_call(&grant(RULES, &[]), None, "a_read", "{}"),
            Some(Refusal::Denied(Why::NoIdentity))
        );
    }

    #[test]
    fn hidden_looks_unknown_refused_says_why() {
        let why = Why::Rule {
            rule: 1,
            pattern: "*drop*".into(),
        };
        let hidden = denied_call(
            Denied::Hidden,
            true,
            "drop",
            &why,
            "Unknown tool: drop".into(),
        );
        assert_eq!(
            (hidden.status, hidden.code, hidden.message.as_str()),
            (400, INVALID_PARAMS, "Unknown tool: drop")
        );
        assert_eq!(
            denied_call(Denied::Hidden, false, "drop", &why, String::new()).status,
            200
        );
        let refused = denied_call(Denied::Refused, true, "drop", &why, String::new());
        assert_eq!((refused.status, refused.code), (403, ACCESS_DENIED));
        assert_eq!(
            refused.message,
            "toolsift: access denied: tool `drop`: denied by access rule 1 (`*drop*`)"
        );
        assert_eq!(
            denied_call(Denied::Refused, false, "drop", &why, String::new()).status,
            200
        );
        let argument = Why::Argument {
            rule: 0,
            argument: "currency".into(),
            value: "\"GBP\"".into(),
        };
        let hidden = denied_call(Denied::Hidden, true, "pay", &argument, String::new());
        assert_eq!((hidden.code, hidden.reason), (INVALID_PARAMS, "arguments"));
        assert_eq!(
            hidden.message,
            "Invalid arguments for tool pay: `currency` may not be \"GBP\"."
        );
        assert!(!hidden.message.contains("rule"));
        let refused = denied_call(Denied::Refused, true, "pay", &argument, String::new());
        assert!(
            refused.message.contains("access rule 0"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn whole_requests_are_refused_clearly() {
        let a = Unfit::NoIdentity.answer();
        assert_eq!(
            (a.status, a.code, a.reason),
            (403, ACCESS_DENIED, "no_identity")
        );
        assert!(a.message.contains("no caller identity"));
        assert_eq!(Unfit::Batch.answer().status, 400);
        assert_eq!(Unfit::TooLarge.answer().status, 413);
        assert_eq!(Unfit::Internal.answer().status, 500);
        let body: serde_json::Value =
            serde_json::from_str(&error_body("null", ACCESS_DENIED, "a \"b\"")).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32003, "message": "a \"b\""}})
        );
        assert!(
            [Unfit::NothingAllowed, Unfit::Batch, Unfit::Unreadable]
                .iter()
                .all(|u| u.answer().surface == Surface::McpRequest)
        );
    }
}
