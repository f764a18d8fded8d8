//! The fleet's calibration in real Envoys with the real `.wasm` (issue 55): replicas' access
//! logs → `toolsift calibrate` → `auto_k.calibration` → every replica, and ECDS updating a
//! running Envoy's calibration in place.
//!
//! The traffic: a shared dataset's questions in one 700-tool catalog, the scripted model
//! calling each question's relevant tools. The even questions are the traffic replicas learn
//! from (every request shadowed), the odd ones held out: each is sent to every replica, and
//! only filtered requests (the held-out replicas shadow one in a thousand) are compared.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use crate::auto_k::{Seen as Answer, ask, start_with_ecds, start_with_ecds_and, write_ecds};
use common::Gateway;
use common::llm::{Question, dataset_catalog};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const KEEP: f64 = 0.95;
const MAX_K: usize = 64;
/// Replicas learning apart.
const REPLICAS: usize = 4;

/// The plugin configuration: learning (every request shadowed) or with a calibration.
fn plugin(sample: f64, calibration: Option<&str>) -> String {
    let calibration = calibration
        .map(|c| format!(r#","calibration":{c}"#))
        .unwrap_or_default();
    format!(
        r#"{{"top_k":3,"min_tools":10,"shadow":{{"sample":{sample}}},
            "auto_k":{{"keep":{KEEP},"min_calls":30,"max_k":{MAX_K},"period_s":1{calibration}}}}}"#
    )
}

/// A replica: an Envoy of its own (one worker), its access log in `log`.
fn replica(config: &str, log: &Path) -> Gateway {
    let log = log.to_owned();
    Gateway::start_alone_with(config, &["--concurrency", "1"], move |yaml| {
        common::access_log_to_file(&yaml, &log)
    })
}

/// A replica that learns (every request shadowed, so that what the replicas learn together
/// is exactly what one replica of all the traffic learns), its plugin configuration served
/// by ECDS from `dir`, so that it can then shadow one in a thousand and be measured on
/// filtered requests: the same `auto_k` settings, so its learned values in the VM's shared
/// data stay its own.
fn learner(dir: &Path, log: &Path) -> (Gateway, Value) {
    let log = log.to_owned();
    start_with_ecds_and(
        dir,
        &plugin(1.0, None),
        &["--concurrency", "1"],
        move |yaml| common::access_log_to_file(&yaml, &log),
    )
}

