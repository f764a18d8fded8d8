//! Tokens of the tools array, sent whole ("static") against what toolsift keeps, for catalogs
//! of 10 to 1,000 tools sampled from the shared datasets, counted with the o200k tokenizer.
//! Run with `make bench-tokens`.
//!
//! For each query (the first `QUERIES` of each dataset) and catalog size N, the catalog is the
//! query's relevant tools plus N − |relevant| others drawn at an even stride from the rest, so
//! recall stays meaningful at every size. Selection is the filter's own, default configuration
//! (top_k 5, min_tools 20: a 10-tool request passes untouched).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)] // a benchmark harness, not filter code

use std::path::PathBuf;
use toolsift::config::Config;
use toolsift::offline::eval::{Dataset, Tool, evaluate};
use toolsift::pipeline::Engine;

const SIZES: [usize; 6] = [10, 25, 50, 100, 200, 1000];
const QUERIES: usize = 40;

fn main() {
    let bpe = tiktoken_rs::o200k_base().expect("o200k tokenizer");
    let count = |text: &str| bpe.encode_with_special_tokens(text).len();
    let config = Config::default();
    let weights = Engine::new(config.clone()).weights;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    println!(
        "| tools in catalog | static tokens | toolsift tokens | saved | tools kept | Recall of kept |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for n in SIZES {
        let (mut static_tokens, mut kept_tokens, mut kept_tools, mut recall, mut runs) =
            (0.0, 0.0, 0.0, 0.0, 0.0);
        for name in ["seal_tools", "toolbench", "livemcpbench"] {
            let dir = root.join(name);
            let full = Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl"))
                .expect("dataset");
            for query in full.queries.iter().take(QUERIES) {
                let tools = sample(&full.tools, &query.relevant, n);
                let total: usize = tools.iter().map(|t| count(&t.line)).sum();
                let dataset = Dataset {
                    name: name.to_owned(),
                    tools,
                    queries: vec![query.clone()],
                };
                let report = evaluate(&dataset, &config, weights, &[5], &count, &mut |_| {})
                    .expect("evaluate");
                static_tokens += total as f64;
                if n <= config.min_tools {
                    // The filter passes requests this small untouched.
                    kept_tokens += total as f64;
                    kept_tools += n as f64;
                    recall += 1.0;
                } else {
                    kept_tokens += report.selected.tokens;
                    kept_tools += report.selected.tools;
                    recall += report.selected.recall;
                }
                runs += 1.0;
            }
        }
        println!(
            "| {n} | {:.0} | {:.0} | {:.1}% | {:.1} | {:.3} |",
            static_tokens / runs,
            kept_tokens / runs,
            100.0 * (1.0 - kept_tokens / static_tokens),
            kept_tools / runs,
            recall / runs
        );
    }
}

/// The relevant tools plus others at an even stride, `n` in all, in catalog order.
fn sample(all: &[Tool], relevant: &[String], n: usize) -> Vec<Tool> {
    let mut chosen: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, t)| relevant.contains(&t.name))
        .map(|(i, _)| i)
        .collect();
    let others: Vec<usize> = (0..all.len()).filter(|i| !chosen.contains(i)).collect();
    let want = n.saturating_sub(chosen.len());
    let stride = (others.len() / want.max(1)).max(1);
    chosen.extend(others.iter().step_by(stride).take(want));
    chosen.sort_unstable();
    chosen.into_iter().map(|i| all[i].clone()).collect()
}
