//! The scripted model (`x-demo-model: scripted`): a stand-in model that calls a tool chosen by
//! the request headers, so that search mode (the gateway answering a `find_tools` meta-tool and
//! sending a follow-up) can be driven end to end. The routes and headers are described in the
//! module doc of `main.rs`.
//!
//! The decisions ([`decide`]), the conversation checks ([`read_history`]) and the answers
//! ([`respond`]) are pure, so unit-tested; [`serve`] only wraps them in a response.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::header::{CACHE_CONTROL, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::stored::Responses;
use super::{
    DEFAULT_MODEL, Dialect, Endpoint, Rejection, ReplyBody, add_demo_headers, inspect_request,
    json_response, plain_response, rejection_response, sse_event, summary_sentence, with_member,
};

const MODEL_HEADER: &str = "x-demo-model";
const MODEL_SCRIPTED: &[u8] = b"scripted";
const WANT_HEADER: &str = "x-demo-want";
const SEARCH_TOOL_HEADER: &str = "x-demo-search-tool";
const QUERY_HEADER: &str = "x-demo-query";
const ARGS_HEADER: &str = "x-demo-args";
const SCRIPT_HEADER: &str = "x-demo-script";
const FAIL_FOLLOWUP_HEADER: &str = "x-demo-fail-followup";
const CHUNK_DELAY_HEADER: &str = "x-demo-chunk-delay-ms";

const DEFAULT_SEARCH_TOOL: &str = "find_tools";
/// The tool `use-tool` calls when the wanted tool is absent.
const USE_TOOL: &str = "use_tool";
/// The `limit` of every search call.
const SEARCH_LIMIT: u64 = 5;
/// The text part of `text-first` answers.
const LOOK_UP_TEXT: &str = "Let me look that up.";
/// Output tokens counted per tool call.
const TOKENS_PER_CALL: u64 = 10;
/// The largest `x-demo-chunk-delay-ms`.
const MAX_CHUNK_DELAY_MS: u64 = 60_000;

/// `GET` lists the recorded requests.
pub(super) const LOG_PATH: &str = "/scripted/log";
/// `POST` empties the record.
pub(super) const LOG_RESET_PATH: &str = "/scripted/log/reset";
/// How many requests the log keeps (the latest).
const LOG_CAPACITY: usize = 200;

/// Whether a request asks for the scripted model.
pub(super) fn requested(headers: &HeaderMap) -> bool {
    headers
        .get(MODEL_HEADER)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(MODEL_SCRIPTED))
}

// ---------------------------------------------------------------------------------------------
// Request log
// ---------------------------------------------------------------------------------------------

/// The latest scripted requests, oldest first, as `GET /scripted/log` shows them.
#[derive(Default)]
pub(super) struct Log {
    entries: Mutex<VecDeque<Value>>,
}

impl Log {
    /// Records one request; `body` is `None` when it could not be read.
    pub(super) fn record(&self, parts: &Parts, body: Option<&[u8]>) {
        let entry = json!({
            // With the query string, as Envoy's `:path` (Gemini's `?alt=sse` matters).
            "path": parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path(), |path| path.as_str()),
            "headers": headers_object(&parts.headers),
            "body": logged_body(body),
        });
        // A poisoned lock only means another request panicked mid-push; the log stays usable.
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() == LOG_CAPACITY {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    pub(super) fn snapshot(&self) -> Value {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Value::Array(entries.iter().cloned().collect())
    }

    /// Empties the log; returns how many entries it held.
    pub(super) fn clear(&self) -> usize {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let cleared = entries.len();
        entries.clear();
        cleared
    }
}

/// Every header, name (lowercase, as hyper keeps them) to value; repeated headers are joined
/// with `, ` as HTTP allows.
fn headers_object(headers: &HeaderMap) -> Value {
    let mut object = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        match object.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => {
                object.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
            }
        }
    }
    Value::Object(object)
}

/// The body as parsed JSON; a body that is not JSON as a string, one that could not be read as
/// `null`.
fn logged_body(body: Option<&[u8]>) -> Value {
    let Some(body) = body else {
        return Value::Null;
    };
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

// ---------------------------------------------------------------------------------------------
// The script: what the headers ask of the model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Search,
    AlwaysSearch,
    Mixed,
    TextFirst,
    UseTool,
    Answer,
}

impl Mode {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "search" => Self::Search,
            "always-search" => Self::AlwaysSearch,
            "mixed" => Self::Mixed,
            "text-first" => Self::TextFirst,
            "use-tool" => Self::UseTool,
            "answer" => Self::Answer,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Script {
    want: String,
    search_tool: String,
    /// `None`: the latest user text of the conversation.
    query: Option<String>,
    /// A JSON object.
    args: Value,
    mode: Mode,
    fail_followup: Option<StatusCode>,
    chunk_delay: Duration,
}

impl Script {
    fn from_headers(headers: &HeaderMap) -> Result<Self, Rejection> {
        let want = header_text(headers, WANT_HEADER)?
            .filter(|want| !want.is_empty())
            .ok_or_else(|| {
                Rejection::new(format!(
                    "The scripted model needs the header '{WANT_HEADER}': the name of the tool it wants to call."
                ))
            })?;
        let search_tool = header_text(headers, SEARCH_TOOL_HEADER)?
            .unwrap_or_else(|| DEFAULT_SEARCH_TOOL.to_owned());
        let query = header_text(headers, QUERY_HEADER)?;
        let args = match header_text(headers, ARGS_HEADER)? {
            None => json!({}),
            Some(text) => match serde_json::from_str::<Value>(&text) {
                Ok(args @ Value::Object(_)) => args,
                _ => {
                    return Err(Rejection::new(format!(
                        "The header '{ARGS_HEADER}' must be a JSON object."
                    )));
                }
            },
        };
        let mode = match header_text(headers, SCRIPT_HEADER)? {
            None => Mode::Search,
            Some(text) => Mode::parse(&text).ok_or_else(|| {
                Rejection::new(format!(
                    "The header '{SCRIPT_HEADER}' must be one of: search, always-search, mixed, text-first, use-tool, answer."
                ))
            })?,
        };
        let fail_followup = match header_text(headers, FAIL_FOLLOWUP_HEADER)? {
            None => None,
            Some(text) => Some(
                text.parse::<u16>()
                    .ok()
                    .filter(|code| (400..=599).contains(code))
                    .and_then(|code| StatusCode::from_u16(code).ok())
                    .ok_or_else(|| {
                        Rejection::new(format!(
                            "The header '{FAIL_FOLLOWUP_HEADER}' must be an HTTP status from 400 to 599."
                        ))
                    })?,
            ),
        };
        let chunk_delay = match header_text(headers, CHUNK_DELAY_HEADER)? {
            None => Duration::ZERO,
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms <= MAX_CHUNK_DELAY_MS)
                .map(Duration::from_millis)
                .ok_or_else(|| {
                    Rejection::new(format!(
                        "The header '{CHUNK_DELAY_HEADER}' must be a whole number of milliseconds up to {MAX_CHUNK_DELAY_MS}."
                    ))
                })?,
        };
        Ok(Self {
            want,
            search_tool,
            query,
            args,
            mode,
            fail_followup,
            chunk_delay,
        })
    }
}

/// A header's value as UTF-8 text, `None` when absent.
fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, Rejection> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    String::from_utf8(value.as_bytes().to_vec())
        .map(|text| Some(text.trim().to_owned()))
        .map_err(|_| Rejection::new(format!("The header '{name}' must be UTF-8 text.")))
}

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct PlannedCall {
    name: String,
    /// A JSON object.
    arguments: Value,
}

/// What the model answers: an optional text part, then the calls in order.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    text: Option<String>,
    calls: Vec<PlannedCall>,
}

impl Plan {
    fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            calls: Vec::new(),
        }
    }

    fn calls(calls: Vec<PlannedCall>) -> Self {
        Self { text: None, calls }
    }
}

/// The model's turn. `tools` are the request's function tools, in order; `query` what a search
/// asks for; `answer` the text of `answer` mode.
fn decide(script: &Script, tools: &[String], query: &str, answer: &str) -> Plan {
    let has = |name: &str| tools.iter().any(|tool| tool == name);
    let call = |name: &str, arguments: Value| PlannedCall {
        name: name.to_owned(),
        arguments,
    };
    let want = || call(&script.want, script.args.clone());
    let search = || {
        call(
            &script.search_tool,
            json!({ "query": query, "limit": SEARCH_LIMIT }),
        )
    };
    let searching = || {
        if has(&script.want) {
            Plan::calls(vec![want()])
        } else if has(&script.search_tool) {
            Plan::calls(vec![search()])
        } else {
            Plan::text(format!("no {} available", script.want))
        }
    };
    match script.mode {
        Mode::Answer => Plan::text(answer),
        Mode::Search => searching(),
        Mode::AlwaysSearch if has(&script.search_tool) => Plan::calls(vec![search()]),
        Mode::AlwaysSearch => searching(),
        Mode::Mixed if !has(&script.want) && has(&script.search_tool) => {
            let mut calls = vec![search()];
            if let Some(other) = tools.iter().find(|tool| **tool != script.search_tool) {
                calls.push(call(other, json!({})));
            }
            Plan::calls(calls)
        }
        Mode::Mixed => searching(),
        Mode::TextFirst => {
            let mut plan = searching();
            if !plan.calls.is_empty() {
                plan.text = Some(LOOK_UP_TEXT.to_owned());
            }
            plan
        }
        Mode::UseTool if !has(&script.want) && has(USE_TOOL) => Plan::calls(vec![call(
            USE_TOOL,
            json!({ "query": query, "params": script.args }),
        )]),
        Mode::UseTool => searching(),
    }
}

