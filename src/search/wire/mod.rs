//! The response side of each dialect, for search mode: reading the model's turn (whole or
//! streamed), writing the tool results and the meta-tool in the dialect's own shapes, and
//! finishing the response the client gets (calls removed, usage of every round).
//!
//! Each module has the same functions; [`Wire`] picks the module for a dialect.

mod anthropic;
mod bedrock;
mod gemini;
mod openai_chat;
mod openai_responses;
mod splice;

use super::{Edits, Frame, Opening, Reply, ToolResult};
use crate::dialect::{Dialect, Problem};
use serde_json::Value;

/// The response-side functions of one dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wire(pub Dialect);

impl Wire {
    /// The chain of keys of the conversation array that follow-ups append to.
    pub fn conversation_path(self) -> &'static [&'static str] {
        match self.0 {
            Dialect::OpenaiResponses => &["input"],
            Dialect::Gemini => &["contents"],
            _ => &["messages"],
        }
    }

    /// One function tool in this dialect's tools-array format. `parameters` is a JSON Schema
    /// object.
    pub fn tool_entry(self, name: &str, description: &str, parameters: &Value) -> String {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::tool_entry(name, description, parameters),
            Dialect::OpenaiResponses => openai_responses::tool_entry(name, description, parameters),
            Dialect::Anthropic => anthropic::tool_entry(name, description, parameters),
            Dialect::Gemini => gemini::tool_entry(name, description, parameters),
            Dialect::Bedrock => bedrock::tool_entry(name, description, parameters),
        }
    }

    /// Reads a whole (not streamed) success response body.
    pub fn read_reply(self, body: &str) -> Result<Reply, Problem> {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::read_reply(body),
            Dialect::OpenaiResponses => openai_responses::read_reply(body),
            Dialect::Anthropic => anthropic::read_reply(body),
            Dialect::Gemini => gemini::read_reply(body),
            Dialect::Bedrock => bedrock::read_reply(body),
        }
    }

    /// Reads a whole event stream, already split into frames.
    pub fn read_stream(self, frames: &[Frame]) -> Result<Reply, Problem> {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::read_stream(frames),
            Dialect::OpenaiResponses => openai_responses::read_stream(frames),
            Dialect::Anthropic => anthropic::read_stream(frames),
            Dialect::Gemini => gemini::read_stream(frames),
            Dialect::Bedrock => Err(Problem::BadShape),
        }
    }

    /// What the first frames of a stream show: enough to release it, or to hold it.
    pub fn opening(self, frames: &[Frame]) -> Opening {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::opening(frames),
            Dialect::OpenaiResponses => openai_responses::opening(frames),
            Dialect::Anthropic => anthropic::opening(frames),
            Dialect::Gemini => gemini::opening(frames),
            Dialect::Bedrock => Opening::Answer,
        }
    }

    /// The names of the tool calls that start in `frame` of a stream.
    pub fn calls_started(self, frame: &Frame) -> Vec<String> {
        let Ok(event) = serde_json::from_str::<Value>(&frame.data) else {
            return Vec::new();
        };
        let at = |v: &Value, key: &str| v.get(key).cloned().unwrap_or(Value::Null);
        let each = |v: Value| match v {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
        match self.0 {
            Dialect::Anthropic => {
                let block = at(&event, "content_block");
                let starts =
                    at(&event, "type") == "content_block_start" && at(&block, "type") == "tool_use";
                if starts {
                    name(&block).into_iter().collect()
                } else {
                    Vec::new()
                }
            }
            Dialect::OpenaiChat => each(at(&event, "choices"))
                .iter()
                .flat_map(|c| each(at(&at(c, "delta"), "tool_calls")))
                .filter_map(|call| name(&at(&call, "function")))
                .collect(),
            Dialect::Gemini => each(at(&event, "candidates"))
                .iter()
                .flat_map(|c| each(at(&at(c, "content"), "parts")))
                .filter_map(|part| name(&at(&part, "functionCall")))
                .collect(),
            Dialect::OpenaiResponses => {
                let item = at(&event, "item");
                let starts = at(&event, "type") == "response.output_item.added"
                    && at(&item, "type") == "function_call";
                if starts {
                    name(&item).into_iter().collect()
                } else {
                    Vec::new()
                }
            }
            Dialect::Bedrock => Vec::new(),
        }
    }

    /// Whether a stream already partly sent can be continued with another response's stream
    /// ([`Wire::continue_stream`]).
    pub fn continues_streams(self) -> bool {
        !matches!(self.0, Dialect::Bedrock)
    }

    /// What to send after the events `sent` so that the client's stream goes on as the
    /// complete stream `next` (a later round's response) would: Anthropic drops the second
    /// `message_start` and numbers the new content blocks after the ones sent; OpenAI
    /// Responses drops the second `response.created`, numbers items and events on, and puts
    /// the items sent first in the final response's `output`; OpenAI Chat chunks and Gemini
    /// candidates simply follow.
    pub fn continue_stream(self, sent: &[Frame], next: &str) -> Result<String, Problem> {
        match self.0 {
            Dialect::Anthropic => anthropic::continue_stream(sent, &super::sse::frames(next).0),
            Dialect::OpenaiResponses => {
                openai_responses::continue_stream(sent, &super::sse::frames(next).0)
            }
            Dialect::OpenaiChat | Dialect::Gemini => Ok(next.to_owned()),
            Dialect::Bedrock => Err(Problem::BadShape),
        }
    }

    /// The id of the response a whole event stream carries, where the dialect has stored
    /// responses that later requests name (OpenAI Responses' `previous_response_id`).
    pub fn stream_response_id(self, frames: &[Frame]) -> Option<String> {
        match self.0 {
            Dialect::OpenaiResponses => frames
                .iter()
                .find_map(|f| openai_responses::response_id(&f.data)),
            _ => None,
        }
    }

    /// The conversation items that answer `results`, to append after the assistant turn.
    pub fn tool_results(self, results: &[ToolResult]) -> Vec<String> {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::tool_results(results),
            Dialect::OpenaiResponses => openai_responses::tool_results(results),
            Dialect::Anthropic => anthropic::tool_results(results),
            Dialect::Gemini => gemini::tool_results(results),
            Dialect::Bedrock => bedrock::tool_results(results),
        }
    }

    /// The whole response the client gets: `edits` applied.
    pub fn finish_reply(self, body: &str, edits: &Edits) -> Result<String, Problem> {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::finish_reply(body, edits),
            Dialect::OpenaiResponses => openai_responses::finish_reply(body, edits),
            Dialect::Anthropic => anthropic::finish_reply(body, edits),
            Dialect::Gemini => gemini::finish_reply(body, edits),
            Dialect::Bedrock => bedrock::finish_reply(body, edits),
        }
    }

    /// The whole event stream the client gets: `edits` applied, every frame written again.
    pub fn finish_stream(self, frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
        match self.0 {
            Dialect::OpenaiChat => openai_chat::finish_stream(frames, edits),
            Dialect::OpenaiResponses => openai_responses::finish_stream(frames, edits),
            Dialect::Anthropic => anthropic::finish_stream(frames, edits),
            Dialect::Gemini => gemini::finish_stream(frames, edits),
            Dialect::Bedrock => Err(Problem::BadShape),
        }
    }
}
