//! Anthropic Messages (`POST …/messages`): <https://docs.anthropic.com/en/api/messages>,
//! streams: <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.

mod request;
pub(crate) mod response;

use super::shared::splice::set_path_member;
use super::{Entry, Problem, ProviderSearch, Request, RequestCodec, ResponseCodec};
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use std::ops::Range;
use serde_json::{Map, Value, json};

/// Anthropic's own tool search tool, sent by `native_search` rules without a `tool`.
pub const SEARCH_TOOL: &str = "tool_search_tool_bm25_20251119";
pub const SEARCH_TOOL_NAME: &str = "tool_search_tool_bm25";

pub struct Anthropic;

impl RequestCodec for Anthropic {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn recordings(&self) -> &'static str {
        "anthropic-messages"
    }

    fn serves(&self, path: &str) -> bool {
        path.ends_with("/messages")
    }

    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("anthropic", "chat")
    }

    fn parse(&self, body: &str) -> Result<Request, Problem> {
        request::parse(body)
    }

    fn note_result(&self, body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
        request::note_result(body, tool, note)
    }

    fn entry(&self, text: &str) -> Option<Entry> {
        request::entry(text)
    }

    fn tool_entry(&self, name: &str, description: &str, parameters: &Value) -> String {
        response::tool_entry(name, description, parameters)
    }

    fn holders(&self, body: &str) -> Vec<super::Holder> {
        request::holders(body)
    }

    fn narrow_connector(&self, entry: &str, tools: &[String]) -> Option<String> {
        request::narrow_connector(entry, tools)
    }

    // An `mcp_toolset` follows its `mcp_servers` entry ([`request::holders`]).
    fn builtin_name(&self, entry: &str) -> Option<String> {
        if super::shared::entry_type(entry) == Some("\"mcp_toolset\"") {
            return None;
        }
        super::shared::builtin_name(entry)
    }

    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String> {
        let choice = json!({"type": "tool", "name": name});
        set_path_member(body, &[], "tool_choice", &choice.to_string())
    }

    fn provider_search(&self) -> ProviderSearch {
        ProviderSearch::Tool {
            entry: format!(r#"{{"type":"{SEARCH_TOOL}","name":"{SEARCH_TOOL_NAME}"}}"#),
            beta: true,
        }
    }

    fn recognises(&self, body: &Map<String, Value>) -> Option<&'static str> {
        let input_schema = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| tools.iter().any(|t| t.get("input_schema").is_some()));
        let system = body
            .get("system")
            .is_some_and(|s| s.is_string() || s.is_array());
        match (body.contains_key("messages"), input_schema, system) {
            (true, true, _) => Some("the body has `messages` and tools with `input_schema`"),
            (true, false, true) => Some("the body has `messages` and a top-level `system`"),
            _ => None,
        }
    }
}

impl ResponseCodec for Anthropic {
    fn read_reply(&self, body: &str) -> Result<Reply, Problem> {
        response::read_reply(body)
    }

    fn read_stream(&self, frames: &[Frame]) -> Result<Reply, Problem> {
        response::read_stream(frames)
    }

    fn opening(&self, frames: &[Frame]) -> Opening {
        response::opening(frames)
    }

    fn calls_in_event(&self, event: &Value) -> Vec<String> {
        response::calls_in_event(event)
    }

    fn connector_calls(&self, reply: &Reply) -> Vec<String> {
        response::connector_calls(reply)
    }

    // Drops the second `message_start` and numbers the new content blocks after the ones sent.
    fn continues_streams(&self) -> bool {
        true
    }

    fn continue_stream(&self, sent: &[Frame], next: &str) -> Result<String, Problem> {
        let (next, _) = crate::sse::frames(next);
        response::continue_stream(sent, &next)
    }

    fn tool_results(&self, results: &[ToolResult]) -> Vec<String> {
        response::tool_results(results)
    }

    fn finish_reply(&self, body: &str, edits: &Edits) -> Result<String, Problem> {
        response::finish_reply(body, edits)
    }

    fn finish_stream(&self, frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
        response::finish_stream(frames, edits)
    }

    fn claimed_answer(&self, name: &str, arguments: &Value, model: &str) -> Value {
        json!({
            "id": "msg_toolsift_claim",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "tool_use", "id": "toolu_toolsift_claim", "name": name, "input": arguments}],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0}
        })
    }
}
