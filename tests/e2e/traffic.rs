//! Requests of every dialect with the 80-tool fixture catalog, and the check that what the
//! upstream received is what was sent with only the tools array cut: the demo upstream echoes
//! the body it received (`x-demo-echo: body`), which must be the sent bytes before and after
//! the tools array, and in between the kept tools' original bytes, in catalog order, exactly as
//! many as `x-toolsift` says were kept. The check reads nothing with the filter's code.

use serde_json::Value;

use crate::common::tools_for;
use crate::http::Response;

pub const DIALECTS: [&str; 5] = [
    "openai_chat",
    "openai_responses",
    "anthropic",
    "gemini",
    "bedrock",
];

/// One request body, built from known pieces so the check knows where the tools are.
pub struct Request {
    pub dialect: &'static str,
    pub path: &'static str,
    /// The body up to the tools array, the tools (each serialised alone), and the rest.
    prefix: String,
    tools: Vec<String>,
    names: Vec<String>,
    suffix: String,
}

impl Request {
    pub fn new(dialect: &'static str, question: &str, stream: bool) -> Request {
        let q = serde_json::to_string(question).unwrap();
        let s = if stream { r#""stream":true,"# } else { "" };
        let (path, prefix, suffix) = match dialect {
            "openai_chat" => (
                "/v1/chat/completions",
                format!(
                    r#"{{"model":"gpt-4.1-mini",{s}"messages":[{{"role":"user","content":{q}}}],"tools":"#
                ),
                r#","temperature":0}"#.to_owned(),
            ),
            "openai_responses" => (
                "/v1/responses",
                format!(
                    r#"{{"model":"gpt-4.1-mini",{s}"input":[{{"role":"user","content":{q}}}],"tools":"#
                ),
                r#","store":false}"#.to_owned(),
            ),
            "anthropic" => (
                "/v1/messages",
                format!(
                    r#"{{"model":"claude-sonnet-4-5","max_tokens":1024,{s}"messages":[{{"role":"user","content":{q}}}],"tools":"#
                ),
                "}".to_owned(),
            ),
            "gemini" => (
                "/v1beta/models/gemini-2.5-flash:generateContent",
                format!(
                    r#"{{"contents":[{{"role":"user","parts":[{{"text":{q}}}]}}],"tools":[{{"functionDeclarations":"#
                ),
                r#"}],"generationConfig":{"temperature":0}}"#.to_owned(),
            ),
            "bedrock" => (
                "/model/anthropic.claude-sonnet-4-5/converse",
                format!(
                    r#"{{"messages":[{{"role":"user","content":[{{"text":{q}}}]}}],"toolConfig":{{"tools":"#
                ),
                r#"},"inferenceConfig":{"maxTokens":512}}"#.to_owned(),
            ),
            other => panic!("unknown dialect {other}"),
        };
        let catalog = tools_for(dialect);
        let tools: Vec<Value> = match dialect {
            "gemini" => catalog[0]["functionDeclarations"]
                .as_array()
                .unwrap()
                .clone(),
            _ => catalog.as_array().unwrap().clone(),
        };
        let names = tools
            .iter()
            .map(|t| {
                let name = match dialect {
                    "openai_chat" => &t["function"]["name"],
                    "bedrock" => &t["toolSpec"]["name"],
                    _ => &t["name"],
                };
                name.as_str().unwrap().to_owned()
            })
            .collect();
        Request {
            dialect,
            path,
            prefix,
            tools: tools
                .iter()
                .map(|t| serde_json::to_string(t).unwrap())
                .collect(),
            names,
            suffix,
        }
    }

    pub fn body(&self) -> Vec<u8> {
        format!("{}[{}]{}", self.prefix, self.tools.join(","), self.suffix).into_bytes()
    }

    pub fn tool_count(&self) -> usize {
        self.tools.len()
    }

    /// Checks an answer to this request sent with `x-demo-echo: body`: `Ok(kept names)` if the
    /// upstream received exactly the sent body with `top_k` tools kept, else what differs.
    pub fn check_echo(&self, response: &Response, top_k: usize) -> Result<Vec<String>, String> {
        if response.status != 200 {
            return Err(format!("status {}: {}", response.status, response.text()));
        }
        let header = response
            .header("x-toolsift")
            .ok_or("no x-toolsift header")?;
        let expected_header = format!("kept={top_k} total={}", self.tools.len());
        if !header.starts_with(&expected_header) {
            return Err(format!(
                "x-toolsift: {header} (expected {expected_header}…)"
            ));
        }
        let received = &response.body;
        let middle = received
            .strip_prefix(self.prefix.as_bytes())
            .and_then(|rest| rest.strip_suffix(self.suffix.as_bytes()))
            .ok_or_else(|| {
                format!(
                    "the bytes around the tools array changed: {}",
                    String::from_utf8_lossy(received)
                )
            })?;
        // The kept tools, by the names the upstream saw, must be the catalog's in its order.
        let seen: Vec<&str> = response
            .header("x-demo-tools")
            .ok_or("no x-demo-tools header")?
            .split(',')
            .collect();
        let kept: Vec<usize> = (0..self.tools.len())
            .filter(|&i| seen.contains(&self.names[i].as_str()))
            .collect();
        if kept.len() != top_k || seen.len() != top_k {
            return Err(format!(
                "the upstream saw {} tools ({seen:?}), {} of them from the catalog",
                seen.len(),
                kept.len()
            ));
        }
        let expected = format!(
            "[{}]",
            kept.iter()
                .map(|&i| self.tools[i].as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        if middle != expected.as_bytes() {
            return Err(format!(
                "the kept tools' bytes differ from the catalog's:\n got {}\nwant {expected}",
                String::from_utf8_lossy(middle)
            ));
        }
        Ok(kept.iter().map(|&i| self.names[i].clone()).collect())
    }
}
