//! OpenAI Responses: the model's turn is the `output` array, whose `function_call` items
//! (`{type,id,call_id,name,arguments,status}`, `arguments` a JSON string holding the object
//! text) are the calls, answered by `function_call_output` input items naming the `call_id`. A
//! stream is typed events (`response.output_item.added`, `…function_call_arguments.delta`,
//! `…output_item.done`, …) that end with `response.completed`, whose `response` is the whole
//! response.
//!
//! Every change is spliced into the original bytes: removing a call is removing an array
//! element, so nothing here needs re-serialising.

use crate::sse::write_all;
use crate::dialects::{Edits, Frame, Opening, Reply, ToolResult, Usage};
use crate::dialects::openai_chat::response::{Fate, call, rename_splices, usage_splices};
use crate::dialects::shared::splice::{apply_patches, json_string, write_patched};
use crate::dialects::Problem;
use crate::json::{Str, array_items, find_path};
use crate::json::ArrayLayout;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::ops::Range;

/// A response object, as far as search mode reads it.
#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow, default)]
    output: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<TokenCounts>,
}

/// One `output` item: `message`, `reasoning`, `function_call`, or another tool's item.
#[derive(Deserialize)]
struct OutputItem<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    /// The item's own id (`fc_…`), which stream events name as `item_id`.
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    /// The id the function's result must name (`call_…`).
    #[serde(borrow, default)]
    call_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    arguments: Option<Str<'a>>,
}

impl OutputItem<'_> {
    fn is_function_call(&self) -> bool {
        self.kind.as_deref() == Some("function_call")
    }

    /// What `edits` do to this item: only function calls are dropped or renamed, by `call_id`.
    fn fate(&self, text: &str, edits: &Edits) -> Result<Fate, Problem> {
        let call_id = self.call_id.as_deref().unwrap_or_default();
        if !self.is_function_call() || call_id.is_empty() {
            return Ok(Fate::Keep);
        }
        if edits.drop.iter().any(|d| d == call_id) {
            return Ok(Fate::Drop);
        }
        let Some((_, name, arguments)) = edits.rename.iter().find(|(id, _, _)| id == call_id)
        else {
            return Ok(Fate::Keep);
        };
        let splices = rename_splices(text, &["name"], &["arguments"], name, arguments);
        let renamed = apply_patches(text, splices).ok_or(Problem::BadShape)?;
        Ok(Fate::Replace(renamed))
    }
}

/// `usage`: `{input_tokens, output_tokens, total_tokens, …_details}`.
#[derive(Deserialize)]
struct TokenCounts {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl TokenCounts {
    fn usage(&self) -> Option<Usage> {
        if self.input_tokens.is_none() && self.output_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input: self.input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
        })
    }
}

/// The usage keys, in the order [`usage_splices`] takes them.
const USAGE_KEYS: [&str; 3] = ["input_tokens", "output_tokens", "total_tokens"];

/// One streaming event, as far as search mode reads it. Item-level events name their item by
/// `output_index` and (except `output_item.added`/`done`, which carry it) `item_id`.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(borrow, default)]
    item_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    /// The whole response, in `response.created`, `…in_progress` and `…completed`.
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
}

impl Event<'_> {
    /// The event type: the data's `type`, else the SSE `event:` name.
    fn kind<'f>(&'f self, frame: &'f Frame) -> &'f str {
        self.kind
            .as_deref()
            .or(frame.event.as_deref())
            .unwrap_or_default()
    }

    fn item(&self) -> Option<OutputItem<'_>> {
        serde_json::from_str(self.item?.get()).ok()
    }
}

pub(crate) fn tool_entry(name: &str, description: &str, parameters: &Value) -> String {
    json!({
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
    })
    .to_string()
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let response: Response = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let output = response.output.ok_or(Problem::BadShape)?;
    let items = array_items(output).ok_or(Problem::BadShape)?;
    let mut calls = Vec::new();
    let mut turn = Vec::with_capacity(items.len());
    for raw in items {
        let item: OutputItem = serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?;
        if item.is_function_call() {
            calls.push(call(
                item.call_id.as_deref().unwrap_or_default(),
                item.name.as_deref().unwrap_or_default(),
                item.arguments.as_deref().unwrap_or_default(),
            ));
        }
        // Reasoning, message and function_call output items are all valid input items, and a
        // reasoning model wants its reasoning item back next to the call it led to.
        turn.push(raw.get().to_owned());
    }
    Ok(Reply {
        calls,
        usage: response.usage.as_ref().and_then(TokenCounts::usage),
        turn,
    })
}

/// An output item of a turn as the access rules read it: a remote MCP connector's call
/// (`mcp_call`: `server_label`, `name`), or a function call made in a namespace.
#[derive(Deserialize)]
struct TurnItem<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    server_label: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Str<'a>>,
}

