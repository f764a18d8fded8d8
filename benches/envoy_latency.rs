//! Latency through the real Envoy: the same Envoy process serves the shipped envoy.yaml listener
//! (with toolsift) and a copy of it without the filter; requests alternate between the two in
//! rounds, so both see the same machine noise. Run with `make bench-latency`.
//!
//! For each catalog size and each kind of catalog ([`Catalogs`]: the same every request, a new
//! one of known tools, a new one of never-seen tools): a fresh Envoy (so the filter's
//! histograms cover one row), warm-up, then alternating rounds of sequential requests on one
//! keep-alive connection per listener (latency), then alternating short closed-loop runs on
//! two and on eight connections per listener, the connections balanced over Envoy's workers
//! (throughput, the median ratio of seven pairs, each listener first in every other pair),
//! then the filter's own time and its phases from its histograms and the Envoy process's
//! resident memory. With `--memory`: Envoy's memory while 10,000 distinct catalogs arrive.
//!
//! With `--rotating`: requests rotating over 10 to 10,000 distinct 200-tool catalogs of known
//! tools, as per-user tool sets are; see [`rotating`].
//!
//! With `--hybrid` (`make bench-latency-hybrid`): hybrid ranking against the real embeddings
//! server instead; see [`hybrid`].
//!
//! With `--search` (`make bench-latency-search`): the gateway's own time per search round in
//! search mode, against the demo upstream's scripted model; see [`search`].
//!
//! With `--access` (`make bench-latency-access`): the time access rules add, the filter with
//! 50 rules against the same filter without them; see [`access`].
//!
//! With `--loop-guard` (`make bench-latency-loop`): the time the loop guard adds at 200 tools
//! with a 100-message history; see [`loop_guard`].
//!
//! With `--auto-k` (`make bench-latency-auto-k`; `--turns`: each question followed by the
//! assistant's ask and a reply): what `auto_k` adds to a filtered request of
//! the same catalog, against the same filter without it and against a previous `.wasm`
//! (`TOOLSIFT_BASELINE_WASM`); see [`auto_k`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "shared/access_rules.rs"]
mod access_rules;
#[path = "shared/bodies.rs"]
mod bodies;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/listeners.rs"]
mod listeners;

use bodies::{chat_body, question};
use common::{Gateway, repo};
use listeners::listener_copy;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [50, 200, 1000, 4000];
const ROUNDS: usize = 6;
const THROUGHPUT_SECS: u64 = 2;
/// Alternating filter / no-filter throughput runs per row; the ratio is their median.
const THROUGHPUT_PAIRS: usize = 7;
/// Catalogs the memory run (`--memory`) sends, and its catalog size.
const MEMORY_CATALOGS: usize = 10_000;
const MEMORY_TOOLS: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let given_sizes: Option<Vec<usize>> = args
        .iter()
        .position(|a| a == "--sizes")
        .map(|i| args[i + 1].split(',').map(|s| s.parse().unwrap()).collect());
    let pool = bodies::dataset_tools(&repo().join("../shared/datasets"));
    if args.iter().any(|a| a == "--hybrid") {
        let requests = match args.iter().position(|a| a == "--requests") {
            Some(i) => args[i + 1].parse().unwrap(),
            None => hybrid::REQUESTS,
        };
        let stand_in = args.iter().any(|a| a == "--stand-in");
        hybrid::run(&pool, given_sizes, requests, stand_in);
        return;
    }
    if args.iter().any(|a| a == "--search") {
        let rounds = match args.iter().position(|a| a == "--requests") {
            Some(i) => args[i + 1].parse().unwrap(),
            None => search::ROUNDS,
        };
        search::run(&pool, given_sizes, rounds);
        return;
    }
    if args.iter().any(|a| a == "--access") {
        access::run(&pool, given_sizes);
        return;
    }
    if args.iter().any(|a| a == "--loop-guard") {
        loop_guard::run(&pool);
        return;
    }
    if args.iter().any(|a| a == "--shadow") {
        // `--think-ms N`: the model waits N ms before it answers (`x-demo-delay-ms`), as a
        // provider's model does before its first token; the demo answers at once otherwise.
        let think = args
            .iter()
            .position(|a| a == "--think-ms")
            .and_then(|i| args.get(i + 1))
            .map(|n| {
                n.parse::<u64>()
                    .expect("--think-ms takes whole milliseconds")
            });
        shadow::run(&pool, think);
        return;
    }
    if args.iter().any(|a| a == "--auto-k") {
        let flag = |name: &str| args.iter().any(|a| a == name);
        auto_k::run(&pool, flag("--turns"), flag("--history"));
        return;
    }
    if args.iter().any(|a| a == "--rotating") {
        let counts: Vec<usize> = match args.iter().position(|a| a == "--counts") {
            Some(i) => args[i + 1].split(',').map(|s| s.parse().unwrap()).collect(),
            None => rotating::COUNTS.to_vec(),
        };
        let config = match args.iter().position(|a| a == "--cache-mb") {
            Some(i) => {
                let mb: usize = args[i + 1].parse().unwrap();
                format!(r#"{{"catalog_cache_bytes":{}}}"#, mb << 20)
            }
            None => "{}".to_owned(),
        };
        rotating::run(&pool, &counts, &config);
        return;
    }
    if args.iter().any(|a| a == "--memory") {
        let bounds: Vec<usize> = match args.iter().position(|a| a == "--cache-mb") {
            Some(i) => args[i + 1].split(',').map(|s| s.parse().unwrap()).collect(),
            None => vec![16, 64],
        };
        memory(&pool, &bounds);
        return;
    }
    let kinds: Vec<Catalogs> = match args.iter().position(|a| a == "--catalogs") {
        Some(i) => args[i + 1].split(',').map(Catalogs::parse).collect(),
        None => Catalogs::ALL.to_vec(),
    };
    let sizes = given_sizes.unwrap_or_else(|| SIZES.to_vec());
    println!("load before: {}", load());
    println!(
        "| tools | catalog of each request | body KB | median filter / plain (ms) | added median (ms) | p99 filter / plain (ms) | added p99 (ms) | req/s ratio, 2 / 8 connections | filter time P50 / P99 (µs) | P50 read / analyse / write (µs) | Envoy RSS before → after (MiB) |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        for &kind in &kinds {
            let row = measure(&pool, n, kind);
            println!("{row}");
        }
    }
    println!("load after: {}", load());
}

/// The machine's load averages (`/proc/loadavg`), to read beside the numbers: the machine is
/// shared.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which tools arrays a row's requests carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Catalogs {
    /// The same tools array in every request, as an agent loop sends it (a new question each).
    Same,
    /// A tools array never seen as a whole, made of tools all seen before in other arrays:
    /// a window sliding over a pool of `n + KNOWN_WINDOWS` tools, every window sent once
    /// before measuring. More windows than the row's `catalog_cache_size` (16), so every
    /// request misses the catalog cache.
    KnownTools,
    /// A tools array of tools never seen before: every tool's name gets a prefix unique to the
    /// request (as tools from another MCP server would).
    NewTools,
}

/// Distinct windows of [`Catalogs::KnownTools`]: four times the row's `catalog_cache_size`.
const KNOWN_WINDOWS: usize = 64;

impl Catalogs {
    const ALL: [Catalogs; 3] = [Catalogs::Same, Catalogs::KnownTools, Catalogs::NewTools];

    fn parse(s: &str) -> Catalogs {
        match s {
            "same" => Catalogs::Same,
            "known" => Catalogs::KnownTools,
            "new" => Catalogs::NewTools,
            _ => panic!("--catalogs takes same, known, new"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Catalogs::Same => "same (agent loop)",
            Catalogs::KnownTools => "new, of known tools",
            Catalogs::NewTools => "new, of never-seen tools",
        }
    }

    /// Requests per listener and round: what keeps a row to about a minute.
    fn per_round(self, n: usize) -> usize {
        match (self, n) {
            (Catalogs::Same, _) => 200,
            (Catalogs::KnownTools, ..=200) => 150,
            (Catalogs::KnownTools, ..=1000) => 60,
            (Catalogs::KnownTools, _) => 20,
            (Catalogs::NewTools, ..=200) => 80,
            (Catalogs::NewTools, ..=1000) => 25,
            (Catalogs::NewTools, _) => 8,
        }
    }
}

/// The request bodies of one row: `body(i)` for request `i`, each with its own question.
struct Bodies {
    /// Prepared bodies (Same, KnownTools), cycled.
    prepared: Vec<String>,
    /// NewTools: the tools array's items, each name to be prefixed per request.
    template: Option<String>,
}

impl Bodies {
    fn new(pool: &[String], n: usize, kind: Catalogs) -> Bodies {
        match kind {
            Catalogs::Same => Bodies {
                prepared: bodies::same_catalog(pool, n),
                template: None,
            },
            Catalogs::KnownTools => Bodies {
                prepared: (0..=KNOWN_WINDOWS)
                    .map(|w| chat_body(&pool[w..w + n].join(",\n"), &question(w)))
                    .collect(),
                template: None,
            },
            Catalogs::NewTools => Bodies {
                prepared: Vec::new(),
                template: Some(pool[..n].join(",\n")),
            },
        }
    }

