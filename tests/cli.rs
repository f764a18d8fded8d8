//! The `toolsift` CLI, run as a user runs it: `explain` on the shipped example request,
//! configuration errors, `eval` on a small dataset written here whose numbers are worked
//! out by hand, and both with hybrid ranking against the real embeddings server
//! (`toolsift-embed`, built by `make embed`).

use crate::common;

use common::EmbedServer;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use toolsift::embeddings::MAX_SENTENCES;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/chat-60-tools.json");

fn toolsift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolsift"))
        .args(args)
        .output()
        .expect("run toolsift")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(out));
    stdout(out)
}

fn json(out: &Output) -> Value {
    serde_json::from_str(&ok(out)).expect("one JSON object")
}

/// A scratch folder of this test process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("toolsift-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The question is about pod logs and Slack: those tools rank on top (in some order).
/// The two tools the example's question cannot do without (fetch pod logs, post to Slack).
/// The other three kept tools depend on ranking weights and are not pinned down here.
const MUST_KEEP: [&str; 2] = ["get_pod_logs", "send_slack_message"];

/// `kept_tools` of an explain JSON, checked to hold [`MUST_KEEP`].
fn kept_tools(v: &Value) -> Vec<&str> {
    let kept: Vec<&str> = v["kept_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for name in MUST_KEEP {
        assert!(kept.contains(&name), "{name} not kept: {kept:?}");
    }
    kept
}

