//! Tuning record for hybrid ranking: on each shared dataset, Recall@5 of
//! - keyword ranking (the filter's BM25),
//! - dense ranking, cosine of all-MiniLM-L6-v2 vectors of "name: description" (the way gateway
//!   peers do it) and of the text the filter embeds (`embeddings::tool_text`, with parameters),
//! - the filter's fusion (`fusion::rank`) over a grid of RRF k and channel weights, with the
//!   query embedded whole, or whole and by sentence as the filter does.
//!
//! Embeddings come from the real `toolsift-embed` server (`make embed` builds it), started here
//! on a free port; vectors are cached under `target/hybrid-probe/` between runs.
//! `toolsift eval --embeddings-url` gives the filter's own configuration's figures; this
//! program is for choosing that configuration.
//!
//! `cargo run --release --example hybrid_probe`

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)] // a benchmark harness, not filter code

#[path = "../tests/common/mod.rs"]
mod common;

use serde_json::json;
use std::path::{Path, PathBuf};
use toolsift::config::Config;
use toolsift::dialects::{Dialect, Entry};
use toolsift::embeddings::{query_texts, tool_text};
use toolsift::fusion::{self, FusionParams};
use toolsift::offline::eval::Dataset;
use toolsift::pipeline::Engine;
use toolsift::rank::Catalog;

const BATCH: usize = 64;

fn main() {
    let repo = common::repo();
    let server = common::EmbedServer::start();
    let port = server.port;
    let weights = Engine::new(Config::default()).weights;

    for name in ["seal_tools", "toolbench", "livemcpbench"] {
        let dir: PathBuf = repo.join("../shared/datasets").join(name);
        let dataset = Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).unwrap();
        let catalog = Catalog::build(Dialect::OpenaiChat, &dataset.tools_array(), weights).unwrap();
        let texts = |f: fn(&toolsift::dialects::ToolText) -> String| -> Vec<String> {
            catalog
                .draft
                .entries
                .iter()
                .map(|e| match e {
                    Entry::Function(t) => f(t),
                    Entry::Builtin => String::new(),
                })
                .collect()
        };
        let plain = cached(&repo, &format!("{name}-tools-plain"), || {
            embed(port, &texts(|t| format!("{}: {}", t.name, t.description)))
        });
        let filter_text = cached(&repo, &format!("{name}-tools-filter"), || {
            embed(port, &texts(tool_text))
        });
        // Per query: the filter's query texts (whole request first, then sentences).
        let per_query: Vec<Vec<String>> = dataset
            .queries
            .iter()
            .map(|q| query_texts(&q.query, toolsift::embeddings::MAX_SENTENCES))
            .collect();
        let flat: Vec<String> = per_query.iter().flatten().cloned().collect();
        let flat_vectors = cached(&repo, &format!("{name}-query-texts"), || embed(port, &flat));
        let mut it = flat_vectors.into_iter();
        let query_vectors: Vec<Vec<Vec<f32>>> = per_query
            .iter()
            .map(|p| it.by_ref().take(p.len()).collect())
            .collect();

        let recall = |order: &dyn Fn(usize) -> Vec<usize>| -> f64 {
            let total: f64 = dataset
                .queries
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let top: Vec<&str> = order(i)
                        .into_iter()
                        .take(5)
                        .map(|e| dataset.tools[e].name.as_str())
                        .collect();
                    q.relevant
                        .iter()
                        .filter(|r| top.contains(&r.as_str()))
                        .count() as f64
                        / q.relevant.len().max(1) as f64
                })
                .sum();
            total / dataset.queries.len() as f64
        };
        let dense = |tools: &[Vec<f32>]| {
            recall(&|i| {
                let q = &query_vectors[i][0];
                let mut order: Vec<(usize, f32)> = tools
                    .iter()
                    .enumerate()
                    .map(|(e, t)| (e, fusion::dot(q, t)))
                    .collect();
                order.sort_by(|a, b| b.1.total_cmp(&a.1));
                order.into_iter().map(|(e, _)| e).collect()
            })
        };
        let keyword = recall(&|i| {
            catalog
                .index
                .rank(&dataset.queries[i].query)
                .iter()
                .map(|s| s.entry)
                .collect()
        });
        println!(
            "{name}\tkeyword {keyword:.3}\tdense name:description {:.3}\tdense filter text {:.3}",
            dense(&plain),
            dense(&filter_text)
        );
        let refs: Vec<Option<&[f32]>> = filter_text.iter().map(|v| Some(v.as_slice())).collect();
        let entries = catalog.draft.entries.len();
        for k in [1.0f32, 3.0, 10.0, 60.0] {
            for w in [
                [1.0, 0.0, 0.0, 1.0],
                [1.0, 0.5, 0.25, 1.0],
                [1.0, 0.5, 0.5, 1.0],
                [1.0, 1.0, 1.0, 1.0],
                [2.0, 1.0, 0.5, 1.0],
                [1.5, 1.0, 1.0, 1.0],
            ] {
                for sentences in [false, true] {
                    let params = FusionParams { k, weights: w };
                    let r = recall(&|i| {
                        let qv = &query_vectors[i];
                        let n = if sentences { qv.len() } else { 1 };
                        let qs: Vec<&[f32]> = qv[..n].iter().map(|v| v.as_slice()).collect();
                        let query = &dataset.queries[i].query;
                        let fused = fusion::rank(
                            &catalog.index,
                            &catalog.lexicon,
                            entries,
                            query,
                            &catalog.index.rank(query),
                            Some((&qs, &refs)),
                            &params,
                        );
                        fused.order.iter().map(|s| s.entry).collect()
                    });
                    let how = if sentences {
                        "whole+sentences"
                    } else {
                        "whole"
                    };
                    println!("{name}\tk={k} w={w:?} query={how}\t{r:.3}");
                }
            }
        }
    }
}

/// Vectors cached under target/hybrid-probe, so a second run does not embed again.
fn cached(repo: &Path, key: &str, make: impl FnOnce() -> Vec<Vec<f32>>) -> Vec<Vec<f32>> {
    let path = repo.join("target/hybrid-probe").join(format!("{key}.json"));
    if let Ok(text) = std::fs::read_to_string(&path) {
        return serde_json::from_str(&text).unwrap();
    }
    let v = make();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    v
}

/// Unit-length vectors for `texts`, in batches.
fn embed(port: u16, texts: &[String]) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len());
    for batch in texts.chunks(BATCH) {
        let body = json!({"model": "all-MiniLM-L6-v2", "input": batch}).to_string();
        let r = common::http(
            port,
            "POST",
            "/v1/embeddings",
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        for item in r.json()["data"].as_array().unwrap() {
            let mut v: Vec<f32> = item["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            fusion::normalise(&mut v);
            out.push(v);
        }
        eprint!("\rembedded {} of {}", out.len(), texts.len());
    }
    eprintln!();
    out
}
