//! Ollama's native chat API (`POST /api/chat`):
//! <https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion>.
//!
//! Ollama streams unless the request says `"stream": false`, as newline-delimited JSON
//! (`application/x-ndjson`): one object per line, the last with `"done": true` and the counts.
//! A call's `arguments` are a JSON object, not a string as in OpenAI's APIs, and a tool result
//! names the tool it comes from (`tool_name`) rather than a call id. Its OpenAI-compatible
//! `/v1/chat/completions` is the OpenAI Chat provider's path.

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{Value, json};

use super::openai_chat::OpenAiChat;
use super::shared::{
    Catalog, EmptyTools, ErrorShape, Exchange, JsonPath, RawObject, Rejection, ToolResult,
    conversation, items, pair_calls, parse_object, rejection, required_str, required_string, role,
    text_of, tool_entries, with_member,
};
use super::{History, PathFacts, Provider, Stream, Turn};

pub(crate) struct Ollama;

/// The NDJSON stream's content type.
const NDJSON: &str = "application/x-ndjson";

impl Provider for Ollama {
    fn name(&self) -> &'static str {
        "ollama"
    }

    /// A suffix, as for the other APIs, so that gateway prefixes match.
    fn recognize(&self, path: &str) -> Option<PathFacts> {
        path.ends_with("/api/chat").then(PathFacts::default)
    }

    /// `[{"type": "function", "function": {"name", "description", "parameters"}}]`. Ollama
    /// itself refuses only a `tools` that is not an array of objects (its JSON decoding); that
    /// each is a function with a name, and that names are unique, is the demo's own
    /// strictness, so that a filter that breaks a tool is caught here rather than by a model
    /// that silently ignores it.
    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        let tools_path = JsonPath::Root("tools");
        let entries = tool_entries(request.get("tools"), &tools_path, EmptyTools::Allowed)?;
        let mut catalog = Catalog::default();
        for (index, tool) in entries.iter().flatten().enumerate() {
            let path = tools_path.index(index);
            let kind = required_string(tool, "type", &path)?;
            if kind != "function" {
                let message = format!(
                    "Invalid '{}': unsupported tool type '{kind}'; Ollama's tools are functions.",
                    path.member("type")
                );
                return Err(Rejection::new(message).at(&path.member("type")));
            }
            let function_path = path.member("function");
            let function = match tool.get("function") {
                Some(raw) => parse_object(raw, &function_path)?,
                None => return Err(Rejection::missing(&function_path)),
            };
            catalog.add_named(
                required_string(&function, "name", &function_path)?,
                &function_path,
            )?;
        }
        Ok(catalog)
    }

    /// Ollama streams unless told not to: `stream` absent (or null) streams.
    fn body_streams(&self, request: &RawObject<'_>) -> bool {
        request.get("stream").is_none_or(|raw| raw.get() != "false")
    }

    /// The tools are in OpenAI Chat's shape.
    fn function_tools(&self, request: &Value) -> Vec<String> {
        OpenAiChat.function_tools(request)
    }

    /// An assistant message's `tool_calls` must each be answered by the `role: "tool"`
    /// messages right after it, each naming the tool it ran (`tool_name`), and a tool message
    /// must answer one of them (each call once). Ollama itself only decodes the messages (a
    /// call's `arguments` must be an object) and leaves the pairing to the model's template:
    /// the pairing, and requiring `tool_name`, are the demo's own strictness, so that a filter
    /// that loses a call or a result is caught.
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let read = |index: usize, message: &Value| {
            let path = format!("messages[{index}]");
            // Ollama lowercases roles.
            Ok(match role(message).to_ascii_lowercase().as_str() {
                "tool" => Exchange::Results {
                    results: vec![ToolResult {
                        key: required_str(message, "tool_name", &path)?.to_owned(),
                        path: format!("{path}.tool_name"),
                    }],
                    more_may_follow: true,
                    text: None,
                },
                "assistant" => {
                    let calls = items(message, "tool_calls").iter().enumerate();
                    let names = calls.map(|(call_index, call)| {
                        let function_path = format!("{path}.tool_calls[{call_index}].function");
                        let function = call.get("function").unwrap_or(&Value::Null);
                        let name = required_str(function, "name", &function_path)?;
                        match function.get("arguments") {
                            None | Some(Value::Null | Value::Object(_)) => Ok(name.to_owned()),
                            Some(_) => Err(rejection(
                                format!(
                                    "Invalid type for '{function_path}.arguments': expected an object."
                                ),
                                format!("{function_path}.arguments"),
                            )),
                        }
                    });
                    Exchange::Calls(names.collect::<Result<_, _>>()?)
                }
                "user" => Exchange::text(text_of(message.get("content"), &[])),
                _ => Exchange::text(None),
            })
        };
        let unanswered = |calls_at: usize, pending: &[String]| {
            rejection(
                format!(
                    "the tool calls of messages[{calls_at}] must be followed by tool messages answering each of them; no result for: {}",
                    pending.join(", ")
                ),
                format!("messages[{calls_at}]"),
            )
        };
        let stray = |path: &str, name: &str| {
            rejection(
                format!(
                    "{path}: a tool message must answer a call of the assistant message before it; no call of '{name}' is waiting for its result"
                ),
                path.to_owned(),
            )
        };
        pair_calls(conversation(request, "messages")?, read, unanswered, stray)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut message =
            json!({ "role": "assistant", "content": turn.text.clone().unwrap_or_default() });
        if turn.has_calls() {
            with_member(&mut message, "tool_calls", tool_calls(turn));
        }
        let mut answer = last_chunk(turn, message);
        turn.add_report(&mut answer);
        answer
    }

    /// The text in pieces, then every call in one chunk (as Ollama sends them, once its parser
    /// has read them whole), then the last chunk with `done: true` and the counts; one JSON
    /// object a line.
    fn stream(&self, turn: &Turn, _query: Option<&str>) -> Stream {
        let chunk = |message: Value| {
            json!({
                "model": turn.model,
                "created_at": created_at(turn.created),
                "message": message,
                "done": false,
            })
        };
        let mut chunks: Vec<Value> = turn
            .text_deltas()
            .into_iter()
            .map(|piece| chunk(json!({ "role": "assistant", "content": piece })))
            .collect();
        if turn.has_calls() {
            chunks.push(chunk(json!({
                "role": "assistant",
                "content": "",
                "tool_calls": tool_calls(turn),
            })));
        }
        chunks.push(last_chunk(
            turn,
            json!({ "role": "assistant", "content": "" }),
        ));
        if let Some(first) = chunks.first_mut() {
            turn.add_report(first);
        }
        Stream {
            frames: chunks
                .iter()
                .map(|chunk| Bytes::from(format!("{chunk}\n")))
                .collect(),
            content_type: NDJSON,
        }
    }

    /// `{"error": "..."}`, whatever the status.
    fn error_shape(&self, _status: StatusCode, rejection: &Rejection) -> ErrorShape {
        ErrorShape {
            body: json!({ "error": rejection.message }),
            header: None,
        }
    }
}

