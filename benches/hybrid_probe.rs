//! A first measurement for issue 4 (hybrid ranking), before the filter has it: on each shared
//! dataset, Recall@5 of keyword ranking (the filter's BM25), dense ranking (cosine of
//! all-MiniLM-L6-v2 embeddings of "name: description", the way gateway peers do it) and their
//! Reciprocal Rank Fusion (k = 60), with the keyword ranking weighted 1, 2 or 3 to the dense one's 1. Embeddings come from the real `toolsift-embed` server
//! (`make embed` builds it), started here on a free port.
//!
//! `cargo run --release --example hybrid_probe [-- --with-params]`

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)] // a benchmark harness, not filter code

#[path = "../tests/common/mod.rs"]
mod common;

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use toolsift::config::Config;
use toolsift::dialect::{Dialect, Entry};
use toolsift::eval::Dataset;
use toolsift::pipeline::Engine;
use toolsift::rank::Catalog;

const RRF_K: f32 = 60.0;
const BATCH: usize = 64;

fn main() {
    let repo = common::repo();
    let server = repo.join("target/embed/release/toolsift-embed");
    assert!(
        server.exists(),
        "{} missing: run `make embed`",
        server.display()
    );
    let mut child = Command::new(&server)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(&repo)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolsift-embed");
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().rsplit(':').next().unwrap().parse().unwrap();

    println!(
        "| dataset | keyword | dense | RRF 1:1 | RRF 2:1 | RRF 3:1 | RRF 1:1, dense top 10 | BM25/max + 0.5·cos | BM25/max + 1·cos |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let weights = Engine::new(Config::default()).weights;
    let with_params = std::env::args().any(|a| a == "--with-params");
    for name in ["seal_tools", "toolbench", "livemcpbench"] {
        let dir: PathBuf = repo.join("../shared/datasets").join(name);
        let dataset = Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).unwrap();
        let catalog = Catalog::build(Dialect::OpenaiChat, &dataset.tools_array(), weights).unwrap();
        // "name: description", or with `--with-params` also the parameter names and
        // descriptions the keyword index reads.
        let texts: Vec<String> = catalog
            .draft
            .entries
            .iter()
            .map(|e| match e {
                Entry::Function(t) if with_params => {
                    format!("{}: {} {}", t.name, t.description, t.params.join(", "))
                }
                Entry::Function(t) => format!("{}: {}", t.name, t.description),
                Entry::Builtin => String::new(),
            })
            .collect();
        let tool_vectors = embed(port, &texts);
        let queries: Vec<String> = dataset.queries.iter().map(|q| q.query.clone()).collect();
        let query_vectors = embed(port, &queries);
        let (mut kw, mut dense) = (0.0, 0.0);
        let mut hybrid = [0.0; 3];
        let (mut top10, mut convex_half, mut convex_one) = (0.0, 0.0, 0.0);
        for (q, qv) in dataset.queries.iter().zip(&query_vectors) {
            let scored = catalog.index.rank(&q.query);
            let keyword: Vec<usize> = scored.iter().map(|s| s.entry).collect();
            let mut by_cosine: Vec<(usize, f32)> = tool_vectors
                .iter()
                .enumerate()
                .map(|(i, tv)| (i, dot(qv, tv)))
                .collect();
            by_cosine.sort_by(|a, b| b.1.total_cmp(&a.1));
            let dense_order: Vec<usize> = by_cosine.iter().map(|(i, _)| *i).collect();
            let recall = |order: &[usize]| {
                let top: Vec<&str> = order
                    .iter()
                    .take(5)
                    .map(|&i| dataset.tools[i].name.as_str())
                    .collect();
                q.relevant
                    .iter()
                    .filter(|r| top.contains(&r.as_str()))
                    .count() as f64
                    / q.relevant.len().max(1) as f64
            };
            kw += recall(&keyword);
            dense += recall(&dense_order);
            top10 += recall(&rrf(
                &[
                    (&keyword, 1.0),
                    (&dense_order[..10.min(dense_order.len())], 1.0),
                ],
                tool_vectors.len(),
            ));
            let max = scored.first().map_or(0.0, |s| s.score).max(f32::EPSILON);
            let mut bm25 = vec![0f32; tool_vectors.len()];
            for s in scored.iter() {
                bm25[s.entry] = s.score / max;
            }
            let convex = |alpha: f32| {
                let mut order: Vec<usize> = (0..bm25.len()).collect();
                let score = |i: usize| bm25[i] + alpha * dot(qv, &tool_vectors[i]);
                order.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
                order
            };
            convex_half += recall(&convex(0.5));
            convex_one += recall(&convex(1.0));
            for (w, h) in hybrid.iter_mut().enumerate() {
                *h += recall(&rrf(
                    &[(&keyword, (w + 1) as f32), (&dense_order, 1.0)],
                    tool_vectors.len(),
                ));
            }
        }
        let n = dataset.queries.len() as f64;
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            kw / n,
            dense / n,
            hybrid[0] / n,
            hybrid[1] / n,
            hybrid[2] / n,
            top10 / n,
            convex_half / n,
            convex_one / n
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Entry order by weighted Reciprocal Rank Fusion of the given rankings (best first; ties by
/// entry).
fn rrf(rankings: &[(&[usize], f32)], n: usize) -> Vec<usize> {
    let mut score = vec![0f32; n];
    for (ranking, weight) in rankings {
        for (rank, &entry) in ranking.iter().enumerate() {
            score[entry] += weight / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
    order
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Unit-length vectors for `texts`, in batches.
fn embed(port: u16, texts: &[String]) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len());
    for (i, batch) in texts.chunks(BATCH).enumerate() {
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
            out.push(
                item["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect(),
            );
        }
        if i % 10 == 0 {
            eprint!("\rembedded {} of {}", out.len(), texts.len());
        }
    }
    eprintln!();
    out
}
