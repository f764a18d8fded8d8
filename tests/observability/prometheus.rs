//! A real Prometheus (Debian's `prometheus` package, which `make prometheus` installs) for
//! tests/observability.rs: its own configuration, port and storage in a scratch folder, the
//! shipped alert rules loaded, scraping the admins of the test's Envoys every second; asked
//! through its HTTP API, and killed by its PID on drop.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const PROMTOOL: &str = "/usr/bin/promtool";

/// `binary`, or a failure that says how to get it: a missing Prometheus fails, never skips.
pub fn installed(binary: &str) -> &str {
    assert!(
        Path::new(binary).exists(),
        "{binary} not found: `make prometheus` installs Debian's prometheus package (as root)"
    );
    binary
}

/// One series of a query's answer: its labels and its value at the query's instant.
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

pub struct Prometheus {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    agent: ureq::Agent,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configuration: every `targets` admin scraped each second at `/stats/prometheus`, the
/// rules of `rules` evaluated each second.
fn config(targets: &[u16], rules: &Path) -> String {
    let targets: Vec<String> = targets
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n- {}\n\
         scrape_configs:\n- job_name: envoy\n  metrics_path: /stats/prometheus\n  \
         static_configs:\n  - targets: [{}]\n",
        rules.display(),
        targets.join(", ")
    )
}

impl Prometheus {
    /// Prometheus scraping the Envoy admins on `targets`, with the rules file `rules`; ready to
    /// answer. Started again on another port (at most three times) when its port was taken.
    pub fn start(dir: &Path, targets: &[u16], rules: &Path) -> Prometheus {
        let binary = installed(PROMETHEUS);
        std::fs::create_dir_all(dir).unwrap();
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config(targets, rules)).unwrap();
        let log_path = dir.join("prometheus.log");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        for attempt in 1..=3 {
            let port = crate::common::Gateway::free_port();
            let log = std::fs::File::create(&log_path).unwrap();
            let child = Command::new(binary)
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut prometheus = Prometheus {
                child,
                port,
                dir: dir.to_owned(),
                agent: agent.clone(),
            };
            if prometheus.ready() {
                return prometheus;
            }
            let text = prometheus.log_text();
            if attempt == 3 || !text.contains("address already in use") {
                panic!("Prometheus did not become ready; log:\n{text}");
            }
        }
        unreachable!("the third attempt returns or panics")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// Whether `/-/ready` answers within 30 s, while the process lives.
    fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            let url = format!("http://127.0.0.1:{}/-/ready", self.port);
            if self.agent.get(&url).call().is_ok_and(|r| r.status() == 200) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// The `data` of the API's answer to `GET path` with `params`, or its error (the
    /// `errorType: error` Prometheus gives).
    pub fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let mut request = self.agent.get(&url);
        for (k, v) in params {
            request = request.query(*k, *v);
        }
        let mut response = request.call().map_err(|e| format!("{path}: {e}"))?;
        let text = response.body_mut().read_to_string().unwrap();
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"));
        if answer["status"] != "success" {
            return Err(format!("{}: {}", answer["errorType"], answer["error"]));
        }
        if let Some(warnings) = answer.get("warnings") {
            return Err(format!("warnings: {warnings}"));
        }
        Ok(answer["data"].clone())
    }

    /// `expr` evaluated now (`/api/v1/query`): an instant vector's series, or a scalar's
    /// value as one series without labels.
    pub fn query(&self, expr: &str) -> Result<Vec<Series>, String> {
        let data = self.api("/api/v1/query", &[("query", expr)])?;
        let value = |v: &Value| -> f64 {
            let text = v[1].as_str().unwrap();
            text.parse().unwrap_or_else(|_| panic!("value {text}"))
        };
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Series {
                    labels: serde_json::from_value(s["metric"].clone()).unwrap(),
                    value: value(&s["value"]),
                })
                .collect()),
            Some("scalar") => Ok(vec![Series {
                labels: BTreeMap::new(),
                value: value(&data["result"]),
            }]),
            other => Err(format!("a {other:?} result, not an instant vector")),
        }
    }

    /// Waits until `expr` returns a series whose value `accept`s, within `within`; whether it
    /// did.
    pub fn wait_for(&self, expr: &str, within: Duration, accept: impl Fn(f64) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let found = self
                .query(expr)
                .unwrap_or_else(|e| panic!("{expr}: {e}"))
                .iter()
                .any(|s| accept(s.value));
            if found || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Every scrape target, once each has been scraped and is up (within 30 s): its
    /// `lastError` is empty. A page Prometheus cannot parse fails here.
    pub fn targets_up(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let data = self.api("/api/v1/targets", &[]).unwrap();
            let active = data["activeTargets"].as_array().unwrap().clone();
            let up = active.iter().filter(|t| t["health"] == "up").count();
            if up == count && active.len() == count {
                return active;
            }
            assert!(
                Instant::now() < deadline,
                "targets not up: {active:#?}\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The rules loaded (`/api/v1/rules`), by name: each rule's object (`health`,
    /// `lastError`, `state`, `query`, `alerts`).
    pub fn rules(&self) -> BTreeMap<String, Value> {
        let data = self.api("/api/v1/rules", &[]).unwrap();
        data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .map(|r| (r["name"].as_str().unwrap().to_owned(), r))
            .collect()
    }
}
