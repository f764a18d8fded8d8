//! What a request hands the provider besides the function tools of its tools container, and
//! access rules govern entry by entry: remote MCP connectors (Anthropic `mcp_servers`, OpenAI
//! Responses `mcp` tools), which the provider itself connects to and runs, and Responses
//! `namespace`s of functions. Decided before the tools container is read, on every mode:
//! a denied connector leaves the request (or, under `denied: "refused"`, the request is
//! refused), a narrowed one goes with its allowed-tools list written, a denied namespace
//! function leaves its namespace, and a namespace left with none leaves.
//!
//! What each dialect knows (where these entries sit, how a list is written) is its own
//! ([`crate::dialects::RequestCodec::holders`]); the decisions are [`crate::access`]'s. Every
//! byte outside the entries changed stays as the client wrote it.

use crate::access::config::Denied;
use crate::access::connector::ConnectorVerdict;
use crate::access::{Grant, Surface, Why};
use crate::dialects::{Held, Holder, RequestCodec};
use crate::pipeline::Denial;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::ops::Range;

/// What access rules made of a request's connectors and namespaces.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The body with denied entries out and narrowed connectors written; `None`: unchanged.
    pub body: Option<String>,
    /// Connectors and namespace functions the caller may not see (recorded on `tools`).
    pub denied: usize,
    /// Connectors that go with fewer tools than the client allowed them.
    pub narrowed: usize,
    /// Connectors and namespace functions that go: the request has something its caller
    /// may see even when none of its function tools is.
    pub kept: usize,
    /// The request is refused whole: a denied connector under `denied: "refused"`, or
    /// nothing left that the caller may see.
    pub denial: Option<Denial>,
}

/// An item's fate in its array.
enum Fate {
    Keep,
    Drop,
    Write(String),
}

