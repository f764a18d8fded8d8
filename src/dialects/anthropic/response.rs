//! Anthropic Messages, response side: the `content[]` blocks of a message (`text`, `tool_use`,
//! `thinking`, `redacted_thinking`, server-tool blocks), `stop_reason`, `usage`, and the event
//! stream (`message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`,
//! `message_stop`, `ping`, `error`).
//!
//! It also holds the splicing helpers that the Gemini and Bedrock modules share: the three
//! dialects all keep tool calls as elements of a content array, and editing them in place keeps
//! every other byte of the upstream's response.

use crate::dialects::shared::calls::{CallBlock, CallShape, StreamedBlocks, edit_turn};
use crate::dialects::{Call, Edits, Frame, Opening, Reply, ToolResult, Usage};
use crate::dialects::shared::splice::{
    apply_patches, json_string, parse_object, replace_member, set_member, write_patched,
};
use crate::dialects::Problem;
use crate::json::{Str, array_items, find_path};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where a `tool_use` block keeps its name and input: on the block itself.
const TOOL_USE: CallShape = CallShape {
    object: &[],
    arguments: "input",
};

/// A whole (not streamed) Messages response: the parts search mode reads or rewrites.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: &'a RawValue,
    #[serde(borrow, default)]
    stop_reason: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Deserialize)]
struct TokenUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// One content block, as far as tool calls go.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// One stream event. Every event's data names its own `type`, so the SSE `event:` line is not
/// needed to tell them apart.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(borrow, default)]
    content_block: Option<&'a RawValue>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

/// The `delta` of a `content_block_delta` event.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<Str<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    signature: Option<Str<'a>>,
    #[serde(default)]
    citation: Option<Value>,
}

/// The `message` of a `message_start` event.
#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    usage: Option<TokenUsage>,
}

pub(crate) fn tool_entry(name: &str, description: &str, parameters: &Value) -> String {
    format!(
        r#"{{"name":{},"description":{},"input_schema":{parameters}}}"#,
        json_string(name),
        json_string(description),
    )
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let message: Message = parse_object(body)?;
    let mut calls = Vec::new();
    for raw in array_items(message.content).ok_or(Problem::BadShape)? {
        let block: Block = parse_object(raw.get()).map_err(|_| Problem::BadShape)?;
        if block.kind.as_deref() != Some("tool_use") {
            continue;
        }
        let (Some(id), Some(name)) = (block.id, block.name) else {
            return Err(Problem::BadShape);
        };
        calls.push(Call {
            id: id.into_owned(),
            name: name.into_owned(),
            arguments: block.input.map_or("{}", RawValue::get).to_owned(),
        });
    }
    Ok(Reply {
        calls,
        usage: message.usage.map(|u| Usage {
            input: u.input_tokens.unwrap_or(0),
            output: u.output_tokens.unwrap_or(0),
        }),
        // The blocks' own bytes: thinking blocks must go back with their signatures untouched.
        turn: vec![format!(
            r#"{{"role":"assistant","content":{}}}"#,
            message.content.get()
        )],
    })
}

/// A content block being rebuilt from its stream events.
struct StreamedBlock {
    /// The `content_block` of `content_block_start`, with the deltas applied so far.
    block: Map<String, Value>,
    /// The `partial_json` pieces of a tool call's input, concatenated.
    input_json: String,
}

impl StreamedBlock {
    fn apply(&mut self, delta: Delta) {
        match delta.kind.as_deref() {
            Some("text_delta") => append(&mut self.block, "text", delta.text.as_deref()),
            Some("thinking_delta") => {
                append(&mut self.block, "thinking", delta.thinking.as_deref());
            }
            Some("input_json_delta") => {
                self.input_json
                    .push_str(delta.partial_json.as_deref().unwrap_or_default());
            }
            // The signature comes whole, in one delta at the end of the thinking block.
            Some("signature_delta") => {
                if let Some(signature) = delta.signature {
                    self.block
                        .insert("signature".into(), Value::String(signature.into_owned()));
                }
            }
            Some("citations_delta") => {
                if let Some(citation) = delta.citation {
                    let citations = self
                        .block
                        .entry("citations")
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(list) = citations {
                        list.push(citation);
                    }
                }
            }
            _ => {}
        }
    }

