//! Anthropic Messages (`POST …/messages`): <https://docs.anthropic.com/en/api/messages>.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::shared::{
    Catalog, EmptyTools, ErrorShape, Exchange, JsonPath, RawObject, Rejection, ToolResult,
    argument_pieces, array, conversation, items, pair_calls, parse_object, rejection, required_str,
    required_string, role, sse_event, text_of, tool_entries, type_of,
};
use super::{History, PathFacts, Provider, Stream, Turn};

pub(crate) struct Anthropic;

impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn recognize(&self, path: &str) -> Option<PathFacts> {
        path.ends_with("/messages").then(PathFacts::default)
    }

    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        let tools_path = JsonPath::Root("tools");
        let entries = tool_entries(request.get("tools"), &tools_path, EmptyTools::Rejected)?;
        let mut catalog = Catalog::default();
        // Custom and server tools (web_search_20250305, bash...) all carry a `name`.
        for (index, tool) in entries.iter().flatten().enumerate() {
            let path = tools_path.index(index);
            catalog.add_named(required_string(tool, "name", &path)?, &path)?;
        }
        if let Some(raw) = request.get("tool_choice") {
            let choice_path = JsonPath::Root("tool_choice");
            let choice = parse_object(raw, &choice_path)?;
            if required_string(&choice, "type", &choice_path)? == "tool" {
                let name = required_string(&choice, "name", &choice_path)?;
                catalog.require(&name, &choice_path.member("name"))?;
            }
        }
        Ok(catalog)
    }

    /// Client tools have no type or `custom`; server tools (`web_search_20250305`...) a dated
    /// one.
    fn function_tools(&self, request: &Value) -> Vec<String> {
        array(request.get("tools"))
            .iter()
            .filter(|tool| matches!(type_of(tool), None | Some("custom")))
            .filter_map(|tool| tool.get("name")?.as_str())
            .map(str::to_owned)
            .collect()
    }

    /// The `tool_use` blocks of an assistant message must each be answered by a `tool_result`
    /// block (`tool_use_id`) in the next message, and its results must answer those uses.
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let read = |index: usize, message: &Value| {
            let blocks = items(message, "content").iter().enumerate();
            let of_type = |kind: &'static str, key: &'static str| {
                blocks
                    .clone()
                    .filter(move |(_, block)| type_of(block) == Some(kind))
                    .map(move |(block_index, block)| {
                        let path = format!("messages.{index}.content.{block_index}");
                        let id = required_str(block, key, &path)?.to_owned();
                        Ok(ToolResult { key: id, path })
                    })
                    .collect::<Result<Vec<_>, Rejection>>()
            };
            if role(message) == "assistant" {
                let uses = of_type("tool_use", "id")?;
                return Ok(Exchange::Calls(
                    uses.into_iter().map(|call| call.key).collect(),
                ));
            }
            Ok(Exchange::Results {
                results: of_type("tool_result", "tool_use_id")?,
                more_may_follow: false,
                text: text_of(message.get("content"), &["text"]),
            })
        };
        let unanswered = |calls_at: usize, pending: &[String]| {
            rejection(
                format!(
                    "messages.{calls_at}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    pending.join(", ")
                ),
                format!("messages.{calls_at}"),
            )
        };
        let stray = |path: &str, id: &str| {
            rejection(
                format!(
                    "{path}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ),
                path.to_owned(),
            )
        };
        pair_calls(conversation(request, "messages")?, read, unanswered, stray)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut content = Vec::new();
        if let Some(text) = &turn.text {
            content.push(json!({ "type": "text", "text": text }));
        }
        for (index, call) in turn.calls.iter().enumerate() {
            content.push(json!({
                "type": "tool_use",
                "id": turn.id("toolu", index),
                "name": call.name,
                "input": call.arguments,
            }));
        }
        let mut answer = json!({
            "id": message_id(turn),
            "type": "message",
            "role": "assistant",
            "model": turn.model,
            "content": content,
            "stop_reason": stop_reason(turn),
            "stop_sequence": null,
            "usage": { "input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens },
        });
        turn.add_report(&mut answer);
        answer
    }

    /// `message_start`, a `ping`, each content block started, its text or `input_json_delta`
    /// pieces, stopped; then `message_delta` with the stop reason and usage, and
    /// `message_stop`.
    fn stream(&self, turn: &Turn, _query: Option<&str>) -> Stream {
        let mut message_start = json!({
            "type": "message_start",
            "message": {
                "id": message_id(turn),
                "type": "message",
                "role": "assistant",
                "model": turn.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": { "input_tokens": turn.input_tokens, "output_tokens": 1 },
            },
        });
        turn.add_report(&mut message_start);
        let mut events = vec![message_start];
        // The report model's stream has no ping.
        if turn.report.is_none() {
            events.push(json!({ "type": "ping" }));
        }
        // Each content block: how it starts, and its deltas.
        let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
        if turn.text.is_some() {
            let deltas = turn.text_deltas().into_iter();
            blocks.push((
                json!({ "type": "text", "text": "" }),
                deltas
                    .map(|piece| json!({ "type": "text_delta", "text": piece }))
                    .collect(),
            ));
        }
        for (index, call) in turn.calls.iter().enumerate() {
            let deltas = argument_pieces(&call.arguments_text()).into_iter();
            blocks.push((
                json!({ "type": "tool_use", "id": turn.id("toolu", index), "name": call.name, "input": {} }),
                deltas
                    .map(|piece| json!({ "type": "input_json_delta", "partial_json": piece }))
                    .collect(),
            ));
        }
        for (index, (start, deltas)) in blocks.into_iter().enumerate() {
            events.push(
                json!({ "type": "content_block_start", "index": index, "content_block": start }),
            );
            for delta in deltas {
                events
                    .push(json!({ "type": "content_block_delta", "index": index, "delta": delta }));
            }
            events.push(json!({ "type": "content_block_stop", "index": index }));
        }
        events.push(json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(turn), "stop_sequence": null },
            "usage": { "output_tokens": turn.output_tokens },
        }));
        events.push(json!({ "type": "message_stop" }));
        let frames = events
            .iter()
            .map(|event| {
                let name = event.get("type").and_then(Value::as_str);
                sse_event(name, event)
            })
            .collect();
        Stream::sse(frames)
    }

    /// `{"type": "error", "error": {"type", "message"}}`, with the type Anthropic gives the
    /// status.
    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape {
        let kind = match status.as_u16() {
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            504 => "timeout_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        ErrorShape {
            body: json!({ "type": "error", "error": { "type": kind, "message": rejection.message } }),
            header: None,
        }
    }
}

