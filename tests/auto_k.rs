//! `auto_k` in the real Envoy with the real `.wasm`, two workers: a shared dataset's questions
//! replayed as traffic (the scripted model calls each question's relevant tools, `shadow.sample`
//! 0.1) calibrate a k per catalog, and new questions of the same dataset then keep at least the
//! target share of their calls in filtered requests. The k every response reports changes no
//! more often than `period_s` allows, whichever worker served it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use common::Gateway;
use common::llm::{Question, dataset_catalog};
use std::time::{Duration, Instant};

/// What one response said of its request.
pub struct Seen {
    /// `x-toolsift`'s `k=<source>:<k>`.
    pub source: String,
    pub k: usize,
    /// Shadowed: every tool went upstream.
    pub shadowed: bool,
    /// The question's tools the upstream received, of those it needs.
    pub kept: usize,
    pub needed: usize,
    /// The tools the upstream received, in order.
    pub tools: Vec<String>,
    at: Instant,
}

/// `q` asked through `gw` with `catalog`, the scripted model calling its relevant tools.
pub fn ask(gw: &Gateway, catalog: &[serde_json::Value], q: &Question) -> Seen {
    let body = serde_json::json!({"model": "gpt-4.1",
        "messages": [{"role": "user", "content": q.query}], "tools": catalog});
    let calls = q.relevant.join(",");
    let r = gw.post(
        "/v1/chat/completions",
        &[
            ("x-demo-model", "scripted"),
            ("x-demo-want", &q.relevant[0]),
            ("x-demo-call", &calls),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let header = r.header("x-toolsift").unwrap().to_owned();
    let k_item = header
        .split(' ')
        .find_map(|i| i.strip_prefix("k="))
        .unwrap_or_else(|| panic!("no k= in {header}"));
    let (source, k) = k_item.split_once(':').unwrap();
    let tools: Vec<String> = r
        .header("x-demo-tools")
        .unwrap_or("")
        .split(',')
        .map(str::to_owned)
        .collect();
    Seen {
        source: source.to_owned(),
        k: k.parse().unwrap(),
        shadowed: header.contains(" shadow="),
        kept: q.relevant.iter().filter(|t| tools.contains(t)).count(),
        needed: q.relevant.len(),
        tools,
        at: Instant::now(),
    }
}

#[test]
fn a_recall_target_learned_from_replayed_traffic_holds_for_new_questions() {
    const KEEP: f64 = 0.95;
    const PERIOD_S: u64 = 2;
    // 300 questions spread over the dataset, their tools in one catalog of 700; the even ones
    // are the traffic it learns from, the odd ones the new questions. Halves of 35 questions
    // (a 200-tool catalog) differed by more than the bound's margin: in one CI run the k
    // learned from one half kept 0.910 of the other's calls.
    let (catalog, questions) = dataset_catalog("seal_tools", 300, 700, true);
    assert_eq!(catalog.len(), 700);
    let (learn, fresh): (Vec<_>, Vec<_>) =
        questions.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let config = format!(
        r#"{{"top_k":3,"min_tools":10,"shadow":{{"sample":0.1}},
            "auto_k":{{"keep":{KEEP},"min_calls":150,"period_s":{PERIOD_S}}}}}"#
    );
    let gw = Gateway::start_with(&config, &["--concurrency", "2"], |y| y);
    let mut seen = Vec::new();
    // Before any shadowed call: `top_k`.
    let first = ask(&gw, &catalog, learn[0].1);
    assert_eq!((first.source.as_str(), first.k), ("default", 3));
    seen.push(first);
    // The traffic: each learning question 5 times over (750 requests, about 75 shadowed:
    // mostly distinct questions, so the bound's calls are close to independent).
    for round in 0..5 {
        for (_, q) in &learn {
            seen.push(ask(&gw, &catalog, q));
        }
        if round == 2 {
            assert!(gw.stat("toolsift.auto_k.learned") > 0);
        }
    }
    let learned = gw.stat("toolsift.auto_k.learned");
    assert!(learned >= 150, "shadowed calls learned: {learned}");
    // A period later the table holds the catalog's own k.
    std::thread::sleep(Duration::from_secs(PERIOD_S + 1));
    let mut filtered = (0, 0);
    let mut calibrated_k = None;
    {
        for (_, q) in &fresh {
            let s = ask(&gw, &catalog, q);
            assert_eq!(s.source, "auto", "a calibrated catalog");
            calibrated_k.get_or_insert(s.k);
            if !s.shadowed {
                filtered.0 += s.kept;
                filtered.1 += s.needed;
            }
            seen.push(s);
        }
    }
    let share = filtered.0 as f64 / filtered.1 as f64;
    let k = calibrated_k.unwrap();
    eprintln!(
        "auto_k: k {k}, new questions' calls kept in filtered requests {share:.3} ({} of {})",
        filtered.0, filtered.1
    );
    assert!(share >= KEEP - 0.01, "kept {share:.3} at k {k}");
    assert!(k > 3 && k <= 64, "k {k}");
    // The k changes at most once per period, whichever worker answered.
    let mut changes: Vec<Instant> = Vec::new();
    for pair in seen.windows(2) {
        if pair[1].k != pair[0].k {
            changes.push(pair[1].at);
        }
    }
    for pair in changes.windows(2) {
        let apart = pair[1] - pair[0];
        assert!(
            apart >= Duration::from_secs(PERIOD_S),
            "k changed {apart:?} apart"
        );
    }
    // Stats: each request's source and k; a calibrated catalog's k in the histogram.
    let auto = gw.stat("toolsift.auto_k.calibrated");
    assert!(auto >= fresh.len() as u64, "{auto}");
    assert!(gw.stat("toolsift.auto_k.default") >= 1);
    let stats = gw.admin_get("/stats?filter=auto_k.k");
    assert!(stats.contains("wasmcustom.toolsift.auto_k.k"), "{stats}");
}

