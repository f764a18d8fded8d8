//! The Envoy benchmark's request bodies: tools sampled from the three shared datasets
//! (OpenAI function format) and Chat Completions requests that carry them, each with its own
//! question. Shared by `envoy_latency` and `instructions`, so that the instruction count
//! measures the same requests the Envoy benchmark times.

use std::path::Path;

/// Tools sampled evenly from the three shared datasets (`datasets`: `../shared/datasets`).
pub fn dataset_tools(datasets: &Path) -> Vec<String> {
    let mut all = Vec::new();
    for name in ["livemcpbench", "toolbench", "seal_tools"] {
        let path = datasets.join(name).join("tools.jsonl");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        all.push(text.lines().map(str::to_owned).collect::<Vec<_>>());
    }
    // Interleave so every size mixes the three sources.
    let longest = all.iter().map(Vec::len).max().unwrap();
    let mut out = Vec::new();
    for i in 0..longest {
        for source in &all {
            if let Some(t) = source.get(i) {
                out.push(t.clone());
            }
        }
    }
    out
}

/// A Chat Completions request with the tools array `tools` (its items, comma-separated) and the
/// user message `question` (JSON-safe text).
pub fn chat_body(tools: &str, question: &str) -> String {
    format!(
        r#"{{"model":"gpt-4.1","messages":[{{"role":"system","content":"You are a helpful agent."}},{{"role":"user","content":"{question}"}}],"tools":[{tools}],"tool_choice":"auto","temperature":0.2}}"#
    )
}

/// Request `i`'s question.
pub fn question(i: usize) -> String {
    format!("{} (ticket {i})", QUESTIONS[i % QUESTIONS.len()])
}

pub const QUESTIONS: [&str; 8] = [
    "Find the latest news about the football transfer market and send a short summary to my team by email",
    "What is the weather forecast for Lisbon this weekend",
    "Look up the stock price of Apple and convert it to euros",
    "Search for recent papers about protein folding and list their authors",
    "Translate this customer review from German into English",
    "Book a table for four at an Italian restaurant near the office tonight",
    "Create a calendar event for the quarterly planning meeting next Tuesday",
    "Get the lyrics of the song that is number one in the charts",
];

/// The "same catalog" row's bodies: the first `n` tools in every request, 64 questions.
pub fn same_catalog(tools: &[String], n: usize) -> Vec<String> {
    let joined = tools[..n].join(",\n");
    (0..64).map(|i| chat_body(&joined, &question(i))).collect()
}
