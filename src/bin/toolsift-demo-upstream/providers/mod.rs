//! The LLM APIs the demo upstream plays, one file each, behind one trait: [`Provider`].
//!
//! Everything the demo knows of an API is in its file: which paths are its endpoints, the
//! checks the real API makes of a request's tools, tool choice and conversation (so that a
//! filter bug shows up as the provider's 400 rather than as a silent success), the answer whole
//! and streamed with the shapes of the scripted model's tool calls, and the error body. The
//! server, the report model (`report.rs`) and the scripted model (`scripted.rs`) reach a
//! provider only through the trait, found for a path by [`Endpoint::detect`], the one place the
//! providers are listed. `shared.rs` holds what they have in common.

use std::borrow::Cow;

use bytes::Bytes;
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::Value;

use crate::ReplyBody;
use crate::stored::Responses;

mod anthropic;
mod bedrock;
mod gemini;
mod ollama;
mod openai;
pub(crate) mod openai_chat;
mod openai_responses;
pub(crate) mod shared;

use shared::{Catalog, ErrorShape, RawObject, Rejection, is_true, parse_body, string_value};

/// One LLM API as the demo plays it.
pub(crate) trait Provider: Sync {
    /// The API's name in `x-demo-dialect` and in the report (`openai_chat`, `gemini`...).
    fn name(&self) -> &'static str;

    /// What `path` (without its query string) says when it is one of the API's generate
    /// endpoints: whether the path itself asks for a stream, and the model it names.
    fn recognize(&self, path: &str) -> Option<PathFacts>;

    /// The request's tools, in order, checked as the API checks them (with the tool choice,
    /// which must name one of them).
    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection>;

    /// Whether the body asks for a stream (the path's say is in [`PathFacts`]).
    fn body_streams(&self, request: &RawObject<'_>) -> bool {
        is_true(request.get("stream"))
    }

    /// Whether a stream ends with a chunk of usage (OpenAI Chat's
    /// `stream_options.include_usage`).
    fn include_usage(&self, _request: &RawObject<'_>) -> bool {
        false
    }

    /// The API's answer to a request it would not authenticate (Bedrock's SigV4 check), if it
    /// would not. Requests without credentials pass, as everywhere in the demo.
    fn signature_refusal(&self, _parts: &Parts, _body: &[u8]) -> Option<Response<ReplyBody>> {
        None
    }

    /// The request as the model reads it, for an API that keeps conversations (OpenAI
    /// Responses' `previous_response_id`): the stored conversation first, checked as the API
    /// checks it whichever model answers. `None` for the others, which read the body as sent.
    fn resolve(&self, _body: &[u8], _store: &Responses) -> Option<Result<Value, Rejection>> {
        None
    }

    /// Keeps `turn`, the answer to `resolved`, for the requests that continue it.
    fn keep(&self, _resolved: &Value, _turn: &Turn, _store: &Responses) {}

    /// The names of the request's function tools, in order: the only ones the scripted model
    /// calls (hosted and server tools are left out).
    fn function_tools(&self, request: &Value) -> Vec<String>;

    /// Checks that the conversation's tool calls and results pair up as the API requires, and
    /// reads what the scripted model needs of it.
    fn read_history(&self, request: &Value) -> Result<History, Rejection>;

    /// Why the scripted model does not answer on this endpoint, if it does not.
    fn scripted_refusal(&self, _path: &PathFacts) -> Option<Rejection> {
        None
    }

    /// The whole answer.
    fn whole(&self, turn: &Turn) -> Value;

    /// The answer as the API streams it: its event sequence, one frame per event, framed as the
    /// API frames it. `query` is the URL's query string (Gemini's `alt=sse`).
    fn stream(&self, turn: &Turn, query: Option<&str>) -> Stream;

    /// The API's error answer for `status`.
    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape;
}

/// Every provider, in the order their paths are tried (the first to recognize one wins).
const PROVIDERS: [&dyn Provider; 6] = [
    &gemini::Gemini,
    &bedrock::Bedrock,
    &openai_chat::OpenAiChat,
    &openai_responses::OpenAiResponses,
    &anthropic::Anthropic,
    &ollama::Ollama,
];

