//! Google Gemini (`…:generateContent`, `…:streamGenerateContent`): `tools[].functionDeclarations`
//! (or `function_declarations`), `contents[].parts`,
//! `toolConfig.functionCallingConfig.allowedFunctionNames`. The REST API accepts both camelCase
//! and snake_case field names, so both are read.

use crate::dialects::schema::{Schema, Text, tool_text};
use crate::dialects::{Choice, Entry, Group, Item, Layout, Problem, Request};
use crate::dialects::shared::note::{self, Answer, Turn};
use crate::dialects::shared::{History, asked};
use crate::json::{Str, is_true};
use crate::json::ArrayLayout;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::ops::Range;

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow, default)]
    contents: Option<Vec<Content<'a>>>,
    #[serde(borrow, default, alias = "tool_config")]
    #[serde(rename = "toolConfig")]
    tool_config: Option<ToolConfig<'a>>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    parts: Vec<Part<'a>>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    /// A part of the model's thinking (`"thought": true`), not what it said to the user.
    #[serde(borrow, default)]
    thought: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "functionCall", alias = "function_call")]
    function_call: Option<Named<'a>>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolConfig<'a> {
    #[serde(
        borrow,
        default,
        rename = "functionCallingConfig",
        alias = "function_calling_config"
    )]
    function_calling_config: Option<CallingConfig<'a>>,
}

#[derive(Deserialize)]
struct CallingConfig<'a> {
    #[serde(
        borrow,
        default,
        rename = "allowedFunctionNames",
        alias = "allowed_function_names"
    )]
    allowed_function_names: Vec<Str<'a>>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let contents = parsed.contents.ok_or(Problem::BadShape)?;
    // Single-turn requests may omit the role; function responses come back as parts without
    // text, so the latest content with text is the user's question.
    let text = |c: &Content| {
        let texts: Vec<&str> = c
            .parts
            .iter()
            .filter(|p| !is_true(p.thought))
            .filter_map(|p| p.text.as_deref())
            .collect();
        texts.join("\n")
    };
    let turns = asked(
        &contents,
        |c| matches!(c.role.as_deref(), None | Some("user")).then(|| text(c)),
        |c| (c.role.as_deref() == Some("model")).then(|| text(c)),
    );
    let question = turns.at;
    let mut history = History::new(body);
    for (at, content) in contents.iter().enumerate() {
        for call in content.parts.iter().filter_map(|p| p.function_call.as_ref()) {
            if let Some(name) = &call.name {
                history.call(name, call.args, at, question);
            }
        }
    }
    let mut choice = Choice::default();
    if let Some(cfg) = parsed.tool_config.and_then(|t| t.function_calling_config) {
        for name in cfg.allowed_function_names {
            choice.name(name);
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
        // Gemini streams by path (`:streamGenerateContent`), not by a body field.
        stream: false,
        native_search: false,
        // The API has no field naming a session: only the configured header does.
        // In the path, not the body: `Codec::model_in_path`.
        model: None,
        session: None,
    })
}

/// The loop guard's note after the result of the latest call of `tool`: a `functionResponse`
/// part's `response`, which is an object (a protobuf Struct: any members are accepted).
/// Its `output`, when a string, gets the note after a blank line, as other dialects' text
/// results do; otherwise the note is a member of its own, `guidance`, which the model reads
/// with the rest of the object (a response holding a `guidance` already gets none). A part
/// of text beside the function responses would be another choice, but the API wants a
/// function response turn to hold only the responses to the calls.
pub(crate) fn note_result(body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        contents: Vec<Content<'a>>,
    }
    #[derive(Deserialize)]
    struct Content<'a> {
        #[serde(borrow, default)]
        parts: Vec<Part<'a>>,
    }
    #[derive(Deserialize)]
    struct Part<'a> {
        #[serde(borrow, default, rename = "functionCall", alias = "function_call")]
        function_call: Option<Called<'a>>,
        #[serde(borrow, default, rename = "functionResponse", alias = "function_response")]
        function_response: Option<Called<'a>>,
    }
    #[derive(Deserialize)]
    struct Called<'a> {
        #[serde(borrow, default)]
        name: Option<Str<'a>>,
        #[serde(borrow, default)]
        id: Option<Str<'a>>,
        #[serde(borrow, default)]
        response: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Response<'a> {
        #[serde(borrow, default)]
        output: Option<&'a RawValue>,
    }
    let parsed: Body = serde_json::from_str(body).ok()?;
    let mut turns = Vec::new();
    for content in parsed.contents {
        let mut calls = Vec::new();
        for part in content.parts {
            if let Some(call) = part.function_call {
                if let Some(name) = call.name {
                    calls.push((name.into_owned(), call.id.map(|i| i.into_owned())));
                }
            }
            let Some(answer) = part.function_response else {
                continue;
            };
            let Some(response) = answer.response.filter(|r| r.get().starts_with('{')) else {
                continue;
            };
            let output = serde_json::from_str::<Response>(response.get())
                .ok()
                .and_then(|r| r.output)
                .filter(|o| o.get().starts_with('"'));
            turns.push(Turn::Result(Answer {
                id: answer.id.map(|i| i.into_owned()),
                name: answer.name.map(|n| n.into_owned()),
                content: output,
                holder: response,
                key: Some("guidance"),
                part: |note| json!({"text": note}).to_string(),
            }));
        }
        if !calls.is_empty() {
            turns.push(Turn::Calls(calls));
        }
    }
    note::append(body, &turns, tool, note)
}

