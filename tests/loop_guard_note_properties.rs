//! The loop guard's guidance note, as a property, in every dialect: for any agent history
//! (calls of a few tools with a few arguments, results as strings, arrays of parts or without
//! content, written compactly or pretty), the body that goes upstream is JSON, and it is the
//! client's body but for the tools array and, for each evicted tool, the note on the result
//! of its latest call, written as that dialect's own content.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolsift::config::Config;
use toolsift::dialects::Dialect;
use toolsift::pipeline::Engine;

const TOOLS: [&str; 3] = ["weather", "news", "stocks"];
const NOTE: &str = "stop {tool} \"now\"\nplease";

/// One result's content, in the forms the dialects take.
#[derive(Debug, Clone)]
enum Content {
    Text(String),
    Parts(String),
    /// No content at all (Anthropic), or a response object without `output` (Gemini).
    Absent,
}

/// One model turn: its calls (tool, argument), each answered, in order, with a content.
type Round = Vec<(usize, u8, Content)>;

fn content() -> impl Strategy<Value = Content> {
    let text = "[a-z \"\\\\é\n]{0,8}";
    prop_oneof![
        text.prop_map(Content::Text),
        text.prop_map(Content::Parts),
        Just(Content::Absent),
    ]
}

fn rounds() -> impl Strategy<Value = Vec<Round>> {
    let call = (0..2usize, 0..2u8, content());
    prop::collection::vec(prop::collection::vec(call, 1..3), 1..5)
}

