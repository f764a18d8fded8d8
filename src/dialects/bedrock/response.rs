//! Bedrock Converse, response side, whole answers (`converse-stream`'s events: `stream.rs`):
//! `output.message.content[]` (`text`, `toolUse{toolUseId,name,input}`, `reasoningContent`),
//! `stopReason`, `usage`.

use crate::dialects::shared::calls::{CallShape, edit_turn};
use crate::dialects::{Call, Edits, Reply, ToolResult, Usage};
use crate::dialects::shared::splice::{apply_patches, json_string, parse_object, set_member};
use crate::dialects::Problem;
use crate::json::{Str, array_items, find_path};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Where a content block keeps its call: `toolUse{name,input}`.
const TOOL_USE: CallShape = CallShape {
    object: &["toolUse"],
    arguments: "input",
};

/// A Converse response, borrowed.
#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow)]
    output: Output<'a>,
    #[serde(borrow, default, rename = "stopReason")]
    stop_reason: Option<&'a RawValue>,
    #[serde(default)]
    usage: Option<TokenUsage>,
}

#[derive(Deserialize)]
struct Output<'a> {
    #[serde(borrow)]
    message: &'a RawValue,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: &'a RawValue,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "toolUse")]
    tool_use: Option<ToolUse<'a>>,
}

#[derive(Deserialize)]
struct ToolUse<'a> {
    #[serde(borrow, default, rename = "toolUseId")]
    tool_use_id: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct TokenUsage {
    #[serde(default, rename = "inputTokens")]
    input_tokens: Option<u64>,
    #[serde(default, rename = "outputTokens")]
    output_tokens: Option<u64>,
}

pub(crate) fn tool_entry(name: &str, description: &str, parameters: &Value) -> String {
    format!(
        r#"{{"toolSpec":{{"name":{},"description":{},"inputSchema":{{"json":{parameters}}}}}}}"#,
        json_string(name),
        json_string(description),
    )
}

/// The content array of the response's message, borrowed from the body.
fn message_of<'a>(response: &Response<'a>) -> Result<&'a RawValue, Problem> {
    let message: Message = parse_object(response.output.message.get())?;
    Ok(message.content)
}

pub(crate) fn read_reply(body: &str) -> Result<Reply, Problem> {
    let response: Response = parse_object(body)?;
    let content = message_of(&response)?;
    let mut calls = Vec::new();
    for raw in array_items(content).ok_or(Problem::BadShape)? {
        let block: Block = parse_object(raw.get()).map_err(|_| Problem::BadShape)?;
        let Some(tool_use) = block.tool_use else {
            continue;
        };
        let (Some(id), Some(name)) = (tool_use.tool_use_id, tool_use.name) else {
            return Err(Problem::BadShape);
        };
        calls.push(Call {
            id: id.into_owned(),
            name: name.into_owned(),
            arguments: tool_use.input.map_or("{}", RawValue::get).to_owned(),
        });
    }
    Ok(Reply {
        calls,
        usage: response.usage.map(|u| Usage {
            input: u.input_tokens.unwrap_or(0),
            output: u.output_tokens.unwrap_or(0),
        }),
        // The message's own bytes: reasoning blocks go back with their signatures untouched.
        turn: vec![response.output.message.get().to_owned()],
    })
}

pub(crate) fn tool_results(results: &[ToolResult]) -> Vec<String> {
    if results.is_empty() {
        return Vec::new();
    }
    let blocks: Vec<String> = results
        .iter()
        .map(|result| {
            let status = if result.is_error {
                r#","status":"error""#
            } else {
                ""
            };
            format!(
                r#"{{"toolResult":{{"toolUseId":{},"content":[{}]{status}}}}}"#,
                json_string(&result.call.id),
                result_content(&result.content),
            )
        })
        .collect();
    vec![format!(
        r#"{{"role":"user","content":[{}]}}"#,
        blocks.join(",")
    )]
}