/// The names of the request's function tools, in order (hosted and server tools left out).
fn function_tools(dialect: Dialect, request: &Value) -> Vec<String> {
    let name = |value: &Value| value.get("name").and_then(Value::as_str).map(str::to_owned);
    let tools = array(request.get("tools")).iter();
    match dialect {
        Dialect::OpenAiChat => tools
            .filter(|tool| type_of(tool) == Some("function"))
            .filter_map(|tool| tool.get("function").and_then(name))
            .collect(),
        Dialect::OpenAiResponses => tools
            .filter(|tool| type_of(tool) == Some("function"))
            .filter_map(name)
            .collect(),
        // Client tools have no type or `custom`; server tools (`web_search_20250305`...) a dated one.
        Dialect::Anthropic => tools
            .filter(|tool| matches!(type_of(tool), None | Some("custom")))
            .filter_map(name)
            .collect(),
        Dialect::Gemini => tools
            .flat_map(|tool| {
                array(
                    tool.get("functionDeclarations")
                        .or_else(|| tool.get("function_declarations")),
                )
            })
            .filter_map(name)
            .collect(),
        Dialect::Bedrock => array(
            request
                .get("toolConfig")
                .and_then(|config| config.get("tools")),
        )
        .iter()
        .filter_map(|tool| tool.get("toolSpec").and_then(name))
        .collect(),
    }
}

/// A tool's `type`.
fn type_of(tool: &Value) -> Option<&str> {
    tool.get("type").and_then(Value::as_str)
}

/// The elements of an array value; none when absent or of another type.
fn array(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

// ---------------------------------------------------------------------------------------------
// Conversation checks
// ---------------------------------------------------------------------------------------------

/// What the model reads of the conversation.
#[derive(Debug, Default, PartialEq, Eq)]
struct History {
    /// Tool results in the conversation: a follow-up has at least one.
    tool_results: usize,
    /// The text of the latest user turn that has text.
    user_text: Option<String>,
}

/// Checks that every tool call of the conversation has its result and every result its call,
/// as the provider does, and reads what the model needs.
fn read_history(dialect: Dialect, request: &Value) -> Result<History, Rejection> {
    match dialect {
        Dialect::OpenAiChat => chat_history(request),
        Dialect::OpenAiResponses => responses_history(request),
        Dialect::Anthropic => anthropic_history(request),
        Dialect::Gemini => gemini_history(request),
        Dialect::Bedrock => bedrock_history(request),
    }
}

fn rejection(message: String, param: String) -> Rejection {
    let mut rejection = Rejection::new(message);
    rejection.param = Some(param);
    rejection
}

/// The conversation array `key` of the request, which must be there.
fn conversation<'a>(request: &'a Value, key: &str) -> Result<&'a [Value], Rejection> {
    match request.get(key) {
        Some(Value::Array(items)) => Ok(items),
        None | Some(Value::Null) => Err(rejection(
            format!("Missing required parameter: '{key}'."),
            key.to_owned(),
        )),
        Some(_) => Err(rejection(
            format!("Invalid type for '{key}': expected an array."),
            key.to_owned(),
        )),
    }
}

/// A string member that must be there.
fn required_str<'a>(object: &'a Value, key: &str, path: &str) -> Result<&'a str, Rejection> {
    object.get(key).and_then(Value::as_str).ok_or_else(|| {
        rejection(
            format!("Missing required parameter: '{path}.{key}'."),
            format!("{path}.{key}"),
        )
    })
}

/// The array of a member, empty when absent or of another type.
fn items<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    array(object.get(key))
}

/// A message's text: a string content, or its text parts (those of `kinds`, or every part with
/// a `text` string when `kinds` is empty) joined with spaces; `None` if there is none.
fn text_of(content: Option<&Value>, kinds: &[&str]) -> Option<String> {
    let texts: Vec<&str> = match content? {
        Value::String(text) => vec![text.as_str()],
        Value::Array(parts) => parts
            .iter()
            .filter(|part| {
                kinds.is_empty()
                    || part
                        .get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|kind| kinds.contains(&kind))
            })
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    let text = texts.join(" ");
    (!text.trim().is_empty()).then_some(text)
}

fn role(message: &Value) -> &str {
    message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Chat: an assistant's `tool_calls[].id` must each be answered by the `role: "tool"` messages
/// right after it (`tool_call_id`), and a tool message must answer one of them.
fn chat_history(request: &Value) -> Result<History, Rejection> {
    let messages = conversation(request, "messages")?;
    let mut history = History::default();
    let mut pending: Vec<String> = Vec::new();
    let mut calls_at = 0;
    let unanswered = |pending: &[String], calls_at: usize| {
        if pending.is_empty() {
            return Ok(());
        }
        Err(rejection(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                pending.join(", ")
            ),
            format!("messages[{calls_at}]"),
        ))
    };
    for (index, message) in messages.iter().enumerate() {
        let path = format!("messages[{index}]");
        if role(message) == "tool" {
            let id = required_str(message, "tool_call_id", &path)?;
            let Some(at) = pending.iter().position(|call| call == id) else {
                return Err(rejection(
                    format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'; no call of the preceding assistant message has the id '{id}'."
                    ),
                    format!("{path}.tool_call_id"),
                ));
            };
            pending.remove(at);
            history.tool_results += 1;
            continue;
        }
        unanswered(&pending, calls_at)?;
        match role(message) {
            "assistant" => {
                for (call_index, call) in items(message, "tool_calls").iter().enumerate() {
                    let id = required_str(call, "id", &format!("{path}.tool_calls[{call_index}]"))?;
                    pending.push(id.to_owned());
                }
                calls_at = index;
            }
            "user" => {
                if let Some(text) = text_of(message.get("content"), &["text"]) {
                    history.user_text = Some(text);
                }
            }
            _ => {}
        }
    }
    unanswered(&pending, calls_at)?;
    Ok(history)
}

/// Responses: each `function_call.call_id` must be answered by a later `function_call_output`
/// with that `call_id`, and each output must answer an earlier call. `request` is read as
/// [`stored::Responses::resolve`](super::stored::Responses::resolve) returns it: a stored
/// conversation that `previous_response_id` continues is already in `input`.
fn responses_history(request: &Value) -> Result<History, Rejection> {
    let mut history = History::default();
    let items = match request.get("input") {
        None | Some(Value::Null) => return Ok(history),
        Some(Value::String(text)) => {
            history.user_text = (!text.trim().is_empty()).then(|| text.clone());
            return Ok(history);
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(rejection(
                "Invalid type for 'input': expected a string or an array.".to_owned(),
                "input".to_owned(),
            ));
        }
    };
    // Call ids in order, and whether each has been answered.
    let mut calls: Vec<(String, bool)> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let path = format!("input[{index}]");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_else(|| {
            if item.get("role").is_some() {
                "message"
            } else {
                ""
            }
        });
        match kind {
            "message" if role(item) == "user" => {
                if let Some(text) = text_of(item.get("content"), &["input_text", "text"]) {
                    history.user_text = Some(text);
                }
            }
            "function_call" => {
                let id = required_str(item, "call_id", &path)?;
                calls.push((id.to_owned(), false));
            }
            "function_call_output" => {
                let id = required_str(item, "call_id", &path)?;
                match calls
                    .iter_mut()
                    .find(|(call, answered)| call == id && !answered)
                {
                    Some((_, answered)) => *answered = true,
                    None => {
                        return Err(rejection(
                            format!(
                                "No tool call found for function call output with call_id {id}."
                            ),
                            "input".to_owned(),
                        ));
                    }
                }
                history.tool_results += 1;
            }
            _ => {}
        }
    }
    if let Some((id, _)) = calls.iter().find(|(_, answered)| !answered) {
        return Err(rejection(
            format!("No tool output found for function call {id}."),
            "input".to_owned(),
        ));
    }
    Ok(history)
}

/// [`responses_history`]'s checks alone, for requests the scripted model does not answer.
pub(super) fn check_responses_conversation(request: &Value) -> Result<(), Rejection> {
    responses_history(request).map(|_| ())
}

/// Anthropic and Bedrock: the tool uses of an assistant message must each be answered by a
/// tool result in the next message, a user one, and its results must answer those uses.
struct TurnCheck {
    /// Ids of the previous assistant message's calls not answered yet.
    pending: Vec<String>,
    /// Index of that message.
    calls_at: usize,
}

impl TurnCheck {
    fn new() -> Self {
        Self {
            pending: Vec::new(),
            calls_at: 0,
        }
    }

    /// Takes the answer to `id`; false if no pending call has it.
    fn answer(&mut self, id: &str) -> bool {
        match self.pending.iter().position(|call| call == id) {
            Some(at) => {
                self.pending.remove(at);
                true
            }
            None => false,
        }
    }
}

fn anthropic_history(request: &Value) -> Result<History, Rejection> {
    let messages = conversation(request, "messages")?;
    let mut history = History::default();
    let mut check = TurnCheck::new();
    let unanswered = |check: &TurnCheck| {
        if check.pending.is_empty() {
            return Ok(());
        }
        Err(rejection(
            format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                check.calls_at,
                check.pending.join(", ")
            ),
            format!("messages.{}", check.calls_at),
        ))
    };
    for (index, message) in messages.iter().enumerate() {
        let blocks = items(message, "content");
        let of_type = |kind: &'static str| {
            blocks
                .iter()
                .enumerate()
                .filter(move |(_, block)| block.get("type").and_then(Value::as_str) == Some(kind))
        };
        if role(message) == "assistant" {
            unanswered(&check)?;
            check.pending.clear();
            for (block_index, block) in of_type("tool_use") {
                let path = format!("messages.{index}.content.{block_index}");
                check
                    .pending
                    .push(required_str(block, "id", &path)?.to_owned());
            }
            check.calls_at = index;
            continue;
        }
        for (block_index, block) in of_type("tool_result") {
            let path = format!("messages.{index}.content.{block_index}");
            let id = required_str(block, "tool_use_id", &path)?;
            if !check.answer(id) {
                return Err(rejection(
                    format!(
                        "{path}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    ),
                    path,
                ));
            }
            history.tool_results += 1;
        }
        unanswered(&check)?;
        if let Some(text) = text_of(message.get("content"), &["text"]) {
            history.user_text = Some(text);
        }
    }
    unanswered(&check)?;
    Ok(history)
}

