//! Amazon Bedrock Converse (`/model/{id}/converse`, `/converse-stream`):
//! `toolConfig.tools[].toolSpec` with `inputSchema.json`, `toolConfig.toolChoice`.

use crate::dialects::schema::{Member, Text, tool_text};
use crate::dialects::{Choice, Entry, Problem, Request};
use crate::dialects::shared::note::{self, Answer, Turn};
use crate::dialects::shared::{History, asked, role_text, user_text};
use crate::json::Str;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::ops::Range;

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow, default, rename = "toolConfig")]
    tool_config: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "toolUse")]
    tool_use: Option<Named<'a>>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    /// A `toolUse` block's arguments.
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolConfig<'a> {
    #[serde(borrow, default, rename = "toolChoice")]
    tool_choice: Option<ToolChoice<'a>>,
}

/// `{"auto":{}}`, `{"any":{}}` or `{"tool":{"name"}}`.
#[derive(Deserialize)]
struct ToolChoice<'a> {
    #[serde(borrow, default)]
    tool: Option<Named<'a>>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let messages = parsed.messages.ok_or(Problem::BadShape)?;
    let turns = asked(
        &messages,
        |m| user_text(m.role.as_deref(), m.content, &[]),
        |m| role_text("assistant", m.role.as_deref(), m.content, &[]),
    );
    let question = turns.at;
    let mut history = History::new(body);
    for (at, m) in messages.iter().enumerate() {
        if m.role.as_deref() != Some("assistant") {
            continue;
        }
        let blocks = m
            .content
            .and_then(|c| serde_json::from_str::<Vec<Block>>(c.get()).ok());
        for call in blocks.into_iter().flatten().filter_map(|b| b.tool_use) {
            if let Some(name) = &call.name {
                history.call(name, call.input, at, question);
            }
        }
    }
    let mut choice = Choice::default();
    if let Some(raw) = parsed.tool_config {
        let config: ToolConfig = serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?;
        if let Some(tc) = config.tool_choice {
            if let Some(name) = tc.tool.and_then(|t| t.name) {
                choice.name(name);
            }
        }
    }
    Ok(Request {
        query: turns.latest,
        earlier: turns.earlier,
        assistant: turns.assistant,
        choice,
        called: history.called,
        history: history.task,
        latest_calls: history.latest,
        // Bedrock streams by path (`/converse-stream`).
        stream: false,
        native_search: false,
        // The API has no field naming a session: only the configured header does.
        // In the path, not the body: `Codec::model_in_path`.
        model: None,
        session: None,
    })
}

/// The loop guard's note after the result of the latest call of `tool`: a `toolResult`
/// block's `content`, an array of blocks, to which a `{"text"}` block is added.
pub(crate) fn note_result(body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        messages: Vec<Message<'a>>,
    }
    #[derive(Deserialize)]
    struct Block<'a> {
        #[serde(borrow, default, rename = "toolUse")]
        tool_use: Option<Ids<'a>>,
        #[serde(borrow, default, rename = "toolResult")]
        tool_result: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Ids<'a> {
        #[serde(borrow, default)]
        name: Option<Str<'a>>,
        #[serde(borrow, default, rename = "toolUseId")]
        tool_use_id: Option<Str<'a>>,
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    let parsed: Body = serde_json::from_str(body).ok()?;
    let mut turns = Vec::new();
    for m in parsed.messages {
        let blocks = m
            .content
            .and_then(|c| serde_json::from_str::<Vec<Block>>(c.get()).ok());
        let mut calls = Vec::new();
        for block in blocks.into_iter().flatten() {
            if let Some(Ids {
                name: Some(name),
                tool_use_id,
                ..
            }) = block.tool_use
            {
                calls.push((name.into_owned(), tool_use_id.map(|i| i.into_owned())));
            }
            let Some(raw) = block.tool_result else {
                continue;
            };
            let Ok(result) = serde_json::from_str::<Ids>(raw.get()) else {
                continue;
            };
            turns.push(Turn::Result(Answer {
                id: result.tool_use_id.map(|i| i.into_owned()),
                name: None,
                content: result.content,
                holder: raw,
                // Content is a list of blocks: never a string.
                key: None,
                part: |note| json!({"text": note}).to_string(),
            }));
        }
        if !calls.is_empty() {
            turns.push(Turn::Calls(calls));
        }
    }
    note::append(body, &turns, tool, note)
}

