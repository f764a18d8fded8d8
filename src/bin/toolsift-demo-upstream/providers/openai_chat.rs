//! OpenAI Chat Completions (`POST …/chat/completions`, Azure's deployments included):
//! <https://platform.openai.com/docs/api-reference/chat>.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::openai::{OpenAiApi, openai_tools};
use super::shared::{
    Catalog, ErrorShape, Exchange, RawObject, Rejection, ToolResult, argument_pieces, array,
    conversation, is_true, items, pair_calls, rejection, required_str, role, sse_event, text_of,
    type_of, with_member,
};
use super::{History, PathFacts, Provider, Stream, Turn};

pub(crate) struct OpenAiChat;

impl Provider for OpenAiChat {
    fn name(&self) -> &'static str {
        "openai_chat"
    }

    /// A suffix, so Azure's `/openai/deployments/{d}/chat/completions` and gateway prefixes
    /// match.
    fn recognize(&self, path: &str) -> Option<PathFacts> {
        path.ends_with("/chat/completions").then(PathFacts::default)
    }

    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        openai_tools(request, OpenAiApi::Chat)
    }

    fn include_usage(&self, request: &RawObject<'_>) -> bool {
        request
            .get("stream_options")
            .and_then(|raw| serde_json::from_str::<RawObject<'_>>(raw.get()).ok())
            .is_some_and(|options| is_true(options.get("include_usage")))
    }

    fn function_tools(&self, request: &Value) -> Vec<String> {
        array(request.get("tools"))
            .iter()
            .filter(|tool| type_of(tool) == Some("function"))
            .filter_map(|tool| tool.get("function")?.get("name")?.as_str())
            .map(str::to_owned)
            .collect()
    }

    /// An assistant's `tool_calls[].id` must each be answered by the `role: "tool"` messages
    /// right after it (`tool_call_id`), and a tool message must answer one of them.
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let read = |index: usize, message: &Value| {
            let path = format!("messages[{index}]");
            Ok(match role(message) {
                "tool" => Exchange::Results {
                    results: vec![ToolResult {
                        key: required_str(message, "tool_call_id", &path)?.to_owned(),
                        path: format!("{path}.tool_call_id"),
                    }],
                    more_may_follow: true,
                    text: None,
                },
                "assistant" => {
                    let calls = items(message, "tool_calls").iter().enumerate();
                    let ids = calls.map(|(call_index, call)| {
                        let call_path = format!("{path}.tool_calls[{call_index}]");
                        required_str(call, "id", &call_path).map(str::to_owned)
                    });
                    Exchange::Calls(ids.collect::<Result<_, _>>()?)
                }
                "user" => Exchange::text(text_of(message.get("content"), &["text"])),
                _ => Exchange::text(None),
            })
        };
        let unanswered = |calls_at: usize, pending: &[String]| {
            rejection(
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    pending.join(", ")
                ),
                format!("messages[{calls_at}]"),
            )
        };
        let stray = |path: &str, id: &str| {
            rejection(
                format!(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'; no call of the preceding assistant message has the id '{id}'."
                ),
                path.to_owned(),
            )
        };
        pair_calls(conversation(request, "messages")?, read, unanswered, stray)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut message = json!({ "role": "assistant", "content": turn.text, "refusal": null });
        if turn.has_calls() {
            let calls: Vec<Value> = turn
                .calls
                .iter()
                .enumerate()
                .map(|(index, call)| {
                    json!({
                        "id": turn.id("call", index),
                        "type": "function",
                        "function": { "name": call.name, "arguments": call.arguments_text() },
                    })
                })
                .collect();
            with_member(&mut message, "tool_calls", Value::Array(calls));
        }
        let mut answer = json!({
            "id": completion_id(turn),
            "object": "chat.completion",
            "created": turn.created,
            "model": turn.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason(turn),
            }],
            "usage": usage(turn),
            "system_fingerprint": null,
        });
        turn.add_report(&mut answer);
        answer
    }

    /// Chunks of `delta`s: the text, then each call's id and name with its arguments in pieces,
    /// the finish reason, and with `include_usage` a last chunk with the usage; then `[DONE]`.
    fn stream(&self, turn: &Turn, _query: Option<&str>) -> Stream {
        // The report model's stream has no `refusal` and no `usage: null` on each chunk.
        let scripted = turn.report.is_none();
        let chunk = |choices: Value| {
            let mut chunk = json!({
                "id": completion_id(turn),
                "object": "chat.completion.chunk",
                "created": turn.created,
                "model": turn.model,
                "system_fingerprint": null,
                "choices": choices,
            });
            // With `include_usage`, OpenAI gives every chunk a `usage`, null until the last.
            if turn.include_usage && scripted {
                with_member(&mut chunk, "usage", Value::Null);
            }
            chunk
        };
        let choice = |delta: Value, finish_reason: Option<&str>| json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        let mut chunks = Vec::new();
        if turn.text.is_some() {
            let mut delta = json!({ "role": "assistant", "content": "" });
            if scripted {
                with_member(&mut delta, "refusal", Value::Null);
            }
            chunks.push(chunk(choice(delta, None)));
            for piece in turn.text_deltas() {
                chunks.push(chunk(choice(json!({ "content": piece }), None)));
            }
        }
        for (index, call) in turn.calls.iter().enumerate() {
            let mut delta = json!({
                "tool_calls": [{
                    "index": index,
                    "id": turn.id("call", index),
                    "type": "function",
                    "function": { "name": call.name, "arguments": "" },
                }],
            });
            // Without text, the first chunk also carries the role, as OpenAI sends it.
            if index == 0 && turn.text.is_none() {
                with_member(&mut delta, "role", json!("assistant"));
                with_member(&mut delta, "content", Value::Null);
                with_member(&mut delta, "refusal", Value::Null);
            }
            chunks.push(chunk(choice(delta, None)));
            for piece in argument_pieces(&call.arguments_text()) {
                let delta = json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] });
                chunks.push(chunk(choice(delta, None)));
            }
        }
        chunks.push(chunk(choice(json!({}), Some(finish_reason(turn)))));
        if turn.include_usage {
            let mut last = chunk(json!([]));
            with_member(&mut last, "usage", usage(turn));
            chunks.push(last);
        }
        if let Some(first) = chunks.first_mut() {
            turn.add_report(first);
        }
        let mut frames: Vec<_> = chunks.iter().map(|chunk| sse_event(None, chunk)).collect();
        frames.push(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
        Stream::sse(frames)
    }

    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape {
        super::openai::error_shape(status, rejection)
    }
}