/// Decides the connectors and namespaces of `body` (read by `codec`) for `grant`.
pub fn govern(codec: &dyn RequestCodec, body: &str, grant: &Grant) -> Outcome {
    let holders = codec.holders(body);
    if holders.is_empty() {
        return Outcome::default();
    }
    let mut outcome = Outcome::default();
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let mut kept = 0;
    let mut fates: Vec<Vec<(usize, Fate)>> = Vec::with_capacity(holders.len());
    for holder in &holders {
        let mut decided = Vec::new();
        for (item, held) in &holder.entries {
            let text = item_text(holder, *item, body);
            let fate = match held {
                Held::Connector(connector) => match grant.judge_connector(connector) {
                    ConnectorVerdict::Keep => {
                        kept += 1;
                        Fate::Keep
                    }
                    ConnectorVerdict::Narrow(tools) => {
                        match narrowed(codec, &holders, connector, text, &tools) {
                            Some(written) => {
                                kept += 1;
                                outcome.narrowed += 1;
                                Fate::Write(written)
                            }
                            // Cannot be written: it does not go with more than it may.
                            None => {
                                outcome.denied += 1;
                                gone.insert(connector.label.clone());
                                Fate::Drop
                            }
                        }
                    }
                    ConnectorVerdict::Denied { name, why } => {
                        outcome.denied += 1;
                        gone.insert(connector.label.clone());
                        if grant.denied_mode() == Denied::Refused && outcome.denial.is_none() {
                            outcome.denial = Some(Denial {
                                tool: Some(name),
                                why,
                            });
                        }
                        Fate::Drop
                    }
                },
                Held::Namespace {
                    name,
                    functions,
                    names,
                } => {
                    let allowed: Vec<bool> = names
                        .iter()
                        .map(|function| match function {
                            Some(function) => {
                                let qualified = format!("{name}.{function}");
                                grant.judge_named(&[&qualified, function]).allowed()
                            }
                            None => true,
                        })
                        .collect();
                    let left = allowed.iter().filter(|a| **a).count();
                    outcome.denied += allowed.len() - left;
                    kept += left;
                    if left == allowed.len() {
                        Fate::Keep
                    } else if left == 0 {
                        Fate::Drop
                    } else {
                        let mut inner = String::new();
                        functions.write(body, &mut inner, |i, text| {
                            allowed
                                .get(i)
                                .copied()
                                .unwrap_or(false)
                                .then_some(Cow::Borrowed(text))
                        });
                        let entry = holder.array.items.get(*item).cloned().unwrap_or_default();
                        let rebuilt = [
                            body.get(entry.start..functions.span.start),
                            Some(inner.as_str()),
                            body.get(functions.span.end..entry.end),
                        ];
                        match rebuilt.into_iter().collect::<Option<Vec<&str>>>() {
                            Some(parts) => Fate::Write(parts.concat()),
                            None => Fate::Drop,
                        }
                    }
                }
                Held::OfConnector(_) => Fate::Keep,
            };
            decided.push((*item, fate));
        }
        fates.push(decided);
    }
    // What belongs to a connector that left leaves with it.
    for (holder, decided) in holders.iter().zip(fates.iter_mut()) {
        for ((_, held), (_, fate)) in holder.entries.iter().zip(decided.iter_mut()) {
            if let Held::OfConnector(label) = held {
                if gone.contains(label) {
                    *fate = Fate::Drop;
                }
            }
        }
    }
    if let Some(denial) = &outcome.denial {
        let tool = denial.tool.clone();
        // The shadow policy's view: would it refuse for a connector too?
        let shadow = |s: &Grant| {
            let refuses = s.denied_mode() == Denied::Refused;
            holders
                .iter()
                .flat_map(|h| &h.entries)
                .find_map(|(_, held)| match held {
                    Held::Connector(c) if refuses => match s.connector(c) {
                        ConnectorVerdict::Denied { why, .. } => Some(why),
                        _ => None,
                    },
                    _ => None,
                })
        };
        outcome.denial = grant
            .judge_request(
                Surface::Request,
                tool.as_deref(),
                Some(denial.why.clone()),
                shadow,
            )
            .map(|why| Denial { tool, why });
        return outcome;
    }
    outcome.kept = kept;
    if outcome.denied == 0 && outcome.narrowed == 0 {
        return outcome;
    }
    let patches = holders
        .iter()
        .zip(&fates)
        .filter(|(_, decided)| decided.iter().any(|(_, f)| !matches!(f, Fate::Keep)))
        .map(|(holder, decided)| {
            let mut out = String::new();
            holder.array.write(body, &mut out, |i, text| {
                match decided.iter().find(|(item, _)| *item == i).map(|(_, f)| f) {
                    None | Some(Fate::Keep) => Some(Cow::Borrowed(text)),
                    Some(Fate::Drop) => None,
                    Some(Fate::Write(written)) => Some(Cow::Owned(written.clone())),
                }
            });
            (holder.array.span.clone(), out)
        })
        .collect();
    outcome.body = crate::dialects::shared::splice::apply_patches(body, patches);
    let nothing_left = kept == 0
        && outcome.body.as_deref().is_some_and(|b| {
            crate::dialects::shared::array_at(b, codec.tools_path())
                .is_none_or(|tools| tools.items.is_empty())
        });
    if nothing_left || outcome.body.is_none() {
        // Never a model called with no tool at all: a permission problem would look like a
        // quality one (and a body that could not be written is not sent as it was).
        let why = if grant.is_identified() {
            Why::Default
        } else {
            Why::NoIdentity
        };
        // The shadow policy's view, decided as this one's: would it leave nothing too?
        let shadow = |s: &Grant| {
            leaves_nothing(codec, body, &holders, s).then(|| {
                if s.is_identified() {
                    Why::Default
                } else {
                    Why::NoIdentity
                }
            })
        };
        outcome.denial = grant
            .judge_request(Surface::Request, None, Some(why), shadow)
            .map(|why| Denial { tool: None, why });
    }
    outcome
}

/// The text of item `item` of `holder`'s array in `body` (empty if none).
fn item_text<'a>(holder: &Holder, item: usize, body: &'a str) -> &'a str {
    holder
        .array
        .items
        .get(item)
        .and_then(|r| body.get(r.clone()))
        .unwrap_or_default()
}

/// `connector`'s entry (`text`) written with its allowed tools narrowed to `tools`; `None`
/// when that cannot be written. A connector an Anthropic `mcp_toolset` names (the
/// `mcp-client-2025-11-20` beta) takes its tools from the toolset's `default_config` and
/// `configs`, which toolsift does not write: a list written on its `mcp_servers` entry
/// would not be the one the provider reads, so the rules that narrow it deny it whole.
fn narrowed(
    codec: &dyn RequestCodec,
    holders: &[Holder],
    connector: &crate::access::connector::Connector,
    text: &str,
    tools: &[String],
) -> Option<String> {
    let has_toolset = holders
        .iter()
        .flat_map(|h| h.entries.iter())
        .any(|(_, held)| matches!(held, Held::OfConnector(label) if *label == connector.label));
    if has_toolset {
        return None;
    }
    codec.narrow_connector(text, tools)
}

