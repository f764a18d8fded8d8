//! Questions in other languages, in the real Envoy with the real `.wasm` (issue 64): a question
//! the ranking cannot read (one in Japanese, Chinese or Arabic on a catalog described in
//! English; one in Spanish, German, French or Portuguese that shares a name or two with it) is
//! never cut to `top_k` by chance: it goes with `weak_query`'s `max_k` best tools, and
//! `x-toolsift`, the access log's record and `toolsift.weak_query` say so. The same question in
//! English is cut as before. A catalog described in Chinese or Japanese ranks for questions in
//! its own language (bigrams), and is cut. The questions are the hand-translated ones of
//! `tests/data/languages/` (the reporting half).

use crate::common;

use common::{Gateway, access_log_lines, access_log_to_file, record};
use serde_json::{Value, json};

/// The reporting half of `tests/data/languages/NAME/LANG.jsonl` (`NAME` a shared dataset or a
/// catalog of `tests/data/languages/`).
fn questions(name: &str, lang: &str) -> Vec<Value> {
    let path = common::repo()
        .join("tests/data/languages")
        .join(name)
        .join(format!("{lang}.jsonl"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|q| q["half"] == 1)
        .collect()
}

/// The relevant tools' names of `questions`.
fn relevant<'a>(questions: &[&'a Value]) -> Vec<&'a str> {
    questions
        .iter()
        .flat_map(|q| q["relevant"].as_array().unwrap().iter())
        .map(|r| r.as_str().unwrap())
        .collect()
}

/// 200 tools of the shared dataset `name`: every tool `wanted` names, then the catalog's first
/// others.
fn catalog(name: &str, wanted: &[&str]) -> Vec<Value> {
    let path = common::repo()
        .join("../shared/datasets")
        .join(name)
        .join("tools.jsonl");
    let tools: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (../shared/datasets is needed)", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let is_wanted = |t: &Value| wanted.contains(&t["function"]["name"].as_str().unwrap());
    let mut out: Vec<Value> = tools.iter().filter(|t| is_wanted(t)).cloned().collect();
    out.extend(
        tools
            .iter()
            .filter(|t| !is_wanted(t))
            .take(200 - out.len())
            .cloned(),
    );
    out
}

/// An OpenAI Chat request with `tools` asking `question`; the tools the upstream received and
/// `x-toolsift`.
fn ask(gw: &Gateway, tools: &[Value], question: &str) -> (usize, String) {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": question}],
                      "tools": tools});
    let r = gw.post(
        "/v1/chat/completions",
        &[("x-demo-echo", "body")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let header = r.header("x-toolsift").unwrap_or_default().to_owned();
    let sent = r.json()["tools"].as_array().map_or(0, Vec::len);
    (sent, header)
}

fn log_path() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "toolsift-languages-{}-{}",
        std::process::id(),
        Gateway::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("access.log")
}

/// In keyword mode, every translated question of the reporting half that the ranking cannot
/// read goes with 128 of its 200 tools (never 5), and says why; its English original is cut
/// to 5 and reads. Each of the seven languages has such questions on each shared dataset's
/// catalog (Japanese, Chinese and Arabic: most of them). The access log's record carries the
/// same `weak=`, and `toolsift.weak_query` counts them.
#[test]
fn a_question_the_ranking_cannot_read_is_never_cut_to_top_k_in_any_language() {
    let log = log_path();
    let path = log.clone();
    let gw = Gateway::start_with(r#"{"top_k":5}"#, &[], move |yaml| {
        access_log_to_file(&yaml, &path)
    });
    let mut weak_requests = 0;
    let mut requests = 0;
    for name in ["seal_tools", "toolbench", "livemcpbench"] {
        let english = questions(name, "en");
        for lang in ["es", "de", "fr", "pt", "ja", "zh", "ar"] {
            let translated = questions(name, lang);
            assert_eq!(translated.len(), english.len(), "{name}/{lang}");
            let mut weak_here = 0;
            for (q, en) in translated.iter().zip(&english).take(8) {
                let tools = catalog(name, &relevant(&[q]));
                let (sent, header) = ask(&gw, &tools, q["query"].as_str().unwrap());
                requests += 1;
                if header.contains(" weak=") {
                    weak_here += 1;
                    weak_requests += 1;
                    assert!(
                        header.starts_with("kept=128 total=200 weak="),
                        "{name}/{lang}: {header}"
                    );
                    assert_eq!(sent, 128, "{name}/{lang}: {header}");
                } else {
                    // Read: cut as any question.
                    assert!(
                        header.starts_with("kept=5 total=200"),
                        "{name}/{lang}: {header}"
                    );
                    assert_eq!(sent, 5, "{name}/{lang}");
                }
                let (sent, header) = ask(&gw, &tools, en["query"].as_str().unwrap());
                requests += 1;
                assert!(!header.contains("weak="), "{name}/en: {header}");
                assert_eq!(sent, 5, "{name}/en: {header}");
            }
            // livemcpbench describes some tools in Chinese: its Chinese questions are read.
            if !(name == "livemcpbench" && lang == "zh") {
                assert!(weak_here > 0, "{name}/{lang}: no question read as weak");
            }
            if ["ja", "zh", "ar"].contains(&lang) && name != "livemcpbench" {
                assert!(weak_here >= 6, "{name}/{lang}: {weak_here} of 8 weak");
            }
        }
    }
    assert_eq!(gw.stat("toolsift.weak_query"), weak_requests as u64);
    let lines = access_log_lines(&log, requests);
    let weak_records = lines
        .iter()
        .filter(|l| record(l).0.contains(" weak="))
        .count();
    assert_eq!(weak_records, weak_requests);
}

