//! Search mode on the shared datasets: what the model sees per round, how often the first
//! `find_tools` call finds the tool the question needs, and the gateway's own time per round.
//! Run with `make bench-search`.
//!
//! Every query of each dataset becomes an OpenAI Chat Completions body (the question as the one
//! user message, the whole catalog as `tools`) and goes through the library's own code:
//! [`Engine::analyse`] with `mode: search`, [`plan`] for the first request, then
//! [`Session::on_reply`] with a model turn calling `find_tools(query = the question, limit 5)`,
//! which searches the catalog and writes the follow-up request. Filter mode (`top_k` 5, the
//! default configuration) goes through [`Engine::analyse`] and [`Analysis::rewrite`].
//!
//! Tokens are those of the JSON texts the gateway sends upstream (the `tools` array of the
//! body, and the tool-result message's content), counted with the o200k tokenizer; a provider
//! renders tools into the prompt its own way, so these are a close proxy, not billed tokens.
//! Times are native (not the `.wasm`), one sample per query after a warm-up; the model's time is
//! not in them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)] // a benchmark harness, not filter code

use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;
use toolsift::config::Config;
use toolsift::dialects::{Dialect, MAX_QUERY_BYTES};
use toolsift::json::find_path;
use toolsift::offline::eval::{Dataset, percentile};
use toolsift::pipeline::{Analysis, Engine};
use toolsift::search::plan::{HeaderRoom, Plan, Planned, plan};
use toolsift::search::round::{Next, Session};
use toolsift::search::{Call, Reply};

const DATASETS: [&str; 3] = ["seal_tools", "toolbench", "livemcpbench"];
/// `find_tools`' limit, and filter mode's `top_k`.
const K: usize = 5;
/// Queries run untimed before the timed pass.
const WARM_UP: usize = 50;

/// One dataset's figures.
struct Figures {
    name: String,
    tools: usize,
    queries: usize,
    scored: usize,
    full: f64,
    /// Per row of the token table: (tools array, tool result) tokens per query.
    rows: Vec<Vec<(f64, f64)>>,
    search_hit: f64,
    search_recall: f64,
    filter_hit: f64,
    filter_recall: f64,
    /// Scored queries whose found tools and filter mode's kept tools differ as sets.
    differ: usize,
    /// … of which: the search found fewer than K tools (zero-score tools are never found).
    differ_short: usize,
    /// … of which: the question is longer than the bound on a request's query.
    differ_long: usize,
    plan_us: Vec<f64>,
    on_reply_us: Vec<f64>,
}

/// What one query does in search mode with one configuration.
struct Run {
    /// The first request's tools array.
    round1: String,
    /// The follow-up's tools array and tool-result content.
    round2: String,
    result: String,
    found: Vec<String>,
    plan_us: f64,
    on_reply_us: f64,
}

const ROWS: [&str; 8] = [
    "full catalog (every tool)",
    "filter mode, top_k 5",
    "search round 1, eager_k 0: find_tools alone",
    "search round 1, eager_k 3: find_tools + 3 best-ranked",
    "search round 2, eager_k 0: tools array (find_tools + 5 found)",
    "search round 2, eager_k 0: tool result",
    "search round 2, eager_k 0: tools array + tool result",
    "search round 2, eager_k 3: tools array + tool result",
];