fn bedrock_history(request: &Value) -> Result<History, Rejection> {
    let messages = conversation(request, "messages")?;
    let mut history = History::default();
    let mut check = TurnCheck::new();
    let unanswered = |check: &TurnCheck| {
        if check.pending.is_empty() {
            return Ok(());
        }
        Err(rejection(
            format!(
                "The toolUse blocks at messages.{}.content must be followed by toolResult blocks with the same ids in the next message. Expected toolResult blocks for the following Ids: {}",
                check.calls_at,
                check.pending.join(", ")
            ),
            format!("messages.{}", check.calls_at),
        ))
    };
    for (index, message) in messages.iter().enumerate() {
        let blocks = items(message, "content");
        let with_member = |key: &'static str| {
            blocks
                .iter()
                .enumerate()
                .filter_map(move |(at, block)| block.get(key).map(|member| (at, member)))
        };
        if role(message) == "assistant" {
            unanswered(&check)?;
            check.pending.clear();
            for (block_index, tool_use) in with_member("toolUse") {
                let path = format!("messages.{index}.content.{block_index}.toolUse");
                check
                    .pending
                    .push(required_str(tool_use, "toolUseId", &path)?.to_owned());
            }
            check.calls_at = index;
            continue;
        }
        for (block_index, result) in with_member("toolResult") {
            let path = format!("messages.{index}.content.{block_index}.toolResult");
            let id = required_str(result, "toolUseId", &path)?;
            if !check.answer(id) {
                return Err(rejection(
                    format!(
                        "The toolResult block at {path} has the toolUseId {id}, which matches no toolUse block of the previous turn."
                    ),
                    path,
                ));
            }
            history.tool_results += 1;
        }
        unanswered(&check)?;
        if let Some(text) = text_of(message.get("content"), &[]) {
            history.user_text = Some(text);
        }
    }
    unanswered(&check)?;
    Ok(history)
}

/// Gemini: a model turn's `functionCall` parts must each be answered, in the next turn, by a
/// `functionResponse` part of the same name, and a response must answer such a call. Calls
/// carry no id, so names are matched (each call once).
fn gemini_history(request: &Value) -> Result<History, Rejection> {
    let contents = conversation(request, "contents")?;
    let mut history = History::default();
    let mut check = TurnCheck::new();
    let unanswered = |check: &TurnCheck| {
        if check.pending.is_empty() {
            return Ok(());
        }
        Err(rejection(
            format!(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn. contents[{}] calls {} without a function response in the next turn.",
                check.calls_at,
                check.pending.join(", ")
            ),
            format!("contents[{}]", check.calls_at),
        ))
    };
    for (index, content) in contents.iter().enumerate() {
        let parts = items(content, "parts");
        let with_member = |camel: &'static str, snake: &'static str| {
            parts.iter().enumerate().filter_map(move |(at, part)| {
                part.get(camel)
                    .or_else(|| part.get(snake))
                    .map(|member| (at, member))
            })
        };
        if role(content) == "model" {
            unanswered(&check)?;
            check.pending.clear();
            for (part_index, call) in with_member("functionCall", "function_call") {
                let path = format!("contents[{index}].parts[{part_index}].functionCall");
                check
                    .pending
                    .push(required_str(call, "name", &path)?.to_owned());
            }
            check.calls_at = index;
            continue;
        }
        for (part_index, response) in with_member("functionResponse", "function_response") {
            let path = format!("contents[{index}].parts[{part_index}].functionResponse");
            let name = required_str(response, "name", &path)?;
            if !check.answer(name) {
                return Err(rejection(
                    format!(
                        "Please ensure that function response turn comes immediately after a function call turn. {path} answers '{name}', which the previous model turn did not call."
                    ),
                    path,
                ));
            }
            history.tool_results += 1;
        }
        unanswered(&check)?;
        if let Some(text) = text_of(content.get("parts"), &[]) {
            history.user_text = Some(text);
        }
    }
    unanswered(&check)?;
    Ok(history)
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

/// What the scripted model answers a request with.
#[derive(Debug)]
enum Outcome {
    /// A 4xx in the dialect's error shape.
    Rejected(StatusCode, Rejection),
    /// `x-demo-fail-followup`: that status, on a request that carries a tool result.
    Failed(StatusCode),
    Whole(Value),
    Stream {
        frames: Vec<Bytes>,
        content_type: &'static str,
        gap: Duration,
    },
}

/// Everything an answer is built from.
struct Turn {
    dialect: Dialect,
    sequence: u64,
    created: u64,
    model: String,
    plan: Plan,
    input_tokens: u64,
    output_tokens: u64,
    include_usage: bool,
}

/// The scripted answer to one request. `query` is the URL's query string (Gemini's `alt=sse`);
/// `tools` receives the tool names to report in the `x-demo-tools` headers.
fn respond(
    headers: &HeaderMap,
    endpoint: &Endpoint,
    query: Option<&str>,
    body: &[u8],
    sequence: u64,
    responses: &Responses,
    tools: &mut Vec<String>,
) -> Outcome {
    let bad = |rejection| Outcome::Rejected(StatusCode::BAD_REQUEST, rejection);
    let script = match Script::from_headers(headers) {
        Ok(script) => script,
        Err(rejection) => return bad(rejection),
    };
    let dialect = endpoint.dialect;
    if dialect == Dialect::Bedrock && endpoint.streaming_path {
        return bad(Rejection::new(
            "The demo upstream's scripted model does not serve converse-stream; use converse.",
        ));
    }
    let inspection = match inspect_request(endpoint, body) {
        Ok(inspection) => inspection,
        Err(rejection) => return bad(rejection),
    };
    // `inspect_request` accepted it, so it is a JSON object.
    let mut request: Value = serde_json::from_slice(body).unwrap_or_default();
    if dialect == Dialect::OpenAiResponses {
        request = match responses.resolve(&request) {
            Ok(resolved) => resolved,
            Err(rejection) => return bad(rejection),
        };
    }
    let history = match read_history(dialect, &request) {
        Ok(history) => history,
        Err(rejection) => return bad(rejection),
    };
    *tools = inspection.tools;
    if let Some(status) = script.fail_followup {
        if history.tool_results > 0 {
            return Outcome::Failed(status);
        }
    }
    let query_text = script
        .query
        .clone()
        .or(history.user_text)
        .unwrap_or_default();
    let plan = decide(
        &script,
        &function_tools(dialect, &request),
        &query_text,
        &summary_sentence(tools),
    );
    let words = plan
        .text
        .as_deref()
        .map_or(0, |text| text.split_whitespace().count());
    let calls = u64::try_from(plan.calls.len()).unwrap_or(u64::MAX);
    let turn = Turn {
        dialect,
        sequence,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        model: inspection
            .model
            .or_else(|| endpoint.path_model.clone())
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned()),
        plan,
        input_tokens: u64::try_from(body.len() / 4).unwrap_or(u64::MAX),
        output_tokens: calls
            .saturating_mul(TOKENS_PER_CALL)
            .saturating_add(u64::try_from(words).unwrap_or(u64::MAX)),
        include_usage: inspection.include_usage,
    };
    if dialect == Dialect::OpenAiResponses {
        let answer = turn.responses_object(true);
        let output = answer.get("output").and_then(Value::as_array);
        responses.keep(
            &request,
            turn.responses_id(),
            output.map_or(&[], Vec::as_slice),
        );
    }
    if !inspection.stream {
        return Outcome::Whole(turn.whole());
    }
    let (frames, content_type) = match dialect {
        Dialect::OpenAiChat => (turn.chat_stream(), "text/event-stream"),
        Dialect::OpenAiResponses => (turn.responses_stream(), "text/event-stream"),
        Dialect::Anthropic => (turn.anthropic_stream(), "text/event-stream"),
        Dialect::Gemini => {
            let sse = query.is_some_and(|query| query.split('&').any(|pair| pair == "alt=sse"));
            gemini_encode(turn.gemini_chunks(), sse)
        }
        // Refused above.
        Dialect::Bedrock => return Outcome::Whole(turn.whole()),
    };
    Outcome::Stream {
        frames,
        content_type,
        gap: script.chunk_delay,
    }
}