/// The calls as Ollama writes them: `{"id", "function": {"index", "name", "arguments"}}`, the
/// arguments an object.
fn tool_calls(turn: &Turn) -> Value {
    turn.calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            json!({
                "id": turn.id("call", index),
                "function": { "index": index, "name": call.name, "arguments": call.arguments },
            })
        })
        .collect()
}

/// The answer's last (or only) object: `message`, `done: true` and the counts. The durations
/// (nanoseconds) are stand-ins proportional to the counts, so that a client's tokens per
/// second come out the same every time.
fn last_chunk(turn: &Turn, message: Value) -> Value {
    const LOAD_NANOS: u64 = 1_000_000;
    const PROMPT_NANOS_PER_TOKEN: u64 = 100_000;
    const EVAL_NANOS_PER_TOKEN: u64 = 10_000_000;
    let prompt_eval = turn.input_tokens.saturating_mul(PROMPT_NANOS_PER_TOKEN);
    let eval = turn.output_tokens.saturating_mul(EVAL_NANOS_PER_TOKEN);
    json!({
        "model": turn.model,
        "created_at": created_at(turn.created),
        "message": message,
        "done": true,
        "done_reason": "stop",
        "total_duration": LOAD_NANOS.saturating_add(prompt_eval).saturating_add(eval),
        "load_duration": LOAD_NANOS,
        "prompt_eval_count": turn.input_tokens,
        "prompt_eval_duration": prompt_eval,
        "eval_count": turn.output_tokens,
        "eval_duration": eval,
    })
}

