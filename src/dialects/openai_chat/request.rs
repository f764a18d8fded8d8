//! OpenAI Chat Completions and every server that copies it (Azure OpenAI, vLLM, Ollama,
//! Mistral, LiteLLM, OpenRouter): `tools[].function`, `messages`, `tool_choice`.

use crate::dialects::schema::{Schema, Text, tool_text};
use crate::dialects::{Choice, Entry, Problem, Request};
use crate::dialects::shared::{History, asked, first_text, role_text, user_text};
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
    /// What names the session, in the order it is looked for (see [`Request::session`]).
    #[serde(borrow, default)]
    prompt_cache_key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    user: Option<&'a RawValue>,
    #[serde(borrow, default)]
    safety_identifier: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    /// The deprecated single-call form.
    #[serde(borrow, default)]
    function_call: Option<Named<'a>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<Named<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct Named<'a> {
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    /// A string holding the arguments' JSON.
    #[serde(borrow, default)]
    pub arguments: Option<&'a RawValue>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let messages = parsed.messages.ok_or(Problem::BadShape)?;
    // The latest user message that has text: tool results are role "tool", so an agent loop
    // keeps ranking against the question that started it.
    let turns = asked(
        &messages,
        |m| user_text(m.role.as_deref(), m.content, &["text"]),
        |m| role_text("assistant", m.role.as_deref(), m.content, &["text"]),
    );
    let question = turns.at;
    let mut history = History::new(body);
    for (at, m) in messages.iter().enumerate() {
        let calls = m
            .tool_calls
            .iter()
            .flatten()
            .filter_map(|c| c.function.as_ref());
        for named in calls.chain(m.function_call.as_ref()) {
            if let Some(name) = &named.name {
                history.call(name, named.arguments, at, question);
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
        native_search: false,
        model: parsed.model.map(|m| m.to_string()),
        session: first_text(&[
            parsed.prompt_cache_key,
            parsed.user,
            parsed.safety_identifier,
        ]),
    })
}

/// The loop guard's note after the result of the latest call of `tool`: a `role: "tool"`
/// message's `content` (a string, or an array of text parts). Also Ollama's, whose results
/// name their tool (`tool_name`) rather than a call id.
pub(crate) fn note_result(body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        messages: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        role: Option<Str<'a>>,
        #[serde(borrow, default)]
        tool_calls: Option<Vec<Call<'a>>>,
        #[serde(borrow, default)]
        tool_call_id: Option<Str<'a>>,
        #[serde(borrow, default)]
        tool_name: Option<Str<'a>>,
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(borrow, default)]
        id: Option<Str<'a>>,
        #[serde(borrow, default)]
        function: Option<Named<'a>>,
    }
    let parsed: Body = serde_json::from_str(body).ok()?;
    let mut turns = Vec::new();
    for raw in parsed.messages {
        let Ok(m) = serde_json::from_str::<Message>(raw.get()) else {
            continue;
        };
        match m.role.as_deref() {
            Some("assistant") => {
                let calls = m.tool_calls.into_iter().flatten().filter_map(|c| {
                    let name = c.function?.name?.into_owned();
                    Some((name, c.id.map(Str::into_owned)))
                });
                turns.push(Turn::Calls(calls.collect()));
            }
            Some("tool") => turns.push(Turn::Result(Answer {
                id: m.tool_call_id.map(Str::into_owned),
                name: m.tool_name.map(Str::into_owned),
                content: m.content,
                holder: raw,
                key: Some("content"),
                part: |note| format!(r#"{{"type":"text","text":{}}}"#, Value::from(note)),
            })),
            _ => {}
        }
    }
    note::append(body, &turns, tool, note)
}

