//! Bedrock `ConverseStream`, read and edited as frames: each event-stream message transcribed
//! with its `:event-type` as the frame's event and its payload as the data (`crate::sse`).
//! Events: `messageStart`, `contentBlockStart` (`start.toolUse{toolUseId,name}`; none for a
//! text block), `contentBlockDelta` (`delta.text`, `delta.toolUse.input` pieces of the input's
//! JSON text, `delta.reasoningContent`, a server tool's `delta.toolResult`),
//! `contentBlockStop`, `messageStop` (`stopReason`), `metadata` (`usage`); an exception's
//! frame is named `exception:<type>`.

use crate::dialects::shared::calls::{CallBlock, StreamedBlocks};
use crate::dialects::shared::splice::{json_string, parse_object, set_member, write_patched};
use crate::dialects::{Call, Edits, Frame, Opening, Problem, Reply, Usage};
use crate::json::find_path;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The frame name prefix of an exception message.
const EXCEPTION: &str = "exception:";

/// A content block being rebuilt from its events.
#[derive(Default)]
struct Block {
    /// `start.toolUse`: (toolUseId, name).
    tool_use: Option<(String, String)>,
    /// `start.toolResult` (a server tool's result), with its content pieces.
    tool_result: Option<Map<String, Value>>,
    result_content: Vec<Value>,
    text: Option<String>,
    input: String,
    reasoning: Option<String>,
    signature: Option<String>,
}

/// The string at `pointer` in `value`.
fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn push(slot: &mut Option<String>, piece: Option<&str>) {
    if let Some(piece) = piece {
        slot.get_or_insert_with(String::new).push_str(piece);
    }
}

/// The block index of an event.
fn index_of(event: &Value) -> Result<usize, Problem> {
    event
        .get("contentBlockIndex")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .ok_or(Problem::BadShape)
}

impl Block {
    fn start(start: &Value) -> Result<Block, Problem> {
        let mut block = Block::default();
        if let Some(tool_use) = start.get("toolUse") {
            let (Some(id), Some(name)) = (str_at(tool_use, "/toolUseId"), str_at(tool_use, "/name"))
            else {
                return Err(Problem::BadShape);
            };
            block.tool_use = Some((id.to_owned(), name.to_owned()));
        } else if let Some(Value::Object(result)) = start.get("toolResult") {
            block.tool_result = Some(result.clone());
        }
        Ok(block)
    }

    fn apply(&mut self, delta: &Value) {
        push(&mut self.text, str_at(delta, "/text"));
        if let Some(piece) = str_at(delta, "/toolUse/input") {
            self.input.push_str(piece);
        }
        push(&mut self.reasoning, str_at(delta, "/reasoningContent/text"));
        push(&mut self.signature, str_at(delta, "/reasoningContent/signature"));
        if let Some(Value::Array(pieces)) = delta.get("toolResult") {
            self.result_content.extend(pieces.iter().cloned());
        }
    }

    /// The block as the request format writes it, and the call it makes.
    fn finish(self) -> Result<(Value, Option<Call>), Problem> {
        if let Some((id, name)) = self.tool_use {
            let arguments = match self.input.trim() {
                "" => "{}".to_owned(),
                streamed => streamed.to_owned(),
            };
            let input: Value = serde_json::from_str(&arguments).map_err(|e| Problem::of(&e))?;
            let block = json!({"toolUse": {"toolUseId": id, "name": name, "input": input}});
            return Ok((block, Some(Call { id, name, arguments })));
        }
        if let Some(mut result) = self.tool_result {
            result.insert("content".into(), Value::Array(self.result_content));
            return Ok((json!({ "toolResult": result }), None));
        }
        if self.reasoning.is_some() || self.signature.is_some() {
            let mut text = Map::new();
            text.insert("text".into(), self.reasoning.unwrap_or_default().into());
            if let Some(signature) = self.signature {
                text.insert("signature".into(), signature.into());
            }
            return Ok((json!({"reasoningContent": {"reasoningText": text}}), None));
        }
        Ok((json!({ "text": self.text.unwrap_or_default() }), None))
    }
}