/// What a request path says besides the API.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PathFacts {
    /// The path asks for a stream (Gemini and Bedrock put that in the path, the others in the
    /// body).
    pub(crate) streams: bool,
    /// The model the path names, if it names one.
    pub(crate) model: Option<String>,
}

/// An LLM endpoint: the API that serves a path, and what the path says.
pub(crate) struct Endpoint {
    pub(crate) provider: &'static dyn Provider,
    pub(crate) path: PathFacts,
}

impl Endpoint {
    /// The endpoint of `path` (without the query string), `None` if no API serves it.
    pub(crate) fn detect(path: &str) -> Option<Self> {
        PROVIDERS.iter().find_map(|provider| {
            let facts = provider.recognize(path)?;
            Some(Self {
                provider: *provider,
                path: facts,
            })
        })
    }
}

/// What the demo reads from a valid request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Inspection {
    /// Tool names in the order received; tools without a name are reported by their type.
    pub(crate) tools: Vec<String>,
    pub(crate) stream: bool,
    pub(crate) model: Option<String>,
    /// OpenAI Chat's `stream_options.include_usage`.
    pub(crate) include_usage: bool,
}

impl Inspection {
    /// The model an answer names: the request's, else the path's, else the demo's own.
    pub(crate) fn answering_model(&self, endpoint: &Endpoint) -> String {
        self.model
            .clone()
            .or_else(|| endpoint.path.model.clone())
            .unwrap_or_else(|| crate::DEFAULT_MODEL.to_owned())
    }
}

/// Reads a request body as the endpoint's API does: a JSON object whose tools pass its checks.
pub(crate) fn inspect_request(endpoint: &Endpoint, body: &[u8]) -> Result<Inspection, Rejection> {
    let request = parse_body(body)?;
    let provider = endpoint.provider;
    let catalog = provider.tools(&request)?;
    Ok(Inspection {
        tools: catalog.names.into_iter().map(Cow::into_owned).collect(),
        stream: endpoint.path.streams || provider.body_streams(&request),
        model: request
            .get("model")
            .and_then(string_value)
            .map(Cow::into_owned),
        include_usage: provider.include_usage(&request),
    })
}

/// What the scripted model reads of the conversation.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// Tool results in the conversation: a follow-up has at least one.
    pub(crate) tool_results: usize,
    /// The text of the latest user turn that has text.
    pub(crate) user_text: Option<String>,
}

/// A tool call of the model's answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    pub(crate) name: String,
    /// A JSON object.
    pub(crate) arguments: Value,
}

impl Call {
    /// The arguments as JSON text, as the APIs that send them as a string write them.
    pub(crate) fn arguments_text(&self) -> String {
        self.arguments.to_string()
    }
}

/// Everything an answer is built from, whichever model gives it and whatever the API.
pub(crate) struct Turn {
    /// The request's number in `/stats`: answer and call ids carry it, so they are unique
    /// within a run.
    pub(crate) sequence: u64,
    /// Seconds since the Unix epoch.
    pub(crate) created: u64,
    pub(crate) model: String,
    /// The text part, which comes before the calls.
    pub(crate) text: Option<String>,
    pub(crate) calls: Vec<Call>,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    /// OpenAI Chat's `stream_options.include_usage`.
    pub(crate) include_usage: bool,
    /// The report model's `toolsift_demo` report, on the whole answer and on a stream's first
    /// event; the scripted model's answers carry none.
    pub(crate) report: Option<Value>,
}

impl Turn {
    /// A call's id: `{prefix}_{sequence}_{index}`.
    pub(crate) fn id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", self.sequence)
    }

    pub(crate) fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub(crate) fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The text in stream deltas: the report's sentence whole, so that a test finds it in one
    /// delta; the scripted model's word by word, as models stream.
    pub(crate) fn text_deltas(&self) -> Vec<String> {
        match (&self.text, &self.report) {
            (None, _) => Vec::new(),
            (Some(text), Some(_)) => vec![text.clone()],
            (Some(text), None) => shared::text_pieces(text),
        }
    }

    /// Adds the report, if this turn has one, to an answer or an event.
    pub(crate) fn add_report(&self, object: &mut Value) {
        if let Some(report) = &self.report {
            shared::with_member(object, crate::report::REPORT_KEY, report.clone());
        }
    }
}

/// A streamed answer: its frames, one per event, and their content type.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) frames: Vec<Bytes>,
    pub(crate) content_type: &'static str,
}