    /// The finished block, and its input as JSON text (`{}` when it had none).
    fn finish(mut self) -> Result<(Map<String, Value>, String), Problem> {
        let streamed = self.input_json.trim();
        if !streamed.is_empty() {
            let input: Value = serde_json::from_str(streamed).map_err(|e| Problem::of(&e))?;
            self.block.insert("input".into(), input);
            return Ok((self.block, streamed.to_owned()));
        }
        let input = self.block.get("input").map(Value::to_string);
        Ok((self.block, input.unwrap_or_else(|| "{}".to_owned())))
    }
}

/// Appends `piece` to the string member `key` of `block` (created when absent).
fn append(block: &mut Map<String, Value>, key: &str, piece: Option<&str>) {
    let Some(piece) = piece else { return };
    match block.get_mut(key) {
        Some(Value::String(text)) => text.push_str(piece),
        _ => {
            block.insert(key.to_owned(), Value::String(piece.to_owned()));
        }
    }
}

/// The `mcp_tool_use` blocks of a turn (a remote MCP connector's call: `server_name`,
/// `name`), as `<server_name>/<name>`.
pub(crate) fn connector_calls(reply: &Reply) -> Vec<String> {
    #[derive(Deserialize)]
    struct Turn<'a> {
        #[serde(borrow, default)]
        content: Vec<UseBlock<'a>>,
    }
    #[derive(Deserialize)]
    struct UseBlock<'a> {
        #[serde(borrow, default, rename = "type")]
        kind: Option<Str<'a>>,
        #[serde(borrow, default)]
        server_name: Option<Str<'a>>,
        #[serde(borrow, default)]
        name: Option<Str<'a>>,
    }
    reply
        .turn
        .iter()
        .filter_map(|text| serde_json::from_str::<Turn>(text).ok())
        .flat_map(|turn| turn.content)
        .filter(|block| block.kind.as_deref() == Some("mcp_tool_use"))
        .map(|block| {
            let label = block.server_name.unwrap_or_default();
            format!("{label}/{}", block.name.unwrap_or_default())
        })
        .collect()
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    let mut blocks: BTreeMap<usize, StreamedBlock> = BTreeMap::new();
    let mut usage: Option<Usage> = None;
    for frame in frames {
        let event: Event = parse_object(&frame.data)?;
        match event.kind.as_ref() {
            "message_start" => {
                let message: StartedMessage = event
                    .message
                    .and_then(crate::json::parse)
                    .ok_or(Problem::BadShape)?;
                if let Some(tokens) = message.usage {
                    let counted = usage.get_or_insert_with(Usage::default);
                    counted.input = tokens.input_tokens.unwrap_or(0);
                    counted.output = tokens.output_tokens.unwrap_or(0);
                }
            }
            "content_block_start" => {
                let index = event.index.ok_or(Problem::BadShape)?;
                let block: Map<String, Value> = event
                    .content_block
                    .and_then(|raw| serde_json::from_str(raw.get()).ok())
                    .ok_or(Problem::BadShape)?;
                blocks.insert(
                    index,
                    StreamedBlock {
                        block,
                        input_json: String::new(),
                    },
                );
            }
            "content_block_delta" => {
                let index = event.index.ok_or(Problem::BadShape)?;
                let delta: Delta = event
                    .delta
                    .and_then(crate::json::parse)
                    .ok_or(Problem::BadShape)?;
                blocks
                    .get_mut(&index)
                    .ok_or(Problem::BadShape)?
                    .apply(delta);
            }
            // The output count of `message_delta` is cumulative: the last one is the total.
            "message_delta" => {
                if let Some(output) = event.usage.and_then(|u| u.output_tokens) {
                    usage.get_or_insert_with(Usage::default).output = output;
                }
            }
            // An overloaded or failed stream is not a turn the gateway can answer.
            "error" => return Err(Problem::BadShape),
            // content_block_stop, message_stop, ping, and events added later.
            _ => {}
        }
    }
    let mut calls = Vec::new();
    let mut content = Vec::with_capacity(blocks.len());
    for streamed in blocks.into_values() {
        let (block, arguments) = streamed.finish()?;
        if block.get("type").and_then(Value::as_str) == Some("tool_use") {
            let text = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
            let (Some(id), Some(name)) = (text("id"), text("name")) else {
                return Err(Problem::BadShape);
            };
            calls.push(Call {
                id,
                name,
                arguments,
            });
        }
        content.push(Value::Object(block));
    }
    Ok(Reply {
        calls,
        usage,
        turn: vec![format!(
            r#"{{"role":"assistant","content":{}}}"#,
            Value::Array(content)
        )],
    })
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        let Ok(event) = parse_object::<Event>(&frame.data) else {
            continue;
        };
        match event.kind.as_ref() {
            "content_block_start" => {
                let block = event.content_block.and_then(crate::json::parse::<Block>);
                match block.as_ref().and_then(|b| b.kind.as_deref()) {
                    Some("text") => return Opening::Answer,
                    Some("tool_use") => return Opening::Calls,
                    // Thinking comes before whatever the model decides; server tools
                    // (web search, …) run upstream and are followed by text or a call.
                    _ => {}
                }
            }
            // Nothing to hold for: the client gets the error as it is.
            "error" => return Opening::Answer,
            _ => {}
        }
    }
    Opening::Undecided
}

pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    if results.is_empty() {
        return Vec::new();
    }
    let blocks: Vec<String> = results
        .iter()
        .map(|result| {
            let error = if result.is_error {
                r#","is_error":true"#
            } else {
                ""
            };
            format!(
                r#"{{"type":"tool_result","tool_use_id":{},"content":{}{error}}}"#,
                json_string(&result.call.id),
                json_string(&result.content),
            )
        })
        .collect();
    vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        blocks.join(",")
    )]
}

/// The id `edits` names a `tool_use` block by; `None` for other blocks.
fn tool_use_id(block: &str) -> Result<Option<String>, Problem> {
    let block: Block = parse_object(block).map_err(|_| Problem::BadShape)?;
    Ok(match block.kind.as_deref() {
        Some("tool_use") => Some(block.id.unwrap_or_default().into_owned()),
        _ => None,
    })
}

/// A text content block holding `text`.
fn text_block(text: &str) -> String {
    format!(r#"{{"type":"text","text":{}}}"#, json_string(text))
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    let message: Message = parse_object(body)?;
    let block = edits.text.as_deref().map(text_block);
    let mut patches = edit_turn(
        body,
        message.content,
        (&TOOL_USE, tool_use_id),
        edits,
        block.as_deref(),
        message.stop_reason,
    )?;
    if let (Some(usage), Some(object)) = (edits.usage, find_path(body, &["usage"])) {
        for (key, count) in [
            ("input_tokens", usage.input),
            ("output_tokens", usage.output),
        ] {
            patches.push(
                set_member(body, object.clone(), key, &count.to_string())
                    .ok_or(Problem::BadShape)?,
            );
        }
    }
    apply_patches(body, patches).ok_or(Problem::BadShape)
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    let mut out = String::new();
    let mut blocks = StreamedBlocks::new(edits);
    for frame in frames {
        let data = frame.data.as_str();
        let event: Event = parse_object(data)?;
        let mut patches = Vec::new();
        match event.kind.as_ref() {
            "message_start" => {
                let usage_object = find_path(data, &["message", "usage"]);
                if let (Some(usage), Some(object)) = (edits.usage, usage_object) {
                    let input = usage.input.to_string();
                    patches.push(
                        set_member(data, object, "input_tokens", &input)
                            .ok_or(Problem::BadShape)?,
                    );
                }
            }
            "content_block_start" => {
                let index = event.index.ok_or(Problem::BadShape)?;
                let raw = event.content_block.ok_or(Problem::BadShape)?;
                if let Some(id) = tool_use_id(raw.get())? {
                    match blocks.call(index, &id)? {
                        CallBlock::Dropped(text) => {
                            if let Some((at, text)) = text {
                                write_text_block(&mut out, frame, at, text);
                            }
                            continue;
                        }
                        CallBlock::Renamed(name) => {
                            let object =
                                find_path(data, &["content_block"]).ok_or(Problem::BadShape)?;
                            patches.push(
                                set_member(data, object, "name", &json_string(name))
                                    .ok_or(Problem::BadShape)?,
                            );
                        }
                        CallBlock::Kept => {}
                    }
                }
            }
            "content_block_delta" => {
                let index = event.index.ok_or(Problem::BadShape)?;
                // A renamed call's input is written whole before its stop event.
                if blocks.skips_deltas(index) {
                    continue;
                }
            }
            "content_block_stop" => {
                let index = event.index.ok_or(Problem::BadShape)?;
                if blocks.dropped(index) {
                    continue;
                }
                if let Some(arguments) = blocks.renamed(index) {
                    let delta = format!(
                        r#"{{"type":"content_block_delta","index":{},"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                        blocks.index(index),
                        json_string(arguments),
                    );
                    Frame {
                        event: frame
                            .event
                            .as_ref()
                            .map(|_| "content_block_delta".to_owned()),
                        data: delta,
                    }
                    .write(&mut out);
                }
            }
            "message_delta" => {
                if blocks.all_dropped() {
                    let reason = find_path(data, &["delta", "stop_reason"]);
                    if let Some(span) =
                        reason.filter(|r| data.get(r.clone()) == Some(r#""tool_use""#))
                    {
                        patches.push((span, r#""end_turn""#.to_owned()));
                    }
                }
                let usage_object = find_path(data, &["usage"]);
                if let (Some(usage), Some(object)) = (edits.usage, usage_object) {
                    let output = usage.output.to_string();
                    patches.push(
                        set_member(data, object.clone(), "output_tokens", &output)
                            .ok_or(Problem::BadShape)?,
                    );
                    // Newer streams repeat the input count here; keep it consistent.
                    let input = usage.input.to_string();
                    patches.extend(replace_member(data, object, "input_tokens", &input));
                }
            }
            _ => {}
        }
        if let Some(index) = event.index {
            patches.extend(blocks.index_patch(data, "index", index)?);
        }
        write_patched(&mut out, frame, patches)?;
    }
    Ok(out)
}

/// The three events of a text block holding `text` at `index`, written in place of the
/// `content_block_start` event `start` of a dropped call (named as its events are).
fn write_text_block(out: &mut String, start: &Frame, index: usize, text: &str) {
    let events = [
        (
            "content_block_start",
            format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text","text":""}}}}"#
            ),
        ),
        (
            "content_block_delta",
            format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"text_delta","text":{}}}}}"#,
                json_string(text)
            ),
        ),
        (
            "content_block_stop",
            format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        ),
    ];
    for (name, data) in events {
        Frame {
            event: start.event.as_ref().map(|_| name.to_owned()),
            data,
        }
        .write(out);
    }
}

