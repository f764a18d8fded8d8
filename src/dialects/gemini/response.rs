//! Gemini `generateContent`, response side: `candidates[0].content.parts` (`text`, `thought`
//! parts, `functionCall{id?,name,args}`, `thoughtSignature`), `usageMetadata`, and the stream of
//! partial responses that `streamGenerateContent` sends (one per SSE frame with `alt=sse`, one
//! per array element without it).
//!
//! A call without an `id` is named by its `name` in [`Edits`] (and its result by its name).

use crate::dialects::shared::calls::{CallShape, edit_content};
use crate::dialects::{Call, Edits, Frame, Opening, Reply, ToolResult, Usage};
use crate::dialects::shared::splice::{apply_patches, json_string, parse_object, set_member};
use crate::dialects::Problem;
use crate::json::{Str, array_items, find_path};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Where a part keeps its call: `functionCall{name,args}`.
const FUNCTION_CALL: CallShape = CallShape {
    object: &["functionCall"],
    arguments: "args",
};

/// The Schema keywords a FunctionDeclaration's `parameters` accepts (Gemini's subset of OpenAPI
/// 3.0); other JSON Schema keywords are dropped rather than rejected by the API.
const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// A (whole or partial) GenerateContentResponse, borrowed.
#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default, rename = "usageMetadata")]
    usage_metadata: Option<UsageMetadata>,
}

#[derive(Deserialize)]
struct Candidate<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default, rename = "finishReason")]
    finish_reason: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    parts: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default, rename = "functionCall")]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

impl FunctionCall<'_> {
    /// The key `Edits` names this call by: its id, or its name when it has none.
    fn key(&self) -> String {
        match (&self.id, &self.name) {
            (Some(id), _) if !id.is_empty() => id.to_string(),
            (_, name) => name.as_deref().unwrap_or_default().to_owned(),
        }
    }
}

#[derive(Deserialize)]
struct UsageMetadata {
    #[serde(default, rename = "promptTokenCount")]
    prompt: Option<u64>,
    #[serde(default, rename = "candidatesTokenCount")]
    candidates: Option<u64>,
    #[serde(default, rename = "thoughtsTokenCount")]
    thoughts: Option<u64>,
}

impl UsageMetadata {
    /// Thinking is output the model was billed for, so it counts as output.
    fn usage(&self) -> Usage {
        Usage {
            input: self.prompt.unwrap_or(0),
            output: self.candidates.unwrap_or(0) + self.thoughts.unwrap_or(0),
        }
    }
}

/// A stream chunk, owned: its parts are merged across chunks.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    candidates: Option<Vec<ChunkCandidate>>,
    #[serde(default, rename = "usageMetadata")]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkCandidate {
    #[serde(default)]
    content: Option<ChunkContent>,
    /// Which candidate (`candidateCount` > 1) the chunk continues; absent means the first.
    #[serde(default)]
    index: Option<u64>,
}

#[derive(Deserialize)]
struct ChunkContent {
    #[serde(default)]
    parts: Vec<Map<String, Value>>,
}

/// A candidate's parts, as a stream chunk sends them.
type Parts = Vec<Map<String, Value>>;

impl Chunk {
    /// The parts of the first candidate (the turn), and those of the others.
    fn parts(self) -> (Parts, Parts) {
        let (mut first, mut others) = (Vec::new(), Vec::new());
        for candidate in self.candidates.into_iter().flatten() {
            let parts = candidate.content.map(|c| c.parts).unwrap_or_default();
            match candidate.index.unwrap_or(0) {
                0 => first.extend(parts),
                _ => others.extend(parts),
            }
        }
        (first, others)
    }
}

pub(crate) fn tool_entry(name: &str, description: &str, parameters: &Value) -> String {
    format!(
        r#"{{"name":{},"description":{},"parameters":{}}}"#,
        json_string(name),
        json_string(description),
        gemini_schema(parameters),
    )
}