/// The Tool objects of a Gemini `tools` array and the function declarations in them: each
/// declaration is an entry, and so is each Tool object without declarations (`googleSearch`,
/// `codeExecution`, …: a built-in).
pub(crate) fn split(container: &str) -> Result<(Vec<Item<'_>>, Layout), Problem> {
    let tools: Vec<&RawValue> = serde_json::from_str(container).map_err(|_| Problem::BadShape)?;
    let outer = ArrayLayout::of(container, container, &tools).ok_or(Problem::BadShape)?;
    let mut items = Vec::new();
    let mut groups = Vec::with_capacity(tools.len());
    for tool in tools {
        let fields: BTreeMap<Str, &RawValue> =
            serde_json::from_str(tool.get()).map_err(|_| Problem::BadShape)?;
        let declarations = fields
            .get("functionDeclarations")
            .or_else(|| fields.get("function_declarations"));
        let Some(declarations) = declarations else {
            // googleSearch, codeExecution, urlContext, retrieval, …
            items.push(Item {
                text: tool.get(),
                builtin: true,
            });
            groups.push(None);
            continue;
        };
        let declared = crate::json::array_items(declarations).ok_or(Problem::BadShape)?;
        let inner =
            ArrayLayout::of(tool.get(), declarations.get(), &declared).ok_or(Problem::BadShape)?;
        groups.push(Some(Group {
            inner,
            first_entry: items.len(),
            only_declarations: fields.len() == 1,
        }));
        items.extend(declared.into_iter().map(|d| Item {
            text: d.get(),
            builtin: false,
        }));
    }
    Ok((items, Layout::Grouped { outer, groups }))
}

/// One function declaration; `None` when it does not parse as an object.
pub(crate) fn entry(text: &str) -> Option<Entry> {
    #[derive(Deserialize)]
    struct Declaration<'a> {
        #[serde(borrow)]
        name: Option<Str<'a>>,
        #[serde(borrow)]
        description: Option<Text<'a>>,
        #[serde(borrow)]
        parameters: Option<Schema<'a>>,
        #[serde(
            borrow,
            rename = "parametersJsonSchema",
            alias = "parameters_json_schema"
        )]
        parameters_json_schema: Option<Schema<'a>>,
    }
    Some(match serde_json::from_str::<Declaration>(text).ok()? {
        Declaration {
            name: Some(name),
            description,
            parameters,
            parameters_json_schema,
        } => {
            let schema = parameters.as_ref().or(parameters_json_schema.as_ref());
            Entry::Function(tool_text(&name, description.as_ref(), schema).into())
        }
        _ => Entry::Builtin,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::shared::testing::noted;
        use crate::dialects::gemini::Gemini;
        let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]},
 {"role":"model","parts":[{"functionCall":{"name":"a","args":{}}},{"functionCall":{"name":"b","args":{}}}]},
 {"role":"user","parts":[{"functionResponse":{"name":"a","response":{"output":"one"}}},
   {"functionResponse":{"name":"b","response":{"temperature":20}}}]}]}"#;
        assert_eq!(
            noted(&Gemini, body, "a").unwrap(),
            body.replace(r#""one""#, r#""one\n\nStop \"now\".""#)
        );
        assert_eq!(
            noted(&Gemini, body, "b").unwrap(),
            body.replace(
                r#""temperature":20}"#,
                r#""temperature":20,"guidance":"Stop \"now\"."}"#
            )
        );
        // A response that has a `guidance` of its own keeps it, and gets no note.
        let own = body.replace(r#""temperature":20"#, r#""guidance":"mine""#);
        assert_eq!(noted(&Gemini, &own, "b"), None);
    }
    use super::*;
    use crate::dialects::Dialect;

    #[test]
    fn reads_contents_calls_and_config() {
        let body = r#"{"contents":[
            {"role":"user","parts":[{"text":"what is the weather"},{"inlineData":{"mimeType":"image/png","data":""}}]},
            {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{}}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{}}}]}
        ],"tools":[{"functionDeclarations":[{"name":"get_weather"}]}],
        "tool_config":{"function_calling_config":{"mode":"ANY","allowed_function_names":["get_weather"]}}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.query, "what is the weather");
        assert_eq!(r.called, ["get_weather"]);
        assert_eq!(
            r.choice,
            Choice {
                named: vec!["get_weather".into()],
            }
        );
    }

    #[test]
    fn catalog_groups_declarations_and_keeps_builtins() {
        let c = Dialect::Gemini.catalog(r#"[{"googleSearch":{}},{"function_declarations":[{"name":"a","parametersJsonSchema":{"properties":{"q":{}}}},{"name":"b"}]}]"#).unwrap();
        assert_eq!(c.entries.len(), 3);
        assert_eq!(c.entries[0], Entry::Builtin);
        assert!(matches!(&c.entries[1], Entry::Function(t) if t.name == "a" && t.params == "q"));
        let Layout::Grouped { groups, .. } = &c.layout else {
            panic!("grouped")
        };
        assert!(groups[0].is_none());
        let g = groups[1].as_ref().unwrap();
        assert_eq!((g.first_entry, g.only_declarations), (1, true));
    }
}
