//! A load at a fixed rate while the faults happen, one after the other. Requests alternate
//! between the keyword and the hybrid listener and go round the five dialects; each asks a
//! question of its own, so every hybrid request needs an embeddings call. Every answer is
//! checked against what was sent (`traffic::Request::check_echo`). A connection refused or
//! cut before the answer was whole (the gateway restarting) is retried, as a client would,
//! every 100 ms for up to 30 s; any other outcome is final.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::compose::{Ports, Project};
use crate::traffic::{DIALECTS, Request};
use crate::{
    EMBEDDINGS_TIMEOUT, TOP_K, fallback_delta, fallbacks, http, hybrid_ranking_through_the_cluster,
    stat,
};

/// Requests per second.
const RATE: u32 = 20;
/// How long each fault lasts.
const FAULT: Duration = Duration::from_secs(4);
const RETRY_EVERY: Duration = Duration::from_millis(100);
const RETRY_FOR: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Outcome {
    index: u64,
    listener: &'static str,
    dialect: &'static str,
    /// `Ok(x-toolsift)` when the answer was checked and right, else what was wrong.
    result: Result<String, Failure>,
    retries: u32,
    /// From the request's first send to its whole answer.
    latency: Duration,
    /// When it was first sent, from the start of the load.
    sent: Duration,
}

#[derive(Debug)]
enum Failure {
    /// Answered, but not with what was sent (or not a 200).
    Corrupted(String),
    /// Never answered whole, retries included.
    Unanswered(String),
}

struct Load {
    stop: Arc<AtomicBool>,
    scheduler: JoinHandle<Vec<JoinHandle<()>>>,
    results: mpsc::Receiver<Outcome>,
}

impl Load {
    fn start(ports: Ports) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let (sender, results) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let scheduler = std::thread::spawn(move || {
            let mut workers = Vec::new();
            let started = Instant::now();
            let mut index = 0u64;
            let origin = started;
            while !flag.load(Ordering::Relaxed) {
                let due = started + Duration::from_secs(index) / RATE;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let sender = sender.clone();
                workers.push(std::thread::spawn(move || {
                    let _ = sender.send(one_request(ports, index, origin));
                }));
                index += 1;
            }
            workers
        });
        Load {
            stop,
            scheduler,
            results,
        }
    }

    fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.scheduler.join().unwrap() {
            worker.join().unwrap();
        }
        let mut outcomes: Vec<Outcome> = self.results.try_iter().collect();
        outcomes.sort_by_key(|o| o.index);
        outcomes
    }
}

fn one_request(ports: Ports, index: u64, origin: Instant) -> Outcome {
    let (listener, port) = if index % 2 == 0 {
        ("keyword", ports.keyword)
    } else {
        ("hybrid", ports.hybrid)
    };
    let dialect = DIALECTS[(index / 2) as usize % DIALECTS.len()];
    let question =
        format!("What is the current weather in Paris? Load request {index}, asked once.");
    let request = Request::new(dialect, &question, false);
    let body = request.body();
    let started = Instant::now();
    let sent = started - origin;
    let mut retries = 0;
    let result = loop {
        match http::post(port, request.path, &[("x-demo-echo", "body")], &body) {
            Ok(response) => {
                break request
                    .check_echo(&response, TOP_K)
                    .map(|_| response.header("x-toolsift").unwrap_or("").to_owned())
                    .map_err(Failure::Corrupted);
            }
            Err(error) if started.elapsed() < RETRY_FOR => {
                let _ = error;
                retries += 1;
                std::thread::sleep(RETRY_EVERY);
            }
            Err(error) => break Err(Failure::Unanswered(error)),
        }
    };
    Outcome {
        index,
        listener,
        dialect,
        result,
        retries,
        latency: started.elapsed(),
        sent,
    }
}

