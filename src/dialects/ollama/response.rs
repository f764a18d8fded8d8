//! Ollama's native chat answers: one object `{"model","created_at","message":{"role":
//! "assistant","content","thinking"?,"tool_calls":[{"function":{"name","arguments":{…}}}]},
//! "done":true,"done_reason", …,"prompt_eval_count","eval_count"}`, or, streamed, one such
//! object per line (`application/x-ndjson`), each with a piece of `message`, the last with
//! `"done":true` and the counts. A tool call comes whole, in one line. Calls have no id before
//! Ollama 0.12 (`id` when they have one): edits name them by name.
//!
//! Edits are spliced into the original bytes: the calls array through the shared call editor,
//! the counts in place.

use crate::dialects::Problem;
use crate::dialects::shared::calls::{CallShape, edit_calls};
use crate::dialects::shared::splice::{apply_patches, json_string, parse_object, set_member};
use crate::json::{Str, array_items, find_path, span_in};
use crate::dialects::{Call, Edits, Frame, Opening, Reply, ToolResult, Usage};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// One answer object, whole or one line of a stream.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
}

impl Answer<'_> {
    fn usage(&self) -> Option<Usage> {
        if self.prompt_eval_count.is_none() && self.eval_count.is_none() {
            return None;
        }
        Some(Usage {
            input: self.prompt_eval_count.unwrap_or(0),
            output: self.eval_count.unwrap_or(0),
        })
    }

    fn message(&self) -> Result<Option<Message<'_>>, Problem> {
        self.message.map(|m| parse_object(m.get())).transpose()
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Str<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// Where a call keeps its name and arguments: `{"function":{"name","arguments"}}`.
const CALL_SHAPE: CallShape = CallShape {
    object: &["function"],
    arguments: "arguments",
};

impl ToolCall<'_> {
    /// The key `Edits` names this call by: its id, or its name when it has none.
    fn key(&self) -> String {
        match (&self.id, self.function.as_ref().and_then(|f| f.name.as_ref())) {
            (Some(id), _) if !id.is_empty() => id.to_string(),
            (_, name) => name.map(|n| n.to_string()).unwrap_or_default(),
        }
    }

    fn call(&self) -> Result<Call, Problem> {
        let function = self.function.as_ref().ok_or(Problem::BadShape)?;
        let name = function.name.as_ref().ok_or(Problem::BadShape)?;
        Ok(Call {
            id: self.id.as_deref().unwrap_or_default().to_owned(),
            name: name.to_string(),
            arguments: function.arguments.map_or("{}", RawValue::get).to_owned(),
        })
    }
}

