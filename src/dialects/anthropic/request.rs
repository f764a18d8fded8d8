//! Anthropic Messages: `tools[]` with `input_schema`, content blocks, `tool_choice`
//! `{type:"tool",name}`.

use crate::dialects::schema::{Schema, Text, tool_text};
use crate::access::connector::Connector;
use crate::dialects::{Choice, Entry, Held, Holder, Problem, Request};
use crate::dialects::shared::{History, asked, first_text, role_text, user_text};
use crate::dialects::shared::{
    array_at, entry_type, may_mention, names, object, set_nested_member, url_host,
};
use crate::dialects::shared::note::{self, Answer, Turn};
use crate::json::{Str, is_true};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::ops::Range;

#[derive(Deserialize)]
struct Body<'a> {
    /// The model, for OpenTelemetry's `gen_ai.request.model` ([`crate::gen_ai`]).
    #[serde(borrow, default)]
    model: Option<Str<'a>>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow, default)]
    tool_choice: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    /// `metadata.user_id`: the session (see [`Request::session`]).
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

/// `metadata`: Anthropic's only field that says who or which session a request is for.
#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow, default)]
    user_id: Option<&'a RawValue>,
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
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    /// A `tool_use` block's arguments.
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    /// A `tool_result` block's content: a string, or blocks (`tool_reference` among them).
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let messages = parsed.messages.ok_or(Problem::BadShape)?;
    // Tool results travel in user messages as `tool_result` blocks, which carry no query text:
    // the latest user message with text is the question the agent loop is answering.
    let turns = asked(
        &messages,
        |m| user_text(m.role.as_deref(), m.content, &["text"]),
        |m| role_text("assistant", m.role.as_deref(), m.content, &["text"]),
    );
    let question = turns.at;
    let mut history = History::new(body);
    for (at, m) in messages.iter().enumerate() {
        if m.role.as_deref() != Some("assistant") {
            continue;
        }
        let Some(blocks) = m
            .content
            .and_then(|c| serde_json::from_str::<Vec<Block>>(c.get()).ok())
        else {
            continue;
        };
        for block in blocks {
            if let (Some("tool_use"), Some(name)) = (block.kind.as_deref(), &block.name) {
                history.call(name, block.input, at, question);
            }
        }
    }
    Ok(Request {
        query: turns.latest,
        earlier: turns.earlier,
        assistant: turns.assistant,
        choice: parsed.tool_choice.map(choice).unwrap_or_default(),
        called: history.called,
        history: history.task,
        latest_calls: history.latest,
        stream: is_true(parsed.stream),
        native_search: body.contains("\"tool_reference\"") && searched(&messages),
        model: parsed.model.map(|m| m.to_string()),
        session: parsed
            .metadata
            .and_then(crate::json::parse::<Metadata>)
            .and_then(|m| first_text(&[m.user_id])),
    })
}

/// The provider's tool search has loaded tools in this conversation: a `tool_reference` block,
/// in a `tool_result` (a client's own search) or a `tool_search_tool_result` (the server's).
/// The model may call what they name, so every tool they name must stay in the request.
fn searched(messages: &[Message]) -> bool {
    fn blocks<'a>(raw: Option<&'a RawValue>) -> Vec<Block<'a>> {
        raw.and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or_default()
    }
    let is = |b: &Block, kind: &str| b.kind.as_deref() == Some(kind);
    messages.iter().any(|m| {
        blocks(m.content).iter().any(|b| {
            is(b, "tool_search_tool_result")
                || (is(b, "tool_result") && blocks(b.content).iter().any(|r| is(r, "tool_reference")))
        })
    })
}

/// The loop guard's note after the result of the latest call of `tool`: a `tool_result`
/// block's `content` (a string, an array of blocks, or absent).
pub(crate) fn note_result(body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        messages: Vec<Message<'a>>,
    }
    #[derive(Deserialize)]
    struct Ids<'a> {
        #[serde(borrow, default)]
        id: Option<Str<'a>>,
        #[serde(borrow, default)]
        tool_use_id: Option<Str<'a>>,
    }
    let parsed: Body = serde_json::from_str(body).ok()?;
    let mut turns = Vec::new();
    for m in parsed.messages {
        let Some(blocks) = m
            .content
            .and_then(|c| serde_json::from_str::<Vec<&RawValue>>(c.get()).ok())
        else {
            continue;
        };
        let mut calls = Vec::new();
        for raw in blocks {
            let (Ok(block), Ok(ids)) = (
                serde_json::from_str::<Block>(raw.get()),
                serde_json::from_str::<Ids>(raw.get()),
            ) else {
                continue;
            };
            match (block.kind.as_deref(), m.role.as_deref()) {
                (Some("tool_use"), Some("assistant")) => {
                    if let Some(name) = block.name {
                        calls.push((name.into_owned(), ids.id.map(|i| i.into_owned())));
                    }
                }
                (Some("tool_result"), Some("user")) => turns.push(Turn::Result(Answer {
                    id: ids.tool_use_id.map(|i| i.into_owned()),
                    name: None,
                    content: block.content,
                    holder: raw,
                    key: Some("content"),
                    part: |note| format!(r#"{{"type":"text","text":{}}}"#, Value::from(note)),
                })),
                _ => {}
            }
        }
        if !calls.is_empty() {
            turns.push(Turn::Calls(calls));
        }
    }
    note::append(body, &turns, tool, note)
}

