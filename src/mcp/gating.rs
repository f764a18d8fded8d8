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

use serde::Deserialize;
use serde_json::{Map, Value};

// What a verdict is, and how two merge, is the core's (`gating.rules` give verdicts too).
pub use crate::gating::{Claim, Verdict, merge};

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