/// `"required"`, `{"type":"function","function":{"name"}}`, or
/// `{"type":"allowed_tools","allowed_tools":{"mode","tools":[{"type":"function","function":{"name"}}]}}`.
fn choice(raw: &RawValue) -> Choice {
    #[derive(Deserialize)]
    struct Object<'a> {
        #[serde(borrow, default)]
        function: Option<Named<'a>>,
        #[serde(borrow, default)]
        allowed_tools: Option<Allowed<'a>>,
    }
    #[derive(Deserialize)]
    struct Allowed<'a> {
        #[serde(borrow, default)]
        tools: Vec<AllowedTool<'a>>,
    }
    #[derive(Deserialize)]
    struct AllowedTool<'a> {
        #[serde(borrow, default)]
        function: Option<Named<'a>>,
    }
    let mut out = Choice::default();
    // A mode (`auto`, `required`, `none`) names no tool.
    if serde_json::from_str::<Str>(raw.get()).is_ok() {
        return out;
    }
    let Ok(obj) = serde_json::from_str::<Object>(raw.get()) else {
        return out;
    };
    if let Some(name) = obj.function.and_then(|f| f.name) {
        out.name(name);
    }
    if let Some(allowed) = obj.allowed_tools {
        for name in allowed.tools.into_iter().filter_map(|t| t.function?.name) {
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
        #[serde(borrow, default)]
        function: Option<Function<'a>>,
    }
    #[derive(Deserialize)]
    struct Function<'a> {
        #[serde(borrow)]
        name: Option<Str<'a>>,
        #[serde(borrow)]
        description: Option<Text<'a>>,
        #[serde(borrow)]
        parameters: Option<Schema<'a>>,
    }
    let tool = serde_json::from_str::<Tool>(text).ok()?;
    Some(match (tool.kind.as_deref(), tool.function) {
        (
            None | Some("function"),
            Some(Function {
                name: Some(name),
                description,
                parameters,
            }),
        ) => Entry::Function(tool_text(&name, description.as_ref(), parameters.as_ref()).into()),
        // `custom` tools, and anything newer we do not know: never removed.
        _ => Entry::Builtin,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::shared::testing::noted;
        use crate::dialects::openai_chat::OpenaiChat;
        let body = r#"{"messages":[{"role":"user","content":"hi"},
 {"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"a","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"1","content":"one"},
 {"role":"assistant","tool_calls":[{"id":"2","type":"function","function":{"name":"a","arguments":"{}"}},
   {"id":"3","type":"function","function":{"name":"b","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"3","content":[{"type":"text","text":"three"}] },
 {"role":"tool","tool_call_id":"2","content":"two"}],"tools":[]}"#;
        assert_eq!(
            noted(&OpenaiChat, body, "a").unwrap(),
            body.replace(r#""two""#, r#""two\n\nStop \"now\".""#)
        );
        assert_eq!(
            noted(&OpenaiChat, body, "b").unwrap(),
            body.replace(
                r#""three"}] "#,
                r#""three"},{"type":"text","text":"Stop \"now\"."}] "#
            )
        );
        assert_eq!(noted(&OpenaiChat, body, "c"), None);
        // The latest call has no result yet: none.
        let open = body.replace(r#"{"role":"tool","tool_call_id":"2","content":"two"}"#, r#"{"role":"user","content":"x"}"#);
        assert_eq!(noted(&OpenaiChat, &open, "a"), None);
    }
    use super::*;
    use crate::dialects::Dialect;

    #[test]
    fn reads_query_calls_and_choice() {
        let body = r#"{"model":"m","stream":true,"messages":[
            {"role":"system","content":"be nice"},
            {"role":"user","content":[{"type":"text","text":"weather in Paris?"},{"type":"image_url","image_url":{"url":"x"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"1","content":"sunny"}
        ],"tools":[{"type":"function","function":{"name":"get_weather"}}],
        "tool_choice":{"type":"function","function":{"name":"get_weather"}}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.query, "weather in Paris?");
        assert_eq!(r.called, ["get_weather"]);
        assert_eq!(
            r.choice,
            Choice {
                named: vec!["get_weather".into()],
            }
        );
        assert!(r.stream);
    }

    #[test]
    fn choice_forms() {
        let c = |s: &str| choice(&RawValue::from_string(s.into()).unwrap());
        assert_eq!(c(r#""required""#), Choice::default());
        assert_eq!(c(r#""auto""#), Choice::default());
        let allowed = c(
            r#"{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[
            {"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}}"#,
        );
        assert_eq!(
            allowed,
            Choice {
                named: vec!["a".into(), "b".into()],
            }
        );
    }

    #[test]
    fn missing_messages_is_bad_shape() {
        assert_eq!(parse(r#"{"contents":[]}"#).unwrap_err(), Problem::BadShape);
        assert_eq!(parse("{not json").unwrap_err(), Problem::MalformedJson);
    }

    #[test]
    fn catalog_keeps_non_function_tools_as_builtin() {
        let c = Dialect::OpenaiChat
            .catalog(
                r#"[{"type":"function","function":{"name":"a","description":"A"}},
            {"type":"custom","custom":{"name":"grammar"}},{"type":"function"}]"#,
            )
            .unwrap();
        assert!(matches!(&c.entries[0], Entry::Function(t) if t.name == "a"));
        assert_eq!(c.entries[1], Entry::Builtin);
        assert_eq!(c.entries[2], Entry::Builtin);
    }
}
