//! OpenAI Chat Completions (`POST …/chat/completions`), and every OpenAI-compatible server:
//! <https://platform.openai.com/docs/api-reference/chat>.

mod request;
pub(crate) mod response;

use super::shared::splice::set_path_member;
use super::{Entry, Problem, ProviderSearch, Request, RequestCodec, ResponseCodec};
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use serde_json::{Value, json};
use std::ops::Range;

pub struct OpenaiChat;

impl RequestCodec for OpenaiChat {
    fn name(&self) -> &'static str {
        "openai_chat"
    }

    fn recordings(&self) -> &'static str {
        "openai-chat"
    }

    fn serves(&self, path: &str) -> bool {
        path.ends_with("/chat/completions")
    }

    // OpenAI-compatible servers (vLLM, Ollama's /v1, LiteLLM) speak it too; the conventions
    // name the API's flavour, and the model says the rest.
    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("openai", "chat")
    }

    fn parse(&self, body: &str) -> Result<Request, Problem> {
        request::parse(body)
    }

    fn entry(&self, text: &str) -> Option<Entry> {
        request::entry(text)
    }

    /// A `custom` tool by its `custom.name`, else the generic reading.
    fn builtin_name(&self, entry: &str) -> Option<String> {
        let object: serde_json::Value = serde_json::from_str(entry).ok()?;
        match object.get("custom").and_then(|c| c.get("name")).and_then(Value::as_str) {
            Some(name) => Some(name.to_owned()),
            None => crate::dialects::shared::builtin_name(entry),
        }
    }

    fn note_result(&self, body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
        request::note_result(body, tool, note)
    }

    fn tool_entry(&self, name: &str, description: &str, parameters: &Value) -> String {
        response::tool_entry(name, description, parameters)
    }

    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String> {
        let choice = json!({"type": "function", "function": {"name": name}});
        set_path_member(body, &[], "tool_choice", &choice.to_string())
    }

    // Chat Completions servers differ: only the operator knows the search tool's shape.
    fn provider_search(&self) -> ProviderSearch {
        ProviderSearch::OperatorDefined
    }
}

impl ResponseCodec for OpenaiChat {
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

    // Chunks of the next round simply follow.
    fn continues_streams(&self) -> bool {
        true
    }

    fn continue_stream(&self, _sent: &[Frame], next: &str) -> Result<String, Problem> {
        Ok(next.to_owned())
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
            "id": "chatcmpl-toolsift-claim",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": null, "tool_calls": [{
                    "id": "call_toolsift_claim", "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()}
                }]},
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        })
    }
}