/// `weak_query.action`: `"pass"` sends every tool, `"top_k"` cuts as before (still reported),
/// `"max_k"` with its own bound sends that many; `min_coverage: 0` never finds a question weak.
#[test]
fn the_weak_query_actions_in_envoy() {
    let q = &questions("seal_tools", "ja")[0];
    let tools = catalog("seal_tools", &relevant(&[q]));
    let text = q["query"].as_str().unwrap();
    for (config, kept) in [
        (r#"{"weak_query":{"action":"pass"}}"#, 200),
        (r#"{"weak_query":{"action":"top_k"}}"#, 5),
        (r#"{"weak_query":{"max_k":40}}"#, 40),
    ] {
        let gw = Gateway::start(config);
        let (sent, header) = ask(&gw, &tools, text);
        assert_eq!(sent, kept, "{config}: {header}");
        assert!(
            header.starts_with(&format!("kept={kept} total=200 weak=")),
            "{config}: {header}"
        );
    }
    let gw = Gateway::start(r#"{"weak_query":{"min_coverage":0}}"#);
    let (sent, header) = ask(&gw, &tools, text);
    assert_eq!((sent, header.contains("weak=")), (5, false), "{header}");
}

/// A catalog described in Chinese (and one in Japanese) ranks for questions in its own language:
/// at least half of them are read (bigrams shared with the descriptions: 11 and 17 of 20 on
/// this half) and cut to `top_k`, the others sent with every tool, and the tools the upstream
/// receives hold at least two thirds of the questions' tools (.925 of them in both).
#[test]
fn a_catalog_in_chinese_or_japanese_ranks_for_questions_in_its_language() {
    let gw = Gateway::start(r#"{"top_k":5}"#);
    for lang in ["zh", "ja"] {
        let name = format!("catalog_{lang}");
        let path = common::repo()
            .join("tests/data/languages")
            .join(&name)
            .join("tools.jsonl");
        let tools: Vec<Value> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let questions = questions(&name, "queries");
        let (mut read, mut found, mut relevant) = (0, 0, 0);
        for q in &questions {
            let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": q["query"]}],
                              "tools": tools});
            let r = gw.post(
                "/v1/chat/completions",
                &[("x-demo-echo", "body")],
                body.to_string().as_bytes(),
            );
            let header = r.header("x-toolsift").unwrap_or_default().to_owned();
            if !header.contains("weak=") {
                read += 1;
                assert!(header.starts_with("kept=5 total=60"), "{lang}: {header}");
            } else {
                assert!(
                    header.starts_with("kept=60 total=60 weak="),
                    "{lang}: {header}"
                );
            }
            let sent: Vec<String> = r.json()["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect();
            for want in q["relevant"].as_array().unwrap() {
                relevant += 1;
                found += usize::from(sent.iter().any(|s| s == want.as_str().unwrap()));
            }
        }
        assert!(
            read * 2 >= questions.len(),
            "{lang}: {read} of {} read",
            questions.len()
        );
        assert!(
            found * 3 >= relevant * 2,
            "{lang}: {found} of {relevant} relevant tools kept"
        );
    }
}

/// The hand-written assistant turns of `tests/data/languages/turns.jsonl` of `lang` and `kind`
/// (`handback` or `ask`), reporting half.
fn turns(lang: &str, kind: &str) -> Vec<Value> {
    let path = common::repo().join("tests/data/languages/turns.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|t| t["lang"] == lang && t["kind"] == kind && t["half"] == 1)
        .collect()
}

/// Of `relevant`, the share the upstream received for `messages`.
fn kept_share(gw: &Gateway, tools: &[Value], messages: Value, relevant: &Value) -> f64 {
    let body = json!({"model": "gpt-4o", "messages": messages, "tools": tools});
    let r = gw.post(
        "/v1/chat/completions",
        &[("x-demo-echo", "body")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent: Vec<String> = r.json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    let relevant = relevant.as_array().unwrap();
    let found = relevant
        .iter()
        .filter(|want| sent.iter().any(|s| s == want.as_str().unwrap()))
        .count();
    found as f64 / relevant.len() as f64
}

/// Follow-ups in each of the seven languages, through Envoy: after a hand-back in the language
/// (which ends in a question mark, as hand-backs do), a full new question keeps its own tools
/// as asked alone (within .02 on the language's questions); after an ask, a short reply keeps
/// its question's tools as the question alone does.
#[test]
fn follow_ups_in_every_language_keep_their_tools() {
    let gw = Gateway::start(r#"{"top_k":5}"#);
    for lang in ["es", "de", "fr", "pt", "ja", "zh", "ar"] {
        let questions = questions("toolbench", lang);
        let (handbacks, asks) = (turns(lang, "handback"), turns(lang, "ask"));
        let (mut alone, mut after_handback, mut question, mut after_ask) = (0.0, 0.0, 0.0, 0.0);
        for (i, pair) in questions.windows(2).take(6).enumerate() {
            let (a, b) = (&pair[0], &pair[1]);
            let tools = catalog("toolbench", &relevant(&[a, b]));
            let user = |text: &Value| json!({"role": "user", "content": text});
            let assistant = |text: &Value| json!({"role": "assistant", "content": text});
            let handback = &handbacks[i % handbacks.len()]["assistant"];
            let ask = &asks[i % asks.len()];
            alone += kept_share(&gw, &tools, json!([user(&b["query"])]), &b["relevant"]);
            after_handback += kept_share(
                &gw,
                &tools,
                json!([user(&a["query"]), assistant(handback), user(&b["query"])]),
                &b["relevant"],
            );
            question += kept_share(&gw, &tools, json!([user(&a["query"])]), &a["relevant"]);
            after_ask += kept_share(
                &gw,
                &tools,
                json!([
                    user(&a["query"]),
                    assistant(&ask["assistant"]),
                    user(&ask["reply"])
                ]),
                &a["relevant"],
            );
        }
        assert!(
            after_handback / 6.0 >= alone / 6.0 - 0.02,
            "{lang}: a new question after a hand-back kept {after_handback:.2} of 6, alone {alone:.2}"
        );
        assert!(
            after_ask / 6.0 >= question / 6.0 - 0.02,
            "{lang}: a reply after an ask kept {after_ask:.2} of 6, its question alone {question:.2}"
        );
    }
}

/// Hybrid ranking with the multilingual embedder (`toolsift-embed --model e5`), through Envoy:
/// on seal_tools' reporting half, each language's questions keep Recall@5 (the first five of
/// `x-toolsift-tools`) within `HYBRID_GAP` of the same questions in English, far above what
/// keyword ranking keeps of them; English keeps what it keeps by keyword.
#[test]
fn hybrid_with_the_multilingual_embedder_reads_every_language() {
    let embed = common::EmbedServer::start_model("multilingual-e5-small");
    let english = questions("seal_tools", "en");
    let tools = catalog("seal_tools", &relevant(&english.iter().collect::<Vec<_>>()));
    // The whole catalog in the first request's call: its questions wait for it (no timing in
    // this test, only what is ranked).
    let config = json!({"top_k": 5, "debug": true, "ranking": "hybrid",
        "embeddings": {"cluster": "embeddings", "model": "multilingual-e5-small",
                       "timeout_ms": 60000, "max_batch": 256}});
    let port = embed.port;
    let gw = Gateway::start_with(&config.to_string(), &[], move |yaml| {
        yaml.replace("port_value: 18100", &format!("port_value: {port}"))
    });
    let recall_at_5 = |question: &Value| -> f64 {
        let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": question["query"]}],
                          "tools": tools});
        let r = gw.post("/v1/chat/completions", &[], body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        let header = r.header("x-toolsift").unwrap_or_default();
        assert!(header.contains("ranking=hybrid"), "{header}");
        let ranked: Vec<&str> = r
            .header("x-toolsift-tools")
            .unwrap_or_default()
            .split(',')
            .take(5)
            .map(|t| t.split('(').next().unwrap_or_default())
            .collect();
        let relevant = question["relevant"].as_array().unwrap();
        let found = relevant
            .iter()
            .filter(|want| ranked.contains(&want.as_str().unwrap()))
            .count();
        found as f64 / relevant.len() as f64
    };
    let mean = |qs: &[Value]| qs.iter().map(&recall_at_5).sum::<f64>() / qs.len() as f64;
    let n = english.len();
    let en = mean(&english[..n]);
    for lang in ["es", "de", "fr", "pt", "ja", "zh", "ar"] {
        let translated = questions("seal_tools", lang);
        let r = mean(&translated[..n]);
        eprintln!("{lang}: hybrid Recall@5 {r:.3}, English {en:.3}");
        assert!(
            r >= en - HYBRID_GAP,
            "{lang}: {r:.3} against English {en:.3}"
        );
    }
}

/// How far below English the translated questions may rank with the multilingual embedder: the
/// largest gap of a language on seal_tools' half 0 (Arabic, .287 before the fusion read
/// coverage, .204 after), and the sampling error of 24 questions (about .06)
/// (`docs/BENCHMARKS.md`, "Questions in other languages"). The issue's aim is .10.
const HYBRID_GAP: f64 = 0.35;