/// Whether `grant` (unrecorded: the shadow policy's view) leaves a request nothing its caller
/// may see, as [`govern`] decides it: no connector or namespace function kept, and every item
/// of the tools array one that leaves (a denied connector, its `mcp_toolset`, an emptied
/// namespace).
fn leaves_nothing(codec: &dyn RequestCodec, body: &str, holders: &[Holder], grant: &Grant) -> bool {
    let mut gone: BTreeSet<&str> = BTreeSet::new();
    let mut dropped: Vec<(Range<usize>, usize)> = Vec::new();
    for holder in holders {
        for (item, held) in &holder.entries {
            let text = item_text(holder, *item, body);
            let leaves = match held {
                Held::Connector(connector) => {
                    let kept = match grant.connector(connector) {
                        ConnectorVerdict::Keep => true,
                        ConnectorVerdict::Narrow(tools) => {
                            narrowed(codec, holders, connector, text, &tools).is_some()
                        }
                        ConnectorVerdict::Denied { .. } => false,
                    };
                    if kept {
                        return false;
                    }
                    gone.insert(&connector.label);
                    true
                }
                Held::Namespace { name, names, .. } => {
                    let allowed = |function: &Option<String>| match function {
                        Some(function) => {
                            let qualified = format!("{name}.{function}");
                            grant.tool_named(&[&qualified, function]).allowed()
                        }
                        None => true,
                    };
                    if names.iter().any(allowed) {
                        return false;
                    }
                    true
                }
                // Decided below, once every connector is.
                Held::OfConnector(_) => false,
            };
            if leaves {
                dropped.push((holder.array.span.clone(), *item));
            }
        }
    }
    for holder in holders {
        for (item, held) in &holder.entries {
            if matches!(held, Held::OfConnector(label) if gone.contains(label.as_str())) {
                dropped.push((holder.array.span.clone(), *item));
            }
        }
    }
    crate::dialects::shared::array_at(body, codec.tools_path()).is_none_or(|tools| {
        (0..tools.items.len()).all(|i| {
            dropped
                .iter()
                .any(|(span, at)| *span == tools.span && *at == i)
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::access::{AccessConfig, Caller, Policy};
    use crate::dialects::Dialect;
    use std::rc::Rc;

    fn grant(access: &str, values: &[&str]) -> Grant {
        let config: AccessConfig = serde_json::from_str(access).unwrap();
        let policy = Rc::new(Policy::new(&config).unwrap());
        policy.grant(&Caller::new(values.iter().map(|v| (*v).to_owned())))
    }

    const RULES: &str = r#"{"identity":[{"header":"x-group"}],"default":"deny","rules":[
        {"when":["dev"],"allow":["mcp:github","mcp_url:*.githubcopilot.com","search_*",
                                 "mcp:github/search_repos","mcp:github/get_issue",
                                 "crm.get_*","ping"]},
        {"when":["*"],"deny":["mcp_url:evil.example","*delete*"]}]}"#;

    fn govern_as(dialect: Dialect, body: &str) -> Outcome {
        govern(dialect.codec(), body, &grant(RULES, &["dev"]))
    }

    #[test]
    fn responses_connectors_are_decided_by_label_and_host_and_narrowed() {
        let body = r#"{"model":"m","input":"hi","tools":[
 {"type":"function","name":"search_web","parameters":{}},
 {"type":"mcp","server_label":"github","server_url":"https://api.githubcopilot.com/mcp/","require_approval":"never"},
 {"type":"mcp","server_label":"github","server_url":"https://evil.example/mcp"},
 {"type":"mcp","server_label":"gitlab","server_url":"https://api.githubcopilot.com/mcp/"},
 {"type":"mcp","server_label":"github","server_url":"https://x.githubcopilot.com","allowed_tools":{"tool_names":["get_issue","delete_repo"],"read_only":true}}],"store":false}"#;
        let out = govern_as(Dialect::OpenaiResponses, body);
        assert_eq!((out.denied, out.narrowed, out.denial), (2, 2, None));
        let sent = out.body.unwrap();
        assert_eq!(
            sent,
            r#"{"model":"m","input":"hi","tools":[
 {"type":"function","name":"search_web","parameters":{}},
 {"type":"mcp","server_label":"github","server_url":"https://api.githubcopilot.com/mcp/","require_approval":"never","allowed_tools":["search_repos","get_issue"]},
 {"type":"mcp","server_label":"github","server_url":"https://x.githubcopilot.com","allowed_tools":{"tool_names":["get_issue"],"read_only":true}}],"store":false}"#
        );
    }

    #[test]
    fn anthropic_servers_leave_with_their_toolsets() {
        let body = r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],
 "mcp_servers":[{"type":"url","url":"https://evil.example/sse","name":"github"},
                {"type":"url","url":"https://api.githubcopilot.com/mcp","name":"github2"},
                {"type":"url","url":"https://api.githubcopilot.com/mcp","name":"github","tool_configuration":{"enabled":true,"allowed_tools":["search_repos"]}}],
 "tools":[{"type":"mcp_toolset","mcp_server_name":"github2"},{"name":"search_docs","input_schema":{}}]}"#;
        let out = govern_as(Dialect::Anthropic, body);
        assert_eq!((out.denied, out.narrowed, &out.denial), (2, 0, &None));
        let sent = out.body.unwrap();
        assert_eq!(
            sent,
            r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],
 "mcp_servers":[{"type":"url","url":"https://api.githubcopilot.com/mcp","name":"github","tool_configuration":{"enabled":true,"allowed_tools":["search_repos"]}}],
 "tools":[{"name":"search_docs","input_schema":{}}]}"#
        );
        // Refused: the request is refused, naming the connector.
        let refused = RULES.replace(
            r#""default":"deny""#,
            r#""default":"deny","denied":"refused""#,
        );
        let out = govern(Dialect::Anthropic.codec(), body, &grant(&refused, &["dev"]));
        let denial = out.denial.unwrap();
        assert_eq!(denial.tool.as_deref(), Some("mcp_url:evil.example"));
        assert!(out.body.is_none());
    }

    #[test]
    fn an_anthropic_server_with_a_toolset_is_not_narrowed_but_denied_whole() {
        let rules = r#"{"identity":[{"header":"x-group"}],"default":"deny","rules":[
            {"when":["dev"],"allow":["mcp:github","mcp_url:*.githubcopilot.com",
                                     "mcp:github/search_repos","search_*"]}]}"#;
        let server = r#"{"type":"url","url":"https://api.githubcopilot.com/mcp","name":"github"}"#;
        let old_beta = format!(
            r#"{{"model":"m","max_tokens":9,"messages":[],"mcp_servers":[{server}],"tools":[{{"name":"search_docs","input_schema":{{}}}}]}}"#
        );
        let govern_by = |rules: &str, body: &str| {
            govern(Dialect::Anthropic.codec(), body, &grant(rules, &["dev"]))
        };
        let out = govern_by(rules, &old_beta);
        assert_eq!((out.denied, out.narrowed), (0, 1));
        assert!(
            out.body
                .unwrap()
                .contains(r#""tool_configuration":{"allowed_tools":["search_repos"]}"#)
        );
        // The later beta: the toolset's `configs` say which tools go, and toolsift does not
        // write them; the server and its toolset leave.
        let toolset = r#"{"type":"mcp_toolset","mcp_server_name":"github","default_config":{"enabled":false},"configs":{"search_repos":{"enabled":true},"delete_repo":{"enabled":true}}}"#;
        let new_beta = format!(
            r#"{{"model":"m","max_tokens":9,"messages":[],"mcp_servers":[{server}],"tools":[{toolset},{{"name":"search_docs","input_schema":{{}}}}]}}"#
        );
        let out = govern_by(rules, &new_beta);
        assert_eq!((out.denied, out.narrowed), (1, 0));
        assert_eq!(
            out.body.unwrap(),
            r#"{"model":"m","max_tokens":9,"messages":[],"mcp_servers":[],"tools":[{"name":"search_docs","input_schema":{}}]}"#
        );
        // A connector the rules allow whole goes as the client wrote it, toolset and all.
        let whole = r#"{"identity":[{"header":"x-group"}],"default":"deny","rules":[
            {"when":["dev"],"allow":["mcp:github","mcp_url:*.githubcopilot.com","mcp:github/*","search_*"]}]}"#;
        let out = govern(
            Dialect::Anthropic.codec(),
            &new_beta,
            &grant(whole, &["dev"]),
        );
        assert_eq!((out.denied, out.narrowed, out.body), (0, 0, None));
    }

    #[test]
    fn namespaces_lose_their_denied_functions_and_leave_empty() {
        let body = r#"{"input":"hi","tools":[{"type":"namespace","name":"crm","description":"CRM","tools":[
   {"type":"function","name":"get_customer","parameters":{}},
   {"type":"function","name":"delete_customer","parameters":{}},
   {"type":"function","name":"ping"}]},
 {"type":"namespace","name":"billing","description":"B","tools":[{"type":"function","name":"refund"}]},
 {"type":"function","name":"search_web"}]}"#;
        let out = govern_as(Dialect::OpenaiResponses, body);
        assert_eq!(out.denied, 2);
        assert_eq!(
            out.body.unwrap(),
            r#"{"input":"hi","tools":[{"type":"namespace","name":"crm","description":"CRM","tools":[
   {"type":"function","name":"get_customer","parameters":{}},
   {"type":"function","name":"ping"}]},
 {"type":"function","name":"search_web"}]}"#
        );
    }

    #[test]
    fn the_shadow_decides_nothing_left_as_the_enforced_policy_does() {
        use crate::access::Surface;
        use crate::access::judge::Verdict;
        let body = r#"{"input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://x.example"}]}"#;
        let config: AccessConfig = serde_json::from_str(RULES).unwrap();
        let request_verdicts = |shadow: &str| -> Vec<Verdict> {
            let shadow: AccessConfig = serde_json::from_str(shadow).unwrap();
            let policy = Policy::new(&config).unwrap().with_shadow(&shadow).unwrap();
            let g = Rc::new(policy).grant(&Caller::new(["dev".to_owned()]));
            let out = govern(Dialect::OpenaiResponses.codec(), body, &g);
            assert_eq!(out.denial.unwrap().why, Why::Default);
            g.ledger()
                .records()
                .into_iter()
                .filter(|r| r.surface == Surface::Request)
                .map(|r| r.verdict)
                .collect()
        };
        // The same rules: the shadow leaves nothing too, and differs in nothing.
        assert!(!request_verdicts(RULES).contains(&Verdict::ShadowAllow));
        // A shadow that keeps the connector would not refuse the request.
        let keeps = r#"{"identity":[{"header":"x-group"}],"default":"allow"}"#;
        assert!(request_verdicts(keeps).contains(&Verdict::ShadowAllow));
        // One that keeps a namespace function, beside the denied connector, neither.
        let body_ns = r#"{"input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://x.example"},
 {"type":"namespace","name":"crm","description":"CRM","tools":[{"type":"function","name":"get_customer"}]}]}"#;
        let shadow: AccessConfig = serde_json::from_str(RULES).unwrap();
        let policy = Policy::new(&config).unwrap().with_shadow(&shadow).unwrap();
        let g = Rc::new(policy).grant(&Caller::new(["dev".to_owned()]));
        let out = govern(Dialect::OpenaiResponses.codec(), body_ns, &g);
        assert_eq!(out.denial, None, "crm.get_customer is allowed");
    }

    #[test]
    fn nothing_left_is_refused_and_audit_edits_nothing() {
        let body = r#"{"input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://x.example"}]}"#;
        let out = govern_as(Dialect::OpenaiResponses, body);
        assert_eq!(out.denied, 1);
        assert_eq!(out.denial.unwrap().why, Why::Default);
        let audit = RULES.replace(r#""default":"deny""#, r#""default":"deny","mode":"audit""#);
        let g = grant(&audit, &["dev"]);
        let out = govern(Dialect::OpenaiResponses.codec(), body, &g);
        assert_eq!((out.body, out.denied, out.denial), (None, 0, None));
        assert_eq!(g.ledger().records().len(), 1, "counted as would_deny");
        // Nothing to govern: nothing read, nothing changed.
        let plain = r#"{"input":"hi","tools":[{"type":"function","name":"search_web"}]}"#;
        // (A kept connector counts: `kept` tells the filter the request is not empty.)
        assert_eq!(
            govern_as(Dialect::OpenaiResponses, plain),
            Outcome::default()
        );
        assert_eq!(govern_as(Dialect::Gemini, plain), Outcome::default());
    }
}
