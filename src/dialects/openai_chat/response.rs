//! OpenAI Chat Completions (and the servers that copy it): the model's turn is
//! `choices[0].message` with `tool_calls[{id,type:"function",function{name,arguments}}]`, where
//! `arguments` is a JSON string holding the arguments object text; a stream is
//! `chat.completion.chunk` events whose `choices[].delta.tool_calls[]` carry each call in
//! pieces keyed by `index`, an optional usage-only chunk (`stream_options.include_usage`) and a
//! `[DONE]` terminator.
//!
//! Changes are spliced into the original bytes where that is simple (usage numbers, a renamed
//! call, one call of several removed). When a message loses every call its `tool_calls` key has
//! to go, and that body (or chunk) is re-serialised through `serde_json::Value`.

use crate::sse::write_all;
use crate::dialects::{Call, Edits, Frame, Opening, Reply, ToolResult, Usage};
use crate::dialects::shared::splice::{apply_patches, json_string};
use crate::dialects::Problem;
use crate::json::{Str, array_items, find_path};
use crate::json::ArrayLayout;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

/// A non-streamed `chat.completion`, as far as search mode reads it.
#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<TokenCounts>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
}

/// The assistant message, kept as raw values: the follow-up request copies their bytes.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
    /// The deprecated single-call form (`functions` in the request).
    #[serde(borrow, default)]
    function_call: Option<&'a RawValue>,
    /// DeepSeek, vLLM and others return the model's thinking here and want it back in the
    /// assistant turn of a tool-call round; only they send it, so only they get it back.
    #[serde(borrow, default)]
    reasoning_content: Option<&'a RawValue>,
}

/// One entry of `message.tool_calls`, or of `delta.tool_calls` in a stream (which adds
/// `index` and sends each field only in the delta that has it).
#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    /// `"function"`; `"custom"` tools (free-text input) are not function calls.
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    /// A JSON string whose content is the arguments object text.
    #[serde(borrow, default)]
    arguments: Option<Str<'a>>,
}

/// `usage`: `{prompt_tokens, completion_tokens, total_tokens, …_details}`.
#[derive(Deserialize)]
struct TokenCounts {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl TokenCounts {
    fn usage(&self) -> Option<Usage> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input: self.prompt_tokens.unwrap_or(0),
            output: self.completion_tokens.unwrap_or(0),
        })
    }
}

/// The usage keys, in the order [`usage_splices`] takes them.
const USAGE_KEYS: [&str; 3] = ["prompt_tokens", "completion_tokens", "total_tokens"];

/// One `chat.completion.chunk`.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<ChunkChoice<'a>>>,
    #[serde(default)]
    usage: Option<TokenCounts>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Str<'a>>,
    #[serde(borrow, default)]
    refusal: Option<Str<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Str<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<FunctionCall<'a>>,
}

pub(crate) fn tool_entry(name: &str, description: &str, parameters: &Value) -> String {
    json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    })
    .to_string()
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let completion: Completion = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let mut choices = completion.choices.ok_or(Problem::BadShape)?.into_iter();
    let message = choices
        .next()
        .and_then(|c| c.message)
        .ok_or(Problem::BadShape)?;
    let (mut calls, has_tool_calls) = message_calls(&message)?;
    // The turn is the first choice's; a client that asked for several (`n`) gets every
    // choice's calls, so every one is read (and checked under access rules).
    for other in choices.filter_map(|c| c.message) {
        calls.extend(message_calls(&other)?.0);
    }
    // Rebuilt rather than copied: `refusal`, `annotations` and `audio` are response-only, and
    // not every compatible server accepts them back as input.
    let mut turn = String::from(r#"{"role":"assistant","content":"#);
    turn.push_str(message.content.map_or("null", RawValue::get));
    if let Some(reasoning) = message.reasoning_content {
        turn.push_str(r#","reasoning_content":"#);
        turn.push_str(reasoning.get());
    }
    if let (Some(raw), true) = (message.tool_calls, has_tool_calls) {
        turn.push_str(r#","tool_calls":"#);
        turn.push_str(raw.get());
    }
    if let Some(raw) = message.function_call {
        turn.push_str(r#","function_call":"#);
        turn.push_str(raw.get());
    }
    turn.push('}');
    Ok(Reply {
        calls,
        usage: completion.usage.as_ref().and_then(TokenCounts::usage),
        turn: vec![turn],
    })
}

/// The function calls of one message, in order (its deprecated `function_call` last), and
/// whether its `tool_calls` has entries of any kind.
fn message_calls(message: &Message) -> Result<(Vec<Call>, bool), Problem> {
    let tool_calls: Vec<ToolCall> = match message.tool_calls {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?,
        None => Vec::new(),
    };
    let legacy: Option<FunctionCall> = match message.function_call {
        Some(raw) => Some(serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?),
        None => None,
    };
    let mut calls: Vec<Call> = tool_calls
        .iter()
        .filter(|c| is_function(c.kind.as_deref()))
        .filter_map(|c| {
            let function = c.function.as_ref()?;
            Some(call(
                c.id.as_deref().unwrap_or_default(),
                function.name.as_deref().unwrap_or_default(),
                function.arguments.as_deref().unwrap_or_default(),
            ))
        })
        .collect();
    if let Some(function) = &legacy {
        calls.push(call(
            "",
            function.name.as_deref().unwrap_or_default(),
            function.arguments.as_deref().unwrap_or_default(),
        ));
    }
    Ok((calls, !tool_calls.is_empty()))
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    let mut saw_choices = false;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = StreamedCalls::default();
    // The calls of the other choices (`n` > 1), which the client gets too.
    let mut others: BTreeMap<u64, StreamedCalls> = BTreeMap::new();
    let mut legacy: Option<(String, String)> = None;
    let mut usage = None;
    for frame in frames.iter().filter(|f| !is_done(f)) {
        let chunk: Chunk = serde_json::from_str(&frame.data).map_err(|e| Problem::of(&e))?;
        if let Some(counts) = chunk.usage.as_ref().and_then(TokenCounts::usage) {
            usage = Some(counts);
        }
        let Some(choices) = chunk.choices else {
            continue;
        };
        saw_choices = true;
        for choice in choices.iter().filter(|c| c.index.unwrap_or(0) != 0) {
            let other = others.entry(choice.index.unwrap_or(0)).or_default();
            for piece in choice.delta.iter().flat_map(|d| d.tool_calls.iter().flatten()) {
                other.absorb(piece);
            }
        }
        // The turn is the first choice's.
        let first = choices.iter().filter(|c| c.index.unwrap_or(0) == 0);
        for delta in first.filter_map(|c| c.delta.as_ref()) {
            text.push_str(delta.content.as_deref().unwrap_or_default());
            reasoning.push_str(delta.reasoning_content.as_deref().unwrap_or_default());
            for piece in delta.tool_calls.iter().flatten() {
                calls.absorb(piece);
            }
            if let Some(function) = &delta.function_call {
                let (name, arguments) = legacy.get_or_insert_default();
                name.push_str(function.name.as_deref().unwrap_or_default());
                arguments.push_str(function.arguments.as_deref().unwrap_or_default());
            }
        }
    }
    if !saw_choices {
        return Err(Problem::BadShape);
    }
    let functions: Vec<&StreamedCall> = calls
        .calls
        .iter()
        .filter(|c| is_function(c.kind.as_deref()))
        .collect();
    let mut reply_calls: Vec<Call> = functions
        .iter()
        .map(|c| call(&c.id, &c.name, &c.arguments))
        .collect();
    let mut turn = Map::new();
    turn.insert("role".into(), "assistant".into());
    turn.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            text.into()
        },
    );
    if !reasoning.is_empty() {
        turn.insert("reasoning_content".into(), reasoning.into());
    }
    if !functions.is_empty() {
        let entries = functions.iter().map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })
        });
        turn.insert("tool_calls".into(), entries.collect());
    }
    if let Some((name, arguments)) = legacy {
        reply_calls.push(call("", &name, &arguments));
        turn.insert(
            "function_call".into(),
            json!({"name": name, "arguments": arguments}),
        );
    }
    let other_calls = others.values().flat_map(|o| &o.calls);
    reply_calls.extend(
        other_calls
            .filter(|c| is_function(c.kind.as_deref()))
            .map(|c| call(&c.id, &c.name, &c.arguments)),
    );
    Ok(Reply {
        calls: reply_calls,
        usage,
        turn: vec![Value::Object(turn).to_string()],
    })
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        if is_done(frame) {
            // The stream ended without a call: nothing to hold.
            return Opening::Answer;
        }
        let Ok(chunk) = serde_json::from_str::<Chunk>(&frame.data) else {
            continue;
        };
        for choice in chunk.choices.iter().flatten() {
            if let Some(delta) = &choice.delta {
                if delta.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
                    || delta.function_call.is_some()
                {
                    return Opening::Calls;
                }
                let has_text = |s: &Option<Str>| s.as_deref().is_some_and(|t| !t.is_empty());
                if has_text(&delta.content) || has_text(&delta.refusal) {
                    return Opening::Answer;
                }
            }
            if choice.finish_reason.is_some() {
                return Opening::Answer;
            }
        }
    }
    Opening::Undecided
}

pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| {
            if r.call.id.is_empty() {
                // A deprecated `function_call` has no id; its answer is a `function` message.
                json!({"role": "function", "name": r.call.name, "content": r.content})
            } else {
                json!({"role": "tool", "tool_call_id": r.call.id, "content": r.content})
            }
            .to_string()
        })
        .collect()
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    if *edits == Edits::default() {
        return Ok(body.to_owned());
    }
    let completion: Completion = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let choices = completion.choices.ok_or(Problem::BadShape)?;
    let mut splices = Vec::new();
    for message in choices.iter().filter_map(|c| c.message.as_ref()) {
        if legacy_dropped(message.function_call, edits) {
            // The deprecated `function_call` key must go, and `finish_reason` with it.
            return rebuilt_reply(body, edits);
        }
        let Some(array) = message.tool_calls else {
            continue;
        };
        let items = array_items(array).ok_or(Problem::BadShape)?;
        let fates = items
            .iter()
            .map(|item| fate(item.get(), edits))
            .collect::<Result<Vec<_>, _>>()?;
        if fates.iter().all(|f| matches!(f, Fate::Keep)) {
            continue;
        }
        let all_dropped = !fates.is_empty() && fates.iter().all(|f| matches!(f, Fate::Drop));
        if all_dropped || (edits.text.is_some() && message.content.is_none()) {
            // The `tool_calls` key itself must go, and `finish_reason` with it; or words must
            // go into a message that has no `content` member.
            return rebuilt_reply(body, edits);
        }
        let layout = ArrayLayout::of(body, array.get(), &items).ok_or(Problem::BadShape)?;
        let mut kept = String::with_capacity(array.get().len());
        layout.write(body, &mut kept, |i, text| fates.get(i)?.apply(text));
        splices.push((layout.span, kept));
        let dropped = fates.iter().any(|f| matches!(f, Fate::Drop));
        if let (Some(words), Some(content), true) = (&edits.text, message.content, dropped) {
            let said: Option<String> = serde_json::from_str(content.get()).ok().flatten();
            let span = crate::json::span_in(body, content.get()).ok_or(Problem::BadShape)?;
            splices.push((span, json_string(&joined(said.as_deref(), words))));
        }
    }
    if let Some(usage) = edits.usage {
        splices.extend(usage_splices(body, &["usage"], USAGE_KEYS, usage));
    }
    apply_patches(body, splices).ok_or(Problem::BadShape)
}

/// Whether the deprecated `function_call` of a message is one `edits` drop (by name: it has
/// no id).
fn legacy_dropped(function_call: Option<&RawValue>, edits: &Edits) -> bool {
    let Some(call) = function_call.and_then(crate::json::parse::<FunctionCall>) else {
        return false;
    };
    call.name
        .as_deref()
        .is_some_and(|name| edits.drop.iter().any(|d| d == name))
}

/// A message's words followed by `words` (a refusal), a blank line between.
pub(crate) fn joined(said: Option<&str>, words: &str) -> String {
    match said.filter(|s| !s.is_empty()) {
        Some(said) => format!("{said}\n\n{words}"),
        None => words.to_owned(),
    }
}

