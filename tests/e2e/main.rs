//! The end-to-end run in containers (`make e2e`, part of `make test`): the gateway (Envoy with
//! the real `.wasm`), the demo upstream and the embeddings server as three containers of one
//! compose project (`e2e/docker-compose.yml`, `e2e/envoy.yaml`), images from `make images`.
//!
//! One test, in order: every dialect filtered; search mode answered; hybrid ranking through
//! the `embeddings` cluster; then a load at a fixed rate while the faults happen one after the
//! other (the embeddings container stopped, paused, taken off its network; the gateway
//! restarted), where every request must be answered and none corrupted; then the upstream
//! killed mid-stream. It prints the load's figures (docs/BENCHMARKS.md quotes them). Docker
//! missing fails the run; it never skips.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../common/mod.rs"]
mod common;
mod compose;
mod http;
mod load;
mod traffic;

use std::time::{Duration, Instant};

use compose::{Project, ready_within_deadline, wait_for};
use traffic::{DIALECTS, Request};

pub const TOP_K: usize = 5;
const ECHO: (&str, &str) = ("x-demo-echo", "body");
/// The hybrid listener's `embeddings.timeout_ms` (e2e/envoy.yaml).
pub const EMBEDDINGS_TIMEOUT: Duration = Duration::from_millis(300);

const WEATHER: &str = "What is the current weather in Paris?";

/// A counter from the gateway's `/stats`, by the name toolsift defines.
pub fn stat(project: &Project, name: &str) -> u64 {
    let path = format!("/stats?filter=^wasmcustom\\.{}$", name.replace('.', "\\."));
    let response = http::get(project.ports.admin, &path).expect("admin /stats");
    response
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("wasmcustom.{name}: ")))
        .map_or(0, |v| v.trim().parse().unwrap())
}

pub const FALLBACK_REASONS: [&str; 5] = ["dispatch", "timeout", "status", "garbage", "dimensions"];

/// `toolsift.embeddings.fallback.<reason>` for every reason.
fn fallbacks(project: &Project) -> Vec<u64> {
    FALLBACK_REASONS
        .iter()
        .map(|reason| stat(project, &format!("toolsift.embeddings.fallback.{reason}")))
        .collect()
}

fn fallback_delta(before: &[u64], after: &[u64]) -> String {
    FALLBACK_REASONS
        .iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (b, a))| a > b)
        .map(|(reason, (b, a))| format!("{reason}={}", a - b))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn gateway_upstream_and_embeddings_in_containers() {
    let started = Instant::now();
    let project = Project::up();
    eprintln!("e2e: up and ready in {:.1?}", started.elapsed());
    // The demo's compose file (README: `docker compose up`) at least parses here; it needs the
    // host's ports 10000, 9901 and 18000, so it is not started.
    project.check_file("docker-compose.yml");

    every_dialect_filtered(&project);
    search_mode_answered(&project);
    hybrid_ranking_through_the_cluster(&project);
    let report = load::run_with_faults(&project);
    upstream_killed_mid_stream(&project);

    let log = project.logs("envoy");
    assert!(
        !log.contains("panicked"),
        "the filter panicked; Envoy's log:\n{log}"
    );
    eprintln!("{report}");
    eprintln!("e2e: done in {:.1?}", started.elapsed());
}

/// Each dialect through the keyword listener: 5 of the 80 tools reach the upstream, the rest
/// of the body byte for byte.
fn every_dialect_filtered(project: &Project) {
    for dialect in DIALECTS {
        let request = Request::new(dialect, WEATHER, false);
        let response = http::post(
            project.ports.keyword,
            request.path,
            &[ECHO],
            &request.body(),
        )
        .unwrap_or_else(|e| panic!("{dialect}: {e}"));
        let kept = request
            .check_echo(&response, TOP_K)
            .unwrap_or_else(|e| panic!("{dialect}: {e}"));
        assert!(
            kept.iter().any(|t| t == "get_current_weather"),
            "{dialect}: kept {kept:?}"
        );
        eprintln!("e2e: {dialect} filtered: {kept:?}");
    }
}