fn completion_id(turn: &Turn) -> String {
    format!("chatcmpl-demo{}", turn.sequence)
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.has_calls() {
        "tool_calls"
    } else {
        "stop"
    }
}

fn usage(turn: &Turn) -> Value {
    json!({
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.total_tokens(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn tool_names() {
        let body = r#"{
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
                {"type": "custom", "custom": {"name": "run_sql"}},
                {"type": "function", "function": {"name": "send_\u0065mail"}},
                {"type": "web_search"}
            ],
            "tool_choice": {"type": "function", "function": {"name": "send_email"}}
        }"#;
        assert_eq!(
            tools(CHAT, body),
            Ok(names(&[
                "get_weather",
                "run_sql",
                "send_email",
                "web_search"
            ]))
        );
        assert_eq!(
            inspect(CHAT, body).map(|inspection| inspection.model),
            Ok(Some("gpt-4o".to_owned()))
        );
        assert_eq!(
            tools(CHAT, r#"{"messages": [], "tools": null}"#),
            Ok(vec![])
        );
    }

    #[test]
    fn rejections() {
        let empty = inspect(CHAT, r#"{"tools": []}"#);
        assert_eq!(
            empty.as_ref().err().and_then(|rejection| rejection.code),
            Some("empty_array")
        );
        assert_eq!(
            empty.err().and_then(|rejection| rejection.param),
            Some("tools".to_owned())
        );

        assert!(
            rejection_message(CHAT, r#"{"tools": {"type": "function"}}"#)
                .contains("expected an array")
        );
        assert!(rejection_message(CHAT, r#"{"tools": ["get_weather"]}"#).contains("'tools[0]'"));
        assert!(
            rejection_message(CHAT, r#"{"tools": [{"function": {"name": "a"}}]}"#)
                .contains("'tools[0].type'")
        );
        assert!(
            rejection_message(CHAT, r#"{"tools": [{"type": "function", "function": {}}]}"#)
                .contains("'tools[0].function.name'")
        );

        let duplicate = r#"{"tools": [
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "a"}}
        ]}"#;
        assert!(rejection_message(CHAT, duplicate).contains("duplicate tool name 'a'"));

        let unknown_choice = r#"{"tools": [{"type": "function", "function": {"name": "a"}}],
            "tool_choice": {"type": "function", "function": {"name": "b"}}}"#;
        assert!(rejection_message(CHAT, unknown_choice).contains("no tool named 'b'"));

        let choice_without_tools = r#"{"tool_choice": "auto"}"#;
        assert!(
            rejection_message(CHAT, choice_without_tools)
                .contains("only allowed when 'tools' are specified")
        );

        let bad_mode = r#"{"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "always"}"#;
        assert!(rejection_message(CHAT, bad_mode).contains("Supported values"));
    }

    #[test]
    fn tool_choice_modes_and_allowed_tools() {
        let tools_a_b = r#"[{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]"#;
        for choice in [r#""auto""#, r#""none""#, r#""required""#, "null"] {
            let body = format!(r#"{{"tools": {tools_a_b}, "tool_choice": {choice}}}"#);
            assert_eq!(tools(CHAT, &body), Ok(names(&["a", "b"])), "{choice}");
        }
        let allowed = |listed: &str| {
            format!(
                r#"{{"tools": {tools_a_b}, "tool_choice": {{"type": "allowed_tools", "allowed_tools": {{"mode": "auto", "tools": [{{"type": "function", "function": {{"name": "{listed}"}}}}]}}}}}}"#
            )
        };
        assert_eq!(tools(CHAT, &allowed("b")), Ok(names(&["a", "b"])));
        assert!(rejection_message(CHAT, &allowed("c")).contains("no tool named 'c'"));
    }

    #[test]
    fn history_pairs_calls_and_results() {
        let history = |request: &Value| OpenAiChat.read_history(request);
        let call = |ids: &[&str]| {
            json!({ "role": "assistant", "content": null, "tool_calls": ids.iter().map(|id| json!({
                "id": id, "type": "function", "function": { "name": "f", "arguments": "{}" },
            })).collect::<Vec<_>>() })
        };
        let result = |id: &str| json!({ "role": "tool", "tool_call_id": id, "content": "ok" });
        let user = json!({ "role": "user", "content": [{ "type": "text", "text": "weather?" }] });
        let ok = json!({ "messages": [user, call(&["a", "b"]), result("b"), result("a")] });
        assert_eq!(
            history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather?".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, call(&["a", "b"]), result("a")] });
        assert!(
            history(&missing)
                .unwrap_err()
                .message
                .contains("did not have response messages: b")
        );
        let interrupted = json!({ "messages": [user, call(&["a"]), user, result("a")] });
        assert!(history(&interrupted).unwrap_err().message.contains(": a"));
        let stray = json!({ "messages": [user, call(&["a"]), result("a"), result("z")] });
        assert!(history(&stray).unwrap_err().message.contains("'z'"));
        let twice = json!({ "messages": [user, call(&["a"]), result("a"), result("a")] });
        assert!(history(&twice).is_err());
        let orphan = json!({ "messages": [user, result("a")] });
        assert!(history(&orphan).is_err());
        let no_id = json!({ "messages": [user, { "role": "assistant", "tool_calls": [{ "type": "function" }] }] });
        assert!(
            history(&no_id)
                .unwrap_err()
                .message
                .contains("tool_calls[0].id")
        );
        assert!(history(&json!({})).is_err());
        // Texts: a string content, the latest user message.
        let texts = json!({ "messages": [
            { "role": "user", "content": "first" },
            { "role": "assistant", "content": "hi" },
            { "role": "user", "content": "second" },
        ] });
        assert_eq!(
            history(&texts).unwrap().user_text.as_deref(),
            Some("second")
        );
    }
}