/// `{"type":"any"}` or `{"type":"tool","name"}`.
fn choice(raw: &RawValue) -> Choice {
    let mut out = Choice::default();
    if let Ok(block) = serde_json::from_str::<Block>(raw.get()) {
        if let (Some("tool"), Some(name)) = (block.kind.as_deref(), block.name) {
            out.name(name);
        }
    }
    out
}

/// One entry of the `tools` array; `None` when it does not parse as a tool object.
pub(crate) fn entry(text: &str) -> Option<Entry> {
    #[derive(Deserialize)]
    struct Tool<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Option<Str<'a>>,
        #[serde(borrow)]
        name: Option<Str<'a>>,
        #[serde(borrow)]
        description: Option<Text<'a>>,
        #[serde(borrow)]
        input_schema: Option<Schema<'a>>,
    }
    Some(match serde_json::from_str::<Tool>(text).ok()? {
        // A user-defined tool has no `type`, or `"type": "custom"`.
        Tool {
            kind,
            name: Some(name),
            description,
            input_schema,
        } if matches!(kind.as_deref(), None | Some("custom")) => {
            Entry::Function(tool_text(&name, description.as_ref(), input_schema.as_ref()).into())
        }
        // Server and client built-ins: web_search_20250305, bash_20250124, computer_*,
        // text_editor_*, tool_search_tool_*, mcp_toolset, …
        _ => Entry::Builtin,
    })
}

/// The remote MCP connectors of a body: each `mcp_servers` entry (`{"type":"url","url",
/// "name","tool_configuration":{"allowed_tools"}}`), and the `mcp_toolset` tools that name
/// one (`mcp_server_name`), which leave with it. Read as providers read objects (a repeated
/// key: the last one); an entry of another shape is still a connector, named by what it has
/// (one without a name is `mcp:`).
pub(crate) fn holders(body: &str) -> Vec<Holder> {
    let mut out = Vec::new();
    if !may_mention(body, &["mcp"]) {
        return out;
    }
    if let Some(array) = array_at(body, &["mcp_servers"]) {
        let entries = (0..array.items.len())
            .map(|i| {
                let server = array
                    .items
                    .get(i)
                    .and_then(|r| body.get(r.clone()))
                    .map(object)
                    .unwrap_or_default();
                let text = |key: &str| server.get(key).and_then(Value::as_str).unwrap_or_default();
                let tools = server
                    .get("tool_configuration")
                    .and_then(|c| c.get("allowed_tools"))
                    .and_then(names);
                let connector = Connector {
                    label: text("name").to_owned(),
                    host: url_host(text("url")),
                    tools,
                };
                (i, Held::Connector(connector))
            })
            .collect();
        out.push(Holder { array, entries });
    }
    if let Some(array) = array_at(body, &["tools"]) {
        let entries: Vec<(usize, Held)> = array
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let text = body.get(r.clone())?;
                let maybe = entry_type(text)
                    .is_some_and(|t| t == "\"mcp_toolset\"" || t.contains('\\'));
                if !maybe {
                    return None;
                }
                let tool = object(text);
                let member = |key: &str| tool.get(key).and_then(Value::as_str);
                (member("type") == Some("mcp_toolset")).then(|| {
                    let server = member("mcp_server_name").unwrap_or_default();
                    (i, Held::OfConnector(server.to_owned()))
                })
            })
            .collect();
        if !entries.is_empty() {
            out.push(Holder { array, entries });
        }
    }
    out
}

/// An `mcp_servers` entry with `tool_configuration.allowed_tools` set to `tools`.
pub(crate) fn narrow_connector(entry: &str, tools: &[String]) -> Option<String> {
    let list = serde_json::to_string(tools).ok()?;
    set_nested_member(entry, "tool_configuration", "allowed_tools", &list)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::shared::testing::noted;
        use crate::dialects::anthropic::Anthropic;
        let body = r#"{"messages":[{"role":"user","content":"hi"},
 {"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"a","input":{}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"one"}]},
 {"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"a","input":{}},{"type":"tool_use","id":"t3","name":"b","input":{}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","is_error":true},
   {"type":"tool_result","tool_use_id":"t3","content":[{"type":"text","text":"three"}]}]}]}"#;
        assert_eq!(
            noted(&Anthropic, body, "a").unwrap(),
            body.replace(
                r#""is_error":true}"#,
                r#""is_error":true,"content":"Stop \"now\"."}"#
            )
        );
        assert_eq!(
            noted(&Anthropic, body, "b").unwrap(),
            body.replace(
                r#""three"}]"#,
                r#""three"},{"type":"text","text":"Stop \"now\"."}]"#
            )
        );
    }
    use super::*;
    use crate::dialects::Dialect;

    #[test]
    fn agent_loop_keeps_the_question() {
        let body = r#"{"model":"claude","max_tokens":10,"messages":[
            {"role":"user","content":"create a github issue"},
            {"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"create_issue","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]}
        ],"tool_choice":{"type":"tool","name":"create_issue"}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.query, "create a github issue");
        assert_eq!(r.called, ["create_issue"]);
        assert_eq!(
            r.choice,
            Choice {
                named: vec!["create_issue".into()],
            }
        );
    }

    #[test]
    fn server_tools_are_builtin() {
        let c = Dialect::Anthropic
            .catalog(
                r#"[{"name":"a","input_schema":{"type":"object"}},
            {"type":"web_search_20250305","name":"web_search"},
            {"type":"custom","name":"b","input_schema":{}}]"#,
            )
            .unwrap();
        assert!(matches!(&c.entries[0], Entry::Function(t) if t.name == "a"));
        assert_eq!(c.entries[1], Entry::Builtin);
        assert!(matches!(&c.entries[2], Entry::Function(t) if t.name == "b"));
    }
}
