//! `toolsift report`, the built binary: on a log written here with known answers (the sentence
//! and the JSON numbers checked exactly), on the same log with garbage between its lines (the
//! same numbers, and the garbage counted), on standard input, with its plots; and on a log the
//! real Envoy wrote, whose counts must equal Envoy's own counters for the same run.

use crate::common;

use common::Gateway;
use common::llm::{request, with_calls};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn toolsift(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolsift"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn report_json(args: &[&str], stdin: Option<&[u8]>) -> Value {
    let out = toolsift(&[&["report", "--json"], args].concat(), stdin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = common::repo()
        .join("target/test-scratch")
        .join(format!("report-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One access log line as the shipped configs write it; `None` keys are Envoy's `null`.
fn line(
    toolsift: Option<&str>,
    shadow: Option<&str>,
    tokens: Option<&str>,
    access: Option<&str>,
) -> String {
    json!({
        "start_time": "2026-11-30T10:00:00.000Z", "method": "POST", "path": "/v1/chat/completions",
        "status": 200, "duration_ms": 12, "upstream": "llm",
        "toolsift": toolsift, "toolsift_search": null,
        "toolsift_shadow": shadow, "toolsift_tokens": tokens, "toolsift_access": access,
    })
    .to_string()
}

/// The calls of the sampled records, as (rank, calls): 1,204 calls, 1,125 within 5 (93.4 %),
/// 1,145 within 6 (95.1 %), 1,193 within 8 (99.1 %), 1,203 within 23 (99.92 %), one past 50.
const RANKS: [(usize, usize); 8] = [
    (1, 700),
    (2, 200),
    (3, 100),
    (5, 125),
    (6, 20),
    (8, 48),
    (23, 10),
    (60, 1),
];

/// The synthetic log: 1,204 sampled requests with one call each (two catalogs: every fourth
/// call in catalog 0badc0de), 10 filtered requests with `top_k=5`, skips, access decisions,
/// loops and made-up tools.
fn synthetic_log() -> Vec<String> {
    let mut lines = Vec::new();
    let mut n = 0;
    for (rank, calls) in RANKS {
        for _ in 0..calls {
            let (catalog, tools) = if n % 4 == 3 {
                ("0badc0de", 60)
            } else {
                ("3fa2b1c0", 200)
            };
            // A name holding '@' and an encoded space: split on the last '@'.
            let name = if n % 2 == 0 {
                "get_pod_logs"
            } else {
                "mail%20to@ops"
            };
            let missed = usize::from(rank > 8);
            let shadow = format!(
                "shadow={name}@{rank} missed={missed} top_k=8 tools={tools} catalog={catalog}"
            );
            lines.push(line(
                Some(&format!("kept={tools} total={tools}")),
                Some(&shadow),
                Some("10000/10000"),
                None,
            ));
            n += 1;
        }
    }
    // Two calls of tools the catalog does not rank, in sampled answers with no ranked call.
    lines.push(line(
        Some("kept=200 total=200"),
        Some("shadow=web_search@-,web_search@- missed=0 top_k=8 tools=200 catalog=3fa2b1c0"),
        Some("10000/10000"),
        None,
    ));
    for i in 0..10 {
        let calls = if i == 0 {
            "get_pod_logs@2,pinned_tool@30"
        } else {
            "get_pod_logs@1"
        };
        lines.push(line(
            Some("kept=5 total=200 denied=2 loop=evicted:run_shell noted=run_shell unknown=made_up"),
            Some(&format!("filtered={calls} missed=0 top_k=5 tools=200 catalog=3fa2b1c0")),
            Some("10000/1000"),
            Some("deny:tools:no-shell:run_shell deny:tools:default:ssh would_deny:call:%231:rm%20-rf"),
        ));
    }
    for _ in 0..30 {
        lines.push(line(
            Some("kept=12 total=12 skipped=few_tools"),
            None,
            None,
            None,
        ));
    }
    for _ in 0..5 {
        lines.push(line(Some("skipped=compressed"), None, None, None));
    }
    lines.push(line(
        Some("kept=0 total=200 denied=200 access=refused"),
        None,
        None,
        Some("deny:request:default:-"),
    ));
    // Requests toolsift let through unread: `null` and "-".
    lines.push(line(None, None, None, None));
    lines.push(json!({"toolsift": "-", "toolsift_shadow": "-"}).to_string());
    lines
}

const SENTENCE: &str = "with top_k 8, 99.1 % of the 1,204 calls seen would have been kept; \
    with 5, 93.4 %. 95 % needs top_k 6, 99 % needs top_k 8, 99.9 % needs top_k 23.";

fn check_synthetic(r: &Value) {
    assert_eq!(r["summary"], SENTENCE, "{r:#}");
    let s = &r["shadow"];
    assert_eq!(s["top_k"], 8);
    assert_eq!(s["top_k_values"], json!({"5": 10, "8": 1205}));
    let curve = &s["sampled"];
    assert_eq!(curve["requests"], 1205);
    assert_eq!(curve["calls"], 1204);
    assert_eq!(curve["unranked_calls"], 2);
    assert_eq!(curve["missed"], 11);
    let within = curve["within_k"].as_array().unwrap();
    assert_eq!(within.len(), 50);
    for (k, expected) in [
        (1, 700),
        (2, 900),
        (3, 1000),
        (4, 1000),
        (5, 1125),
        (6, 1145),
        (8, 1193),
        (22, 1193),
        (23, 1203),
        (50, 1203),
    ] {
        assert_eq!(within[k - 1], expected, "k = {k}");
    }
    assert_eq!(curve["smallest_k"], json!({"95": 6, "99": 8, "99.9": 23}));
    assert_eq!(s["within_top_k"].as_f64().unwrap(), 1193.0 / 1204.0);
    assert_eq!(s["kept_as_configured"].as_f64().unwrap(), 1193.0 / 1204.0);
    assert_eq!(s["filtered_requests"], 10);
    assert_eq!(s["filtered_calls"], 11);
    assert_eq!(s["filtered_past_top_k"], 1);
    // Per catalog: every fourth call in 0badc0de (301 of 1,204), most calls first.
    let catalogs = s["catalogs"].as_array().unwrap();
    assert_eq!(catalogs.len(), 2);
    assert_eq!(catalogs[0]["catalog"], "3fa2b1c0");
    assert_eq!(catalogs[0]["tools"], 200);
    assert_eq!(catalogs[0]["calls"], 903);
    assert_eq!(catalogs[0]["requests"], 904);
    assert_eq!(catalogs[0]["filtered_requests"], 10);
    assert_eq!(catalogs[1]["catalog"], "0badc0de");
    assert_eq!(catalogs[1]["tools"], 60);
    assert_eq!(catalogs[1]["calls"], 301);

    assert_eq!(
        r["outcomes"],
        json!({"filtered": 1215, "skipped=few_tools": 30, "skipped=compressed": 5, "refused": 1, "none": 2})
    );
    assert_eq!(
        r["tools_in"],
        903 * 200 + 301 * 60 + 200 + 10 * 200 + 30 * 12 + 200
    );
    assert_eq!(
        r["tools_out"],
        903 * 200 + 301 * 60 + 200 + 10 * 5 + 30 * 12
    );
    assert_eq!(
        r["tokens"],
        json!({"requests": 1215, "before": 12_150_000, "after": 12_060_000, "saved": 90_000,
               "saved_per_request": 90_000.0 / 1215.0})
    );
    let access = &r["access"];
    assert_eq!(access["denied_tools"], 220);
    assert_eq!(access["refused_requests"], 1);
    assert_eq!(
        access["verdicts"]["deny"],
        json!([{"rule": "default", "surface": "tools", "count": 10},
               {"rule": "no-shell", "surface": "tools", "count": 10},
               {"rule": "default", "surface": "request", "count": 1}])
    );
    assert_eq!(
        access["verdicts"]["would_deny"],
        json!([{"rule": "#1", "surface": "call", "count": 10}])
    );
    assert_eq!(
        access["by_surface"],
        json!({"deny": {"request": 1, "tools": 20}, "would_deny": {"call": 10}})
    );
    assert_eq!(
        r["loops"],
        json!({"requests": 10, "evicted": 10, "noted": 10, "tools": {"names": {"run_shell": 10}, "others": 0}})
    );
    assert_eq!(r["unknown_tools"]["requests"], 10);
    assert_eq!(r["unknown_tools"]["tools"]["names"], json!({"made_up": 10}));
    assert_eq!(
        r["unknown_tools"]["shadow_calls"]["names"],
        json!({"web_search": 2})
    );
}

#[test]
fn a_synthetic_log_reports_its_known_numbers() {
    let dir = scratch("synthetic");
    let log = dir.join("access.log");
    let lines = synthetic_log();
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let r = report_json(&[log.to_str().unwrap()], None);
    check_synthetic(&r);
    assert_eq!(
        r["lines"],
        json!({"read": lines.len(), "requests": lines.len(), "malformed": 0, "foreign": 0, "blank": 0, "unreadable": {}})
    );

    // The text: the sentence, the table with top_k marked, the catalogs, the rest.
    let out = toolsift(&["report", log.to_str().unwrap()], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in [
        SENTENCE,
        "(the records' top_k differs: 8 in 1,205 records, 5 in 10 records; the most common is taken as current)",
        "    5      1,125   93.4 %\n",
        "    8      1,193   99.1 %  ← top_k\n",
        "   50      1,203   99.9 %\n",
        "as configured (top_k, min_score, max_tool_tokens, pins and the loop guard applied): 11 of 1,204 calls missed, 99.1 % kept",
        "3fa2b1c0       200       904        10      903",
        "0badc0de        60       301         0      301",
        "  filtered                     1,215\n",
        "  skipped=few_tools               30\n",
        "saved 90,000 (74 per request)",
        "  deny: request 1, tools 20\n",
        "    rule no-shell             tools               10\n",
        "loops: 10 requests had tools taken out by the loop guard (10 tools: run_shell 10), 10 notes written",
        "unknown tools: 10 requests whose model called a made-up tool (made_up 10)",
        "calls in shadow records of tools the catalog does not rank: web_search 2",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    // Standard input reads the same.
    let piped = report_json(&["-"], Some(std::fs::read(&log).unwrap().as_slice()));
    assert_eq!(piped, r);
    // Two logs add up.
    let twice = report_json(&[log.to_str().unwrap(), log.to_str().unwrap()], None);
    assert_eq!(twice["shadow"]["sampled"]["calls"], 2408);
    assert_eq!(twice["summary"], SENTENCE.replace("1,204", "2,408"));
}

/// A line of the synthetic log as toolsift writes it since issue 47: one `toolsift` record, the
/// other keys gone. A shadowed request's `x-toolsift` says `shadow=would_keep:N`.
fn as_record(line: &str) -> String {
    let old: Value = serde_json::from_str(line).unwrap();
    let Some(head) = old["toolsift"].as_str().filter(|v| *v != "-") else {
        return json!({"toolsift": old["toolsift"], "status": 200}).to_string();
    };
    let mut record = head.to_owned();
    let shadow = old["toolsift_shadow"].as_str().filter(|v| *v != "-");
    if shadow.is_some_and(|s| s.starts_with("shadow=")) {
        record.push_str(" shadow=would_keep:8");
    }
    if let Some(tokens) = old["toolsift_tokens"].as_str() {
        record.push_str(&format!(" tokens={tokens}"));
    }
    if let Some(access) = old["toolsift_access"].as_str() {
        record.push_str(&format!(" verdicts={}", access.replace(' ', ",")));
    }
    if let Some(shadow) = shadow {
        let (_, fields) = shadow.split_once('=').unwrap();
        record.push_str(&format!(" calls={fields}"));
    }
    json!({"status": 200, "toolsift": record, "toolsift_search": null}).to_string()
}

#[test]
fn the_one_record_reads_as_the_keys_of_old_did() {
    let dir = scratch("record");
    let log = dir.join("access.log");
    let old = synthetic_log();
    let records: Vec<String> = old.iter().map(|l| as_record(l)).collect();
    assert!(
        records[0].contains(
            "kept=200 total=200 shadow=would_keep:8 tokens=10000/10000 calls=get_pod_logs@1 \
             missed=0 top_k=8 tools=200 catalog=3fa2b1c0"
        ),
        "{}",
        records[0]
    );
    std::fs::write(&log, records.join("\n") + "\n").unwrap();
    let r = report_json(&[log.to_str().unwrap()], None);
    check_synthetic(&r);
    let wanted = json!({"read": old.len(), "requests": old.len(), "malformed": 0, "foreign": 0,
        "blank": 0, "unreadable": {}});
    assert_eq!(r["lines"], wanted);
    // Old lines and records in one log (toolsift upgraded mid-log) add up the same.
    let mixed: Vec<&String> = old
        .iter()
        .step_by(2)
        .chain(records.iter().skip(1).step_by(2))
        .collect();
    let mixed: Vec<&str> = mixed.into_iter().map(String::as_str).collect();
    std::fs::write(&log, mixed.join("\n")).unwrap();
    assert_eq!(report_json(&[log.to_str().unwrap()], None), r);
    // A record's part that does not read is counted under its part; the rest still counts.
    let mut odd = records.clone();
    odd.push(
        json!({"toolsift": "kept=3 total=3 skipped=few_tools tokens=1/x verdicts=nope calls=a@0"})
            .to_string(),
    );
    std::fs::write(&log, odd.join("\n")).unwrap();
    let r = report_json(&[log.to_str().unwrap()], None);
    assert_eq!(
        r["lines"]["unreadable"],
        json!({"toolsift.shadow": 1, "toolsift.tokens": 1, "toolsift.verdicts": 1})
    );
    assert_eq!(r["outcomes"]["skipped=few_tools"], 31);
    assert_eq!(r["summary"], SENTENCE);
}

#[test]
fn garbage_lines_are_counted_and_skipped() {
    let dir = scratch("garbage");
    let log = dir.join("access.log");
    let mut bytes = Vec::new();
    let mut malformed = 0;
    let mut foreign = 0;
    for (i, l) in synthetic_log().iter().enumerate() {
        if i % 100 == 7 {
            bytes.extend_from_slice(b"\x00\xff\xfe binary \x1b[31m\x80\n");
            bytes.extend_from_slice(&l.as_bytes()[..l.len() / 2]);
            bytes.push(b'\n');
            bytes.extend_from_slice(
                b"{\"level\":\"info\",\"msg\":\"another log\"}\n[1,2,3]\n\"toolsift\"\n\n",
            );
            malformed += 4;
            foreign += 1;
        }
        bytes.extend_from_slice(l.as_bytes());
        bytes.push(b'\n');
    }
    // A line of 3 MiB, longer than any access log line; then a last line cut short.
    bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
    bytes.extend_from_slice(b"\n{\"toolsift\":\"kept=5 tot");
    malformed += 2;
    std::fs::write(&log, &bytes).unwrap();
    let r = report_json(&[log.to_str().unwrap()], None);
    check_synthetic(&r);
    let lines = &r["lines"];
    assert_eq!(lines["malformed"], malformed, "{lines}");
    assert_eq!(lines["foreign"], foreign, "{lines}");
    assert_eq!(lines["requests"], synthetic_log().len());

    // Our keys holding values that do not read: counted, the rest of the line still counts.
    let clean = dir.join("clean.log");
    std::fs::write(&clean, synthetic_log().join("\n")).unwrap();
    let mut odd = synthetic_log();
    odd.push(line(
        Some("kept=3 total=3 skipped=few_tools"),
        Some("shadow=a@0"),
        Some("1/x"),
        Some("nope"),
    ));
    odd.push(json!({"toolsift": 7, "toolsift_shadow": [1]}).to_string());
    std::fs::write(&log, odd.join("\n")).unwrap();
    let r = report_json(&[log.to_str().unwrap()], None);
    assert_eq!(
        r["lines"]["unreadable"],
        json!({"toolsift": 1, "toolsift_access": 1, "toolsift_shadow": 2, "toolsift_tokens": 1})
    );
    assert_eq!(r["outcomes"]["skipped=few_tools"], 31);
    assert_eq!(r["outcomes"]["unreadable"], 1);
    assert_eq!(r["summary"], SENTENCE);
    let base = report_json(&[clean.to_str().unwrap()], None);
    assert_eq!(r["shadow"], base["shadow"]);
    assert_eq!(base["tokens"], r["tokens"]);
}

#[test]
fn an_empty_or_missing_log() {
    let r = report_json(&["-"], Some(b""));
    assert_eq!(r["lines"]["read"], 0);
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .starts_with("no shadowed request in the log")
    );
    let out = toolsift(&["report", "/nonexistent/access.log"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/access.log"));
}

#[test]
fn the_within_k_curve_is_drawn_as_svg_and_png() {
    let dir = scratch("plot");
    let log = dir.join("access.log");
    std::fs::write(&log, synthetic_log().join("\n")).unwrap();
    let (svg, png) = (dir.join("within-k.svg"), dir.join("within-k.png"));
    let out = toolsift(
        &[
            "report",
            log.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains("top_k = 8: 99.1 % of calls"), "{text}");
    assert!(text.contains("catalog 3fa2b1c0, 200 tools (903 calls)"));
    let image = std::fs::read(&png).unwrap();
    assert_eq!(&image[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: the SVG's 900 × 580.
    assert_eq!(&image[16..24], &[0, 0, 3, 132, 0, 0, 2, 68]);
}

/// The shipped envoy.yaml, its access log sent to a file, a mix of requests; the report of that
/// file against Envoy's counters for the same run.
///
/// Shadow records and access verdicts: `the_report_of_a_shadow_run_matches_envoys_counters`.
#[test]
fn the_report_matches_envoys_counters() {
    let dir = scratch("envoy");
    let log = dir.join("access.log");
    let to_file = |yaml: String| common::access_log_to_file(&yaml, &log);
    let gw = Gateway::start_with(r#"{"top_k":5,"loop_guard":{}}"#, &[], to_file);
    let sent = std::cell::Cell::new(0);
    let post = |path: &str, headers: &[(&str, &str)], body: &[u8]| {
        sent.set(sent.get() + 1);
        gw.post(path, headers, body)
    };
    // Filtered, in three dialects.
    for dialect in ["openai_chat", "anthropic", "gemini"] {
        let (path, body) = request(dialect, false);
        let r = post(&path, &[], body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // A made-up tool in the latest turn; a looping call the loop guard takes out.
    let (path, question) = request("openai_chat", false);
    let args = json!({"location": "Paris"});
    let made_up = with_calls(
        "openai_chat",
        question.clone(),
        &[("get_weather_everywhere", args.clone())],
    );
    assert_eq!(post(&path, &[], made_up.to_string().as_bytes()).status, 200);
    let looping = with_calls(
        "openai_chat",
        question.clone(),
        &[
            ("get_current_weather", args.clone()),
            ("get_current_weather", args.clone()),
        ],
    );
    let r = post(&path, &[], looping.to_string().as_bytes());
    assert!(
        r.header("x-toolsift").unwrap().contains(" loop=evicted:"),
        "{:?}",
        r.headers
    );
    // Skipped: few tools, compressed, not JSON, malformed JSON, no tools.
    let mut few = question.clone();
    few["tools"] = json!(few["tools"].as_array().unwrap()[..3]);
    post(&path, &[], few.to_string().as_bytes());
    post(
        &path,
        &[("content-encoding", "gzip")],
        question.to_string().as_bytes(),
    );
    common::http(
        gw.port,
        "POST",
        &path,
        &[("content-type", "text/plain")],
        b"hello",
    );
    sent.set(sent.get() + 1);
    post(&path, &[], b"{\"messages\": [");
    let mut none = question.clone();
    none.as_object_mut().unwrap().remove("tools");
    post(&path, &[], none.to_string().as_bytes());
    // Not an LLM request: toolsift lets it through unread (the log's `toolsift` is unset).
    common::http(gw.port, "GET", "/v1/models", &[], b"");
    sent.set(sent.get() + 1);
    let sent = sent.get();

    let lines = common::access_log_lines(&log, sent);
    assert_eq!(lines.len(), sent, "{lines:?}");
    let r = report_json(&[log.to_str().unwrap()], None);
    let outcomes = &r["outcomes"];
    let count = |key: &str| outcomes.get(key).and_then(Value::as_u64).unwrap_or(0);
    assert_eq!(r["lines"]["requests"], gw.stat("toolsift.requests"));
    assert_eq!(r["lines"]["requests"], sent as u64);
    assert_eq!(r["lines"]["malformed"], 0);
    assert_eq!(r["lines"]["foreign"], 0);
    for reason in [
        "no_body",
        "no_tools",
        "few_tools",
        "malformed_json",
        "bad_shape",
        "too_large",
        "compressed",
        "content_type",
        "internal",
        "native_search",
        "signed",
    ] {
        assert_eq!(
            count(&format!("skipped={reason}")),
            gw.stat(&format!("toolsift.skipped.{reason}")),
            "skipped={reason}: {outcomes}"
        );
    }
    for reason in [
        "few_tools",
        "compressed",
        "content_type",
        "malformed_json",
        "no_tools",
    ] {
        assert_eq!(
            count(&format!("skipped={reason}")),
            1,
            "{reason}: {outcomes}"
        );
    }
    assert_eq!(count("none"), gw.stat("toolsift.skipped.not_llm"));
    assert_eq!(count("none"), 1);
    assert_eq!(
        count("filtered"),
        gw.stat("toolsift.rewritten") + gw.stat("toolsift.unchanged")
    );
    assert_eq!(count("filtered"), 5);
    assert_eq!(r["tools_in"], gw.stat("toolsift.tools_in"));
    assert_eq!(r["tools_out"], gw.stat("toolsift.tools_out"));
    assert_eq!(
        r["unknown_tools"]["requests"],
        gw.stat("toolsift.unknown_tools")
    );
    assert_eq!(
        r["unknown_tools"]["tools"]["names"],
        json!({"get_weather_everywhere": 1})
    );
    assert_eq!(r["loops"]["evicted"], gw.stat("toolsift.loop.evicted"));
    assert_eq!(r["loops"]["requests"], 1);
    assert_eq!(r["tokens"]["saved"], gw.stat("toolsift.tokens_saved"));
    assert_eq!(r["tokens"]["requests"], count("filtered"));
    assert_eq!(r["shadow"]["sampled"]["requests"], 0);
    assert_eq!(r["access"]["denied_tools"], 0);
}

/// A shadow run with access rules in audit mode: 60 requests over every dialect, half of them
/// shadowed by draw, the scripted model calling a tool that ranks 9th, or one ranked 2nd and one
/// the rules would deny. The report of the access log against Envoy's counters.
#[test]
fn the_report_of_a_shadow_run_matches_envoys_counters() {
    let dir = scratch("shadow");
    let log = dir.join("access.log");
    let to_file = |yaml: String| common::access_log_to_file(&yaml, &log);
    let config = r#"{"top_k":5,"shadow":{"sample":0.5},
        "access":{"mode":"audit","default":"allow",
                  "rules":[{"name":"no-merge","when":["*"],"deny":["merge_*"]}]}}"#;
    let gw = Gateway::start_with(config, &[], to_file);
    let dialects = common::DIALECTS;
    let mut sent = 0;
    for i in 0..60 {
        let dialect = dialects[i % dialects.len()];
        let (path, body) = request(dialect, i % 4 == 1);
        let path = if dialect == "bedrock" && i % 4 == 1 {
            path.replace("/converse", "/converse-stream")
        } else {
            path
        };
        let call = if i % 3 == 0 {
            "merge_pull_request"
        } else {
            "get_weather_forecast,create_pull_request"
        };
        let r = gw.post(
            &path,
            &[
                ("x-demo-model", "scripted"),
                ("x-demo-want", "get_current_weather"),
                ("x-demo-call", call),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        sent += 1;
    }
    let lines = common::access_log_lines(&log, sent);
    assert_eq!(lines.len(), sent);
    let r = report_json(&[log.to_str().unwrap()], None);
    let shadow = &r["shadow"];
    let sampled = gw.stat("toolsift.shadow.requests");
    assert!((10..=50).contains(&sampled), "{sampled}");
    assert_eq!(shadow["sampled"]["requests"], sampled);
    assert_eq!(shadow["sampled"]["calls"], gw.stat("toolsift.shadow.calls"));
    assert_eq!(
        shadow["sampled"]["missed"],
        gw.stat("toolsift.shadow.missed")
    );
    assert_eq!(shadow["filtered_requests"], sent as u64 - sampled);
    assert_eq!(shadow["top_k"], 5);
    assert_eq!(r["tokens"]["saved"], gw.stat("toolsift.tokens_saved"));
    assert_eq!(r["tools_in"], gw.stat("toolsift.tools_in"));
    assert_eq!(r["tools_out"], gw.stat("toolsift.tools_out"));
    for surface in ["tools", "call", "request"] {
        let logged = r["access"]["by_surface"]["would_deny"][surface]
            .as_u64()
            .unwrap_or(0);
        assert_eq!(
            logged,
            gw.stat(&format!("toolsift.access.would_deny.{surface}")),
            "{surface}: {}",
            r["access"]
        );
    }
    assert!(gw.stat("toolsift.access.would_deny.tools") >= sent as u64);
    assert_eq!(gw.stat("toolsift.access.denied.tools"), 0);
    let summary = r["summary"].as_str().unwrap();
    assert!(summary.starts_with("with top_k 5, "), "{summary}");
}