fn main() {
    let bpe = tiktoken_rs::o200k_base().expect("o200k tokenizer");
    let count = |text: &str| bpe.encode_with_special_tokens(text).len() as f64;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    let search0 = Config::from_json(br#"{"mode":"search","search":{"eager_k":0}}"#).unwrap();
    let search3 = Config::from_json(br#"{"mode":"search","search":{"eager_k":3}}"#).unwrap();
    let filter = Config::default();
    assert_eq!(filter.top_k, K);

    let mut all = Vec::new();
    for name in DATASETS {
        let started = Instant::now();
        let dir = root.join(name);
        let dataset =
            Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).expect("dataset");
        let array = dataset.tools_array();
        let full = count(&array);
        let mut search_engine = Engine::new(search0.clone());
        let mut filter_engine = Engine::new(filter.clone());
        let mut f = Figures {
            name: name.to_owned(),
            tools: dataset.tools.len(),
            queries: dataset.queries.len(),
            scored: 0,
            full,
            rows: vec![Vec::new(); ROWS.len()],
            search_hit: 0.0,
            search_recall: 0.0,
            filter_hit: 0.0,
            filter_recall: 0.0,
            differ: 0,
            differ_short: 0,
            differ_long: 0,
            plan_us: Vec::new(),
            on_reply_us: Vec::new(),
        };
        // The warm-up: the same work, untimed and uncounted.
        for q in dataset.queries.iter().take(WARM_UP) {
            let body = chat_body(&q.query, &array);
            let analysis = search_engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            run(&search0, &analysis, &body, &q.query);
        }
        for q in &dataset.queries {
            let body = chat_body(&q.query, &array);
            let analysis = search_engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            let zero = run(&search0, &analysis, &body, &q.query);
            let three = run(&search3, &analysis, &body, &q.query);
            f.plan_us.push(zero.plan_us);
            f.on_reply_us.push(zero.on_reply_us);

            let filtered = filter_engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            let kept: Vec<String> = filtered
                .kept_names()
                .into_iter()
                .map(str::to_owned)
                .collect();
            let rewritten = filtered.rewrite(&body).expect("filter mode drops tools");

            let r = (zero.result.as_str(), three.result.as_str());
            let (t2, t3) = (count(&zero.round2), count(&three.round2));
            let (r2, r3) = (count(r.0), count(r.1));
            let rows = [
                (full, 0.0),
                (count(tools_of(&rewritten)), 0.0),
                (count(&zero.round1), 0.0),
                (count(&three.round1), 0.0),
                (t2, 0.0),
                (0.0, r2),
                (t2, r2),
                (t3, r3),
            ];
            for (row, v) in f.rows.iter_mut().zip(rows) {
                row.push(v);
            }

            let relevant: HashSet<&str> = q.relevant.iter().map(String::as_str).collect();
            if relevant.is_empty() {
                continue;
            }
            f.scored += 1;
            let share = |names: &[String]| {
                names
                    .iter()
                    .filter(|n| relevant.contains(n.as_str()))
                    .count() as f64
                    / relevant.len() as f64
            };
            let (s, k) = (share(&zero.found), share(&kept));
            f.search_recall += s;
            f.filter_recall += k;
            f.search_hit += f64::from(u8::from(s > 0.0));
            f.filter_hit += f64::from(u8::from(k > 0.0));
            let as_set = |v: &[String]| v.iter().cloned().collect::<HashSet<String>>();
            if as_set(&zero.found) != as_set(&kept) {
                f.differ += 1;
                if zero.found.len() < K {
                    f.differ_short += 1;
                }
                if q.query.len() > MAX_QUERY_BYTES {
                    f.differ_long += 1;
                }
            }
        }
        eprintln!(
            "{name}: {} tools, {} queries in {:.1} s",
            f.tools,
            f.queries,
            started.elapsed().as_secs_f64()
        );
        all.push(f);
    }
    report(&all);
}

/// An OpenAI Chat Completions request: the question as the one user message, and the catalog.
fn chat_body(question: &str, tools_array: &str) -> String {
    format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":{}}}],"tools":{tools_array}}}"#,
        serde_json::to_string(question).unwrap()
    )
}

/// The `tools` array of a request body, as sent.
fn tools_of(body: &str) -> &str {
    let span = find_path(body, &["tools"]).expect("a tools array");
    &body[span]
}

/// Search mode for one query: the first request, then one `find_tools` call answered.
fn run(config: &Config, analysis: &Analysis, body: &str, question: &str) -> Run {
    let t0 = Instant::now();
    let planned = plan(config, analysis, body, HeaderRoom::default());
    let plan_us = t0.elapsed().as_secs_f64() * 1e6;
    let plan: Plan = match planned {
        Some(Planned::Search(p)) => p,
        Some(Planned::Native(_) | Planned::Provider(_)) => {
            panic!("no provider tool search in these requests")
        }
        None => panic!("plan() did not plan the request"),
    };
    assert!(
        plan.meta_entries.iter().all(|m| !m.is_empty()),
        "Wire::tool_entry still returns a placeholder for OpenAI Chat"
    );
    let round1 = tools_of(&plan.body).to_owned();
    let mut session = Session::new(config, analysis, body, plan);
    let arguments = json!({"query": question, "limit": K}).to_string();
    let turn = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [{
            "id": "call_1",
            "type": "function",
            "function": {"name": "find_tools", "arguments": arguments},
        }],
    })
    .to_string();
    let reply = Reply {
        calls: vec![Call {
            id: "call_1".to_owned(),
            name: "find_tools".to_owned(),
            arguments,
        }],
        usage: None,
        turn: vec![turn],
    };
    let t0 = Instant::now();
    let next = session.on_reply(&reply);
    let on_reply_us = t0.elapsed().as_secs_f64() * 1e6;
    let Next::FollowUp(follow_up) = next else {
        panic!("a find_tools call must lead to a follow-up request, got {next:?}");
    };
    let round2 = tools_of(&follow_up).to_owned();
    let found = session.found().to_vec();
    // The tools array is the meta-tool, the eager tools and the found ones.
    let entries: Vec<Value> = serde_json::from_str(&round2).unwrap();
    let round1_entries: Vec<Value> = serde_json::from_str(&round1).unwrap();
    assert_eq!(entries.len(), round1_entries.len() + found.len());
    // The tool result: the last message, as the model reads it.
    let v: Value = serde_json::from_str(&follow_up).unwrap();
    let last = v["messages"].as_array().and_then(|m| m.last()).cloned();
    let last = last.expect("messages");
    assert!(
        last["role"] == "tool" && last["tool_call_id"] == "call_1",
        "Wire::tool_results still returns a placeholder for OpenAI Chat (last message: {last})"
    );
    let result = match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => panic!("tool-result content: {other}"),
    };
    Run {
        round1,
        round2,
        result,
        found,
        plan_us,
        on_reply_us,
    }
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    percentile(&v, 50.0)
}

