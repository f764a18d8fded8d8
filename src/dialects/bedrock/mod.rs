//! Amazon Bedrock Converse (`POST /model/{id}/converse`, `…/converse-stream`):
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>.
//! Streams use AWS's binary event-stream framing, read and edited as frames (`stream.rs`): the
//! access rules' check of answers reads them whole; search mode does not follow them.

mod request;
mod response;
mod stream;

use super::shared::splice::set_path_member;
use super::{Entry, Framing, PathStream, Problem, Request, RequestCodec, ResponseCodec};
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult};
use std::ops::Range;
use serde_json::{Map, Value, json};

pub struct Bedrock;

impl RequestCodec for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
    }

    fn recordings(&self) -> &'static str {
        "bedrock-converse"
    }

    /// `/model/{id}/converse` and `/model/{id}/converse-stream`, with or without a prefix.
    fn serves(&self, path: &str) -> bool {
        let mut segments = path.rsplit('/');
        let last = segments.next();
        let _model_id = segments.next();
        let model = segments.next();
        matches!(last, Some("converse" | "converse-stream")) && model == Some("model")
    }

    fn gen_ai(&self) -> (&'static str, &'static str) {
        ("aws.bedrock", "chat")
    }

    /// `/model/{id}/converse`: the id percent-encoded, as the SDKs send it.
    fn model_in_path<'a>(&self, path: &'a str) -> Option<&'a str> {
        let mut segments = path.rsplit('/');
        let _converse = segments.next();
        segments.next().filter(|id| !id.is_empty())
    }

    fn tools_path(&self) -> &'static [&'static str] {
        &["toolConfig", "tools"]
    }

    /// `{"systemTool": {"name": …}}` by its name; a `cachePoint` marks the prompt cache and
    /// is no tool.
    fn builtin_name(&self, entry: &str) -> Option<String> {
        request::builtin_name(entry)
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

    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String> {
        let choice = json!({"tool": {"name": name}});
        set_path_member(body, &["toolConfig"], "toolChoice", &choice.to_string())
    }

    fn recognises(&self, body: &Map<String, Value>) -> Option<&'static str> {
        body.contains_key("toolConfig")
            .then_some("the body has `toolConfig`")
    }
}

impl ResponseCodec for Bedrock {
    fn path_stream(&self, path: &str) -> PathStream {
        if path.contains("converse-stream") {
            PathStream::Unsupported
        } else {
            PathStream::Body
        }
    }

    fn framing(&self) -> Framing {
        Framing::EventStream
    }

    /// `converse-stream` answers are read whole, and checked.
    fn guard_reads(&self, _path: &str) -> bool {
        true
    }

    fn read_reply(&self, body: &str) -> Result<Reply, Problem> {
        response::read_reply(body)
    }

    fn read_stream(&self, frames: &[Frame]) -> Result<Reply, Problem> {
        stream::read_stream(frames)
    }

    fn opening(&self, frames: &[Frame]) -> Opening {
        stream::opening(frames)
    }

    fn calls_in_event(&self, event: &Value) -> Vec<String> {
        stream::calls_in_event(event)
    }

    fn finish_stream(&self, frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
        stream::finish_stream(frames, edits)
    }

    fn tool_results(&self, results: &[ToolResult]) -> Vec<String> {
        response::tool_results(results)
    }

    fn finish_reply(&self, body: &str, edits: &Edits) -> Result<String, Problem> {
        response::finish_reply(body, edits)
    }

    fn claimed_answer(&self, name: &str, arguments: &Value, _model: &str) -> Value {
        json!({
            "output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "tooluse_toolsift_claim", "name": name, "input": arguments}}
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
            "metrics": {"latencyMs": 0}
        })
    }
}
