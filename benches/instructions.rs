//! The core's work on the Envoy benchmark's "same catalog" row, for an instruction count
//! (`make bench-instructions`): `Engine::analyse` and `Analysis::rewrite_head` of 200-tool
//! Chat Completions bodies, one tools array and 64 questions, as an agent loop sends them.
//!
//! `instructions <requests> [turns|turns-yes]` runs four requests (the catalog built, then
//! found and copied as a hot one), then `requests` more; with `turns`, each body's question is
//! followed by the assistant asking to go on and a short reply ("Definitely, start.", a word
//! some tool has: ranked with its question since the assistant's turn is read, alone before),
//! so that the follow-up's reading is counted; with `turns-yes`, the reply is "Yes, please.",
//! ranked with its question before and since: what reading the assistant's turn adds. Under `valgrind --tool=callgrind` the difference between
//! two counts (`requests` = N and 0), divided by N, is the instructions of one cache-hit
//! request: the same on any machine and under any load, where Envoy's timings move by 10 µs
//! from one run to the next. Both calls exist since 0b54a9e, so one checkout of an older
//! commit with this file copied in counts that commit's work the same way.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // a benchmark harness, not filter code

#[path = "shared/bodies.rs"]
mod bodies;

use std::path::Path;
use toolsift::config::Config;
use toolsift::dialects::Dialect;
use toolsift::pipeline::Engine;

/// Requests before the counted ones: the first builds the catalog, the next find it soon
/// enough to keep it as a hot copy.
const WARM: usize = 4;

fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("usage: instructions <requests>");
    let datasets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    let tools = bodies::dataset_tools(&datasets);
    let mut bodies = bodies::same_catalog(&tools, 200);
    let reply = match std::env::args().nth(2).as_deref() {
        Some("turns") => Some("Definitely, start."),
        Some("turns-yes") => Some("Yes, please."),
        _ => None,
    };
    if let Some(reply) = reply {
        for body in &mut bodies {
            let mut value: serde_json::Value = serde_json::from_str(body).unwrap();
            let messages = value["messages"].as_array_mut().unwrap();
            messages.push(serde_json::json!({"role": "assistant",
                "content": "I can do that now. Shall I go ahead?"}));
            messages.push(serde_json::json!({"role": "user", "content": reply}));
            *body = value.to_string();
        }
    }
    let mut engine = Engine::new(Config::default());
    let mut written = 0;
    for body in bodies.iter().cycle().take(WARM + requests) {
        let analysis = engine.analyse(Dialect::OpenaiChat, body).unwrap();
        assert!(
            analysis.cache_hit || written == 0,
            "not a catalog-cache hit"
        );
        let (head, replaced) = analysis.rewrite_head(body.as_bytes()).unwrap();
        written += head.len() + replaced;
    }
    // What was written, so that nothing is optimised away.
    println!("{written}");
}