/// The calls of a `tool_calls` array, and the array's items.
fn calls_of(array: Option<&RawValue>) -> Result<Vec<Call>, Problem> {
    let Some(array) = array else {
        return Ok(Vec::new());
    };
    if array.get() == "null" {
        return Ok(Vec::new());
    }
    array_items(array)
        .ok_or(Problem::BadShape)?
        .iter()
        .map(|item| parse_object::<ToolCall>(item.get())?.call())
        .collect()
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let answer: Answer = parse_object(body)?;
    if answer.error.is_some() {
        return Err(Problem::BadShape);
    }
    let message = answer.message()?;
    let calls = calls_of(message.as_ref().and_then(|m| m.tool_calls))?;
    Ok(Reply {
        calls,
        usage: answer.usage(),
        // The message's own bytes (role "assistant"): Ollama takes it back as it gave it.
        turn: answer.message.map(|m| m.get().to_owned()).into_iter().collect(),
    })
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    let (mut content, mut thinking) = (String::new(), String::new());
    let mut calls = Vec::new();
    let mut call_items: Vec<Value> = Vec::new();
    let mut usage = None;
    for frame in frames {
        let answer: Answer = parse_object(&frame.data)?;
        // A stream that failed midway is not a turn the gateway can answer.
        if answer.error.is_some() {
            return Err(Problem::BadShape);
        }
        if let Some(counts) = answer.usage() {
            usage = Some(counts);
        }
        let Some(message) = answer.message()? else {
            continue;
        };
        content.push_str(message.content.as_deref().unwrap_or_default());
        thinking.push_str(message.thinking.as_deref().unwrap_or_default());
        calls.extend(calls_of(message.tool_calls)?);
        if let Some(array) = message.tool_calls {
            if let Ok(Value::Array(items)) = serde_json::from_str(array.get()) {
                call_items.extend(items);
            }
        }
    }
    let mut turn = serde_json::Map::new();
    turn.insert("role".into(), "assistant".into());
    turn.insert("content".into(), content.into());
    if !thinking.is_empty() {
        turn.insert("thinking".into(), thinking.into());
    }
    if !call_items.is_empty() {
        turn.insert("tool_calls".into(), Value::Array(call_items));
    }
    Ok(Reply {
        calls,
        usage,
        turn: vec![Value::Object(turn).to_string()],
    })
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        let Ok(answer) = parse_object::<Answer>(&frame.data) else {
            continue;
        };
        if answer.error.is_some() {
            // Nothing to hold for: the client gets the error as it is.
            return Opening::Answer;
        }
        let Ok(Some(message)) = answer.message() else {
            continue;
        };
        if message.tool_calls.is_some_and(|c| c.get() != "null" && c.get() != "[]") {
            return Opening::Calls;
        }
        // Thinking alone is not yet an answer.
        if !message.content.as_deref().unwrap_or_default().is_empty() {
            return Opening::Answer;
        }
    }
    Opening::Undecided
}

/// The tool calls a line starts: a line carries each call whole.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    let calls = event.pointer("/message/tool_calls").and_then(Value::as_array);
    calls
        .into_iter()
        .flatten()
        .filter_map(|call| call.pointer("/function/name")?.as_str().map(str::to_owned))
        .collect()
}

/// One `tool` message per result, naming the tool as Ollama's `tool_name` does.
pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    results
        .iter()
        .map(|result| {
            format!(
                r#"{{"role":"tool","content":{},"tool_name":{}}}"#,
                json_string(&result.content),
                json_string(&result.call.name),
            )
        })
        .collect()
}

