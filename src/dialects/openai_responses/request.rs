//! OpenAI Responses: flat `{"type":"function","name",…}` tools, `input` as a string or a list
//! of items, `tool_choice`.

use crate::dialects::schema::{Schema, Text, tool_text};
use crate::access::connector::Connector;
use crate::dialects::shared::splice::set_path_member;
use crate::dialects::shared::{
    array_at, entry_type, may_mention, names, object, set_nested_member, url_host,
};
use crate::dialects::{Choice, Entry, Held, Holder, Problem, Request};
use crate::dialects::shared::{Asked, History, asked, content_text, first_text};
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
    input: Option<&'a RawValue>,
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

/// One input item: a message (`type` "message" or absent), a `function_call`, a
/// `function_call_output`, or something we skip.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    /// A `function_call`'s arguments: a string holding JSON.
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let input = parsed.input.ok_or(Problem::BadShape)?;
    let mut history = History::new(body);
    let mut native_search = false;
    let turns = if let Ok(text) = serde_json::from_str::<Str>(input.get()) {
        Asked {
            at: None,
            latest: text.into_owned(),
            earlier: Vec::new(),
            assistant: None,
        }
    } else {
        let items: Vec<Item> = serde_json::from_str(input.get()).map_err(|e| Problem::of(&e))?;
        let message_text = |i: &Item, role: &str, types: &[&str]| {
            let message = matches!(i.kind.as_deref(), None | Some("message"));
            (message && i.role.as_deref() == Some(role))
                .then(|| i.content.map(|c| content_text(c, types)))
                .flatten()
        };
        let turns = asked(
            &items,
            |i| message_text(i, "user", &["input_text"]),
            |i| message_text(i, "assistant", &["output_text", "input_text"]),
        );
        let question = turns.at;
        // One turn's calls are consecutive items: a turn is known by its first call's index.
        let mut turn = 0;
        for (at, item) in items.iter().enumerate() {
            if item.kind.as_deref() != Some("function_call") {
                turn = at + 1;
                continue;
            }
            if let Some(name) = &item.name {
                history.call(name, item.arguments, turn, question);
            }
        }
        // The provider's tool search loaded tools in this conversation.
        native_search = items.iter().any(|i| {
            matches!(
                i.kind.as_deref(),
                Some("tool_search_call" | "tool_search_output")
            )
        });
        turns
    };
    Ok(Request {
        query: turns.latest,
        earlier: turns.earlier,
        assistant: turns.assistant,
        choice: parsed.tool_choice.map(choice).unwrap_or_default(),
        called: history.called,
        history: history.task,
        latest_calls: history.latest,
        stream: is_true(parsed.stream),
        native_search,
        model: parsed.model.map(|m| m.to_string()),
        session: first_text(&[
            parsed.prompt_cache_key,
            parsed.user,
            parsed.safety_identifier,
        ]),
    })
}

/// The loop guard's note after the result of the latest call of `tool`: a
/// `function_call_output` item's `output` (a string, or an array of `input_text` parts and
/// others). Consecutive `function_call` items are one turn of calls.
pub(crate) fn note_result(body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        input: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Option<Str<'a>>,
        #[serde(borrow, default)]
        name: Option<Str<'a>>,
        #[serde(borrow, default)]
        call_id: Option<Str<'a>>,
        #[serde(borrow, default)]
        output: Option<&'a RawValue>,
    }
    let parsed: Body = serde_json::from_str(body).ok()?;
    let mut turns: Vec<Turn> = Vec::new();
    for raw in parsed.input {
        let Ok(item) = serde_json::from_str::<Call>(raw.get()) else {
            continue;
        };
        let id = item.call_id.map(|id| id.into_owned());
        match (item.kind.as_deref(), item.name) {
            (Some("function_call"), Some(name)) => match turns.last_mut() {
                Some(Turn::Calls(calls)) => calls.push((name.into_owned(), id)),
                _ => turns.push(Turn::Calls(vec![(name.into_owned(), id)])),
            },
            (Some("function_call_output"), _) => turns.push(Turn::Result(Answer {
                id,
                name: None,
                content: item.output,
                holder: raw,
                key: Some("output"),
                part: |note| format!(r#"{{"type":"input_text","text":{}}}"#, Value::from(note)),
            })),
            _ => {}
        }
    }
    note::append(body, &turns, tool, note)
}