/// The body of `dialect` for `rounds`, and for each call (in order) the JSON pointer of its
/// result's content holder and the content written.
fn body(dialect: Dialect, rounds: &[Round]) -> (Value, Vec<(usize, String, Content)>) {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|n| {
            let schema = json!({"type": "object", "properties": {"x": {"type": "integer"}}});
            match dialect {
                Dialect::OpenaiChat | Dialect::Ollama => json!({"type": "function",
                    "function": {"name": n, "description": format!("Get {n}"), "parameters": schema}}),
                Dialect::OpenaiResponses => json!({"type": "function", "name": n,
                    "description": format!("Get {n}"), "parameters": schema}),
                Dialect::Anthropic => json!({"name": n, "description": format!("Get {n}"),
                    "input_schema": schema}),
                Dialect::Gemini => json!({"name": n, "description": format!("Get {n}"),
                    "parameters": schema}),
                Dialect::Bedrock => json!({"toolSpec": {"name": n,
                    "description": format!("Get {n}"), "inputSchema": {"json": schema}}}),
            }
        })
        .collect();
    let question = "what is new";
    let mut messages: Vec<Value> = Vec::new();
    let mut results = Vec::new();
    let conversation_key = match dialect {
        Dialect::OpenaiResponses => "input",
        Dialect::Gemini => "contents",
        _ => "messages",
    };
    messages.push(match dialect {
        Dialect::OpenaiResponses => json!({"role": "user", "content": question}),
        Dialect::Gemini => json!({"role": "user", "parts": [{"text": question}]}),
        Dialect::Bedrock => json!({"role": "user", "content": [{"text": question}]}),
        _ => json!({"role": "user", "content": question}),
    });
    let mut n = 0;
    for round in rounds {
        let ids: Vec<String> = round
            .iter()
            .map(|_| {
                n += 1;
                format!("call_{n}")
            })
            .collect();
        let args = |x: u8| json!({"x": x});
        // The calls.
        match dialect {
            Dialect::OpenaiChat => messages.push(json!({"role": "assistant", "content": null,
                "tool_calls": round.iter().zip(&ids).map(|((t, x, _), id)| json!({"id": id,
                    "type": "function", "function": {"name": TOOLS[*t], "arguments": args(*x).to_string()}}))
                    .collect::<Vec<_>>()})),
            Dialect::Ollama => messages.push(json!({"role": "assistant", "content": "",
                "tool_calls": round.iter().map(|(t, x, _)| json!({"function": {"name": TOOLS[*t],
                    "arguments": args(*x)}})).collect::<Vec<_>>()})),
            Dialect::OpenaiResponses => {
                for ((t, x, _), id) in round.iter().zip(&ids) {
                    messages.push(json!({"type": "function_call", "call_id": id,
                        "name": TOOLS[*t], "arguments": args(*x).to_string()}));
                }
            }
            Dialect::Anthropic => messages.push(json!({"role": "assistant",
                "content": round.iter().zip(&ids).map(|((t, x, _), id)| json!({"type": "tool_use",
                    "id": id, "name": TOOLS[*t], "input": args(*x)})).collect::<Vec<_>>()})),
            Dialect::Gemini => messages.push(json!({"role": "model",
                "parts": round.iter().map(|(t, x, _)| json!({"functionCall": {"name": TOOLS[*t],
                    "args": args(*x)}})).collect::<Vec<_>>()})),
            Dialect::Bedrock => messages.push(json!({"role": "assistant",
                "content": round.iter().zip(&ids).map(|((t, x, _), id)| json!({"toolUse": {
                    "toolUseId": id, "name": TOOLS[*t], "input": args(*x)}})).collect::<Vec<_>>()})),
        }
        // The results, each content in a form the dialect takes.
        let mut parts = Vec::new();
        for ((t, _, content), id) in round.iter().zip(&ids) {
            let content = match (dialect, content) {
                (Dialect::Ollama, Content::Parts(s) | Content::Text(s)) => Content::Text(s.clone()),
                (
                    Dialect::Ollama | Dialect::OpenaiChat | Dialect::OpenaiResponses,
                    Content::Absent,
                ) => Content::Text(String::new()),
                (Dialect::Bedrock, Content::Text(s)) => Content::Parts(s.clone()),
                (Dialect::Bedrock, Content::Absent) => Content::Parts(String::new()),
                (_, c) => c.clone(),
            };
            let text_part = |s: &str| match dialect {
                Dialect::OpenaiResponses => json!({"type": "input_text", "text": s}),
                Dialect::Bedrock => json!({"text": s}),
                _ => json!({"type": "text", "text": s}),
            };
            let value = match &content {
                Content::Text(s) => Some(json!(s)),
                Content::Parts(s) => Some(json!([text_part(s)])),
                Content::Absent => None,
            };
            let at = messages.len();
            let (holder, message) = match dialect {
                Dialect::OpenaiChat => (
                    format!("/{at}"),
                    json!({"role": "tool", "tool_call_id": id, "content": value}),
                ),
                Dialect::Ollama => (format!("/{at}"), json!({"role": "tool", "content": value})),
                Dialect::OpenaiResponses => (
                    format!("/{at}"),
                    json!({"type": "function_call_output",
                    "call_id": id, "output": value}),
                ),
                Dialect::Anthropic => {
                    let mut block = json!({"type": "tool_result", "tool_use_id": id});
                    if let Some(v) = value {
                        block["content"] = v;
                    }
                    parts.push(block);
                    (format!("/{at}/content/{}", parts.len() - 1), Value::Null)
                }
                Dialect::Gemini => {
                    let response = match &content {
                        Content::Text(s) => json!({"output": s}),
                        Content::Parts(s) => json!({"items": [s]}),
                        Content::Absent => json!({}),
                    };
                    parts.push(
                        json!({"functionResponse": {"name": TOOLS[*t], "response": response}}),
                    );
                    (
                        format!("/{at}/parts/{}/functionResponse/response", parts.len() - 1),
                        Value::Null,
                    )
                }
                Dialect::Bedrock => {
                    parts.push(json!({"toolResult": {"toolUseId": id, "content": value}}));
                    (
                        format!("/{at}/content/{}/toolResult", parts.len() - 1),
                        Value::Null,
                    )
                }
            };
            if !message.is_null() {
                messages.push(message);
            }
            results.push((*t, holder, content));
        }
        match dialect {
            Dialect::Anthropic => messages.push(json!({"role": "user", "content": parts})),
            Dialect::Gemini => messages.push(json!({"role": "user", "parts": parts})),
            Dialect::Bedrock => messages.push(json!({"role": "user", "content": parts})),
            _ => {}
        }
    }
    let mut body = json!({"model": "m", conversation_key: messages});
    match dialect {
        Dialect::Gemini => body["tools"] = json!([{"functionDeclarations": tools}]),
        Dialect::Bedrock => body["toolConfig"] = json!({"tools": tools}),
        _ => body["tools"] = json!(tools),
    }
    let results = results
        .into_iter()
        .map(|(t, holder, c)| (t, format!("/{conversation_key}{holder}"), c))
        .collect();
    (body, results)
}

