//! Amazon Bedrock Converse (`/model/{modelId}/converse` and `/converse-stream`):
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>.
//!
//! `converse-stream` answers in AWS's binary event-stream framing (`eventstream.rs`), and a
//! request signed with SigV4 must carry a valid signature by the demo's credentials
//! (`sigv4.rs`).

use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::shared::{
    Catalog, EmptyTools, ErrorShape, Exchange, JsonPath, RawObject, Rejection, ToolResult,
    argument_pieces, array, conversation, items, pair_calls, parse_object, rejection, required_str,
    required_string, role, text_of, tool_entries,
};
use super::{History, PathFacts, Provider, Stream, Turn};
use crate::{ReplyBody, eventstream, sigv4};

pub(crate) struct Bedrock;

impl Provider for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
    }

    /// `/model/{modelId}/converse` or `/converse-stream`: the model id stays URL-encoded. An
    /// unencoded ARN id contains `/`, so the id is everything in between.
    fn recognize(&self, path: &str) -> Option<PathFacts> {
        let (prefix, action) = path.rsplit_once('/')?;
        let streams = match action {
            "converse" => false,
            "converse-stream" => true,
            _ => return None,
        };
        let (_, model) = prefix.split_once("/model/")?;
        (!model.is_empty()).then(|| PathFacts {
            streams,
            model: Some(model.to_owned()),
        })
    }

    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        let mut catalog = Catalog::default();
        let Some(raw) = request.get("toolConfig") else {
            return Ok(catalog);
        };
        let config_path = JsonPath::Root("toolConfig");
        let config = parse_object(raw, &config_path)?;
        let tools_path = config_path.member("tools");
        // Bedrock requires a non-empty `tools` whenever `toolConfig` is present.
        let Some(tools) = config.get("tools") else {
            let message = "1 validation error detected: Value null at 'toolConfig.tools' failed to satisfy constraint: Member must not be null";
            return Err(Rejection::new(message).at(&tools_path));
        };
        let entries = tool_entries(Some(tools), &tools_path, EmptyTools::Rejected)?;
        for (index, tool) in entries.iter().flatten().enumerate() {
            let path = tools_path.index(index);
            // A Tool is a union: `toolSpec`, or another member such as `cachePoint`, reported
            // by its key.
            for (key, value) in tool.present_members() {
                if key == "toolSpec" {
                    let spec_path = path.member("toolSpec");
                    let spec = parse_object(value, &spec_path)?;
                    catalog.add_named(required_string(&spec, "name", &spec_path)?, &spec_path)?;
                } else {
                    catalog.add_builtin(key.clone());
                }
            }
        }
        if let Some(raw) = config.get("toolChoice") {
            let choice_path = config_path.member("toolChoice");
            let choice = parse_object(raw, &choice_path)?;
            if let Some(raw) = choice.get("tool") {
                let tool_path = choice_path.member("tool");
                let tool = parse_object(raw, &tool_path)?;
                let name = required_string(&tool, "name", &tool_path)?;
                catalog.require(&name, &tool_path.member("name"))?;
            }
        }
        Ok(catalog)
    }

    /// No `stream` member: only the path says it.
    fn body_streams(&self, _request: &RawObject<'_>) -> bool {
        false
    }

    fn signature_refusal(&self, parts: &Parts, body: &[u8]) -> Option<Response<ReplyBody>> {
        sigv4::check(parts, body)
            .err()
            .map(|refusal| refusal.response())
    }

    fn function_tools(&self, request: &Value) -> Vec<String> {
        let tools = request
            .get("toolConfig")
            .and_then(|config| config.get("tools"));
        array(tools)
            .iter()
            .filter_map(|tool| tool.get("toolSpec")?.get("name")?.as_str())
            .map(str::to_owned)
            .collect()
    }

    /// The `toolUse` blocks of an assistant message must each be answered by a `toolResult`
    /// block with the same `toolUseId` in the next message, and its results must answer those
    /// uses.
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let read = |index: usize, message: &Value| {
            let blocks = items(message, "content").iter().enumerate();
            // The `toolUseId` of each block holding `member`.
            let ids = |member: &'static str| {
                blocks
                    .clone()
                    .filter_map(move |(at, block)| Some((at, block.get(member)?)))
                    .map(move |(block_index, block)| {
                        let path = format!("messages.{index}.content.{block_index}.{member}");
                        let id = required_str(block, "toolUseId", &path)?.to_owned();
                        Ok(ToolResult { key: id, path })
                    })
                    .collect::<Result<Vec<_>, Rejection>>()
            };
            if role(message) == "assistant" {
                let uses = ids("toolUse")?;
                return Ok(Exchange::Calls(
                    uses.into_iter().map(|call| call.key).collect(),
                ));
            }
            Ok(Exchange::Results {
                results: ids("toolResult")?,
                more_may_follow: false,
                text: text_of(message.get("content"), &[]),
            })
        };
        let unanswered = |calls_at: usize, pending: &[String]| {
            rejection(
                format!(
                    "The toolUse blocks at messages.{calls_at}.content must be followed by toolResult blocks with the same ids in the next message. Expected toolResult blocks for the following Ids: {}",
                    pending.join(", ")
                ),
                format!("messages.{calls_at}"),
            )
        };
        let stray = |path: &str, id: &str| {
            rejection(
                format!(
                    "The toolResult block at {path} has the toolUseId {id}, which matches no toolUse block of the previous turn."
                ),
                path.to_owned(),
            )
        };
        pair_calls(conversation(request, "messages")?, read, unanswered, stray)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut content = Vec::new();
        if let Some(text) = &turn.text {
            content.push(json!({ "text": text }));
        }
        for (index, call) in turn.calls.iter().enumerate() {
            content.push(json!({
                "toolUse": {
                    "toolUseId": turn.id("tooluse", index),
                    "name": call.name,
                    "input": call.arguments,
                },
            }));
        }
        let mut answer = json!({
            "output": { "message": { "role": "assistant", "content": content } },
            "stopReason": if turn.has_calls() { "tool_use" } else { "end_turn" },
            "usage": usage(turn),
            "metrics": { "latencyMs": 0 },
        });
        turn.add_report(&mut answer);
        answer
    }

    /// `ConverseStream`'s events, each payload the event's member as the AWS SDKs present it
    /// (`{"contentBlockIndex":0,"delta":{...}}` for a `contentBlockDelta`): the text block (no
    /// start event, as Bedrock sends it), then each call's block (`contentBlockStart` with
    /// `toolUse{toolUseId,name}`, its input's JSON text in pieces).
    fn stream(&self, turn: &Turn, _query: Option<&str>) -> Stream {
        let mut message_start = json!({ "role": "assistant" });
        turn.add_report(&mut message_start);
        let mut events = vec![("messageStart", message_start)];
        let mut index = 0;
        if turn.text.is_some() || !turn.has_calls() {
            events.extend(turn.text_deltas().into_iter().map(|piece| {
                let delta = json!({ "contentBlockIndex": 0, "delta": { "text": piece } });
                ("contentBlockDelta", delta)
            }));
            events.push(("contentBlockStop", json!({ "contentBlockIndex": 0 })));
            index = 1;
        }
        for (call_index, call) in turn.calls.iter().enumerate() {
            let tool_use =
                json!({ "toolUseId": turn.id("tooluse", call_index), "name": call.name });
            let start = json!({ "contentBlockIndex": index, "start": { "toolUse": tool_use } });
            events.push(("contentBlockStart", start));
            for piece in argument_pieces(&call.arguments_text()) {
                let delta = json!({ "contentBlockIndex": index, "delta": { "toolUse": { "input": piece } } });
                events.push(("contentBlockDelta", delta));
            }
            events.push(("contentBlockStop", json!({ "contentBlockIndex": index })));
            index += 1;
        }
        let stop_reason = if turn.has_calls() {
            "tool_use"
        } else {
            "end_turn"
        };
        events.extend([
            ("messageStop", json!({ "stopReason": stop_reason })),
            (
                "metadata",
                json!({ "usage": usage(turn), "metrics": { "latencyMs": 0 } }),
            ),
        ]);
        let frames = events
            .iter()
            .map(|(kind, payload)| eventstream::event(kind, payload.to_string().as_bytes()))
            .collect();
        Stream {
            frames,
            content_type: eventstream::CONTENT_TYPE,
        }
    }

    /// `{"message"}`, with the `x-amzn-errortype` Bedrock gives the status.
    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape {
        let kind = match status.as_u16() {
            403 => "AccessDeniedException",
            404 => "ResourceNotFoundException",
            408 => "ModelTimeoutException",
            424 => "ModelErrorException",
            429 => "ThrottlingException",
            503 => "ServiceUnavailableException",
            500..=599 => "InternalServerException",
            _ => "ValidationException",
        };
        ErrorShape {
            body: json!({ "message": rejection.message }),
            header: Some(("x-amzn-errortype", kind)),
        }
    }
}