/// `"required"`, `{"type":"function","name"}`, or
/// `{"type":"allowed_tools","mode","tools":[{"type":"function","name"}]}`.
fn choice(raw: &RawValue) -> Choice {
    #[derive(Deserialize)]
    struct Object<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Option<Str<'a>>,
        #[serde(borrow, default)]
        name: Option<Str<'a>>,
        #[serde(borrow, default)]
        tools: Vec<Object<'a>>,
    }
    let mut out = Choice::default();
    // A mode (`auto`, `required`, `none`) names no tool.
    if serde_json::from_str::<Str>(raw.get()).is_ok() {
        return out;
    }
    let Ok(obj) = serde_json::from_str::<Object>(raw.get()) else {
        return out;
    };
    match obj.kind.as_deref() {
        Some("function") => {
            if let Some(name) = obj.name {
                out.name(name);
            }
        }
        Some("allowed_tools") => {
            for tool in obj.tools {
                if let (Some("function"), Some(name)) = (tool.kind.as_deref(), tool.name) {
                    out.name(name);
                }
            }
        }
        _ => {}
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
        parameters: Option<Schema<'a>>,
    }
    Some(match serde_json::from_str::<Tool>(text).ok()? {
        Tool {
            kind: Some(kind),
            name: Some(name),
            description,
            parameters,
        } if kind == "function" => {
            Entry::Function(tool_text(&name, description.as_ref(), parameters.as_ref()).into())
        }
        // web_search, file_search, code_interpreter, computer_use, mcp, custom, tool_search…
        _ => Entry::Builtin,
    })
}

/// The entries of the `tools` array that access rules govern one by one: `mcp` tools
/// (remote MCP connectors: `server_label`, `server_url`, `allowed_tools` as a list or as
/// `{"tool_names"}`; an OpenAI connector, `connector_id`, has no URL and goes by its id) and
/// `namespace`s (`name`, and functions in `tools`). Read as providers read objects (a repeated
/// key: the last one); a member of the wrong type names nothing.
pub(crate) fn holders(body: &str) -> Vec<Holder> {
    if !may_mention(body, &["mcp", "namespace"]) {
        return Vec::new();
    }
    let Some(array) = array_at(body, &["tools"]) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    for (i, span) in array.items.iter().enumerate() {
        let Some(text) = body.get(span.clone()) else {
            continue;
        };
        // Only what may be a connector or a namespace is read whole (a `type` written with
        // escapes is read too).
        let maybe = entry_type(text)
            .is_some_and(|t| matches!(t, "\"mcp\"" | "\"namespace\"") || t.contains('\\'));
        if !maybe {
            continue;
        }
        let tool = object(text);
        let member = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or_default();
        match member("type") {
            "mcp" => {
                let tools = tool.get("allowed_tools").and_then(|allowed| match allowed {
                    Value::Object(filter) => names(filter.get("tool_names")?),
                    list => names(list),
                });
                let host = match tool.get("server_url").and_then(Value::as_str) {
                    Some(url) => url_host(url),
                    None => member("connector_id").to_owned(),
                };
                let connector = Connector {
                    label: member("server_label").to_owned(),
                    host,
                    tools,
                };
                entries.push((i, Held::Connector(connector)));
            }
            "namespace" => {
                // What the provider reads: the last `tools` member.
                let Some(functions) = array_at(text, &["tools"]) else {
                    continue;
                };
                let names = functions
                    .items
                    .iter()
                    .map(|r| {
                        let function = object(text.get(r.clone())?);
                        Some(function.get("name")?.as_str()?.to_owned())
                    })
                    .collect();
                let shift = |r: &Range<usize>| r.start + span.start..r.end + span.start;
                let functions = crate::json::ArrayLayout {
                    span: shift(&functions.span),
                    items: functions.items.iter().map(shift).collect(),
                };
                let name = member("name").to_owned();
                entries.push((
                    i,
                    Held::Namespace {
                        name,
                        functions,
                        names,
                    },
                ));
            }
            _ => {}
        }
    }
    if entries.is_empty() {
        return Vec::new();
    }
    vec![Holder { array, entries }]
}