/// Runs the load through the faults; asserts every request answered and none corrupted, and
/// that each embeddings fault was counted; returns the report.
pub fn run_with_faults(project: &Project) -> String {
    let mut report = String::from("e2e load report\n");
    let memory_before = project.memory_mib("envoy");
    let load = Load::start(project.ports);
    let started = Instant::now();
    let mut phases: Vec<(String, Duration, Duration)> = Vec::new();
    std::thread::sleep(Duration::from_secs(3));
    phases.push(("no fault".to_owned(), Duration::ZERO, started.elapsed()));

    // The embeddings server: stopped, paused, off its network. Each time the hybrid requests
    // must go on by keyword, and Envoy must count why.
    for (fault, undo, done) in [
        ("stop", "start", "stopped"),
        ("pause", "unpause", "paused"),
        ("disconnect", "connect", "off its network"),
    ] {
        let before = fallbacks(project);
        let cluster_before = embeddings_cluster(project);
        let from = started.elapsed();
        match fault {
            "disconnect" => project.disconnect("embeddings", "embed"),
            _ => project.act(fault, "embeddings"),
        }
        std::thread::sleep(FAULT);
        let counted = fallback_delta(&before, &fallbacks(project));
        match undo {
            "connect" => project.connect("embeddings", "embed"),
            _ => project.act(undo, "embeddings"),
        }
        assert!(
            !counted.is_empty(),
            "embeddings {fault}: no fallback counted in toolsift.embeddings.fallback.*"
        );
        if fault == "pause" {
            // Envoy's own view of the calls says why, should a fallback other than timeout
            // ever be counted here: connect timeouts, request timeouts, refused or reset
            // connections, overflows.
            assert!(
                counted.contains("timeout="),
                "embeddings paused: {counted}; Envoy's embeddings cluster before the pause:\n\
                 {cluster_before}\nand after:\n{}",
                embeddings_cluster(project)
            );
        }
        writeln!(
            report,
            "embeddings {done} for {FAULT:?}: Envoy counted {counted}"
        )
        .unwrap();
        hybrid_ranking_through_the_cluster(project);
        phases.push((
            format!("embeddings {done}, until hybrid again"),
            from,
            started.elapsed(),
        ));
    }

    // The gateway restarted under load: requests in flight and arriving meanwhile are retried;
    // the new Envoy rebuilds its catalog indexes and fetches the tool vectors again.
    let memory_under_load = project.memory_mib("envoy");
    let from = started.elapsed();
    project.act("restart", "envoy");
    project.wait_ready();
    hybrid_ranking_through_the_cluster(project);
    phases.push((
        "gateway restarted, until hybrid again".to_owned(),
        from,
        started.elapsed(),
    ));
    let misses = stat(project, "toolsift.catalog_cache.misses");
    let backfilled = stat(project, "toolsift.embeddings.backfilled");
    assert!(misses > 0, "no catalog index rebuilt after the restart");
    assert!(backfilled > 0, "no tool vectors fetched after the restart");
    writeln!(
        report,
        "gateway restarted: afterwards {misses} catalog indexes built, {backfilled} tool vectors fetched again"
    )
    .unwrap();
    let from = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    phases.push(("no fault".to_owned(), from, started.elapsed()));
    let outcomes = load.finish();
    let duration = started.elapsed();
    let memory_after = project.memory_mib("envoy");

    // Every request answered, none corrupted.
    let problems: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match &o.result {
            Ok(_) => None,
            Err(failure) => Some(format!(
                "request {} ({} {}): {failure:?}",
                o.index, o.listener, o.dialect
            )),
        })
        .collect();
    let corrupted = outcomes
        .iter()
        .filter(|o| matches!(o.result, Err(Failure::Corrupted(_))))
        .count();
    let unanswered = outcomes
        .iter()
        .filter(|o| matches!(o.result, Err(Failure::Unanswered(_))))
        .count();

    // Fallbacks by reason, as the hybrid answers said (`x-toolsift: … fallback=REASON`).
    let hybrid: Vec<&Outcome> = outcomes.iter().filter(|o| o.listener == "hybrid").collect();
    let reason_of = |o: &Outcome| -> Option<String> {
        let header = o.result.as_ref().ok()?;
        Some(
            header
                .split(' ')
                .find_map(|part| part.strip_prefix("fallback="))
                .unwrap_or("none (hybrid)")
                .to_owned(),
        )
    };
    let by_reason = count_reasons(hybrid.iter().copied(), reason_of);
    // A request that fell back waited at most the embeddings timeout (plus the gateway's own
    // time), never for the service to come back.
    let slowest_fallback = hybrid
        .iter()
        .filter(|o| o.retries == 0 && reason_of(o).is_some_and(|r| !r.starts_with("none")))
        .map(|o| o.latency)
        .max()
        .unwrap_or_default();
    let retried = outcomes.iter().filter(|o| o.retries > 0).count();
    let mut latencies: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.retries == 0)
        .map(|o| o.latency)
        .collect();
    latencies.sort();
    let median = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();

    writeln!(
        report,
        "load: {} requests at {RATE}/s over {duration:.1?} (keyword and hybrid listeners, 5 dialects, 80 tools each)",
        outcomes.len()
    )
    .unwrap();
    writeln!(
        report,
        "answered {} (of them {retried} after retrying a refused or cut connection during the gateway restart), corrupted {corrupted}, unanswered {unanswered}",
        outcomes.len() - unanswered
    )
    .unwrap();
    writeln!(report, "hybrid answers by ranking: {by_reason}").unwrap();
    writeln!(
        report,
        "slowest fallback answer {slowest_fallback:.0?} (embeddings timeout {EMBEDDINGS_TIMEOUT:?}); median answer {median:.0?}"
    )
    .unwrap();
    writeln!(
        report,
        "Envoy memory (docker stats): {memory_before:.1} MiB before the load, {memory_under_load:.1} MiB under load before the restart, {memory_after:.1} MiB after"
    )
    .unwrap();
    writeln!(
        report,
        "hybrid answers by phase (sent from → to, after the start of the load):"
    )
    .unwrap();
    for (phase, from, to) in phases {
        let sent_then = hybrid
            .iter()
            .copied()
            .filter(|o| o.sent >= from && o.sent < to);
        let counts = count_reasons(sent_then, reason_of);
        writeln!(report, "  {from:>5.1?} → {to:>5.1?}  {phase}: {counts}").unwrap();
    }

    assert!(problems.is_empty(), "{report}\n{}", problems.join("\n"));
    assert!(
        slowest_fallback < EMBEDDINGS_TIMEOUT + Duration::from_secs(5),
        "a request ranked by keyword waited {slowest_fallback:?}\n{report}"
    );
    report
}

