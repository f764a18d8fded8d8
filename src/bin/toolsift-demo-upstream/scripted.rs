//! The scripted model (`x-demo-model: scripted`): a stand-in model that calls a tool chosen by
//! the request headers, so that search mode (the gateway answering a `find_tools` meta-tool and
//! sending a follow-up) can be driven end to end. The routes and headers are described in the
//! module doc of `main.rs`.
//!
//! The decisions ([`decide`]) and the answers ([`respond`]) are pure, so unit-tested; the
//! conversation checks and the answers' shapes are the providers' (`providers/`); [`serve`]
//! only wraps them in a response.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hyper::header::HeaderMap;
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::providers::shared::{Rejection, error_response};
use crate::providers::{Call, Endpoint, Stream, Turn, inspect_request};
use crate::report::{add_demo_headers, now, summary_sentence};
use crate::stored::Responses;
use crate::{ReplyBody, json_response, stream_response};

const MODEL_HEADER: &str = "x-demo-model";
const MODEL_SCRIPTED: &[u8] = b"scripted";
const WANT_HEADER: &str = "x-demo-want";
const SEARCH_TOOL_HEADER: &str = "x-demo-search-tool";
const QUERY_HEADER: &str = "x-demo-query";
const ARGS_HEADER: &str = "x-demo-args";
const SCRIPT_HEADER: &str = "x-demo-script";
const FAIL_FOLLOWUP_HEADER: &str = "x-demo-fail-followup";
const CHUNK_DELAY_HEADER: &str = "x-demo-chunk-delay-ms";
const CALL_HEADER: &str = "x-demo-call";
const CALL_ARGS_HEADER: &str = "x-demo-call-args";
const ALTERNATE_HEADER: &str = "x-demo-alternate";

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
pub(crate) const LOG_PATH: &str = "/scripted/log";
/// `POST` empties the record.
pub(crate) const LOG_RESET_PATH: &str = "/scripted/log/reset";
/// How many requests the log keeps (the latest).
const LOG_CAPACITY: usize = 200;

/// Whether a request asks for the scripted model.
pub(crate) fn requested(headers: &HeaderMap) -> bool {
    headers
        .get(MODEL_HEADER)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(MODEL_SCRIPTED))
}

// ---------------------------------------------------------------------------------------------
// Request log
// ---------------------------------------------------------------------------------------------

/// The latest scripted requests, oldest first, as `GET /scripted/log` shows them.
#[derive(Default)]
pub(crate) struct Log {
    entries: Mutex<VecDeque<Value>>,
}

impl Log {
    /// Records one request; `body` is `None` when it could not be read.
    pub(crate) fn record(&self, parts: &Parts, body: Option<&[u8]>) {
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

    pub(crate) fn snapshot(&self) -> Value {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Value::Array(entries.iter().cloned().collect())
    }

    /// Empties the log; returns how many entries it held.
    pub(crate) fn clear(&self) -> usize {
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
    Alternate,
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
            "alternate" => Self::Alternate,
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
    /// Tools called on the first turn whether offered or not, and their arguments.
    forced: Vec<String>,
    forced_args: Value,
    /// `alternate`: the tool called in turn with `want`.
    alternate: Option<String>,
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
        let args = object_header(headers, ARGS_HEADER)?;
        let forced = header_text(headers, CALL_HEADER)?
            .map(|names| {
                names
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let forced_args = object_header(headers, CALL_ARGS_HEADER)?;
        let mode = match header_text(headers, SCRIPT_HEADER)? {
            None => Mode::Search,
            Some(text) => Mode::parse(&text).ok_or_else(|| {
                Rejection::new(format!(
                    "The header '{SCRIPT_HEADER}' must be one of: search, always-search, mixed, text-first, use-tool, answer, alternate."
                ))
            })?,
        };
        let alternate = header_text(headers, ALTERNATE_HEADER)?.filter(|name| !name.is_empty());
        if mode == Mode::Alternate && alternate.is_none() {
            return Err(Rejection::new(format!(
                "The script 'alternate' needs the header '{ALTERNATE_HEADER}': the tool called in turn with '{WANT_HEADER}'."
            )));
        }
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
            forced,
            forced_args,
            alternate,
        })
    }
}

/// A header holding a JSON object (`{}` when absent).
fn object_header(headers: &HeaderMap, name: &str) -> Result<Value, Rejection> {
    match header_text(headers, name)? {
        None => Ok(json!({})),
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(args @ Value::Object(_)) => Ok(args),
            _ => Err(Rejection::new(format!(
                "The header '{name}' must be a JSON object."
            ))),
        },
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

/// What the model answers: an optional text part, then the calls in order.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    text: Option<String>,
    calls: Vec<Call>,
}

impl Plan {
    fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            calls: Vec::new(),
        }
    }

    fn calls(calls: Vec<Call>) -> Self {
        Self { text: None, calls }
    }
}