impl Stream {
    /// Server-sent events.
    pub(crate) fn sse(frames: Vec<Bytes>) -> Self {
        Self {
            frames,
            content_type: "text/event-stream",
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the providers' tests.

    use super::{Endpoint, Inspection, inspect_request};
    use crate::providers::shared::Rejection;

    pub(crate) fn inspect(path: &str, body: &str) -> Result<Inspection, Rejection> {
        let endpoint = Endpoint::detect(path)
            .ok_or_else(|| Rejection::new(format!("no provider for {path}")))?;
        inspect_request(&endpoint, body.as_bytes())
    }

    pub(crate) fn tools(path: &str, body: &str) -> Result<Vec<String>, Rejection> {
        inspect(path, body).map(|inspection| inspection.tools)
    }

    pub(crate) fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    /// The rejection's message, or a note that the request was accepted.
    pub(crate) fn rejection_message(path: &str, body: &str) -> String {
        match inspect(path, body) {
            Ok(inspection) => format!("accepted with tools {:?}", inspection.tools),
            Err(rejection) => rejection.message,
        }
    }

    pub(crate) const CHAT: &str = "/v1/chat/completions";
    pub(crate) const RESPONSES: &str = "/v1/responses";
    pub(crate) const MESSAGES: &str = "/v1/messages";
    pub(crate) const GEMINI: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
    pub(crate) const BEDROCK: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse";
    pub(crate) const OLLAMA: &str = "/api/chat";
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn provider_of(path: &str) -> Option<&'static str> {
        Endpoint::detect(path).map(|endpoint| endpoint.provider.name())
    }

    #[test]
    fn detects_the_provider_from_the_path() {
        let cases = [
            ("/v1/chat/completions", Some("openai_chat")),
            (
                "/openai/deployments/gpt-4o/chat/completions",
                Some("openai_chat"),
            ),
            ("/v1/responses", Some("openai_responses")),
            ("/openai/responses", Some("openai_responses")),
            ("/v1/messages", Some("anthropic")),
            (
                "/v1beta/models/gemini-2.0-flash:generateContent",
                Some("gemini"),
            ),
            (
                "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-1.5-pro:streamGenerateContent",
                Some("gemini"),
            ),
            ("/model/amazon.nova-pro-v1:0/converse", Some("bedrock")),
            (
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/converse-stream",
                Some("bedrock"),
            ),
            (
                "/model/arn:aws:bedrock:us-east-1:1:inference-profile/us.x/converse",
                Some("bedrock"),
            ),
            ("/api/chat", Some("ollama")),
            ("/ollama/api/chat", Some("ollama")),
            ("/api/generate", None),
            ("/v1/completions", None),
            ("/v1/messages/count_tokens", None),
            ("/v1beta/models/gemini-2.0-flash:countTokens", None),
            ("/model//converse", None),
            ("/model/x/invoke", None),
            ("/converse", None),
            ("/embeddings/ok", None),
            ("/", None),
            ("", None),
        ];
        for (path, expected) in cases {
            assert_eq!(provider_of(path), expected, "{path}");
        }
    }

    #[test]
    fn streaming_paths_and_models() {
        let facts = |path: &str| Endpoint::detect(path).map(|endpoint| endpoint.path);
        let said = |streams, model: Option<&str>| {
            Some(PathFacts {
                streams,
                model: model.map(str::to_owned),
            })
        };
        assert_eq!(
            facts("/v1beta/models/gemini-2.0-flash:streamGenerateContent"),
            said(true, Some("gemini-2.0-flash"))
        );
        assert_eq!(facts(GEMINI), said(false, Some("gemini-2.0-flash")));
        assert_eq!(
            facts("/model/amazon.nova-pro-v1:0/converse-stream"),
            said(true, Some("amazon.nova-pro-v1:0"))
        );
        assert_eq!(
            facts(BEDROCK),
            said(false, Some("anthropic.claude-3-5-sonnet-20240620-v1:0"))
        );
        assert_eq!(facts(CHAT), said(false, None));
    }

    #[test]
    fn stream_flag_comes_from_body_or_path() {
        let streams = |path, body| inspect(path, body).map(|inspection| inspection.stream);
        assert_eq!(streams(CHAT, r#"{"stream": true}"#), Ok(true));
        assert_eq!(streams(CHAT, r#"{"stream": false}"#), Ok(false));
        assert_eq!(streams(RESPONSES, r#"{"stream":true}"#), Ok(true));
        assert_eq!(streams(MESSAGES, r#"{"stream": true}"#), Ok(true));
        assert_eq!(streams(MESSAGES, "{}"), Ok(false));
        // Gemini and Bedrock have no `stream` member: only the path counts.
        assert_eq!(streams(GEMINI, r#"{"stream": true}"#), Ok(false));
        assert_eq!(
            streams("/v1beta/models/g:streamGenerateContent", "{}"),
            Ok(true)
        );
        assert_eq!(streams("/model/m/converse-stream", "{}"), Ok(true));
        assert_eq!(
            inspect(
                CHAT,
                r#"{"stream": true, "stream_options": {"include_usage": true}}"#
            )
            .map(|inspection| inspection.include_usage),
            Ok(true)
        );
    }

    #[test]
    fn rejects_bodies_that_are_not_json_objects() {
        for path in [CHAT, RESPONSES, MESSAGES, GEMINI, BEDROCK, OLLAMA] {
            assert!(
                rejection_message(path, "{\"model\": ").starts_with("We could not parse"),
                "{path}"
            );
            assert!(
                rejection_message(path, "").starts_with("We could not parse"),
                "{path}"
            );
            assert!(
                rejection_message(path, "{} trailing").starts_with("We could not parse"),
                "{path}"
            );
            assert_eq!(
                rejection_message(path, "[1, 2]"),
                "The request body must be a JSON object.",
                "{path}"
            );
            assert_eq!(
                rejection_message(path, "\"text\""),
                "The request body must be a JSON object.",
                "{path}"
            );
        }
    }

    #[test]
    fn reads_keys_and_names_with_escapes() {
        // Escaped keys and names cannot be borrowed from the body; they must still match.
        let body = r#"{"tool\u0073": [{"type": "function", "function": {"n\u0061me": "caf\u00e9"}}],
            "tool_choice": {"type": "function", "function": {"name": "café"}}}"#;
        assert_eq!(tools(CHAT, body), Ok(names(&["café"])));
    }

    #[test]
    fn json_paths_render_like_provider_params() {
        let tools = shared::JsonPath::Root("tools");
        let entry = tools.index(3);
        let function = entry.member("function");
        assert_eq!(
            function.member("name").to_string(),
            "tools[3].function.name"
        );
    }

    #[test]
    fn finds_the_function_tools_of_each_provider() {
        let function_tools = |path: &str, request: Value| {
            Endpoint::detect(path)
                .map(|endpoint| endpoint.provider.function_tools(&request))
                .unwrap_or_default()
        };
        let chat = serde_json::json!({ "tools": [
            { "type": "function", "function": { "name": "a" } },
            { "type": "custom", "custom": { "name": "c" } },
            { "type": "function", "function": { "name": "b" } },
        ] });
        assert_eq!(function_tools(CHAT, chat), ["a", "b"]);
        let responses = serde_json::json!({ "tools": [
            { "type": "web_search" },
            { "type": "function", "name": "a" },
        ] });
        assert_eq!(function_tools(RESPONSES, responses), ["a"]);
        let anthropic = serde_json::json!({ "tools": [
            { "name": "a", "input_schema": {} },
            { "type": "web_search_20250305", "name": "web_search" },
            { "type": "custom", "name": "b", "input_schema": {} },
        ] });
        assert_eq!(function_tools(MESSAGES, anthropic), ["a", "b"]);
        let gemini = serde_json::json!({ "tools": [
            { "functionDeclarations": [{ "name": "a" }, { "name": "b" }] },
            { "googleSearch": {} },
            { "function_declarations": [{ "name": "c" }] },
        ] });
        assert_eq!(function_tools(GEMINI, gemini), ["a", "b", "c"]);
        let bedrock = serde_json::json!({ "toolConfig": { "tools": [
            { "toolSpec": { "name": "a" } },
            { "cachePoint": { "type": "default" } },
        ] } });
        assert_eq!(function_tools(BEDROCK, bedrock), ["a"]);
        assert!(function_tools(CHAT, serde_json::json!({})).is_empty());
    }
}