fn message_id(turn: &Turn) -> String {
    format!("msg_demo{}", turn.sequence)
}

fn stop_reason(turn: &Turn) -> &'static str {
    if turn.has_calls() {
        "tool_use"
    } else {
        "end_turn"
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn tools_and_rejections() {
        let body = r#"{
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"name": "get_weather", "description": "d", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
            ],
            "tool_choice": {"type": "tool", "name": "web_search"}
        }"#;
        assert_eq!(
            tools(MESSAGES, body),
            Ok(names(&["get_weather", "web_search"]))
        );
        assert_eq!(
            tools(
                MESSAGES,
                r#"{"tools": [{"name": "a"}], "tool_choice": {"type": "any"}}"#
            ),
            Ok(names(&["a"]))
        );

        assert!(rejection_message(MESSAGES, r#"{"tools": []}"#).contains("empty array"));
        assert!(
            rejection_message(MESSAGES, r#"{"tools": "get_weather"}"#)
                .contains("expected an array")
        );
        assert!(
            rejection_message(MESSAGES, r#"{"tools": [{"description": "x"}]}"#)
                .contains("'tools[0].name'")
        );
        assert!(
            rejection_message(MESSAGES, r#"{"tools": [{"name": "a"}, {"name": "a"}]}"#)
                .contains("duplicate tool name 'a'")
        );
        let unknown = r#"{"tools": [{"name": "a"}], "tool_choice": {"type": "tool", "name": "b"}}"#;
        assert!(rejection_message(MESSAGES, unknown).contains("no tool named 'b'"));
    }

    #[test]
    fn history_needs_results_in_the_next_message() {
        let history = |request: &Value| Anthropic.read_history(request);
        let uses = |ids: &[&str]| {
            json!({ "role": "assistant", "content": ids.iter().map(|id| json!({
                "type": "tool_use", "id": id, "name": "f", "input": {},
            })).collect::<Vec<_>>() })
        };
        let results = |ids: &[&str]| {
            json!({ "role": "user", "content": ids.iter().map(|id| json!({
                "type": "tool_result", "tool_use_id": id, "content": "ok",
            })).collect::<Vec<_>>() })
        };
        let user = json!({ "role": "user", "content": "weather in paris" });
        let ok = json!({ "messages": [user, uses(&["a", "b"]), results(&["b", "a"])] });
        assert_eq!(
            history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather in paris".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, uses(&["a", "b"]), results(&["a"])] });
        let message = history(&missing).unwrap_err().message;
        assert!(
            message.starts_with("messages.1: `tool_use` ids"),
            "{message}"
        );
        assert!(message.contains(": b."), "{message}");
        let unanswered = json!({ "messages": [user, uses(&["a"])] });
        assert!(history(&unanswered).is_err());
        let stray = json!({ "messages": [user, uses(&["a"]), results(&["a", "z"])] });
        assert!(
            history(&stray)
                .unwrap_err()
                .message
                .contains("unexpected `tool_use_id`")
        );
        let late = json!({ "messages": [user, uses(&["a"]), user, results(&["a"])] });
        assert!(history(&late).is_err());
        // A result next to text: the text is the latest user text.
        let mixed = json!({ "messages": [user, uses(&["a"]), { "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "a", "content": "ok" },
            { "type": "text", "text": "and tomorrow?" },
        ] }] });
        assert_eq!(
            history(&mixed).unwrap().user_text.as_deref(),
            Some("and tomorrow?")
        );
    }
}