pub(crate) fn read_stream(frames: &[Frame]) -> Result<Reply, Problem> {
    let mut blocks: BTreeMap<usize, Block> = BTreeMap::new();
    let mut usage = None;
    for frame in frames {
        let kind = frame.event.as_deref().unwrap_or_default();
        // A failed stream is not a turn.
        if kind.starts_with(EXCEPTION) {
            return Err(Problem::BadShape);
        }
        let event: Value = parse_object(&frame.data)?;
        match kind {
            "contentBlockStart" => {
                let start = event.get("start").ok_or(Problem::BadShape)?;
                blocks.insert(index_of(&event)?, Block::start(start)?);
            }
            "contentBlockDelta" => {
                let delta = event.get("delta").ok_or(Problem::BadShape)?;
                // Text blocks have no start event.
                blocks.entry(index_of(&event)?).or_default().apply(delta);
            }
            "metadata" => {
                if let Some(tokens) = event.get("usage") {
                    let count = |key: &str| tokens.get(key).and_then(Value::as_u64).unwrap_or(0);
                    usage = Some(Usage {
                        input: count("inputTokens"),
                        output: count("outputTokens"),
                    });
                }
            }
            // messageStart, contentBlockStop, messageStop, and events added later.
            _ => {}
        }
    }
    let mut calls = Vec::new();
    let mut content = Vec::with_capacity(blocks.len());
    for block in blocks.into_values() {
        let (block, call) = block.finish()?;
        calls.extend(call);
        content.push(block);
    }
    Ok(Reply {
        calls,
        usage,
        turn: vec![json!({"role": "assistant", "content": content}).to_string()],
    })
}

pub(crate) fn opening(frames: &[Frame]) -> Opening {
    for frame in frames {
        let kind = frame.event.as_deref().unwrap_or_default();
        if kind.starts_with(EXCEPTION) {
            // Nothing to hold for: the client gets the exception as it is.
            return Opening::Answer;
        }
        let Ok(event) = serde_json::from_str::<Value>(&frame.data) else {
            continue;
        };
        match kind {
            "contentBlockStart" if event.pointer("/start/toolUse").is_some() => {
                return Opening::Calls;
            }
            "contentBlockDelta" if event.pointer("/delta/text").is_some() => {
                return Opening::Answer;
            }
            // Reasoning comes before whatever the model decides.
            _ => {}
        }
    }
    Opening::Undecided
}

/// The tool call an event starts: a `contentBlockStart` of a `toolUse` block.
pub(crate) fn calls_in_event(event: &Value) -> Vec<String> {
    str_at(event, "/start/toolUse/name")
        .map(|name| vec![name.to_owned()])
        .unwrap_or_default()
}

