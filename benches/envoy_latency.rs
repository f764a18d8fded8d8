//! Latency through the real Envoy: the same Envoy process serves the shipped envoy.yaml listener
//! (with toolsift) and a copy of it without the filter; requests alternate between the two in
//! rounds, so both see the same machine noise. Run with `make bench-latency`.
//!
//! For each catalog size: a fresh Envoy (so the filter's histogram covers one size), warm-up,
//! then alternating rounds of sequential requests on one keep-alive connection per listener
//! (latency), then a short closed-loop run on two connections per listener (throughput), then
//! the filter's own time from its histogram and the Envoy process's resident memory.
//!
//! With `--hybrid` (`make bench-latency-hybrid`): hybrid ranking against the real embeddings
//! server instead; see [`hybrid`].
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::{Gateway, repo};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [50, 200, 1000, 4000];
const ROUNDS: usize = 6;
const PER_ROUND: usize = 200;
const THROUGHPUT_SECS: u64 = 3;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let given_sizes: Option<Vec<usize>> = args
        .iter()
        .position(|a| a == "--sizes")
        .map(|i| args[i + 1].split(',').map(|s| s.parse().unwrap()).collect());
    let pool = dataset_tools();
    if args.iter().any(|a| a == "--hybrid") {
        let requests = match args.iter().position(|a| a == "--requests") {
            Some(i) => args[i + 1].parse().unwrap(),
            None => hybrid::REQUESTS,
        };
        let stand_in = args.iter().any(|a| a == "--stand-in");
        hybrid::run(&pool, given_sizes, requests, stand_in);
        return;
    }
    let sizes = given_sizes.unwrap_or_else(|| SIZES.to_vec());
    println!(
        "| tools | body KB | median filter / plain (ms) | added median (ms) | p99 filter / plain (ms) | added p99 (ms) | req/s ratio | filter time P50 / P99 (µs) | Envoy RSS before → after (MB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        let bodies = request_bodies(&pool, n);
        let row = measure(n, &bodies);
        println!("{row}");
    }
}

/// Tools sampled evenly from the three shared datasets (OpenAI function format).
fn dataset_tools() -> Vec<String> {
    let mut all = Vec::new();
    for name in ["livemcpbench", "toolbench", "seal_tools"] {
        let path = repo()
            .join("../shared/datasets")
            .join(name)
            .join("tools.jsonl");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        all.push(text.lines().map(str::to_owned).collect::<Vec<_>>());
    }
    // Interleave so every size mixes the three sources.
    let longest = all.iter().map(Vec::len).max().unwrap();
    let mut out = Vec::new();
    for i in 0..longest {
        for source in &all {
            if let Some(t) = source.get(i) {
                out.push(t.clone());
            }
        }
    }
    out
}

/// Request bodies with the same `n` tools and a different question each, so that every request
/// is ranked afresh (the filter remembers the last question per catalog, as an agent loop
/// repeats it; this benchmark measures the costlier case of a new question every time).
fn request_bodies(pool: &[String], n: usize) -> Vec<String> {
    let tools = pool[..n].join(",\n");
    QUESTIONS
        .iter()
        .cycle()
        .take(64)
        .enumerate()
        .map(|(i, q)| chat_body(&tools, &format!("{q} (ticket {i})")))
        .collect()
}

/// A Chat Completions request with the tools array `tools` (its items, comma-separated) and the
/// user message `question` (JSON-safe text).
fn chat_body(tools: &str, question: &str) -> String {
    format!(
        r#"{{"model":"gpt-4.1","messages":[{{"role":"system","content":"You are a helpful agent."}},{{"role":"user","content":"{question}"}}],"tools":[{tools}],"tool_choice":"auto","temperature":0.2}}"#
    )
}

const QUESTIONS: [&str; 8] = [
    "Find the latest news about the football transfer market and send a short summary to my team by email",
    "What is the weather forecast for Lisbon this weekend",
    "Look up the stock price of Apple and convert it to euros",
    "Search for recent papers about protein folding and list their authors",
    "Translate this customer review from German into English",
    "Book a table for four at an Italian restaurant near the office tonight",
    "Create a calendar event for the quarterly planning meeting next Tuesday",
    "Get the lyrics of the song that is number one in the charts",
];

fn two_listeners(yaml: String, plain_port: u16) -> String {
    let end = yaml.find("  clusters:").unwrap();
    let plain = listener_copy(&yaml, "llm_plain", plain_port, None);
    format!("{}{}{}", &yaml[..end], plain, &yaml[end..])
}

/// The shipped listener (`llm_ingress`) copied as `name` on `port`: without the toolsift filter
/// when `config` is `None`, else with its plugin configuration text `from` replaced by `to`.
fn listener_copy(yaml: &str, name: &str, port: u16, config: Option<(&str, &str)>) -> String {
    let start = yaml.find("  - name: llm_ingress").unwrap();
    let end = yaml.find("  clusters:").unwrap();
    let listener = &yaml[start..end];
    let mut copy = String::new();
    let mut skipping = false;
    for line in listener.lines() {
        if config.is_none() && line.trim_start() == "- name: toolsift" {
            skipping = true;
        } else if line.trim_start() == "- name: envoy.filters.http.router" {
            skipping = false;
        }
        if !skipping {
            copy.push_str(line);
            copy.push('\n');
        }
    }
    if let Some((from, to)) = config {
        assert!(copy.contains(from), "no `{from}` in the listener:\n{copy}");
        copy = copy.replace(from, to);
    }
    let copy = copy
        .replace("name: llm_ingress", &format!("name: {name}"))
        .replace("stat_prefix: llm_ingress", &format!("stat_prefix: {name}"));
    // The listener's own port is the first `port_value:` in its block.
    let at = copy.find("port_value: ").unwrap() + "port_value: ".len();
    let digits = copy[at..].chars().take_while(char::is_ascii_digit).count();
    format!("{}{port}{}", &copy[..at], &copy[at + digits..])
}