/// One entry of `toolConfig.tools`; `None` when it does not parse as an object.
pub(crate) fn entry(text: &str) -> Option<Entry> {
    #[derive(Deserialize)]
    struct Tool<'a> {
        #[serde(borrow, rename = "toolSpec")]
        tool_spec: Option<Spec<'a>>,
    }
    #[derive(Deserialize)]
    struct Spec<'a> {
        #[serde(borrow)]
        name: Option<Str<'a>>,
        #[serde(borrow)]
        description: Option<Text<'a>>,
        #[serde(borrow, rename = "inputSchema")]
        input_schema: Option<Member<'a>>,
    }
    Some(match serde_json::from_str::<Tool>(text).ok()? {
        Tool {
            tool_spec:
                Some(Spec {
                    name: Some(name),
                    description,
                    input_schema,
                }),
        } => {
            let schema = input_schema.as_ref().and_then(|s| s.0.as_ref());
            Entry::Function(tool_text(&name, description.as_ref(), schema).into())
        }
        // cachePoint markers and system tools stay where they are.
        _ => Entry::Builtin,
    })
}

/// The name a built-in tools entry is governed by: a `systemTool`'s name, else the generic
/// reading; a `cachePoint` is none.
pub fn builtin_name(entry: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(entry).ok()?;
    if object.contains_key("cachePoint") {
        return None;
    }
    let system = object
        .get("systemTool")
        .and_then(|t| t.get("name"))
        .and_then(serde_json::Value::as_str);
    match system {
        Some(name) => Some(name.to_owned()),
        None => crate::dialects::shared::builtin_name(entry),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::shared::testing::noted;
        use crate::dialects::bedrock::Bedrock;
        let body = r#"{"messages":[{"role":"user","content":[{"text":"hi"}]},
 {"role":"assistant","content":[{"toolUse":{"toolUseId":"u1","name":"a","input":{}}}]},
 {"role":"user","content":[{"toolResult":{"toolUseId":"u1","content":[{"json":{"t":1}}],"status":"success"}}]},
 {"role":"assistant","content":[{"toolUse":{"toolUseId":"u2","name":"b","input":{}}}]},
 {"role":"user","content":[{"toolResult":{"toolUseId":"u2"}}]}]}"#;
        assert_eq!(
            noted(&Bedrock, body, "a").unwrap(),
            body.replace(r#"{"t":1}}]"#, r#"{"t":1}},{"text":"Stop \"now\"."}]"#)
        );
        // No content: Bedrock takes no string in its place.
        assert_eq!(noted(&Bedrock, body, "b"), None);
    }
    use super::*;
    use crate::dialects::Dialect;

    #[test]
    fn reads_tool_config_inside_body() {
        let body = r#"{"messages":[
            {"role":"user","content":[{"text":"list my s3 buckets"}]},
            {"role":"assistant","content":[{"toolUse":{"toolUseId":"1","name":"list_buckets","input":{}}}]},
            {"role":"user","content":[{"toolResult":{"toolUseId":"1","content":[{"text":"[]"}]}}]}
        ],"toolConfig":{"tools":[{"toolSpec":{"name":"list_buckets","inputSchema":{"json":{"properties":{"region":{}}}}}},{"cachePoint":{"type":"default"}}],
        "toolChoice":{"tool":{"name":"list_buckets"}}}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.query, "list my s3 buckets");
        assert_eq!(r.called, ["list_buckets"]);
        assert_eq!(
            r.choice,
            Choice {
                named: vec!["list_buckets".into()],
            }
        );
        let tools = crate::json::find_path(body, Dialect::Bedrock.tools_path()).unwrap();
        assert!(body[tools.clone()].starts_with("[{\"toolSpec\""));
        let c = Dialect::Bedrock.catalog(&body[tools]).unwrap();
        assert!(matches!(&c.entries[0], Entry::Function(t) if t.params == "region"));
        assert_eq!(c.entries[1], Entry::Builtin);
    }
}