/// `created_at` as Ollama writes it (Go's RFC 3339 in UTC): `2025-07-07T20:22:19Z`.
fn created_at(unix_seconds: u64) -> String {
    let days = unix_seconds / 86_400;
    let seconds_of_day = unix_seconds % 86_400;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds_of_day / 3_600,
        seconds_of_day % 3_600 / 60,
        seconds_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Call, Endpoint, inspect_request};
    use super::*;

    fn turn(text: Option<&str>, calls: &[(&str, Value)], report: Option<Value>) -> Turn {
        Turn {
            sequence: 7,
            created: 1_700_000_000,
            model: "llama3.2".to_owned(),
            text: text.map(str::to_owned),
            calls: calls
                .iter()
                .map(|(name, arguments)| Call {
                    name: (*name).to_owned(),
                    arguments: arguments.clone(),
                })
                .collect(),
            input_tokens: 40,
            output_tokens: 23,
            include_usage: false,
            report,
        }
    }

    /// The stream's frames, each checked to be one JSON object and its newline.
    fn lines(stream: &Stream) -> Vec<Value> {
        assert_eq!(stream.content_type, "application/x-ndjson");
        stream
            .frames
            .iter()
            .map(|frame| {
                let text = std::str::from_utf8(frame).unwrap();
                let line = text.strip_suffix('\n').unwrap();
                assert!(!line.contains('\n'), "one object a line: {text}");
                serde_json::from_str(line).unwrap()
            })
            .collect()
    }

    #[test]
    fn streams_unless_told_not_to() {
        let streams = |body| inspect(OLLAMA, body).map(|inspection| inspection.stream);
        assert_eq!(
            streams(r#"{"model": "llama3.2", "messages": []}"#),
            Ok(true)
        );
        assert_eq!(streams(r#"{"stream": null}"#), Ok(true));
        assert_eq!(streams(r#"{"stream": true}"#), Ok(true));
        assert_eq!(streams(r#"{"stream": false}"#), Ok(false));
        let endpoint = Endpoint::detect(OLLAMA).unwrap();
        let options = r#"{"model": "m", "options": {"temperature": 0}, "format": "json", "think": true, "keep_alive": "5m"}"#;
        assert!(inspect_request(&endpoint, options.as_bytes()).is_ok());
    }

    #[test]
    fn tools_are_named_functions() {
        let body = r#"{"model": "llama3.2", "tools": [
            {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "send_email"}}
        ]}"#;
        assert_eq!(
            tools(OLLAMA, body),
            Ok(names(&["get_weather", "send_email"]))
        );
        assert_eq!(tools(OLLAMA, r#"{"tools": []}"#), Ok(vec![]));
        assert_eq!(tools(OLLAMA, r#"{"tools": null}"#), Ok(vec![]));

        let refused = |tools: &str| rejection_message(OLLAMA, &format!(r#"{{"tools": {tools}}}"#));
        assert!(refused(r#"{"type": "function"}"#).contains("expected an array"));
        assert!(refused(r#"["get_weather"]"#).contains("'tools[0]'"));
        assert!(refused(r#"[{"function": {"name": "a"}}]"#).contains("'tools[0].type'"));
        assert!(
            refused(r#"[{"type": "web_search", "function": {"name": "a"}}]"#)
                .contains("unsupported tool type 'web_search'")
        );
        assert!(refused(r#"[{"type": "function"}]"#).contains("'tools[0].function'"));
        assert!(
            refused(r#"[{"type": "function", "function": {"description": "x"}}]"#)
                .contains("'tools[0].function.name'")
        );
        assert!(
            refused(r#"[{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]"#)
                .contains("duplicate tool name 'a'")
        );
    }

    #[test]
    fn whole_answers_carry_calls_with_object_arguments() {
        let calls = [
            ("find_tools", json!({ "query": "weather", "limit": 5 })),
            ("send_email", json!({})),
        ];
        let answer = Ollama.whole(&turn(None, &calls, None));
        assert_eq!(
            answer["message"],
            json!({ "role": "assistant", "content": "", "tool_calls": [
                { "id": "call_7_0", "function": { "index": 0, "name": "find_tools", "arguments": { "query": "weather", "limit": 5 } } },
                { "id": "call_7_1", "function": { "index": 1, "name": "send_email", "arguments": {} } },
            ] })
        );
        assert_eq!(answer["model"], "llama3.2");
        assert_eq!(answer["created_at"], "2023-11-14T22:13:20Z");
        assert_eq!(answer["done"], true);
        assert_eq!(answer["done_reason"], "stop");
        assert_eq!(answer["prompt_eval_count"], 40);
        assert_eq!(answer["eval_count"], 23);
        assert!(answer["total_duration"].as_u64().unwrap() > 0);
        assert!(answer.get(crate::report::REPORT_KEY).is_none());

        let report = json!({ "tools": ["a"] });
        let answer = Ollama.whole(&turn(Some("hello there"), &[], Some(report.clone())));
        assert_eq!(
            answer["message"],
            json!({ "role": "assistant", "content": "hello there" })
        );
        assert_eq!(answer[crate::report::REPORT_KEY], report);
    }

    #[test]
    fn streams_are_ndjson_with_the_calls_in_one_chunk() {
        let calls = [("find_tools", json!({ "query": "q" })), ("b", json!({}))];
        let chunks = lines(&Ollama.stream(&turn(Some("Let me look"), &calls, None), None));
        let (last, earlier) = chunks.split_last().unwrap();
        assert!(earlier.iter().all(|chunk| chunk["done"] == false));
        let text: String = earlier
            .iter()
            .filter_map(|chunk| chunk["message"]["content"].as_str())
            .collect();
        assert_eq!(text, "Let me look");
        assert!(earlier.len() >= 3, "the text in pieces: {earlier:?}");
        let with_calls: Vec<&Value> = earlier
            .iter()
            .filter(|chunk| chunk["message"].get("tool_calls").is_some())
            .collect();
        assert_eq!(with_calls.len(), 1);
        assert_eq!(with_calls[0]["message"]["content"], "");
        assert_eq!(
            with_calls[0]["message"]["tool_calls"][1]["function"],
            json!({ "index": 1, "name": "b", "arguments": {} })
        );
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "stop");
        assert_eq!(
            last["message"],
            json!({ "role": "assistant", "content": "" })
        );
        assert_eq!(
            (
                last["prompt_eval_count"].clone(),
                last["eval_count"].clone()
            ),
            (json!(40), json!(23))
        );

        // The report's sentence comes whole, with the report on the first line.
        let report = json!({ "tools": [] });
        let chunks = lines(&Ollama.stream(
            &turn(
                Some("demo upstream received 0 tools"),
                &[],
                Some(report.clone()),
            ),
            None,
        ));
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            chunks[0]["message"]["content"],
            "demo upstream received 0 tools"
        );
        assert_eq!(chunks[0][crate::report::REPORT_KEY], report);
        assert!(chunks[1].get(crate::report::REPORT_KEY).is_none());
    }

    #[test]
    fn history_pairs_results_with_calls_by_tool_name() {
        let history = |messages: Value| Ollama.read_history(&json!({ "messages": messages }));
        let user = json!({ "role": "user", "content": "weather in paris?" });
        let calls = |names: &[&str]| {
            json!({ "role": "assistant", "content": "", "tool_calls": names.iter().map(|name| json!({
                "function": { "name": name, "arguments": { "city": "Paris" } },
            })).collect::<Vec<_>>() })
        };
        let result =
            |name: &str| json!({ "role": "tool", "content": "11 degrees", "tool_name": name });
        assert_eq!(
            history(json!([
                user,
                calls(&["get_weather", "find_tools"]),
                result("find_tools"),
                result("get_weather")
            ])),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather in paris?".to_owned()),
            })
        );
        let missing = history(json!([
            user,
            calls(&["get_weather", "find_tools"]),
            result("get_weather")
        ]));
        assert!(
            missing
                .unwrap_err()
                .message
                .contains("no result for: find_tools")
        );
        let interrupted = history(json!([
            user,
            calls(&["get_weather"]),
            user,
            result("get_weather")
        ]));
        assert!(
            interrupted
                .unwrap_err()
                .message
                .contains("no result for: get_weather")
        );
        let stray = history(json!([
            user,
            calls(&["get_weather"]),
            result("get_weather"),
            result("get_weather")
        ]));
        assert!(
            stray
                .unwrap_err()
                .message
                .contains("no call of 'get_weather'")
        );
        let orphan = history(json!([user, result("get_weather")]));
        assert_eq!(
            orphan.unwrap_err().param.as_deref(),
            Some("messages[1].tool_name")
        );
        let unnamed =
            history(json!([user, calls(&["get_weather"]), { "role": "tool", "content": "11" }]));
        assert!(
            unnamed
                .unwrap_err()
                .message
                .contains("'messages[2].tool_name'")
        );
        let text_arguments = json!({ "role": "assistant", "tool_calls": [
            { "function": { "name": "get_weather", "arguments": "{\"city\":\"Paris\"}" } },
        ] });
        let refused = history(json!([user, text_arguments, result("get_weather")])).unwrap_err();
        assert_eq!(
            refused.param.as_deref(),
            Some("messages[1].tool_calls[0].function.arguments")
        );
        // Roles in any case, as Ollama lowercases them.
        let shouting = json!({ "role": "TOOL", "content": "11", "tool_name": "get_weather" });
        assert_eq!(
            history(json!([user, calls(&["get_weather"]), shouting])).map(|h| h.tool_results),
            Ok(1)
        );
        assert!(Ollama.read_history(&json!({})).is_err());
    }

    #[test]
    fn errors_are_one_message() {
        let shape = Ollama.error_shape(StatusCode::BAD_REQUEST, &Rejection::new("bad tools"));
        assert_eq!(shape.body, json!({ "error": "bad tools" }));
        assert_eq!(shape.header, None);
    }

    #[test]
    fn created_at_is_rfc_3339_in_utc() {
        assert_eq!(created_at(0), "1970-01-01T00:00:00Z");
        assert_eq!(created_at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(created_at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(created_at(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