fn measure(n: usize, bodies: &[String]) -> String {
    let body = bodies[0].as_str();
    let plain_port = Gateway::free_port();
    let gw = Gateway::start_with("{}", &["--concurrency", "2"], |y| {
        two_listeners(y, plain_port)
    });
    let rss_before = rss_mb(gw.pid());

    let mut filtered = Client::connect(gw.port);
    let mut plain = Client::connect(plain_port);
    // Sanity: the filter cut the request, the plain listener did not. (The upstream does not
    // parse bodies in this benchmark: `x-demo-echo: none`.)
    let (_, headers) = filtered.post(body);
    assert!(headers.contains("x-toolsift: kept=5"), "{headers}");
    let (_, headers) = plain.post(body);
    assert!(!headers.contains("x-toolsift"), "{headers}");

    for body in bodies.iter().cycle().take(100) {
        filtered.post(body);
        plain.post(body);
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut next = bodies.iter().cycle();
    for _ in 0..ROUNDS {
        for body in next.by_ref().take(PER_ROUND) {
            with.push(filtered.post(body).0);
        }
        for body in next.by_ref().take(PER_ROUND) {
            without.push(plain.post(body).0);
        }
    }
    let rps_with = throughput(gw.port, bodies);
    let rps_without = throughput(plain_port, bodies);
    let rps_with_again = throughput(gw.port, bodies);
    let rps_without_again = throughput(plain_port, bodies);
    let ratio = (rps_with + rps_with_again) / (rps_without + rps_without_again);

    let (p50, p99) = filter_histogram(&gw);
    let rss_after = rss_mb(gw.pid());
    let (m_with, m_without) = (percentile(&mut with, 0.5), percentile(&mut without, 0.5));
    let (p_with, p_without) = (percentile(&mut with, 0.99), percentile(&mut without, 0.99));
    format!(
        "| {n} | {:.0} | {m_with:.3} / {m_without:.3} | {:.3} | {p_with:.3} / {p_without:.3} | {:.3} | {ratio:.2} | {p50} / {p99} | {rss_before:.0} → {rss_after:.0} |",
        body.len() as f64 / 1024.0,
        m_with - m_without,
        p_with - p_without,
    )
}

fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

/// Requests per second over two keep-alive connections for a few seconds.
fn throughput(port: u16, bodies: &[String]) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(THROUGHPUT_SECS);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let bodies = bodies.to_vec();
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                let mut n = 0u64;
                for body in bodies.iter().cycle() {
                    if Instant::now() >= deadline {
                        break;
                    }
                    c.post(body);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    total as f64 / THROUGHPUT_SECS as f64
}

/// P50 and P99 of `toolsift.filter_time_us` once the stats flush has published it.
fn filter_histogram(gw: &Gateway) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        let text = gw.admin_get("/stats?filter=filter_time_us&format=json");
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
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
            body.len()
        );
        let start = Instant::now();
        self.writer.write_all(head.as_bytes()).unwrap();
        self.writer.write_all(body.as_bytes()).unwrap();
        let mut headers = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            headers.push_str(&line);
        }
        let mut sink = vec![0u8; length];
        self.reader.read_exact(&mut sink).unwrap();
        (start.elapsed().as_secs_f64() * 1000.0, headers)
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
    use super::{Client, Gateway, QUESTIONS, chat_body, listener_copy, percentile};
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

    type Result<T> = std::result::Result<T, String>;

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

    /// A header's value from a response head (names compared case-insensitively).
    fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
        head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    fn x_toolsift(head: &str) -> &str {
        header(head, "x-toolsift").unwrap_or("(none)")
    }

    fn check_ok(head: &str, what: &str) -> Result<()> {
        if head.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(format!("{what}: not a 200 answer:\n{head}"))
        }
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
            "| tools | body KB | no filter: median / p90 (ms) | keyword: median / p90 (added median) | hybrid, new question: median / p90 (added median) | hybrid, repeated question: median / p90 (added median) | embeddings call, client: median / p90 (ms) | embeddings server time: median / p90 (ms) | hybrid new added − embeddings call (ms) |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
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
            let question = format!("{} (ticket {ticket})", QUESTIONS[*ticket % QUESTIONS.len()]);
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
            let question = format!("{} (ticket {ticket})", QUESTIONS[*ticket % QUESTIONS.len()]);
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
        Ok(format!(
            "| {n} | {:.0} | {plain_median:.3} / {plain_p90:.3} | {keyword_median:.3} / {keyword_p90:.3} ({:+.3}) | {new_median:.3} / {new_p90:.3} ({:+.3}) | {repeated_median:.3} / {repeated_p90:.3} ({:+.3}) | {direct_median:.3} / {direct_p90:.3} | {server} | {:+.3} |",
            repeated.len() as f64 / 1024.0,
            added(keyword_median),
            added(new_median),
            added(repeated_median),
            added(new_median) - direct_median,
        ))
    }
}