/// Serves one scripted request whose body has been read; OpenAI Responses answers are kept in
/// `responses`.
pub(super) fn serve(
    parts: &Parts,
    endpoint: &Endpoint,
    body: &[u8],
    sequence: u64,
    responses: &Responses,
) -> Response<ReplyBody> {
    let dialect = endpoint.dialect;
    let mut tools = Vec::new();
    let outcome = respond(
        &parts.headers,
        endpoint,
        parts.uri.query(),
        body,
        sequence,
        responses,
        &mut tools,
    );
    let mut response = match outcome {
        Outcome::Rejected(status, rejection) => {
            return rejection_response(Some(dialect), status, &rejection);
        }
        Outcome::Failed(status) => failure_response(dialect, status),
        Outcome::Whole(answer) => json_response(StatusCode::OK, &answer),
        Outcome::Stream {
            frames,
            content_type,
            gap,
        } => {
            let mut response = plain_response(
                StatusCode::OK,
                content_type,
                ReplyBody::from(frames).gap(gap),
            );
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
    };
    add_demo_headers(response.headers_mut(), dialect, &tools);
    response
}

/// `x-demo-fail-followup`'s answer: the dialect's error shape, with the error type the provider
/// gives that status.
fn failure_response(dialect: Dialect, status: StatusCode) -> Response<ReplyBody> {
    let code = status.as_u16();
    let reason = status
        .canonical_reason()
        .map_or_else(String::new, |reason| format!(" {reason}"));
    let message = format!("demo upstream failing the follow-up with {code}{reason} as asked");
    let body = match dialect {
        Dialect::OpenAiChat | Dialect::OpenAiResponses => {
            let (kind, error_code) = match code {
                401 => ("invalid_request_error", Some("invalid_api_key")),
                404 => ("invalid_request_error", Some("model_not_found")),
                429 => ("requests", Some("rate_limit_exceeded")),
                500..=599 => ("server_error", None),
                _ => ("invalid_request_error", None),
            };
            json!({ "error": { "message": message, "type": kind, "param": null, "code": error_code } })
        }
        Dialect::Anthropic => {
            let kind = match code {
                401 => "authentication_error",
                402 => "billing_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                504 => "timeout_error",
                529 => "overloaded_error",
                500..=599 => "api_error",
                _ => "invalid_request_error",
            };
            json!({ "type": "error", "error": { "type": kind, "message": message } })
        }
        Dialect::Gemini => {
            let kind = match code {
                401 => "UNAUTHENTICATED",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                409 => "ABORTED",
                429 => "RESOURCE_EXHAUSTED",
                499 => "CANCELLED",
                501 => "UNIMPLEMENTED",
                503 => "UNAVAILABLE",
                504 => "DEADLINE_EXCEEDED",
                500..=599 => "INTERNAL",
                _ => "INVALID_ARGUMENT",
            };
            json!({ "error": { "code": code, "message": message, "status": kind } })
        }
        Dialect::Bedrock => json!({ "message": message }),
    };
    let mut response = json_response(status, &body);
    if dialect == Dialect::Bedrock {
        let kind = match code {
            403 => "AccessDeniedException",
            404 => "ResourceNotFoundException",
            408 => "ModelTimeoutException",
            424 => "ModelErrorException",
            429 => "ThrottlingException",
            503 => "ServiceUnavailableException",
            500..=599 => "InternalServerException",
            _ => "ValidationException",
        };
        response
            .headers_mut()
            .insert("x-amzn-errortype", HeaderValue::from_static(kind));
    }
    response
}

/// A text in stream deltas: one per word, each after the first with its leading space.
fn text_pieces(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for (index, word) in text.split(' ').enumerate() {
        match pieces.last_mut() {
            // Runs of spaces stay in one piece rather than making empty deltas.
            Some(last) if word.is_empty() => last.push(' '),
            Some(_) if index > 0 => pieces.push(format!(" {word}")),
            _ => pieces.push(word.to_owned()),
        }
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// Argument text in stream deltas: up to three pieces cut at character boundaries, so any text
/// of two characters or more (every JSON object) comes in at least two.
fn argument_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}

impl Turn {
    fn id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", self.sequence)
    }

    fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    fn has_calls(&self) -> bool {
        !self.plan.calls.is_empty()
    }

    fn arguments(call: &PlannedCall) -> String {
        call.arguments.to_string()
    }

    fn whole(&self) -> Value {
        match self.dialect {
            Dialect::OpenAiChat => self.chat_whole(),
            Dialect::OpenAiResponses => self.responses_object(true),
            Dialect::Anthropic => self.anthropic_whole(),
            Dialect::Gemini => self.gemini_whole(),
            Dialect::Bedrock => self.bedrock_whole(),
        }
    }

    // --- OpenAI Chat Completions ---

    fn chat_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.total_tokens(),
        })
    }

    fn chat_finish(&self) -> &'static str {
        if self.has_calls() {
            "tool_calls"
        } else {
            "stop"
        }
    }

    fn chat_whole(&self) -> Value {
        let mut message =
            json!({ "role": "assistant", "content": self.plan.text, "refusal": null });
        if self.has_calls() {
            let calls: Vec<Value> = self
                .plan
                .calls
                .iter()
                .enumerate()
                .map(|(index, call)| {
                    json!({
                        "id": self.id("call", index),
                        "type": "function",
                        "function": { "name": call.name, "arguments": Self::arguments(call) },
                    })
                })
                .collect();
            with_member(&mut message, "tool_calls", Value::Array(calls));
        }
        json!({
            "id": format!("chatcmpl-demo{}", self.sequence),
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.chat_finish(),
            }],
            "usage": self.chat_usage(),
            "system_fingerprint": null,
        })
    }

    fn chat_stream(&self) -> Vec<Bytes> {
        let chunk = |choices: Value| {
            let mut chunk = json!({
                "id": format!("chatcmpl-demo{}", self.sequence),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": null,
                "choices": choices,
            });
            // With `include_usage`, OpenAI gives every chunk a `usage`, null until the last.
            if self.include_usage {
                with_member(&mut chunk, "usage", Value::Null);
            }
            sse_event(None, &chunk)
        };
        let choice = |delta: Value, finish_reason: Option<&str>| json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        let mut events = Vec::new();
        if let Some(text) = &self.plan.text {
            events.push(chunk(choice(
                json!({ "role": "assistant", "content": "", "refusal": null }),
                None,
            )));
            for piece in text_pieces(text) {
                events.push(chunk(choice(json!({ "content": piece }), None)));
            }
        }
        for (index, call) in self.plan.calls.iter().enumerate() {
            let mut delta = json!({
                "tool_calls": [{
                    "index": index,
                    "id": self.id("call", index),
                    "type": "function",
                    "function": { "name": call.name, "arguments": "" },
                }],
            });
            // Without text, the first chunk also carries the role, as OpenAI sends it.
            if index == 0 && self.plan.text.is_none() {
                with_member(&mut delta, "role", json!("assistant"));
                with_member(&mut delta, "content", Value::Null);
                with_member(&mut delta, "refusal", Value::Null);
            }
            events.push(chunk(choice(delta, None)));
            for piece in argument_pieces(&Self::arguments(call)) {
                let delta = json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] });
                events.push(chunk(choice(delta, None)));
            }
        }
        events.push(chunk(choice(json!({}), Some(self.chat_finish()))));
        if self.include_usage {
            let mut last = json!({
                "id": format!("chatcmpl-demo{}", self.sequence),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": null,
                "choices": [],
            });
            with_member(&mut last, "usage", self.chat_usage());
            events.push(sse_event(None, &last));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        events
    }

    // --- OpenAI Responses ---

    fn responses_message(&self, text: &str, status: &str) -> Value {
        let content = if status == "completed" {
            json!([{ "type": "output_text", "text": text, "annotations": [] }])
        } else {
            json!([])
        };
        json!({
            "id": format!("msg_demo{}", self.sequence),
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    fn responses_id(&self) -> String {
        format!("resp_demo{}", self.sequence)
    }

    fn responses_call(&self, index: usize, call: &PlannedCall, done: bool) -> Value {
        json!({
            "type": "function_call",
            "id": self.id("fc", index),
            "call_id": self.id("call", index),
            "name": call.name,
            "arguments": if done { Self::arguments(call) } else { String::new() },
            "status": if done { "completed" } else { "in_progress" },
        })
    }

    /// The `response` object: whole and completed when `done`, else in progress and empty.
    fn responses_object(&self, done: bool) -> Value {
        let mut output = Vec::new();
        if done {
            if let Some(text) = &self.plan.text {
                output.push(self.responses_message(text, "completed"));
            }
            for (index, call) in self.plan.calls.iter().enumerate() {
                output.push(self.responses_call(index, call, true));
            }
        }
        let usage = if done {
            json!({
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens(),
            })
        } else {
            Value::Null
        };
        json!({
            "id": self.responses_id(),
            "object": "response",
            "created_at": self.created,
            "status": if done { "completed" } else { "in_progress" },
            "model": self.model,
            "output": output,
            "usage": usage,
        })
    }

    fn responses_stream(&self) -> Vec<Bytes> {
        let mut events = vec![
            json!({ "type": "response.created", "response": self.responses_object(false) }),
            json!({ "type": "response.in_progress", "response": self.responses_object(false) }),
        ];
        let mut output_index = 0_usize;
        if let Some(text) = &self.plan.text {
            let item_id = format!("msg_demo{}", self.sequence);
            let located = |mut event: Value| {
                with_member(&mut event, "item_id", json!(item_id));
                with_member(&mut event, "output_index", json!(output_index));
                with_member(&mut event, "content_index", json!(0));
                event
            };
            events.push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": self.responses_message(text, "in_progress"),
            }));
            events.push(located(json!({
                "type": "response.content_part.added",
                "part": { "type": "output_text", "text": "", "annotations": [] },
            })));
            for piece in text_pieces(text) {
                events.push(located(
                    json!({ "type": "response.output_text.delta", "delta": piece }),
                ));
            }
            events.push(located(
                json!({ "type": "response.output_text.done", "text": text }),
            ));
            events.push(located(json!({
                "type": "response.content_part.done",
                "part": { "type": "output_text", "text": text, "annotations": [] },
            })));
            events.push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": self.responses_message(text, "completed"),
            }));
            output_index += 1;
        }
        for (index, call) in self.plan.calls.iter().enumerate() {
            let item_id = self.id("fc", index);
            events.push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": self.responses_call(index, call, false),
            }));
            let arguments = Self::arguments(call);
            for piece in argument_pieces(&arguments) {
                events.push(json!({
                    "type": "response.function_call_arguments.delta",
                    "item_id": item_id,
                    "output_index": output_index,
                    "delta": piece,
                }));
            }
            events.push(json!({
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": output_index,
                "name": call.name,
                "arguments": arguments,
            }));
            events.push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": self.responses_call(index, call, true),
            }));
            output_index += 1;
        }
        events
            .push(json!({ "type": "response.completed", "response": self.responses_object(true) }));
        events
            .into_iter()
            .zip(0_u64..)
            .map(|(mut event, sequence_number)| {
                with_member(&mut event, "sequence_number", json!(sequence_number));
                let name = event
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                sse_event(Some(&name), &event)
            })
            .collect()
    }

    // --- Anthropic Messages ---

    fn anthropic_stop(&self) -> &'static str {
        if self.has_calls() {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    fn anthropic_whole(&self) -> Value {
        let mut content = Vec::new();
        if let Some(text) = &self.plan.text {
            content.push(json!({ "type": "text", "text": text }));
        }
        for (index, call) in self.plan.calls.iter().enumerate() {
            content.push(json!({
                "type": "tool_use",
                "id": self.id("toolu", index),
                "name": call.name,
                "input": call.arguments,
            }));
        }
        json!({
            "id": format!("msg_demo{}", self.sequence),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.anthropic_stop(),
            "stop_sequence": null,
            "usage": { "input_tokens": self.input_tokens, "output_tokens": self.output_tokens },
        })
    }

    fn anthropic_stream(&self) -> Vec<Bytes> {
        let event = |value: Value| {
            let name = value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            sse_event(Some(&name), &value)
        };
        let mut events = vec![
            event(json!({
                "type": "message_start",
                "message": {
                    "id": format!("msg_demo{}", self.sequence),
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": { "input_tokens": self.input_tokens, "output_tokens": 1 },
                },
            })),
            event(json!({ "type": "ping" })),
        ];
        let mut block = 0_usize;
        if let Some(text) = &self.plan.text {
            events.push(event(json!({
                "type": "content_block_start",
                "index": block,
                "content_block": { "type": "text", "text": "" },
            })));
            for piece in text_pieces(text) {
                events.push(event(json!({
                    "type": "content_block_delta",
                    "index": block,
                    "delta": { "type": "text_delta", "text": piece },
                })));
            }
            events.push(event(
                json!({ "type": "content_block_stop", "index": block }),
            ));
            block += 1;
        }
        for (index, call) in self.plan.calls.iter().enumerate() {
            events.push(event(json!({
                "type": "content_block_start",
                "index": block,
                "content_block": {
                    "type": "tool_use",
                    "id": self.id("toolu", index),
                    "name": call.name,
                    "input": {},
                },
            })));
            for piece in argument_pieces(&Self::arguments(call)) {
                events.push(event(json!({
                    "type": "content_block_delta",
                    "index": block,
                    "delta": { "type": "input_json_delta", "partial_json": piece },
                })));
            }
            events.push(event(
                json!({ "type": "content_block_stop", "index": block }),
            ));
            block += 1;
        }
        events.push(event(json!({
            "type": "message_delta",
            "delta": { "stop_reason": self.anthropic_stop(), "stop_sequence": null },
            "usage": { "output_tokens": self.output_tokens },
        })));
        events.push(event(json!({ "type": "message_stop" })));
        events
    }

    // --- Gemini ---

    fn gemini_usage(&self) -> Value {
        json!({
            "promptTokenCount": self.input_tokens,
            "candidatesTokenCount": self.output_tokens,
            "totalTokenCount": self.total_tokens(),
        })
    }

    fn gemini_call_part(call: &PlannedCall) -> Value {
        json!({ "functionCall": { "name": call.name, "args": call.arguments } })
    }

    fn gemini_response(&self, parts: Vec<Value>, last: bool) -> Value {
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        let mut response = json!({ "candidates": [], "modelVersion": self.model });
        if last {
            with_member(&mut candidate, "finishReason", json!("STOP"));
            with_member(&mut response, "usageMetadata", self.gemini_usage());
        }
        with_member(&mut response, "candidates", json!([candidate]));
        response
    }

    fn gemini_whole(&self) -> Value {
        let mut parts = Vec::new();
        if let Some(text) = &self.plan.text {
            parts.push(json!({ "text": text }));
        }
        parts.extend(self.plan.calls.iter().map(Self::gemini_call_part));
        self.gemini_response(parts, true)
    }

    /// The stream's responses: the text in pieces, then one per call with its part whole; the
    /// last carries the finish reason and the usage.
    fn gemini_chunks(&self) -> Vec<Value> {
        let mut parts: Vec<Value> = Vec::new();
        if let Some(text) = &self.plan.text {
            parts.extend(
                text_pieces(text)
                    .into_iter()
                    .map(|piece| json!({ "text": piece })),
            );
        }
        parts.extend(self.plan.calls.iter().map(Self::gemini_call_part));
        let count = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(index, part)| self.gemini_response(vec![part], index + 1 == count))
            .collect()
    }

    // --- Bedrock Converse ---

    fn bedrock_whole(&self) -> Value {
        let mut content = Vec::new();
        if let Some(text) = &self.plan.text {
            content.push(json!({ "text": text }));
        }
        for (index, call) in self.plan.calls.iter().enumerate() {
            content.push(json!({
                "toolUse": {
                    "toolUseId": self.id("tooluse", index),
                    "name": call.name,
                    "input": call.arguments,
                },
            }));
        }
        json!({
            "output": { "message": { "role": "assistant", "content": content } },
            "stopReason": if self.has_calls() { "tool_use" } else { "end_turn" },
            "usage": {
                "inputTokens": self.input_tokens,
                "outputTokens": self.output_tokens,
                "totalTokens": self.total_tokens(),
            },
            "metrics": { "latencyMs": 0 },
        })
    }
}

