//! Gemini (`…/models/{model}:generateContent` and `:streamGenerateContent`, the Gemini API and
//! Vertex AI): <https://ai.google.dev/api/generate-content>.

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{Value, json};

use super::shared::{
    Catalog, EmptyTools, ErrorShape, Exchange, JsonPath, RawObject, Rejection, ToolResult, array,
    conversation, items, pair_calls, parse_object, parse_object_array, rejection, required_str,
    required_string, role, sse_event, text_of, tool_entries, with_member,
};
use super::{Call, History, PathFacts, Provider, Stream, Turn};

pub(crate) struct Gemini;

impl Provider for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    /// `.../models/{model}:generateContent` or `:streamGenerateContent`.
    fn recognize(&self, path: &str) -> Option<PathFacts> {
        let last_segment = path.rsplit('/').next()?;
        let (model, method) = last_segment.rsplit_once(':')?;
        let streams = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        Some(PathFacts {
            streams,
            model: Some(model.to_owned()),
        })
    }

    fn tools<'a>(&self, request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
        let tools_path = JsonPath::Root("tools");
        let entries = tool_entries(request.get("tools"), &tools_path, EmptyTools::Allowed)?;
        let mut catalog = Catalog::default();
        for (index, tool) in entries.iter().flatten().enumerate() {
            let path = tools_path.index(index);
            // A Tool holds function declarations and/or built-ins such as `{"googleSearch": {}}`;
            // a built-in is reported by its key.
            for (key, value) in tool.present_members() {
                if key != "functionDeclarations" && key != "function_declarations" {
                    catalog.add_builtin(key.clone());
                    continue;
                }
                let list_path = path.member(key);
                for (index, declaration) in
                    parse_object_array(value, &list_path)?.iter().enumerate()
                {
                    let declaration_path = list_path.index(index);
                    let name = required_string(declaration, "name", &declaration_path)?;
                    catalog.add_named(name, &declaration_path)?;
                }
            }
        }
        let allowed_path = JsonPath::Root("toolConfig.functionCallingConfig.allowedFunctionNames");
        for name in allowed_function_names(request, &allowed_path)? {
            catalog.require(&name, &allowed_path)?;
        }
        Ok(catalog)
    }

    /// No `stream` member: only the path says it.
    fn body_streams(&self, _request: &RawObject<'_>) -> bool {
        false
    }

    fn function_tools(&self, request: &Value) -> Vec<String> {
        array(request.get("tools"))
            .iter()
            .flat_map(|tool| {
                array(
                    tool.get("functionDeclarations")
                        .or_else(|| tool.get("function_declarations")),
                )
            })
            .filter_map(|declaration| declaration.get("name")?.as_str())
            .map(str::to_owned)
            .collect()
    }

    /// A model turn's `functionCall` parts must each be answered, in the next turn, by a
    /// `functionResponse` part of the same name, and a response must answer such a call.
    /// Calls carry no id, so names are matched (each call once).
    fn read_history(&self, request: &Value) -> Result<History, Rejection> {
        let read = |index: usize, content: &Value| {
            let parts = items(content, "parts").iter().enumerate();
            // The `name` of each part holding `member` (in either spelling).
            let names = |member: &'static str, snake_case: &'static str| {
                parts
                    .clone()
                    .filter_map(move |(at, part)| {
                        Some((at, part.get(member).or_else(|| part.get(snake_case))?))
                    })
                    .map(move |(part_index, part)| {
                        let path = format!("contents[{index}].parts[{part_index}].{member}");
                        let name = required_str(part, "name", &path)?.to_owned();
                        Ok(ToolResult { key: name, path })
                    })
                    .collect::<Result<Vec<_>, Rejection>>()
            };
            if role(content) == "model" {
                let calls = names("functionCall", "function_call")?;
                return Ok(Exchange::Calls(
                    calls.into_iter().map(|call| call.key).collect(),
                ));
            }
            Ok(Exchange::Results {
                results: names("functionResponse", "function_response")?,
                more_may_follow: false,
                text: text_of(content.get("parts"), &[]),
            })
        };
        let unanswered = |calls_at: usize, pending: &[String]| {
            rejection(
                format!(
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn. contents[{calls_at}] calls {} without a function response in the next turn.",
                    pending.join(", ")
                ),
                format!("contents[{calls_at}]"),
            )
        };
        let stray = |path: &str, name: &str| {
            rejection(
                format!(
                    "Please ensure that function response turn comes immediately after a function call turn. {path} answers '{name}', which the previous model turn did not call."
                ),
                path.to_owned(),
            )
        };
        pair_calls(conversation(request, "contents")?, read, unanswered, stray)
    }

    fn whole(&self, turn: &Turn) -> Value {
        let mut parts = Vec::new();
        if let Some(text) = &turn.text {
            parts.push(json!({ "text": text }));
        }
        parts.extend(turn.calls.iter().map(call_part));
        let mut answer = response(turn, parts, true);
        turn.add_report(&mut answer);
        answer
    }

    /// One response per part, the text in pieces and each `functionCall` part whole, the last
    /// with the finish reason and the usage; as SSE with `alt=sse` (which every SDK asks for),
    /// else, as the real API does, one JSON array sent element by element.
    fn stream(&self, turn: &Turn, query: Option<&str>) -> Stream {
        let mut parts: Vec<Value> = turn
            .text_deltas()
            .into_iter()
            .map(|piece| json!({ "text": piece }))
            .collect();
        parts.extend(turn.calls.iter().map(call_part));
        // The report model's stream ends with an empty text part, and is SSE whatever the
        // query says.
        let report = turn.report.is_some();
        if report {
            parts.push(json!({ "text": "" }));
        }
        let count = parts.len();
        let mut chunks: Vec<Value> = parts
            .into_iter()
            .enumerate()
            .map(|(index, part)| response(turn, vec![part], index + 1 == count))
            .collect();
        if let Some(first) = chunks.first_mut() {
            turn.add_report(first);
        }
        if report || query.is_some_and(|query| query.split('&').any(|pair| pair == "alt=sse")) {
            return Stream::sse(chunks.iter().map(|chunk| sse_event(None, chunk)).collect());
        }
        let frames = chunks
            .iter()
            .enumerate()
            .map(|(index, chunk)| {
                let opening = if index == 0 { "[" } else { ",\r\n" };
                let closing = if index + 1 == count { "]" } else { "" };
                Bytes::from(format!("{opening}{chunk}{closing}"))
            })
            .collect();
        Stream {
            frames,
            content_type: "application/json",
        }
    }

    /// `{"error": {"code", "message", "status"}}`, with Google's status name for the status.
    fn error_shape(&self, status: StatusCode, rejection: &Rejection) -> ErrorShape {
        let code = status.as_u16();
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
        ErrorShape {
            body: json!({ "error": { "code": code, "message": rejection.message, "status": kind } }),
            header: None,
        }
    }
}