/// With too few calls for its bound to reach `keep`, a catalog's k is capped at `max_k`, and
/// the header says what `max_k` keeps.
#[test]
fn a_capped_k_says_so() {
    let (catalog, questions) = dataset_catalog("seal_tools", 30, 200, true);
    let config = r#"{"top_k":3,"min_tools":10,"shadow":{"sample":1},
        "auto_k":{"keep":0.999,"min_calls":20,"max_k":6,"period_s":1}}"#;
    let gw = Gateway::start(config);
    for q in &questions {
        ask(&gw, &catalog, q);
    }
    std::thread::sleep(Duration::from_millis(2100));
    let r = {
        let q = &questions[0];
        let body = serde_json::json!({"model": "gpt-4.1",
            "messages": [{"role": "user", "content": q.query}], "tools": catalog});
        gw.post("/v1/chat/completions", &[], body.to_string().as_bytes())
    };
    let header = r.header("x-toolsift").unwrap();
    assert!(header.contains(" k=auto:6 capped=0."), "{header}");
    assert!(gw.stat("toolsift.auto_k.capped") >= 1);
}

/// The tool the learning traffic calls: 9th for the fixture requests' question
/// (`common::llm::QUESTION`), as tests/shadow.rs measures it.
const NINTH: &str = "merge_pull_request";