/// What becomes of one tool call (or Responses output item) of the original text.
pub(crate) enum Fate {
    Keep,
    Drop,
    /// Its new text.
    Replace(String),
}

impl Fate {
    /// The item's text in the new array; `None` leaves it out.
    pub(crate) fn apply<'b>(&self, text: &'b str) -> Option<Cow<'b, str>> {
        match self {
            Fate::Keep => Some(Cow::Borrowed(text)),
            Fate::Drop => None,
            Fate::Replace(new) => Some(Cow::Owned(new.clone())),
        }
    }
}

/// The fate of one `tool_calls` entry (`text` is its JSON).
fn fate(text: &str, edits: &Edits) -> Result<Fate, Problem> {
    let entry: ToolCall = serde_json::from_str(text).map_err(|e| Problem::of(&e))?;
    let id = entry.id.as_deref().unwrap_or_default();
    if id.is_empty() {
        return Ok(Fate::Keep);
    }
    if edits.drop.iter().any(|d| d == id) {
        return Ok(Fate::Drop);
    }
    let Some((_, name, arguments)) = edits.rename.iter().find(|(r, _, _)| r == id) else {
        return Ok(Fate::Keep);
    };
    let names = rename_splices(
        text,
        &["function", "name"],
        &["function", "arguments"],
        name,
        arguments,
    );
    let renamed = apply_patches(text, names).ok_or(Problem::BadShape)?;
    Ok(Fate::Replace(renamed))
}

/// `finish_reply` through `serde_json::Value`, for when a message loses every call: its
/// `tool_calls` key is removed and its choice's `finish_reason` becomes `"stop"`.
fn rebuilt_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    let mut root: Value = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let choices = root
        .get_mut("choices")
        .and_then(Value::as_array_mut)
        .ok_or(Problem::BadShape)?;
    for choice in choices.iter_mut().filter_map(Value::as_object_mut) {
        let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
            continue;
        };
        let legacy = message
            .get("function_call")
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|name| edits.drop.iter().any(|d| d == name));
        if legacy {
            message.remove("function_call");
        }
        let dropped_before = call_count(message);
        let emptied = edit_calls(message, edits) || (legacy && call_count(message) == 0);
        let dropped = legacy || call_count(message) < dropped_before || emptied;
        if let (Some(words), true) = (&edits.text, dropped) {
            let said = message.get("content").and_then(Value::as_str);
            let content = joined(said, words);
            message.insert("content".into(), content.into());
        }
        let reason = choice.get("finish_reason").and_then(Value::as_str);
        if emptied && matches!(reason, Some("tool_calls" | "function_call")) {
            choice.insert("finish_reason".into(), "stop".into());
        }
    }
    if let (Some(usage), Some(counts)) = (
        edits.usage,
        root.get_mut("usage").and_then(Value::as_object_mut),
    ) {
        set_usage(counts, usage);
    }
    Ok(root.to_string())
}

/// Drops and renames the calls of one message (or delta) object; true when it had calls and
/// has none left, in which case the `tool_calls` key is removed.
fn edit_calls(message: &mut Map<String, Value>, edits: &Edits) -> bool {
    let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) else {
        return false;
    };
    let had_calls = !calls.is_empty();
    calls.retain(|c| !edits.drop.iter().any(|d| Some(d.as_str()) == call_id(c)));
    for entry in calls.iter_mut() {
        let renamed = edits
            .rename
            .iter()
            .find(|(id, _, _)| Some(id.as_str()) == call_id(entry));
        if let Some((_, name, arguments)) = renamed {
            rename_value(entry, name, arguments);
        }
    }
    let emptied = had_calls && calls.is_empty();
    if emptied {
        message.remove("tool_calls");
    }
    emptied
}

