//! What a dialect must know, as two traits: the request side (reading a body, its tools, and
//! writing tools and `tool_choice` in the dialect's shapes) and the response side (reading the
//! model's turn, whole or streamed, writing tool results, continuing and finishing what the
//! client gets). Default methods say what a dialect cannot do; search mode then falls back to
//! filtering (see [`ResponseCodec::path_stream`]).
//!
//! Each dialect's folder implements both for one unit struct, and [`super::Dialect::codec`]
//! is the one place that picks it.

use super::{Entry, Holder, Item, Layout, Problem, Request};
use crate::json::ArrayLayout;
pub use crate::sse::{Frame, Framing};
use serde_json::{Map, Value};
use std::ops::Range;

/// Both sides of one dialect.
pub trait Codec: RequestCodec + ResponseCodec {}

impl<T: RequestCodec + ResponseCodec> Codec for T {}

/// The request side of a dialect.
pub trait RequestCodec: Sync {
    /// The name used in configuration (`dialect`), stats and headers.
    fn name(&self) -> &'static str;

    /// The folder of `../shared/conformance` (or `tests/conformance`) holding this API's
    /// recorded traffic.
    fn recordings(&self) -> &'static str;

    /// Whether an API path (query string and trailing `/` removed) is one of this API's
    /// generation endpoints.
    fn serves(&self, path: &str) -> bool;

    /// The OpenTelemetry GenAI conventions' `gen_ai.provider.name` and `gen_ai.operation.name`
    /// of this API's generation requests ([`crate::gen_ai`]).
    fn gen_ai(&self) -> (&'static str, &'static str);

    /// The model a request's path names, as it is in the path (APIs that name it there, not in
    /// the body).
    fn model_in_path<'a>(&self, _path: &'a str) -> Option<&'a str> {
        None
    }

    /// The chain of keys under which the tools array sits.
    fn tools_path(&self) -> &'static [&'static str] {
        &["tools"]
    }

    /// What ranking and selection need from a body, besides the tools array (which the
    /// pipeline blanks out before calling this).
    fn parse(&self, body: &str) -> Result<Request, Problem>;

    /// The entries of a tools container, not read yet, and the layout to splice it. The default
    /// is one flat array, with its item ranges when a scan already found them.
    fn split<'a>(
        &self,
        container: &'a str,
        scanned: Option<Vec<Range<usize>>>,
    ) -> Result<(Vec<Item<'a>>, Layout), Problem> {
        flat_split(container, scanned)
    }

    /// One entry of the tools container read as a function tool; `None` for anything else
    /// (a built-in tool, kept and never ranked, when it is JSON).
    fn entry(&self, text: &str) -> Option<Entry>;

    /// One function tool in this API's tools-array format; `parameters` is a JSON Schema.
    fn tool_entry(&self, name: &str, description: &str, parameters: &Value) -> String;

    /// The body with `tool_choice` (or the API's equivalent) naming tool `name`; `None` if it
    /// cannot be written.
    fn with_tool_choice(&self, body: &str, name: &str) -> Option<String>;

    /// The provider's own tool search, for search mode's `native_search` rules.
    fn provider_search(&self) -> ProviderSearch {
        ProviderSearch::Unsupported
    }

    /// The name access rules govern a built-in entry of this API's tools container by (an
    /// entry [`RequestCodec::entry`] does not read as a function tool); `None`: not a tool
    /// (Bedrock's `cachePoint`), never governed.
    fn builtin_name(&self, entry: &str) -> Option<String> {
        super::shared::builtin_name(entry)
    }

    /// The arrays of `body` whose entries access rules govern one by one besides the tools
    /// container's functions: remote MCP connectors and namespaces ([`Holder`]). None by
    /// default; an entry of a shape the API does not accept is left out (the provider
    /// refuses it).
    fn holders(&self, _body: &str) -> Vec<Holder> {
        Vec::new()
    }

    /// The connector entry `entry` with only `tools` allowed (its allowed-tools list
    /// written), every other byte kept; `None` if it cannot be written.
    fn narrow_connector(&self, _entry: &str, _tools: &[String]) -> Option<String> {
        None
    }

    /// Whether a built-in entry of this API's tools container hands the tools to the
    /// provider's own tool search (its search tool; Responses: a `namespace` too): the request
    /// then goes upstream untouched ([`crate::pipeline::Skip::NativeSearch`]).
    fn native_search_entry(&self, entry: &str) -> bool {
        super::shared::is_search_tool(entry)
    }

    /// The insertion into `body` that appends `note` to the result answering the latest call
    /// of `tool` (the loop guard's guidance; see [`super::shared::note`]); `None` when that
    /// call has no result in the body, or its result takes no note.
    fn note_result(&self, _body: &str, _tool: &str, _note: &str) -> Option<(Range<usize>, String)> {
        None
    }

    /// Why a body of unknown path looks like this API (`toolsift explain`), or `None`. The
    /// first dialect that recognises a body wins; OpenAI Chat takes what none recognises.
    fn recognises(&self, _body: &Map<String, Value>) -> Option<&'static str> {
        None
    }
}