/// `text` (a whole answer or a line) with the call edits applied to its message, and `usage`
/// (when given) written in its counts. `words` (`edits.text`) join the message's `content`
/// where a call was dropped, or anyway when `or_last` (a whole answer); the flag says whether
/// they were written.
fn edit_answer(
    text: &str,
    edits: &Edits,
    usage: Option<Usage>,
    (words, or_last): (Option<&str>, bool),
) -> Result<(String, bool), Problem> {
    let mut patches = Vec::new();
    let mut dropped = 0;
    if let Some(array) = find_path(text, &["message", "tool_calls"]) {
        let raw: &RawValue = serde_json::from_str(text.get(array).unwrap_or_default())
            .map_err(|_| Problem::BadShape)?;
        if raw.get() != "null" {
            let items = array_items(raw).ok_or(Problem::BadShape)?;
            let key = |item: &str| Ok(Some(parse_object::<ToolCall>(item)?.key()));
            let edited = edit_calls(raw.get(), &items, &CALL_SHAPE, key, edits, None)?;
            dropped = edited.dropped;
            if let Some(new_array) = edited.array {
                let span = span_in(text, raw.get()).ok_or(Problem::BadShape)?;
                patches.push((span, new_array));
            }
        }
    }
    let words = words.filter(|_| dropped > 0 || or_last);
    if let (Some(words), Some(message)) = (words, find_path(text, &["message"])) {
        let said = find_path(text, &["message", "content"])
            .and_then(|span| serde_json::from_str::<String>(text.get(span)?).ok())
            .unwrap_or_default();
        let content = if said.is_empty() {
            words.to_owned()
        } else {
            format!("{said}\n\n{words}")
        };
        patches.push(
            set_member(text, message, "content", &json_string(&content))
                .ok_or(Problem::BadShape)?,
        );
    }
    if let Some(usage) = usage {
        let top = text.len() - text.trim_start().len()..text.trim_end().len();
        for (key, count) in [("prompt_eval_count", usage.input), ("eval_count", usage.output)] {
            patches.extend(set_member(text, top.clone(), key, &count.to_string()));
        }
    }
    let written = words.is_some();
    Ok((apply_patches(text, patches).ok_or(Problem::BadShape)?, written))
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    let words = edits.text.as_deref();
    Ok(edit_answer(body, edits, edits.usage, (words, true))?.0)
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    // The final line (`done: true`) carries the counts of the whole answer.
    let last = frames.iter().rposition(|f| {
        parse_object::<Answer>(&f.data).is_ok_and(|a| a.done == Some(true))
    });
    let mut out = String::new();
    // The words go in the line of the first dropped call, once.
    let mut words = edits.text.as_deref();
    for (at, frame) in frames.iter().enumerate() {
        let usage = if last == Some(at) { edits.usage } else { None };
        let (edited, written) = edit_answer(&frame.data, edits, usage, (words, false))?;
        if written {
            words = None;
        }
        // A line that only carried removed calls says nothing the client needs.
        let emptied = edited != frame.data
            && serde_json::from_str::<Value>(&edited).is_ok_and(|v| {
                let at = |path: &str| v.pointer(path);
                at("/done") != Some(&Value::Bool(true))
                    && at("/message/content")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    && at("/message/tool_calls")
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
            });
        if !emptied {
            out.push_str(&edited);
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHOLE: &str = r#"{"model":"llama3.2","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"find_tools","arguments":{"query":"weather"}}},{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done_reason":"stop","done":true,"prompt_eval_count":122,"eval_count":33}"#;

    #[test]
    fn reads_calls_and_counts() {
        let reply = read_reply(WHOLE).unwrap();
        let names: Vec<&str> = reply.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["find_tools", "get_weather"]);
        assert_eq!(reply.calls[1].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(reply.usage, Some(Usage { input: 122, output: 33 }));
        assert!(reply.turn[0].starts_with(r#"{"role":"assistant""#));
    }

    #[test]
    fn finishing_drops_the_meta_call_and_writes_every_rounds_counts() {
        let edits = Edits {
            drop: vec!["find_tools".into()],
            rename: Vec::new(),
            usage: Some(Usage { input: 300, output: 50 }),
            text: None,
        };
        let out = finish_reply(WHOLE, &edits).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["message"]["tool_calls"].as_array().unwrap().len(), 1);
        assert_eq!(v["message"]["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!((v["prompt_eval_count"].as_u64(), v["eval_count"].as_u64()), (Some(300), Some(50)));
        // Every other byte as Ollama sent it.
        assert!(out.starts_with(r#"{"model":"llama3.2","message":{"role":"assistant","content":"","tool_calls":["#));
    }

    #[test]
    fn a_stream_opens_with_its_first_output() {
        let line = |m: &str| Frame::data(format!(r#"{{"message":{{"role":"assistant",{m}}},"done":false}}"#));
        let thinking = line(r#""content":"","thinking":"hmm""#);
        assert_eq!(opening(std::slice::from_ref(&thinking)), Opening::Undecided);
        let call = line(r#""content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]"#);
        assert_eq!(opening(&[thinking.clone(), call]), Opening::Calls);
        assert_eq!(opening(&[thinking, line(r#""content":"Hi""#)]), Opening::Answer);
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::Ollama.codec();
        let (out, reply) = refused(codec, WHOLE, false, &["get_weather"]);
        assert_eq!(reply.calls.len(), 1);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["message"]["content"], crate::dialects::shared::testing::REFUSAL);
        let line = |m: &str, done: bool| format!(r#"{{"model":"m","message":{{"role":"assistant",{m}}},"done":{done}}}"#);
        let stream = [
            line(r#""content":"Let me check.""#, false),
            line(r#""content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]"#, false),
            r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":9,"eval_count":3}"#.to_owned(),
        ]
        .join("\n") + "\n";
        let (out, reply) = refused(codec, &stream, true, &["get_weather"]);
        assert!(reply.calls.is_empty());
        assert_eq!(out.lines().count(), 3, "{out}");
    }
}