/// The calls a message (or delta) object holds.
fn call_count(message: &Map<String, Value>) -> usize {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

fn call_id(entry: &Value) -> Option<&str> {
    entry.get("id").and_then(Value::as_str)
}

/// Sets `function.name` and `function.arguments` of one tool-call value (or delta piece).
fn rename_value(entry: &mut Value, name: &str, arguments: &str) {
    let Some(entry) = entry.as_object_mut() else {
        return;
    };
    let function = entry.entry("function").or_insert_with(|| json!({}));
    let Some(function) = function.as_object_mut() else {
        return;
    };
    function.insert("name".into(), name.into());
    function.insert("arguments".into(), arguments.into());
}

/// Writes `usage` over the counts an OpenAI Chat usage object already has.
fn set_usage(counts: &mut Map<String, Value>, usage: Usage) {
    let [input, output, total] = USAGE_KEYS;
    for (key, value) in [
        (input, usage.input),
        (output, usage.output),
        (total, usage.input + usage.output),
    ] {
        if counts.contains_key(key) {
            counts.insert(key.into(), value.into());
        }
    }
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    if *edits == Edits::default() {
        return Ok(write_all(frames));
    }
    let mut out = String::new();
    // The calls seen so far, per choice index: a delta's call (and so whether it is dropped,
    // renamed or renumbered) is known from the delta that opened it, which comes first.
    let mut choices: BTreeMap<u64, StreamedCalls> = BTreeMap::new();
    // The words (`edits.text`) go where the first dropped call opened, once.
    let mut words = edits.text.as_deref();
    for frame in frames {
        if is_done(frame) {
            frame.write(&mut out);
            continue;
        }
        let chunk: Chunk = serde_json::from_str(&frame.data).map_err(|e| Problem::of(&e))?;
        let mut changes = Vec::new();
        for (position, choice) in chunk.choices.iter().flatten().enumerate() {
            let calls = choices.entry(choice.index.unwrap_or(0)).or_default();
            let pieces = choice.delta.as_ref().and_then(|d| d.tool_calls.as_ref());
            for (piece_position, piece) in pieces.into_iter().flatten().enumerate() {
                let (slot, opened) = calls.absorb(piece);
                let mut change = calls.change(slot, opened, piece, edits);
                if let (Some(PieceChange::Remove), true, Some(text)) =
                    (&change, opened && calls.is_dropped(slot, edits), words)
                {
                    change = Some(PieceChange::RemoveWithText(text.to_owned()));
                    words = None;
                }
                if let Some(change) = change {
                    changes.push((position, piece_position, change));
                }
            }
            let stopped = choice.finish_reason.as_deref() == Some("tool_calls");
            if stopped && calls.all_dropped(edits) {
                changes.push((position, 0, PieceChange::Stop));
            }
        }
        let usage = edits
            .usage
            .filter(|_| chunk.usage.as_ref().is_some_and(|u| u.usage().is_some()));
        let data = if !changes.is_empty() {
            match edited_chunk(&frame.data, &changes, usage)? {
                Some(data) => Cow::Owned(data),
                None => continue,
            }
        } else if let Some(usage) = usage {
            let splices = usage_splices(&frame.data, &["usage"], USAGE_KEYS, usage);
            Cow::Owned(apply_patches(&frame.data, splices).ok_or(Problem::BadShape)?)
        } else {
            Cow::Borrowed(frame.data.as_str())
        };
        Frame {
            event: frame.event.clone(),
            data: data.into_owned(),
        }
        .write(&mut out);
    }
    Ok(out)
}

/// A change to one `delta.tool_calls` entry of a chunk, or to its choice.
enum PieceChange {
    /// A piece of a dropped call, or a later piece of a renamed one.
    Remove,
    /// The opening piece of the dropped call whose place these words take: the delta carries
    /// them as `content`.
    RemoveWithText(String),
    /// The opening piece of a renamed call: it carries the new name and the whole arguments
    /// (and a new `index` when calls before it were dropped).
    Rename {
        name: String,
        arguments: String,
        index: Option<u64>,
    },
    /// Calls before this one were dropped: its `index` moves down.
    Reindex(u64),
    /// Every call of the choice was dropped: `finish_reason` "tool_calls" becomes "stop".
    Stop,
}

/// The chunk with `changes` applied, `None` when nothing but removed pieces was in it.
fn edited_chunk(
    data: &str,
    changes: &[(usize, usize, PieceChange)],
    usage: Option<Usage>,
) -> Result<Option<String>, Problem> {
    let mut root: Value = serde_json::from_str(data).map_err(|e| Problem::of(&e))?;
    let mut removed_any = false;
    if let Some(choices) = root.get_mut("choices").and_then(Value::as_array_mut) {
        // Backwards, so that removing a piece leaves the positions of earlier ones valid.
        for (choice_at, piece_at, change) in changes.iter().rev() {
            let Some(choice) = choices.get_mut(*choice_at).and_then(Value::as_object_mut) else {
                continue;
            };
            if let PieceChange::Stop = change {
                choice.insert("finish_reason".into(), "stop".into());
                continue;
            }
            let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(pieces) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) else {
                continue;
            };
            match change {
                PieceChange::Remove | PieceChange::RemoveWithText(_) => {
                    if *piece_at < pieces.len() {
                        pieces.remove(*piece_at);
                        removed_any = true;
                    }
                }
                PieceChange::Rename {
                    name,
                    arguments,
                    index,
                } => {
                    if let Some(piece) = pieces.get_mut(*piece_at) {
                        rename_value(piece, name, arguments);
                        if let Some(index) = index {
                            reindex(piece, *index);
                        }
                    }
                }
                PieceChange::Reindex(index) => {
                    if let Some(piece) = pieces.get_mut(*piece_at) {
                        reindex(piece, *index);
                    }
                }
                PieceChange::Stop => {}
            }
            if pieces.is_empty() {
                delta.remove("tool_calls");
            }
            if let PieceChange::RemoveWithText(words) = change {
                let said = delta.get("content").and_then(Value::as_str);
                let content = joined(said, words);
                delta.insert("content".into(), content.into());
            }
        }
    }
    if let (Some(usage), Some(counts)) =
        (usage, root.get_mut("usage").and_then(Value::as_object_mut))
    {
        set_usage(counts, usage);
    }
    if removed_any && carries_nothing(&root) {
        return Ok(None);
    }
    Ok(Some(root.to_string()))
}

fn reindex(piece: &mut Value, index: u64) {
    if let Some(piece) = piece.as_object_mut() {
        piece.insert("index".into(), index.into());
    }
}

/// Whether a chunk says nothing: every choice's delta is empty (or all null), it has no
/// `finish_reason`, and there is no usage.
fn carries_nothing(chunk: &Value) -> bool {
    let is_null = |v: Option<&Value>| v.is_none_or(Value::is_null);
    let choice_is_empty = |choice: &Value| {
        let delta_is_empty = choice
            .get("delta")
            .and_then(Value::as_object)
            .is_none_or(|d| d.values().all(Value::is_null));
        delta_is_empty && is_null(choice.get("finish_reason"))
    };
    let choices_are_empty = chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_none_or(|c| c.iter().all(choice_is_empty));
    choices_are_empty && is_null(chunk.get("usage"))
}

/// One tool call reassembled from stream deltas.
#[derive(Default)]
struct StreamedCall {
    index: Option<u64>,
    id: String,
    kind: Option<String>,
    name: String,
    arguments: String,
}

/// The tool calls of one choice of a stream, in the order their first delta came.
#[derive(Default)]
struct StreamedCalls {
    calls: Vec<StreamedCall>,
}