#[test]
fn explain_text_lists_every_tool_with_its_reason() {
    let text = ok(&toolsift(&["explain", EXAMPLE]));
    assert!(
        text.contains("dialect    openai_chat (guessed from the body"),
        "{text}"
    );
    assert!(
        text.contains("query      The checkout pods keep crashing."),
        "{text}"
    );
    assert!(
        text.contains("outcome    rewritten: 5 of 60 function tools kept"),
        "{text}"
    );
    assert!(text.contains("x-toolsift: kept=5 total=60"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .collect();
    assert_eq!(rows.len(), 60, "{text}");
    for row in &rows[..5] {
        assert!(row.contains(" yes ") && row.contains("ranked"), "{row}");
    }
    for name in MUST_KEEP {
        assert!(
            rows[..5]
                .iter()
                .any(|row| row.contains(&format!(" {name} "))),
            "{name} not in the top 5:\n{text}"
        );
    }
    assert!(
        rows[5..]
            .iter()
            .all(|r| r.contains(" no ") && r.contains("below top_k"))
    );
    let tokens = text.lines().find(|l| l.starts_with("tokens")).unwrap();
    assert!(
        tokens.contains("o200k:") && tokens.contains("estimate (chars/4):"),
        "{tokens}"
    );
}

#[test]
fn explain_json_has_the_same_content() {
    let v = json(&toolsift(&[
        "explain",
        "--json",
        "--path",
        "/v1/chat/completions",
        EXAMPLE,
    ]));
    assert_eq!(v["dialect"], "openai_chat");
    assert_eq!(v["dialect_source"], "from the path /v1/chat/completions");
    assert_eq!(v["outcome"], "rewritten");
    assert!(v["skip_reason"].is_null());
    assert_eq!(
        (v["total"].as_u64(), v["kept"].as_u64()),
        (Some(60), Some(5))
    );
    let mut kept = kept_tools(&v);
    let tools = v["tools"].as_array().unwrap();
    let mut kept_rows: Vec<&str> = tools
        .iter()
        .filter(|t| t["kept"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    kept.sort_unstable();
    kept_rows.sort_unstable();
    assert_eq!(kept, kept_rows, "kept_tools and the kept rows agree");
    assert_eq!(tools.len(), 60);
    for (i, t) in tools.iter().enumerate() {
        assert_eq!(t["rank"].as_u64(), Some(i as u64 + 1));
        let want = if i < 5 { "ranked" } else { "below_top_k" };
        assert_eq!(t["verdict"], want, "{t}");
        assert_eq!(t["kept"], i < 5);
    }
    let scores: Vec<f64> = tools.iter().map(|t| t["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "rank order");
    let n = |k: &str| v[k].as_u64().unwrap();
    assert!(n("tokens_after") < n("tokens_before") && n("tokens_after") > 0);
    assert!(n("tokens_estimate_after") < n("tokens_estimate_before"));
    let kept_tokens: u64 = tools[..5]
        .iter()
        .map(|t| t["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(kept_tokens, n("tokens_after"));
    assert!(n("body_bytes_after") < n("body_bytes_before"));
    assert_eq!(v["tokenizer"], "o200k");
}

#[test]
fn explain_shows_pins_min_score_budget_and_skips() {
    let dir = Scratch::new("pins");
    let verdicts = |v: &Value| -> Vec<String> {
        let tools = v["tools"].as_array().unwrap();
        tools
            .iter()
            .map(|t| t["verdict"].as_str().unwrap().to_owned())
            .collect()
    };
    let config = dir.write(
        "pins.json",
        r#"{"top_k":2,"always_include":["web_search"]}"#,
    );
    let v = json(&toolsift(&[
        "explain", "--json", "--config", &config, EXAMPLE,
    ]));
    let verdict = |name: &str| {
        let tools = v["tools"].as_array().unwrap();
        tools.iter().find(|t| t["name"] == name).unwrap()["verdict"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(verdict("web_search"), "always_include");
    assert_eq!(v["kept"], 3);
    assert_eq!(verdicts(&v)[..2], ["ranked", "ranked"]);

    // Thresholds set between the scores and sizes of the default ranking.
    let base = json(&toolsift(&["explain", "--json", EXAMPLE]));
    let tools = base["tools"].as_array().unwrap();
    let score = |i: usize| tools[i]["score"].as_f64().unwrap();
    let estimate = |i: usize| tools[i]["tokens_estimate"].as_u64().unwrap();
    assert!(score(1) > score(2), "distinct scores at ranks 2 and 3");
    let min_score = dir.write(
        "min_score.json",
        &format!(
            r#"{{"top_k":5,"min_score":{}}}"#,
            (score(1) + score(2)) / 2.0
        ),
    );
    let v = json(&toolsift(&[
        "explain", "--json", "--config", &min_score, EXAMPLE,
    ]));
    assert_eq!(
        verdicts(&v)[..4],
        ["ranked", "ranked", "below_min_score", "below_min_score"]
    );
    assert_eq!(v["tools"][2]["reason"], "below min_score");
    let budget = dir.write(
        "budget.json",
        &format!(
            r#"{{"top_k":5,"max_tool_tokens":{}}}"#,
            estimate(0) + estimate(1)
        ),
    );
    let v = json(&toolsift(&[
        "explain", "--json", "--config", &budget, EXAMPLE,
    ]));
    assert_eq!(
        verdicts(&v)[..4],
        ["ranked", "ranked", "over_budget", "over_budget"]
    );
    assert_eq!(
        v["tokens_estimate_after"].as_u64(),
        Some(estimate(0) + estimate(1))
    );
    let text = ok(&toolsift(&["explain", "--config", &budget, EXAMPLE]));
    assert!(text.contains("over budget"), "{text}");

    // Few tools: the request passes unchanged, and the ranking is still shown.
    let few = dir.write("few.json", r#"{"top_k":5,"min_tools":100}"#);
    let v = json(&toolsift(&["explain", "--json", "--config", &few, EXAMPLE]));
    assert_eq!(v["outcome"], "skipped");
    assert_eq!(v["skip_reason"], "few_tools");
    assert_eq!(v["x_toolsift"], "kept=60 total=60 skipped=few_tools");
    assert_eq!(
        v["tools"][0]["name"], base["tools"][0]["name"],
        "the same ranking"
    );
    assert_eq!(v["tools"][0]["verdict"], "request_skipped");
    assert_eq!(v["tokens_before"], v["tokens_after"]);
    let text = ok(&toolsift(&["explain", "--config", &few, EXAMPLE]));
    assert!(
        text.contains("skipped: few_tools (60 function tools, not more than min_tools 100)"),
        "{text}"
    );
}

#[test]
fn explain_guesses_other_dialects() {
    let dir = Scratch::new("dialects");
    let tools: Vec<String> = (0..30)
        .map(|i| format!(r#"{{"name":"tool_{i}","description":"does thing {i}","input_schema":{{"type":"object"}}}}"#))
        .collect();
    let body = format!(
        r#"{{"model":"m","max_tokens":10,"messages":[{{"role":"user","content":"run thing 7"}}],"tools":[{}]}}"#,
        tools.join(",")
    );
    let request = dir.write("anthropic.json", &body);
    let v = json(&toolsift(&["explain", "--json", &request]));
    assert_eq!(v["dialect"], "anthropic");
    assert_eq!(v["tools"][0]["name"], "tool_7");
    let v = json(&toolsift(&[
        "explain",
        "--json",
        "--path",
        "/v1/messages",
        &request,
    ]));
    assert_eq!(v["dialect"], "anthropic");
    // The wrong dialect is a clear error, not a silent empty answer.
    let out = toolsift(&["explain", "--dialect", "gemini", &request]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a gemini request body"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn errors_name_the_problem_and_exit_2() {
    let dir = Scratch::new("errors");
    let cases = [
        (r#"{"top_k":"5"}"#, "field `top_k`: invalid type"),
        (r#"{"topk":5}"#, "unknown field `topk`"),
        (r#"{"top_k":0}"#, "field `top_k`: must be at least 1"),
        (r#"{"min_score":-1}"#, "field `min_score`"),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let path = dir.write(&format!("bad{i}.json"), config);
        let out = toolsift(&["explain", "--config", &path, EXAMPLE]);
        assert_eq!(out.status.code(), Some(2), "{config}");
        let err = stderr(&out);
        assert!(err.contains(want) && err.contains(&path), "{config}: {err}");
        assert!(stdout(&out).is_empty());
    }
    let missing = dir.path("nope.json");
    let out = toolsift(&["explain", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot read request") && stderr(&out).contains("nope.json"));

    let broken = dir.write("broken.json", "{\"messages\": [");
    fails_with(&["explain", &broken], "is not valid JSON");
    fails_with(
        &["explain", "--dialect", "cohere", EXAMPLE],
        "unknown dialect `cohere`",
    );
    fails_with(&["explain", "--path", "/v1/embeddings", EXAMPLE], "not_llm");
}

/// The command exits 2 and says `message` on stderr.
fn fails_with(args: &[&str], message: &str) {
    let out = toolsift(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
}

/// Five tools with words of their own, so each ranking is worked out by hand.
const TOOLS: &str = r#"{"type":"function","function":{"name":"get_weather","description":"Current weather forecast for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}
{"type":"function","function":{"name":"send_email","description":"Send an email message","parameters":{"type":"object","properties":{"to":{"type":"string"}}}}}
{"type":"function","function":{"name":"create_invoice","description":"Create a billing invoice","parameters":{"type":"object","properties":{"amount":{"type":"number"}}}}}
{"type":"function","function":{"name":"list_files","description":"List files in a folder","parameters":{"type":"object","properties":{"folder":{"type":"string"}}}}}
{"type":"function","function":{"name":"translate_text","description":"Translate text between languages","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}}
"#;

/// q1: its one tool ranks 1st. q2: both tools match, ranks 1 and 2 in some order.
/// q3: translate_text (two words) 1st, get_weather (one word) 2nd, list_files unmatched.
/// q4: list_files 1st; `no_such_tool` is not in the catalog, a miss at every k.
const QUERIES: &str = r#"{"id":"q1","query":"weather forecast for Paris","relevant":["get_weather"]}
{"id":"q2","query":"send an email with the invoice","relevant":["send_email","create_invoice"]}
{"id":"q3","query":"translate the text of the weather report","relevant":["translate_text","list_files"]}
{"id":"q4","query":"list the files in my folder","relevant":["list_files","no_such_tool"]}
"#;

fn close(v: &Value, key: &str, want: f64) {
    let got = v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"));
    assert!((got - want).abs() < 1e-9, "{key}: {got} != {want}");
}

#[test]
fn eval_json_matches_hand_computed_recall() {
    let dir = Scratch::new("eval");
    std::fs::create_dir_all(dir.path("tiny")).unwrap();
    let tools = dir.write("tiny/tools.jsonl", TOOLS);
    let queries = dir.write("tiny/queries.jsonl", QUERIES);
    let out = toolsift(&[
        "eval",
        "--tools",
        &tools,
        "--queries",
        &queries,
        "--k",
        "1,2,5",
        "--json",
    ]);
    let v = json(&out);
    assert!(
        stderr(&out).contains("1 relevant tool names are not in the catalog"),
        "{}",
        stderr(&out)
    );
    assert_eq!(v["dataset"], "tiny");
    assert_eq!(
        (v["queries"].as_u64(), v["tools"].as_u64()),
        (Some(4), Some(5))
    );
    assert_eq!(v["unknown_relevant"], 1);
    // Recall per query at k = 1, 2, 5: q1 1 1 1; q2 .5 1 1; q3 .5 .5 1; q4 .5 .5 .5.
    close(&v, "recall@1", (1.0 + 0.5 + 0.5 + 0.5) / 4.0);
    close(&v, "recall@2", (1.0 + 1.0 + 0.5 + 0.5) / 4.0);
    close(&v, "recall@5", (1.0 + 1.0 + 1.0 + 0.5) / 4.0);
    close(&v, "complete@1", 0.25);
    close(&v, "complete@2", 0.5);
    close(&v, "complete@5", 0.75);
    // A relevant tool ranks first in every query.
    close(&v, "mrr", 1.0);
    // The top 5 is the whole catalog.
    let catalog = v["tokens_catalog"].as_f64().unwrap();
    assert!(catalog > 0.0);
    close(&v, "tokens@5", catalog);
    assert!(v["tokens@1"].as_f64().unwrap() < catalog);
    for key in [
        "ndcg@10",
        "rank_us_median",
        "rank_us_p99",
        "tokens_estimate_catalog",
    ] {
        assert!(v[key].is_number(), "{key}");
    }
    assert!(v.get("recall@3").is_none(), "only the asked k values");
    assert!(v.get("per_query").is_none());

    // The default configuration keeps top_k = 5: all of this catalog.
    close(&v, "selected_recall", 0.875);
    let v = json(&toolsift(&[
        "eval",
        "--tools",
        &tools,
        "--queries",
        &queries,
        "--k",
        "2",
        "--json",
        "--per-query",
    ]));
    let q3 = &v["per_query"][2];
    assert_eq!(q3["id"], "q3");
    assert_eq!(q3["relevant_ranks"]["translate_text"], 1);
    assert!(q3["relevant_ranks"]["list_files"].as_u64().unwrap() >= 3);
    assert!(v["per_query"][3]["relevant_ranks"]["no_such_tool"].is_null());
}

#[test]
fn eval_text_and_plot() {
    let dir = Scratch::new("plot");
    let tools = dir.write("tools.jsonl", TOOLS);
    let queries = dir.write("queries.jsonl", QUERIES);
    let svg = dir.path("out.svg");
    let text = ok(&toolsift(&[
        "eval",
        "--tools",
        &tools,
        "--queries",
        &queries,
        "--name",
        "tiny set",
        "--plot",
        svg.to_str().unwrap(),
        "--tokenizer",
        "cl100k",
    ]));
    assert!(text.starts_with("tiny set: 5 tools, 4 queries"), "{text}");
    for want in [
        "Recall@k",
        "Complete@k",
        "tokens@k cl100k",
        "NDCG@10",
        "MRR",
        "median",
        "p99",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("5 "))
        .unwrap();
    assert!(row.contains("0.875") && row.contains("0.750"), "{row}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("toolsift on tiny set"));
    assert!(svg.contains("Recall@k") && svg.contains("kept tokens"));
}

#[test]
fn eval_errors_name_the_file_and_line() {
    let dir = Scratch::new("eval-errors");
    let tools = dir.write("tools.jsonl", &format!("{TOOLS}{{\"name\":\"flat\"}}\n"));
    let queries = dir.write("queries.jsonl", QUERIES);
    let out = toolsift(&["eval", "--tools", &tools, "--queries", &queries]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("tools.jsonl line 6") && err.contains("OpenAI function tool"),
        "{err}"
    );
    let good = dir.write("good.jsonl", TOOLS);
    let out = toolsift(&["eval", "--tools", &good, "--queries", &queries, "--k", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let missing = Path::new(&queries).with_file_name("missing.jsonl");
    let out = toolsift(&[
        "eval",
        "--tools",
        &good,
        "--queries",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.jsonl"), "{}", stderr(&out));
}

const MODEL: &str = "all-MiniLM-L6-v2";

/// The 80-tool fixture catalog as a tools.jsonl, and queries that need it: three whose words
/// no tool has (keyword ranking cannot find their tool), and some of several sentences.
fn hybrid_dataset(dir: &Scratch) -> (String, String, usize, usize) {
    let catalog = common::catalog();
    let lines: Vec<String> = catalog.iter().map(Value::to_string).collect();
    let tools = dir.write("tools.jsonl", &(lines.join("\n") + "\n"));
    let queries_path = common::repo().join("tests/fixtures/hybrid-queries.jsonl");
    let text = std::fs::read_to_string(&queries_path).unwrap();
    // Texts embedded per query: the whole query and each of its sentences, as the filter does.
    let query_texts: usize = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let q: Value = serde_json::from_str(l).unwrap();
            toolsift::embeddings::query_texts(q["query"].as_str().unwrap(), MAX_SENTENCES).len()
        })
        .sum();
    (
        tools,
        queries_path.to_str().unwrap().to_owned(),
        catalog.len(),
        query_texts,
    )
}

fn ranks(v: &Value, id: &str) -> Vec<u64> {
    let row = v["per_query"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == id)
        .unwrap_or_else(|| panic!("no query {id}"));
    row["relevant_ranks"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r.as_u64().unwrap())
        .collect()
}

#[test]
fn eval_hybrid_embeds_each_tool_once() {
    let server = EmbedServer::start();
    let dir = Scratch::new("hybrid-eval");
    let (tools, queries, n_tools, n_query_texts) = hybrid_dataset(&dir);
    let n_queries = 8;
    let url = server.url();
    let base = ["eval", "--tools", &tools, "--queries", &queries];
    let hybrid = json(&toolsift(
        &[
            &base[..],
            &[
                "--json",
                "--per-query",
                "--embeddings-url",
                &url,
                "--embeddings-model",
                MODEL,
            ],
        ]
        .concat(),
    ));
    assert_eq!(hybrid["ranking"], "hybrid");
    assert_eq!(hybrid["queries"], n_queries);
    assert_eq!(hybrid["embeddings"]["url"], url.as_str());
    assert_eq!(hybrid["embeddings"]["model"], MODEL);
    assert_eq!(hybrid["rrf_k"], 1.0);
    assert_eq!(hybrid["channel_weights"]["vector"], 1.0);

    // Every tool text embedded once for the whole run, plus each query's texts: not tools ×
    // queries. The catalog goes in calls of 64 on the first query; each later query is one call.
    let stats = server.stats();
    let inputs = (n_tools + n_query_texts) as u64;
    assert_eq!(stats["inputs"].as_u64(), Some(inputs), "{stats}");
    assert_eq!(hybrid["embeddings"]["inputs"].as_u64(), Some(inputs));
    let calls = n_tools.div_ceil(64) as u64 + (n_queries - 1);
    assert_eq!(stats["requests"].as_u64(), Some(calls), "{stats}");
    assert_eq!(hybrid["embeddings"]["calls"].as_u64(), Some(calls));

    // Keyword ranking on the same data: no calls, and the queries without a shared word miss.
    let keyword = json(&toolsift(&[&base[..], &["--json", "--per-query"]].concat()));
    assert_eq!(keyword["ranking"], "keyword");
    assert!(keyword.get("embeddings").is_none());
    assert_eq!(server.stats()["inputs"].as_u64(), Some(inputs));
    for id in ["umbrella", "yen", "jazz"] {
        let (h, k) = (ranks(&hybrid, id)[0], ranks(&keyword, id)[0]);
        assert!(h <= 5 && k > 10, "{id}: hybrid rank {h}, keyword rank {k}");
    }
    let recall = |v: &Value| v["recall@5"].as_f64().unwrap();
    assert!(
        recall(&hybrid) > recall(&keyword),
        "hybrid {} vs keyword {}",
        recall(&hybrid),
        recall(&keyword)
    );

    // The table says how it ranked and what the embeddings cost (on the five-tool dataset:
    // 5 tool texts and 4 queries of one sentence each, in one call per query).
    let tiny_tools = dir.write("tiny-tools.jsonl", TOOLS);
    let tiny_queries = dir.write("tiny-queries.jsonl", QUERIES);
    let text = ok(&toolsift(&[
        "eval",
        "--tools",
        &tiny_tools,
        "--queries",
        &tiny_queries,
        "--embeddings-url",
        &url,
        "--embeddings-model",
        MODEL,
    ]));
    assert!(text.contains("hybrid ranking: rrf_k 1"), "{text}");
    assert!(
        text.contains(&format!("embeddings {MODEL} from {url}")),
        "{text}"
    );
    assert!(text.contains("embeddings: 9 texts in 4 calls"), "{text}");
}

#[test]
fn explain_hybrid_shows_the_channels_of_each_kept_tool() {
    let server = EmbedServer::start();
    let url = server.url();
    let flags = [
        "--embeddings-url",
        url.as_str(),
        "--embeddings-model",
        MODEL,
    ];
    let v = json(&toolsift(
        &[&["explain", "--json"][..], &flags, &[EXAMPLE]].concat(),
    ));
    assert_eq!(v["ranking"], "hybrid");
    assert_eq!(v["outcome"], "rewritten");
    assert_eq!(v["kept"], 5);
    // One call: the query's texts and the 60 tools.
    let query = v["query"].as_str().unwrap();
    let inputs = 60 + toolsift::embeddings::query_texts(query, MAX_SENTENCES).len() as u64;
    assert_eq!(v["embeddings"]["calls"], 1);
    assert_eq!(v["embeddings"]["inputs"].as_u64(), Some(inputs));
    let stats = server.stats();
    assert_eq!(
        (stats["requests"].as_u64(), stats["inputs"].as_u64()),
        (Some(1), Some(inputs)),
        "{stats}"
    );
    kept_tools(&v);
    // Every tool has a vector, so the vector channel votes for each; kept_channels lists the
    // kept tools in rank order with their votes, as the filter's debug output does.
    let tools = v["tools"].as_array().unwrap();
    let kept_channels = v["kept_channels"].as_str().unwrap();
    let mut expected = Vec::new();
    for t in tools.iter().filter(|t| t["kept"] == true) {
        let channels = t["channels"].as_str().unwrap();
        assert!(channels.contains("vector="), "{t}");
        expected.push(format!("{}({channels})", t["name"].as_str().unwrap()));
    }
    assert_eq!(kept_channels, expected.join(","));
    assert!(
        tools[0]["channels"].as_str().unwrap().contains("bm25=1:"),
        "the best tool is BM25's best too: {}",
        tools[0]
    );

    let text = ok(&toolsift(&[&["explain"][..], &flags, &[EXAMPLE]].concat()));
    assert!(text.contains("ranking    hybrid: rrf_k 1"), "{text}");
    assert!(text.contains("channels (kept tools)"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" ranked ")).collect();
    assert_eq!(rows.len(), 5, "{text}");
    assert!(rows.iter().all(|r| r.contains("vector=")), "{text}");
    let dropped = text.lines().find(|l| l.contains("below top_k")).unwrap();
    assert!(!dropped.contains("vector="), "{dropped}");

    // A server that answers, but not an embeddings response: exit 2, naming URL and status.
    let wrong = format!("http://127.0.0.1:{}/v2/nothing", server.port);
    let out = toolsift(&[
        "explain",
        "--embeddings-url",
        &wrong,
        "--embeddings-model",
        MODEL,
        EXAMPLE,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("embeddings service {wrong}")) && err.contains("HTTP 404"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn hybrid_fails_clearly_when_the_service_does() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1/embeddings");
    let dir = Scratch::new("hybrid-down");
    let tools = dir.write("tools.jsonl", TOOLS);
    let queries = dir.write("queries.jsonl", QUERIES);
    let flags = [
        "--embeddings-url",
        url.as_str(),
        "--embeddings-model",
        MODEL,
    ];
    for args in [
        [
            &["eval", "--tools", &tools, "--queries", &queries][..],
            &flags,
        ]
        .concat(),
        [
            &["eval", "--json", "--tools", &tools, "--queries", &queries][..],
            &flags,
        ]
        .concat(),
        [&["explain"][..], &flags, &[EXAMPLE]].concat(),
    ] {
        let out = toolsift(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("embeddings service {url}: cannot connect")),
            "{args:?}: {err}"
        );
        assert!(stdout(&out).is_empty(), "no keyword results instead");
    }
    // Both flags or neither; http:// or https:// only.
    fails_with(
        &[
            "eval",
            "--tools",
            &tools,
            "--queries",
            &queries,
            "--embeddings-url",
            &url,
        ],
        "--embeddings-model",
    );
    fails_with(
        &["explain", "--embeddings-model", MODEL, EXAMPLE],
        "--embeddings-url",
    );
    fails_with(
        &[
            "explain",
            "--embeddings-url",
            "ftp://api.openai.com/v1/embeddings",
            "--embeddings-model",
            MODEL,
            EXAMPLE,
        ],
        "only http:// and https:// URLs are supported",
    );
}

/// `explain` on the example's question followed up by a confirmation: ranked with the question
/// before it (the question first, then the follow-up), as the filter ranks it; the text output
/// shows the turns apart.
#[test]
fn explain_ranks_a_follow_up_with_its_question() {
    let dir = Scratch::new("followup");
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    let question = body["messages"][1]["content"].as_str().unwrap().to_owned();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(serde_json::json!({"role": "assistant", "content": "Shall I go ahead?"}));
    messages.push(serde_json::json!({"role": "user", "content": "Yes, please go ahead."}));
    let request = dir.write("followup.json", &body.to_string());
    let v = json(&toolsift(&["explain", "--json", &request]));
    kept_tools(&v);
    assert_eq!(
        v["query"].as_str().unwrap(),
        format!("{question}\n\u{1e}Yes, please go ahead.")
    );
    let text = ok(&toolsift(&["explain", &request]));
    assert!(
        text.contains(&format!("{question} | Yes, please go ahead.")),
        "{text}"
    );
    // After a hand-back, a short new topic ranks on its own words; the question only orders
    // what they leave.
    let messages = body["messages"].as_array_mut().unwrap();
    messages.truncate(2);
    messages.push(serde_json::json!({"role": "assistant", "content": "Done. Anything else?"}));
    messages.push(serde_json::json!({"role": "user", "content": "What about the weather?"}));
    let request = dir.write("topic.json", &body.to_string());
    let v = json(&toolsift(&["explain", "--json", &request]));
    assert_eq!(
        v["query"].as_str().unwrap(),
        format!("What about the weather?\n\u{1f}{question}")
    );
    let text = ok(&toolsift(&["explain", &request]));
    assert!(
        text.contains(&format!("What about the weather? | ties: {question}")),
        "{text}"
    );
}

/// The tools, queries and configuration (`top_k` 1) of the `eval --followups` tests.
fn tiny_followup_files(dir: &Scratch) -> [String; 3] {
    std::fs::create_dir_all(dir.path("tiny")).unwrap();
    [
        dir.write("tiny/tools.jsonl", TOOLS),
        dir.write("tiny/queries.jsonl", QUERIES),
        dir.write("config.json", r#"{"top_k":1,"min_tools":0}"#),
    ]
}

/// `eval --followups` on those files.
fn followup_args<'a>(tools: &'a str, queries: &'a str, config: &'a str) -> Vec<&'a str> {
    vec![
        "eval",
        "--tools",
        tools,
        "--queries",
        queries,
        "--config",
        config,
        "--followups",
    ]
}

/// `eval --followups --generated`: every family of the grammar, each question in a catalog of
/// the size asked, by half; `--generated` means nothing without `--followups`.
#[test]
fn eval_followups_generated_reports_every_family() {
    let dir = Scratch::new("generated");
    let [tools, queries, config] = tiny_followup_files(&dir);
    let mut base = followup_args(&tools, &queries, &config);
    base.extend(["--generated", "--catalog-size", "4"]);
    let v = json(&toolsift(&[&base[..], &["--json"]].concat()));
    assert_eq!((v["catalog"].as_u64(), v["k"].as_u64()), (Some(4), Some(1)));
    let families: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["family"].as_str().unwrap())
        .collect();
    assert_eq!(
        families,
        [
            "confirmation",
            "other_language",
            "retry",
            "same_for",
            "topic_word",
            "topic_words",
            "topic_phrase",
            "new_question"
        ]
    );
    let new_question = &v["rows"][7];
    close(
        new_question,
        "filter",
        new_question["latest_only"].as_f64().unwrap(),
    );
    let odd = json(&toolsift(&[&base[..], &["--json", "--half", "1"]].concat()));
    assert_eq!(odd["half"], 1);
    assert!(odd["questions"].as_u64() < v["questions"].as_u64(), "{odd}");
    assert_eq!(v["assistant"], "fifth");
    assert!(v["asks_read"][1].as_u64() > Some(0), "{v}");
    let text = ok(&toolsift(&base));
    assert!(
        text.contains("catalogs of 4 tools")
            && text.contains("topic_phrase")
            && text.contains("the assistant's turns read right")
            && text.contains("margin by form"),
        "{text}"
    );
    let lists = json(&toolsift(
        &[&base[..], &["--json", "--assistant", "lists"]].concat(),
    ));
    assert_eq!(lists["assistant"], "lists");
    let wrong = toolsift(&[&base[..], &["--assistant", "nope"]].concat());
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("one of lists, first"));
    let alone = toolsift(&[
        "eval",
        "--tools",
        &tools,
        "--queries",
        &queries,
        "--generated",
    ]);
    assert!(!alone.status.success());
}

/// `eval --followups`: the question's Recall@1, and each follow-up's and topic shift's, alone
/// and as the filter ranks it. No follow-up word is in this catalog, so the filter's rankings are the questions'
/// own and a follow-up alone ranks in catalog order (get_weather first: q1's).
#[test]
fn eval_followups_compares_each_follow_up_with_its_question() {
    let dir = Scratch::new("followups");
    let [tools, queries, config] = tiny_followup_files(&dir);
    let args = followup_args(&tools, &queries, &config);
    let mut with_json = args.clone();
    with_json.push("--json");
    let v = json(&toolsift(&with_json));
    assert_eq!((v["k"].as_u64(), v["queries"].as_u64()), (Some(1), Some(4)));
    close(&v, "question", (1.0 + 0.5 + 0.5 + 0.5) / 4.0);
    let rows = v["rows"].as_array().unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    let follow_ups = toolsift::offline::eval::FOLLOW_UPS.map(|(kind, _)| kind);
    let shifts = toolsift::offline::eval::SHIFTS.map(|(kind, _)| kind);
    assert_eq!(kinds, [&follow_ups[..], &shifts[..]].concat());
    let (follow_ups, shifts) = rows.split_at(follow_ups.len());
    for row in &follow_ups[..3] {
        close(row, "filter", (1.0 + 0.5 + 0.5 + 0.5) / 4.0);
        close(row, "latest_only", 1.0 / 4.0);
    }
    // Each query's topic in a word or two of one tool each, after another: ranked alone.
    for row in shifts {
        assert_eq!(row["queries"], 4, "{row}");
        close(row, "filter", row["latest_only"].as_f64().unwrap());
    }
    close(&shifts[2], "filter", (1.0 + 0.5 + 0.5 + 0.5) / 4.0);
    let text = ok(&toolsift(&args));
    assert!(text.contains("Yes, please go ahead."), "{text}");
    assert!(text.contains("What about <its 2 rarest words>?"), "{text}");
}
