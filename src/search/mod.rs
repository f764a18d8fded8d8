//! Search mode: the model sees a `find_tools` meta-tool instead of the whole catalog, and the
//! gateway answers it.
//!
//! Request side ([`plan`]): the tools array the upstream gets is the meta-tool, the
//! `always_include` tools, the tools the conversation already called (first-call order) and
//! the `eager_k` best-ranked ones; every other tool is deferred. Response side ([`round`]):
//! when the model calls only `find_tools`, the search runs over the whole catalog and the
//! follow-up request is the previous one plus the model's turn, the tool results and the found
//! tools appended to the tools array. What differs per dialect is its codec's
//! ([`crate::dialects::ResponseCodec`]).
//!
//! Pure Rust, no proxy-wasm: the filter and the CLI share it.

pub mod alias;
pub mod hold;
pub mod plan;
pub mod respond;
#[doc(hidden)]
pub mod respond_model;
pub mod round;
pub mod sse;

pub use sse::Frame;

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The id its result must name: OpenAI Chat `id`, Responses `call_id`, Anthropic `id`,
    /// Bedrock `toolUseId`; Gemini's `id` when the part has one, else empty.
    pub id: String,
    pub name: String,
    /// The arguments as JSON object text (OpenAI's argument string decoded, Anthropic's and
    /// Bedrock's `input`, Gemini's `args`).
    pub arguments: String,
}

/// Token counts of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

impl Usage {
    /// The sum, saturating: counts come from the provider and may be anything.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            output: self.output.saturating_add(other.output),
        }
    }
}

/// What one model turn said, read from a whole response or a whole event stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Every tool call of the turn, in order.
    pub calls: Vec<Call>,
    pub usage: Option<Usage>,
    /// The assistant turn as conversation items of this dialect's request format (JSON texts),
    /// ready to append to the conversation array of the follow-up request: the response's own
    /// message (or Responses output items) when read from a whole body, rebuilt from the
    /// events when read from a stream.
    pub turn: Vec<String>,
}

/// The answer the gateway gives one call of the meta-tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    pub call: Call,
    /// A JSON object text: `{"tools":[…]}`, or `{"error":"…"}`.
    pub content: String,
    pub is_error: bool,
}

/// Changes to the response the client gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits {
    /// Ids of calls to remove (the meta-tool's, when it was called alongside real tools).
    /// When a call has no id (Gemini), its name is given instead.
    pub drop: Vec<String>,
    /// Calls to rewrite in place (`use_tool` resolved to a real tool): (id, name, arguments
    /// JSON object text).
    pub rename: Vec<(String, String, String)>,
    /// Usage of every round, written in place of the response's own.
    pub usage: Option<Usage>,
    /// Words the client gets from the model in place of the calls dropped (a refusal under
    /// access rules): written where the first dropped call was, or after the turn's own
    /// text. When no call remains, the stop reason becomes the dialect's end of turn.
    pub text: Option<String>,
}

/// What the first frames of a stream show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Nothing decisive yet: keep holding.
    Undecided,
    /// The model is answering (its first output is text): release the stream.
    Answer,
    /// The model's first output is a tool call: hold the stream to its end.
    Calls,
}