/// The `mcp_call` items of a turn, as `<server_label>/<name>`.
pub(crate) fn connector_calls(reply: &Reply) -> Vec<String> {
    reply
        .turn
        .iter()
        .filter_map(|text| serde_json::from_str::<TurnItem>(text).ok())
        .filter(|item| item.kind.as_deref() == Some("mcp_call"))
        .map(|item| {
            let label = item.server_label.unwrap_or_default();
            format!("{label}/{}", item.name.unwrap_or_default())
        })
        .collect()
}

/// The `namespace` of the `function_call` item that made `call`.
pub(crate) fn call_namespace(reply: &Reply, call: &crate::dialects::Call) -> Option<String> {
    reply
        .turn
        .iter()
        .filter_map(|text| serde_json::from_str::<TurnItem>(text).ok())
        .find(|item| {
            item.kind.as_deref() == Some("function_call")
                && item.call_id.as_deref() == Some(call.id.as_str())
        })?
        .namespace
        .map(|n| n.into_owned())
        .filter(|n| !n.is_empty())
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    for frame in frames {
        let event: Event = serde_json::from_str(&frame.data).map_err(|e| Problem::of(&e))?;
        if event.kind(frame) == "response.completed" {
            return read_reply(event.response.ok_or(Problem::BadShape)?.get());
        }
    }
    Err(Problem::BadShape)
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        let Ok(event) = serde_json::from_str::<Event>(&frame.data) else {
            continue;
        };
        match event.kind(frame) {
            "response.output_item.added" => {
                match event.item().as_ref().and_then(|i| i.kind.as_deref()) {
                    Some("message") => return Opening::Answer,
                    Some("function_call") => return Opening::Calls,
                    // Reasoning, and built-in tools the server runs itself: keep looking.
                    _ => {}
                }
            }
            // The stream ended (or failed) before any message or call: nothing to hold.
            "response.completed" | "response.incomplete" | "response.failed" | "error" => {
                return Opening::Answer;
            }
            _ => {}
        }
    }
    Opening::Undecided
}

pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| {
            json!({"type": "function_call_output", "call_id": r.call.id, "output": r.content})
                .to_string()
        })
        .collect()
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    if *edits == Edits::default() {
        return Ok(body.to_owned());
    }
    let response: Response = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let output = response.output.ok_or(Problem::BadShape)?;
    let mut splices = Vec::new();
    splices.extend(output_splice(body, output, edits)?);
    if let Some(usage) = edits.usage {
        splices.extend(usage_splices(body, &["usage"], USAGE_KEYS, usage));
    }
    apply_patches(body, splices).ok_or(Problem::BadShape)
}

/// The splice that rewrites `output` (an array borrowed from `text`) without the dropped
/// calls and with the renamed ones; `None` when `edits` change none of its items.
fn output_splice(
    text: &str,
    output: &RawValue,
    edits: &Edits,
) -> Result<Option<(Range<usize>, String)>, Problem> {
    let items = array_items(output).ok_or(Problem::BadShape)?;
    let mut words = edits.text.as_deref();
    let fates = items
        .iter()
        .map(|raw| {
            let item: OutputItem = serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?;
            let fate = item.fate(raw.get(), edits)?;
            // The words take the place of the first dropped call, as a message item.
            Ok(match (fate, words.take()) {
                (Fate::Drop, Some(text)) => {
                    let call_id = item.call_id.as_deref().unwrap_or_default();
                    Fate::Replace(message_item(call_id, Some(text)))
                }
                (fate, unused) => {
                    words = words.or(unused);
                    fate
                }
            })
        })
        .collect::<Result<Vec<_>, Problem>>()?;
    if fates.iter().all(|f| matches!(f, Fate::Keep)) {
        return Ok(None);
    }
    let layout = ArrayLayout::of(text, output.get(), &items).ok_or(Problem::BadShape)?;
    let mut rebuilt = String::with_capacity(output.get().len());
    layout.write(text, &mut rebuilt, |i, item| fates.get(i)?.apply(item));
    Ok(Some((layout.span, rebuilt)))
}

/// The assistant message item holding `text` (completed; `None`: in progress, empty) that
/// takes the place of the dropped call `call_id` (its id derived from the call's, so that the
/// whole answer and the stream agree).
fn message_item(call_id: &str, text: Option<&str>) -> String {
    let (status, content) = match text {
        Some(text) => ("completed", format!("[{}]", text_part(text))),
        None => ("in_progress", "[]".to_owned()),
    };
    format!(
        r#"{{"id":{},"type":"message","status":"{status}","content":{content},"role":"assistant"}}"#,
        json_string(&message_id(call_id))
    )
}

