//! Every decision worth reporting recorded once ([`Ledger`]), and carried out as `access.mode`
//! says: denied when enforced, allowed (and recorded as `would_deny`) in audit mode; where
//! `access_shadow` decides otherwise, recorded too.

use super::config::Mode;
use super::{Annotations, Decision, Grant, Surface, Why};
use std::cell::RefCell;
use std::rc::Rc;

impl Grant {
    /// [`Grant::tool_named`] on the `tools` surface, recorded and enforced as the mode says
    /// (under the first name).
    pub fn judge_named(&self, names: &[&str]) -> Decision {
        let decision = self.tool_named(names);
        let first = names.first().copied();
        self.judge(Surface::Tools, first, decision, |s| s.tool_named(names))
    }

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
    pub(super) fn judge(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::mask::RuleMatches;
    use crate::access::testing::{caller, policy};
    use crate::access::{AccessConfig, Policy};

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
}