fn p(values: &[f64], at: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, at)
}

fn ratio(part: f64, whole: f64) -> String {
    let r = 100.0 * part / whole;
    if r >= 10.0 {
        format!("{r:.0}%")
    } else if r >= 1.0 {
        format!("{r:.1}%")
    } else {
        format!("{r:.2}%")
    }
}

fn report(all: &[Figures]) {
    println!("Command: `make bench-search` (`cargo run --release --example search_mode`)");
    println!();
    println!(
        "Tokens the model reads, per round: median over each dataset's queries, o200k_base, \
         and the share of the full catalog's tokens. OpenAI Chat Completions bodies; \
         `find_tools` called once with the question as its query and limit 5."
    );
    println!();
    let mut header = String::from("| what the model sees |");
    let mut rule = String::from("|---|");
    for f in all {
        header.push_str(&format!(" {} ({} tools) | of full |", f.name, f.tools));
        rule.push_str("---:|---:|");
    }
    println!("{header}");
    println!("{rule}");
    for (i, label) in ROWS.iter().enumerate() {
        let mut line = format!("| {label} |");
        for f in all {
            let tokens = median(f.rows[i].iter().map(|(a, b)| a + b));
            line.push_str(&format!(" {tokens:.0} | {} |", ratio(tokens, f.full)));
        }
        println!("{line}");
    }
    println!();

    println!(
        "Retrieval of the first `find_tools` call (query = the user's question, limit 5) \
         against filter mode (top_k 5), over the queries that name a relevant tool. \
         hit@5: at least one relevant tool found; recall: mean share of the relevant tools found."
    );
    println!();
    println!(
        "| dataset | queries | search hit@5 | search recall@5 | filter hit@5 | filter recall@5 | \
         queries with other tools than filter mode |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for f in all {
        let n = f.scored as f64;
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
            f.name,
            f.scored,
            f.search_hit / n,
            f.search_recall / n,
            f.filter_hit / n,
            f.filter_recall / n,
            f.differ
        );
    }
    for f in all.iter().filter(|f| f.differ > 0) {
        println!();
        println!(
            "{}: {} {} ({} where the search found fewer than 5 tools: it returns \
             only tools that score above zero, while filter mode fills top_k in catalog order; \
             {} with a question over {MAX_QUERY_BYTES} bytes, which a request's query is cut \
             to but a find_tools query is not).",
            f.name,
            f.differ,
            if f.differ == 1 {
                "query differs"
            } else {
                "queries differ"
            },
            f.differ_short,
            f.differ_long
        );
    }
    println!();

    println!(
        "The gateway's own time per search round, native (release build), model time \
         excluded: `plan()` for the first request (the catalog already analysed), and \
         `Session::on_reply` for a reply calling `find_tools` once (BM25 search over the whole \
         catalog and the follow-up body). One sample per query after a {WARM_UP}-query warm-up."
    );
    println!();
    println!(
        "| dataset | tools | queries | plan() median µs | plan() p90 µs | on_reply median µs | \
         on_reply p90 µs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for f in all {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            f.name,
            f.tools,
            f.queries,
            p(&f.plan_us, 50.0),
            p(&f.plan_us, 90.0),
            p(&f.on_reply_us, 50.0),
            p(&f.on_reply_us, 90.0)
        );
    }
}
