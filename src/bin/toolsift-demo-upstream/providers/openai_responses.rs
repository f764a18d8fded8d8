//! OpenAI Responses (`POST …/responses`): <https://platform.openai.com/docs/api-reference/responses>.
//!
//! Answers are stored as OpenAI stores them (`stored.rs`), so that a request continuing one
//! with `previous_response_id` is read as the whole conversation, whichever model answers.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::openai::{OpenAiApi, openai_tools};
use super::shared::{
    Catalog, ErrorShape, RawObject, Rejection, argument_pieces, array, rejection, required_str,
    role, sse_event, text_of, type_of, with_member,
};
use super::{Call, History, PathFacts, Provider, Stream, Turn};
use crate::stored::Responses;

pub(crate) struct OpenAiResponses;

impl Provider for OpenAiResponses {
    fn name(&self) -> &'static str {
        "openai_responses"
    }

    fn recognize(&self, path: &str) -> Option<PathFacts> {
        path.ends_with("/responses").then(PathFacts::default)
    }

    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        openai_tools(request, OpenAiApi::Responses)
    }

    /// The stored conversation `previous_response_id` names, then the request's `input`; every
    /// `function_call_output` must answer a call of it, as OpenAI checks.
    fn resolve(&self, body: &[u8], store: &Responses) -> Option<Result<Value, Rejection>> {
        // Both models inspect the request first, so it is a JSON object.
        let request: Value = serde_json::from_slice(body).unwrap_or_default();
        let resolved = store
            .resolve(&request)
            .and_then(|resolved| self.read_history(&resolved).map(|_| resolved));
        Some(resolved)
    }

    fn keep(&self, resolved: &Value, turn: &Turn, store: &Responses) {
        store.keep(resolved, response_id(turn), &output(turn));
    }

    fn function_tools(&self, request: &Value) -> Vec<String> {
        array(request.get("tools"))
            .iter()
            .filter(|tool| type_of(tool) == Some("function"))
            .filter_map(|tool| tool.get("name")?.as_str())
            .map(str::to_owned)
            .collect()
    }

    /// Each `function_call.call_id` must be answered by a later `function_call_output` with
    /// that `call_id`, and each output must answer an earlier call. `request` is read as
    /// [`Responses::resolve`] returns it: a stored conversation that `previous_response_id`
    /// continues is already in `input`.
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let mut history = History::default();
        let items = match request.get("input") {
            None | Some(Value::Null) => return Ok(history),
            Some(Value::String(text)) => {
                history.user_text = (!text.trim().is_empty()).then(|| text.clone());
                return Ok(history);
            }
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(rejection(
                    "Invalid type for 'input': expected a string or an array.".to_owned(),
                    "input".to_owned(),
                ));
            }
        };
        // Call ids in order, and whether each has been answered.
        let mut calls: Vec<(String, bool)> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let path = format!("input[{index}]");
            let kind = item.get("type").and_then(Value::as_str).unwrap_or_else(|| {
                if item.get("role").is_some() {
                    "message"
                } else {
                    ""
                }
            });
            match kind {
                "message" if role(item) == "user" => {
                    if let Some(text) = text_of(item.get("content"), &["input_text", "text"]) {
                        history.user_text = Some(text);
                    }
                }
                "function_call" => {
                    let id = required_str(item, "call_id", &path)?;
                    calls.push((id.to_owned(), false));
                }
                "function_call_output" => {
                    let id = required_str(item, "call_id", &path)?;
                    match calls
                        .iter_mut()
                        .find(|(call, answered)| call == id && !answered)
                    {
                        Some((_, answered)) => *answered = true,
                        None => {
                            return Err(rejection(
                                format!(
                                    "No tool call found for function call output with call_id {id}."
                                ),
                                "input".to_owned(),
                            ));
                        }
                    }
                    history.tool_results += 1;
                }
                _ => {}
            }
        }
        if let Some((id, _)) = calls.iter().find(|(_, answered)| !answered) {
            return Err(rejection(
                format!("No tool output found for function call {id}."),
                "input".to_owned(),
            ));
        }
        Ok(history)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut answer = response_object(turn, true);
        turn.add_report(&mut answer);
        answer
    }

    /// `response.created` and `.in_progress`, each output item announced, its text or
    /// arguments in deltas and done, then `response.completed` with the whole response; every
    /// event numbered by `sequence_number`, as the SDKs' accumulators need.
    fn stream(&self, turn: &Turn, _query: Option<&str>) -> Stream {
        let mut events = vec![
            json!({ "type": "response.created", "response": response_object(turn, false) }),
            json!({ "type": "response.in_progress", "response": response_object(turn, false) }),
        ];
        let mut output_index = 0_usize;
        if let Some(text) = &turn.text {
            let item_id = message_id(turn);
            let located = |mut event: Value| {
                with_member(&mut event, "item_id", json!(item_id));
                with_member(&mut event, "output_index", json!(output_index));
                with_member(&mut event, "content_index", json!(0));
                event
            };
            events.push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": message(turn, text, "in_progress"),
            }));
            events.push(located(json!({
                "type": "response.content_part.added",
                "part": { "type": "output_text", "text": "", "annotations": [] },
            })));
            for piece in turn.text_deltas() {
                events.push(located(
                    json!({ "type": "response.output_text.delta", "delta": piece }),
                ));
            }
            events.push(located(
                json!({ "type": "response.output_text.done", "text": text }),
            ));
            events.push(located(json!({
                "type": "response.content_part.done",
                "part": { "type": "output_text", "text": text, "annotations": [] },
            })));
            events.push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": message(turn, text, "completed"),
            }));
            output_index += 1;
        }
        for (index, call) in turn.calls.iter().enumerate() {
            let item_id = turn.id("fc", index);
            events.push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": function_call(turn, index, call, false),
            }));
            let arguments = call.arguments_text();
            for piece in argument_pieces(&arguments) {
                events.push(json!({
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": output_index,
                    "delta": piece,
                }));
            }
            events.push(json!({
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": output_index,
                "name": call.name,
                "arguments": arguments,
            }));
            events.push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": function_call(turn, index, call, true),
            }));
            output_index += 1;
        }
        events
            .push(json!({ "type": "response.completed", "response": response_object(turn, true) }));
        if let Some(first) = events.first_mut() {
            turn.add_report(first);
        }
        let frames = events
            .into_iter()
            .zip(0_u64..)
            .map(|(mut event, sequence_number)| {
                with_member(&mut event, "sequence_number", json!(sequence_number));
                let name = event
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                sse_event(Some(&name), &event)
            })
            .collect();
        Stream::sse(frames)
    }

    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape {
        super::openai::error_shape(status, rejection)
    }
}