/// Search mode: the demo upstream's scripted model sees `find_tools`, calls it, and after the
/// gateway's follow-up calls the tool it wanted; the client gets only that call.
fn search_mode_answered(project: &Project) {
    let headers = [
        ("x-demo-model", "scripted"),
        ("x-demo-want", "get_current_weather"),
    ];
    for dialect in DIALECTS {
        let reset = http::post(project.ports.keyword, "/scripted/log/reset", &[], b"{}")
            .expect("reset the scripted log");
        assert_eq!(reset.status, 200, "{}", reset.text());
        let request = Request::new(dialect, WEATHER, false);
        let response = http::post(
            project.ports.search,
            request.path,
            &headers,
            &request.body(),
        )
        .unwrap_or_else(|e| panic!("{dialect}: {e}"));
        let text = response.text();
        assert_eq!(response.status, 200, "{dialect}: {text}");
        assert!(
            response
                .header("x-toolsift")
                .is_some_and(|h| h.contains("search=search")),
            "{dialect}: {:?}",
            response.headers
        );
        assert!(
            response
                .header("x-toolsift-search")
                .is_some_and(|h| h.starts_with("rounds=1 ")),
            "{dialect}: {:?}",
            response.headers
        );
        assert!(
            text.contains("\"get_current_weather\"") && !text.contains("find_tools"),
            "{dialect}: the client got {text}"
        );
        // What the model received: first only the meta-tool, then the found tools.
        let log: serde_json::Value = serde_json::from_slice(
            &http::get(project.ports.keyword, "/scripted/log")
                .unwrap()
                .body,
        )
        .unwrap();
        let rounds = log.as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{dialect}: {log}");
        let first = rounds[0]["body"].to_string();
        let second = rounds[1]["body"].to_string();
        assert!(
            first.contains("find_tools") && !first.contains("get_current_weather"),
            "{dialect}: first round {first}"
        );
        assert!(
            second.contains("get_current_weather"),
            "{dialect}: follow-up {second}"
        );
        eprintln!("e2e: {dialect} search mode answered in one round");
    }
}

/// Hybrid ranking through `embeddings:18100`: the first request with the catalog goes by
/// keyword while the tools are embedded in the background, then requests are ranked hybrid.
pub fn hybrid_ranking_through_the_cluster(project: &Project) {
    let mut attempt = 0;
    let mut last = String::new();
    let hybrid = ready_within_deadline(|| {
        attempt += 1;
        let request = Request::new("openai_chat", &format!("{WEATHER} ({attempt})"), false);
        let Ok(response) = http::post(project.ports.hybrid, request.path, &[ECHO], &request.body())
        else {
            return false;
        };
        request
            .check_echo(&response, TOP_K)
            .unwrap_or_else(|e| panic!("hybrid: {e}"));
        last = response.header("x-toolsift").unwrap_or("").to_owned();
        let hybrid = last.contains("ranking=hybrid");
        if !hybrid {
            std::thread::sleep(Duration::from_millis(200));
        }
        hybrid
    });
    assert!(
        hybrid,
        "e2e: timed out waiting for a request ranked hybrid; the last answered with \
         x-toolsift: {last}; Envoy counted embeddings calls={} backfilled={} fallbacks {}",
        stat(project, "toolsift.embeddings.calls"),
        stat(project, "toolsift.embeddings.backfilled"),
        fallback_delta(&[0; FALLBACK_REASONS.len()], &fallbacks(project)),
    );
    assert!(stat(project, "toolsift.embeddings.calls") > 0);
    assert!(stat(project, "toolsift.embeddings.backfilled") > 0);
}

/// The upstream killed while it streams: the client gets Envoy's error (a cut stream, or a
/// 5xx when the response was still held), and once the upstream is back, answers are right.
fn upstream_killed_mid_stream(project: &Project) {
    // Filter mode passes the stream on as it comes (a text answer): the client has its first
    // event when the upstream dies, and sees the stream cut. In search mode the model calls
    // `find_tools`, and a tool call holds the stream until its end: the client gets Envoy's 5xx.
    for (port, mode, script) in [
        (project.ports.keyword, "filter", "answer"),
        (project.ports.search, "search", "search"),
    ] {
        let headers = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", "get_current_weather"),
            ("x-demo-script", script),
            ("x-demo-chunk-delay-ms", "2000"),
        ];
        let request = Request::new("openai_chat", WEATHER, true);
        let body = request.body();
        let client = std::thread::spawn(move || {
            let raw = http::exchange(port, "POST", request.path, &headers, &body);
            raw.and_then(|raw| http::parse(&raw))
        });
        std::thread::sleep(Duration::from_millis(1000));
        project.act("kill", "upstream");
        let outcome = client.join().unwrap();
        match &outcome {
            Err(cut) => eprintln!("e2e: {mode} mode, upstream killed mid-stream: {cut}"),
            Ok(response) => {
                assert!(
                    response.status >= 500,
                    "{mode} mode: a whole answer after the upstream died: {} {}",
                    response.status,
                    response.text()
                );
                eprintln!(
                    "e2e: {mode} mode, upstream killed mid-stream: {} {}",
                    response.status,
                    response.text()
                );
            }
        }
        project.act("start", "upstream");
        // The upstream's address may change: wait until the gateway reaches it again.
        wait_for("the upstream back behind the gateway", || {
            http::get(project.ports.keyword, "/healthz").is_ok_and(|r| r.status == 200)
        });
        let request = Request::new("anthropic", WEATHER, false);
        let response = http::post(
            project.ports.keyword,
            request.path,
            &[ECHO],
            &request.body(),
        )
        .unwrap();
        request
            .check_echo(&response, TOP_K)
            .unwrap_or_else(|e| panic!("after the upstream came back: {e}"));
    }
}