/// The model's turn. `tools` are the request's function tools, in order; `query` what a search
/// asks for; `answer` the text of `answer` mode; `results`: the tool results the conversation
/// holds.
fn decide_turn(
    script: &Script,
    tools: &[String],
    query: &str,
    answer: &str,
    results: usize,
) -> Plan {
    let has = |name: &str| tools.iter().any(|tool| tool == name);
    let call = |name: &str, arguments: Value| Call {
        name: name.to_owned(),
        arguments,
    };
    if results == 0 && !script.forced.is_empty() {
        let calls = script
            .forced
            .iter()
            .map(|name| call(name, script.forced_args.clone()))
            .collect();
        let mut plan = Plan::calls(calls);
        if script.mode == Mode::TextFirst {
            plan.text = Some(LOOK_UP_TEXT.to_owned());
        }
        return plan;
    }
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
        Mode::Alternate => match script.alternate.as_deref() {
            // The turn's tool from the results so far: the wanted one after an even number.
            Some(other) if has(&script.want) && has(other) => {
                let name = if results % 2 == 0 {
                    &script.want
                } else {
                    other
                };
                Plan::calls(vec![call(name, script.args.clone())])
            }
            _ => searching(),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

/// What the scripted model answers a request with.
#[derive(Debug)]
enum Outcome {
    /// A 4xx in the provider's error shape.
    Rejected(StatusCode, Rejection),
    /// `x-demo-fail-followup`: that status, on a request that carries a tool result.
    Failed(StatusCode),
    Whole(Value),
    Streamed {
        stream: Stream,
        gap: Duration,
    },
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
    let provider = endpoint.provider;
    if let Some(refusal) = provider.scripted_refusal(&endpoint.path) {
        return bad(refusal);
    }
    let inspection = match inspect_request(endpoint, body) {
        Ok(inspection) => inspection,
        Err(rejection) => return bad(rejection),
    };
    let request = match provider.resolve(body, responses) {
        Some(Ok(resolved)) => resolved,
        Some(Err(rejection)) => return bad(rejection),
        // `inspect_request` accepted it, so it is a JSON object.
        None => serde_json::from_slice(body).unwrap_or_default(),
    };
    let history = match provider.read_history(&request) {
        Ok(history) => history,
        Err(rejection) => return bad(rejection),
    };
    tools.clone_from(&inspection.tools);
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
    let plan = decide_turn(
        &script,
        &provider.function_tools(&request),
        &query_text,
        &summary_sentence(tools),
        history.tool_results,
    );
    let words = plan
        .text
        .as_deref()
        .map_or(0, |text| text.split_whitespace().count());
    let calls = u64::try_from(plan.calls.len()).unwrap_or(u64::MAX);
    let turn = Turn {
        sequence,
        created: now(),
        model: inspection.answering_model(endpoint),
        text: plan.text,
        calls: plan.calls,
        input_tokens: u64::try_from(body.len() / 4).unwrap_or(u64::MAX),
        output_tokens: calls
            .saturating_mul(TOKENS_PER_CALL)
            .saturating_add(u64::try_from(words).unwrap_or(u64::MAX)),
        include_usage: inspection.include_usage,
        report: None,
    };
    provider.keep(&request, &turn, responses);
    if inspection.stream {
        Outcome::Streamed {
            stream: provider.stream(&turn, query),
            gap: script.chunk_delay,
        }
    } else {
        Outcome::Whole(provider.whole(&turn))
    }
}

/// Serves one scripted request whose body has been read; OpenAI Responses answers are kept in
/// `responses`.
pub(crate) fn serve(
    parts: &Parts,
    endpoint: &Endpoint,
    body: &[u8],
    sequence: u64,
    responses: &Responses,
) -> Response<ReplyBody> {
    let provider = endpoint.provider;
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
            return error_response(provider, status, &rejection);
        }
        Outcome::Failed(status) => error_response(provider, status, &Rejection::failing(status)),
        Outcome::Whole(answer) => json_response(StatusCode::OK, &answer),
        Outcome::Streamed { stream, gap } => stream_response(stream, gap),
    };
    add_demo_headers(response.headers_mut(), provider, &tools);
    response
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

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
            forced: Vec::new(),
            forced_args: json!({}),
            alternate: None,
        }
    }

    /// A later turn's decision (the forced calls are the first turn's).
    fn decide(script: &Script, tools: &[String], query: &str, answer: &str) -> Plan {
        decide_turn(script, tools, query, answer, 1)
    }

    #[test]
    fn forced_calls_come_first_offered_or_not() {
        let mut forced = script(Mode::TextFirst);
        forced.forced = names(&["drop_database", "get_weather"]);
        forced.forced_args = json!({"db": "prod"});
        let plan = decide_turn(&forced, &names(&["get_weather"]), "q", "", 0);
        assert_eq!(called(&plan), ["drop_database", "get_weather"]);
        assert_eq!(plan.calls[0].arguments, json!({"db": "prod"}));
        assert_eq!(plan.text.as_deref(), Some(LOOK_UP_TEXT));
        // After a tool result, the script as usual.
        let later = decide_turn(&forced, &names(&["get_weather"]), "q", "", 1);
        assert_eq!(called(&later), ["get_weather"]);
        let parsed = Script::from_headers(&headers(&[
            ("x-demo-want", "w"),
            ("x-demo-call", " a , b,"),
            ("x-demo-call-args", r#"{"x":1}"#),
        ]))
        .unwrap();
        assert_eq!(parsed.forced, names(&["a", "b"]));
        assert_eq!(parsed.forced_args, json!({"x": 1}));
        assert!(
            Script::from_headers(&headers(&[
                ("x-demo-want", "w"),
                ("x-demo-call-args", "[1]")
            ]))
            .is_err()
        );
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
        let Outcome::Streamed { stream, .. } = run(path, query, pairs, body) else {
            panic!("expected a stream");
        };
        stream
            .frames
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
            Plan::calls(vec![Call {
                name: "get_weather".to_owned(),
                arguments: json!({ "city": "Paris" }),
            }])
        );
        let plan = decide(&search, &names(&["find_tools", "other"]), "rain?", "");
        assert_eq!(
            plan,
            Plan::calls(vec![Call {
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
            Plan::calls(vec![Call {
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
    fn alternate_calls_two_tools_in_turn_while_both_are_offered() {
        let mut alternate = script(Mode::Alternate);
        alternate.alternate = Some("get_forecast".to_owned());
        let both = names(&["get_forecast", "x", "get_weather"]);
        for (results, want) in [
            (0, "get_weather"),
            (1, "get_forecast"),
            (2, "get_weather"),
            (3, "get_forecast"),
        ] {
            let plan = decide_turn(&alternate, &both, "q", "", results);
            assert_eq!(called(&plan), [want]);
            assert_eq!(plan.calls[0].arguments, json!({ "city": "Paris" }));
        }
        // One of the two gone: as `search`.
        assert_eq!(
            decide_turn(&alternate, &names(&["get_forecast"]), "q", "", 3),
            Plan::text("no get_weather available")
        );
        assert_eq!(
            called(&decide_turn(
                &alternate,
                &names(&["get_weather"]),
                "q",
                "",
                3
            )),
            ["get_weather"]
        );
        let parsed = Script::from_headers(&headers(&[
            ("x-demo-want", "a"),
            ("x-demo-script", "alternate"),
            ("x-demo-alternate", "b"),
        ]))
        .unwrap();
        assert_eq!(
            (parsed.mode, parsed.alternate.as_deref()),
            (Mode::Alternate, Some("b"))
        );
        assert!(
            Script::from_headers(&headers(&[
                ("x-demo-want", "a"),
                ("x-demo-script", "alternate")
            ]))
            .is_err()
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

        let Outcome::Streamed {
            stream: Stream {
                frames,
                content_type,
            },
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