fn response_id(turn: &Turn) -> String {
    format!("resp_demo{}", turn.sequence)
}

fn message_id(turn: &Turn) -> String {
    format!("msg_demo{}", turn.sequence)
}

fn message(turn: &Turn, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{ "type": "output_text", "text": text, "annotations": [] }])
    } else {
        json!([])
    };
    json!({
        "id": message_id(turn),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

fn function_call(turn: &Turn, index: usize, call: &Call, done: bool) -> Value {
    json!({
        "type": "function_call",
        "id": turn.id("fc", index),
        "call_id": turn.id("call", index),
        "name": call.name,
        "arguments": if done { call.arguments_text() } else { String::new() },
        "status": if done { "completed" } else { "in_progress" },
    })
}

/// The output items of the completed response: the message, then the calls.
fn output(turn: &Turn) -> Vec<Value> {
    let mut output = Vec::new();
    if let Some(text) = &turn.text {
        output.push(message(turn, text, "completed"));
    }
    for (index, call) in turn.calls.iter().enumerate() {
        output.push(function_call(turn, index, call, true));
    }
    output
}

/// The `response` object: whole and completed when `done`, else in progress and empty.
fn response_object(turn: &Turn, done: bool) -> Value {
    let (output, usage) = if done {
        let usage = json!({
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "total_tokens": turn.total_tokens(),
        });
        (output(turn), usage)
    } else {
        (Vec::new(), Value::Null)
    };
    json!({
        "id": response_id(turn),
        "object": "response",
        "created_at": turn.created,
        "status": if done { "completed" } else { "in_progress" },
        "model": turn.model,
        "output": output,
        "usage": usage,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn tools_hosted_and_named() {
        let body = r#"{
            "model": "gpt-4.1",
            "input": "hi",
            "tools": [
                {"type": "function", "name": "get_weather", "parameters": {}},
                {"type": "web_search"},
                {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]}
            ],
            "tool_choice": {"type": "function", "name": "get_weather"}
        }"#;
        assert_eq!(
            tools(RESPONSES, body),
            Ok(names(&["get_weather", "web_search", "mcp", "file_search"]))
        );
        // Responses accepts an empty tools array.
        assert_eq!(
            tools(RESPONSES, r#"{"input": "hi", "tools": []}"#),
            Ok(vec![])
        );
        // A hosted-tool choice is not checked.
        assert_eq!(
            tools(
                RESPONSES,
                r#"{"tools": [], "tool_choice": {"type": "web_search_preview"}}"#
            ),
            Ok(vec![])
        );

        let unknown = r#"{"tools": [{"type": "function", "name": "a"}], "tool_choice": {"type": "function", "name": "b"}}"#;
        assert!(rejection_message(RESPONSES, unknown).contains("no tool named 'b'"));
        let unnamed = r#"{"tools": [{"type": "function", "parameters": {}}]}"#;
        assert!(rejection_message(RESPONSES, unnamed).contains("'tools[0].name'"));
        let duplicate =
            r#"{"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]}"#;
        assert!(rejection_message(RESPONSES, duplicate).contains("duplicate tool name 'a'"));
        let allowed = r#"{"tools": [{"type": "function", "name": "a"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "z"}]}}"#;
        assert!(rejection_message(RESPONSES, allowed).contains("no tool named 'z'"));
    }

    #[test]
    fn history_pairs_call_ids() {
        let history = |request: &Value| OpenAiResponses.read_history(request);
        let call = |id: &str| json!({ "type": "function_call", "call_id": id, "name": "f", "arguments": "{}" });
        let output =
            |id: &str| json!({ "type": "function_call_output", "call_id": id, "output": "ok" });
        let user =
            json!({ "role": "user", "content": [{ "type": "input_text", "text": "find it" }] });
        let ok = json!({ "input": [user, call("a"), call("b"), output("a"), output("b")] });
        assert_eq!(
            history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("find it".to_owned()),
            })
        );
        let missing = json!({ "input": [user, call("a"), call("b"), output("a")] });
        assert!(
            history(&missing)
                .unwrap_err()
                .message
                .contains("function call b")
        );
        let stray = json!({ "input": [user, call("a"), output("a"), output("z")] });
        assert!(history(&stray).unwrap_err().message.contains("call_id z"));
        let early = json!({ "input": [user, output("a"), call("a")] });
        assert!(history(&early).is_err());
        // A call only a stored response holds is checked once the store resolved the request.
        let orphan = json!({ "input": [output("a")] });
        assert!(history(&orphan).is_err());
        let text = json!({ "input": "just text" });
        assert_eq!(
            history(&text).unwrap().user_text.as_deref(),
            Some("just text")
        );
    }
}