/// A JSON Schema as Gemini's Schema object: `type` in the upper case of the API's `Type` enum,
/// `["string","null"]` as `STRING` with `nullable`, keywords outside the subset left out.
fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(fields) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("type", Value::String(kind)) => {
                out.insert(key.clone(), Value::String(kind.to_ascii_uppercase()));
            }
            ("type", Value::Array(kinds)) => {
                let named: Vec<&str> = kinds
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|k| *k != "null")
                    .collect();
                if let [only] = named.as_slice() {
                    out.insert(key.clone(), Value::String(only.to_ascii_uppercase()));
                }
                if kinds.iter().any(|k| k == "null") {
                    out.insert("nullable".into(), Value::Bool(true));
                }
            }
            ("properties", Value::Object(properties)) => {
                let converted = properties
                    .iter()
                    .map(|(name, property)| (name.clone(), gemini_schema(property)))
                    .collect();
                out.insert(key.clone(), Value::Object(converted));
            }
            ("items", items) => {
                out.insert(key.clone(), gemini_schema(items));
            }
            ("anyOf", Value::Array(options)) => {
                let converted = options.iter().map(gemini_schema).collect();
                out.insert(key.clone(), Value::Array(converted));
            }
            (keyword, _) if SCHEMA_KEYWORDS.contains(&keyword) => {
                out.entry(key.clone()).or_insert_with(|| value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

/// The call a `functionCall` part makes.
fn call_of(call: FunctionCall) -> Result<Call, Problem> {
    let name = call.name.ok_or(Problem::BadShape)?;
    Ok(Call {
        id: call.id.unwrap_or_default().into_owned(),
        name: name.into_owned(),
        arguments: call.args.map_or("{}", RawValue::get).to_owned(),
    })
}

/// The calls among a candidate's parts.
fn content_calls(content: Content) -> Result<Vec<Call>, Problem> {
    let mut calls = Vec::new();
    for raw in content.parts.map(array_items).unwrap_or(Some(Vec::new())).ok_or(Problem::BadShape)? {
        let part: Part = parse_object(raw.get()).map_err(|_| Problem::BadShape)?;
        if let Some(call) = part.function_call {
            calls.push(call_of(call)?);
        }
    }
    Ok(calls)
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let response: Response = parse_object(body)?;
    let usage = response.usage_metadata.as_ref().map(UsageMetadata::usage);
    // A blocked prompt has no candidate, a blocked answer no content: no turn, no calls.
    let content = response
        .candidates
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|c| c.content);
    let Some(content) = content else {
        return Ok(Reply {
            calls: Vec::new(),
            usage,
            turn: Vec::new(),
        });
    };
    let parsed: Content = crate::json::parse(content).ok_or(Problem::BadShape)?;
    let mut calls = content_calls(parsed)?;
    // The turn is the first candidate's; a client that asked for several (`candidateCount`)
    // gets every candidate's calls, so every one is read (and checked under access rules).
    let others = response.candidates.iter().flatten().skip(1);
    for content in others.filter_map(|c| c.content) {
        let parsed: Content = crate::json::parse(content).ok_or(Problem::BadShape)?;
        calls.extend(content_calls(parsed)?);
    }
    Ok(Reply {
        calls,
        usage,
        // The content's own bytes, role "model": thought signatures go back untouched.
        turn: vec![content.get().to_owned()],
    })
}

/// Whether a part is text and nothing else that would stop it merging with its neighbour.
fn is_plain_text(part: &Map<String, Value>) -> bool {
    part.get("text").is_some_and(Value::is_string)
        && part
            .keys()
            .all(|k| matches!(k.as_str(), "text" | "thought" | "thoughtSignature"))
}

/// Adds a streamed part to the parts so far. Consecutive text pieces of the same kind (thought
/// or answer) become one part, as in a whole response; a signature ends the part it comes with.
fn push_part(parts: &mut Vec<Map<String, Value>>, part: Map<String, Value>) {
    if let Some(last) = parts.last_mut() {
        let mergeable = is_plain_text(last)
            && is_plain_text(&part)
            && last.get("thought") == part.get("thought")
            && !last.contains_key("thoughtSignature");
        if mergeable {
            let piece = part.get("text").and_then(Value::as_str).unwrap_or_default();
            if let Some(Value::String(text)) = last.get_mut("text") {
                text.push_str(piece);
            }
            if let Some(signature) = part.get("thoughtSignature") {
                last.insert("thoughtSignature".into(), signature.clone());
            }
            return;
        }
    }
    parts.push(part);
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    let mut parts = Vec::new();
    let mut other_calls = Vec::new();
    let mut usage = None;
    for frame in frames {
        let chunk: Chunk = parse_object(&frame.data)?;
        // A stream that failed midway is not a turn the gateway can answer.
        if chunk.error.is_some() {
            return Err(Problem::BadShape);
        }
        if let Some(metadata) = &chunk.usage_metadata {
            usage = Some(metadata.usage());
        }
        let (first, others) = chunk.parts();
        for part in first {
            push_part(&mut parts, part);
        }
        // The other candidates' calls reach the client too: they are read, not kept.
        other_calls.extend(others.into_iter().filter(|p| p.contains_key("functionCall")));
    }
    let mut calls = Vec::new();
    for part in parts.iter().chain(&other_calls) {
        let Some(call) = part.get("functionCall") else {
            continue;
        };
        let field = |key: &str| call.get(key).and_then(Value::as_str);
        let name = field("name").ok_or(Problem::BadShape)?;
        calls.push(Call {
            id: field("id").unwrap_or_default().to_owned(),
            name: name.to_owned(),
            arguments: call
                .get("args")
                .map_or_else(|| "{}".to_owned(), Value::to_string),
        });
    }
    let parts: Vec<Value> = parts.into_iter().map(Value::Object).collect();
    Ok(Reply {
        calls,
        usage,
        turn: vec![format!(
            r#"{{"role":"model","parts":{}}}"#,
            Value::Array(parts)
        )],
    })
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        let Ok(chunk) = parse_object::<Chunk>(&frame.data) else {
            continue;
        };
        if chunk.error.is_some() {
            // Nothing to hold for: the client gets the error as it is.
            return Opening::Answer;
        }
        let (first, others) = chunk.parts();
        if others.iter().any(|part| part.contains_key("functionCall")) {
            return Opening::Calls;
        }
        for part in first {
            if part.contains_key("functionCall") {
                return Opening::Calls;
            }
            let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
            let text = part.get("text").and_then(Value::as_str).unwrap_or_default();
            // An empty text part may only carry a signature: not yet an answer.
            if !thought && !text.is_empty() {
                return Opening::Answer;
            }
        }
    }
    Opening::Undecided
}

pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    if results.is_empty() {
        return Vec::new();
    }
    let parts: Vec<String> = results
        .iter()
        .map(|result| {
            let id = if result.call.id.is_empty() {
                String::new()
            } else {
                format!(r#","id":{}"#, json_string(&result.call.id))
            };
            format!(
                r#"{{"functionResponse":{{"name":{}{id},"response":{}}}}}"#,
                json_string(&result.call.name),
                response_object(result),
            )
        })
        .collect();
    vec![format!(
        r#"{{"role":"user","parts":[{}]}}"#,
        parts.join(",")
    )]
}

/// The `response` object of a result: its content when that is a JSON object, else the text
/// under the `output` (or `error`) key the API documents for function responses.
fn response_object(result: &ToolResult) -> String {
    match serde_json::from_str::<&RawValue>(&result.content) {
        Ok(raw) if raw.get().starts_with('{') => raw.get().to_owned(),
        _ => {
            let key = if result.is_error { "error" } else { "output" };
            format!(r#"{{"{key}":{}}}"#, json_string(&result.content))
        }
    }
}

/// The `Edits` key of the call in a part; `None` when the part is not a call.
fn function_call_key(part: &str) -> Result<Option<String>, Problem> {
    let part: Part = parse_object(part).map_err(|_| Problem::BadShape)?;
    Ok(part.function_call.as_ref().map(FunctionCall::key))
}

/// One response (or chunk) with the edits applied.
struct Edited {
    text: String,
    /// Every part of the candidate was a removed call.
    emptied: bool,
    /// The candidate has a `finishReason`.
    finished: bool,
    /// The text part took the place of a dropped call.
    text_written: bool,
}

/// A text part holding `text`.
fn text_part(text: &str) -> String {
    format!(r#"{{"text":{}}}"#, json_string(text))
}

/// Applies the drops and renames to every candidate of `text` (a client that asked for
/// several, `candidateCount`, gets every one, so every one is edited), and writes `usage`
/// (when given) into its `usageMetadata`. `part` (a text part, see [`edit_content`]) takes
/// the place of the first dropped call of each candidate; only the first candidate gets it
/// appended when no call was dropped.
fn edit_response(
    text: &str,
    edits: &Edits,
    usage: Option<Usage>,
    (part, or_last): (Option<&str>, bool),
) -> Result<Edited, Problem> {
    let response: Response = parse_object(text)?;
    let candidates = response.candidates.as_deref().unwrap_or_default();
    let mut patches = Vec::new();
    let (mut dropped, mut blocks_left, mut text_written) = (0, 0, false);
    for (at, candidate) in candidates.iter().enumerate() {
        let parts = candidate
            .content
            .map(|content| crate::json::parse::<Content>(content).ok_or(Problem::BadShape))
            .transpose()?
            .and_then(|content| content.parts);
        let Some(parts) = parts else {
            continue;
        };
        let part = (part, or_last && at == 0);
        let (patch, edited) =
            edit_content(text, parts, &FUNCTION_CALL, function_call_key, edits, part)?;
        dropped += edited.dropped;
        blocks_left += edited.blocks_left;
        text_written |= edited.text_written;
        patches.extend(patch);
    }
    if let Some(usage) = usage {
        patches.extend(usage_patches(
            text,
            response.usage_metadata.as_ref(),
            usage,
        )?);
    }
    Ok(Edited {
        text: apply_patches(text, patches).ok_or(Problem::BadShape)?,
        emptied: dropped > 0 && blocks_left == 0,
        finished: candidates.iter().any(|c| c.finish_reason.is_some()),
        text_written,
    })
}

/// Writes `usage` into `usageMetadata`: the prompt count, the candidates count less this
/// response's thinking (so that candidates + thoughts is the output, as [`UsageMetadata::usage`]
/// reads it), and the total as their sum.
fn usage_patches(
    text: &str,
    metadata: Option<&UsageMetadata>,
    usage: Usage,
) -> Result<Vec<(std::ops::Range<usize>, String)>, Problem> {
    let thoughts = metadata.and_then(|m| m.thoughts).unwrap_or(0);
    let counts = [
        ("promptTokenCount", usage.input),
        (
            "candidatesTokenCount",
            usage.output.saturating_sub(thoughts),
        ),
        ("totalTokenCount", usage.input + usage.output),
    ];
    let Some(object) = find_path(text, &["usageMetadata"]) else {
        let members: Vec<String> = counts
            .iter()
            .map(|(key, count)| format!(r#""{key}":{count}"#))
            .collect();
        let metadata = format!("{{{}}}", members.join(","));
        let top = text.len() - text.trim_start().len()..text.trim_end().len();
        let patch = set_member(text, top, "usageMetadata", &metadata);
        return Ok(patch.into_iter().collect());
    };
    counts
        .iter()
        .map(|(key, count)| set_member(text, object.clone(), key, &count.to_string()))
        .collect::<Option<Vec<_>>>()
        .ok_or(Problem::BadShape)
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    let part = edits.text.as_deref().map(text_part);
    Ok(edit_response(body, edits, edits.usage, (part.as_deref(), true))?.text)
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    // Usage is cumulative: the last chunk that reports it carries the totals.
    let last_usage = frames
        .iter()
        .rposition(|f| find_path(&f.data, &["usageMetadata"]).is_some());
    let mut out = String::new();
    // The text part goes in the chunk of the first dropped call, once.
    let mut part = edits.text.as_deref().map(text_part);
    for (at, frame) in frames.iter().enumerate() {
        let is_last_usage = last_usage == Some(at);
        let usage = if is_last_usage { edits.usage } else { None };
        let edited = edit_response(&frame.data, edits, usage, (part.as_deref(), false))?;
        if edited.text_written {
            part = None;
        }
        // A chunk that only carried removed calls says nothing the client needs.
        if edited.emptied && !edited.finished && !is_last_usage {
            continue;
        }
        Frame {
            event: frame.event.clone(),
            data: edited.text,
        }
        .write(&mut out);
    }
    Ok(out)
}

/// The tool calls a chunk starts: its `functionCall` parts.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    let items = |v: &Value, at: &str| v.pointer(at).and_then(Value::as_array).cloned();
    items(event, "/candidates")
        .into_iter()
        .flatten()
        .flat_map(|c| items(&c, "/content/parts").into_iter().flatten())
        .filter_map(|part| part.pointer("/functionCall/name")?.as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::write_all;

    /// Text with a signature, a call without id and one with, pretty-printed.
    const TWO_CALLS: &str = r#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {"text": "I will look that up.", "thoughtSignature": "CiQB0e2Kb3dRhQ=="},
          {"functionCall": {"name": "find_tools", "args": {"query": "weather"}}},
          {"functionCall": {"id": "call_7", "name": "get_weather", "args": {"city": "Paris"}}}
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 30, "totalTokenCount": 200, "thoughtsTokenCount": 50},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "mTFpaKe2"
}"#;

    const ONE_CALL: &str = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"find_tools","args":{"query":"weather"}},"thoughtSignature":"CiQB"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":80,"candidatesTokenCount":12,"totalTokenCount":92},"modelVersion":"gemini-2.5-flash"}"#;

    const TEXT: &str = r#"{"candidates":[{"content":{"parts":[{"text":"Paris is sunny."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":80,"candidatesTokenCount":5,"totalTokenCount":85},"modelVersion":"gemini-2.5-flash"}"#;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn drop(keys: &[&str]) -> Edits {
        Edits {
            drop: keys.iter().map(|s| s.to_string()).collect(),
            ..Edits::default()
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> Call {
        Call {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn tool_entry_converts_the_schema() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                "tags": {"type": ["array", "null"], "items": {"type": "string"}}
            },
            "required": ["query"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        });
        let entry = value(&tool_entry("find_tools", "Find tools.", &schema));
        assert_eq!(
            entry,
            serde_json::json!({"name": "find_tools", "description": "Find tools.", "parameters": {
                "type": "OBJECT",
                "properties": {
                    "query": {"type": "STRING", "description": "What the tool should do"},
                    "limit": {"type": "INTEGER", "minimum": 1, "maximum": 20},
                    "tags": {"type": "ARRAY", "nullable": true, "items": {"type": "STRING"}}
                },
                "required": ["query"]
            }})
        );
    }

    #[test]
    fn reads_calls_usage_and_the_content_bytes() {
        let reply = read_reply(TWO_CALLS).unwrap();
        assert_eq!(
            reply.calls,
            [
                call("", "find_tools", r#"{"query": "weather"}"#),
                call("call_7", "get_weather", r#"{"city": "Paris"}"#),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 120,
                output: 80
            })
        );
        let start = TWO_CALLS.find("{\n        \"parts\"").unwrap();
        let end = TWO_CALLS.find(",\n      \"finishReason\"").unwrap();
        assert_eq!(reply.turn, [&TWO_CALLS[start..end]]);
        assert!(reply.turn[0].contains(r#""thoughtSignature": "CiQB0e2Kb3dRhQ==""#));

        let text = read_reply(TEXT).unwrap();
        assert!(text.calls.is_empty());
        assert_eq!(text.turn.len(), 1);
        let args_free = read_reply(
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"now"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(args_free.calls, [call("", "now", "{}")]);
        assert_eq!(args_free.usage, None);
    }

    #[test]
    fn blocked_and_bad_replies() {
        let blocked = read_reply(r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7}}"#).unwrap();
        assert!(blocked.calls.is_empty() && blocked.turn.is_empty());
        assert_eq!(read_reply("{\"candidates\":["), Err(Problem::MalformedJson));
        assert_eq!(read_reply("[]"), Err(Problem::BadShape));
        assert_eq!(read_reply(r#"{"candidates":"x"}"#), Err(Problem::BadShape));
        assert_eq!(
            read_reply(r#"{"candidates":[{"content":{"parts":{}}}]}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_reply(r#"{"candidates":[{"content":{"parts":[{"functionCall":{"args":{}}}]}}]}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            finish_reply("nope", &Edits::default()),
            Err(Problem::MalformedJson)
        );
        assert_eq!(
            finish_reply(r#"{"candidates":[{"content":{"parts":7}}]}"#, &drop(&["x"])),
            Err(Problem::BadShape)
        );
    }

    #[test]
    fn tool_results_are_one_user_content() {
        let items = tool_results(&[
            ToolResult {
                call: call("", "find_tools", "{}"),
                content: r#"{"tools":[{"name":"get_weather"}]}"#.into(),
                is_error: false,
            },
            ToolResult {
                call: call("call_9", "find_tools", "{}"),
                content: "not an object".into(),
                is_error: true,
            },
        ]);
        assert_eq!(items.len(), 1);
        assert_eq!(
            value(&items[0]),
            serde_json::json!({"role": "user", "parts": [
                {"functionResponse": {"name": "find_tools", "response": {"tools": [{"name": "get_weather"}]}}},
                {"functionResponse": {"name": "find_tools", "id": "call_9", "response": {"error": "not an object"}}}
            ]})
        );
        assert!(tool_results(&[]).is_empty());
    }

    #[test]
    fn empty_edits_keep_the_body() {
        for body in [TWO_CALLS, ONE_CALL, TEXT] {
            assert_eq!(finish_reply(body, &Edits::default()).unwrap(), body);
        }
    }

    #[test]
    fn drops_calls_by_name_or_id() {
        let out = finish_reply(TWO_CALLS, &drop(&["find_tools"])).unwrap();
        assert_eq!(
            out,
            TWO_CALLS.replace(
                "\n          {\"functionCall\": {\"name\": \"find_tools\", \"args\": {\"query\": \"weather\"}}},",
                ""
            )
        );
        let out = finish_reply(TWO_CALLS, &drop(&["call_7"])).unwrap();
        let reply = read_reply(&out).unwrap();
        assert_eq!(
            reply.calls,
            [call("", "find_tools", r#"{"query": "weather"}"#)]
        );
        // An id, once present, is the only name a call answers to.
        assert_eq!(
            finish_reply(TWO_CALLS, &drop(&["get_weather"])).unwrap(),
            TWO_CALLS
        );
    }

    #[test]
    fn dropping_the_only_call_and_rewriting_usage() {
        let edits = Edits {
            usage: Some(Usage {
                input: 200,
                output: 40,
            }),
            ..drop(&["find_tools"])
        };
        let out = finish_reply(ONE_CALL, &edits).unwrap();
        assert_eq!(
            out,
            r#"{"candidates":[{"content":{"parts":[],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":200,"candidatesTokenCount":40,"totalTokenCount":240},"modelVersion":"gemini-2.5-flash"}"#
        );
        // Thinking stays counted apart: candidates + thoughts is the output.
        let usage_only = Edits {
            usage: Some(Usage {
                input: 300,
                output: 90,
            }),
            ..Edits::default()
        };
        let out = finish_reply(TWO_CALLS, &usage_only).unwrap();
        assert!(out.contains(r#"{"promptTokenCount": 300, "candidatesTokenCount": 40, "totalTokenCount": 390, "thoughtsTokenCount": 50}"#));
        assert_eq!(read_reply(&out).unwrap().usage, usage_only.usage);
        let missing = finish_reply(r#"{"candidates":[]}"#, &usage_only).unwrap();
        assert_eq!(
            value(&missing)["usageMetadata"],
            serde_json::json!({"promptTokenCount": 300, "candidatesTokenCount": 90, "totalTokenCount": 390})
        );
    }

    #[test]
    fn rename_rewrites_name_and_args() {
        let edits = Edits {
            rename: vec![(
                "find_tools".into(),
                "get_forecast".into(),
                r#"{"city":"Oslo"}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_reply(ONE_CALL, &edits).unwrap();
        assert_eq!(
            out,
            ONE_CALL.replace(
                r#"{"name":"find_tools","args":{"query":"weather"}}"#,
                r#"{"name":"get_forecast","args":{"city":"Oslo"}}"#
            )
        );
        let no_args = r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"c1","name":"use_tool"}}]}}]}"#;
        let edits = Edits {
            rename: vec![("c1".into(), "now".into(), "{}".into())],
            ..Edits::default()
        };
        let reply = read_reply(&finish_reply(no_args, &edits).unwrap()).unwrap();
        assert_eq!(reply.calls, [call("c1", "now", "{}")]);
    }

    fn stream() -> Vec<Frame> {
        [
            r#"{"candidates":[{"content":{"parts":[{"text":"**Planning** the lookup","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":120,"totalTokenCount":140,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"Let me "}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":120,"totalTokenCount":150,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash"}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"check."}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":120,"totalTokenCount":160,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash"}"#,
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"find_tools","args":{"query":"weather"}},"thoughtSignature":"CiQB"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":120,"totalTokenCount":170,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash"}"#,
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":30,"totalTokenCount":170,"thoughtsTokenCount":20},"modelVersion":"gemini-2.5-flash"}"#,
        ]
        .into_iter()
        .map(Frame::data)
        .collect()
    }

    #[test]
    fn merges_streamed_parts() {
        let reply = read_stream(&stream()).unwrap();
        assert_eq!(
            reply.calls,
            [
                call("", "find_tools", r#"{"query":"weather"}"#),
                call("", "get_weather", r#"{"city":"Paris"}"#),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 120,
                output: 50
            })
        );
        assert_eq!(
            value(&reply.turn[0]),
            serde_json::json!({"role": "model", "parts": [
                {"text": "**Planning** the lookup", "thought": true},
                {"text": "Let me check."},
                {"functionCall": {"name": "find_tools", "args": {"query": "weather"}}, "thoughtSignature": "CiQB"},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
            ]})
        );
        // A signature that arrives on an empty text part closes the text before it.
        let signed = [
            Frame::data(r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}]}"#),
            Frame::data(
                r#"{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"c2ln"}],"role":"model"}}]}"#,
            ),
            Frame::data(
                r#"{"candidates":[{"content":{"parts":[{"text":" there"}],"role":"model"}}]}"#,
            ),
        ];
        assert_eq!(
            value(&read_stream(&signed).unwrap().turn[0]),
            serde_json::json!({"role": "model", "parts": [{"text": "Hi", "thoughtSignature": "c2ln"}, {"text": " there"}]})
        );
    }

    #[test]
    fn bad_streams_are_errors() {
        assert_eq!(
            read_stream(&[Frame::data("{")]),
            Err(Problem::MalformedJson)
        );
        assert_eq!(
            read_stream(&[Frame::data(
                r#"{"error":{"code":503,"status":"UNAVAILABLE"}}"#
            )]),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_stream(&[Frame::data(
                r#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]}}]}"#
            )]),
            Err(Problem::BadShape)
        );
        assert_eq!(
            finish_stream(&[Frame::data("x")], &Edits::default()),
            Err(Problem::MalformedJson)
        );
    }

    #[test]
    fn opening_skips_thoughts() {
        let frames = stream();
        assert_eq!(opening(&frames[..1]), Opening::Undecided);
        assert_eq!(opening(&frames[..2]), Opening::Answer);
        assert_eq!(
            opening(&[frames[0].clone(), frames[3].clone()]),
            Opening::Calls
        );
        assert_eq!(
            opening(&[Frame::data("junk"), frames[4].clone()]),
            Opening::Calls
        );
        let signature_only = Frame::data(
            r#"{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"c2ln"}]}}]}"#,
        );
        assert_eq!(opening(&[signature_only]), Opening::Undecided);
        assert_eq!(opening(&[]), Opening::Undecided);
    }

    #[test]
    fn finishes_streams() {
        let frames = stream();
        assert_eq!(
            finish_stream(&frames, &Edits::default()).unwrap(),
            write_all(&frames)
        );

        // The chunk that only held the removed call goes; usage lands in the last chunk.
        let edits = Edits {
            usage: Some(Usage {
                input: 400,
                output: 90,
            }),
            ..drop(&["find_tools"])
        };
        let out = finish_stream(&frames, &edits).unwrap();
        let (kept, _) = crate::sse::frames(&out);
        assert_eq!(kept.len(), 4);
        let reply = read_stream(&kept).unwrap();
        assert_eq!(
            reply.calls,
            [call("", "get_weather", r#"{"city":"Paris"}"#)]
        );
        assert_eq!(reply.usage, edits.usage);
        assert!(kept[3].data.contains(r#""usageMetadata":{"promptTokenCount":400,"candidatesTokenCount":70,"totalTokenCount":490,"thoughtsTokenCount":20}"#));
        assert_eq!(kept[..3], frames[..3]);

        // The last chunk stays, emptied, because it carries the finish reason and the usage.
        let out = finish_stream(&frames, &drop(&["get_weather"])).unwrap();
        let (kept, _) = crate::sse::frames(&out);
        assert_eq!(kept.len(), 5);
        assert!(kept[4].data.starts_with(
            r#"{"candidates":[{"content":{"parts":[],"role":"model"},"finishReason":"STOP""#
        ));

        let edits = Edits {
            rename: vec![(
                "find_tools".into(),
                "get_forecast".into(),
                r#"{"days":2}"#.into(),
            )],
            ..Edits::default()
        };
        let reply =
            read_stream(&crate::sse::frames(&finish_stream(&frames, &edits).unwrap()).0)
                .unwrap();
        assert_eq!(reply.calls[0], call("", "get_forecast", r#"{"days":2}"#));
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::Gemini.codec();
        let (out, reply) = refused(codec, TWO_CALLS, false, &["call_7"]);
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(value(&out)["candidates"][0]["content"]["parts"][2]["text"], crate::dialects::shared::testing::REFUSAL);
        let (out, reply) = refused(codec, ONE_CALL, false, &["find_tools"]);
        assert!(reply.calls.is_empty());
        assert_eq!(value(&out)["candidates"][0]["finishReason"], "STOP");
        let (_, reply) = refused(codec, &write_all(&stream()), true, &["find_tools"]);
        assert!(reply.calls.iter().all(|c| c.name != "find_tools"));
    }
}