/// The provider's own tool search (`defer_loading` tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderSearch {
    /// The API has none, or no `defer_loading`.
    Unsupported,
    /// Its servers differ: only a configured tool is sent.
    OperatorDefined,
    /// This tool entry, and the beta header it needs when one is configured.
    Tool { entry: String, beta: bool },
}

/// What an API path says about a response stream, for search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStream {
    /// The body's `stream` decides.
    Body,
    /// The path asks for a stream search mode can follow.
    Stream,
    /// A stream search mode cannot follow: such requests are filtered instead.
    Unsupported,
}

/// The response side of a dialect, for search mode.
pub trait ResponseCodec: Sync {
    /// The chain of keys of the conversation array that follow-ups append to.
    fn conversation_path(&self) -> &'static [&'static str] {
        &["messages"]
    }

    /// How this API's response streams are framed.
    fn framing(&self) -> Framing {
        Framing::Sse
    }

    /// What the path says about streaming.
    fn path_stream(&self, _path: &str) -> PathStream {
        PathStream::Body
    }

    /// Whether the access rules' check of answers (which reads a stream whole) can read the
    /// answer to a request on this path: every stream search mode can follow, and streams it
    /// cannot but whose framing the codec reads (Bedrock's `converse-stream`).
    fn guard_reads(&self, path: &str) -> bool {
        self.path_stream(path) != PathStream::Unsupported
    }

    /// Reads a whole (not streamed) success response body.
    fn read_reply(&self, body: &str) -> Result<Reply, Problem>;

    /// Reads a whole event stream, already split into frames.
    fn read_stream(&self, _frames: &[Frame]) -> Result<Reply, Problem> {
        Err(Problem::BadShape)
    }

    /// What the first frames of a stream show: enough to release it, or to hold it.
    fn opening(&self, _frames: &[Frame]) -> Opening {
        Opening::Answer
    }

    /// The names of the tool calls that start in one event of a stream (its data as JSON).
    fn calls_in_event(&self, _event: &Value) -> Vec<String> {
        Vec::new()
    }

    /// The names of the tool calls that start in `frame` of a stream.
    fn calls_started(&self, frame: &Frame) -> Vec<String> {
        serde_json::from_str::<Value>(&frame.data)
            .map(|event| self.calls_in_event(&event))
            .unwrap_or_default()
    }

    /// The calls of remote MCP connectors' tools in the turn `reply` (Anthropic
    /// `mcp_tool_use` blocks, Responses `mcp_call` items), as `<label>/<tool>`: the provider
    /// ran them already. None by default.
    fn connector_calls(&self, _reply: &Reply) -> Vec<String> {
        Vec::new()
    }

    /// The namespace `call` was made in (Responses: a `function_call` item's `namespace`),
    /// if any: access rules then decide it by `<namespace>.<name>` and `<name>`.
    fn call_namespace(&self, _reply: &Reply, _call: &Call) -> Option<String> {
        None
    }

    /// Whether a stream already partly sent can be continued with another response's stream
    /// ([`ResponseCodec::continue_stream`]).
    fn continues_streams(&self) -> bool {
        false
    }

    /// What to send after the events `sent` so that the client's stream goes on as the
    /// complete stream `next` (a later round's whole response) would.
    fn continue_stream(&self, _sent: &[Frame], _next: &str) -> Result<String, Problem> {
        Err(Problem::BadShape)
    }

    /// The id of the response an event carries, where the API stores responses that later
    /// requests name (OpenAI Responses' `previous_response_id`).
    fn response_id(&self, _event: &str) -> Option<String> {
        None
    }

    /// The id of the response a whole event stream carries (see [`ResponseCodec::response_id`]).
    fn stream_response_id(&self, frames: &[Frame]) -> Option<String> {
        frames.iter().find_map(|f| self.response_id(&f.data))
    }

    /// The conversation items that answer `results`, to append after the assistant turn.
    fn tool_results(&self, results: &[ToolResult]) -> Vec<String>;

    /// The whole response the client gets: `edits` applied.
    fn finish_reply(&self, body: &str, edits: &Edits) -> Result<String, Problem>;

    /// The whole event stream the client gets: `edits` applied, every frame written again.
    fn finish_stream(&self, _frames: &[Frame], _edits: &Edits) -> Result<String, Problem> {
        Err(Problem::BadShape)
    }

    /// A whole response with one call of tool `name` with `arguments`, for a request the
    /// gateway answers itself (`gating.claim: "answer"`); `model` echoed where the API does.
    fn claimed_answer(&self, name: &str, arguments: &Value, model: &str) -> Value;
}

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

/// The flat split shared by every dialect whose tools are one array: a structural scan that
/// does not parse the entries (the catalog cache reads only entries it has not seen).
pub fn flat_split(
    container: &str,
    scanned: Option<Vec<Range<usize>>>,
) -> Result<(Vec<Item<'_>>, Layout), Problem> {
    let spans = match scanned {
        Some(spans) => spans,
        None => crate::json::array_item_spans(container).ok_or(Problem::BadShape)?,
    };
    let items = spans
        .iter()
        .map(|span| Item {
            text: container.get(span.clone()).unwrap_or_default(),
            builtin: false,
        })
        .collect();
    let layout = ArrayLayout {
        span: 0..container.len(),
        items: spans,
    };
    Ok((items, Layout::Flat(layout)))
}
