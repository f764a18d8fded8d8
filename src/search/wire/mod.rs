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
