//! What the tests of LLM traffic share: a client request of each dialect, what the demo
//! upstream's scripted model received, and the calls a response makes, read as a client
//! reads them.

use super::{Gateway, Response, http, tools_for};
use serde_json::{Value, json};

/// The question every dialect's request asks.
pub const QUESTION: &str = "What is the current weather in Paris?";

/// A client request of `dialect` asking `QUESTION` with the 80 fixture tools.
pub fn request(dialect: &str, stream: bool) -> (String, Value) {
    let tools = tools_for(dialect);
    match dialect {
        "openai_chat" => (
            "/v1/chat/completions".into(),
            json!({"model": "gpt-4o", "stream": stream, "stream_options": {"include_usage": true},
                   "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
                   "tools": tools}),
        ),
        "openai_responses" => (
            "/v1/responses".into(),
            json!({"model": "gpt-4o", "stream": stream, "input": QUESTION, "tools": tools}),
        ),
        "anthropic" => (
            "/v1/messages".into(),
            json!({"model": "claude-sonnet-4-5", "max_tokens": 512, "stream": stream,
                   "messages": [{"role": "user", "content": QUESTION}], "tools": tools}),
        ),
        "gemini" => (
            if stream {
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse".into()
            } else {
                "/v1beta/models/gemini-2.5-flash:generateContent".into()
            },
            json!({"contents": [{"role": "user", "parts": [{"text": QUESTION}]}], "tools": tools}),
        ),
        "bedrock" => (
            "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse".into(),
            json!({"messages": [{"role": "user", "content": [{"text": QUESTION}]}],
                   "toolConfig": {"tools": tools}}),
        ),
        // Ollama streams unless told not to: a streamed request leaves `stream` out.
        "ollama" => {
            let mut body = json!({"model": "llama3.2",
                   "messages": [{"role": "user", "content": QUESTION}], "tools": tools});
            if !stream {
                body["stream"] = json!(false);
            }
            ("/api/chat".into(), body)
        }
        other => panic!("{other}"),
    }
}

/// `body` (a request of `dialect`) with the agent's turns after the question: each of
/// `calls` (a tool's name and its arguments) made by the model, one a turn, and answered by
/// the client with "sunny".
pub fn with_calls(dialect: &str, mut body: Value, calls: &[(&str, Value)]) -> Value {
    for (i, (tool, args)) in calls.iter().enumerate() {
        let id = format!("call_{i}");
        // OpenAI sends arguments as a string of JSON; the writer's own spacing is kept.
        let text = format!(" {} ", args);
        match dialect {
            "openai_chat" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": tool, "arguments": text}}]}));
                m.push(json!({"role": "tool", "tool_call_id": id, "content": "sunny"}));
            }
            "openai_responses" => {
                if body["input"].is_string() {
                    body["input"] = json!([{"role": "user", "content": body["input"].clone()}]);
                }
                let m = body["input"].as_array_mut().unwrap();
                m.push(json!({"type": "function_call", "call_id": id, "name": tool, "arguments": text}));
                m.push(json!({"type": "function_call_output", "call_id": id, "output": "sunny"}));
            }
            "anthropic" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": tool, "input": args}]}));
                m.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": "sunny"}]}));
            }
            "gemini" => {
                let m = body["contents"].as_array_mut().unwrap();
                m.push(json!({"role": "model", "parts": [{"functionCall": {"name": tool, "args": args}}]}));
                m.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": tool, "response": {"output": "sunny"}}}]}));
            }
            "bedrock" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": id, "name": tool, "input": args}}]}));
                m.push(json!({"role": "user", "content": [
                    {"toolResult": {"toolUseId": id, "content": [{"text": "sunny"}]}}]}));
            }
            "ollama" => {
                let m = body["messages"].as_array_mut().unwrap();
                m.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": tool, "arguments": args}}]}));
                m.push(json!({"role": "tool", "content": "sunny"}));
            }
            other => panic!("{other}"),
        }
    }
    body
}