/// The learner now filters, with what it learned.
fn measure_with(dir: &Path, gw: &Gateway, wasm: &Value) {
    let reloads = || gw.envoy_stat("extension_config_discovery.http_filter.toolsift.config_reload");
    let before = reloads();
    write_ecds(&dir.join("ecds.json"), wasm, &plugin(0.001, None), 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    while reloads() == before {
        assert!(Instant::now() < deadline, "the update never applied");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Held-out questions sent to each of `fleet`: the share of their calls kept in filtered
/// requests, the mean tools sent, the questions whose tools arrays differed between replicas,
/// and the `source:k` each replica answered with.
struct Held {
    share: f64,
    tools: f64,
    differing: usize,
    questions: usize,
    ks: Vec<String>,
}

fn held_out(fleet: &[&Gateway], catalog: &[Value], questions: &[&Question]) -> Held {
    let (mut kept, mut needed, mut sent, mut requests, mut differing) = (0, 0, 0, 0, 0);
    let mut ks: Vec<String> = Vec::new();
    for q in questions {
        let answers: Vec<Answer> = fleet.iter().map(|gw| ask(gw, catalog, q)).collect();
        let filtered: Vec<&Answer> = answers.iter().filter(|a| !a.shadowed).collect();
        if filtered.windows(2).any(|w| w[0].tools != w[1].tools) {
            differing += 1;
        }
        for a in &filtered {
            kept += a.kept;
            needed += a.needed;
            sent += a.tools.len();
            requests += 1;
        }
        for a in &answers {
            let k = format!("{}:{}", a.source, a.k);
            if !ks.contains(&k) {
                ks.push(k);
            }
        }
    }
    Held {
        share: kept as f64 / needed as f64,
        tools: sent as f64 / requests as f64,
        differing,
        questions: questions.len(),
        ks,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = common::repo().join(format!(
        "target/test-scratch/{name}-{}-{}",
        std::process::id(),
        Gateway::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Four replicas learn apart from shadowed traffic; `toolsift calibrate` reads their four
/// access logs; four fresh replicas, and a fifth started after they served, take the
/// calibration. Every filtered request of a held-out question gets the same tools array on
/// every calibrated replica, from its first request; their share kept is at least `keep` −
/// .01, and their tools no more than 1.15 times those of one replica that saw all the traffic.
#[test]
fn replicas_given_the_fleets_calibration_send_the_same_tools_and_keep_the_target() {
    let (catalog, questions) = dataset_catalog("seal_tools", 300, 700, true);
    let (learn, fresh): (Vec<_>, Vec<_>) =
        questions.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let learn: Vec<&Question> = learn.into_iter().map(|(_, q)| q).collect();
    let fresh: Vec<&Question> = fresh.into_iter().map(|(_, q)| q).collect();
    let dir = scratch("fleet");
    let logs: Vec<PathBuf> = (0..REPLICAS)
        .map(|i| dir.join(format!("replica-{i}.log")))
        .collect();
    let apart: Vec<(Gateway, Value)> = logs
        .iter()
        .enumerate()
        .map(|(i, l)| learner(&dir.join(format!("ecds-{i}")), l))
        .collect();
    let (whole, whole_wasm) = learner(&dir.join("ecds-whole"), &dir.join("whole.log"));
    // Dealt round-robin, as a load balancer deals requests; one replica sees them all.
    let mut dealt = [0; REPLICAS];
    for (i, q) in learn.iter().enumerate() {
        ask(&apart[i % REPLICAS].0, &catalog, q);
        dealt[i % REPLICAS] += 1;
        ask(&whole, &catalog, q);
    }
    let paths: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
    for (log, n) in logs.iter().zip(dealt) {
        assert_eq!(common::access_log_lines(log, n).len(), n);
    }
    let learned: u64 = apart
        .iter()
        .map(|(gw, _)| gw.stat("toolsift.auto_k.learned"))
        .sum();
    assert_eq!(learned, whole.stat("toolsift.auto_k.learned"));
    let max_k = MAX_K.to_string();
    let mut args = vec!["calibrate", "--max-k", &max_k];
    args.extend(paths.iter().map(String::as_str));
    let (code, out) = common::toolsift(&args);
    assert_eq!(code, 0, "{out}");
    let calibration = out.lines().next().unwrap().to_owned();
    let parsed: Value = serde_json::from_str(&calibration).unwrap();
    // Every call the replicas learned, counted once.
    assert_eq!(parsed["pooled"]["calls"], learned, "{out}");
    assert_eq!(parsed["from"]["files"].as_array().unwrap().len(), REPLICAS);

    let config = plugin(0.001, Some(&calibration));
    let fleet_dir = scratch("fleet-calibrated");
    let fleet: Vec<Gateway> = (0..REPLICAS)
        .map(|i| replica(&config, &fleet_dir.join(format!("{i}.log"))))
        .collect();
    // Each fresh replica's first request: the fleet's k already.
    let first: Vec<Answer> = fleet.iter().map(|gw| ask(gw, &catalog, fresh[0])).collect();
    for a in &first {
        assert_eq!(
            a.source, "fleet",
            "a calibrated catalog from the first request"
        );
    }
    let calibrated = held_out(&fleet.iter().collect::<Vec<_>>(), &catalog, &fresh);
    // A replica started later (a rollout, a restart): the same from its first request.
    let late = replica(&config, &fleet_dir.join("late.log"));
    let late_first = ask(&late, &catalog, fresh[0]);
    assert_eq!(
        (late_first.source.as_str(), late_first.k),
        ("fleet", first[0].k)
    );
    let mut everyone: Vec<&Gateway> = fleet.iter().collect();
    everyone.push(&late);
    let with_late = held_out(&everyone, &catalog, &fresh);

    // A replica restarted without the calibration learns again from nothing: `top_k` first.
    let restarted = replica(&plugin(0.3, None), &dir.join("restarted.log"));
    let restarted_first = ask(&restarted, &catalog, fresh[0]);
    assert_eq!(
        (restarted_first.source.as_str(), restarted_first.k),
        ("default", 3)
    );
    let restarted_held = held_out(&[&restarted], &catalog, &fresh);
    // The learners now filter with what they learned, each on its own.
    for (i, (gw, wasm)) in apart.iter().enumerate() {
        measure_with(&dir.join(format!("ecds-{i}")), gw, wasm);
    }
    measure_with(&dir.join("ecds-whole"), &whole, &whole_wasm);
    std::thread::sleep(Duration::from_millis(1100));
    let apart_held = held_out(
        &apart.iter().map(|(gw, _)| gw).collect::<Vec<_>>(),
        &catalog,
        &fresh,
    );
    let whole_held = held_out(&[&whole], &catalog, &fresh);
    for (name, h) in [
        ("one replica, all the traffic", &whole_held),
        ("four replicas learning apart", &apart_held),
        ("four replicas, the fleet's calibration", &calibrated),
        ("the same and one started later", &with_late),
        ("one replica restarted without it", &restarted_held),
    ] {
        eprintln!(
            "fleet: {name}: share kept {:.3}, mean tools {:.1}, questions whose tools differed \
             between replicas {} of {}, k {:?}",
            h.share, h.tools, h.differing, h.questions, h.ks
        );
    }
    assert_eq!(calibrated.differing, 0, "{:?}", calibrated.ks);
    assert_eq!(with_late.differing, 0, "{:?}", with_late.ks);
    assert_eq!(
        with_late.ks.len(),
        1,
        "one k on every replica: {:?}",
        with_late.ks
    );
    assert!(
        calibrated.share >= KEEP - 0.01,
        "kept {:.3}",
        calibrated.share
    );
    assert!(
        calibrated.tools <= 1.15 * whole_held.tools,
        "{:.1} tools against one replica's {:.1}",
        calibrated.tools,
        whole_held.tools
    );
    for gw in fleet.iter().chain([&late]) {
        assert!(gw.stat("toolsift.auto_k.fleet") > 0);
        assert_eq!(
            gw.stat("toolsift.auto_k.learned"),
            0,
            "a calibrated replica learns nothing"
        );
        assert!(!gw.log_text().contains("panicked"));
    }

    // `toolsift report` reads the calibrated replicas' logs: the fleet's k per catalog.
    let late_log = fleet_dir.join("late.log");
    common::access_log_lines(&late_log, fresh.len());
    let (code, report) = common::toolsift(&["report", "--json", late_log.to_str().unwrap()]);
    assert_eq!(code, 0, "{report}");
    let report: Value = serde_json::from_str(report.lines().next().unwrap()).unwrap();
    let sources: Vec<&Value> = report["shadow"]["catalogs"]
        .as_array()
        .map(|c| c.iter().map(|c| &c["auto_k"]["source"]).collect())
        .unwrap_or_default();
    assert!(
        sources.iter().all(|s| *s == "fleet"),
        "{}",
        report["shadow"]["catalogs"]
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&fleet_dir);
}

/// ECDS puts a calibration into a running Envoy: the same process selects with the fleet's k
/// after the update, in the same Wasm VM. A calibration it cannot use (another `max_k`) is
/// refused by Envoy, named in its log, and the running configuration stays.
#[test]
fn ecds_brings_a_calibration_to_a_running_envoy_and_a_bad_one_changes_nothing() {
    let (catalog, questions) = dataset_catalog("seal_tools", 120, 200, true);
    // A calibration of this traffic, from one replica's log.
    let dir = scratch("fleet-ecds");
    let learner = replica(&plugin(1.0, None), &dir.join("learn.log"));
    for q in &questions {
        ask(&learner, &catalog, q);
    }
    let log = dir.join("learn.log");
    common::access_log_lines(&log, questions.len());
    let (code, out) = common::toolsift(&["calibrate", "--max-k", "64", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let calibration = out.lines().next().unwrap().to_owned();
    drop(learner);

    let ecds = dir.join("ecds.json");
    let (gw, wasm) = start_with_ecds(&dir, &plugin(0.001, None));
    let pid = gw.pid();
    let before = ask(&gw, &catalog, &questions[1]);
    assert_eq!((before.source.as_str(), before.k), ("default", 3));
    let vms = gw.envoy_stat("wasm.envoy.wasm.runtime.v8.created");
    let active = gw.envoy_stat("wasm.envoy.wasm.runtime.v8.active");

    write_ecds(&ecds, &wasm, &plugin(0.001, Some(&calibration)), 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let updated = loop {
        let a = ask(&gw, &catalog, &questions[1]);
        if a.source == "fleet" {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "the update never applied: {}",
            a.source
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(gw.pid(), pid, "no restart");
    // What the book says survives an update: the workers' VMs (one more created, for the
    // new configuration's check; as many active).
    let vms_after = gw.envoy_stat("wasm.envoy.wasm.runtime.v8.created");
    let active_after = gw.envoy_stat("wasm.envoy.wasm.runtime.v8.active");
    eprintln!(
        "fleet ecds: V8 VMs created before the update {vms}, after {vms_after}; active \
         {active}, after {active_after}"
    );
    assert_eq!(active_after, active, "the active VMs");

    // Another max_k: refused, and the fleet's k stays.
    let bad = plugin(0.001, Some(&calibration))
        .replace("\"max_k\":64,\"period_s\"", "\"max_k\":32,\"period_s\"");
    assert_ne!(bad, plugin(0.001, Some(&calibration)));
    write_ecds(&ecds, &wasm, &bad, 3);
    let log = gw.log_containing("config update rejected");
    assert!(
        log.contains("field `auto_k.calibration.max_k`: is 64, but `auto_k.max_k` is 32"),
        "{log}"
    );
    for q in questions.iter().take(20) {
        let a = ask(&gw, &catalog, q);
        assert_eq!(
            (a.source.as_str(), a.k),
            ("fleet", updated.k),
            "after a refused update"
        );
    }
    assert_eq!(gw.pid(), pid);
    assert!(!gw.log_text().contains("panicked"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 66 through real Envoys, the whole loop: two replicas shadow conversations whose
/// history called one tool and whose model then calls another; each record names the history
/// (`history=`), `toolsift calibrate` over both logs prints the pairs as `transitions` in the
/// calibration, and a plugin given that calibration keeps, in a later turn whose own words
/// name no tool, the tool the fleet called next, though the question's ranking puts it last
/// (`next=` says so). A first turn gets what it got without the transitions, and a caller who
/// may not see that tool never gets it.
#[test]
fn shadowed_conversations_teach_calibrate_what_is_called_after_what() {
    let (catalog, _) = dataset_catalog("seal_tools", 1, 40, false);
    let name = |i: usize| catalog[i]["function"]["name"].as_str().unwrap().to_owned();
    let earlier = name(0);
    // The task in the words of the tool it first called: a question the catalog reads (one it
    // cannot read is not shadowed, [`toolsift::weak_query`]).
    let task = catalog[0]["function"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = scratch("fleet-transitions");
    let turn = |question: &str, then: &str| {
        serde_json::json!({"model": "gpt-4.1", "tools": catalog, "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": earlier, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"},
            {"role": "user", "content": then}]})
    };
    let later = |question: &str| turn(question, "and now the part after that");
    let first = serde_json::json!({"model": "gpt-4.1", "tools": catalog,
        "messages": [{"role": "user", "content": task}]});
    // What the filter keeps of each without transitions, as `toolsift explain` ranks them: the
    // tools the fleet will call next are the later turn's last two by the question.
    let explained = |body: &Value, config: &str| -> Value {
        let (request, plugin_json) = (dir.join("request.json"), dir.join("plugin.json"));
        std::fs::write(&request, body.to_string()).unwrap();
        std::fs::write(&plugin_json, config).unwrap();
        let args = [
            "explain",
            "--json",
            "--config",
            plugin_json.to_str().unwrap(),
        ];
        let (code, out) = common::toolsift(&[&args[..], &[request.to_str().unwrap()]].concat());
        assert_eq!(code, 0, "{out}");
        serde_json::from_str(&out).unwrap()
    };
    let ranked = explained(&later(&task), &plugin(0.001, None));
    let tools = ranked["tools"].as_array().unwrap();
    let place = |i: usize| tools[tools.len() - i]["name"].as_str().unwrap().to_owned();
    let (next, other) = (place(1), place(2));
    assert!(next != earlier && other != earlier, "{ranked:#}");
    let logs = [dir.join("a.log"), dir.join("b.log")];
    for (r, log) in logs.iter().enumerate() {
        let gw = replica(&plugin(1.0, None), log);
        for turn in 0..6 {
            // The conversation called `earlier`; now its model calls `next` (on the first
            // replica's even turns, `other`).
            let body = later(&format!("{task} (step {turn})"));
            let want = if r == 0 && turn % 2 == 0 {
                &other
            } else {
                &next
            };
            let resp = gw.post(
                "/v1/chat/completions",
                &[("x-demo-model", "scripted"), ("x-demo-want", want)],
                body.to_string().as_bytes(),
            );
            assert_eq!(resp.status, 200, "{}", resp.text());
        }
        // A later turn in words the catalog lacks is weak: shadowed all the same, for the
        // transitions its history teaches (its calls teach `auto_k` nothing).
        let weak = turn("プロジェクトの準備をお願いします", "次もお願いします");
        let resp = gw.post(
            "/v1/chat/completions",
            &[("x-demo-model", "scripted"), ("x-demo-want", &next)],
            weak.to_string().as_bytes(),
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
        let lines = common::access_log_lines(log, 7);
        let record = lines[6]["toolsift"].as_str().unwrap_or_default();
        assert!(
            record.contains(" weak=") && record.contains(" shadow="),
            "{record}"
        );
        let history = format!("history={}", earlier.replace(' ', "%20"));
        assert!(
            lines.iter().all(|l| l["toolsift"]
                .as_str()
                .unwrap_or_default()
                .contains(&history)),
            "a shadowed record names its history: {lines:#?}"
        );
    }
    let paths: Vec<&str> = logs.iter().map(|p| p.to_str().unwrap()).collect();
    let mut args = vec!["calibrate", "--max-k", "64"];
    args.extend(&paths);
    let (code, out) = common::toolsift(&args);
    assert_eq!(code, 0, "{out}");
    let calibration = out.lines().next().unwrap().to_owned();
    let printed: Value = serde_json::from_str(&calibration).unwrap();
    let pooled = &printed["transitions"]["pooled"];
    assert_eq!(
        pooled,
        &serde_json::json!([[earlier, next, 11], [earlier, other, 3]]),
        "{calibration}"
    );
    assert_eq!(printed["pooled"]["calls"], 12, "{calibration}");
    // The configuration takes what calibrate printed, transitions and all.
    let calibrated = plugin(0.001, Some(&calibration));
    let gw = replica(&calibrated, &dir.join("c.log"));
    let send = |gw: &Gateway, body: &Value, headers: &[(&str, &str)]| -> (String, Vec<String>) {
        let resp = gw.post("/v1/chat/completions", headers, body.to_string().as_bytes());
        assert_eq!(resp.status, 200, "{}", resp.text());
        let header = resp.header("x-toolsift").unwrap_or_default().to_owned();
        let mut sent: Vec<String> = resp
            .header("x-demo-tools")
            .unwrap_or_default()
            .split(',')
            .map(str::to_owned)
            .collect();
        sent.sort();
        (header, sent)
    };
    let encoded = |n: &str| n.replace(' ', "%20");
    let (header, sent) = send(&gw, &later(&task), &[]);
    // 12 calls, under `min_calls`: the calibration is read, and its k is still `top_k`'s.
    assert!(header.contains(" k=default:3"), "{header}");
    assert!(sent.contains(&encoded(&next)), "{sent:?}");
    assert!(
        header.contains(&format!(" next={}", encoded(&next))),
        "{header}"
    );
    // A first turn: what the filter keeps without the transitions, and no `next=`.
    let (header, sent) = send(&gw, &first, &[]);
    let alone = explained(&first, &plugin(0.001, None));
    let mut kept: Vec<String> = alone["kept_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| encoded(n.as_str().unwrap()))
        .collect();
    kept.sort();
    assert_eq!(sent, kept, "{header}");
    assert!(!header.contains("next="), "{header}");
    // A caller who may not see the tool the transitions name never gets it.
    let governed = calibrated.replacen(
        '{',
        &format!(
            r#"{{"access":{{"identity":[{{"header":"x-group"}}],"default":"allow",
                "rules":[{{"when":["*"],"deny":[{next:?}]}}]}},"#
        ),
        1,
    );
    let gw = replica(&governed, &dir.join("d.log"));
    let (header, sent) = send(&gw, &later(&task), &[("x-group", "dev")]);
    assert!(!sent.contains(&encoded(&next)), "{sent:?}");
    // The tool the fleet called next after it, of those the caller may see, takes its place.
    assert!(
        header.contains(&format!(" next={} denied=1", encoded(&other))),
        "{header}"
    );
}