/// `toolConfig.functionCallingConfig.allowedFunctionNames`, in either JSON spelling.
fn allowed_function_names(
    request: &RawObject<'_>,
    allowed_path: &JsonPath<'_>,
) -> Result<Vec<String>, Rejection> {
    let Some(raw) = request.get_either("toolConfig", "tool_config") else {
        return Ok(Vec::new());
    };
    let config_path = JsonPath::Root("toolConfig");
    let config = parse_object(raw, &config_path)?;
    let Some(raw) = config.get_either("functionCallingConfig", "function_calling_config") else {
        return Ok(Vec::new());
    };
    let calling = parse_object(raw, &config_path.member("functionCallingConfig"))?;
    let Some(raw) = calling.get_either("allowedFunctionNames", "allowed_function_names") else {
        return Ok(Vec::new());
    };
    serde_json::from_str(raw.get())
        .map_err(|_| Rejection::wrong_type(allowed_path, "an array of strings", raw))
}

fn call_part(call: &Call) -> Value {
    json!({ "functionCall": { "name": call.name, "args": call.arguments } })
}

fn usage(turn: &Turn) -> Value {
    json!({
        "promptTokenCount": turn.input_tokens,
        "candidatesTokenCount": turn.output_tokens,
        "totalTokenCount": turn.total_tokens(),
    })
}

/// A `GenerateContentResponse` with `parts`; the last of a stream (or the whole answer) has
/// the finish reason and the usage.
fn response(turn: &Turn, parts: Vec<Value>, last: bool) -> Value {
    let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
    let mut response = json!({ "candidates": [], "modelVersion": turn.model });
    if last {
        with_member(&mut candidate, "finishReason", json!("STOP"));
        with_member(&mut response, "usageMetadata", usage(turn));
    }
    with_member(&mut response, "candidates", json!([candidate]));
    response
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn tools_in_both_spellings() {
        let body = r#"{
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [
                {"functionDeclarations": [{"name": "get_weather"}, {"name": "send_email"}]},
                {"googleSearch": {}},
                {"function_declarations": [{"name": "run_sql"}]},
                {"codeExecution": {}, "functionDeclarations": [{"name": "plot"}]}
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["run_sql", "plot"]}}
        }"#;
        assert_eq!(
            tools(GEMINI, body),
            Ok(names(&[
                "get_weather",
                "send_email",
                "googleSearch",
                "run_sql",
                "codeExecution",
                "plot"
            ]))
        );
        assert_eq!(tools(GEMINI, r#"{"tools": []}"#), Ok(vec![]));

        let unknown = r#"{"tools": [{"functionDeclarations": [{"name": "a"}]}],
            "tool_config": {"function_calling_config": {"allowed_function_names": ["b"]}}}"#;
        assert!(rejection_message(GEMINI, unknown).contains("no tool named 'b'"));
        let duplicate = r#"{"tools": [{"functionDeclarations": [{"name": "a"}]}, {"functionDeclarations": [{"name": "a"}]}]}"#;
        assert!(rejection_message(GEMINI, duplicate).contains("duplicate tool name 'a'"));
        assert!(
            rejection_message(GEMINI, r#"{"tools": {"functionDeclarations": []}}"#)
                .contains("expected an array")
        );
        let unnamed = r#"{"tools": [{"functionDeclarations": [{"description": "x"}]}]}"#;
        assert!(
            rejection_message(GEMINI, unnamed).contains("'tools[0].functionDeclarations[0].name'")
        );
    }

    #[test]
    fn history_matches_responses_by_name() {
        let history = |request: &Value| Gemini.read_history(request);
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
            history(&ok),
            Ok(History {
                tool_results: 2,
                user_text: Some("weather now".to_owned()),
            })
        );
        let missing = json!({ "contents": [user, calls(&["f", "f"]), responses(&["f"])] });
        assert!(history(&missing).is_err());
        let wrong = json!({ "contents": [user, calls(&["f"]), responses(&["g"])] });
        assert!(history(&wrong).unwrap_err().message.contains("'g'"));
        let unanswered = json!({ "contents": [user, calls(&["f"])] });
        assert!(history(&unanswered).is_err());
        let snake = json!({ "contents": [user,
            { "role": "model", "parts": [{ "function_call": { "name": "f" } }] },
            { "role": "function", "parts": [{ "function_response": { "name": "f", "response": {} } }] },
        ] });
        assert_eq!(history(&snake).unwrap().tool_results, 1);
    }
}
