//! Never-seen tools under V8, outside Envoy (`make bench-v8`; issue 22 item 2).
//!
//! `toolsift-v8-bench <datasets> <tools> <requests> <work>`, built for wasm32-wasip1 and run by
//! `run.mjs` under node with the V8 tier chosen by its flags. Every request carries a tools
//! array of never-seen tools, made as `benches/envoy_latency.rs --catalogs new` makes them (the
//! same pool, each name prefixed per request), and `work` is what is timed:
//! - `analyse`: what the filter does with the body, `Engine::analyse` with the default
//!   configuration (the catalog cache fills up, then evicts as in Envoy);
//! - `floor`: the least any ranking of those tools needs: find the items, read each tool's
//!   entry, tokenise and hash its text, keep nothing;
//! - `same`: `Engine::analyse` of the same tools array every request, as an agent loop sends
//!   it (the Envoy benchmark's "same" row: 64 bodies cycled, each with its own question), so
//!   every request after the first is a catalog-cache hit.
//!
//! Prints one table row: work, tools, and the minimum, median and 90th percentile in ms of the
//! requests after the first quarter (the cache's filling and V8's tiering up).

use std::time::Instant;
use toolsift::config::Config;
use toolsift::dialects::{Dialect, Entry};
use toolsift::pipeline::Engine;

/// The Envoy benchmark's pool: the three shared datasets' tools, interleaved.
fn pool(datasets: &str) -> Vec<String> {
    let sources: Vec<Vec<String>> = ["livemcpbench", "toolbench", "seal_tools"]
        .iter()
        .map(|name| {
            let path = format!("{datasets}/{name}/tools.jsonl");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            text.lines().map(str::to_owned).collect()
        })
        .collect();
    let longest = sources.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| sources.iter().filter_map(move |s| s.get(i).cloned()))
        .collect()
}

/// The tools array of request `i`: every tool's name prefixed, so no tool was seen before.
fn never_seen(tools: &str, i: usize) -> String {
    format!(
        "[{}]",
        tools.replace("\"name\": \"", &format!("\"name\": \"s{i}_"))
    )
}

fn chat_body(tools: &str, i: usize) -> String {
    format!(
        r#"{{"model":"gpt-4.1","messages":[{{"role":"user","content":"What is the weather forecast for Lisbon this weekend (ticket {i})"}}],"tools":{tools},"tool_choice":"auto"}}"#
    )
}

/// Reads and tokenises every tool of `container`; the sum of the term ids keeps the work from
/// being optimised away.
fn floor(container: &str) -> u64 {
    let Ok((items, _)) = Dialect::OpenaiChat.split(container) else {
        panic!("not a tools array");
    };
    let mut sum = 0u64;
    for item in &items {
        if let Ok(Entry::Function(text)) = Dialect::OpenaiChat.read_item(item) {
            for field in [&text.name, &text.description, &text.params, &text.keys] {
                toolsift::text::for_each_term(field, |term| {
                    sum = sum.wrapping_add(u64::from(<u32 as bm25::TokenEmbedder>::embed(term)));
                });
            }
        }
    }
    sum
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, datasets, tools, requests, work] = &args[..] else {
        panic!("usage: toolsift-v8-bench <datasets> <tools> <requests> analyse|floor|same");
    };
    let (n, requests): (usize, usize) = (tools.parse().unwrap(), requests.parse().unwrap());
    let pool = pool(datasets);
    let tools = pool[..n].join(",");
    let mut engine = Engine::new(Config::default());
    let mut times = Vec::with_capacity(requests);
    // The same row's bodies: one tools array, as the Envoy benchmark joins it.
    let same: Vec<String> = (0..64)
        .map(|i| chat_body(&format!("[{}]", pool[..n].join(",\n")), i))
        .collect();
    for i in 0..requests {
        // The same row reads only its prepared bodies.
        let (container, body) = if work == "same" {
            (String::new(), String::new())
        } else {
            let container = never_seen(&tools, i);
            let body = chat_body(&container, i);
            (container, body)
        };
        let start = Instant::now();
        match work.as_str() {
            "same" => {
                let analysis = engine.analyse(Dialect::OpenaiChat, same[i % same.len()].as_bytes());
                assert!(analysis.is_ok(), "request {i} not analysed");
            }
            "analyse" => {
                let analysis = engine.analyse(Dialect::OpenaiChat, body.as_bytes());
                assert!(analysis.is_ok(), "request {i} not analysed");
            }
            "floor" => assert_ne!(floor(&container), 0),
            other => panic!("unknown work {other}"),
        }
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let mut after = times.split_off(requests / 4);
    after.sort_by(f64::total_cmp);
    let at = |q: f64| after[((after.len() - 1) as f64 * q) as usize];
    println!(
        "| {work} | {n} | {:.4} | {:.4} | {:.4} |",
        at(0.0),
        at(0.5),
        at(0.9)
    );
}