    fn body(&self, i: usize) -> String {
        match &self.template {
            Some(tools) => {
                let renamed = tools.replace("\"name\": \"", &format!("\"name\": \"s{i}_"));
                chat_body(&renamed, &question(i))
            }
            None => self.prepared[i % self.prepared.len()].clone(),
        }
    }
}

fn two_listeners(yaml: String, plain_port: u16) -> String {
    let end = yaml.find("  clusters:").unwrap();
    let plain = listener_copy(&yaml, "llm_plain", plain_port, None);
    balanced(format!("{}{}{}", &yaml[..end], plain, &yaml[end..]))
}

/// Every listener of `yaml` with Envoy's exact connection balance. By default the kernel
/// spreads connections over the workers by a hash of their addresses (`SO_REUSEPORT`), so two
/// client connections share one worker half the time: two-connection throughput runs of the
/// same listener then differed by up to 40 % and the filter / plain ratio swung between 0.66
/// and 0.96. Balanced, every run has one connection per worker.
fn balanced(yaml: String) -> String {
    let with = "\n    connection_balance_config: { exact_balance: {} }\n    filter_chains:";
    let balanced = yaml.replace("\n    filter_chains:", with);
    assert_ne!(balanced, yaml, "no listener to balance");
    balanced
}

fn measure(pool: &[String], n: usize, kind: Catalogs) -> String {
    let bodies = Bodies::new(pool, n, kind);
    let plain_port = Gateway::free_port();
    // Known tools: a cache of 16 catalogs, fewer than the windows, so that every request
    // assembles its catalog (the cost of a miss); rotating over many catalogs within the
    // default cache is `--rotating`'s.
    let config = match kind {
        Catalogs::KnownTools => r#"{"catalog_cache_size":16}"#,
        _ => "{}",
    };
    let gw = Gateway::start_with(config, &["--concurrency", "2"], |y| {
        two_listeners(y, plain_port)
    });
    let rss_before = rss_mb(gw.pid());

    let mut filtered = Client::connect(gw.port);
    let mut plain = Client::connect(plain_port);
    // Sanity: the filter cut the request, the plain listener did not. (The upstream does not
    // parse bodies in this benchmark: `x-demo-echo: none`.)
    let (_, headers) = filtered.post(&bodies.body(0));
    assert!(headers.contains("x-toolsift: kept=5"), "{headers}");
    let (_, headers) = plain.post(&bodies.body(0));
    assert!(!headers.contains("x-toolsift"), "{headers}");

    // Warm-up. Known tools: every window once, so the filter's worker (one keep-alive
    // connection stays on one worker) has read every tool of the pool.
    let mut next = 1usize;
    let warm = match kind {
        Catalogs::KnownTools => KNOWN_WINDOWS + 1,
        Catalogs::Same => 100,
        Catalogs::NewTools => 10,
    };
    for _ in 0..warm {
        filtered.post(&bodies.body(next));
        plain.post(&bodies.body(next));
        next += 1;
    }
    let per_round = kind.per_round(n);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let misses_before = gw.stat("toolsift.catalog_cache.misses");
    // Each listener its own sequence of bodies: the filter's worker sees the windows of
    // KnownTools in turn, never one it saw in its last 64 requests.
    let mut next_plain = next;
    for _ in 0..ROUNDS {
        for _ in 0..per_round {
            let body = bodies.body(next);
            next += 1;
            with.push(filtered.post(&body).0);
        }
        for _ in 0..per_round {
            let body = bodies.body(next_plain);
            next_plain += 1;
            without.push(plain.post(&body).0);
        }
    }
    let misses = gw.stat("toolsift.catalog_cache.misses") - misses_before;
    let expected_misses = if kind == Catalogs::Same {
        0
    } else {
        ROUNDS * per_round
    };
    assert_eq!(
        misses as usize, expected_misses,
        "{kind:?}: catalog-cache misses"
    );
    // The latency clients' idle connections would count in the workers' balance.
    drop((filtered, plain));
    // Throughput with prepared bodies: a never-seen catalog per request is no steady state.
    let ratio = if kind == Catalogs::NewTools {
        "–".to_owned()
    } else {
        let ratio = |connections: usize| {
            throughput_ratio(gw.port, plain_port, |port| {
                throughput(port, &bodies.prepared, connections)
            })
        };
        format!("{:.2} / {:.2}", ratio(2), ratio(8))
    };

    let (p50, p99) = histogram(&gw, "toolsift\\.filter_time_us");
    let analyse = if kind == Catalogs::Same {
        "analyse_us"
    } else {
        "assemble_us"
    };
    let phases = phases(&gw, &["read_us", analyse, "write_us"]);
    let rss_after = rss_mb(gw.pid());
    let (m_with, m_without) = (percentile(&mut with, 0.5), percentile(&mut without, 0.5));
    let (p_with, p_without) = (percentile(&mut with, 0.99), percentile(&mut without, 0.99));
    format!(
        "| {n} | {} | {:.0} | {m_with:.3} / {m_without:.3} | **{:.3}** | {p_with:.3} / {p_without:.3} | {:.3} | {ratio} | {p50} / {p99} | {phases} | {rss_before:.0} → {rss_after:.0} |",
        kind.label(),
        bodies.body(0).len() as f64 / 1024.0,
        m_with - m_without,
        p_with - p_without,
    )
}

fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

/// Requests per second over `connections` keep-alive connections (a client thread each) for a
/// few seconds.
fn throughput(port: u16, bodies: &[String], connections: usize) -> f64 {
    let bodies = std::sync::Arc::new(bodies.to_vec());
    let count = bodies.len();
    throughput_of(port, connections, count, move |i| bodies[i % count].clone())
}

/// [`throughput`] with the bodies made on the way: `body(i)` for the `i`th, each connection
/// starting `count / connections` bodies after the one before.
fn throughput_of(
    port: u16,
    connections: usize,
    count: usize,
    body: impl Fn(usize) -> String + Send + Sync + 'static,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(THROUGHPUT_SECS);
    let body = std::sync::Arc::new(body);
    let threads: Vec<_> = (0..connections)
        .map(|t| {
            let body = std::sync::Arc::clone(&body);
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut n = 0u64;
                for i in t * count / connections.. {
                    let body = body(i);
                    if Instant::now() >= deadline {
                        break;
                    }
                    c.post(&body);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / THROUGHPUT_SECS as f64
}

/// The median filter / plain ratio of [`THROUGHPUT_PAIRS`] alternating throughput runs, each
/// listener first in every other pair.
fn throughput_ratio(filter_port: u16, plain_port: u16, run: impl Fn(u16) -> f64) -> f64 {
    let mut ratios: Vec<f64> = (0..THROUGHPUT_PAIRS)
        .map(|pair| {
            if pair % 2 == 0 {
                let with = run(filter_port);
                with / run(plain_port)
            } else {
                let without = run(plain_port);
                run(filter_port) / without
            }
        })
        .collect();
    percentile(&mut ratios, 0.5)
}

/// `--memory`: Envoy's resident memory while [`MEMORY_CATALOGS`] distinct catalogs of
/// [`MEMORY_TOOLS`] never-seen tools arrive, for each `catalog_cache_bytes` bound (MiB), on
/// two connections (both workers). The worst case for the cache: every catalog and every tool
/// is new, so catalogs and tool parts are evicted all the time.
fn memory(pool: &[String], bounds_mb: &[usize]) {
    println!("load before: {}", load());
    let step = MEMORY_CATALOGS / 10;
    let header: Vec<String> = (0..=MEMORY_CATALOGS)
        .step_by(step)
        .map(|c| c.to_string())
        .collect();
    println!(
        "| catalog_cache_bytes | Envoy RSS (MiB) after 0 … {MEMORY_CATALOGS} catalogs: {} | growth (MiB) | bound × 2 workers (MiB) |",
        header.join(" / ")
    );
    println!("|---:|---|---:|---:|");
    let bodies = Bodies::new(pool, MEMORY_TOOLS, Catalogs::NewTools);
    for &mb in bounds_mb {
        let config = format!(r#"{{"catalog_cache_bytes":{}}}"#, mb * 1024 * 1024);
        let gw = Gateway::start_with(&config, &["--concurrency", "2"], balanced);
        let mut clients = [Client::connect(gw.port), Client::connect(gw.port)];
        // One request each first: the VMs and their first allocations.
        for (i, c) in clients.iter_mut().enumerate() {
            let (_, headers) = c.post(&bodies.body(1_000_000 + i));
            assert!(headers.contains("x-toolsift: kept=5"), "{headers}");
        }
        let mut samples = vec![rss_mb(gw.pid())];
        for i in 0..MEMORY_CATALOGS {
            clients[i % 2].post(&bodies.body(i));
            if (i + 1) % step == 0 {
                samples.push(rss_mb(gw.pid()));
            }
        }
        let misses = gw.stat("toolsift.catalog_cache.misses");
        assert!(misses as usize >= MEMORY_CATALOGS, "{misses} misses");
        let cells: Vec<String> = samples.iter().map(|m| format!("{m:.0}")).collect();
        println!(
            "| {mb} MiB | {} | {:.0} | {} |",
            cells.join(" / "),
            samples.last().unwrap() - samples[0],
            2 * mb
        );
    }
    println!("load after: {}", load());
}

/// P50 and P99 of the histogram whose name matches `filter` (a regex matching one histogram,
/// such as `filter_time_us`) once the stats flush has published it; `?` when it has not.
fn histogram(gw: &Gateway, filter: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let text = gw.admin_get(&format!("/stats?filter={filter}&format=json"));
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let quantiles = v["stats"]
            .as_array()
            .and_then(|s| s.iter().find_map(|x| x.get("histograms")))
            .and_then(|h| h["computed_quantiles"].as_array())
            .and_then(|q| q.first())
            .map(|q| q["values"].clone());
        if let Some(values) = quantiles {
            let supported: Vec<f64> = v["stats"]
                .as_array()
                .and_then(|s| s.iter().find_map(|x| x.get("histograms")))
                .and_then(|h| h["supported_quantiles"].as_array())
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            let at = |q: f64| {
                supported
                    .iter()
                    .position(|s| (s - q).abs() < 1e-9)
                    .and_then(|i| values.get(i))
                    .and_then(|v| v["cumulative"].as_f64())
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "?".into())
            };
            let (p50, p99) = (at(50.0), at(99.0));
            if p50 != "?" {
                return (p50, p99);
            }
        }
        if Instant::now() > deadline {
            return ("?".into(), "?".into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The P50 of each of the filter's phase histograms `names` (`read_us`, …), joined by " / ".
fn phases(gw: &Gateway, names: &[&str]) -> String {
    names
        .iter()
        .map(|name| histogram(gw, &format!("toolsift\\.phase\\.{name}")).0)
        .collect::<Vec<_>>()
        .join(" / ")
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// A keep-alive HTTP/1.1 client that times each request.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Milliseconds from the first byte sent to the last byte received, and the headers.
    fn post(&mut self, body: &str) -> (f64, String) {
        self.send("/v1/chat/completions", "x-demo-echo: none\r\n", body)
    }

    /// Like [`Client::post`], to `path` with the header lines `extra` (each ending in CRLF).
    fn send(&mut self, path: &str, extra: &str, body: &str) -> (f64, String) {
        let (ms, head, _) = self.exchange(path, extra, body).unwrap();
        (ms, head)
    }

    /// Like [`Client::send`], with the response body too (sent with `content-length` or
    /// chunked), and failures returned.
    fn exchange(
        &mut self,
        path: &str,
        extra: &str,
        body: &str,
    ) -> std::io::Result<(f64, String, Vec<u8>)> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        );
        let start = Instant::now();
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body.as_bytes())?;
        let mut headers = String::new();
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            if line.is_empty() && headers.is_empty() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().map_err(std::io::Error::other)?;
            }
            if lower
                .strip_prefix("transfer-encoding:")
                .is_some_and(|v| v.contains("chunked"))
            {
                chunked = true;
            }
            headers.push_str(&line);
        }
        let mut response = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size)?;
                let size = size.trim();
                let size = usize::from_str_radix(size.split(';').next().unwrap_or(size), 16)
                    .map_err(|e| std::io::Error::other(format!("chunk size {size:?}: {e}")))?;
                if size == 0 {
                    // Trailers, if any, then the empty line.
                    loop {
                        let mut line = String::new();
                        self.reader.read_line(&mut line)?;
                        if line == "\r\n" || line.is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let at = response.len();
                response.resize(at + size, 0);
                self.reader.read_exact(&mut response[at..])?;
                let mut crlf = [0u8; 2];
                self.reader.read_exact(&mut crlf)?;
            }
        } else {
            response.resize(length, 0);
            self.reader.read_exact(&mut response)?;
        }
        Ok((start.elapsed().as_secs_f64() * 1000.0, headers, response))
    }
}

/// Failures of the `--hybrid` and `--search` modes, returned rather than panicked: the release
/// profile aborts on panic, which would leave Envoy and the servers running.
type Result<T> = std::result::Result<T, String>;

/// A header's value from a response head (names compared case-insensitively).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

fn check_ok(head: &str, what: &str) -> Result<()> {
    if head.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!("{what}: not a 200 answer:\n{head}"))
    }
}

