//! Native micro-benchmarks of the filter's hot functions (criterion), on tools sampled from the
//! shared datasets. An example target run by `make bench-micro` (see Cargo.toml for why not a
//! `[[bench]]`): `cargo run --release --example micro -- --bench`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)] // a benchmark harness, not filter code

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::PathBuf;
use toolsift::config::Config;
use toolsift::dialects::{Dialect, Item};
use toolsift::pipeline::Engine;
use toolsift::rank::{Catalog, CatalogCache, FieldWeights, ToolParts};

#[path = "shared/access_rules.rs"]
mod access_rules;

fn pool() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    let mut pool = Vec::new();
    for name in ["toolbench", "seal_tools"] {
        let text = std::fs::read_to_string(root.join(name).join("tools.jsonl")).expect("dataset");
        pool.extend(text.lines().map(str::to_owned));
    }
    pool
}

/// One per-tool phase of reading a never-seen tool: whether it read.
type Phase = fn(&Item) -> bool;

/// Distinct windows over the pool for the known-tools case: more than the cache's 16.
const WINDOWS: usize = 65;

fn body(tools: &str, question: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{question}"}}],"tools":{tools}}}"#
    )
}

const QUESTION: &str = "Find the latest football transfer news and email a summary to my team";
const HYBRID_QUESTION: &str =
    "Find the latest football transfer news. Then email a summary to my team.";

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("filter");
    group.sample_size(30);
    let pool = pool();
    for n in [200, 1000, 4000] {
        let tools = format!("[{}]", pool[..n].join(","));
        let body = body(&tools, QUESTION);
        group.bench_with_input(
            BenchmarkId::new("catalog_build (never-seen tools)", n),
            &tools,
            |b, t| {
                b.iter(|| {
                    Catalog::build(Dialect::OpenaiChat, black_box(t), FieldWeights::default())
                })
            },
        );
        // Its two per-tool phases (issue 22 item 2): reading each tool's JSON into its entry,
        // and that plus tokenising and hashing its text into its parts.
        let (items, _) = Dialect::OpenaiChat.split(&tools).expect("container");
        let phases: [(&str, Phase); 2] = [
            ("read_item (never-seen tools)", |item| {
                Dialect::OpenaiChat.read_item(item).is_ok()
            }),
            ("ToolParts::read (never-seen tools)", |item| {
                ToolParts::read(Dialect::OpenaiChat, item).is_ok()
            }),
        ];
        for (name, phase) in phases {
            group.bench_with_input(BenchmarkId::new(name, n), &items, |b, items| {
                b.iter(|| {
                    for item in items {
                        black_box(phase(black_box(item)));
                    }
                })
            });
        }
        // A tools array never seen as a whole, every tool of it seen in other arrays: a
        // window sliding over the pool, all windows read once before.
        let windows: Vec<String> = (0..WINDOWS)
            .map(|w| format!("[{}]", pool[w..w + n].join(",")))
            .collect();
        let mut cache = CatalogCache::new(16, 1 << 30);
        for w in &windows {
            cache
                .build(Dialect::OpenaiChat, w, FieldWeights::default())
                .expect("catalog");
        }
        let mut next = 0;
        group.bench_with_input(
            BenchmarkId::new("catalog assembled (known tools)", n),
            &windows,
            |b, windows| {
                b.iter(|| {
                    next += 1;
                    cache.build(
                        Dialect::OpenaiChat,
                        black_box(&windows[next % WINDOWS]),
                        FieldWeights::default(),
                    )
                })
            },
        );
        let catalog =
            Catalog::build(Dialect::OpenaiChat, &tools, FieldWeights::default()).expect("catalog");
        group.bench_with_input(
            BenchmarkId::new("rank (new question)", n),
            &catalog,
            |b, c| b.iter(|| c.index.rank(black_box(QUESTION))),
        );
        // Hybrid ranking's fusion, vectors given (384 dimensions, pseudo-random unit vectors:
        // the arithmetic is the same as with real ones); the question has two sentences, so
        // three query vectors.
        let vector = |seed: usize| {
            let mut v: Vec<f32> = (0..384)
                .map(|i| (((seed * 7919 + i * 104_729) % 1000) as f32 / 500.0) - 1.0)
                .collect();
            toolsift::fusion::normalise(&mut v);
            v
        };
        let tool_vectors: Vec<Vec<f32>> = (0..n).map(vector).collect();
        let tool_refs: Vec<Option<&[f32]>> =
            tool_vectors.iter().map(|v| Some(v.as_slice())).collect();
        let query_vectors: Vec<Vec<f32>> = (0..3).map(|i| vector(n + i)).collect();
        let query_refs: Vec<&[f32]> = query_vectors.iter().map(Vec::as_slice).collect();
        let config = Config::default();
        group.bench_with_input(
            BenchmarkId::new("hybrid fusion (new question)", n),
            &catalog,
            |b, c| {
                b.iter(|| {
                    toolsift::pipeline::rank_fused(
                        c,
                        &config,
                        black_box(HYBRID_QUESTION),
                        &query_refs,
                        &tool_refs,
                    )
                })
            },
        );
        let mut engine = Engine::new(Config::default());
        group.bench_with_input(
            BenchmarkId::new("analyse+rewrite (cache hit, same question)", n),
            &body,
            |b, body| {
                b.iter(|| {
                    let analysis = engine
                        .analyse(Dialect::OpenaiChat, black_box(body))
                        .expect("analyse");
                    analysis.rewrite(body)
                })
            },
        );
    }
    // Per-user tool sets: 1,000 distinct 200-tool catalogs, each a different choice of 200
    // of the same 600 tools, all cached; each request another catalog and a new question
    // (the Envoy benchmark's `--rotating` rows): finding the catalog, and the whole analysis.
    let sets: Vec<String> = (0..1000)
        .map(|c| {
            let mut order: Vec<usize> = (0..600).collect();
            let mut x = (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for i in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, i + (x % (600 - i) as u64) as usize);
            }
            let mut chosen = order[..200].to_vec();
            chosen.sort_unstable();
            let tools: Vec<&str> = chosen.iter().map(|&j| pool[j].as_str()).collect();
            format!("[{}]", tools.join(","))
        })
        .collect();
    let bodies: Vec<String> = sets
        .iter()
        .enumerate()
        .map(|(i, tools)| body(tools, &format!("{QUESTION} (ticket {i})")))
        .collect();
    let mut engine = Engine::new(Config::default());
    for body in &bodies {
        engine.analyse(Dialect::OpenaiChat, body).expect("analyse");
    }
    let mut cache = CatalogCache::new(1024, 1 << 30);
    for tools in &sets {
        cache
            .build(Dialect::OpenaiChat, tools, FieldWeights::default())
            .expect("catalog");
    }
    let mut next = 0;
    group.bench_function("find among 1,000 cached catalogs/200", |b| {
        b.iter(|| {
            next += 1;
            cache.find_prefix(Dialect::OpenaiChat, black_box(sets[next % 1000].as_bytes()))
        })
    });
    group.bench_function(
        "analyse+rewrite (1,000 cached catalogs, new question)/200",
        |b| {
            b.iter(|| {
                next += 1;
                let body = &bodies[next % 1000];
                let analysis = engine
                    .analyse(Dialect::OpenaiChat, black_box(body))
                    .expect("analyse");
                analysis.rewrite(body)
            })
        },
    );
    // Access rules' own time in the core at 200 tools (the filter's share of the Envoy
    // benchmark's `--access` rows): the same analysis and rewrite without rules, under 50
    // rules for one caller (its allowed set remembered), and for callers rotating over
    // 40 groups (their rules picked and their allowed set combined every request).
    let n = 200;
    let tools = format!("[{}]", pool[..n].join(","));
    let body = body(&tools, QUESTION);
    let rules = access_rules::rules(&pool[..n]);
    let ruled = Config::from_json(rules.as_bytes()).expect("the rules are valid");
    let group_of = |i: usize| -> Vec<String> {
        let g = |k: usize| format!("g{}", (i * k + k) % 40);
        vec![g(1), g(3), g(7), g(11), "finance".to_owned()]
    };
    let mut plain = Engine::new(Config::default());
    let mut governed = Engine::new(ruled);
    for (name, rotating) in [
        ("without access rules", None),
        ("50 access rules, one caller", Some(false)),
        ("50 access rules, rotating callers", Some(true)),
    ] {
        let mut i = 0;
        group.bench_with_input(BenchmarkId::new(name, n), &body, |b, body| {
            b.iter(|| {
                i += 1;
                let analysis = match rotating {
                    None => plain.analyse(Dialect::OpenaiChat, black_box(body)),
                    Some(rotating) => {
                        let caller =
                            toolsift::access::Caller::new(group_of(if rotating { i } else { 0 }));
                        let grant = governed.grant(&caller);
                        governed.analyse_as(Dialect::OpenaiChat, black_box(body), grant.as_ref())
                    }
                };
                analysis.expect("analyse").rewrite(body)
            })
        });
    }
    // The loop guard's own time at 200 tools with a 100-message history (a question, then 99
    // messages of calls and results, none repeated: every call read, the window's canonicalised).
    let mut messages = vec![format!(r#"{{"role":"user","content":"{QUESTION}"}}"#)];
    for i in 0..99 {
        messages.push(if i % 2 == 0 {
            format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"search_news","arguments":"{{\"query\":\"football transfers page {i}\",\"limit\":10}}"}}}}]}}"#
            )
        } else {
            format!(r#"{{"role":"tool","tool_call_id":"c{}","content":"result {i}"}}"#, i - 1)
        });
    }
    let long = format!(
        r#"{{"model":"m","messages":[{}],"tools":{tools}}}"#,
        messages.join(",")
    );
    let guarded = Config::from_json(br#"{"loop_guard":{}}"#).expect("valid");
    let mut engines = [
        (
            "100 messages, without loop_guard",
            Engine::new(Config::default()),
        ),
        ("100 messages, loop_guard", Engine::new(guarded)),
    ];
    for (name, engine) in &mut engines {
        group.bench_with_input(BenchmarkId::new(*name, n), &long, |b, body| {
            b.iter(|| {
                let analysis = engine.analyse(Dialect::OpenaiChat, black_box(body));
                analysis.expect("analyse").rewrite(body)
            })
        });
    }
    // A turn with a history (issue 66): the fleet's calibration alone, and with transitions
    // naming eight tools after the history's call, fused with the ranking. Filter mode's whole
    // request: analysis, the tools the transitions brought in (`next=`), the rewrite.
    let name = |i: usize| -> String {
        let tool: serde_json::Value = serde_json::from_str(&pool[i]).expect("tool");
        tool["function"]["name"].as_str().expect("name").to_owned()
    };
    let tools = format!("[{}]", pool[..n].join(","));
    let turn = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{QUESTION}"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":{:?},"arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":"ok"}}],"tools":{tools}}}"#,
        name(1)
    );
    let pairs: Vec<String> = (0..8)
        .map(|i| format!(r#"[{:?},{:?},{}]"#, name(1), name(7 + 23 * i), 80 - 10 * i))
        .collect();
    let calibration = |transitions: &str| {
        format!(
            r#"{{"shadow":{{"sample":0.000001}},"auto_k":{{"keep":0.95,"calibration":{{"version":1,
                "max_k":64,"pooled":{{"calls":300,"slots":[[5,300]]}}{transitions}}}}}}}"#
        )
    };
    let with = calibration(&format!(
        r#","transitions":{{"pooled":[{}]}}"#,
        pairs.join(",")
    ));
    let mut engines = [
        ("a history, the fleet's calibration alone", calibration("")),
        ("a history, the fleet's transitions", with),
    ]
    .map(|(label, json)| {
        (
            label,
            Engine::new(Config::from_json(json.as_bytes()).expect("valid")),
        )
    });
    for (label, engine) in &mut engines {
        let config = engine.config.clone();
        group.bench_with_input(BenchmarkId::new(*label, n), &turn, |b, body| {
            b.iter(|| {
                let analysis = engine.analyse(Dialect::OpenaiChat, black_box(body));
                let analysis = analysis.expect("analyse");
                (analysis.brought_in(&config), analysis.rewrite(body))
            })
        });
    }
    group.finish();
}

criterion_group!(micro, benches);
criterion_main!(micro);