/// An `mcp` tool with only `tools` allowed: `allowed_tools` written as the list, or, when it
/// is a filter object, its `tool_names` (its other members, `read_only`, kept).
pub(crate) fn narrow_connector(entry: &str, tools: &[String]) -> Option<String> {
    let list = serde_json::to_string(tools).ok()?;
    let filter = crate::json::find_path(entry, &["allowed_tools"])
        .and_then(|at| entry.get(at))
        .is_some_and(|v| v.starts_with('{'));
    if filter {
        return set_nested_member(entry, "allowed_tools", "tool_names", &list);
    }
    set_path_member(entry, &[], "allowed_tools", &list)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_latest_turn_is_the_last_run_of_calls() {
        let body = r#"{"input":[{"role":"user","content":"hi"},
 {"type":"function_call","call_id":"1","name":"a","arguments":"{}"},
 {"type":"function_call_output","call_id":"1","output":"x"},
 {"type":"reasoning","summary":[]},
 {"type":"function_call","call_id":"2","name":"b","arguments":"{}"},
 {"type":"function_call","call_id":"3","name":"c","arguments":"{}"},
 {"type":"function_call_output","call_id":"2","output":"x"},
 {"type":"function_call_output","call_id":"3","output":"x"}]}"#;
        assert_eq!(parse(body).unwrap().latest_calls, ["b", "c"]);
    }

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::shared::testing::noted;
        use crate::dialects::openai_responses::OpenaiResponses;
        let body = r#"{"input":[{"role":"user","content":"hi"},
 {"type":"function_call","call_id":"c1","name":"a","arguments":"{}"},
 {"type":"function_call_output","call_id":"c1","output":"one"},
 {"type":"function_call","call_id":"c2","name":"a","arguments":"{}"},
 {"type":"function_call","call_id":"c3","name":"b","arguments":"{}"},
 {"type":"function_call_output","call_id":"c3","output":[]},
 {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}]}"#;
        assert_eq!(
            noted(&OpenaiResponses, body, "a").unwrap(),
            body.replace(
                r#""two"}]"#,
                r#""two"},{"type":"input_text","text":"Stop \"now\"."}]"#
            )
        );
        assert_eq!(
            noted(&OpenaiResponses, body, "b").unwrap(),
            body.replace(
                r#""output":[]"#,
                r#""output":[{"type":"input_text","text":"Stop \"now\"."}]"#
            )
        );
        assert_eq!(noted(&OpenaiResponses, r#"{"input":"hi"}"#, "a"), None);
    }
    use super::*;
    use crate::dialects::Dialect;

    #[test]
    fn string_input_is_the_query() {
        let r = parse(r#"{"model":"m","input":"find flights","tools":[]}"#).unwrap();
        assert_eq!(r.query, "find flights");
        assert!(r.called.is_empty());
    }

    #[test]
    fn item_input_reads_latest_user_text_and_calls() {
        let body = r#"{"input":[
            {"role":"user","content":"first question"},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"book a hotel"},{"type":"input_image","image_url":"x"}]},
            {"type":"function_call","call_id":"c1","name":"search_hotels","arguments":"{}"},
            {"type":"function_call_output","call_id":"c1","output":"[]"}
        ],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"a"}]}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.query, "book a hotel");
        assert_eq!(r.called, ["search_hotels"]);
        assert_eq!(
            r.choice,
            Choice {
                named: vec!["a".into()],
            }
        );
    }

    #[test]
    fn catalog_reads_flat_functions() {
        let c = Dialect::OpenaiResponses.catalog(r#"[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}]"#).unwrap();
        assert!(matches!(&c.entries[0], Entry::Function(t) if t.name == "f"));
        assert_eq!(c.entries[1], Entry::Builtin);
    }
}