/// `--hybrid`: the latency hybrid ranking adds, against the real embeddings server
/// (`toolsift-embed`, all-MiniLM-L6-v2, built by `make embed`) on a free port.
///
/// For each catalog size, one Envoy with four listeners: the shipped one with hybrid ranking
/// ([`CONFIG`]), one without the filter, one with keyword ranking, and one with hybrid ranking
/// and a long timeout that only warms the tool-vector cache (proxy-wasm shared data, one per
/// VM, so the measured listener finds the tools' vectors there): a catalog of hundreds of tools
/// takes longer to embed than [`CONFIG`]'s `timeout_ms` on a small machine, and a call that
/// times out brings nothing. Then, in rounds that rotate their order, one request of each
/// mode: no filter, keyword, hybrid with a new question (exactly one embeddings call of one
/// input), hybrid with one repeated question (no call), and the same kind of single-question
/// call sent to the embeddings server directly (round trip, and its `server-timing`). Every
/// hybrid answer must say `ranking=hybrid`, and the calls counted by the server and by the
/// filter must be exactly one per new question.
///
/// The default sizes stop at 1,000 tools: 4,000 tools' vectors do not all fit the default
/// `cache_size` (10,000 vectors in sets of 4; about 100 overflow their set), so each worker's
/// first request embeds those in one call, which must finish within `timeout_ms`.
///
/// Failures return an error rather than panic: the release profile aborts on panic, which would
/// leave Envoy and the embeddings server running.
mod hybrid {
    use super::common::EmbedServer;
    use super::{
        Client, Gateway, Result, chat_body, check_ok, header, listener_copy, percentile, question,
    };
    use serde_json::json;

    pub const SIZES: [usize; 3] = [50, 200, 1000];
    /// Requests measured per mode and catalog size.
    pub const REQUESTS: usize = 400;
    /// Unmeasured rounds after the cache is warm.
    const WARM_ROUNDS: usize = 30;
    /// The measured plugin configuration.
    const CONFIG: &str = r#"{"top_k":5,"min_tools":20,"ranking":"hybrid","embeddings":{"cluster":"embeddings","model":"all-MiniLM-L6-v2","timeout_ms":2000,"max_batch":512}}"#;
    /// Keyword ranking with the same selection.
    /// With `--stand-in`: the same, but the embeddings come from the demo upstream's instant
    /// stand-in (16-dimensional vectors, no model), which shows what the filter and Envoy's
    /// callout cost on their own.
    const STAND_IN_CONFIG: &str = r#"{"top_k":5,"min_tools":20,"ranking":"hybrid","embeddings":{"cluster":"llm","path":"/embeddings/ok","dimensions":16,"model":"all-MiniLM-L6-v2","timeout_ms":2000,"max_batch":512}}"#;
    static STAND_IN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    fn stand_in() -> bool {
        STAND_IN.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The hybrid listeners' configuration.
    fn config() -> &'static str {
        if stand_in() { STAND_IN_CONFIG } else { CONFIG }
    }
    const KEYWORD: &str = r#"{"top_k":5,"min_tools":20}"#;
    const MODEL: &str = "all-MiniLM-L6-v2";
    /// The question of the repeated-question mode.
    const REPEATED: &str = "What is the weather forecast for Lisbon this weekend (ticket 0)";

