//! Ollama's native chat API (`POST /api/chat`):
//! <https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion>.
//! Tools in OpenAI's function format; answers streamed as newline-delimited JSON unless the
//! request says `"stream": false`. (Ollama's OpenAI-compatible `/v1/chat/completions` is
//! [`super::openai_chat`].)

mod request;
mod response;

use super::openai_chat::OpenaiChat;
use super::{Entry, Framing, Problem, Request, RequestCodec, ResponseCodec};
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use std::ops::Range;
use serde_json::{Value, json};

pub struct Ollama;

impl RequestCodec for Ollama {
    fn name(&self) -> &'static str {
        "ollama"
    }

    fn recordings(&self) -> &'static str {
        "ollama"
    }

    fn serves(&self, path: &str) -> bool {
        path.ends_with("/api/chat")
    }

    // Not among the conventions' well-known providers: its own name.
    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("ollama", "chat")
    }

    fn parse(&self, body: &str) -> Result<Request, Problem> {
        request::parse(body)
    }

    // Ollama's messages are OpenAI Chat's; its results mostly have no call id, and are
    // matched by `tool_name`, else by place.
    fn note_result(&self, body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
        OpenaiChat.note_result(body, tool, note)
    }

    // The tools are OpenAI Chat's, entry for entry.
    fn entry(&self, text: &str) -> Option<Entry> {
        OpenaiChat.entry(text)
    }

    fn tool_entry(&self, name: &str, description: &str, parameters: &Value) -> String {
        OpenaiChat.tool_entry(name, description, parameters)
    }

    // Ollama has no `tool_choice`: a claim cannot be written into the request.
    fn with_tool_choice(&self, _body: &str, _name: &str) -> Option<String> {
        None
    }
}

impl ResponseCodec for Ollama {
    fn framing(&self) -> Framing {
        Framing::Ndjson
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

    fn continues_streams(&self) -> bool {
        true
    }

    // The next round's lines simply follow.
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
            "model": model,
            "created_at": "1970-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": name, "arguments": arguments}}
            ]},
            "done_reason": "stop",
            "done": true,
            "prompt_eval_count": 0,
            "eval_count": 0
        })
    }
}