/// A fixture request (OpenAI Chat) whose scripted model calls [`NINTH`]: its answer.
fn call_ninth(gw: &Gateway) -> common::Response {
    let (path, body) = common::llm::request("openai_chat", false);
    let r = gw.post(
        &path,
        &[
            ("x-demo-model", "scripted"),
            ("x-demo-want", NINTH),
            ("x-demo-call", NINTH),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

/// `beyond: "find_tools"`: past a k capped at `max_k`, a request gets its k best tools and
/// `find_tools`; a call of a tool past them reaches the client after one search round, in
/// every dialect, and a shadowed request still goes uncut.
#[test]
fn past_a_capped_k_find_tools_finds_the_rest_in_every_dialect() {
    use common::llm::{called, request};
    let config = r#"{"top_k":3,"min_tools":10,"shadow":{"sample":0.3},
        "auto_k":{"keep":0.99,"min_calls":3,"max_k":2,"period_s":1,"beyond":"find_tools"}}"#;
    let gw = Gateway::start(config);
    // The traffic calls the 9th tool: the target needs more than max_k.
    for _ in 0..200 {
        if gw.stat("toolsift.auto_k.learned") >= 3 {
            break;
        }
        call_ninth(&gw);
    }
    assert!(gw.stat("toolsift.auto_k.learned") >= 3);
    std::thread::sleep(Duration::from_millis(2100));
    let mut cases = Vec::new();
    for dialect in common::DIALECTS {
        cases.push((dialect, false));
    }
    cases.push(("openai_chat", true));
    cases.push(("anthropic", true));
    for (dialect, stream) in &cases {
        let (path, body) = request(dialect, *stream);
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", NINTH),
            ("x-demo-query", "merge a pull request"),
            ("authorization", "Bearer client-key"),
            ("x-api-key", "client-key"),
        ];
        let mut searched = false;
        for _ in 0..40 {
            let r = gw.post(&path, &headers, body.to_string().as_bytes());
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            let header = r.header("x-toolsift").unwrap().to_owned();
            let calls = called(dialect, &r);
            assert!(
                calls.contains(&NINTH.to_owned()),
                "{dialect}: {calls:?} ({header})"
            );
            assert!(
                !calls.iter().any(|c| c == "find_tools"),
                "{dialect}: {calls:?}"
            );
            if header.contains(" shadow=") {
                // Shadowed: every tool went, and the model called it at once.
                assert!(
                    header.starts_with("kept=80 total=80 k=auto:2 capped=0.000"),
                    "{header}"
                );
                continue;
            }
            assert!(
                header.starts_with("kept=2 total=80 k=auto:2 capped=0.000")
                    && header.contains(" search=search"),
                "{dialect} stream {stream}: {header}"
            );
            searched = true;
            break;
        }
        assert!(searched, "{dialect}: no request escaped shadowing in 40");
    }
    assert_eq!(gw.stat("toolsift.auto_k.beyond"), cases.len() as u64);
    assert_eq!(gw.stat("toolsift.search.rounds"), cases.len() as u64);
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A plugin configuration served by ECDS from a file (`path`), as a control plane updates it in
/// place: the Wasm filter of `rendered` (one plugin) with `config` as its configuration.
pub fn write_ecds(path: &std::path::Path, wasm: &serde_json::Value, config: &str, version: u32) {
    let mut wasm = wasm.clone();
    wasm["config"]["configuration"]["value"] = serde_json::json!(config);
    let doc = serde_json::json!({
        "version_info": version.to_string(),
        "resources": [{
            "@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
            "name": "toolsift",
            "typed_config": wasm,
        }],
    });
    // Written aside and moved: Envoy watches the path for moves.
    let aside = path.with_extension("new");
    std::fs::write(&aside, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// An Envoy of its own whose plugin configuration (`config` first) ECDS serves from
/// `dir/ecds.json`: the gateway, and the Wasm filter to update it with ([`write_ecds`]).
pub fn start_with_ecds(dir: &std::path::Path, config: &str) -> (Gateway, serde_json::Value) {
    start_with_ecds_and(dir, config, &[], |yaml| yaml)
}

/// [`start_with_ecds`] with `extra_args` for Envoy and the rendered YAML passed through `edit`
/// first.
pub fn start_with_ecds_and(
    dir: &std::path::Path,
    config: &str,
    extra_args: &[&str],
    edit: impl Fn(String) -> String,
) -> (Gateway, serde_json::Value) {
    std::fs::create_dir_all(dir).unwrap();
    let ecds = dir.join("ecds.json");
    let wasm_file = dir.join("wasm.json");
    let mut args = vec![
        "--service-node",
        "toolsift-tests",
        "--service-cluster",
        "toolsift-tests",
    ];
    args.extend_from_slice(extra_args);
    let gw = Gateway::start_alone_rendered(&args, |ports| {
        let rendered = edit(common::render_envoy_yaml(
            config,
            ports.listener,
            ports.admin,
            ports.upstream,
        ));
        let mut doc = common::yaml::load_yaml(&rendered).remove(0);
        let filters = &mut doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"]
            [0]["typed_config"]["http_filters"];
        let wasm = filters[0]["typed_config"].clone();
        assert_eq!(filters[0]["name"], "toolsift");
        write_ecds(&ecds, &wasm, config, 1);
        filters[0] = serde_json::json!({
            "name": "toolsift",
            "config_discovery": {
                "config_source": {
                    "resource_api_version": "V3",
                    "path_config_source": {"path": ecds.display().to_string()},
                },
                "type_urls": ["type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"],
            },
        });
        std::fs::write(&wasm_file, wasm.to_string()).unwrap();
        doc.to_string()
    });
    let wasm = serde_json::from_slice(&std::fs::read(&wasm_file).unwrap()).unwrap();
    (gw, wasm)
}

/// Shared data belongs to the `vm_id`, across plugin configuration updates: a configuration
/// update through ECDS that lowers `max_k` from 40 to 4 finds the old configuration's table
/// (a k of 40) and calibration in the VM's shared data. Every request after the update is
/// selected within the new bounds (`top_k` until the new settings have calls of their own,
/// then a k of at most 4); the old values are counted as foreign and replaced.
#[test]
fn a_configuration_update_that_lowers_max_k_never_uses_the_old_table() {
    let config = |max_k: usize| {
        format!(
            r#"{{"top_k":3,"min_tools":10,"shadow":{{"sample":1}},
            "auto_k":{{"keep":0.99,"min_calls":3,"max_k":{max_k},"period_s":1}}}}"#
        )
    };
    let dir = std::env::temp_dir().join(format!("toolsift-ecds-{}", std::process::id()));
    let ecds = dir.join("ecds.json");
    let (gw, wasm) = start_with_ecds(&dir, &config(40));
    let ask = || {
        let r = call_ninth(&gw);
        let header = r.header("x-toolsift").unwrap().to_owned();
        let item = header
            .split(' ')
            .find_map(|i| i.strip_prefix("k="))
            .unwrap_or_else(|| panic!("no k= in {header}"))
            .to_owned();
        let (source, k) = item.split_once(':').unwrap();
        (source.to_owned(), k.parse::<usize>().unwrap(), header)
    };
    // The old configuration learns that its tool needs the 9th slot: with so few calls the
    // bound caps its k at max_k, 40.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (source, k, header) = ask();
        if (source.as_str(), k) == ("auto", 40) {
            assert!(header.contains(" capped="), "{header}");
            break;
        }
        assert!(Instant::now() < deadline, "no calibrated k of 40: {header}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(gw.stat("toolsift.auto_k.foreign"), 0);
    // The update: max_k 4, the same vm_id (the old table and calibration stay in shared data).
    write_ecds(&ecds, &wasm, &config(4), 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = Vec::new();
    loop {
        let (source, k, header) = ask();
        if k != 40 {
            after.push((source, k, header));
        }
        if after.iter().any(|(source, ..)| source == "auto") {
            break;
        }
        if after.is_empty() {
            assert!(Instant::now() < deadline, "the update never applied");
        } else {
            assert!(
                Instant::now() < deadline,
                "no calibrated k after the update: {after:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (source, k, header) in &after {
        match source.as_str() {
            "default" => assert_eq!(*k, 3, "{header}"),
            _ => assert!((1..=4).contains(k), "{header}"),
        }
    }
    // The first request the new configuration served found the old table, and top_k.
    assert_eq!(
        (after[0].0.as_str(), after[0].1),
        ("default", 3),
        "{:?}",
        after[0]
    );
    assert_eq!(after.last().unwrap().1, 4, "{after:?}");
    let foreign = gw.stat("toolsift.auto_k.foreign");
    assert!(
        foreign >= 2,
        "the old table and calibration counted: {foreign}"
    );
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