fn usage(turn: &Turn) -> Value {
    json!({
        "inputTokens": turn.input_tokens,
        "outputTokens": turn.output_tokens,
        "totalTokens": turn.total_tokens(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn tools_and_rejections() {
        let body = r#"{
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
            "toolConfig": {
                "tools": [
                    {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}},
                    {"cachePoint": {"type": "default"}},
                    {"toolSpec": {"name": "send_email", "inputSchema": {"json": {}}}}
                ],
                "toolChoice": {"tool": {"name": "send_email"}}
            }
        }"#;
        assert_eq!(
            tools(BEDROCK, body),
            Ok(names(&["get_weather", "cachePoint", "send_email"]))
        );
        assert_eq!(tools(BEDROCK, r#"{"messages": []}"#), Ok(vec![]));
        let auto = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}], "toolChoice": {"auto": {}}}}"#;
        assert_eq!(tools(BEDROCK, auto), Ok(names(&["a"])));

        assert!(
            rejection_message(BEDROCK, r#"{"toolConfig": {"tools": []}}"#).contains("empty array")
        );
        assert!(
            rejection_message(BEDROCK, r#"{"toolConfig": {}}"#).contains("Member must not be null")
        );
        let unknown = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}], "toolChoice": {"tool": {"name": "b"}}}}"#;
        assert!(rejection_message(BEDROCK, unknown).contains("no tool named 'b'"));
        let duplicate = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}, {"toolSpec": {"name": "a"}}]}}"#;
        assert!(rejection_message(BEDROCK, duplicate).contains("duplicate tool name 'a'"));
    }

    #[test]
    fn history_pairs_tool_use_ids() {
        let history = |request: &Value| Bedrock.read_history(request);
        let uses = |ids: &[&str]| {
            json!({ "role": "assistant", "content": ids.iter().map(|id| json!({
                "toolUse": { "toolUseId": id, "name": "f", "input": {} },
            })).collect::<Vec<_>>() })
        };
        let results = |ids: &[&str]| {
            json!({ "role": "user", "content": ids.iter().map(|id| json!({
                "toolResult": { "toolUseId": id, "content": [{ "json": {} }] },
            })).collect::<Vec<_>>() })
        };
        let user = json!({ "role": "user", "content": [{ "text": "weather" }] });
        let ok = json!({ "messages": [user, uses(&["a"]), results(&["a"])] });
        assert_eq!(
            history(&ok),
            Ok(History {
                tool_results: 1,
                user_text: Some("weather".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, uses(&["a", "b"]), results(&["a"])] });
        assert!(history(&missing).unwrap_err().message.contains("Ids: b"));
        let stray = json!({ "messages": [user, uses(&["a"]), results(&["z"])] });
        assert!(history(&stray).unwrap_err().message.contains("toolUseId z"));
        let orphan = json!({ "messages": [results(&["a"])] });
        assert!(history(&orphan).is_err());
    }
}