/// One tool-result content block: `{"json":…}` for a JSON object, `{"text":…}` for anything
/// else (the `json` block takes a document, and the gateway's results are objects).
fn result_content(content: &str) -> String {
    match serde_json::from_str::<&RawValue>(content) {
        Ok(raw) if raw.get().starts_with('{') => format!(r#"{{"json":{}}}"#, raw.get()),
        _ => format!(r#"{{"text":{}}}"#, json_string(content)),
    }
}

/// The `toolUseId` of a `toolUse` block; `None` for other blocks.
fn tool_use_id(block: &str) -> Result<Option<String>, Problem> {
    let block: Block = parse_object(block).map_err(|_| Problem::BadShape)?;
    Ok(block
        .tool_use
        .map(|t| t.tool_use_id.unwrap_or_default().into_owned()))
}

pub(crate) fn finish_reply(body: &str, edits: &Edits) -> Result<String, Problem> {
    let response: Response = parse_object(body)?;
    let content = message_of(&response)?;
    let block = edits
        .text
        .as_deref()
        .map(|text| format!(r#"{{"text":{}}}"#, json_string(text)));
    let mut patches = edit_turn(
        body,
        content,
        (&TOOL_USE, tool_use_id),
        edits,
        block.as_deref(),
        response.stop_reason,
    )?;
    if let (Some(usage), Some(object)) = (edits.usage, find_path(body, &["usage"])) {
        for (key, count) in [
            ("inputTokens", usage.input),
            ("outputTokens", usage.output),
            ("totalTokens", usage.input + usage.output),
        ] {
            let patch = set_member(body, object.clone(), key, &count.to_string());
            patches.push(patch.ok_or(Problem::BadShape)?);
        }
    }
    apply_patches(body, patches).ok_or(Problem::BadShape)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reasoning with a signature, text and two parallel calls, pretty-printed.
    const TWO_CALLS: &str = r#"{
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"reasoningContent": {"reasoningText": {"text": "Need the weather tool.", "signature": "ErcBCkgIAxAC"}}},
                {"text": "Let me check."},
                {"toolUse": {"toolUseId": "tooluse_find", "name": "find_tools", "input": {"query": "weather"}}},
                {"toolUse": {"toolUseId": "tooluse_weather", "name": "get_weather", "input": {"city": "Paris"}}}
            ]
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 412, "outputTokens": 96, "totalTokens": 508},
    "metrics": {"latencyMs": 1820}
}"#;

    const ONE_CALL: &str = r#"{"output":{"message":{"role":"assistant","content":[{"text":"Searching."},{"toolUse":{"toolUseId":"tooluse_find","name":"find_tools","input":{"query":"weather"}}}]}},"stopReason":"tool_use","usage":{"inputTokens":100,"outputTokens":20,"totalTokens":120},"metrics":{"latencyMs":900}}"#;

    const TEXT: &str = r#"{"output":{"message":{"role":"assistant","content":[{"text":"Paris is sunny."}]}},"stopReason":"end_turn","usage":{"inputTokens":50,"outputTokens":6,"totalTokens":56},"metrics":{"latencyMs":300}}"#;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn drop(ids: &[&str]) -> Edits {
        Edits {
            drop: ids.iter().map(|s| s.to_string()).collect(),
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
    fn tool_entry_is_a_tool_spec() {
        let schema = serde_json::json!({"type":"object","properties":{"limit":{"type":"integer","minimum":1,"maximum":20}}});
        assert_eq!(
            value(&tool_entry("find_tools", "Find tools.", &schema)),
            serde_json::json!({"toolSpec":{"name":"find_tools","description":"Find tools.","inputSchema":{"json":schema}}})
        );
    }

    #[test]
    fn reads_calls_usage_and_the_message_bytes() {
        let reply = read_reply(TWO_CALLS).unwrap();
        assert_eq!(
            reply.calls,
            [
                call("tooluse_find", "find_tools", r#"{"query": "weather"}"#),
                call("tooluse_weather", "get_weather", r#"{"city": "Paris"}"#),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 412,
                output: 96
            })
        );
        let message = &TWO_CALLS[find_path(TWO_CALLS, &["output", "message"]).unwrap()];
        assert_eq!(reply.turn, [message]);
        assert!(reply.turn[0].contains(r#""signature": "ErcBCkgIAxAC""#));
        assert!(read_reply(TEXT).unwrap().calls.is_empty());
    }

    #[test]
    fn bad_replies_are_errors() {
        assert_eq!(read_reply("{\"output\":"), Err(Problem::MalformedJson));
        assert_eq!(read_reply("[]"), Err(Problem::BadShape));
        assert_eq!(read_reply(r#"{"output":{}}"#), Err(Problem::BadShape));
        assert_eq!(
            read_reply(r#"{"output":{"message":{"content":{}}}}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            read_reply(r#"{"output":{"message":{"content":[{"toolUse":{"name":"x"}}]}}}"#),
            Err(Problem::BadShape)
        );
        assert_eq!(
            finish_reply("", &Edits::default()),
            Err(Problem::MalformedJson)
        );
        assert_eq!(
            finish_reply(r#"{"output":[]}"#, &drop(&["x"])),
            Err(Problem::BadShape)
        );
    }

    #[test]
    fn tool_results_are_one_user_message() {
        let items = tool_results(&[
            ToolResult {
                call: call("tooluse_1", "find_tools", "{}"),
                content: r#"{"tools":[{"name":"get_weather"}]}"#.into(),
                is_error: false,
            },
            ToolResult {
                call: call("tooluse_2", "find_tools", "{}"),
                content: r#"{"error":"no query"}"#.into(),
                is_error: true,
            },
        ]);
        assert_eq!(items.len(), 1);
        assert_eq!(
            value(&items[0]),
            serde_json::json!({"role":"user","content":[
                {"toolResult":{"toolUseId":"tooluse_1","content":[{"json":{"tools":[{"name":"get_weather"}]}}]}},
                {"toolResult":{"toolUseId":"tooluse_2","content":[{"json":{"error":"no query"}}],"status":"error"}}
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
    fn dropping_one_of_two_calls() {
        let out = finish_reply(TWO_CALLS, &drop(&["tooluse_find"])).unwrap();
        assert_eq!(
            out,
            TWO_CALLS.replace(
                "\n                {\"toolUse\": {\"toolUseId\": \"tooluse_find\", \"name\": \"find_tools\", \"input\": {\"query\": \"weather\"}}},",
                ""
            )
        );
        assert_eq!(read_reply(&out).unwrap().calls.len(), 1);
    }

    #[test]
    fn dropping_the_only_call_ends_the_turn_and_usage_is_replaced() {
        let edits = Edits {
            usage: Some(Usage {
                input: 300,
                output: 45,
            }),
            ..drop(&["tooluse_find"])
        };
        assert_eq!(
            finish_reply(ONE_CALL, &edits).unwrap(),
            r#"{"output":{"message":{"role":"assistant","content":[{"text":"Searching."}]}},"stopReason":"end_turn","usage":{"inputTokens":300,"outputTokens":45,"totalTokens":345},"metrics":{"latencyMs":900}}"#
        );
    }

    #[test]
    fn rename_rewrites_name_and_input() {
        let edits = Edits {
            rename: vec![(
                "tooluse_find".into(),
                "get_forecast".into(),
                r#"{"city":"Oslo"}"#.into(),
            )],
            ..Edits::default()
        };
        let out = finish_reply(ONE_CALL, &edits).unwrap();
        assert_eq!(
            out,
            ONE_CALL.replace(
                r#""name":"find_tools","input":{"query":"weather"}"#,
                r#""name":"get_forecast","input":{"city":"Oslo"}"#
            )
        );
        assert_eq!(value(&out)["stopReason"], "tool_use");
        let bad = Edits {
            rename: vec![("tooluse_find".into(), "x".into(), "not json".into())],
            ..Edits::default()
        };
        assert_eq!(finish_reply(ONE_CALL, &bad), Err(Problem::BadShape));
    }

    #[test]
    fn a_refusal_takes_the_place_of_dropped_calls() {
        use crate::dialects::shared::testing::refused;
        let codec = crate::dialects::Dialect::Bedrock.codec();
        // Beside a call, the turn goes on; alone, it ends.
        for (drop, left, reason) in [
            (&["tooluse_weather"][..], 1, "tool_use"),
            (&["tooluse_weather", "tooluse_find"][..], 0, "end_turn"),
        ] {
            let (out, reply) = refused(codec, TWO_CALLS, false, drop);
            let v = value(&out);
            assert_eq!((reply.calls.len(), v["stopReason"].as_str()), (left, Some(reason)));
            // In the place of the first call dropped.
            let content = &v["output"]["message"]["content"];
            let at = 4 - drop.len();
            assert_eq!(content[at]["text"], crate::dialects::shared::testing::REFUSAL);
        }
    }
}