/// Gemini's stream as SSE (`alt=sse`) or, as the real API does without it, one JSON array sent
/// element by element.
fn gemini_encode(chunks: Vec<Value>, sse: bool) -> (Vec<Bytes>, &'static str) {
    if sse {
        let frames = chunks.iter().map(|chunk| sse_event(None, chunk)).collect();
        return (frames, "text/event-stream");
    }
    let count = chunks.len();
    let frames = chunks
        .iter()
        .enumerate()
        .map(|(index, chunk)| {
            let opening = if index == 0 { "[" } else { ",\r\n" };
            let closing = if index + 1 == count { "]" } else { "" };
            Bytes::from(format!("{opening}{chunk}{closing}"))
        })
        .collect();
    (frames, "application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = "/v1/chat/completions";
    const RESPONSES: &str = "/v1/responses";
    const MESSAGES: &str = "/v1/messages";
    const GEMINI: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
    const GEMINI_STREAM: &str = "/v1beta/models/gemini-2.0-flash:streamGenerateContent";
    const BEDROCK: &str = "/model/amazon.nova-pro-v1:0/converse";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(MODEL_HEADER, HeaderValue::from_static("scripted"));
        for (name, value) in pairs {
            map.insert(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn script(mode: Mode) -> Script {
        Script {
            want: "get_weather".to_owned(),
            search_tool: DEFAULT_SEARCH_TOOL.to_owned(),
            query: None,
            args: json!({ "city": "Paris" }),
            mode,
            fail_followup: None,
            chunk_delay: Duration::ZERO,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn called(plan: &Plan) -> Vec<&str> {
        plan.calls.iter().map(|call| call.name.as_str()).collect()
    }

    fn run(path: &str, query: Option<&str>, pairs: &[(&str, &str)], body: &Value) -> Outcome {
        let endpoint = Endpoint::detect(path).unwrap();
        let body = body.to_string();
        respond(
            &headers(pairs),
            &endpoint,
            query,
            body.as_bytes(),
            7,
            &Responses::default(),
            &mut Vec::new(),
        )
    }

    fn whole(path: &str, pairs: &[(&str, &str)], body: &Value) -> Value {
        match run(path, None, pairs, body) {
            Outcome::Whole(answer) => answer,
            other => panic!("expected a whole answer, got {other:?}"),
        }
    }

    fn rejected(path: &str, pairs: &[(&str, &str)], body: &Value) -> String {
        match run(path, None, pairs, body) {
            Outcome::Rejected(status, rejection) => {
                assert_eq!(status, StatusCode::BAD_REQUEST);
                rejection.message
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    /// The data of each frame of a stream, parsed (`[DONE]` left out).
    fn stream_data(
        path: &str,
        query: Option<&str>,
        pairs: &[(&str, &str)],
        body: &Value,
    ) -> Vec<Value> {
        let Outcome::Stream { frames, .. } = run(path, query, pairs, body) else {
            panic!("expected a stream");
        };
        frames
            .iter()
            .map(|frame| std::str::from_utf8(frame).unwrap())
            .filter_map(|frame| {
                let data = frame.lines().find_map(|line| line.strip_prefix("data: "))?;
                (data != "[DONE]").then(|| serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    fn chat_tools(list: &[&str]) -> Value {
        Value::Array(
            list.iter()
                .map(|name| json!({ "type": "function", "function": { "name": name, "parameters": {} } }))
                .collect(),
        )
    }

    #[test]
    fn parses_the_script_headers() {
        let parsed = Script::from_headers(&headers(&[("x-demo-want", "get_weather")])).unwrap();
        assert_eq!(parsed.search_tool, "find_tools");
        assert_eq!(parsed.mode, Mode::Search);
        assert_eq!(parsed.args, json!({}));
        assert_eq!(parsed.query, None);
        assert_eq!(parsed.fail_followup, None);
        assert_eq!(parsed.chunk_delay, Duration::ZERO);

        let parsed = Script::from_headers(&headers(&[
            ("x-demo-want", "w"),
            ("x-demo-search-tool", "lookup"),
            ("x-demo-query", "weather in paris"),
            ("x-demo-args", r#"{"a": 1}"#),
            ("x-demo-script", "text-first"),
            ("x-demo-fail-followup", "503"),
            ("x-demo-chunk-delay-ms", "25"),
        ]))
        .unwrap();
        assert_eq!(parsed.search_tool, "lookup");
        assert_eq!(parsed.query.as_deref(), Some("weather in paris"));
        assert_eq!(parsed.args, json!({ "a": 1 }));
        assert_eq!(parsed.mode, Mode::TextFirst);
        assert_eq!(parsed.fail_followup, Some(StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(parsed.chunk_delay, Duration::from_millis(25));

        for bad in [
            vec![],
            vec![("x-demo-want", "")],
            vec![("x-demo-want", "w"), ("x-demo-args", "[1]")],
            vec![("x-demo-want", "w"), ("x-demo-args", "{")],
            vec![("x-demo-want", "w"), ("x-demo-script", "dance")],
            vec![("x-demo-want", "w"), ("x-demo-fail-followup", "200")],
            vec![("x-demo-want", "w"), ("x-demo-fail-followup", "soon")],
            vec![("x-demo-want", "w"), ("x-demo-chunk-delay-ms", "-1")],
            vec![("x-demo-want", "w"), ("x-demo-chunk-delay-ms", "9999999")],
        ] {
            assert!(Script::from_headers(&headers(&bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn search_calls_the_wanted_tool_else_the_search_tool() {
        let search = script(Mode::Search);
        let plan = decide(&search, &names(&["find_tools", "get_weather"]), "q", "");
        assert_eq!(
            plan,
            Plan::calls(vec![PlannedCall {
                name: "get_weather".to_owned(),
                arguments: json!({ "city": "Paris" }),
            }])
        );
        let plan = decide(&search, &names(&["find_tools", "other"]), "rain?", "");
        assert_eq!(
            plan,
            Plan::calls(vec![PlannedCall {
                name: "find_tools".to_owned(),
                arguments: json!({ "query": "rain?", "limit": 5 }),
            }])
        );
        assert_eq!(
            decide(&search, &names(&["other"]), "q", ""),
            Plan::text("no get_weather available")
        );
        let mut renamed = script(Mode::Search);
        renamed.search_tool = "lookup".to_owned();
        assert_eq!(
            called(&decide(
                &renamed,
                &names(&["find_tools", "lookup"]),
                "q",
                ""
            )),
            ["lookup"]
        );
    }

    #[test]
    fn always_search_searches_while_it_can() {
        let always = script(Mode::AlwaysSearch);
        assert_eq!(
            called(&decide(
                &always,
                &names(&["get_weather", "find_tools"]),
                "q",
                ""
            )),
            ["find_tools"]
        );
        assert_eq!(
            called(&decide(&always, &names(&["get_weather"]), "q", "")),
            ["get_weather"]
        );
        assert_eq!(
            decide(&always, &[], "q", ""),
            Plan::text("no get_weather available")
        );
    }

    #[test]
    fn mixed_calls_the_search_tool_and_another_tool() {
        let mixed = script(Mode::Mixed);
        let plan = decide(&mixed, &names(&["send_email", "find_tools", "x"]), "q", "");
        assert_eq!(called(&plan), ["find_tools", "send_email"]);
        assert_eq!(plan.calls[1].arguments, json!({}));
        assert_eq!(plan.text, None);
        assert_eq!(
            called(&decide(
                &mixed,
                &names(&["find_tools", "get_weather"]),
                "q",
                ""
            )),
            ["get_weather"]
        );
        assert_eq!(
            called(&decide(&mixed, &names(&["find_tools"]), "q", "")),
            ["find_tools"]
        );
        assert_eq!(
            decide(&mixed, &names(&["x"]), "q", ""),
            Plan::text("no get_weather available")
        );
    }

    #[test]
    fn text_first_puts_text_before_the_call() {
        let first = script(Mode::TextFirst);
        let plan = decide(&first, &names(&["find_tools"]), "q", "");
        assert_eq!(plan.text.as_deref(), Some(LOOK_UP_TEXT));
        assert_eq!(called(&plan), ["find_tools"]);
        assert_eq!(
            decide(&first, &[], "q", ""),
            Plan::text("no get_weather available")
        );
    }

    #[test]
    fn use_tool_calls_use_tool_with_the_params() {
        let use_tool = script(Mode::UseTool);
        let plan = decide(&use_tool, &names(&["find_tools", "use_tool"]), "rain", "");
        assert_eq!(
            plan,
            Plan::calls(vec![PlannedCall {
                name: "use_tool".to_owned(),
                arguments: json!({ "query": "rain", "params": { "city": "Paris" } }),
            }])
        );
        assert_eq!(
            called(&decide(
                &use_tool,
                &names(&["use_tool", "get_weather"]),
                "q",
                ""
            )),
            ["get_weather"]
        );
        assert_eq!(
            called(&decide(&use_tool, &names(&["find_tools"]), "q", "")),
            ["find_tools"]
        );
    }

    #[test]
    fn answer_never_calls() {
        let answer = script(Mode::Answer);
        assert_eq!(
            decide(&answer, &names(&["get_weather"]), "q", "the answer"),
            Plan::text("the answer")
        );
    }

    #[test]
    fn finds_the_function_tools_of_each_dialect() {
        let chat = json!({ "tools": [
            { "type": "function", "function": { "name": "a" } },
            { "type": "custom", "custom": { "name": "c" } },
            { "type": "function", "function": { "name": "b" } },
        ] });
        assert_eq!(function_tools(Dialect::OpenAiChat, &chat), ["a", "b"]);
        let responses = json!({ "tools": [
            { "type": "web_search" },
            { "type": "function", "name": "a" },
        ] });
        assert_eq!(function_tools(Dialect::OpenAiResponses, &responses), ["a"]);
        let anthropic = json!({ "tools": [
            { "name": "a", "input_schema": {} },
            { "type": "web_search_20250305", "name": "web_search" },
            { "type": "custom", "name": "b", "input_schema": {} },
        ] });
        assert_eq!(function_tools(Dialect::Anthropic, &anthropic), ["a", "b"]);
        let gemini = json!({ "tools": [
            { "functionDeclarations": [{ "name": "a" }, { "name": "b" }] },
            { "googleSearch": {} },
            { "function_declarations": [{ "name": "c" }] },
        ] });
        assert_eq!(function_tools(Dialect::Gemini, &gemini), ["a", "b", "c"]);
        let bedrock = json!({ "toolConfig": { "tools": [
            { "toolSpec": { "name": "a" } },
            { "cachePoint": { "type": "default" } },
        ] } });
        assert_eq!(function_tools(Dialect::Bedrock, &bedrock), ["a"]);
        assert!(function_tools(Dialect::OpenAiChat, &json!({})).is_empty());
    }

    #[test]
    fn chat_history_pairs_calls_and_results() {
        let call = |ids: &[&str]| {
            json!({ "role": "assistant", "content": null, "tool_calls": ids.iter().map(|id| json!({
                "id": id, "type": "function", "function": { "name": "f", "arguments": "{}" },
            })).collect::<Vec<_>>() })
        };
        let result = |id: &str| json!({ "role": "tool", "tool_call_id": id, "content": "ok" });
        let user = json!({ "role": "user", "content": [{ "type": "text", "text": "weather?" }] });
        let ok = json!({ "messages": [user, call(&["a", "b"]), result("b"), result("a")] });
        assert_eq!(
            chat_history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather?".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, call(&["a", "b"]), result("a")] });
        assert!(
            chat_history(&missing)
                .unwrap_err()
                .message
                .contains("did not have response messages: b")
        );
        let interrupted = json!({ "messages": [user, call(&["a"]), user, result("a")] });
        assert!(
            chat_history(&interrupted)
                .unwrap_err()
                .message
                .contains(": a")
        );
        let stray = json!({ "messages": [user, call(&["a"]), result("a"), result("z")] });
        assert!(chat_history(&stray).unwrap_err().message.contains("'z'"));
        let twice = json!({ "messages": [user, call(&["a"]), result("a"), result("a")] });
        assert!(chat_history(&twice).is_err());
        let orphan = json!({ "messages": [user, result("a")] });
        assert!(chat_history(&orphan).is_err());
        let no_id = json!({ "messages": [user, { "role": "assistant", "tool_calls": [{ "type": "function" }] }] });
        assert!(
            chat_history(&no_id)
                .unwrap_err()
                .message
                .contains("tool_calls[0].id")
        );
        assert!(chat_history(&json!({})).is_err());
        // Texts: a string content, the latest user message.
        let texts = json!({ "messages": [
            { "role": "user", "content": "first" },
            { "role": "assistant", "content": "hi" },
            { "role": "user", "content": "second" },
        ] });
        assert_eq!(
            chat_history(&texts).unwrap().user_text.as_deref(),
            Some("second")
        );
    }

    #[test]
    fn responses_history_pairs_call_ids() {
        let call = |id: &str| json!({ "type": "function_call", "call_id": id, "name": "f", "arguments": "{}" });
        let output =
            |id: &str| json!({ "type": "function_call_output", "call_id": id, "output": "ok" });
        let user =
            json!({ "role": "user", "content": [{ "type": "input_text", "text": "find it" }] });
        let ok = json!({ "input": [user, call("a"), call("b"), output("a"), output("b")] });
        assert_eq!(
            responses_history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("find it".to_owned()),
            })
        );
        let missing = json!({ "input": [user, call("a"), call("b"), output("a")] });
        assert!(
            responses_history(&missing)
                .unwrap_err()
                .message
                .contains("function call b")
        );
        let stray = json!({ "input": [user, call("a"), output("a"), output("z")] });
        assert!(
            responses_history(&stray)
                .unwrap_err()
                .message
                .contains("call_id z")
        );
        let early = json!({ "input": [user, output("a"), call("a")] });
        assert!(responses_history(&early).is_err());
        // A call only a stored response holds is checked once the store resolved the request.
        let orphan = json!({ "input": [output("a")] });
        assert!(responses_history(&orphan).is_err());
        let text = json!({ "input": "just text" });
        assert_eq!(
            responses_history(&text).unwrap().user_text.as_deref(),
            Some("just text")
        );
    }

    #[test]
    fn anthropic_history_needs_results_in_the_next_message() {
        let uses = |ids: &[&str]| {
            json!({ "role": "assistant", "content": ids.iter().map(|id| json!({
                "type": "tool_use", "id": id, "name": "f", "input": {},
            })).collect::<Vec<_>>() })
        };
        let results = |ids: &[&str]| {
            json!({ "role": "user", "content": ids.iter().map(|id| json!({
                "type": "tool_result", "tool_use_id": id, "content": "ok",
            })).collect::<Vec<_>>() })
        };
        let user = json!({ "role": "user", "content": "weather in paris" });
        let ok = json!({ "messages": [user, uses(&["a", "b"]), results(&["b", "a"])] });
        assert_eq!(
            anthropic_history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather in paris".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, uses(&["a", "b"]), results(&["a"])] });
        let message = anthropic_history(&missing).unwrap_err().message;
        assert!(
            message.starts_with("messages.1: `tool_use` ids"),
            "{message}"
        );
        assert!(message.contains(": b."), "{message}");
        let unanswered = json!({ "messages": [user, uses(&["a"])] });
        assert!(anthropic_history(&unanswered).is_err());
        let stray = json!({ "messages": [user, uses(&["a"]), results(&["a", "z"])] });
        assert!(
            anthropic_history(&stray)
                .unwrap_err()
                .message
                .contains("unexpected `tool_use_id`")
        );
        let late = json!({ "messages": [user, uses(&["a"]), user, results(&["a"])] });
        assert!(anthropic_history(&late).is_err());
        // A result next to text: the text is the latest user text.
        let mixed = json!({ "messages": [user, uses(&["a"]), { "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": "a", "content": "ok" },
            { "type": "text", "text": "and tomorrow?" },
        ] }] });
        assert_eq!(
            anthropic_history(&mixed).unwrap().user_text.as_deref(),
            Some("and tomorrow?")
        );
    }

    #[test]
    fn gemini_history_matches_responses_by_name() {
        let calls = |names: &[&str]| {
            json!({ "role": "model", "parts": names.iter().map(|name| json!({
                "functionCall": { "name": name, "args": {} },
            })).collect::<Vec<_>>() })
        };
        let responses = |names: &[&str]| {
            json!({ "role": "user", "parts": names.iter().map(|name| json!({
                "functionResponse": { "name": name, "response": { "ok": true } },
            })).collect::<Vec<_>>() })
        };
        let user = json!({ "role": "user", "parts": [{ "text": "weather" }, { "text": "now" }] });
        let ok = json!({ "contents": [user, calls(&["f", "g"]), responses(&["g", "f"])] });
        assert_eq!(
            gemini_history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather now".to_owned()),
            })
        );
        let missing = json!({ "contents": [user, calls(&["f", "f"]), responses(&["f"])] });
        assert!(gemini_history(&missing).is_err());
        let wrong = json!({ "contents": [user, calls(&["f"]), responses(&["g"])] });
        assert!(gemini_history(&wrong).unwrap_err().message.contains("'g'"));
        let unanswered = json!({ "contents": [user, calls(&["f"])] });
        assert!(gemini_history(&unanswered).is_err());
        let snake = json!({ "contents": [user,
            { "role": "model", "parts": [{ "function_call": { "name": "f" } }] },
            { "role": "function", "parts": [{ "function_response": { "name": "f", "response": {} } }] },
        ] });
        assert_eq!(gemini_history(&snake).unwrap().tool_results, 1);
    }

    #[test]
    fn bedrock_history_pairs_tool_use_ids() {
        let uses = |ids: &[&str]| {
            json!({ "role": "assistant", "content": ids.iter().map(|id| json!({
                "toolUse": { "toolUseId": id, "name": "f", "input": {} },
            })).collect::<Vec<_>>() })
        };
        let results = |ids: &[&str]| {
            json!({ "role": "user", "content": ids.iter().map(|id| json!({
                "toolResult": { "toolUseId": id, "content": [{ "json": {} }] },
            })).collect::<Vec<_>>() })
        };
        let user = json!({ "role": "user", "content": [{ "text": "weather" }] });
        let ok = json!({ "messages": [user, uses(&["a"]), results(&["a"])] });
        assert_eq!(
            bedrock_history(&ok),
            Ok(History {
                tool_results: 1,
                user_text: Some("weather".to_owned()),
            })
        );
        let missing = json!({ "messages": [user, uses(&["a", "b"]), results(&["a"])] });
        assert!(
            bedrock_history(&missing)
                .unwrap_err()
                .message
                .contains("Ids: b")
        );
        let stray = json!({ "messages": [user, uses(&["a"]), results(&["z"])] });
        assert!(
            bedrock_history(&stray)
                .unwrap_err()
                .message
                .contains("toolUseId z")
        );
        let orphan = json!({ "messages": [results(&["a"])] });
        assert!(bedrock_history(&orphan).is_err());
    }

    #[test]
    fn rejects_bad_requests_in_the_dialect() {
        let want = [("x-demo-want", "get_weather")];
        let chat = json!({ "messages": [{ "role": "user", "content": "hi" }], "tools": chat_tools(&["a"]) });
        assert!(rejected(CHAT, &[], &chat).contains("x-demo-want"));
        let duplicate = json!({ "messages": [{ "role": "user", "content": "hi" }], "tools": chat_tools(&["a", "a"]) });
        assert!(rejected(CHAT, &want, &duplicate).contains("duplicate tool name"));
        let anthropic = json!({ "messages": [{ "role": "user", "content": "hi" }], "tools": [
            { "name": "a", "input_schema": {} }, { "name": "a", "input_schema": {} },
        ] });
        assert!(rejected(MESSAGES, &want, &anthropic).contains("duplicate"));
        let bedrock = json!({ "messages": [{ "role": "user", "content": [{ "text": "hi" }] }] });
        assert!(rejected("/model/m/converse-stream", &want, &bedrock).contains("converse-stream"));
        let dangling = json!({ "contents": [
            { "role": "user", "parts": [{ "text": "hi" }] },
            { "role": "model", "parts": [{ "functionCall": { "name": "f", "args": {} } }] },
        ] });
        assert!(rejected(GEMINI, &want, &dangling).contains("function response"));
    }

    #[test]
    fn fails_only_follow_ups_when_asked() {
        let pairs = [
            ("x-demo-want", "get_weather"),
            ("x-demo-fail-followup", "503"),
        ];
        let first = json!({ "messages": [{ "role": "user", "content": "hi" }], "tools": chat_tools(&["find_tools"]) });
        assert!(matches!(run(CHAT, None, &pairs, &first), Outcome::Whole(_)));
        let follow_up = json!({ "messages": [
            { "role": "user", "content": "hi" },
            { "role": "assistant", "content": null, "tool_calls": [{ "id": "call_1_0", "type": "function",
              "function": { "name": "find_tools", "arguments": "{}" } }] },
            { "role": "tool", "tool_call_id": "call_1_0", "content": "{}" },
        ], "tools": chat_tools(&["find_tools", "get_weather"]) });
        assert!(matches!(
            run(CHAT, None, &pairs, &follow_up),
            Outcome::Failed(StatusCode::SERVICE_UNAVAILABLE)
        ));
        // Without the header, the follow-up gets the wanted call.
        let answer = whole(CHAT, &pairs[..1], &follow_up);
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
    }

    #[test]
    fn whole_answers_have_each_providers_call_shape() {
        let want = [
            ("x-demo-want", "get_weather"),
            ("x-demo-args", r#"{"city":"Paris"}"#),
        ];
        let question = "what is the weather in paris";

        let body = json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": question }],
            "tools": chat_tools(&["find_tools"]) });
        let answer = whole(CHAT, &want, &body);
        let input = body.to_string().len() / 4;
        assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(answer["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"],
            json!([{ "id": "call_7_0", "type": "function", "function": {
                "name": "find_tools", "arguments": json!({ "limit": 5, "query": question }).to_string(),
            } }])
        );
        assert_eq!(
            answer["usage"],
            json!({ "prompt_tokens": input, "completion_tokens": 10, "total_tokens": input + 10 })
        );
        assert_eq!(answer["model"], "gpt-4o");

        let body =
            json!({ "input": question, "tools": [{ "type": "function", "name": "get_weather" }] });
        let answer = whole(RESPONSES, &want, &body);
        let input = body.to_string().len() / 4;
        assert_eq!(
            answer["output"],
            json!([{ "type": "function_call", "id": "fc_7_0", "call_id": "call_7_0",
                "name": "get_weather", "arguments": r#"{"city":"Paris"}"#, "status": "completed" }])
        );
        assert_eq!(
            answer["usage"],
            json!({ "input_tokens": input, "output_tokens": 10, "total_tokens": input + 10 })
        );

        let body = json!({ "model": "claude", "max_tokens": 100, "messages": [{ "role": "user", "content": question }],
            "tools": [{ "name": "get_weather", "input_schema": {} }] });
        let answer = whole(MESSAGES, &want, &body);
        assert_eq!(
            answer["content"],
            json!([{ "type": "tool_use", "id": "toolu_7_0", "name": "get_weather", "input": { "city": "Paris" } }])
        );
        assert_eq!(answer["stop_reason"], "tool_use");
        assert_eq!(answer["usage"]["output_tokens"], 10);

        let body = json!({ "contents": [{ "role": "user", "parts": [{ "text": question }] }],
            "tools": [{ "functionDeclarations": [{ "name": "get_weather" }] }] });
        let answer = whole(GEMINI, &want, &body);
        let input = body.to_string().len() / 4;
        assert_eq!(
            answer["candidates"][0]["content"]["parts"],
            json!([{ "functionCall": { "name": "get_weather", "args": { "city": "Paris" } } }])
        );
        assert_eq!(answer["candidates"][0]["finishReason"], "STOP");
        assert_eq!(answer["modelVersion"], "gemini-2.0-flash");
        assert_eq!(
            answer["usageMetadata"],
            json!({ "promptTokenCount": input, "candidatesTokenCount": 10, "totalTokenCount": input + 10 })
        );

        let body = json!({ "messages": [{ "role": "user", "content": [{ "text": question }] }],
            "toolConfig": { "tools": [{ "toolSpec": { "name": "get_weather", "inputSchema": { "json": {} } } }] } });
        let answer = whole(BEDROCK, &want, &body);
        assert_eq!(
            answer["output"]["message"]["content"],
            json!([{ "toolUse": { "toolUseId": "tooluse_7_0", "name": "get_weather", "input": { "city": "Paris" } } }])
        );
        assert_eq!(answer["stopReason"], "tool_use");
        assert_eq!(answer["usage"]["outputTokens"], 10);

        // Text: output tokens are the words.
        let body = json!({ "messages": [{ "role": "user", "content": [{ "text": "hi" }] }] });
        let answer = whole(BEDROCK, &want, &body);
        assert_eq!(
            answer["output"]["message"]["content"],
            json!([{ "text": "no get_weather available" }])
        );
        assert_eq!(answer["stopReason"], "end_turn");
        assert_eq!(answer["usage"]["outputTokens"], 3);
    }

    #[test]
    fn text_first_and_mixed_answers_order_their_parts() {
        let pairs = [
            ("x-demo-want", "get_weather"),
            ("x-demo-script", "text-first"),
        ];
        let body = json!({ "max_tokens": 10, "messages": [{ "role": "user", "content": "q" }],
            "tools": [{ "name": "find_tools", "input_schema": {} }] });
        let answer = whole(MESSAGES, &pairs, &body);
        assert_eq!(
            answer["content"][0],
            json!({ "type": "text", "text": LOOK_UP_TEXT })
        );
        assert_eq!(answer["content"][1]["type"], "tool_use");
        assert_eq!(answer["usage"]["output_tokens"], 15);

        let pairs = [("x-demo-want", "get_weather"), ("x-demo-script", "mixed")];
        let body = json!({ "input": "q", "tools": [
            { "type": "function", "name": "send_email" }, { "type": "function", "name": "find_tools" },
        ] });
        let answer = whole(RESPONSES, &pairs, &body);
        assert_eq!(answer["output"][0]["name"], "find_tools");
        assert_eq!(answer["output"][0]["call_id"], "call_7_0");
        assert_eq!(answer["output"][1]["name"], "send_email");
        assert_eq!(answer["output"][1]["call_id"], "call_7_1");
        assert_eq!(answer["usage"]["output_tokens"], 20);
    }

    #[test]
    fn chat_streams_split_arguments_and_report_usage_last() {
        let pairs = [
            ("x-demo-want", "get_weather"),
            ("x-demo-script", "text-first"),
        ];
        let body = json!({ "stream": true, "stream_options": { "include_usage": true },
            "messages": [{ "role": "user", "content": "rain" }], "tools": chat_tools(&["find_tools"]) });
        let chunks = stream_data(CHAT, None, &pairs, &body);
        let deltas: Vec<&Value> = chunks
            .iter()
            .filter_map(|chunk| chunk["choices"].get(0).map(|choice| &choice["delta"]))
            .collect();
        assert_eq!(deltas[0]["role"], "assistant");
        let text: String = deltas
            .iter()
            .filter_map(|d| d["content"].as_str())
            .collect();
        assert_eq!(text, LOOK_UP_TEXT);
        let first_call = deltas
            .iter()
            .position(|d| d.get("tool_calls").is_some())
            .unwrap();
        assert!(
            deltas[..first_call]
                .iter()
                .all(|d| d.get("tool_calls").is_none())
        );
        assert_eq!(deltas[first_call]["tool_calls"][0]["id"], "call_7_0");
        assert_eq!(
            deltas[first_call]["tool_calls"][0]["function"]["name"],
            "find_tools"
        );
        let pieces: Vec<&str> = deltas[first_call + 1..]
            .iter()
            .filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str())
            .collect();
        assert!(pieces.len() >= 2);
        assert_eq!(
            serde_json::from_str::<Value>(&pieces.concat()).unwrap(),
            json!({ "query": "rain", "limit": 5 })
        );
        let finish = chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str());
        assert_eq!(finish, Some("tool_calls"));
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["completion_tokens"], 15);
        assert!(
            chunks[..chunks.len() - 1]
                .iter()
                .all(|c| c["usage"].is_null())
        );

        // Without include_usage no chunk has usage.
        let body = json!({ "stream": true, "messages": [{ "role": "user", "content": "rain" }],
            "tools": chat_tools(&["find_tools"]) });
        let chunks = stream_data(CHAT, None, &pairs, &body);
        assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    }

    #[test]
    fn responses_streams_announce_items_and_complete_whole() {
        let pairs = [("x-demo-want", "get_weather")];
        let body = json!({ "stream": true, "input": "rain", "tools": [{ "type": "function", "name": "find_tools" }] });
        let events = stream_data(RESPONSES, None, &pairs, &body);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds[..3],
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added"
            ]
        );
        assert_eq!(events[2]["item"]["type"], "function_call");
        assert_eq!(events[2]["item"]["arguments"], "");
        let deltas: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert!(deltas.len() >= 2);
        let whole = events.last().unwrap();
        assert_eq!(whole["type"], "response.completed");
        assert_eq!(whole["response"]["output"][0]["arguments"], deltas.concat());
        assert_eq!(whole["response"]["usage"]["output_tokens"], 10);
        assert!(kinds.contains(&"response.output_item.done"));
        for (index, event) in events.iter().enumerate() {
            assert_eq!(event["sequence_number"], index);
        }
    }

    #[test]
    fn anthropic_streams_send_input_json_deltas() {
        let pairs = [
            ("x-demo-want", "get_weather"),
            ("x-demo-args", r#"{"city":"Paris"}"#),
        ];
        let body = json!({ "stream": true, "max_tokens": 10, "messages": [{ "role": "user", "content": "q" }],
            "tools": [{ "name": "get_weather", "input_schema": {} }] });
        let events = stream_data(MESSAGES, None, &pairs, &body);
        assert_eq!(events[0]["type"], "message_start");
        assert_eq!(
            events[0]["message"]["usage"]["input_tokens"],
            body.to_string().len() / 4
        );
        let start = events
            .iter()
            .find(|e| e["type"] == "content_block_start")
            .unwrap();
        assert_eq!(
            start["content_block"],
            json!({ "type": "tool_use", "id": "toolu_7_0", "name": "get_weather", "input": {} })
        );
        let pieces: Vec<&str> = events
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert!(pieces.len() >= 2);
        assert_eq!(pieces.concat(), r#"{"city":"Paris"}"#);
        let delta = events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta["usage"]["output_tokens"], 10);
        assert_eq!(events.last().unwrap()["type"], "message_stop");
    }

    #[test]
    fn gemini_streams_as_sse_or_as_an_array() {
        let pairs = [
            ("x-demo-want", "get_weather"),
            ("x-demo-script", "text-first"),
        ];
        let body = json!({ "contents": [{ "role": "user", "parts": [{ "text": "q" }] }],
            "tools": [{ "functionDeclarations": [{ "name": "get_weather" }] }] });
        let chunks = stream_data(GEMINI_STREAM, Some("alt=sse"), &pairs, &body);
        let last = chunks.last().unwrap();
        assert_eq!(
            last["candidates"][0]["content"]["parts"],
            json!([{ "functionCall": { "name": "get_weather", "args": {} } }])
        );
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 15);
        let text: String = chunks[..chunks.len() - 1]
            .iter()
            .map(|c| {
                c["candidates"][0]["content"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(text, LOOK_UP_TEXT);

        let Outcome::Stream {
            frames,
            content_type,
            ..
        } = run(GEMINI_STREAM, None, &pairs, &body)
        else {
            panic!("expected a stream");
        };
        assert_eq!(content_type, "application/json");
        assert!(frames.len() >= 2);
        let joined: Vec<u8> = frames.iter().flat_map(|frame| frame.to_vec()).collect();
        let array: Vec<Value> = serde_json::from_slice(&joined).unwrap();
        assert_eq!(array, chunks);
    }

    #[test]
    fn pieces_split_texts_and_arguments() {
        assert_eq!(text_pieces("Let me look"), ["Let", " me", " look"]);
        assert_eq!(text_pieces("one"), ["one"]);
        assert_eq!(text_pieces("a  b").concat(), "a  b");
        assert_eq!(argument_pieces("{}"), ["{", "}"]);
        assert_eq!(argument_pieces(r#"{"a":1}"#).concat(), r#"{"a":1}"#);
        assert_eq!(argument_pieces(r#"{"a":1}"#).len(), 3);
        assert_eq!(argument_pieces("{\"é\":\"ü\"}").concat(), "{\"é\":\"ü\"}");
    }

    #[test]
    fn log_keeps_the_latest_requests() {
        let log = Log::default();
        let request = hyper::Request::builder()
            .uri("/v1/chat/completions?x=1")
            .header("X-Demo-Want", "f")
            .header("accept", "a")
            .header("accept", "b")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        log.record(&parts, Some(br#"{"a":1}"#));
        log.record(&parts, Some(b"not json"));
        log.record(&parts, None);
        let snapshot = log.snapshot();
        assert_eq!(snapshot[0]["path"], "/v1/chat/completions?x=1");
        assert_eq!(snapshot[0]["headers"]["x-demo-want"], "f");
        assert_eq!(snapshot[0]["headers"]["accept"], "a, b");
        assert_eq!(snapshot[0]["body"], json!({ "a": 1 }));
        assert_eq!(snapshot[1]["body"], "not json");
        assert_eq!(snapshot[2]["body"], Value::Null);
        for _ in 0..LOG_CAPACITY {
            log.record(&parts, Some(b"{}"));
        }
        let snapshot = log.snapshot();
        assert_eq!(snapshot.as_array().unwrap().len(), LOG_CAPACITY);
        assert_eq!(snapshot[0]["body"], json!({}));
        assert_eq!(log.clear(), LOG_CAPACITY);
        assert_eq!(log.snapshot(), json!([]));
    }

    #[test]
    fn responses_continue_stored_answers_as_openai_does() {
        let store = Responses::default();
        let path = "/v1/responses";
        let want = [("x-demo-model", "scripted"), ("x-demo-want", "get_weather")];
        let endpoint = Endpoint::detect(path).unwrap();
        let ask = |body: Value, sequence: u64| {
            respond(
                &headers(&want),
                &endpoint,
                None,
                body.to_string().as_bytes(),
                sequence,
                &store,
                &mut Vec::new(),
            )
        };
        let tools = json!([{ "type": "function", "name": "find_tools", "parameters": {} },
                           { "type": "function", "name": "get_weather", "parameters": {} }]);
        let Outcome::Whole(first) = ask(json!({ "input": "weather?", "tools": tools }), 1) else {
            panic!("expected an answer");
        };
        assert_eq!(first["id"], "resp_demo1");
        assert_eq!(first["output"][0]["call_id"], "call_1_0");

        // The stored conversation comes first: its call is answered by the new input.
        let output =
            |id: &str| json!({ "type": "function_call_output", "call_id": id, "output": "sunny" });
        let next = json!({ "previous_response_id": "resp_demo1", "input": [output("call_1_0")], "tools": tools });
        let Outcome::Whole(second) = ask(next, 2) else {
            panic!("expected an answer");
        };
        assert_eq!(second["id"], "resp_demo2");

        // An output whose call no conversation holds, and an id never given out.
        let stray = json!({ "previous_response_id": "resp_demo2", "input": [output("call_9_0")], "tools": tools });
        let Outcome::Rejected(_, rejection) = ask(stray, 3) else {
            panic!("expected a rejection");
        };
        assert_eq!(
            rejection.message,
            "No tool call found for function call output with call_id call_9_0."
        );
        let unknown = json!({ "previous_response_id": "resp_nope", "input": "hi", "tools": tools });
        let Outcome::Rejected(_, rejection) = ask(unknown, 4) else {
            panic!("expected a rejection");
        };
        assert_eq!(rejection.code, Some("previous_response_not_found"));
        // resp_demo2 ends in a call: continuing it without the call's output is refused too.
        let unanswered = json!({ "previous_response_id": "resp_demo2", "input": "and tomorrow?", "tools": tools });
        let Outcome::Rejected(_, rejection) = ask(unanswered, 5) else {
            panic!("expected a rejection");
        };
        assert!(
            rejection.message.contains("call_2_0"),
            "{}",
            rejection.message
        );
    }
}
