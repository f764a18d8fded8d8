//! A remote MCP connector a request hands the provider ([`Connector`]), and what becomes of
//! it under the caller's grant ([`Grant::connector`]).

use super::config::Effect;
use super::policy::Rule;
use super::{Annotations, Decision, Grant, Surface, Why};
use crate::glob::Glob;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Caller;
    use crate::access::judge::Verdict;
    use crate::access::testing::{caller, policy};

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
}