    /// The warm-up listener's configuration: [`CONFIG`] with a timeout long enough to embed
    /// `max_batch` tools; everything the cache keys and sets depend on is the same.
    fn warm_config() -> String {
        config().replace(r#""timeout_ms":2000"#, r#""timeout_ms":60000"#)
    }

    /// What the bench asks of the embeddings server beyond [`EmbedServer`].
    trait EmbedServerExt {
        fn counts(&self) -> Result<(u64, u64)>;
        fn wait_idle(&self) -> Result<()>;
    }

    impl EmbedServerExt for EmbedServer {
        /// `(requests, inputs)` the server has answered.
        fn counts(&self) -> Result<(u64, u64)> {
            let r = super::common::try_http(self.port, "GET", "/stats", &[], b"")
                .map_err(|e| format!("embeddings server /stats: {e}"))?;
            let stats: serde_json::Value = serde_json::from_slice(&r.body)
                .map_err(|e| format!("embeddings server /stats: {e}: {}", r.text()))?;
            match (stats["requests"].as_u64(), stats["inputs"].as_u64()) {
                (Some(requests), Some(inputs)) => Ok((requests, inputs)),
                _ => Err(format!("embeddings server /stats: {stats}")),
            }
        }

        /// Returns once the server has answered everything sent before: it embeds on one
        /// queue, so a call abandoned by Envoy's timeout is still being computed until then.
        fn wait_idle(&self) -> Result<()> {
            let body = embeddings_body("idle");
            let r = super::common::try_http(
                self.port,
                "POST",
                "/v1/embeddings",
                &[("content-type", "application/json")],
                body.as_bytes(),
            )
            .map_err(|e| format!("embeddings server: {e}"))?;
            if r.status == 200 {
                Ok(())
            } else {
                Err(format!("embeddings server: {} {}", r.status, r.text()))
            }
        }
    }

    /// What the filter sends for a request of one question.
    fn embeddings_body(question: &str) -> String {
        json!({"model": MODEL, "input": [question], "encoding_format": "float"}).to_string()
    }

    fn x_toolsift(head: &str) -> &str {
        header(head, "x-toolsift").unwrap_or("(none)")
    }

    /// An answer of the measured listener must say it was ranked by hybrid ranking.
    fn check_hybrid(head: &str, n: usize, what: &str) -> Result<()> {
        check_ok(head, what)?;
        let value = x_toolsift(head);
        if value == format!("kept=5 total={n} ranking=hybrid") {
            return Ok(());
        }
        Err(format!(
            "{n} tools, {what}: the request fell back from hybrid ranking, x-toolsift: {value} \
             (`fallback=timeout`: the embeddings service did not answer within timeout_ms; \
             `fallback=incomplete`: tool vectors were missing from the cache)"
        ))
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Plain,
        Keyword,
        HybridNew,
        HybridRepeated,
        Direct,
    }

    const MODES: [Mode; 5] = [
        Mode::Plain,
        Mode::Keyword,
        Mode::HybridNew,
        Mode::HybridRepeated,
        Mode::Direct,
    ];

    /// Prints the table; exits with status 1 (after stopping every process) on a failure.
    pub fn run(pool: &[String], sizes: Option<Vec<usize>>, requests: usize, stand_in: bool) {
        STAND_IN.store(stand_in, std::sync::atomic::Ordering::Relaxed);
        let sizes = sizes.unwrap_or_else(|| SIZES.to_vec());
        if let Err(message) = table(pool, &sizes, requests) {
            eprintln!("envoy_latency --hybrid: {message}");
            std::process::exit(1);
        }
    }

    fn table(pool: &[String], sizes: &[usize], requests: usize) -> Result<()> {
        // Panics (and, with panic = "abort", leaves nothing to clean up) if it cannot start.
        let embed = EmbedServer::start();
        println!(
            "| tools | body KB | no filter: median / p90 (ms) | keyword: median / p90 (added median) | hybrid, new question: median / p90 (added median) | hybrid, repeated question: median / p90 (added median) | embeddings call, client: median / p90 (ms) | embeddings server time: median / p90 (ms) | hybrid new added − embeddings call (ms) | filter time P50: hybrid before the call / answer (µs) |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut ticket = 0usize;
        for &n in sizes {
            let row = measure(&embed, pool, n, requests, &mut ticket)?;
            println!("{row}");
        }
        println!();
        println!(
            "{requests} requests per mode and size, one of each mode per round in rotating order, \
             sequential on one keep-alive connection per mode (hybrid new and repeated share one); \
             Envoy --concurrency 2; added = median minus the no-filter median; embeddings call = \
             one input, sent to toolsift-embed directly; server time = its `server-timing` (queue \
             and inference)."
        );
        Ok(())
    }

    fn measure(
        embed: &EmbedServer,
        pool: &[String],
        n: usize,
        requests: usize,
        ticket: &mut usize,
    ) -> Result<String> {
        let tools = pool[..n].join(",\n");
        let (plain_port, keyword_port, warm_port) = (
            Gateway::free_port(),
            Gateway::free_port(),
            Gateway::free_port(),
        );
        let warm = warm_config();
        let gw = Gateway::start_with(config(), &["--concurrency", "2"], |yaml| {
            let yaml = yaml.replace("port_value: 18100", &format!("port_value: {}", embed.port));
            let end = yaml.find("  clusters:").unwrap();
            let plain = listener_copy(&yaml, "llm_plain", plain_port, None);
            let keyword = listener_copy(
                &yaml,
                "llm_keyword",
                keyword_port,
                Some((config(), KEYWORD)),
            );
            let warm = listener_copy(&yaml, "llm_warm", warm_port, Some((config(), &warm)));
            format!("{}{plain}{keyword}{warm}{}", &yaml[..end], &yaml[end..])
        });

        // Warm the shared tool-vector cache through the long-timeout listener: up to
        // `max_batch` tools per request, ranked by keyword until every vector is in.
        eprintln!("{n} tools: embedding the catalog through the warm-up listener");
        let mut warmer = Client::connect(warm_port);
        let mut warm_requests = 0;
        loop {
            warm_requests += 1;
            let (ms, head) = warmer.post(&chat_body(&tools, "warm up the tool vectors"));
            check_ok(&head, "warm-up listener")?;
            let value = x_toolsift(&head);
            eprintln!("  warm-up request {warm_requests}: {ms:.0} ms, x-toolsift: {value}");
            if value.ends_with("ranking=hybrid") {
                break;
            }
            if warm_requests >= n.div_ceil(512) + 8 {
                return Err(format!(
                    "{n} tools: the warm-up listener never ranked by hybrid ranking: x-toolsift: {value}"
                ));
            }
        }

        let mut plain = Client::connect(plain_port);
        let mut keyword = Client::connect(keyword_port);
        let mut hybrid = Client::connect(gw.port);
        let mut direct = Client::connect(embed.port);

        // The measured listener's worker gathers the catalog's vectors from the cache; those
        // that did not fit their set come in one call, which must beat timeout_ms.
        let mut attempts = 0;
        loop {
            attempts += 1;
            *ticket += 1;
            let question = question(*ticket);
            let inputs_before = gw.stat("toolsift.embeddings.inputs");
            let (ms, head) = hybrid.post(&chat_body(&tools, &question));
            check_ok(&head, "hybrid listener")?;
            let value = x_toolsift(&head);
            let inputs = gw.stat("toolsift.embeddings.inputs") - inputs_before;
            eprintln!(
                "  measured listener, first request {attempts}: {ms:.0} ms, {inputs} inputs embedded, x-toolsift: {value}"
            );
            if value.ends_with("ranking=hybrid") {
                break;
            }
            if attempts >= 3 {
                return Err(format!(
                    "{n} tools: the measured listener cannot get every tool's vector: the cache \
                     (cache_size 10000 by default, in sets of 4) lacks {} of them, which do not \
                     fit their sets, and one call embedding them does not finish within \
                     timeout_ms 2000 (x-toolsift: {value}); measure smaller catalogs with --sizes",
                    inputs.saturating_sub(1)
                ));
            }
            embed.wait_idle()?;
        }
        let repeated = chat_body(&tools, REPEATED);
        check_hybrid(&hybrid.post(&repeated).1, n, "repeated question, first")?;
        let (_, head) = keyword.post(&repeated);
        check_ok(&head, "keyword listener")?;
        if x_toolsift(&head) != format!("kept=5 total={n}") {
            return Err(format!(
                "keyword listener: x-toolsift: {}",
                x_toolsift(&head)
            ));
        }
        let (_, head) = plain.post(&repeated);
        check_ok(&head, "no-filter listener")?;
        if header(&head, "x-toolsift").is_some() {
            return Err(format!("no-filter listener: filtered:\n{head}"));
        }

        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        let mut server_ms = Vec::new();
        let mut before = None;
        eprintln!("{n} tools: {WARM_ROUNDS} warm-up rounds, then {requests} measured");
        for round in 0..WARM_ROUNDS + requests {
            let measured = round >= WARM_ROUNDS;
            if round == WARM_ROUNDS {
                before = Some((
                    embed.counts()?,
                    gw.stat("toolsift.embeddings.calls"),
                    gw.stat("toolsift.embeddings.inputs"),
                ));
            }
            *ticket += 1;
            let question = question(*ticket);
            let body = chat_body(&tools, &question);
            let direct_body = embeddings_body(&question);
            for k in 0..MODES.len() {
                let m = (round + k) % MODES.len();
                let (ms, head) = match MODES[m] {
                    Mode::Plain => plain.post(&body),
                    Mode::Keyword => keyword.post(&body),
                    Mode::HybridNew => hybrid.post(&body),
                    Mode::HybridRepeated => hybrid.post(&repeated),
                    Mode::Direct => direct.send("/v1/embeddings", "", &direct_body),
                };
                match MODES[m] {
                    Mode::HybridNew => check_hybrid(&head, n, "new question")?,
                    Mode::HybridRepeated => check_hybrid(&head, n, "repeated question")?,
                    Mode::Direct => {
                        check_ok(&head, "embeddings server")?;
                        let dur = header(&head, "server-timing")
                            .and_then(|t| t.split("dur=").nth(1))
                            .and_then(|d| d.split([';', ',']).next())
                            .and_then(|d| d.trim().parse::<f64>().ok());
                        if let (true, Some(dur)) = (measured, dur) {
                            server_ms.push(dur);
                        }
                    }
                    Mode::Plain => check_ok(&head, "no-filter listener")?,
                    Mode::Keyword => check_ok(&head, "keyword listener")?,
                }
                if measured {
                    samples[m].push(ms);
                }
            }
        }

        // Exactly one call of one input per new question, none for the repeated one; the
        // server also counts the direct calls.
        let Some(((requests_before, inputs_before), calls_before, filter_inputs_before)) = before
        else {
            return Err("no measured rounds".into());
        };
        let (requests_after, inputs_after) = embed.counts()?;
        let calls = gw.stat("toolsift.embeddings.calls") - calls_before;
        let filter_inputs = gw.stat("toolsift.embeddings.inputs") - filter_inputs_before;
        let expected = requests as u64;
        if (calls, filter_inputs) != (expected, expected) {
            return Err(format!(
                "{n} tools: {calls} embeddings calls of {filter_inputs} inputs for {requests} new \
                 and {requests} repeated questions; expected {requests} of {requests}"
            ));
        }
        let served = (
            requests_after - requests_before,
            inputs_after - inputs_before,
        );
        // The stand-in answers the filter's calls, the model server only the direct ones.
        let through_envoy = if stand_in() { 0 } else { expected };
        if served != (through_envoy + expected, through_envoy + expected) {
            return Err(format!(
                "{n} tools: the embeddings server answered {served:?} (requests, inputs); \
                 expected {requests} through Envoy and {requests} direct, one input each"
            ));
        }

        // Diagnostics: per-round differences (the modes of one round share the machine's
        // load), and whether Envoy kept its connection to the embeddings server.
        let paired = |a: usize, subtract: &[usize]| {
            let mut d: Vec<f64> = (0..samples[a].len())
                .map(|j| samples[a][j] - subtract.iter().map(|&b| samples[b][j]).sum::<f64>())
                .collect();
            percentile(&mut d, 0.5)
        };
        eprintln!(
            "{n} tools: per-round medians: new − no filter − embeddings call {:+.3} ms, \
             repeated − no filter {:+.3} ms, keyword − no filter {:+.3} ms; embeddings cluster: {}",
            paired(2, &[0, 4]),
            paired(3, &[0]),
            paired(1, &[0]),
            gw.admin_get("/stats?filter=cluster\\.embeddings\\.upstream_(cx|rq)_total$")
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut cell = |m: usize| {
            (
                percentile(&mut samples[m], 0.5),
                percentile(&mut samples[m], 0.9),
            )
        };
        let (plain_median, plain_p90) = cell(0);
        let (keyword_median, keyword_p90) = cell(1);
        let (new_median, new_p90) = cell(2);
        let (repeated_median, repeated_p90) = cell(3);
        let (direct_median, direct_p90) = cell(4);
        let server = if server_ms.is_empty() {
            "no server-timing".to_owned()
        } else {
            let median = percentile(&mut server_ms, 0.5);
            let p90 = percentile(&mut server_ms, 0.9);
            format!("{median:.3} / {p90:.3}")
        };
        let added = |median: f64| median - plain_median;
        // The filter's own time with hybrid ranking, P50: before the call (vectors gathered,
        // the call sent; or ranked at once, a repeated question) and handling the answer
        // (read, cached, fused, selected, the body written).
        let phase = |name: &str| super::histogram(&gw, &format!("toolsift\\.phase\\.{name}")).0;
        let vm = format!("{} / {}", phase("hybrid_us"), phase("answer_us"));
        Ok(format!(
            "| {n} | {:.0} | {plain_median:.3} / {plain_p90:.3} | {keyword_median:.3} / {keyword_p90:.3} ({:+.3}) | {new_median:.3} / {new_p90:.3} ({:+.3}) | {repeated_median:.3} / {repeated_p90:.3} ({:+.3}) | {direct_median:.3} / {direct_p90:.3} | {server} | {:+.3} | {vm} |",
            repeated.len() as f64 / 1024.0,
            added(keyword_median),
            added(new_median),
            added(repeated_median),
            added(new_median) - direct_median,
        ))
    }
}

/// `--search`: the gateway's own time per search round (model time excluded), through the
/// real Envoy and `.wasm` in search mode ([`search::CONFIG`], so round 1 shows the model
/// `find_tools` alone), in front of the demo upstream's scripted model.
///
/// For each catalog size, one Envoy (so its histograms cover one size) and three kinds of
/// request, one of each per round in an order that rotates from round to round:
/// - **L1**, one search round: the model (script `search`) calls `find_tools` with its own
///   query (`x-demo-query`, words of the wanted tool's name and description, unlike the user's
///   question), the filter searches and sends the follow-up, where the model calls the tool it
///   found (`x-demo-want`). The client must get a 200 calling that tool, no `find_tools`
///   anywhere in the body, and `x-toolsift-search: rounds=1 …`.
/// - **L0**, no search round: the same request (another ticket number in the question) with
///   script `answer`: the model answers at once in text, and the filter lets it through
///   (`rounds=0`).
/// - **M**, the model's own time for round 2: the follow-up body the filter sent for that
///   tool (taken from the upstream's `GET /scripted/log` while choosing the tools), sent to the
///   upstream directly on a keep-alive connection, without Envoy.
///
/// Every request asks a question not asked before, so the request side ranks afresh each time,
/// and `find_tools`' query differs from the question, so the search ranks afresh too (the
/// filter remembers the last ranking per catalog). L1 and L0 share one keep-alive connection
/// (one Envoy worker), M has its own to the upstream. Added time per round = the median over
/// rounds of L1 − L0 − M of the same round, beside the difference of the three medians. The
/// filter's own VM time per round is its `toolsift.search.round_time_us` histogram (reading
/// the model's turn, searching, building and dispatching the follow-up), over every round of
/// that Envoy (the tool choice and warm-up included). Counters check that every L1 made
/// exactly one round and that the upstream saw exactly the requests sent.
///
/// `--sizes 50,200` and `--requests N` (measured rounds per size) change the defaults
/// ([`SIZES`], [`ROUNDS`]).
mod search {
    use super::common::{Gateway, try_http};
    use super::{Client, Result, chat_body, check_ok, header, histogram, percentile};
    use serde_json::Value;

    pub const SIZES: [usize; 3] = [50, 200, 1000];
    /// Measured rounds per catalog size (one L1, one L0 and one M each).
    pub const ROUNDS: usize = 500;
    /// Unmeasured rounds first.
    const WARM_ROUNDS: usize = 40;
    /// The plugin configuration: search mode with the request headers held (as the shipped
    /// envoy-search.yaml does: without it the answer's headers go before the loop ends, so
    /// there is no `x-toolsift-search` to check), every other setting at its default
    /// (`eager_k` 0, `max_search_rounds` 3, `find_tools` limit 5).
    pub const CONFIG: &str = r#"{"mode":"search","search":{"hold_headers":true}}"#;
    const PATH: &str = "/v1/chat/completions";
    /// Wanted tools per size (the rounds cycle through them), chosen among `CANDIDATES` tools
    /// spread over the catalog: those `find_tools` finds in one round with the query built
    /// from them.
    const TARGETS: usize = 24;
    const CANDIDATES: usize = 64;

    /// A tool the scripted model wants, the query it searches for it with, and the follow-up
    /// body the filter sent for it.
    struct Target {
        want: String,
        query: String,
        follow_up: String,
        /// The follow-up's size as Envoy sent it (its `content-length`).
        follow_up_bytes: usize,
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Case {
        /// One search round (L1).
        Round,
        /// Answered at once (L0).
        Answer,
        /// The follow-up sent to the upstream directly (M).
        Direct,
    }

    const CASES: [Case; 3] = [Case::Round, Case::Answer, Case::Direct];

    /// Prints the table; exits with status 1 (after stopping every process) on a failure.
    pub fn run(pool: &[String], sizes: Option<Vec<usize>>, rounds: usize) {
        let sizes = sizes.unwrap_or_else(|| SIZES.to_vec());
        if let Err(message) = table(pool, &sizes, rounds) {
            eprintln!("envoy_latency --search: {message}");
            std::process::exit(1);
        }
    }

    fn table(pool: &[String], sizes: &[usize], rounds: usize) -> Result<()> {
        println!(
            "| tools | client body KB | follow-up body KB | L1, one search round: median / p90 (ms) | L0, answered at once: median / p90 (ms) | M, follow-up to the model directly: median / p90 (ms) | added per round: median of L1 − L0 − M (ms) | median L1 − median L0 − median M (ms) | filter VM time per round P50 / P99 (µs) |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut ticket = 0usize;
        for &n in sizes {
            let row = measure(pool, n, rounds, &mut ticket)?;
            println!("{row}");
        }
        println!();
        println!(
            "{rounds} rounds per size after {WARM_ROUNDS} unmeasured, one L1, one L0 and one M \
             per round in rotating order; L1 and L0 on one keep-alive connection through Envoy \
             (--concurrency 2, {CONFIG}), M on one to the upstream; VM time = \
             toolsift.search.round_time_us over every round of that Envoy."
        );
        Ok(())
    }

    /// The header lines of a scripted request.
    fn scripted(target: &Target, script: &str) -> String {
        format!(
            "x-demo-model: scripted\r\nx-demo-want: {}\r\nx-demo-query: {}\r\nx-demo-script: {script}\r\n",
            target.want, target.query
        )
    }

    /// What the model searches with for the tool `name`: the words of its name and the first
    /// words of its description (ASCII letters and digits only, so it fits a header).
    fn query_for(name: &str, description: &str) -> String {
        let words = |text: &str| -> Vec<String> {
            text.split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_lowercase)
                .collect()
        };
        let mut query = words(name);
        query.extend(words(description).into_iter().take(8));
        query.join(" ")
    }

    fn question(ticket: &mut usize) -> String {
        *ticket += 1;
        super::question(*ticket)
    }

    /// The chat response's tool calls, by name.
    fn calls(body: &[u8]) -> Result<Vec<String>> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "response not JSON: {e}: {}",
                String::from_utf8_lossy(body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )
        })?;
        Ok(v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["function"]["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// The client's answer after one search round: a 200 that calls the wanted tool, says
    /// `rounds=1`, and shows no `find_tools`.
    fn check_round(head: &str, body: &[u8], want: &str) -> Result<()> {
        check_ok(head, "L1 (one search round)")?;
        let search = header(head, "x-toolsift-search").unwrap_or("(none)");
        if !search.starts_with("rounds=1 ") {
            return Err(format!("L1: x-toolsift-search: {search}"));
        }
        if contains(body, b"find_tools") {
            return Err(format!(
                "L1: find_tools reached the client: {}",
                String::from_utf8_lossy(body)
            ));
        }
        let called = calls(body)?;
        if called != [want] {
            return Err(format!("L1: called {called:?}, wanted {want}"));
        }
        Ok(())
    }

    /// The client's answer without a search round: a 200 without tool calls, `rounds=0`. (Its
    /// text names the tools the model saw, `find_tools` among them.)
    fn check_answer(head: &str, body: &[u8]) -> Result<()> {
        check_ok(head, "L0 (answered at once)")?;
        let search = header(head, "x-toolsift-search").unwrap_or("(none)");
        if !search.starts_with("rounds=0 ") {
            return Err(format!("L0: x-toolsift-search: {search}"));
        }
        if !calls(body)?.is_empty() {
            return Err(format!(
                "L0: not a text answer: {}",
                String::from_utf8_lossy(body)
            ));
        }
        Ok(())
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// `GET /scripted/log` of the upstream.
    fn upstream_log(gw: &Gateway) -> Result<Vec<Value>> {
        let r = try_http(gw.upstream.port, "GET", "/scripted/log", &[], b"")
            .map_err(|e| format!("upstream log: {e}"))?;
        match serde_json::from_slice::<Value>(&r.body) {
            Ok(Value::Array(entries)) => Ok(entries),
            _ => Err(format!("upstream log: {}", r.text())),
        }
    }

    fn reset_upstream_log(gw: &Gateway) -> Result<()> {
        try_http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"")
            .map(drop)
            .map_err(|e| format!("upstream log reset: {e}"))
    }

    /// Scripted requests the upstream has answered.
    fn upstream_scripted(gw: &Gateway) -> Result<u64> {
        let r = try_http(gw.upstream.port, "GET", "/stats", &[], b"")
            .map_err(|e| format!("upstream stats: {e}"))?;
        serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|v| v["scripted"]["requests"].as_u64())
            .ok_or_else(|| format!("upstream stats: {}", r.text()))
    }

    /// Tools the model finds in one round, with the follow-up body the filter sent for each.
    fn choose_targets(
        gw: &Gateway,
        client: &mut Client,
        pool: &[String],
        n: usize,
        tools: &str,
        ticket: &mut usize,
    ) -> Result<Vec<Target>> {
        let mut targets = Vec::new();
        let mut rejected = Vec::new();
        let mut candidates: Vec<usize> = (0..CANDIDATES).map(|i| i * n / CANDIDATES).collect();
        candidates.dedup();
        for i in candidates {
            if targets.len() == TARGETS {
                break;
            }
            let tool: Value = serde_json::from_str(&pool[i]).map_err(|e| e.to_string())?;
            let function = &tool["function"];
            let want = function["name"].as_str().unwrap_or_default().to_owned();
            let query = query_for(&want, function["description"].as_str().unwrap_or(""));
            let mut target = Target {
                want,
                query,
                follow_up: String::new(),
                follow_up_bytes: 0,
            };
            reset_upstream_log(gw)?;
            let body = chat_body(tools, &question(ticket));
            let (_, head, response) = client
                .exchange(PATH, &scripted(&target, "search"), &body)
                .map_err(|e| format!("L1: {e}"))?;
            if let Err(why) = check_round(&head, &response, &target.want) {
                rejected.push(format!("{} ({why})", target.want));
                continue;
            }
            let log = upstream_log(gw)?;
            let [_, follow_up] = log.as_slice() else {
                return Err(format!(
                    "{} requests reached the upstream for one search round",
                    log.len()
                ));
            };
            // The log holds the body parsed (keys re-ordered); the same JSON, about the same size.
            target.follow_up = follow_up["body"].to_string();
            target.follow_up_bytes = follow_up["headers"]["content-length"]
                .as_str()
                .and_then(|l| l.parse().ok())
                .unwrap_or(target.follow_up.len());
            targets.push(target);
        }
        eprintln!(
            "{n} tools: {} wanted tools found in one round, {} not: {}",
            targets.len(),
            rejected.len(),
            rejected
                .iter()
                .take(3)
                .map(|r| r.chars().take(200).collect::<String>())
                .collect::<Vec<_>>()
                .join("; ")
        );
        if !targets.is_empty() {
            let mean =
                |f: fn(&Target) -> usize| targets.iter().map(f).sum::<usize>() / targets.len();
            eprintln!(
                "{n} tools: follow-up bodies: {} bytes sent by the filter, {} bytes as re-sent \
                 from the upstream's log (mean)",
                mean(|t| t.follow_up_bytes),
                mean(|t| t.follow_up.len())
            );
        }
        if targets.len() < TARGETS / 2 {
            return Err(format!(
                "{n} tools: only {} tools are found in one round",
                targets.len()
            ));
        }
        Ok(targets)
    }

    fn measure(pool: &[String], n: usize, rounds: usize, ticket: &mut usize) -> Result<String> {
        let tools = pool[..n].join(",\n");
        let gw = Gateway::start_with(CONFIG, &["--concurrency", "2"], |yaml| yaml);
        let mut client = Client::connect(gw.port);
        let mut direct = Client::connect(gw.upstream.port);
        let targets = choose_targets(&gw, &mut client, pool, n, &tools, ticket)?;

        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
        let mut before = None;
        let mut client_bytes = 0;
        eprintln!("{n} tools: {WARM_ROUNDS} warm-up rounds, then {rounds} measured");
        for round in 0..WARM_ROUNDS + rounds {
            let measured = round >= WARM_ROUNDS;
            if round == WARM_ROUNDS {
                before = Some((gw.stat("toolsift.search.rounds"), upstream_scripted(&gw)?));
            }
            let target = &targets[round % targets.len()];
            for k in 0..CASES.len() {
                let c = (round + k) % CASES.len();
                let (ms, head, body) = match CASES[c] {
                    Case::Round => {
                        let body = chat_body(&tools, &question(ticket));
                        client_bytes = body.len();
                        let (ms, head, response) = client
                            .exchange(PATH, &scripted(target, "search"), &body)
                            .map_err(|e| format!("L1: {e}"))?;
                        check_round(&head, &response, &target.want)?;
                        (ms, head, response)
                    }
                    Case::Answer => {
                        let body = chat_body(&tools, &question(ticket));
                        let (ms, head, response) = client
                            .exchange(PATH, &scripted(target, "answer"), &body)
                            .map_err(|e| format!("L0: {e}"))?;
                        check_answer(&head, &response)?;
                        (ms, head, response)
                    }
                    Case::Direct => direct
                        .exchange(PATH, &scripted(target, "search"), &target.follow_up)
                        .map_err(|e| format!("M: {e}"))?,
                };
                if CASES[c] == Case::Direct {
                    check_ok(&head, "M (the follow-up sent directly)")?;
                    let called = calls(&body)?;
                    if called != [target.want.as_str()] {
                        return Err(format!("M: called {called:?}, wanted {}", target.want));
                    }
                }
                if measured {
                    samples[c].push(ms);
                }
            }
        }

        // Every L1 made exactly one round; the upstream got two requests per L1 and one per
        // L0 and per M, and nothing else.
        let Some((rounds_before, upstream_before)) = before else {
            return Err("no measured rounds".into());
        };
        let made = gw.stat("toolsift.search.rounds") - rounds_before;
        let served = upstream_scripted(&gw)? - upstream_before;
        let expected = rounds as u64;
        if (made, served) != (expected, 4 * expected) {
            return Err(format!(
                "{n} tools: {made} search rounds and {served} upstream requests for {rounds} \
                 rounds; expected {expected} and {}",
                4 * expected
            ));
        }
        let (vm_p50, vm_p99) = histogram(&gw, "search\\.round_time_us");

        let mut added: Vec<f64> = (0..rounds)
            .map(|j| samples[0][j] - samples[1][j] - samples[2][j])
            .collect();
        let added_median = percentile(&mut added, 0.5);
        let mut cell = |c: usize| {
            (
                percentile(&mut samples[c], 0.5),
                percentile(&mut samples[c], 0.9),
            )
        };
        let (l1, l1_p90) = cell(0);
        let (l0, l0_p90) = cell(1);
        let (m, m_p90) = cell(2);
        let follow_up_kb = targets.iter().map(|t| t.follow_up_bytes).sum::<usize>() as f64
            / targets.len() as f64
            / 1024.0;
        eprintln!(
            "{n} tools: {} wanted tools; per-round L1 − L0 − M p10 / p90: {:.3} / {:.3} ms",
            targets.len(),
            percentile(&mut added, 0.1),
            percentile(&mut added, 0.9),
        );
        Ok(format!(
            "| {n} | {:.0} | {follow_up_kb:.1} | {l1:.3} / {l1_p90:.3} | {l0:.3} / {l0_p90:.3} | {m:.3} / {m_p90:.3} | **{added_median:+.3}** | {:+.3} | {vm_p50} / {vm_p99} |",
            client_bytes as f64 / 1024.0,
            l1 - l0 - m,
        ))
    }
}

/// `--access`: what access rules cost. One Envoy serves the shipped listener with toolsift and
/// 50 access rules (identity from a header) and a copy of it with the same filter and no
/// rules; requests with the same catalog (an agent loop) alternate between the two in rounds.
/// Two callers: the same one every request (the allowed set of the catalog is remembered for
/// the caller's rules), and callers rotating over 40 groups (decided afresh every request).
/// The demo upstream answers each request (a Chat completion): under access rules toolsift
/// also checks every answer for calls of denied tools, and that is measured too.
mod access {
    use super::{Bodies, Catalogs, Client, Gateway, balanced, listener_copy, load, percentile};

    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 200;

    pub use super::access_rules::{RULES, rules};

    pub fn run(pool: &[String], sizes: Option<Vec<usize>>) {
        let sizes = sizes.unwrap_or_else(|| vec![200]);
        println!("load before: {}", load());
        println!(
            "| tools | rules | caller | median with rules / without (ms) | added median (ms) | p99 with / without (ms) | x-toolsift with rules |"
        );
        println!("|---:|---:|---|---:|---:|---:|---|");
        for n in sizes {
            for rotating in [false, true] {
                println!("{}", measure(pool, n, rotating));
            }
        }
        println!("load after: {}", load());
    }

    fn measure(pool: &[String], n: usize, rotating: bool) -> String {
        let config = rules(&pool[..n]);
        let bodies = Bodies::new(pool, n, Catalogs::Same);
        let norules_port = Gateway::free_port();
        let gw = Gateway::start_with(&config, &["--concurrency", "2"], |y| {
            let end = y.find("  clusters:").unwrap();
            let copy = listener_copy(&y, "llm_norules", norules_port, Some((&config, "{}")));
            balanced(format!("{}{}{}", &y[..end], copy, &y[end..]))
        });
        let mut with_rules = Client::connect(gw.port);
        let mut without = Client::connect(norules_port);
        let caller = |i: usize| {
            if rotating {
                // Four groups each: callers whose allowed tools are more than `min_tools`,
                // so both listeners forward `top_k` tools.
                let g = |k: usize| (i * k + k) % 40;
                format!(
                    "x-group: g{} g{} g{} g{} finance\r\n",
                    g(1),
                    g(3),
                    g(7),
                    g(11)
                )
            } else {
                "x-group: g3 g17 finance\r\n".to_owned()
            }
        };
        let path = "/v1/chat/completions";
        let (_, head) = with_rules.send(path, &caller(0), &bodies.body(0));
        let shown = super::header(&head, "x-toolsift")
            .unwrap_or_default()
            .to_owned();
        assert!(
            shown.starts_with("kept=5 ") && shown.contains(" denied="),
            "{head}"
        );
        let (_, head) = without.send(path, "", &bodies.body(0));
        assert!(!head.contains("denied="), "{head}");
        for i in 0..100 {
            with_rules.send(path, &caller(i), &bodies.body(i));
            without.send(path, "", &bodies.body(i));
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut next = 100;
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                a.push(with_rules.send(path, &caller(next), &bodies.body(next)).0);
                next += 1;
            }
            for _ in 0..PER_ROUND {
                b.push(without.send(path, "", &bodies.body(next)).0);
                next += 1;
            }
        }
        let (m_a, m_b) = (percentile(&mut a, 0.5), percentile(&mut b, 0.5));
        let (p_a, p_b) = (percentile(&mut a, 0.99), percentile(&mut b, 0.99));
        format!(
            "| {n} | {RULES} | {} | {m_a:.3} / {m_b:.3} | **{:.3}** | {p_a:.3} / {p_b:.3} | `{shown}` |",
            if rotating {
                "rotating over 40 groups"
            } else {
                "the same"
            },
            m_a - m_b,
        )
    }
}

/// `--loop-guard`: what the loop guard costs. One Envoy serves the shipped listener with
/// toolsift and `loop_guard: {}` and a copy of it with the same filter without the guard;
/// requests alternate between the two in rounds. OpenAI Chat bodies with 200 tools and a
/// 100-message history (the question, then 49 calls with their results, each call different,
/// the last one repeating the one before: the guard evicts that tool), a new question each.
mod loop_guard {
    use super::{Client, Gateway, balanced, listener_copy, load, percentile};

    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 200;
    const MESSAGES: usize = 100;

    fn body(tools: &str, looping: &str, i: usize) -> String {
        let mut messages = vec![format!(
            r#"{{"role":"user","content":"Check the deployment logs and tell me why the service fails (ticket {i})"}}"#
        )];
        let calls = (MESSAGES - 1) / 2;
        for c in 0..calls {
            // The last call repeats the one before it: a loop.
            let page = if c + 1 == calls { c - 1 } else { c };
            messages.push(format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{c}","type":"function","function":{{"name":"{looping}","arguments":"{{\"page\":{page},\"filter\":\"error\"}}"}}}}]}}"#
            ));
            messages.push(format!(
                r#"{{"role":"tool","tool_call_id":"call_{c}","content":"page {page}: 20 lines"}}"#
            ));
        }
        format!(
            r#"{{"model":"gpt-4.1","messages":[{}],"tools":[{tools}],"tool_choice":"auto"}}"#,
            messages.join(",")
        )
    }

    pub fn run(pool: &[String]) {
        let n = 200;
        println!("load before: {}", load());
        let tools = pool[..n].join(",\n");
        let first: serde_json::Value = serde_json::from_str(&pool[0]).unwrap();
        let looping = first["function"]["name"].as_str().unwrap().to_owned();
        let config = r#"{"loop_guard":{}}"#;
        let plain_port = Gateway::free_port();
        let gw = Gateway::start_with(config, &["--concurrency", "2"], |y| {
            let end = y.find("  clusters:").unwrap();
            let copy = listener_copy(&y, "llm_noguard", plain_port, Some((config, "{}")));
            balanced(format!("{}{}{}", &y[..end], copy, &y[end..]))
        });
        let mut guarded = Client::connect(gw.port);
        let mut plain = Client::connect(plain_port);
        let path = "/v1/chat/completions";
        let bodies: Vec<String> = (0..64).map(|i| body(&tools, &looping, i)).collect();
        let (_, head) = guarded.send(path, "", &bodies[0]);
        let shown = super::header(&head, "x-toolsift")
            .unwrap_or_default()
            .to_owned();
        assert!(
            shown.contains(&format!(" loop=evicted:{looping}")),
            "{head}"
        );
        let (_, head) = plain.send(path, "", &bodies[0]);
        assert!(!head.contains("loop="), "{head}");
        for i in 0..100 {
            guarded.send(path, "", &bodies[i % 64]);
            plain.send(path, "", &bodies[i % 64]);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut next = 100;
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                a.push(guarded.send(path, "", &bodies[next % 64]).0);
                next += 1;
            }
            for _ in 0..PER_ROUND {
                b.push(plain.send(path, "", &bodies[next % 64]).0);
                next += 1;
            }
        }
        let (m_a, m_b) = (percentile(&mut a, 0.5), percentile(&mut b, 0.5));
        let (p_a, p_b) = (percentile(&mut a, 0.99), percentile(&mut b, 0.99));
        println!(
            "| tools | messages | median with guard / without (ms) | added median (ms) | p99 with / without (ms) | x-toolsift with guard |"
        );
        println!("|---:|---:|---:|---:|---:|---|");
        println!(
            "| {n} | {MESSAGES} | {m_a:.3} / {m_b:.3} | **{:.3}** | {p_a:.3} / {p_b:.3} | `{shown}` |",
            m_a - m_b
        );
        println!("load after: {}", load());
    }
}