/// The events of a later round's stream `next` as the continuation of the events `sent`:
/// without its `message_start` (the client has one), its content blocks numbered after the
/// ones sent.
pub(crate) fn continue_stream(sent: &[Frame], next: &[Frame]) -> Result<String, Problem> {
    let is_start = |frame: &Frame| {
        parse_object::<Event>(&frame.data).is_ok_and(|e| e.kind == "content_block_start")
    };
    let offset = sent.iter().filter(|f| is_start(f)).count();
    let mut out = String::new();
    for frame in next {
        let data = frame.data.as_str();
        let event: Event = parse_object(data)?;
        if event.kind == "message_start" {
            continue;
        }
        let mut patches = Vec::new();
        if let (Some(index), true) = (event.index, offset > 0) {
            let span = find_path(data, &["index"]).ok_or(Problem::BadShape)?;
            patches.push((span, index.saturating_add(offset).to_string()));
        }
        write_patched(&mut out, frame, patches)?;
    }
    Ok(out)
}

/// The tool call a stream event starts: a `content_block_start` of a `tool_use` block.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    let text = |at: &str| event.pointer(at).and_then(Value::as_str);
    let starts = text("/type") == Some("content_block_start")
        && text("/content_block/type") == Some("tool_use");
    match (starts, text("/content_block/name")) {
        (true, Some(name)) => vec![name.to_owned()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_later_round_continues_the_stream() {
        let sent = vec![
            Frame::named(
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":9}}}"#,
            ),
            Frame::named(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            Frame::named(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
        ];
        let next = [
            Frame::named("message_start", r#"{"type":"message_start","message":{}}"#),
            Frame::named(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"w","input":{}}}"#,
            ),
            Frame::named(
                "content_block_stop",
                r#"{"index":0,"type":"content_block_stop"}"#,
            ),
            Frame::named("message_stop", r#"{"type":"message_stop"}"#),
        ];
        let out = continue_stream(&sent, &next).unwrap();
        assert_eq!(
            out,
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"w\",\"input\":{}}}\n\n\
             event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n\
             event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        assert_eq!(
            continue_stream(&[], &next[1..2]).unwrap(),
            write_all(&next[1..2])
        );
    }

    use super::*;
    use crate::sse::write_all;

    /// A reply with a thinking block, text and two parallel calls, pretty-printed.
    const TWO_CALLS: &str = r#"{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {"type": "thinking", "thinking": "The user wants weather; search first.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
    {"type": "text", "text": "Let me look."},
    {"type": "tool_use", "id": "toolu_find", "name": "find_tools", "input": {"query": "weather"}},
    {"type": "tool_use", "id": "toolu_weather", "name": "get_weather", "input": {"city": "Paris"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 89}
}"#;

    const ONE_CALL: &str = r#"{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Searching."},{"type":"tool_use","id":"toolu_find","name":"find_tools","input":{"query":"weather"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":20}}"#;

    const TEXT: &str = r#"{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":3}}"#;

    fn drop(ids: &[&str]) -> Edits {
        Edits {
            drop: ids.iter().map(|s| s.to_string()).collect(),
            ..Edits::default()
        }
    }

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn tool_entry_is_a_custom_tool() {
        let schema = serde_json::json!({"type":"object","properties":{"query":{"type":"string"}},"required":["query"]});
        let entry = value(&tool_entry("find_tools", "Find \"tools\".", &schema));
        assert_eq!(
            entry,
            serde_json::json!({"name":"find_tools","description":"Find \"tools\".","input_schema":schema})
        );
    }

    #[test]
    fn reads_calls_usage_and_the_turn_bytes() {
        let reply = read_reply(TWO_CALLS).unwrap();
        assert_eq!(
            reply.calls,
            [
                Call {
                    id: "toolu_find".into(),
                    name: "find_tools".into(),
                    arguments: r#"{"query": "weather"}"#.into()
                },
                Call {
                    id: "toolu_weather".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city": "Paris"}"#.into()
                },
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 472,
                output: 89
            })
        );
        let content = &TWO_CALLS[find_path(TWO_CALLS, &["content"]).unwrap()];
        assert_eq!(
            reply.turn,
            [format!(r#"{{"role":"assistant","content":{content}}}"#)]
        );
        assert!(reply.turn[0].contains(r#""signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h""#));

        let text = read_reply(TEXT).unwrap();
        assert!(text.calls.is_empty());
        assert_eq!(
            text.usage,
            Some(Usage {
                input: 10,
                output: 3
            })
        );
    }

    #[test]
    fn bad_replies_are_errors() {
        assert_eq!(read_reply("{\"content\":["), Err(Problem::MalformedJson));
        assert_eq!(read_reply("not json"), Err(Problem::MalformedJson));
        assert_eq!(read_reply("[]"), Err(Problem::BadShape));
        assert_eq!(
            read_reply(r#"[[{"type":"text","text":"x"}]]"#),
            Err(Problem::BadShape)
        );
        assert_eq!(read_reply(r#"{"content":"hi"}"#), Err(Problem::BadShape));
        assert_eq!(
            read_reply(r#"{"content":[{"type":"tool_use","input":{}}]}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_reply(r#"{"type":"error","error":{"type":"overloaded_error"}}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            finish_reply("{", &Edits::default()),
            Err(Problem::MalformedJson)
        );
        assert_eq!(finish_reply("{}", &drop(&["x"])), Err(Problem::BadShape));
    }

    #[test]
    fn tool_results_are_one_user_message() {
        let call = |id: &str| Call {
            id: id.into(),
            name: "find_tools".into(),
            arguments: "{}".into(),
        };
        let items = tool_results(&[
            ToolResult {
                call: call("toolu_1"),
                content: r#"{"tools":[{"name":"get_weather"}]}"#.into(),
                is_error: false,
            },
            ToolResult {
                call: call("toolu_2"),
                content: r#"{"error":"no query"}"#.into(),
                is_error: true,
            },
        ]);
        assert_eq!(items.len(), 1);
        assert_eq!(
            value(&items[0]),
            serde_json::json!({"role":"user","content":[
                {"type":"tool_result","tool_use_id":"toolu_1","content":"{\"tools\":[{\"name\":\"get_weather\"}]}"},
                {"type":"tool_result","tool_use_id":"toolu_2","content":"{\"error\":\"no query\"}","is_error":true}
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
    fn dropping_one_of_two_calls_keeps_the_rest() {
        let out = finish_reply(TWO_CALLS, &drop(&["toolu_find"])).unwrap();
        let reply = read_reply(&out).unwrap();
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].id, "toolu_weather");
        assert_eq!(value(&out)["stop_reason"], "tool_use");
        // Only the dropped block's bytes went; the layout of the rest is the original's.
        assert_eq!(
            out,
            TWO_CALLS.replace(
                "\n    {\"type\": \"tool_use\", \"id\": \"toolu_find\", \"name\": \"find_tools\", \"input\": {\"query\": \"weather\"}},",
                ""
            )
        );
    }

    #[test]
    fn dropping_the_only_call_ends_the_turn_and_usage_is_replaced() {
        let edits = Edits {
            usage: Some(Usage {
                input: 300,
                output: 45,
            }),
            ..drop(&["toolu_find"])
        };
        let out = finish_reply(ONE_CALL, &edits).unwrap();
        assert_eq!(
            out,
            r#"{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Searching."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":300,"output_tokens":45}}"#
        );
    }

    #[test]
    fn rename_rewrites_name_and_input() {
        let edits = Edits {
            rename: vec![(
                "toolu_find".into(),
                "get_forecast".into(),
                r#"{"city":"Oslo","days":3}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_reply(TWO_CALLS, &edits).unwrap();
        let reply = read_reply(&out).unwrap();
        assert_eq!(reply.calls[0].id, "toolu_find");
        assert_eq!(reply.calls[0].name, "get_forecast");
        assert_eq!(reply.calls[0].arguments, r#"{"city":"Oslo","days":3}"#);
        assert_eq!(reply.calls[1].name, "get_weather");
        let bad = Edits {
            rename: vec![("toolu_find".into(), "x".into(), "[1]".into())],
            ..Edits::default()
        };
        assert_eq!(finish_reply(TWO_CALLS, &bad), Err(Problem::BadShape));
    }

    /// A stream: thinking with signature, text, then two calls whose input is split across many
    /// deltas, with pings in between.
    fn stream() -> Vec<Frame> {
        let events: &[(&str, &str)] = &[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Need the "}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"weather tool."}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"look."}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_find","name":"find_tools","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"wea"}}"#,
            ),
            ("ping", r#"{"type": "ping"}"#),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ther\"}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":2}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_weather","name":"get_weather","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":" \"Paris\"}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":3}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        events.iter().map(|(e, d)| Frame::named(e, *d)).collect()
    }

    /// A stream with text and one call without input.
    fn one_call_stream() -> Vec<Frame> {
        let events: &[(&str, &str)] = &[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Searching."}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_find","name":"find_tools","input":{}}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":100,"output_tokens":20}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ];
        events.iter().map(|(e, d)| Frame::named(e, *d)).collect()
    }

    #[test]
    fn rebuilds_the_streamed_turn() {
        let reply = read_stream(&stream()).unwrap();
        assert_eq!(
            reply.calls,
            [
                Call {
                    id: "toolu_find".into(),
                    name: "find_tools".into(),
                    arguments: r#"{"query": "weather"}"#.into()
                },
                Call {
                    id: "toolu_weather".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city": "Paris"}"#.into()
                },
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 472,
                output: 89
            })
        );
        assert_eq!(
            value(&reply.turn[0]),
            serde_json::json!({"role":"assistant","content":[
                {"type":"thinking","thinking":"Need the weather tool.","signature":"EqQBCgIYAhIM"},
                {"type":"text","text":"Let me look."},
                {"type":"tool_use","id":"toolu_find","name":"find_tools","input":{"query":"weather"}},
                {"type":"tool_use","id":"toolu_weather","name":"get_weather","input":{"city":"Paris"}}
            ]})
        );
        let one = read_stream(&one_call_stream()).unwrap();
        assert_eq!(one.calls[0].arguments, "{}");
        assert_eq!(
            one.usage,
            Some(Usage {
                input: 100,
                output: 20
            })
        );
    }

    #[test]
    fn bad_streams_are_errors() {
        assert_eq!(
            read_stream(&[Frame::data("{oops")]),
            Err(Problem::MalformedJson)
        );
        assert_eq!(
            read_stream(&[Frame::data(
                r#"{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}"#
            )]),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_stream(&[Frame::named(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            )]),
            Err(Problem::BadShape)
        );
        let mut broken = one_call_stream();
        broken.insert(
            5,
            Frame::data(r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}"#),
        );
        assert_eq!(read_stream(&broken), Err(Problem::MalformedJson));
        assert_eq!(
            finish_stream(&[Frame::data("[")], &Edits::default()),
            Err(Problem::MalformedJson)
        );
    }

    #[test]
    fn opening_waits_past_thinking() {
        let frames = stream();
        assert_eq!(opening(&frames[..1]), Opening::Undecided);
        assert_eq!(opening(&frames[..7]), Opening::Undecided);
        assert_eq!(opening(&frames[..8]), Opening::Answer);
        // Thinking, then straight to a call.
        let mut calls = frames[..7].to_vec();
        calls.push(frames[11].clone());
        assert_eq!(opening(&calls), Opening::Calls);
        assert_eq!(
            opening(&[Frame::data("garbage"), frames[11].clone()]),
            Opening::Calls
        );
        assert_eq!(
            opening(&[Frame::named(
                "error",
                r#"{"type":"error","error":{"type":"api_error"}}"#
            )]),
            Opening::Answer
        );
    }

    #[test]
    fn empty_edits_rewrite_the_stream_unchanged() {
        for frames in [stream(), one_call_stream()] {
            assert_eq!(
                finish_stream(&frames, &Edits::default()).unwrap(),
                write_all(&frames)
            );
        }
    }

    fn reread(text: &str) -> (Vec<Frame>, Reply) {
        let (frames, used) = crate::sse::frames(text);
        assert_eq!(used, text.len());
        let reply = read_stream(&frames).unwrap();
        (frames, reply)
    }

    #[test]
    fn dropping_a_streamed_call_renumbers_the_blocks_after_it() {
        let out = finish_stream(&stream(), &drop(&["toolu_find"])).unwrap();
        let (frames, reply) = reread(&out);
        assert_eq!(frames.len(), stream().len() - 5);
        assert!(!out.contains("find_tools") && !out.contains("query"));
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].id, "toolu_weather");
        assert_eq!(reply.calls[0].arguments, r#"{"city": "Paris"}"#);
        assert!(out.contains(r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_weather""#));
        assert!(out.contains(r#"{"type":"content_block_stop","index":2}"#));
        assert!(!out.contains(r#""index":3"#));
        assert!(out.contains(r#""stop_reason":"tool_use""#));
    }

    #[test]
    fn dropping_the_only_streamed_call_ends_the_turn() {
        let edits = Edits {
            usage: Some(Usage {
                input: 300,
                output: 45,
            }),
            ..drop(&["toolu_find"])
        };
        let out = finish_stream(&one_call_stream(), &edits).unwrap();
        let (frames, reply) = reread(&out);
        assert_eq!(frames.len(), 6);
        assert!(reply.calls.is_empty());
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 300,
                output: 45
            })
        );
        assert!(out.contains(r#""delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":300,"output_tokens":45}"#));
        assert!(out.contains(r#""usage":{"input_tokens":300,"output_tokens":1}"#));
    }

    #[test]
    fn renaming_a_streamed_call_writes_its_input_once() {
        let edits = Edits {
            rename: vec![(
                "toolu_find".into(),
                "get_forecast".into(),
                r#"{"city":"Oslo"}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_stream(&stream(), &edits).unwrap();
        let (frames, reply) = reread(&out);
        assert_eq!(frames.len(), stream().len() - 2);
        assert_eq!(
            reply.calls[0],
            Call {
                id: "toolu_find".into(),
                name: "get_forecast".into(),
                arguments: r#"{"city":"Oslo"}"#.into()
            }
        );
        assert_eq!(reply.calls[1].name, "get_weather");
        assert!(out.contains("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}\n\n"));
    }

    #[test]
    fn patches_apply_in_order_and_reject_overlaps() {
        let text = r#"{"a":1,"b":{}}"#;
        let b = find_path(text, &["b"]).unwrap();
        let patches = vec![
            set_member(text, b.clone(), "x", "true").unwrap(),
            set_member(text, 0..text.len(), "a", "2").unwrap(),
            set_member(text, 0..text.len(), "c", "null").unwrap(),
        ];
        assert_eq!(
            apply_patches(text, patches).unwrap(),
            r#"{"a":2,"b":{"x":true},"c":null}"#
        );
        assert_eq!(
            apply_patches(text, vec![(0..3, "x".into()), (2..4, "y".into())]),
            None
        );
        assert_eq!(replace_member(text, 0..text.len(), "z", "1"), None);
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::Anthropic.codec();
        let (out, reply) = refused(codec, TWO_CALLS, false, &["toolu_weather"]);
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(value(&out)["stop_reason"], "tool_use");
        assert_eq!(value(&out)["content"][3]["type"], "text");
        let (out, reply) = refused(codec, ONE_CALL, false, &["toolu_find"]);
        assert!(reply.calls.is_empty());
        assert_eq!(value(&out)["stop_reason"], "end_turn");
        // Streamed: a text block in the call's place, the blocks after it keep their index.
        let (out, reply) = refused(codec, &write_all(&stream()), true, &["toolu_find"]);
        assert_eq!(reply.calls.len(), 1);
        let starts: Vec<u64> = crate::search::sse::frames(&out)
            .0
            .iter()
            .filter(|f| f.data.contains("content_block_start"))
            .map(|f| value(&f.data)["index"].as_u64().unwrap())
            .collect();
        assert_eq!(starts, [0, 1, 2, 3]);
        let (out, reply) = refused(codec, &write_all(&one_call_stream()), true, &["toolu_find"]);
        assert!(reply.calls.is_empty());
        assert!(out.contains(r#""stop_reason":"end_turn""#), "{out}");
    }
}