/// The gateway's stats of its `embeddings` cluster that tell how calls ended (Envoy's own,
/// from `/stats`), a line each.
fn embeddings_cluster(project: &Project) -> String {
    const TOLD: [&str; 10] = [
        "upstream_cx_total",
        "upstream_cx_connect_timeout",
        "upstream_cx_connect_fail",
        "upstream_cx_destroy_remote",
        "upstream_cx_overflow",
        "upstream_rq_total",
        "upstream_rq_timeout",
        "upstream_rq_pending_overflow",
        "upstream_rq_503",
        "upstream_rq_504",
    ];
    let response = match http::get(
        project.ports.admin,
        "/stats?filter=^cluster\\.embeddings\\.",
    ) {
        Ok(response) => response,
        Err(e) => return e,
    };
    response
        .text()
        .lines()
        .filter(|line| {
            line.strip_prefix("cluster.embeddings.")
                .and_then(|l| l.split(':').next())
                .is_some_and(|name| TOLD.contains(&name))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `reason: count, …` over the outcomes that have a reason, reasons in order.
fn count_reasons<'a>(
    outcomes: impl Iterator<Item = &'a Outcome>,
    reason_of: impl Fn(&Outcome) -> Option<String>,
) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for reason in outcomes.filter_map(reason_of) {
        *counts.entry(reason).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(reason, n)| format!("{reason}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