pub(crate) fn finish_stream(frames: &[Frame], edits: &Edits) -> Result<String, Problem> {
    let mut out = String::new();
    let mut blocks = StreamedBlocks::new(edits);
    for frame in frames {
        let kind = frame.event.as_deref().unwrap_or_default();
        if kind.starts_with(EXCEPTION) {
            frame.write(&mut out);
            continue;
        }
        let data = frame.data.as_str();
        let event: Value = parse_object(data)?;
        let index = match kind {
            "contentBlockStart" | "contentBlockDelta" | "contentBlockStop" => {
                Some(index_of(&event)?)
            }
            _ => None,
        };
        let mut patches = Vec::new();
        match (kind, index) {
            ("contentBlockStart", Some(index)) => {
                if let Some(id) = str_at(&event, "/start/toolUse/toolUseId") {
                    match blocks.call(index, id)? {
                        CallBlock::Dropped(text) => {
                            if let Some((at, text)) = text {
                                write_text_block(&mut out, at, text);
                            }
                            continue;
                        }
                        CallBlock::Renamed(name) => {
                            let object =
                                find_path(data, &["start", "toolUse"]).ok_or(Problem::BadShape)?;
                            patches.push(
                                set_member(data, object, "name", &json_string(name))
                                    .ok_or(Problem::BadShape)?,
                            );
                        }
                        CallBlock::Kept => {}
                    }
                }
            }
            // A renamed call's input is written whole before its stop event.
            ("contentBlockDelta", Some(index)) if blocks.skips_deltas(index) => continue,
            ("contentBlockStop", Some(index)) if blocks.dropped(index) => continue,
            ("contentBlockStop", Some(index)) => {
                if let Some(arguments) = blocks.renamed(index) {
                    let delta = json!({
                        "contentBlockIndex": blocks.index(index),
                        "delta": {"toolUse": {"input": arguments}},
                    });
                    Frame::named("contentBlockDelta", delta.to_string()).write(&mut out);
                }
            }
            // Every call refused: the turn ends.
            ("messageStop", _) if blocks.all_dropped() => {
                let reason = find_path(data, &["stopReason"]);
                if let Some(span) = reason.filter(|r| data.get(r.clone()) == Some(r#""tool_use""#))
                {
                    patches.push((span, r#""end_turn""#.to_owned()));
                }
            }
            ("metadata", _) => {
                if let (Some(usage), Some(object)) = (edits.usage, find_path(data, &["usage"])) {
                    for (key, count) in [
                        ("inputTokens", usage.input),
                        ("outputTokens", usage.output),
                        ("totalTokens", usage.input.saturating_add(usage.output)),
                    ] {
                        let patch = set_member(data, object.clone(), key, &count.to_string());
                        patches.push(patch.ok_or(Problem::BadShape)?);
                    }
                }
            }
            _ => {}
        }
        if let Some(index) = index {
            patches.extend(blocks.index_patch(data, "contentBlockIndex", index)?);
        }
        write_patched(&mut out, frame, patches)?;
    }
    Ok(out)
}

/// A text block holding `text` at `index` (Bedrock's text blocks have no start event): its
/// delta and its stop.
fn write_text_block(out: &mut String, index: usize, text: &str) {
    let delta = json!({"contentBlockIndex": index, "delta": {"text": text}});
    Frame::named("contentBlockDelta", delta.to_string()).write(out);
    let stop = json!({ "contentBlockIndex": index });
    Frame::named("contentBlockStop", stop.to_string()).write(out);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::dialects::shared::testing::{REFUSAL, refused};
    use crate::sse::Framing;

    /// The recorded streams, transcribed: (name, text).
    fn recorded() -> Vec<(String, String)> {
        crate::sse::eventstream::tests::recorded()
            .into_iter()
            .map(|(name, bytes, _)| (name, Framing::EventStream.wire_text(bytes).unwrap()))
            .collect()
    }

    fn frames(text: &str) -> Vec<Frame> {
        Framing::EventStream.frames(text).0
    }

    #[test]
    fn reads_the_recorded_streams() {
        let names = |text: &str| -> Vec<String> {
            read_stream(&frames(text))
                .unwrap()
                .calls
                .into_iter()
                .map(|c| c.name)
                .collect()
        };
        let streams: BTreeMap<String, String> = recorded().into_iter().collect();
        let calls = &streams["text-then-tool-use-stream.response.eventstream"];
        let reply = read_stream(&frames(calls)).unwrap();
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].name, "get_temperature");
        assert_eq!(reply.calls[0].id, "tooluse_lAG_zP8QRHmSYOwZzzaCqA");
        assert_eq!(reply.calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(reply.usage, Some(Usage { input: 471, output: 91 }));
        let turn: Value = serde_json::from_str(&reply.turn[0]).unwrap();
        assert!(turn["content"][0]["text"].as_str().unwrap().starts_with("<thinking>"));
        assert_eq!(turn["content"][1]["toolUse"]["input"]["city"], "Paris");
        assert_eq!(opening(&frames(calls)), Opening::Answer);
        let server = &streams["server-tool-then-tool-use-stream.response.eventstream"];
        assert_eq!(names(server), ["nova_code_interpreter", "final_result"]);
        assert_eq!(opening(&frames(server)), Opening::Calls);
        let text = &streams["text-stream-after-tool-result.response.eventstream"];
        assert!(names(text).is_empty());
        let started: Vec<Vec<String>> = frames(server)
            .iter()
            .map(|f| calls_in_event(&serde_json::from_str(&f.data).unwrap()))
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(started, [["nova_code_interpreter"], ["final_result"]]);
    }

    #[test]
    fn empty_edits_keep_every_event() {
        for (name, text) in recorded() {
            assert_eq!(finish_stream(&frames(&text), &Edits::default()).unwrap(), text, "{name}");
        }
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        let codec = crate::dialects::Dialect::Bedrock.codec();
        let streams: BTreeMap<String, String> = recorded().into_iter().collect();
        let calls = &streams["text-then-tool-use-stream.response.eventstream"];
        let (out, reply) = refused(codec, calls, true, &["tooluse_lAG_zP8QRHmSYOwZzzaCqA"]);
        assert!(reply.calls.is_empty());
        assert!(out.contains(r#""stopReason":"end_turn""#), "{out}");
        let turn: Value = serde_json::from_str(&reply.turn[0]).unwrap();
        assert_eq!(turn["content"][1]["text"], REFUSAL);
        // The first of two calls: the second moves up past the refusal's block.
        let server = &streams["server-tool-then-tool-use-stream.response.eventstream"];
        let (out, reply) = refused(codec, server, true, &["tooluse_VQNZJRUFMoqZzszVsRd4og"]);
        assert_eq!(reply.calls.len(), 1);
        assert!(out.contains(r#""stopReason": "tool_use""#) || out.contains("tool_use"));
        let turn: Value = serde_json::from_str(&reply.turn[0]).unwrap();
        assert_eq!(turn["content"][0]["text"], REFUSAL);
        assert_eq!(turn["content"][2]["toolUse"]["name"], "final_result");
        // Every frame is still a message Bedrock's SDKs read.
        assert!(Framing::EventStream.to_wire(&out).is_some());
    }

    #[test]
    fn rename_rewrites_name_and_input_and_usage_is_replaced() {
        let streams: BTreeMap<String, String> = recorded().into_iter().collect();
        let calls = &streams["text-then-tool-use-stream.response.eventstream"];
        let edits = Edits {
            rename: vec![(
                "tooluse_lAG_zP8QRHmSYOwZzzaCqA".into(),
                "get_forecast".into(),
                r#"{"city":"Oslo"}"#.into(),
            )],
            usage: Some(Usage { input: 1, output: 2 }),
            ..Edits::default()
        };
        let out = finish_stream(&frames(calls), &edits).unwrap();
        let reply = read_stream(&frames(&out)).unwrap();
        assert_eq!(reply.calls[0].name, "get_forecast");
        assert_eq!(reply.calls[0].arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(reply.usage, Some(Usage { input: 1, output: 2 }));
        assert!(out.contains(r#""totalTokens":3"#), "{out}");
    }

    #[test]
    fn exceptions_are_no_turn_but_pass() {
        let frames = [
            Frame::named("messageStart", r#"{"role":"assistant"}"#),
            Frame::named("exception:throttlingException", r#"{"message":"slow down"}"#),
        ];
        assert_eq!(read_stream(&frames), Err(Problem::BadShape));
        assert_eq!(opening(&frames), Opening::Answer);
        let out = finish_stream(&frames, &Edits::default()).unwrap();
        assert_eq!(out, crate::sse::write_all(&frames));
        let bad = [Frame::named("contentBlockStart", r#"{"start":{"toolUse":{}}}"#)];
        assert_eq!(read_stream(&bad), Err(Problem::BadShape));
    }
}
