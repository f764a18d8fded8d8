//! What one caller may do ([`Grant`]): whether it may see a tool, and call it with these
//! arguments.

use super::config::{Denied, Effect};
use super::judge::Ledger;
use super::policy::{Policy, Rule};
use super::{Annotations, Decision, Why};
use crate::glob::Glob;
use serde_json::Value;
use std::rc::Rc;

/// What one caller may do: the policy and the rules that apply to the caller.
#[derive(Debug, Clone)]
pub struct Grant {
    pub(super) policy: Rc<Policy>,
    pub(super) applicable: Rc<[usize]>,
    /// The caller has the identity the policy needs.
    pub(super) identified: bool,
    /// `access_shadow`'s grant for the same request.
    pub(super) shadow: Option<Rc<Grant>>,
    /// The request's decisions worth reporting, shared by the grant's clones.
    pub(super) ledger: Ledger,
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

    pub(super) fn rules(&self) -> impl Iterator<Item = (usize, &Rule)> {
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
    use crate::access::testing::{ISSUE_EXAMPLE, caller, policy};
    use crate::access::{Caller, Hint};

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
}
