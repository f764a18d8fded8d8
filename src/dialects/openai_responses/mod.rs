//! OpenAI Responses (`POST …/responses`):
//! <https://platform.openai.com/docs/api-reference/responses>.

mod request;
mod response;

use super::shared::splice::set_path_member;
use super::{Entry, Problem, ProviderSearch, Request, RequestCodec, ResponseCodec};
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use std::ops::Range;
use serde_json::{Map, Value, json};

pub struct OpenaiResponses;

impl RequestCodec for OpenaiResponses {
    fn name(&self) -> &'static str {
        "openai_responses"
    }

    fn recordings(&self) -> &'static str {
        "openai-responses"
    }

    fn serves(&self, path: &str) -> bool {
        path.ends_with("/responses")
    }

    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("openai", "chat")
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

    // `mcp` tools and namespaces are governed entry by entry ([`request::holders`]).
    fn builtin_name(&self, entry: &str) -> Option<String> {
        match super::shared::entry_type(entry) {
            Some("\"mcp\"" | "\"namespace\"") => None,
            _ => super::shared::builtin_name(entry),
        }
    }

    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String> {
        let choice = json!({"type": "function", "name": name});
        set_path_member(body, &[], "tool_choice", &choice.to_string())
    }

    fn provider_search(&self) -> ProviderSearch {
        ProviderSearch::Tool {
            entry: r#"{"type":"tool_search"}"#.to_owned(),
            beta: false,
        }
    }

    // `tool_search`, and namespaces: groups of functions the provider's search loads.
    fn native_search_entry(&self, entry: &str) -> bool {
        super::shared::is_search_tool(entry)
            || super::shared::entry_type(entry) == Some("\"namespace\"")
    }

    fn recognises(&self, body: &Map<String, Value>) -> Option<&'static str> {
        body.contains_key("input")
            .then_some("the body has `input`")
    }
}

impl ResponseCodec for OpenaiResponses {
    fn conversation_path(&self) -> &'static [&'static str] {
        &["input"]
    }

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

    fn call_namespace(&self, reply: &Reply, call: &crate::dialects::Call) -> Option<String> {
        response::call_namespace(reply, call)
    }

    // Drops the second `response.created`, numbers items and events on, and puts the items
    // sent first in the final response's `output`.
    fn continues_streams(&self) -> bool {
        true
    }

    fn continue_stream(&self, sent: &[Frame], next: &str) -> Result<String, Problem> {
        let (next, _) = crate::sse::frames(next);
        response::continue_stream(sent, &next)
    }

    fn response_id(&self, event: &str) -> Option<String> {
        response::response_id(event)
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
            "id": "resp_toolsift_claim",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": model,
            "output": [{
                "type": "function_call", "id": "fc_toolsift_claim", "call_id": "call_toolsift_claim",
                "name": name, "arguments": arguments.to_string(), "status": "completed"
            }],
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        })
    }
}