impl StreamedCalls {
    /// Adds one delta piece; returns the position of its call and whether the piece opened
    /// it. Pieces are matched by `index`; a piece without one (some compatible servers send
    /// whole calls that way) by `id`, else it continues the last call. A piece whose `index`
    /// is taken by a call with another id opens a new call (servers that number every call 0).
    fn absorb(&mut self, piece: &ToolCall) -> (usize, bool) {
        let id = piece.id.as_deref().filter(|id| !id.is_empty());
        let existing = match (piece.index, id) {
            (Some(index), id) => self.calls.iter().position(|c| {
                c.index == Some(index) && id.is_none_or(|id| c.id.is_empty() || c.id == id)
            }),
            (None, Some(id)) => self.calls.iter().position(|c| c.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let (slot, opened) = match existing {
            Some(slot) => (slot, false),
            None => {
                self.calls.push(StreamedCall {
                    index: piece.index,
                    ..StreamedCall::default()
                });
                (self.calls.len() - 1, true)
            }
        };
        if let Some(call) = self.calls.get_mut(slot) {
            if call.id.is_empty() {
                call.id = id.unwrap_or_default().to_owned();
            }
            if call.kind.is_none() {
                call.kind = piece.kind.as_deref().map(str::to_owned);
            }
            if let Some(function) = &piece.function {
                if call.name.is_empty() {
                    call.name = function.name.as_deref().unwrap_or_default().to_owned();
                }
                call.arguments
                    .push_str(function.arguments.as_deref().unwrap_or_default());
            }
        }
        (slot, opened)
    }

    fn is_dropped(&self, slot: usize, edits: &Edits) -> bool {
        self.calls
            .get(slot)
            .is_some_and(|c| !c.id.is_empty() && edits.drop.contains(&c.id))
    }

    /// What `edits` do to `piece`, the latest piece absorbed into the call at `slot`.
    fn change(
        &self,
        slot: usize,
        opened: bool,
        piece: &ToolCall,
        edits: &Edits,
    ) -> Option<PieceChange> {
        if self.is_dropped(slot, edits) {
            return Some(PieceChange::Remove);
        }
        let call = self.calls.get(slot)?;
        let dropped_before = (0..slot).filter(|&s| self.is_dropped(s, edits)).count();
        let index = piece
            .index
            .filter(|_| dropped_before > 0)
            .map(|_| (slot - dropped_before) as u64);
        if let Some((_, name, arguments)) = edits.rename.iter().find(|(id, _, _)| *id == call.id) {
            return Some(if opened {
                PieceChange::Rename {
                    name: name.clone(),
                    arguments: arguments.clone(),
                    index,
                }
            } else {
                PieceChange::Remove
            });
        }
        index.map(PieceChange::Reindex)
    }

    /// Whether the choice had calls and every one of them is dropped.
    fn all_dropped(&self, edits: &Edits) -> bool {
        !self.calls.is_empty() && (0..self.calls.len()).all(|s| self.is_dropped(s, edits))
    }
}

fn is_done(frame: &Frame) -> bool {
    frame.data.trim() == "[DONE]"
}

fn is_function(kind: Option<&str>) -> bool {
    matches!(kind, None | Some("function"))
}

/// A call with the OpenAI argument string as arguments; an empty string means no arguments.
pub(crate) fn call(id: &str, name: &str, arguments: &str) -> Call {
    Call {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments: if arguments.trim().is_empty() {
            "{}".to_owned()
        } else {
            arguments.to_owned()
        },
    }
}

/// The splices that write `name` and `arguments` (as a JSON string) over the values at those
/// paths of `text`; a path that is absent is skipped.
pub(crate) fn rename_splices(
    text: &str,
    name_path: &[&str],
    arguments_path: &[&str],
    name: &str,
    arguments: &str,
) -> Vec<(Range<usize>, String)> {
    let mut splices = Vec::new();
    if let Some(span) = find_path(text, name_path) {
        splices.push((span, json_string(name)));
    }
    if let Some(span) = find_path(text, arguments_path) {
        splices.push((span, json_string(arguments)));
    }
    splices
}

/// The splices that write `usage` over the input, output and total counts (`keys`, in that
/// order) of the usage object at `usage_path` of `text`. Counts it does not have stay absent.
pub(crate) fn usage_splices(
    text: &str,
    usage_path: &[&str],
    keys: [&str; 3],
    usage: Usage,
) -> Vec<(Range<usize>, String)> {
    let [input, output, total] = keys;
    let values = [
        (input, usage.input),
        (output, usage.output),
        (total, usage.input + usage.output),
    ];
    values
        .into_iter()
        .filter_map(|(key, value)| {
            let mut path = usage_path.to_vec();
            path.push(key);
            Some((find_path(text, &path)?, value.to_string()))
        })
        .collect()
}

/// The tool calls a chunk starts: deltas that carry a function name.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    let items = |v: &Value, at: &str| v.pointer(at).and_then(Value::as_array).cloned();
    items(event, "/choices")
        .into_iter()
        .flatten()
        .flat_map(|c| items(&c, "/delta/tool_calls").into_iter().flatten())
        .filter_map(|call| call.pointer("/function/name")?.as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::frames as split;

    /// A tool-call response as the API reference shows it, pretty-printed.
    const ONE_CALL: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {
            "id": "call_find",
            "type": "function",
            "function": {
              "name": "find_tools",
              "arguments": "{\"query\":\"weather\"}"
            }
          }
        ],
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 82,
    "completion_tokens": 17,
    "total_tokens": 99,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default"
}"#;

    const TWO_CALLS: &str = r#"{"id":"chatcmpl-2","object":"chat.completion","created":1741569952,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_find","type":"function","function":{"name":"find_tools","arguments":"{\"query\":\"weather\"}"}}, {"id":"call_wx","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":90,"completion_tokens":30,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64}}}"#;

    const TEXT: &str = r#"{"id":"chatcmpl-3","object":"chat.completion","created":1741569952,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"It is sunny in Paris.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27}}"#;

    fn chunk(choices: &str) -> Frame {
        Frame::data(format!(
            r#"{{"id":"chatcmpl-4","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1","system_fingerprint":"fp_1","choices":{choices},"usage":null}}"#
        ))
    }

    fn delta(delta: &str) -> Frame {
        chunk(&format!(
            r#"[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]"#
        ))
    }

    fn finish(reason: &str) -> Frame {
        chunk(&format!(
            r#"[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{reason}"}}]"#
        ))
    }