/// `--shadow`: a shadowed request (`shadow.sample` 1: all 200 tools forwarded, the answer read
/// as it passes and its call measured) against the same Envoy without the filter and against
/// filter mode (5 tools forwarded, the answer read for the ranks of kept tools), one Envoy,
/// three listeners, rounds alternating. The scripted model answers every request with a call.
/// Whole answers: the median time of the exchange. Streams (`x-demo-chunk-delay-ms` 5 between
/// events): the median time to the first byte of the body, and to the last. With `think`, the
/// model waits that long before answering (`x-demo-delay-ms`).
mod shadow {
    use super::{Client, Gateway, balanced, listener_copy, load, percentile};
    use std::io::{BufRead, Read, Write};
    use std::time::Instant;

    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 60;

    fn body(tools: &str, stream: bool, i: usize) -> String {
        format!(
            r#"{{"model":"gpt-4.1","stream":{stream},"messages":[{{"role":"user","content":"Check the deployment logs and tell me why the service fails (ticket {i})"}}],"tools":[{tools}]}}"#
        )
    }

    /// Milliseconds to the first byte of the (chunked) body, and to its end.
    fn first_and_last(client: &mut Client, extra: &str, body: &str) -> (f64, f64) {
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        );
        let start = Instant::now();
        client.writer.write_all(head.as_bytes()).unwrap();
        client.writer.write_all(body.as_bytes()).unwrap();
        loop {
            let mut line = String::new();
            client.reader.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "connection closed");
            if line == "\r\n" {
                break;
            }
        }
        let mut first = None;
        loop {
            let mut size = String::new();
            client.reader.read_line(&mut size).unwrap();
            first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1000.0);
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; size + 2];
            client.reader.read_exact(&mut chunk).unwrap();
            if size == 0 {
                break;
            }
        }
        (first.unwrap_or(0.0), start.elapsed().as_secs_f64() * 1000.0)
    }

    pub fn run(pool: &[String], think: Option<u64>) {
        let n = 200;
        println!("model's think time: {} ms", think.unwrap_or(0));
        println!("load before: {}", load());
        let tools = pool[..n].join(",\n");
        let first: serde_json::Value = serde_json::from_str(&pool[0]).unwrap();
        let want = first["function"]["name"].as_str().unwrap().to_owned();
        let config = r#"{"shadow":{"sample":1}}"#;
        // `TOOLSIFT_BASELINE_WASM=path`: two more listeners with that `.wasm` (the previous
        // build), shadowed and in filter mode, for an A/B of the request path in the same run.
        let baseline = std::env::var("TOOLSIFT_BASELINE_WASM").ok();
        let (filter_port, plain_port, base_port, base_shadow_port) = (
            Gateway::free_port(),
            Gateway::free_port(),
            Gateway::free_port(),
            Gateway::free_port(),
        );
        let gw = Gateway::start_with(config, &["--concurrency", "2"], |y| {
            let end = y.find("  clusters:").unwrap();
            let filter = listener_copy(&y, "llm_filter", filter_port, Some((config, "{}")));
            let plain = listener_copy(&y, "llm_plain", plain_port, None);
            let base = baseline.as_deref().map_or_else(String::new, |wasm| {
                let ours = super::repo().join("target/wasm32-wasip1/release/toolsift.wasm");
                let shadowed = listener_copy(&y, "llm_base_shadow", base_shadow_port, None);
                let filter = listener_copy(&y, "llm_base", base_port, Some((config, "{}")));
                format!("{shadowed}{filter}")
                    .replace(ours.to_str().unwrap(), wasm)
                    .replace("vm_id: toolsift", "vm_id: toolsift_baseline")
            });
            balanced(format!("{}{filter}{plain}{base}{}", &y[..end], &y[end..]))
        });
        let mut ports = vec![gw.port, filter_port, plain_port];
        let mut names = vec!["shadowed", "filter mode", "no filter"];
        if baseline.is_some() {
            ports.extend([base_shadow_port, base_port]);
            names.extend(["shadowed, baseline .wasm", "filter mode, baseline .wasm"]);
        }
        let listeners = ports.len();
        let think = think.map_or_else(String::new, |ms| format!("x-demo-delay-ms: {ms}\r\n"));
        let extra = format!(
            "x-demo-model: scripted\r\nx-demo-want: {want}\r\nx-demo-call: {want}\r\n{think}"
        );
        let stream_extra = format!("{extra}x-demo-chunk-delay-ms: 5\r\n");
        let mut clients: Vec<Client> = ports.iter().map(|p| Client::connect(*p)).collect();
        let whole: Vec<String> = (0..64).map(|i| body(&tools, false, i)).collect();
        let streamed: Vec<String> = (0..64).map(|i| body(&tools, true, i)).collect();
        let path = "/v1/chat/completions";
        let (_, head) = clients[0].send(path, &extra, &whole[0]);
        let shown = super::header(&head, "x-toolsift")
            .unwrap_or_default()
            .to_owned();
        assert!(shown.contains("shadow=would_keep:5"), "{head}");
        for i in 0..60 {
            for c in clients.iter_mut() {
                c.send(path, &extra, &whole[i % 64]);
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); listeners];
        let mut firsts: Vec<Vec<f64>> = vec![Vec::new(); listeners];
        let mut lasts: Vec<Vec<f64>> = vec![Vec::new(); listeners];
        let mut next = 0;
        for round in 0..ROUNDS {
            for k in 0..listeners {
                // Rotate which listener goes first in a round.
                let at = (k + round) % listeners;
                for _ in 0..PER_ROUND {
                    times[at].push(clients[at].send(path, &extra, &whole[next % 64]).0);
                    let (f, l) =
                        first_and_last(&mut clients[at], &stream_extra, &streamed[next % 64]);
                    firsts[at].push(f);
                    lasts[at].push(l);
                    next += 1;
                }
            }
        }
        let requests = gw.stat("toolsift.shadow.requests");
        let missed = gw.stat("toolsift.shadow.calls");
        println!(
            "| {n} tools | median whole answer (ms) | added over no filter (ms) | median first byte of a stream (ms) | added (ms) | median last byte (ms) |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        let med = |v: &mut Vec<f64>| percentile(v, 0.5);
        let (plain_whole, plain_first) = (med(&mut times[2]), med(&mut firsts[2]));
        for k in 0..listeners {
            let (w, f, l) = (med(&mut times[k]), med(&mut firsts[k]), med(&mut lasts[k]));
            println!(
                "| {} | {w:.3} | **{:+.3}** | {f:.3} | **{:+.3}** | {l:.3} |",
                names[k],
                w - plain_whole,
                f - plain_first
            );
        }
        println!(
            "shadowed requests counted: {requests}, calls measured: {missed}; x-toolsift: `{shown}`"
        );
        println!("load after: {}", load());
    }
}

