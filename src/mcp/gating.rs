//! The `_tool_gating` convention: an MCP server exposes a tool of that name, which is called
//! with the turn's text before the tools are chosen, and answers which of its tools to
//! `exclude` this turn and which one `claim`s the request (the request belongs to it: it goes
//! first, or, for LLM requests with `gating.claim: "answer"`, is called without the model).
//! Tools it does not mention stay.
//!
//! The call: `tools/call` of `_tool_gating` with the text in the first string property of its
//! `inputSchema` (the first required one if any; `query` when the schema names none).
//! The answer: the result's `structuredContent`, or the JSON object in its first text content:
//! `{"exclude": ["name", …], "claim": "name"}`, where `claim` may also be
//! `{"name": "…", "arguments": {…}}`. An error result, or anything else, means no verdict:
//! the gateway goes on as if the server had no gating tool (fail-open).

use crate::config::GatingRule;
use crate::glob::Glob;
use serde::Deserialize;
use serde_json::{Map, Value};

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

/// The arguments of the gating call for `text`, given the gating tool's definition (JSON).
pub fn arguments(tool: &str, text: &str) -> String {
    let property = query_property(tool).unwrap_or_else(|| "query".to_owned());
    let mut args = Map::new();
    args.insert(property, Value::String(text.to_owned()));
    Value::Object(args).to_string()
}

/// The property of the gating tool's `inputSchema` that takes the text.
fn query_property(tool: &str) -> Option<String> {
    let tool: Value = serde_json::from_str(tool).ok()?;
    let schema = tool.get("inputSchema")?;
    let properties = schema.get("properties")?.as_object()?;
    let is_string = |name: &str| {
        properties
            .get(name)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            == Some("string")
    };
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|name| is_string(name));
    required
        .or_else(|| properties.keys().map(String::as_str).find(|n| is_string(n)))
        .map(str::to_owned)
}

#[derive(Deserialize)]
struct CallResult {
    #[serde(default, rename = "isError")]
    is_error: Option<Value>,
    #[serde(default, rename = "structuredContent")]
    structured: Option<Value>,
    #[serde(default)]
    content: Option<Value>,
}

/// The verdict in a `tools/call` result (JSON object text); `None` when there is none.
pub fn verdict(result: &str) -> Option<Verdict> {
    let result: CallResult = serde_json::from_str(result).ok()?;
    if result.is_error.as_ref().and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let from_text = || {
        let first = result
            .content
            .as_ref()?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("text"))?;
        serde_json::from_str::<Value>(first.get("text")?.as_str()?).ok()
    };
    let answer = result
        .structured
        .clone()
        .filter(Value::is_object)
        .or_else(from_text)?;
    let answer = answer.as_object()?;
    let exclude = answer
        .get("exclude")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let claim = match answer.get("claim") {
        Some(Value::String(name)) if !name.is_empty() => Some(Claim {
            name: name.clone(),
            arguments: "{}".to_owned(),
        }),
        Some(Value::Object(claim)) => {
            let name = claim
                .get("name")
                .or_else(|| claim.get("tool"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let arguments = claim
                .get("arguments")
                .filter(|a| a.is_object())
                .map_or_else(|| "{}".to_owned(), Value::to_string);
            name.map(|name| Claim {
                name: name.to_owned(),
                arguments,
            })
        }
        _ => None,
    };
    Some(Verdict { exclude, claim })
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

    #[test]
    fn fills_the_schemas_text_property() {
        let tool = r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"message":{"type":"string"},"user_request":{"type":"string"}},"required":["user_request"]}}"#;
        assert_eq!(arguments(tool, "hi"), r#"{"user_request":"hi"}"#);
        let optional = r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"message":{"type":"string"}}}}"#;
        assert_eq!(arguments(optional, "a\"b"), r#"{"message":"a\"b"}"#);
        for odd in [
            "",
            "[]",
            r#"{"inputSchema":5}"#,
            r#"{"inputSchema":{"properties":[]}}"#,
        ] {
            assert_eq!(arguments(odd, "x"), r#"{"query":"x"}"#, "{odd}");
        }
    }

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

    #[test]
    fn reads_verdicts() {
        let structured =
            r#"{"content":[],"structuredContent":{"exclude":["a","b",3],"claim":"c"}}"#;
        assert_eq!(
            verdict(structured),
            Some(Verdict {
                exclude: vec!["a".into(), "b".into()],
                claim: Some(Claim {
                    name: "c".into(),
                    arguments: "{}".into()
                })
            })
        );
        let text = r#"{"content":[{"type":"image"},{"type":"text","text":"{\"claim\":{\"name\":\"d\",\"arguments\":{\"x\":1}}}"}]}"#;
        let v = verdict(text).unwrap();
        assert_eq!(v.claim.unwrap().arguments, r#"{"x":1}"#);
        assert!(v.exclude.is_empty());
        for none in [
            "",
            "[]",
            r#"{"isError":true,"structuredContent":{"exclude":["a"]}}"#,
            r#"{"content":[{"type":"text","text":"not json"}]}"#,
            r#"{"content":"x"}"#,
            r#"{"structuredContent":[1]}"#,
        ] {
            assert_eq!(verdict(none), None, "{none}");
        }
        let odd =
            verdict(r#"{"structuredContent":{"exclude":"a","claim":{"arguments":{}}}}"#).unwrap();
        assert_eq!(odd, Verdict::default());
        assert_eq!(
            verdict(r#"{"structuredContent":{"claim":""}}"#)
                .unwrap()
                .claim,
            None
        );
    }
}