    fn usage_chunk() -> Frame {
        Frame::data(
            r#"{"id":"chatcmpl-4","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":90,"completion_tokens":30,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        )
    }

    fn done() -> Frame {
        Frame::data("[DONE]")
    }

    /// Two parallel calls, each split across several argument deltas, then the usage chunk.
    fn two_call_stream() -> Vec<Frame> {
        vec![
            delta(
                r#"{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_find","type":"function","function":{"name":"find_tools","arguments":""}}],"refusal":null}"#,
            ),
            delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"qu"}}]}"#),
            delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"ery\": \"wea"}}]}"#),
            delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"ther\"}"}}]}"#),
            delta(
                r#"{"tool_calls":[{"index":1,"id":"call_wx","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
            ),
            delta(r#"{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\""}}]}"#),
            delta(r#"{"tool_calls":[{"index":1,"function":{"arguments":": \"Paris\"}"}}]}"#),
            finish("tool_calls"),
            usage_chunk(),
            done(),
        ]
    }

    fn text_stream() -> Vec<Frame> {
        vec![
            delta(r#"{"role":"assistant","content":"","refusal":null}"#),
            delta(r#"{"content":"It is "}"#),
            delta(r#"{"content":"sunny."}"#),
            finish("stop"),
            done(),
        ]
    }

    fn edits(drop: &[&str], usage: Option<Usage>) -> Edits {
        Edits {
            drop: drop.iter().map(|d| d.to_string()).collect(),
            rename: Vec::new(),
            usage,
            text: None,
        }
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// The stream text the client would get, read back.
    fn reread(stream: &str) -> (Vec<Frame>, Reply) {
        let (frames, used) = split(stream);
        assert_eq!(used, stream.len());
        let reply = read_stream(&frames).unwrap();
        (frames, reply)
    }

    const TOTALS: Usage = Usage {
        input: 300,
        output: 45,
    };

    #[test]
    fn tool_entry_is_a_chat_function_tool() {
        let params = json(r#"{"type":"object","properties":{"query":{"type":"string"}}}"#);
        let entry = json(&tool_entry("find_tools", "Finds tools.", &params));
        assert_eq!(
            entry,
            serde_json::json!({"type":"function","function":{
                "name":"find_tools","description":"Finds tools.","parameters":params}})
        );
    }

    #[test]
    fn reads_a_tool_call_reply() {
        let reply = read_reply(ONE_CALL).unwrap();
        assert_eq!(
            reply.calls,
            [Call {
                id: "call_find".into(),
                name: "find_tools".into(),
                arguments: r#"{"query":"weather"}"#.into(),
            }]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 82,
                output: 17
            })
        );
        assert_eq!(reply.turn.len(), 1);
        let turn = &reply.turn[0];
        // Rebuilt message: the response-only fields are gone, tool_calls keep their bytes.
        assert!(turn.starts_with(r#"{"role":"assistant","content":null,"tool_calls":["#));
        assert!(turn.contains("\n          {\n            \"id\": \"call_find\""));
        assert!(!turn.contains("refusal") && !turn.contains("annotations"));
        assert_eq!(
            json(turn)["tool_calls"],
            json(ONE_CALL)["choices"][0]["message"]["tool_calls"]
        );
    }

    #[test]
    fn reads_parallel_calls_text_and_legacy_calls() {
        let reply = read_reply(TWO_CALLS).unwrap();
        let names: Vec<_> = reply.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["find_tools", "get_weather"]);
        assert_eq!(reply.calls[1].arguments, r#"{"city":"Paris"}"#);

        let reply = read_reply(TEXT).unwrap();
        assert!(reply.calls.is_empty());
        assert_eq!(
            reply.turn,
            [r#"{"role":"assistant","content":"It is sunny in Paris."}"#]
        );

        let legacy = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,
            "function_call":{"name":"find_tools","arguments":""}},"finish_reason":"function_call"}]}"#;
        let reply = read_reply(legacy).unwrap();
        assert_eq!(reply.calls, [call("", "find_tools", "{}")]);
        assert_eq!(reply.usage, None);
        assert_eq!(
            json(&reply.turn[0])["function_call"],
            serde_json::json!({"name":"find_tools","arguments":""})
        );
    }

    #[test]
    fn empty_arguments_read_as_an_empty_object() {
        let body = TWO_CALLS.replace(r#""{\"city\":\"Paris\"}""#, r#""""#);
        let reply = read_reply(&body).unwrap();
        assert_eq!(reply.calls[1].arguments, "{}");
    }

    #[test]
    fn bad_replies_are_errors() {
        assert_eq!(read_reply("{\"choices\":["), Err(Problem::MalformedJson));
        assert_eq!(read_reply("not json"), Err(Problem::MalformedJson));
        assert_eq!(
            read_reply(r#"{"object":"chat.completion"}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(read_reply(r#"{"choices":[]}"#), Err(Problem::BadShape));
        assert_eq!(read_reply(r#"{"choices":3}"#), Err(Problem::BadShape));
        assert_eq!(
            read_reply(r#"{"choices":[{"message":{"tool_calls":{"id":1}}}]}"#),
            Err(Problem::BadShape)
        );
    }

    #[test]
    fn reads_a_stream_of_split_calls() {
        let reply = read_stream(&two_call_stream()).unwrap();
        assert_eq!(
            reply.calls,
            [
                call("call_find", "find_tools", r#"{"query": "weather"}"#),
                call("call_wx", "get_weather", r#"{"city": "Paris"}"#),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 90,
                output: 30
            })
        );
        assert_eq!(
            json(&reply.turn[0]),
            serde_json::json!({"role":"assistant","content":null,"tool_calls":[
                {"id":"call_find","type":"function","function":{"name":"find_tools","arguments":"{\"query\": \"weather\"}"}},
                {"id":"call_wx","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]})
        );
    }

    #[test]
    fn reads_a_text_stream() {
        let reply = read_stream(&text_stream()).unwrap();
        assert!(reply.calls.is_empty());
        assert_eq!(reply.usage, None);
        assert_eq!(
            json(&reply.turn[0]),
            serde_json::json!({"role":"assistant","content":"It is sunny."})
        );
    }

    #[test]
    fn bad_streams_are_errors() {
        assert_eq!(
            read_stream(&[Frame::data("{\"choices\":[")]),
            Err(Problem::MalformedJson)
        );
        assert_eq!(read_stream(&[done()]), Err(Problem::BadShape));
        assert_eq!(
            read_stream(&[Frame::data(r#"{"error":{"message":"overloaded"}}"#), done()]),
            Err(Problem::BadShape)
        );
        assert_eq!(
            opening(&[Frame::data("garbage")]),
            Opening::Undecided,
            "an unreadable frame decides nothing"
        );
    }

    #[test]
    fn opening_decisions() {
        let role_only = delta(r#"{"role":"assistant","content":"","refusal":null}"#);
        assert_eq!(opening(&[]), Opening::Undecided);
        assert_eq!(
            opening(std::slice::from_ref(&role_only)),
            Opening::Undecided
        );
        assert_eq!(opening(&text_stream()[..2]), Opening::Answer);
        assert_eq!(opening(&two_call_stream()[..1]), Opening::Calls);
        let later_call = [
            role_only.clone(),
            delta(
                r#"{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}"#,
            ),
        ];
        assert_eq!(opening(&later_call), Opening::Calls);
        assert_eq!(opening(&[role_only, finish("stop")]), Opening::Answer);
        assert_eq!(opening(&[done()]), Opening::Answer);
    }

    #[test]
    fn tool_results_are_tool_messages() {
        let result = |id: &str| ToolResult {
            call: call(id, "find_tools", "{}"),
            content: r#"{"tools":[{"name":"get_weather"}]}"#.into(),
            is_error: false,
        };
        let items = tool_results(&[result("call_find")]);
        assert_eq!(
            json(&items[0]),
            serde_json::json!({"role":"tool","tool_call_id":"call_find",
                "content":"{\"tools\":[{\"name\":\"get_weather\"}]}"})
        );
        let legacy = tool_results(&[result("")]);
        assert_eq!(json(&legacy[0])["role"], "function");
        assert_eq!(json(&legacy[0])["name"], "find_tools");
    }

    #[test]
    fn finish_reply_without_edits_is_byte_identical() {
        for body in [ONE_CALL, TWO_CALLS, TEXT, "not even json"] {
            assert_eq!(finish_reply(body, &Edits::default()).unwrap(), body);
        }
    }

    #[test]
    fn finish_reply_drops_one_of_two_calls_in_place() {
        let out = finish_reply(TWO_CALLS, &edits(&["call_find"], Some(TOTALS))).unwrap();
        let expected = TWO_CALLS
            .replace(
                r#"{"id":"call_find","type":"function","function":{"name":"find_tools","arguments":"{\"query\":\"weather\"}"}}, "#,
                "",
            )
            .replace(
                r#""prompt_tokens":90,"completion_tokens":30,"total_tokens":120"#,
                r#""prompt_tokens":300,"completion_tokens":45,"total_tokens":345"#,
            );
        assert_eq!(out, expected);
        assert_eq!(json(&out)["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn finish_reply_dropping_the_only_call_stops() {
        let out = finish_reply(ONE_CALL, &edits(&["call_find"], Some(TOTALS))).unwrap();
        let v = json(&out);
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "stop");
        assert!(choice["message"].get("tool_calls").is_none());
        assert_eq!(choice["message"]["annotations"], serde_json::json!([]));
        assert_eq!(v["usage"]["prompt_tokens"], 300);
        assert_eq!(v["usage"]["completion_tokens"], 45);
        assert_eq!(v["usage"]["total_tokens"], 345);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        assert_eq!(v["service_tier"], "default");
    }

    #[test]
    fn finish_reply_rewrites_usage_only() {
        let out = finish_reply(TEXT, &edits(&[], Some(TOTALS))).unwrap();
        assert_eq!(
            out,
            TEXT.replace(
                r#""prompt_tokens":20,"completion_tokens":7,"total_tokens":27"#,
                r#""prompt_tokens":300,"completion_tokens":45,"total_tokens":345"#
            )
        );
        // A call id that is not in the body changes nothing else.
        let out = finish_reply(TWO_CALLS, &edits(&["call_other"], None)).unwrap();
        assert_eq!(out, TWO_CALLS);
    }

    #[test]
    fn finish_reply_renames_in_place() {
        let rename = Edits {
            rename: vec![(
                "call_find".into(),
                "get_forecast".into(),
                r#"{"days":3}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_reply(ONE_CALL, &rename).unwrap();
        assert_eq!(
            out,
            ONE_CALL
                .replace(r#""name": "find_tools""#, r#""name": "get_forecast""#)
                .replace(r#""{\"query\":\"weather\"}""#, r#""{\"days\":3}""#)
        );
    }

    #[test]
    fn finish_reply_rejects_bad_bodies() {
        let drop = edits(&["call_find"], None);
        assert_eq!(
            finish_reply("{\"choices\":[", &drop),
            Err(Problem::MalformedJson)
        );
        assert_eq!(finish_reply(r#"{"id":"x"}"#, &drop), Err(Problem::BadShape));
        assert_eq!(
            finish_reply(r#"{"choices":[{"message":{"tool_calls":7}}]}"#, &drop),
            Err(Problem::BadShape)
        );
    }

    #[test]
    fn finish_stream_without_edits_rewrites_every_frame_as_is() {
        let frames = two_call_stream();
        assert_eq!(
            finish_stream(&frames, &Edits::default()).unwrap(),
            write_all(&frames)
        );
    }

    #[test]
    fn finish_stream_drops_one_of_two_calls_and_renumbers() {
        let frames = two_call_stream();
        let out = finish_stream(&frames, &edits(&["call_find"], Some(TOTALS))).unwrap();
        let (kept, reply) = reread(&out);
        // The three argument-only chunks of the dropped call are gone; its opening chunk stays
        // for the role it carries.
        assert_eq!(kept.len(), frames.len() - 3);
        assert_eq!(
            reply.calls,
            [call("call_wx", "get_weather", r#"{"city": "Paris"}"#)]
        );
        assert_eq!(reply.usage, Some(TOTALS));
        assert!(!out.contains("find_tools"));
        let indexes: Vec<Value> = kept
            .iter()
            .filter(|f| f.data.contains(r#""tool_calls":["#))
            .map(|f| json(&f.data)["choices"][0]["delta"]["tool_calls"][0]["index"].clone())
            .collect();
        assert_eq!(indexes, [0, 0, 0]);
        assert!(out.contains(r#""finish_reason":"tool_calls""#));
        assert!(out.contains(r#""total_tokens":345"#));
        assert!(out.ends_with("data: [DONE]\n\n"));
        // Frames the edits do not touch are written byte for byte.
        assert!(out.contains(&write_all(&frames[7..8])));
        assert!(kept[0].data.contains(r#""role":"assistant""#));
        assert!(!kept[0].data.contains("tool_calls"));
    }

    #[test]
    fn finish_stream_dropping_every_call_stops() {
        let frames = two_call_stream();
        let out = finish_stream(&frames, &edits(&["call_find", "call_wx"], None)).unwrap();
        let (kept, reply) = reread(&out);
        assert!(reply.calls.is_empty());
        assert!(!out.contains("tool_calls\":"));
        assert!(out.contains(r#""finish_reason":"stop""#));
        // Role chunk, finish chunk, usage chunk (untouched: no usage edit), [DONE].
        assert_eq!(kept.len(), 4);
        assert_eq!(kept[2], frames[8]);
        assert_eq!(
            json(&reply.turn[0]),
            serde_json::json!({"role":"assistant","content":null})
        );
    }

    #[test]
    fn finish_stream_renames_a_split_call() {
        let rename = Edits {
            rename: vec![(
                "call_find".into(),
                "get_forecast".into(),
                r#"{"days":3}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_stream(&two_call_stream(), &rename).unwrap();
        let (_, reply) = reread(&out);
        assert_eq!(
            reply.calls,
            [
                call("call_find", "get_forecast", r#"{"days":3}"#),
                call("call_wx", "get_weather", r#"{"city": "Paris"}"#),
            ]
        );
    }

    #[test]
    fn finish_stream_renames_a_call_after_a_dropped_one() {
        let edits = Edits {
            drop: vec!["call_find".into()],
            rename: vec![(
                "call_wx".into(),
                "get_forecast".into(),
                r#"{"days":3}"#.into(),
            )],
            usage: None,
            text: None,
        };
        let out = finish_stream(&two_call_stream(), &edits).unwrap();
        let (kept, reply) = reread(&out);
        assert_eq!(
            reply.calls,
            [call("call_wx", "get_forecast", r#"{"days":3}"#)]
        );
        // Role chunk, the renamed call's opening chunk, finish, usage, [DONE].
        assert_eq!(kept.len(), 5);
        let piece = &json(&kept[1].data)["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(piece["index"], 0);
        assert_eq!(piece["function"]["arguments"], r#"{"days":3}"#);
    }

    #[test]
    fn finish_stream_does_not_invent_usage() {
        let frames = text_stream();
        let out = finish_stream(&frames, &edits(&[], Some(TOTALS))).unwrap();
        assert_eq!(out, write_all(&frames));
        let bad = [Frame::data("{\"choices\":[")];
        assert_eq!(
            finish_stream(&bad, &edits(&["x"], None)),
            Err(Problem::MalformedJson)
        );
    }

    #[test]
    fn streamed_calls_without_index_or_with_repeated_index() {
        // Some compatible servers send whole calls without `index`, or number every call 0.
        let frames = [
            delta(
                r#"{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}"#,
            ),
            delta(
                r#"{"tool_calls":[{"id":"b","type":"function","function":{"name":"g","arguments":"{\"x\":1}"}}]}"#,
            ),
            delta(
                r#"{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"h","arguments":""}}]}"#,
            ),
            delta(
                r#"{"tool_calls":[{"index":0,"id":"d","type":"function","function":{"name":"k","arguments":""}}]}"#,
            ),
            finish("tool_calls"),
        ];
        let reply = read_stream(&frames).unwrap();
        let names: Vec<_> = reply.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["f", "g", "h", "k"]);
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::OpenaiChat.codec();
        // Beside an allowed call: the call stays, the words join the message.
        let (out, reply) = refused(codec, TWO_CALLS, false, &["call_wx"]);
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(json(&out)["choices"][0]["finish_reason"], "tool_calls");
        // Alone: the turn ends.
        let (out, reply) = refused(codec, ONE_CALL, false, &["call_find"]);
        assert!(reply.calls.is_empty());
        let v = json(&out);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(v["choices"][0]["message"]["content"].as_str().unwrap().contains("not available"));
        // A deprecated `function_call` (no id) is dropped by name.
        let legacy = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,
            "function_call":{"name":"get_weather","arguments":"{}"}},"finish_reason":"function_call"}]}"#;
        let (out, reply) = refused(codec, legacy, false, &["get_weather"]);
        assert!(reply.calls.is_empty() && json(&out)["choices"][0]["finish_reason"] == "stop");
        // Streamed: the words ride in the dropped call's opening chunk.
        let stream = write_all(&two_call_stream());
        let (_, reply) = refused(codec, &stream, true, &["call_wx"]);
        assert_eq!(reply.calls.len(), 1);
        let (out, reply) = refused(codec, &stream, true, &["call_find", "call_wx"]);
        assert!(reply.calls.is_empty());
        assert!(out.contains(r#""finish_reason":"stop""#), "{out}");
    }

    #[test]
    fn every_choice_s_calls_are_read_and_refused() {
        use crate::dialects::shared::testing::REFUSAL;
        // `n` = 2: the second choice calls the denied tool.
        let two = TWO_CALLS.replace(
            r#""finish_reason":"tool_calls"}]"#,
            r#""finish_reason":"tool_calls"},{"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_2nd","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},"finish_reason":"tool_calls"}]"#,
        );
        let reply = read_reply(&two).unwrap();
        assert_eq!(reply.calls.len(), 3);
        assert_eq!(reply.calls[2].id, "call_2nd");
        let edits = Edits {
            drop: vec!["call_2nd".into()],
            text: Some(REFUSAL.into()),
            ..Edits::default()
        };
        let out = finish_reply(&two, &edits).unwrap();
        assert_eq!(read_reply(&out).unwrap().calls.len(), 2);
        let second = &json(&out)["choices"][1];
        assert_eq!(second["finish_reason"], "stop");
        assert_eq!(second["message"]["content"], REFUSAL);
        assert!(second["message"].get("tool_calls").is_none());
        // Streamed: the second choice's call is read, and refused.
        let mut frames = two_call_stream();
        frames.insert(
            1,
            chunk(
                r#"[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"call_2nd","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},"finish_reason":null}]"#,
            ),
        );
        let stream = write_all(&frames);
        let reply = read_stream(&frames).unwrap();
        assert_eq!(reply.calls.last().map(|c| c.id.as_str()), Some("call_2nd"));
        let out = finish_stream(&frames, &edits).unwrap();
        let (again, used) = split(&out);
        assert_eq!(used, out.len());
        assert_eq!(read_stream(&again).unwrap().calls.len(), 2, "{stream}");
        assert!(out.contains(REFUSAL), "{out}");
    }
}
