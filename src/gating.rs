//! What a `_tool_gating` verdict says about one turn (the tools to exclude, the one that
//! claims the request), and `gating.rules`: the operator's own verdicts, without a server.
//! Asking an MCP server for its verdict is [`crate::mcp::gating`]'s; what a verdict does to an
//! LLM request, [`crate::mcp::llm`]'s.

use crate::glob::Glob;
use crate::json::object;
use serde::Deserialize;
use serde_json::Value;

/// What the gating tool said about one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    pub exclude: Vec<String>,
    pub claim: Option<Claim>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub name: String,
    /// The arguments to call it with, as JSON object text (`{}` when the server gave none).
    pub arguments: String,
}

/// One rule of `gating.rules`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = gating_rule_rules))]
pub struct GatingRule {
    /// When the rule applies.
    #[serde(deserialize_with = "object")]
    pub when: GatingWhen,
    /// Tool names or globs the matching text excludes.
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(inner(length(min = 1))))]
    pub exclude: Vec<String>,
    /// The tool the matching text belongs to.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub claim: Option<String>,
    /// The arguments of the claimed call when the gateway answers it (`gating.claim:
    /// "answer"`).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

/// When a gating rule applies: the text holds one of `words` (whole words or phrases, any
/// case), or matches `regex`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = when_rules))]
pub struct GatingWhen {
    /// Whole words or phrases, any case: the text holds one of them.
    #[serde(default)]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(length(min = 1), inner(regex(pattern = r"[\p{Alphabetic}\p{N}]")))
    )]
    pub words: Option<Vec<String>>,
    /// A regular expression the text matches.
    #[serde(default)]
    pub regex: Option<String>,
}

/// A rule excludes, claims, or both; `arguments` go with a claim.
#[cfg(not(target_arch = "wasm32"))]
fn gating_rule_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{add, filled, set};
    use serde_json::json;
    add(
        schema,
        [
            (
                "`arguments` go with `claim`.",
                json!({"if": set("arguments"), "then": set("claim")}),
            ),
            (
                "A rule needs `exclude`, `claim`, or both.",
                json!({"anyOf": [set("claim"), filled("exclude")]}),
            ),
        ],
    );
}

/// A rule's `when` is `words` or `regex`, one of them.
#[cfg(not(target_arch = "wasm32"))]
fn when_rules(schema: &mut schemars::Schema) {
    use crate::json::rules::{one_of, set};
    one_of(
        schema,
        "`words` or `regex`, one of them.",
        vec![set("words"), set("regex")],
    );
}

/// `gating.rules`, compiled: the operator's own `_tool_gating`, with the same effect as a
/// server's answer. Every rule whose `when` matches the text takes part: their exclusions add
/// up (globs, resolved against the request's tool names), and the first claim counts.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    when: Trigger,
    exclude: Vec<Glob>,
    claim: Option<Claim>,
}

#[derive(Debug, Clone)]
enum Trigger {
    /// Normalised phrases (` word word `), found in the normalised text.
    Words(Vec<String>),
    Regex(regex_lite::Regex),
}

/// Text as lower-case words between single spaces, with a space at each end: a phrase is found
/// in it exactly when its words appear in order as whole words.
fn words_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(' ');
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        out.extend(word.chars().flat_map(char::to_lowercase));
        out.push(' ');
    }
    out
}

impl Rules {
    /// Checks and compiles the rules; an error is the field's path below `gating.rules` and why.
    pub fn new(rules: &[GatingRule]) -> Result<Rules, (String, String)> {
        let compiled = rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::new(r).map_err(|(field, why)| (format!("[{i}]{field}"), why)))
            .collect::<Result<_, _>>()?;
        Ok(Rules { rules: compiled })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The verdict for `text` over a request whose tools are `names`; `None` when no rule
    /// matches.
    pub fn verdict<'a>(
        &self,
        text: &str,
        names: impl Iterator<Item = &'a str> + Clone,
    ) -> Option<Verdict> {
        let mut words: Option<String> = None;
        let mut verdict: Option<Verdict> = None;
        for rule in &self.rules {
            let matches = match &rule.when {
                Trigger::Words(phrases) => {
                    let text = words.get_or_insert_with(|| words_of(text));
                    phrases.iter().any(|p| text.contains(p.as_str()))
                }
                Trigger::Regex(regex) => regex.is_match(text),
            };
            if !matches {
                continue;
            }
            let v = verdict.get_or_insert_with(Verdict::default);
            for name in names.clone() {
                if rule.exclude.iter().any(|g| g.matches(name))
                    && !v.exclude.iter().any(|e| e == name)
                {
                    v.exclude.push(name.to_owned());
                }
            }
            if v.claim.is_none() {
                v.claim.clone_from(&rule.claim);
            }
        }
        verdict
    }
}