/// What the upstream received, in order.
pub fn upstream_log(gw: &Gateway) -> Vec<Value> {
    let r = http(gw.upstream.port, "GET", "/scripted/log", &[], b"");
    serde_json::from_slice::<Value>(&r.body)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Function tool names of a request body of `dialect`, in order.
pub fn tool_names(dialect: &str, body: &Value) -> Vec<String> {
    let name = |t: &Value| -> Option<String> {
        let n = t
            .get("function")
            .and_then(|f| f.get("name"))
            .or_else(|| t.get("toolSpec").and_then(|s| s.get("name")))
            .or_else(|| t.get("name"))?;
        Some(n.as_str()?.to_owned())
    };
    match dialect {
        "gemini" => body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| {
                t["functionDeclarations"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|d| name(&d))
            .collect(),
        "bedrock" => body["toolConfig"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(name)
            .collect(),
        _ => body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(name)
            .collect(),
    }
}

/// Names of the tools the response (whole or streamed) calls, read the way a client would.
pub fn called(dialect: &str, r: &Response) -> Vec<String> {
    let text = r.text();
    let mut names = Vec::new();
    let mut scan = |v: &Value| collect_calls(dialect, v, &mut names);
    let binary = r
        .header("content-type")
        .is_some_and(|t| t.contains(toolsift::sse::eventstream::CONTENT_TYPE));
    if binary {
        // Bedrock's converse-stream: whole messages, both CRCs valid.
        let (frames, used) = toolsift::sse::eventstream::frames(&r.body)
            .unwrap_or_else(|| panic!("not an event stream: {text}"));
        assert_eq!(used, r.body.len(), "the stream ends inside a message");
        for frame in frames {
            if let Ok(v) = serde_json::from_str::<Value>(&frame.data) {
                scan(&v);
            }
        }
    } else if let Ok(whole) = serde_json::from_str::<Value>(&text) {
        scan(&whole);
    } else if dialect == "ollama" {
        // Newline-delimited JSON: one object per line.
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                scan(&v);
            }
        }
    } else {
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                if let Ok(v) = serde_json::from_str::<Value>(data) {
                    scan(&v);
                }
            }
        }
    }
    names
}

pub fn collect_calls(dialect: &str, v: &Value, out: &mut Vec<String>) {
    let mut push = |n: &Value| {
        if let Some(n) = n.as_str() {
            if !n.is_empty() {
                out.push(n.to_owned());
            }
        }
    };
    match dialect {
        "openai_chat" => {
            for c in v["choices"].as_array().into_iter().flatten() {
                let calls = c["message"]["tool_calls"]
                    .as_array()
                    .or(c["delta"]["tool_calls"].as_array());
                for call in calls.into_iter().flatten() {
                    push(&call["function"]["name"]);
                }
            }
        }
        "openai_responses" => {
            // Whole responses and `response.completed`; `output_item.added` too for streams.
            let items = v["output"]
                .as_array()
                .or(v["response"]["output"].as_array())
                .cloned()
                .unwrap_or_default();
            let added = v["item"].clone();
            for item in items.iter().chain(std::iter::once(&added)) {
                if item["type"] == "function_call" && v["type"] != "response.output_item.done" {
                    push(&item["name"]);
                }
            }
        }
        "anthropic" => {
            for block in v["content"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(std::iter::once(&v["content_block"]))
            {
                if block["type"] == "tool_use" {
                    push(&block["name"]);
                }
            }
        }
        "gemini" => {
            for part in v["candidates"][0]["content"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
            {
                push(&part["functionCall"]["name"]);
            }
        }
        "ollama" => {
            for call in v["message"]["tool_calls"].as_array().into_iter().flatten() {
                push(&call["function"]["name"]);
            }
        }
        "bedrock" => {
            for block in v["output"]["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
            {
                push(&block["toolUse"]["name"]);
            }
            // A converse-stream event starting a call.
            push(&v["start"]["toolUse"]["name"]);
        }
        _ => {}
    }
}

/// One question of a shared dataset (`../shared/datasets/<name>/queries.jsonl`) and the tools
/// it needs.
pub struct Question {
    pub query: String,
    pub relevant: Vec<String>,
}

/// The first `questions` of `every` taken evenly over it (a dataset's questions come grouped
/// by kind), and a catalog of `size` tools in OpenAI's function form: the tools they need, then
/// the dataset's first others, as `benches/shadow_replay.py` replays a dataset.
pub fn dataset_catalog(
    name: &str,
    questions: usize,
    size: usize,
    spread: bool,
) -> (Vec<Value>, Vec<Question>) {
    let dir = super::repo().join("../shared/datasets").join(name);
    let read = |file: &str| -> Vec<Value> {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{}: {e} (../shared/datasets is needed)", dir.display()))
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let every = read("queries.jsonl");
    let step = if spread {
        (every.len() / questions).max(1)
    } else {
        1
    };
    let chosen: Vec<Question> = every
        .iter()
        .step_by(step)
        .take(questions)
        .map(|q| Question {
            query: q["query"].as_str().unwrap().to_owned(),
            relevant: q["relevant"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap().to_owned())
                .collect(),
        })
        .collect();
    let mut wanted: Vec<&str> = chosen
        .iter()
        .flat_map(|q| q.relevant.iter().map(String::as_str))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let name_of = |t: &Value| t["function"]["name"].as_str().unwrap().to_owned();
    let tools = read("tools.jsonl");
    let (mut catalog, others): (Vec<Value>, Vec<Value>) = tools
        .into_iter()
        .partition(|t| wanted.contains(&name_of(t).as_str()));
    let room = size.saturating_sub(catalog.len());
    catalog.extend(others.into_iter().take(room));
    (catalog, chosen)
}
