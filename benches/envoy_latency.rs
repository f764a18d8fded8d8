//! Latency through the real Envoy: the same Envoy process serves the shipped envoy.yaml listener
//! (with toolsift) and a copy of it without the filter; requests alternate between the two in
//! rounds, so both see the same machine noise. Run with `make bench-latency`.
//!
//! For each catalog size: a fresh Envoy (so the filter's histogram covers one size), warm-up,
//! then alternating rounds of sequential requests on one keep-alive connection per listener
//! (latency), then a short closed-loop run on two connections per listener (throughput), then
//! the filter's own time from its histogram and the Envoy process's resident memory.
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
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--sizes") {
        Some(i) => args[i + 1].split(',').map(|s| s.parse().unwrap()).collect(),
        None => SIZES.to_vec(),
    };
    let pool = dataset_tools();
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
        .map(|(i, q)| {
            format!(
                r#"{{"model":"gpt-4.1","messages":[{{"role":"system","content":"You are a helpful agent."}},{{"role":"user","content":"{q} (ticket {i})"}}],"tools":[{tools}],"tool_choice":"auto","temperature":0.2}}"#
            )
        })
        .collect()
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
    let start = yaml.find("  - name: llm_ingress").unwrap();
    let end = yaml.find("  clusters:").unwrap();
    let listener = &yaml[start..end];
    let mut plain = String::new();
    let mut skipping = false;
    for line in listener.lines() {
        if line.trim_start() == "- name: toolsift" {
            skipping = true;
        } else if line.trim_start() == "- name: envoy.filters.http.router" {
            skipping = false;
        }
        if !skipping {
            plain.push_str(line);
            plain.push('\n');
        }
    }
    let plain = plain
        .replace("name: llm_ingress", "name: llm_plain")
        .replace("stat_prefix: llm_ingress", "stat_prefix: llm_plain");
    // The listener's own port is the first `port_value:` in its block.
    let at = plain.find("port_value: ").unwrap() + "port_value: ".len();
    let digits = plain[at..].chars().take_while(char::is_ascii_digit).count();
    let plain = format!("{}{plain_port}{}", &plain[..at], &plain[at + digits..]);
    format!("{}{}{}", &yaml[..end], plain, &yaml[end..])
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
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\nx-demo-echo: none\r\ncontent-length: {}\r\n\r\n",
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