/// `body` with the note on the result holder at `pointer`, as `dialect` writes it.
fn with_note(dialect: Dialect, body: &mut Value, pointer: &str, content: &Content, note: &str) {
    let holder = body.pointer_mut(pointer).unwrap();
    let key = match dialect {
        Dialect::OpenaiResponses => "output",
        _ => "content",
    };
    match (dialect, content) {
        (Dialect::Gemini, Content::Text(s)) => {
            holder["output"] = json!(if s.is_empty() {
                note.to_owned()
            } else {
                format!("{s}\n\n{note}")
            })
        }
        (Dialect::Gemini, _) => holder["guidance"] = json!(note),
        (_, Content::Text(s)) => {
            holder[key] = json!(if s.is_empty() {
                note.to_owned()
            } else {
                format!("{s}\n\n{note}")
            })
        }
        (_, Content::Parts(_)) => {
            let part = match dialect {
                Dialect::OpenaiResponses => json!({"type": "input_text", "text": note}),
                Dialect::Bedrock => json!({"text": note}),
                _ => json!({"type": "text", "text": note}),
            };
            holder[key].as_array_mut().unwrap().push(part);
        }
        (_, Content::Absent) => holder[key] = json!(note),
    }
}

fn tools_of(dialect: Dialect, body: &mut Value) -> &mut Value {
    match dialect {
        Dialect::Bedrock => &mut body["toolConfig"]["tools"],
        _ => &mut body["tools"],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn only_the_latest_result_of_an_evicted_tool_changes(
        dialect in prop::sample::select(Dialect::ALL.to_vec()),
        rounds in rounds(),
        pretty in any::<bool>(),
    ) {
        let config = serde_json::json!({"top_k": 1, "min_tools": 0,
            "loop_guard": {"window": 20, "note": {"text": NOTE}}}).to_string();
        let mut engine = Engine::new(Config::from_json(config.as_bytes()).unwrap());
        let (value, results) = body(dialect, &rounds);
        let text = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            value.to_string()
        };
        let analysis = engine.analyse(dialect, &text).unwrap();
        let Some(out) = analysis.rewrite(&text) else {
            prop_assert!(analysis.evicted.is_empty());
            return Ok(());
        };
        let mut sent: Value = serde_json::from_str(&out).unwrap();
        // Every evicted tool's latest result takes the note here: each form is one its
        // dialect accepts.
        let noted: Vec<&str> = analysis.notes.iter().map(|n| n.tool.as_str()).collect();
        prop_assert_eq!(&noted, &analysis.evicted);
        let mut expected = value.clone();
        for tool in &analysis.evicted {
            let t = TOOLS.iter().position(|n| n == tool).unwrap();
            let (_, pointer, content) = results.iter().rev().find(|(r, _, _)| *r == t).unwrap();
            let note = NOTE.replace("{tool}", tool);
            with_note(dialect, &mut expected, pointer, content, &note);
        }
        *tools_of(dialect, &mut expected) = Value::Null;
        *tools_of(dialect, &mut sent) = Value::Null;
        prop_assert_eq!(sent, expected, "{}", out);
    }
}