/// `--auto-k`: filter mode at 200 tools, the same catalog every request (64 questions), with
/// `shadow` (a share too small to draw in the run, so that every request is filtered and its
/// answer read) and `auto_k` (learning, and with the fleet's calibration), against the same
/// filter without `auto_k`, and with
/// `TOOLSIFT_BASELINE_WASM=path` against a previous `.wasm` without it. Each variant runs in a
/// fresh Envoy of its own (two workers), in mirrored order (A B C C B A), and its row is the
/// filter's own time (`toolsift.filter_time_us`, P50 and P99 over the run) and the median time
/// through Envoy. Each filter runs alone: in one Envoy, the same `.wasm` measured 0.25 ms
/// slower per request through its listener than through another's, too much noise to tell
/// microseconds apart.
mod auto_k {
    use super::{Client, Gateway, histogram, load, percentile};

    const REQUESTS: usize = 1500;
    const SHADOW: &str = r#"{"shadow":{"sample":0.000001}}"#;
    const AUTO_K: &str = r#"{"shadow":{"sample":0.000001},"auto_k":{"keep":0.95}}"#;
    /// With the fleet's calibration: every pooled call at slot 5, so that the catalog gets
    /// `k=fleet_pooled:5`, the same cut as `top_k` 5; the k is decided at configuration.
    const FLEET: &str = r#"{"shadow":{"sample":0.000001},"auto_k":{"keep":0.95,
        "calibration":{"version":1,"max_k":64,"pooled":{"calls":300,"slots":[[5,300]]}}}}"#;

    /// The fleet's calibration with transitions: after `called`, the eight tools `next`
    /// names (counts 80 down to 10), so that every request with a history gets a list of
    /// eight to fuse with its ranking.
    fn fleet_with_transitions(called: &str, next: &[String]) -> String {
        let pairs: Vec<String> = next
            .iter()
            .enumerate()
            .map(|(i, n)| format!(r#"[{called:?},{n:?},{}]"#, 80 - 10 * i))
            .collect();
        FLEET.replacen(
            "}}}}",
            &format!(
                r#"}},"transitions":{{"pooled":[{}]}}}}}}}}"#,
                pairs.join(",")
            ),
            1,
        )
    }

    /// Request `i`: its question, or with `turns` the question, the assistant asking to go on
    /// and "Yes, please." (ranked with the question before and since the assistant's turn is
    /// read: what reading it adds), or with `history` (`Some(name)`) the question, the
    /// assistant's call of `name` and its result: a turn of an agent loop with a history.
    fn body(tools: &str, i: usize, turns: bool, history: Option<&str>) -> String {
        let question = super::bodies::question(i);
        let messages = if let Some(called) = history {
            format!(
                r#"{{"role":"user","content":"{question}"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":{called:?},"arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":"{{\"ok\": true}}"}}"#
            )
        } else if turns {
            format!(
                r#"{{"role":"user","content":"{question}"}},{{"role":"assistant","content":"I can do that now. Shall I go ahead?"}},{{"role":"user","content":"Yes, please."}}"#
            )
        } else {
            format!(r#"{{"role":"user","content":"{question}"}}"#)
        };
        format!(r#"{{"model":"gpt-4.1","messages":[{messages}],"tools":[{tools}]}}"#)
    }

    /// One variant's run: its filter time P50 and P99 (µs), and the median through Envoy (ms).
    fn measure(
        config: &str,
        wasm: Option<&str>,
        tools: &str,
        want: &str,
        turns: bool,
        history: Option<&str>,
    ) -> (String, String, f64) {
        let gw = Gateway::start_with(config, &["--concurrency", "2"], |y| match wasm {
            Some(wasm) => {
                let ours = super::repo().join("target/wasm32-wasip1/release/toolsift.wasm");
                y.replace(ours.to_str().unwrap(), wasm)
            }
            None => y,
        });
        let extra =
            format!("x-demo-model: scripted\r\nx-demo-want: {want}\r\nx-demo-call: {want}\r\n");
        let bodies: Vec<String> = (0..64).map(|i| body(tools, i, turns, history)).collect();
        let mut client = Client::connect(gw.port);
        let path = "/v1/chat/completions";
        let (_, head) = client.send(path, &extra, &bodies[0]);
        let shown = super::header(&head, "x-toolsift")
            .unwrap_or_default()
            .to_owned();
        // A history's called tool is pinned: 5 kept, or 6.
        let kept = if history.is_some() {
            "kept="
        } else {
            "kept=5 total=200"
        };
        assert!(shown.starts_with(kept), "{head}");
        assert_eq!(shown.contains(" k=default:5"), config == AUTO_K, "{shown}");
        assert_eq!(
            shown.contains(" k=fleet_pooled:5"),
            config.starts_with(&FLEET[..FLEET.len() - 4]),
            "{shown}"
        );
        // A warm-up for V8's optimising tier; in the histogram too (200 of 1,700 requests).
        for i in 0..200 {
            client.send(path, &extra, &bodies[i % 64]);
        }
        let mut times: Vec<f64> = (0..REQUESTS)
            .map(|i| client.send(path, &extra, &bodies[i % 64]).0)
            .collect();
        let (p50, p99) = histogram(&gw, "toolsift\\.filter_time_us");
        (p50, p99, percentile(&mut times, 0.5))
    }

    pub fn run(pool: &[String], turns: bool, history: bool) {
        let n = 200;
        if turns {
            println!("each request: its question, the assistant's ask, \"Yes, please.\"");
        }
        println!("load before: {}", load());
        let tools = pool[..n].join(",\n");
        let name = |i: usize| -> String {
            let tool: serde_json::Value = serde_json::from_str(&pool[i]).unwrap();
            tool["function"]["name"].as_str().unwrap().to_owned()
        };
        let want = name(0);
        let baseline = std::env::var("TOOLSIFT_BASELINE_WASM").ok();
        let mut variants: Vec<(&str, String, Option<&str>)> = Vec::new();
        if history {
            // `--history`: every request called tool 1 before; the fleet's transitions name
            // eight tools after it, spread over the catalog. The baseline takes the same
            // configuration (it reads and checks transitions, and ranks without them).
            println!("each request: its question, the assistant's call of a tool, its result");
            let next: Vec<String> = (0..8).map(|i| name(7 + 23 * i)).collect();
            let with = fleet_with_transitions(&name(1), &next);
            if let Some(wasm) = baseline.as_deref() {
                variants.push((
                    "baseline .wasm, the fleet's transitions",
                    with.clone(),
                    Some(wasm),
                ));
            }
            variants.push((
                "this .wasm, the fleet's calibration alone",
                FLEET.to_owned(),
                None,
            ));
            variants.push(("this .wasm, the fleet's transitions", with, None));
        } else {
            if let Some(wasm) = baseline.as_deref() {
                variants.push(("baseline .wasm, shadow", SHADOW.to_owned(), Some(wasm)));
                variants.push((
                    "baseline .wasm, shadow + auto_k",
                    AUTO_K.to_owned(),
                    Some(wasm),
                ));
            }
            variants.push(("this .wasm, shadow", SHADOW.to_owned(), None));
            variants.push(("this .wasm, shadow + auto_k", AUTO_K.to_owned(), None));
            variants.push((
                "this .wasm, shadow + auto_k, the fleet's calibration",
                FLEET.to_owned(),
                None,
            ));
        }
        let called = history.then(|| name(1));
        let order: Vec<usize> = (0..variants.len())
            .chain((0..variants.len()).rev())
            .collect();
        let mut rows: Vec<Vec<(String, String, f64)>> = vec![Vec::new(); variants.len()];
        for &v in &order {
            let (_, config, wasm) = &variants[v];
            rows[v].push(measure(
                config,
                *wasm,
                &tools,
                &want,
                turns,
                called.as_deref(),
            ));
        }
        println!(
            "| {n} tools, same catalog, {REQUESTS} requests a run | filter time P50 (µs), runs A B C C B A | P99 (µs) | median through Envoy (ms) |"
        );
        println!("|---|---|---|---|");
        for (v, (name, _, _)) in variants.iter().enumerate() {
            let cell = |f: &dyn Fn(&(String, String, f64)) -> String| {
                rows[v].iter().map(f).collect::<Vec<_>>().join(", ")
            };
            println!(
                "| {name} | {} | {} | {} |",
                cell(&|r| r.0.clone()),
                cell(&|r| r.1.clone()),
                cell(&|r| format!("{:.3}", r.2))
            );
        }
        println!("load after: {}", load());
    }
}

/// `--rotating`: requests rotating over 10, 100, 1,000 and 10,000 distinct catalogs of
/// [`rotating::TOOLS`] tools each, every one a different choice from one pool of
/// [`rotating::POOL`] dataset tools (as per-user or per-tenant tool sets are: the same tools in
/// many combinations), each request with its own question. The shipped configuration
/// (`catalog_cache_size` 1,024, `catalog_cache_bytes` 64 MiB per worker), or with
/// `--cache-mb N` another bytes bound. Per count, a fresh
/// Envoy with the filter's listener and a plain copy; every catalog sent once to each worker
/// first; then the latency rounds and throughput pairs of the main table, the catalog-cache
/// hit ratio of the measured requests, and Envoy's memory before and after.
mod rotating {
    use super::*;
    use std::sync::Arc;

    pub const COUNTS: [usize; 4] = [10, 100, 1000, 10_000];
    pub const TOOLS: usize = 200;
    pub const POOL: usize = 600;
    const PER_ROUND: usize = 150;

    /// The pool indexes of catalog `c`'s tools: [`TOOLS`] of the [`POOL`], drawn by a
    /// generator seeded with `c`, in pool order.
    fn members(c: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..POOL).collect();
        let mut x = (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for i in 0..TOOLS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = i + (x % (POOL - i) as u64) as usize;
            order.swap(i, j);
        }
        let mut chosen = order[..TOOLS].to_vec();
        chosen.sort_unstable();
        chosen
    }

    /// Request `i`: catalog `i % count`, question `i`.
    fn body(pool: &[String], count: usize, i: usize) -> String {
        let tools: Vec<&str> = members(i % count)
            .into_iter()
            .map(|j| pool[j].as_str())
            .collect();
        chat_body(&tools.join(",\n"), &question(i))
    }

    pub fn run(pool: &[String], counts: &[usize], config: &str) {
        let pool: Arc<Vec<String>> = Arc::new(pool[..POOL].to_vec());
        println!("configuration: {config}; load before: {}", load());
        println!(
            "| catalogs | cache hits | median filter / plain (ms) | added median (ms) | p99 filter / plain (ms) | added p99 (ms) | req/s ratio, 2 / 8 connections | filter time P50 / P99 (µs) | P50 read / analyse (hit) / assemble (miss) / write (µs) | Envoy RSS before → after (MiB) |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &count in counts {
            println!("{}", measure(&pool, count, config));
        }
        println!("load after: {}", load());
    }

    fn measure(pool: &Arc<Vec<String>>, count: usize, config: &str) -> String {
        let plain_port = Gateway::free_port();
        let gw = Gateway::start_with(config, &["--concurrency", "2"], |y| {
            two_listeners(y, plain_port)
        });
        let rss_before = rss_mb(gw.pid());
        // Every catalog once on each of two connections: one per worker (the listener
        // balances them exactly), so both workers have seen each.
        let mut warm = [Client::connect(gw.port), Client::connect(gw.port)];
        for i in 0..count {
            let body = body(pool, count, i);
            for client in &mut warm {
                let (_, headers) = client.post(&body);
                assert!(headers.contains("x-toolsift: kept=5"), "{headers}");
            }
        }
        drop(warm);
        let mut filtered = Client::connect(gw.port);
        let mut plain = Client::connect(plain_port);
        let (_, headers) = plain.post(&body(pool, count, 0));
        assert!(!headers.contains("x-toolsift"), "{headers}");
        let hits_before = gw.stat("toolsift.catalog_cache.hits");
        let misses_before = gw.stat("toolsift.catalog_cache.misses");
        let (mut with, mut without) = (Vec::new(), Vec::new());
        let (mut next, mut next_plain) = (count, count);
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                with.push(filtered.post(&body(pool, count, next)).0);
                next += 1;
            }
            for _ in 0..PER_ROUND {
                without.push(plain.post(&body(pool, count, next_plain)).0);
                next_plain += 1;
            }
        }
        let hits = gw.stat("toolsift.catalog_cache.hits") - hits_before;
        let misses = gw.stat("toolsift.catalog_cache.misses") - misses_before;
        drop((filtered, plain));
        let ratio = |connections: usize| {
            throughput_ratio(gw.port, plain_port, |port| {
                let pool = Arc::clone(pool);
                throughput_of(port, connections, count, move |i| body(&pool, count, i))
            })
        };
        let ratio = format!("{:.2} / {:.2}", ratio(2), ratio(8));
        let (p50, p99) = histogram(&gw, "toolsift\\.filter_time_us");
        let phases = phases(&gw, &["read_us", "analyse_us", "assemble_us", "write_us"]);
        let rss_after = rss_mb(gw.pid());
        let (m_with, m_without) = (percentile(&mut with, 0.5), percentile(&mut without, 0.5));
        let (p_with, p_without) = (percentile(&mut with, 0.99), percentile(&mut without, 0.99));
        format!(
            "| {count} | {:.0} % | {m_with:.3} / {m_without:.3} | **{:.3}** | {p_with:.3} / {p_without:.3} | {:.3} | {ratio} | {p50} / {p99} | {phases} | {rss_before:.0} → {rss_after:.0} |",
            100.0 * hits as f64 / (hits + misses).max(1) as f64,
            m_with - m_without,
            p_with - p_without,
        )
    }
}
