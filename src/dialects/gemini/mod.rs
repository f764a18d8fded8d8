//! Google Gemini (`…:generateContent`, `…:streamGenerateContent`):
//! <https://ai.google.dev/api/generate-content>,
//! <https://ai.google.dev/gemini-api/docs/function-calling>.

mod request;
mod response;

use super::shared::splice::set_path_member;
use super::{
    Entry, Item, Layout, PathStream, Problem, Request, RequestCodec, ResponseCodec,
};
use crate::json::find_path;
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use serde_json::{Map, Value, json};
use std::ops::Range;

pub struct Gemini;

impl RequestCodec for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn recordings(&self) -> &'static str {
        "gemini"
    }

    fn serves(&self, path: &str) -> bool {
        path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent")
    }

    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("gcp.gemini", "generate_content")
    }

    /// `…/models/{model}:generateContent`.
    fn model_in_path<'a>(&self, path: &'a str) -> Option<&'a str> {
        let (_, model) = path.rsplit_once("/models/")?;
        let (model, _) = model.split_once(':')?;
        (!model.is_empty()).then_some(model)
    }

    fn parse(&self, body: &str) -> Result<Request, Problem> {
        request::parse(body)
    }

    fn note_result(&self, body: &str, tool: &str, note: &str) -> Option<(Range<usize>, String)> {
        request::note_result(body, tool, note)
    }

    // Tool objects, some holding a `functionDeclarations` array: not one flat array.
    fn split<'a>(
        &self,
        container: &'a str,
        _scanned: Option<Vec<Range<usize>>>,
    ) -> Result<(Vec<Item<'a>>, Layout), Problem> {
        request::split(container)
    }

    fn entry(&self, text: &str) -> Option<Entry> {
        request::entry(text)
    }

    fn tool_entry(&self, name: &str, description: &str, parameters: &Value) -> String {
        response::tool_entry(name, description, parameters)
    }

    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String> {
        let config = json!({"mode": "ANY", "allowedFunctionNames": [name]}).to_string();
        match find_path(body, &["toolConfig"]) {
            Some(_) => set_path_member(body, &["toolConfig"], "functionCallingConfig", &config),
            None => set_path_member(
                body,
                &[],
                "toolConfig",
                &format!("{{\"functionCallingConfig\":{config}}}"),
            ),
        }
    }

    fn recognises(&self, body: &Map<String, Value>) -> Option<&'static str> {
        body.contains_key("contents")
            .then_some("the body has `contents`")
    }
}

impl ResponseCodec for Gemini {
    fn conversation_path(&self) -> &'static [&'static str] {
        &["contents"]
    }

    // The path asks for the stream; without `alt=sse` it is one JSON array sent in pieces,
    // which search mode does not follow.
    fn path_stream(&self, path: &str) -> PathStream {
        match (path.contains(":streamGenerateContent"), path.contains("alt=sse")) {
            (false, _) => PathStream::Body,
            (true, true) => PathStream::Stream,
            (true, false) => PathStream::Unsupported,
        }
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

    // Candidates of the next round simply follow.
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
            "candidates": [{
                "content": {"role": "model", "parts": [{"functionCall": {"name": name, "args": arguments}}]},
                "finishReason": "STOP",
                "index": 0
            }],
            "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
            "modelVersion": model
        })
    }
}