fn message_id(call_id: &str) -> String {
    format!("msg_toolsift_{call_id}")
}

/// An `output_text` content part holding `text`.
fn text_part(text: &str) -> String {
    format!(
        r#"{{"type":"output_text","annotations":[],"logprobs":[],"text":{}}}"#,
        json_string(text)
    )
}

/// The events of the message item holding `text` in place of a dropped call's
/// `output_item.added` (`opening`) or `output_item.done`: (event type, data), numbered from
/// `sequence` when the stream numbers its events.
fn message_events(
    call_id: &str,
    text: &str,
    output_index: u64,
    sequence: Option<u64>,
    opening: bool,
) -> Vec<(&'static str, String)> {
    let id = json_string(&message_id(call_id));
    let quoted = json_string(text);
    let at = format!(r#""item_id":{id},"output_index":{output_index},"content_index":0"#);
    let item = |text: Option<&str>| {
        format!(
            r#""output_index":{output_index},"item":{}"#,
            message_item(call_id, text)
        )
    };
    let events: Vec<(&'static str, String)> = if opening {
        vec![
            ("response.output_item.added", item(None)),
            (
                "response.content_part.added",
                format!(r#"{at},"part":{}"#, text_part("")),
            ),
            (
                "response.output_text.delta",
                format!(r#"{at},"delta":{quoted},"logprobs":[]"#),
            ),
            (
                "response.output_text.done",
                format!(r#"{at},"text":{quoted},"logprobs":[]"#),
            ),
            (
                "response.content_part.done",
                format!(r#"{at},"part":{}"#, text_part(text)),
            ),
        ]
    } else {
        vec![("response.output_item.done", item(Some(text)))]
    };
    events
        .into_iter()
        .zip(0u64..)
        .map(|((kind, rest), n)| {
            let number = sequence
                .map(|s| format!(r#","sequence_number":{}"#, s.saturating_add(n)))
                .unwrap_or_default();
            (kind, format!(r#"{{"type":"{kind}"{number},{rest}}}"#))
        })
        .collect()
}

/// An output item of a stream, as its `response.output_item.added` event showed it.
struct StreamedItem<'e> {
    output_index: Option<u64>,
    id: String,
    dropped: bool,
    /// The dropped call whose place the message holding `edits.text` takes: its `call_id`.
    replaced_by_text: Option<String>,
    /// The new name and arguments, when it is renamed.
    rename: Option<(&'e str, &'e str)>,
}

impl<'e> StreamedItem<'e> {
    fn of(output_index: Option<u64>, item: &OutputItem, edits: &'e Edits) -> Self {
        let call_id = item.call_id.as_deref().unwrap_or_default();
        let is_call = item.is_function_call() && !call_id.is_empty();
        StreamedItem {
            output_index,
            id: item.id.as_deref().unwrap_or_default().to_owned(),
            dropped: is_call && edits.drop.iter().any(|d| d == call_id),
            replaced_by_text: None,
            rename: edits
                .rename
                .iter()
                .find(|(id, _, _)| is_call && id == call_id)
                .map(|(_, name, arguments)| (name.as_str(), arguments.as_str())),
        }
    }
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    if *edits == Edits::default() {
        return Ok(write_all(frames));
    }
    let mut out = String::new();
    // An item's events come after its `output_item.added`, and items are added in output
    // order, so one pass knows each event's item and the dropped items before it.
    let mut items: Vec<StreamedItem> = Vec::new();
    let mut words = edits.text.as_deref();
    // With words written in, events are numbered again from the first change: each event
    // left out moves the later ones down, each one added up.
    let renumber = words.is_some();
    let mut shift: i64 = 0;
    for frame in frames {
        let data = frame.data.as_str();
        let event: Event = serde_json::from_str(data).map_err(|e| Problem::of(&e))?;
        let kind = event.kind(frame);
        let item = event.item();
        if let Some(item) = &item {
            let id = item.id.as_deref().unwrap_or_default();
            let known = items
                .iter()
                .any(|i| i.output_index == event.output_index && i.id == id);
            if !known {
                let mut streamed = StreamedItem::of(event.output_index, item, edits);
                if let (true, Some(_)) = (streamed.dropped, words) {
                    // The message holding the words takes this call's place (and index).
                    words = None;
                    streamed.dropped = false;
                    streamed.replaced_by_text = item.call_id.as_deref().map(str::to_owned);
                }
                items.push(streamed);
            }
        }
        let sequence = sequence_number(data).map(|n| {
            let shifted = i64::try_from(n).unwrap_or(i64::MAX).saturating_add(shift);
            u64::try_from(shifted).unwrap_or(0)
        });
        let item_id = event
            .item_id
            .as_deref()
            .or(item.as_ref().and_then(|i| i.id.as_deref()))
            .filter(|id| !id.is_empty());
        let tracked = items.iter().find(|i| match item_id {
            Some(id) => i.id == id,
            None => event.output_index.is_some() && i.output_index == event.output_index,
        });
        let mut splices = Vec::new();
        if tracked.is_some_and(|t| t.dropped) {
            shift -= 1;
            continue;
        }
        if let (Some(call_id), Some(text)) = (
            tracked.and_then(|t| t.replaced_by_text.as_deref()),
            edits.text.as_deref(),
        ) {
            let opening = kind == "response.output_item.added";
            if !opening && kind != "response.output_item.done" {
                // The call's own argument events say nothing of the message.
                shift -= 1;
                continue;
            }
            let index = event.output_index.unwrap_or(0);
            let dropped_before = items
                .iter()
                .filter(|i| i.dropped && i.output_index.is_some_and(|at| at < index))
                .count() as u64;
            let index = index.saturating_sub(dropped_before);
            let written = message_events(call_id, text, index, sequence, opening);
            shift += written.len() as i64 - 1;
            for (name, data) in written {
                Frame {
                    event: frame.event.as_ref().map(|_| name.to_owned()),
                    data,
                }
                .write(&mut out);
            }
            continue;
        }
        if let (true, Some(n), Some(span)) =
            (renumber, sequence, find_path(data, &["sequence_number"]))
        {
            if shift != 0 {
                splices.push((span, n.to_string()));
            }
        }
        if let Some((name, arguments)) = tracked.and_then(|t| t.rename) {
            let (name_path, arguments_path): (&[&str], &[&str]) = match kind {
                // The new arguments go whole into `added`: the old pieces would append to them.
                "response.function_call_arguments.delta" => continue,
                "response.output_item.added" | "response.output_item.done" => {
                    (&["item", "name"], &["item", "arguments"])
                }
                // `function_call_arguments.done`
                _ => (&["name"], &["arguments"]),
            };
            splices.extend(rename_splices(
                data,
                name_path,
                arguments_path,
                name,
                arguments,
            ));
        }
        if let Some(index) = event.output_index {
            let dropped_before = items
                .iter()
                .filter(|i| i.dropped && i.output_index.is_some_and(|at| at < index))
                .count() as u64;
            if let (true, Some(span)) = (dropped_before > 0, find_path(data, &["output_index"])) {
                // Clients index their copy of `output` by it, so it must stay 0..n. A stream
                // can give several items one index: more may be dropped before than `index`.
                splices.push((span, index.saturating_sub(dropped_before).to_string()));
            }
        }
        if let Some(raw) = event.response {
            let response: Response =
                serde_json::from_str(raw.get()).map_err(|e| Problem::of(&e))?;
            if let Some(output) = response.output {
                splices.extend(output_splice(data, output, edits)?);
            }
            if let Some(usage) = edits.usage {
                splices.extend(usage_splices(
                    data,
                    &["response", "usage"],
                    USAGE_KEYS,
                    usage,
                ));
            }
        }
        write_patched(&mut out, frame, splices)?;
    }
    Ok(out)
}

/// The events of a later round's stream `next` as the continuation of the events `sent`:
/// without its `response.created` / `response.in_progress` (the client has them), its items
/// numbered after the ones sent, `sequence_number` going on from the last one sent, and the
/// final response's `output` starting with the items the client already has.
pub(crate) fn continue_stream(sent: &[Frame], next: &[Frame]) -> Result<String, Problem> {
    let mut items_sent: Vec<String> = Vec::new();
    let mut added = 0u64;
    let mut sequence = 0u64;
    // The client holds this response's id from `response.created`: the continuation keeps it
    // (the OpenAI SDK refuses a stream whose response id changes).
    let mut shown_id: Option<String> = None;
    for frame in sent {
        if shown_id.is_none() {
            shown_id = response_id(&frame.data);
        }
        let Ok(event) = serde_json::from_str::<Event>(&frame.data) else {
            continue;
        };
        match event.kind(frame) {
            "response.output_item.added" => added += 1,
            "response.output_item.done" => {
                items_sent.extend(event.item.map(|i| i.get().to_owned()))
            }
            _ => {}
        }
        if let Some(n) = sequence_number(&frame.data) {
            sequence = n.saturating_add(1);
        }
    }
    let mut out = String::new();
    for frame in next {
        let data = frame.data.as_str();
        let event: Event = serde_json::from_str(data).map_err(|e| Problem::of(&e))?;
        let kind = event.kind(frame);
        if matches!(kind, "response.created" | "response.in_progress") {
            continue;
        }
        let mut splices = Vec::new();
        if let (Some(index), Some(span)) = (event.output_index, find_path(data, &["output_index"]))
        {
            splices.push((span, index.saturating_add(added).to_string()));
        }
        if let Some(span) = find_path(data, &["sequence_number"]) {
            splices.push((span, sequence.to_string()));
            sequence = sequence.saturating_add(1);
        }
        if let (Some(id), Some(span)) = (&shown_id, find_path(data, &["response", "id"])) {
            splices.push((span, json_string(id)));
        }
        if let (false, Some(span)) = (
            items_sent.is_empty(),
            find_path(data, &["response", "output"]),
        ) {
            let output = data.get(span.clone()).ok_or(Problem::BadShape)?;
            let inner = output
                .trim()
                .strip_prefix('[')
                .and_then(|o| o.strip_suffix(']'))
                .ok_or(Problem::BadShape)?;
            let comma = if inner.trim().is_empty() { "" } else { "," };
            splices.push((span, format!("[{}{comma}{inner}]", items_sent.join(","))));
        }
        write_patched(&mut out, frame, splices)?;
    }
    Ok(out)
}

/// The id of the response an event carries (`response.created`, `response.completed`, …).
pub(crate) fn response_id(data: &str) -> Option<String> {
    let span = find_path(data, &["response", "id"])?;
    serde_json::from_str(data.get(span)?).ok()
}

/// An event's `sequence_number`, if it has one.
fn sequence_number(data: &str) -> Option<u64> {
    let span = find_path(data, &["sequence_number"])?;
    data.get(span)?.parse().ok()
}

/// The tool call an event starts: an `output_item.added` of a `function_call` item.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    let text = |at: &str| event.pointer(at).and_then(Value::as_str);
    let starts = text("/type") == Some("response.output_item.added")
        && text("/item/type") == Some("function_call");
    match (starts, text("/item/name")) {
        (true, Some(name)) => vec![name.to_owned()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::Call;
    use crate::sse::frames as split;

    const REASONING: &str =
        r#"{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}"#;
    const FIND: &str = r#"{"type":"function_call","id":"fc_1","call_id":"call_find","name":"find_tools","arguments":"{\"query\":\"weather\"}","status":"completed"}"#;
    const WEATHER: &str = r#"{"type":"function_call","id":"fc_2","call_id":"call_wx","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}"#;
    const MESSAGE: &str = r#"{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"It is sunny.","annotations":[]}]}"#;
    const USAGE: &str = r#"{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":123}"#;

    /// A whole response with `output` and `usage` as given, the other fields as documented.
    fn response(output: &[&str], usage: &str) -> String {
        format!(
            r#"{{"id":"resp_67cc","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[{}],"parallel_tool_calls":true,"store":true,"temperature":1.0,"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{usage},"metadata":{{}}}}"#,
            output.join(", ")
        )
    }

    fn event(kind: &str, sequence: u64, rest: &str) -> Frame {
        Frame::named(
            kind,
            format!(r#"{{"type":"{kind}","sequence_number":{sequence},{rest}}}"#),
        )
    }

    fn added(sequence: u64, index: u64, item: &str) -> Frame {
        event(
            "response.output_item.added",
            sequence,
            &format!(r#""output_index":{index},"item":{item}"#),
        )
    }

    fn item_done(sequence: u64, index: u64, item: &str) -> Frame {
        event(
            "response.output_item.done",
            sequence,
            &format!(r#""output_index":{index},"item":{item}"#),
        )
    }

    fn arguments_delta(sequence: u64, index: u64, item_id: &str, piece: &str) -> Frame {
        event(
            "response.function_call_arguments.delta",
            sequence,
            &format!(r#""item_id":"{item_id}","output_index":{index},"delta":{piece}"#),
        )
    }

    fn arguments_done(sequence: u64, index: u64, item_id: &str, arguments: &str) -> Frame {
        event(
            "response.function_call_arguments.done",
            sequence,
            &format!(r#""item_id":"{item_id}","output_index":{index},"arguments":{arguments}"#),
        )
    }

    fn created() -> Frame {
        event(
            "response.created",
            0,
            r#""response":{"id":"resp_67cc","object":"response","status":"in_progress","output":[],"usage":null}"#,
        )
    }

    fn completed(sequence: u64, output: &[&str]) -> Frame {
        event(
            "response.completed",
            sequence,
            &format!(r#""response":{}"#, response(output, USAGE)),
        )
    }

    /// A reasoning item, then two parallel calls whose arguments come in pieces.
    fn two_call_stream() -> Vec<Frame> {
        let pending = |item: &str, arguments: &str| {
            item.replace(arguments, r#""""#)
                .replace(r#""completed""#, r#""in_progress""#)
        };
        vec![
            created(),
            added(1, 0, r#"{"type":"reasoning","id":"rs_1","summary":[]}"#),
            item_done(2, 0, REASONING),
            added(3, 1, &pending(FIND, r#""{\"query\":\"weather\"}""#)),
            arguments_delta(4, 1, "fc_1", r#""{\"qu""#),
            arguments_delta(5, 1, "fc_1", r#""ery\":\"wea""#),
            arguments_delta(6, 1, "fc_1", r#""ther\"}""#),
            arguments_done(7, 1, "fc_1", r#""{\"query\":\"weather\"}""#),
            item_done(8, 1, FIND),
            added(9, 2, &pending(WEATHER, r#""{\"city\":\"Paris\"}""#)),
            arguments_delta(10, 2, "fc_2", r#""{\"city\":""#),
            arguments_delta(11, 2, "fc_2", r#""\"Paris\"}""#),
            arguments_done(12, 2, "fc_2", r#""{\"city\":\"Paris\"}""#),
            item_done(13, 2, WEATHER),
            completed(14, &[REASONING, FIND, WEATHER]),
        ]
    }

    fn text_stream() -> Vec<Frame> {
        vec![
            created(),
            added(
                1,
                0,
                r#"{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}"#,
            ),
            event(
                "response.output_text.delta",
                2,
                r#""item_id":"msg_1","output_index":0,"content_index":0,"delta":"It is sunny.""#,
            ),
            item_done(3, 0, MESSAGE),
            completed(4, &[MESSAGE]),
        ]
    }

    fn call(id: &str, name: &str, arguments: &str) -> Call {
        super::call(id, name, arguments)
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

    const TOTALS: Usage = Usage {
        input: 300,
        output: 45,
    };

    const TOTALS_TEXT: &str = r#""input_tokens":300,"input_tokens_details":{"cached_tokens":0},"output_tokens":45,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":345"#;

    fn with_totals(text: &str) -> String {
        text.replace(USAGE.trim_matches(['{', '}']), TOTALS_TEXT)
    }

    /// The stream the client gets, split again: the frames and the reply they read as.
    fn reread(stream: &str) -> (Vec<Frame>, Reply) {
        let (frames, used) = split(stream);
        assert_eq!(used, stream.len());
        let reply = read_stream(&frames).unwrap();
        (frames, reply)
    }

    /// The `output_index` of every item-level event, in stream order.
    fn output_indexes(frames: &[Frame]) -> Vec<u64> {
        frames
            .iter()
            .filter_map(|f| json(&f.data)["output_index"].as_u64())
            .collect()
    }

    #[test]
    fn tool_entry_is_a_flat_function_tool() {
        let params = json(r#"{"type":"object","properties":{"query":{"type":"string"}}}"#);
        assert_eq!(
            json(&tool_entry("find_tools", "Finds tools.", &params)),
            serde_json::json!({"type":"function","name":"find_tools",
                "description":"Finds tools.","parameters":params})
        );
    }

    #[test]
    fn reads_a_reply_with_reasoning_and_parallel_calls() {
        let body = response(&[REASONING, FIND, WEATHER], USAGE);
        let reply = read_reply(&body).unwrap();
        assert_eq!(
            reply.calls,
            [
                call("call_find", "find_tools", r#"{"query":"weather"}"#),
                call("call_wx", "get_weather", r#"{"city":"Paris"}"#),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 36,
                output: 87
            })
        );
        // Every output item, byte for byte.
        assert_eq!(reply.turn, [REASONING, FIND, WEATHER]);
    }

    #[test]
    fn reads_a_text_reply_and_empty_arguments() {
        let reply = read_reply(&response(&[MESSAGE], "null")).unwrap();
        assert!(reply.calls.is_empty());
        assert_eq!(reply.usage, None);
        assert_eq!(reply.turn, [MESSAGE]);
        let no_arguments = FIND.replace(r#""{\"query\":\"weather\"}""#, r#""""#);
        let reply = read_reply(&response(&[&no_arguments], USAGE)).unwrap();
        assert_eq!(reply.calls, [call("call_find", "find_tools", "{}")]);
    }

    #[test]
    fn bad_replies_are_errors() {
        assert_eq!(read_reply(r#"{"output":["#), Err(Problem::MalformedJson));
        assert_eq!(
            read_reply(r#"{"object":"response"}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(read_reply(r#"{"output":{}}"#), Err(Problem::BadShape));
        assert_eq!(read_reply(r#"{"output":[1]}"#), Err(Problem::BadShape));
        assert_eq!(read_reply("[]"), Err(Problem::BadShape));
    }

    #[test]
    fn reads_a_stream_from_its_completed_event() {
        let reply = read_stream(&two_call_stream()).unwrap();
        assert_eq!(
            reply,
            read_reply(&response(&[REASONING, FIND, WEATHER], USAGE)).unwrap()
        );
        // Without `event:` lines the data's `type` names the event.
        let unnamed: Vec<Frame> = two_call_stream()
            .into_iter()
            .map(|f| Frame::data(f.data))
            .collect();
        assert_eq!(read_stream(&unnamed).unwrap().calls.len(), 2);
        let reply = read_stream(&text_stream()).unwrap();
        assert!(reply.calls.is_empty());
        assert_eq!(reply.turn, [MESSAGE]);
    }

    #[test]
    fn bad_streams_are_errors() {
        let stream = two_call_stream();
        assert_eq!(
            read_stream(&stream[..stream.len() - 1]),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_stream(&[Frame::named("response.completed", "{\"type\":")]),
            Err(Problem::MalformedJson)
        );
        assert_eq!(
            read_stream(&[Frame::named("response.completed", "{}")]),
            Err(Problem::BadShape)
        );
    }

    #[test]
    fn opening_decisions() {
        let calls = two_call_stream();
        assert_eq!(opening(&[]), Opening::Undecided);
        assert_eq!(opening(&calls[..1]), Opening::Undecided);
        assert_eq!(
            opening(&calls[..3]),
            Opening::Undecided,
            "reasoning decides nothing"
        );
        assert_eq!(opening(&calls[..4]), Opening::Calls);
        assert_eq!(opening(&text_stream()[..2]), Opening::Answer);
        let failed = event(
            "response.failed",
            1,
            r#""response":{"status":"failed","output":[]}"#,
        );
        assert_eq!(opening(&[created(), failed]), Opening::Answer);
        assert_eq!(opening(&[Frame::data("garbage")]), Opening::Undecided);
    }

    #[test]
    fn tool_results_are_function_call_outputs() {
        let items = tool_results(&[ToolResult {
            call: call("call_find", "find_tools", "{}"),
            content: r#"{"tools":[{"name":"get_weather"}]}"#.into(),
            is_error: false,
        }]);
        assert_eq!(
            json(&items[0]),
            serde_json::json!({"type":"function_call_output","call_id":"call_find",
                "output":"{\"tools\":[{\"name\":\"get_weather\"}]}"})
        );
    }

    #[test]
    fn finish_reply_without_edits_is_byte_identical() {
        let body = response(&[REASONING, FIND, WEATHER], USAGE);
        assert_eq!(finish_reply(&body, &Edits::default()).unwrap(), body);
        assert_eq!(finish_reply("junk", &Edits::default()).unwrap(), "junk");
    }

    #[test]
    fn finish_reply_drops_one_of_two_calls_in_place() {
        let body = response(&[REASONING, FIND, WEATHER], USAGE);
        let out = finish_reply(&body, &edits(&["call_find"], Some(TOTALS))).unwrap();
        assert_eq!(out, with_totals(&response(&[REASONING, WEATHER], USAGE)));
        // The second item goes with the separator before it.
        let out = finish_reply(&body, &edits(&["call_wx"], None)).unwrap();
        assert_eq!(out, response(&[REASONING, FIND], USAGE));
    }

    #[test]
    fn finish_reply_drops_the_only_call() {
        let body = response(&[FIND], USAGE);
        let out = finish_reply(&body, &edits(&["call_find"], Some(TOTALS))).unwrap();
        assert_eq!(out, with_totals(&response(&[], USAGE)));
    }

    #[test]
    fn finish_reply_renames_and_rewrites_usage() {
        let body = response(&[REASONING, FIND], USAGE);
        let rename = Edits {
            rename: vec![(
                "call_find".into(),
                "get_forecast".into(),
                r#"{"days":3}"#.into(),
            )],
            usage: Some(TOTALS),
            ..Edits::default()
        };
        let renamed = FIND
            .replace("find_tools", "get_forecast")
            .replace(r#"{\"query\":\"weather\"}"#, r#"{\"days\":3}"#);
        assert_eq!(
            finish_reply(&body, &rename).unwrap(),
            with_totals(&response(&[REASONING, &renamed], USAGE))
        );
    }

    #[test]
    fn finish_reply_rejects_bad_bodies() {
        let drop = edits(&["call_find"], None);
        assert_eq!(
            finish_reply(r#"{"output":["#, &drop),
            Err(Problem::MalformedJson)
        );
        assert_eq!(finish_reply(r#"{"id":"x"}"#, &drop), Err(Problem::BadShape));
        assert_eq!(
            finish_reply(r#"{"output":"x"}"#, &drop),
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
    fn finish_stream_drops_one_of_two_calls() {
        let frames = two_call_stream();
        let out = finish_stream(&frames, &edits(&["call_find"], Some(TOTALS))).unwrap();
        let (kept, reply) = reread(&out);
        // added, three deltas, arguments.done and item done of fc_1.
        assert_eq!(kept.len(), frames.len() - 6);
        assert!(!out.contains("fc_1") && !out.contains("find_tools"));
        assert_eq!(
            reply.calls,
            [call("call_wx", "get_weather", r#"{"city":"Paris"}"#)]
        );
        assert_eq!(reply.usage, Some(TOTALS));
        assert_eq!(reply.turn, [REASONING, WEATHER]);
        // The later item moves down so that indexes stay 0..n.
        assert_eq!(output_indexes(&kept), [0, 0, 1, 1, 1, 1, 1]);
        // Everything before the dropped item is untouched.
        assert!(out.starts_with(&write_all(&frames[..3])));
        let last = kept.last().unwrap();
        assert_eq!(last.event.as_deref(), Some("response.completed"));
        assert_eq!(
            last.data,
            frames[14]
                .data
                .replace(&format!("{FIND}, "), "")
                .replace(USAGE.trim_matches(['{', '}']), TOTALS_TEXT)
        );
    }

    #[test]
    fn finish_stream_drops_every_call() {
        let frames = two_call_stream();
        let out = finish_stream(&frames, &edits(&["call_find", "call_wx"], None)).unwrap();
        let (kept, reply) = reread(&out);
        assert_eq!(kept.len(), 4);
        assert!(reply.calls.is_empty());
        assert_eq!(reply.turn, [REASONING]);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 36,
                output: 87
            })
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
        let (kept, reply) = reread(&out);
        assert_eq!(
            reply.calls,
            [
                call("call_find", "get_forecast", r#"{"days":3}"#),
                call("call_wx", "get_weather", r#"{"city":"Paris"}"#),
            ]
        );
        // What a client accumulating the events sees for fc_1: the added item's arguments
        // plus every delta, then the done events.
        let of_fc_1: Vec<Value> = kept
            .iter()
            .map(|f| json(&f.data))
            .filter(|v| v["item_id"] == "fc_1" || v["item"]["id"] == "fc_1")
            .collect();
        let kinds: Vec<_> = of_fc_1
            .iter()
            .map(|v| v["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "response.output_item.added",
                "response.function_call_arguments.done",
                "response.output_item.done"
            ]
        );
        assert_eq!(of_fc_1[0]["item"]["name"], "get_forecast");
        assert_eq!(of_fc_1[0]["item"]["arguments"], r#"{"days":3}"#);
        assert_eq!(of_fc_1[1]["arguments"], r#"{"days":3}"#);
        assert_eq!(of_fc_1[2]["item"]["arguments"], r#"{"days":3}"#);
        assert_eq!(output_indexes(&kept), [0, 0, 1, 1, 1, 2, 2, 2, 2, 2]);
    }

    #[test]
    fn finish_stream_rejects_bad_frames() {
        let mut frames = two_call_stream();
        frames.insert(3, Frame::data("{\"type\":"));
        assert_eq!(
            finish_stream(&frames, &edits(&["call_find"], None)),
            Err(Problem::MalformedJson)
        );
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::OpenaiResponses.codec();
        let whole = response(&[REASONING, FIND, WEATHER], USAGE);
        let (out, reply) = refused(codec, &whole, false, &["call_wx"]);
        assert_eq!(reply.calls.len(), 1);
        let v = json(&out);
        assert_eq!(v["output"][2]["type"], "message");
        assert_eq!(v["output"][2]["id"], "msg_toolsift_call_wx");
        // Streamed: the message's events in the call's place, indexes and numbers in order.
        let stream = write_all(&two_call_stream());
        let (out, reply) = refused(codec, &stream, true, &["call_find"]);
        assert_eq!(reply.calls.len(), 1);
        let (frames, _) = split(&out);
        let numbers: Vec<u64> = frames
            .iter()
            .map(|f| json(&f.data)["sequence_number"].as_u64().unwrap())
            .collect();
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
        let added: Vec<(u64, String)> = frames
            .iter()
            .filter(|f| f.data.contains("output_item.added"))
            .map(|f| {
                let v = json(&f.data);
                (v["output_index"].as_u64().unwrap(), v["item"]["type"].as_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(added, [(0, "reasoning".into()), (1, "message".into()), (2, "function_call".into())]);
        let completed = json(&frames.last().unwrap().data);
        assert_eq!(completed["response"]["output"][1]["id"], "msg_toolsift_call_find");
        let (_, reply) = refused(codec, &stream, true, &["call_find", "call_wx"]);
        assert!(reply.calls.is_empty());
    }
}