impl Rule {
    fn new(r: &GatingRule) -> Result<Rule, (String, String)> {
        let when = match (&r.when.words, &r.when.regex) {
            (Some(words), None) => {
                if words.is_empty() {
                    return Err((".when.words".into(), "must list at least one word".into()));
                }
                let mut phrases = Vec::new();
                for (i, w) in words.iter().enumerate() {
                    let phrase = words_of(w);
                    if phrase.trim().is_empty() {
                        return Err((format!(".when.words[{i}]"), "has no word in it".into()));
                    }
                    phrases.push(phrase);
                }
                Trigger::Words(phrases)
            }
            (None, Some(regex)) => Trigger::Regex(
                regex_lite::Regex::new(regex)
                    .map_err(|e| (".when.regex".to_owned(), e.to_string()))?,
            ),
            _ => {
                return Err((
                    ".when".into(),
                    "needs `words` or `regex` (one of them)".into(),
                ));
            }
        };
        let mut exclude = Vec::new();
        for (i, pattern) in r.exclude.iter().enumerate() {
            if pattern.is_empty() {
                return Err((format!(".exclude[{i}]"), "empty pattern".into()));
            }
            exclude.push(Glob::new(pattern));
        }
        let claim = match &r.claim {
            Some(name) if name.trim().is_empty() => {
                return Err((".claim".into(), "must name a tool".into()));
            }
            Some(name) => Some(Claim {
                name: name.clone(),
                arguments: r
                    .arguments
                    .as_ref()
                    .map_or_else(|| "{}".to_owned(), |a| Value::Object(a.clone()).to_string()),
            }),
            None if r.arguments.is_some() => {
                return Err((".arguments".into(), "goes with `claim`".into()));
            }
            None => None,
        };
        if exclude.is_empty() && claim.is_none() {
            return Err((
                ".exclude".into(),
                "a rule needs `exclude`, `claim`, or both".into(),
            ));
        }
        Ok(Rule {
            when,
            exclude,
            claim,
        })
    }
}

/// One verdict from two sources (the configuration's rules first, then a server's): the
/// exclusions of both, the first claim.
pub fn merge(first: Option<Verdict>, second: Option<Verdict>) -> Option<Verdict> {
    match (first, second) {
        (Some(mut a), Some(b)) => {
            for name in b.exclude {
                if !a.exclude.contains(&name) {
                    a.exclude.push(name);
                }
            }
            if a.claim.is_none() {
                a.claim = b.claim;
            }
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(json: &str) -> Rules {
        let rules: Vec<GatingRule> = serde_json::from_str(json).unwrap();
        Rules::new(&rules).unwrap()
    }

    #[test]
    fn rules_exclude_and_claim_like_a_server() {
        let r = rules(
            r#"[{"when":{"words":["invoice","credit note"]},"exclude":["k8s_*","send_email"]},
                {"when":{"regex":"(?i)\\bpod logs?\\b"},"claim":"get_pod_logs","arguments":{"tail":50}},
                {"when":{"words":["logs"]},"claim":"search_logs"}]"#,
        );
        let names = [
            "k8s_get_pods",
            "k8s_delete_pod",
            "send_email",
            "get_pod_logs",
            "invoice_create",
        ];
        let v = r
            .verdict("Create an Invoice for ACME", names.iter().copied())
            .unwrap();
        assert_eq!(v.exclude, ["k8s_get_pods", "k8s_delete_pod", "send_email"]);
        assert!(v.claim.is_none());
        // Phrases are whole words in order; "credit notes" is not "credit note".
        assert!(
            r.verdict("about credit notes", names.iter().copied())
                .is_none()
        );
        assert!(r.verdict("a CREDIT, note", names.iter().copied()).is_some());
        // The first claim wins; arguments come along.
        let v = r
            .verdict("show the Pod logs", names.iter().copied())
            .unwrap();
        let claim = v.claim.unwrap();
        assert_eq!(
            (claim.name.as_str(), claim.arguments.as_str()),
            ("get_pod_logs", r#"{"tail":50}"#)
        );
        assert!(r.verdict("nothing here", names.iter().copied()).is_none());
        // Merged with a server's verdict: both exclusions, the rules' claim first.
        let server = Verdict {
            exclude: vec!["send_email".into(), "x".into()],
            claim: Some(Claim {
                name: "y".into(),
                arguments: "{}".into(),
            }),
        };
        let merged = merge(r.verdict("pod log", names.iter().copied()), Some(server)).unwrap();
        assert_eq!(merged.exclude, ["send_email", "x"]);
        assert_eq!(merged.claim.unwrap().name, "get_pod_logs");
    }

    #[test]
    fn rule_errors_name_the_field() {
        let err = |json: &str| {
            let rules: Vec<GatingRule> = serde_json::from_str(json).unwrap();
            Rules::new(&rules).unwrap_err().0
        };
        assert_eq!(
            err(r#"[{"when":{"regex":"("},"claim":"a"}]"#),
            "[0].when.regex"
        );
        assert_eq!(err(r#"[{"when":{},"claim":"a"}]"#), "[0].when");
        assert_eq!(
            err(r#"[{"when":{"words":["a"],"regex":"b"},"claim":"a"}]"#),
            "[0].when"
        );
        assert_eq!(
            err(r#"[{"when":{"words":[" - "]},"claim":"a"}]"#),
            "[0].when.words[0]"
        );
        assert_eq!(err(r#"[{"when":{"words":["a"]}}]"#), "[0].exclude");
        assert_eq!(
            err(r#"[{"when":{"words":["a"]},"exclude":["x"],"arguments":{}}]"#),
            "[0].arguments"
        );
    }
}
