//! The compose project of the end-to-end run: brought up under a name unique to this run, its
//! containers faulted one at a time, and always taken down with its networks and volumes
//! (`down -v`): when the test ends, when it fails (after printing every container's log), and
//! when the run is interrupted (SIGINT, SIGTERM, SIGHUP).

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::repo;
use crate::http;

/// The images `make images` builds; each can be replaced through the environment variable of
/// the same name (ENVOY_IMAGE may be the official `envoyproxy/envoy:v1.40.0`).
const IMAGES: [(&str, &str); 3] = [
    ("ENVOY_IMAGE", "toolsift-local/envoy:1.40.0"),
    ("UPSTREAM_IMAGE", "toolsift-local/demo-upstream:dev"),
    ("EMBED_IMAGE", "toolsift-local/embed:dev"),
];

/// The host ports the gateway publishes (on 127.0.0.1).
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub keyword: u16,
    pub hybrid: u16,
    pub search: u16,
    pub admin: u16,
}

pub struct Project {
    pub name: String,
    pub ports: Ports,
    compose: Vec<String>,
    env: Vec<(String, String)>,
    /// Service name → container id, read once after `up` (stop, start and restart keep it).
    containers: std::collections::HashMap<String, String>,
    /// Shared with the signal watcher, which takes the project down if the run is interrupted.
    down_once: Arc<Mutex<bool>>,
}

/// `docker compose` when the plugin is installed, else `docker-compose`; `E2E_COMPOSE` (a
/// command line, split at spaces) overrides both. Docker missing is a failure, never a skip.
fn compose_command() -> Vec<String> {
    if let Ok(command) = std::env::var("E2E_COMPOSE") {
        return command.split_whitespace().map(str::to_owned).collect();
    }
    let docker = Command::new("docker")
        .arg("version")
        .output()
        .unwrap_or_else(|e| {
            panic!("the e2e run needs Docker (`docker` could not be run: {e}); install Docker Engine and docker compose")
        });
    assert!(
        docker.status.success(),
        "the e2e run needs a running Docker daemon; `docker version` said:\n{}",
        String::from_utf8_lossy(&docker.stderr)
    );
    let plugin = Command::new("docker")
        .args(["compose", "version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if plugin {
        return vec!["docker".into(), "compose".into()];
    }
    let standalone = Command::new("docker-compose")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        standalone,
        "the e2e run needs docker compose (the plugin or docker-compose); neither runs"
    );
    vec!["docker-compose".into()]
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn image(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

impl Project {
    /// Starts the project (`e2e/docker-compose.yml`) and waits until the gateway, the upstream
    /// and the embeddings server answer through it.
    pub fn up() -> Project {
        let compose = compose_command();
        for (variable, default) in IMAGES {
            let name = image(variable, default);
            let found = Command::new("docker")
                .args(["image", "inspect", &name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                found,
                "image {name} not found: run `make images` (make e2e and make test do it)"
            );
        }
        let wasm = repo().join("target/wasm32-wasip1/release/toolsift.wasm");
        assert!(
            wasm.exists(),
            "{} not found: run `make build`",
            wasm.display()
        );
        let ports = Ports {
            keyword: free_port(),
            hybrid: free_port(),
            search: free_port(),
            admin: free_port(),
        };
        let name = format!("toolsift-e2e-{}-{}", std::process::id(), free_port());
        let mut env: Vec<(String, String)> = IMAGES
            .iter()
            .map(|(variable, default)| ((*variable).to_owned(), image(variable, default)))
            .collect();
        env.extend([
            ("TOOLSIFT_WASM".to_owned(), wasm.display().to_string()),
            (
                "E2E_ENVOY_CONFIG".to_owned(),
                repo().join("e2e/envoy.yaml").display().to_string(),
            ),
            ("E2E_KEYWORD_PORT".to_owned(), ports.keyword.to_string()),
            ("E2E_HYBRID_PORT".to_owned(), ports.hybrid.to_string()),
            ("E2E_SEARCH_PORT".to_owned(), ports.search.to_string()),
            ("E2E_ADMIN_PORT".to_owned(), ports.admin.to_string()),
        ]);
        let project = Project {
            name,
            ports,
            compose,
            env,
            containers: Default::default(),
            down_once: Arc::new(Mutex::new(false)),
        };
        let mut project = project;
        project.take_down_on_signal();
        eprintln!("e2e: compose project {}", project.name);
        project.compose_ok(&["up", "-d", "--no-build"]);
        for service in ["envoy", "upstream", "embeddings"] {
            let output = project.compose_ok(&["ps", "-q", service]);
            let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            assert!(!id.is_empty(), "no container for service {service}");
            project.containers.insert(service.to_owned(), id);
        }
        project.wait_ready();
        project
    }

    fn compose_cmd(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.compose[0]);
        command
            .args(&self.compose[1..])
            .arg("--project-name")
            .arg(&self.name)
            .arg("--file")
            .arg(repo().join("e2e/docker-compose.yml"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    fn compose_ok(&self, args: &[&str]) -> Output {
        let output = self
            .compose_cmd(args)
            .output()
            .unwrap_or_else(|e| panic!("compose {args:?}: {e}"));
        assert!(
            output.status.success(),
            "compose {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// `compose config` on another compose file of the repository: it must parse and resolve
    /// (with its defaults: the official images).
    pub fn check_file(&self, file: &str) {
        let output = Command::new(&self.compose[0])
            .args(&self.compose[1..])
            .arg("--file")
            .arg(repo().join(file))
            .args(["config", "--quiet"])
            .env_remove("ENVOY_IMAGE")
            .env_remove("UPSTREAM_IMAGE")
            .output()
            .unwrap_or_else(|e| panic!("compose config {file}: {e}"));
        assert!(
            output.status.success(),
            "{file} does not parse:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The container of a service (`envoy`, `upstream`, `embeddings`).
    pub fn container(&self, service: &str) -> String {
        self.containers
            .get(service)
            .unwrap_or_else(|| panic!("no container for service {service}"))
            .clone()
    }

    /// `docker ARGS…`, which must succeed.
    pub fn docker(&self, args: &[&str]) -> String {
        let output = Command::new("docker")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("docker {args:?}: {e}"));
        assert!(
            output.status.success(),
            "docker {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `docker ACTION CONTAINER` on a service's container (stop, start, pause, unpause, kill,
    /// restart).
    pub fn act(&self, action: &str, service: &str) {
        let container = self.container(service);
        let mut args = vec![action];
        if matches!(action, "stop" | "restart") {
            args.extend(["--time", "2"]);
        }
        args.push(&container);
        self.docker(&args);
        eprintln!("e2e: docker {action} {service}");
    }

    /// The project network a service is on (`llm`, `embed`, `edge`).
    pub fn network(&self, network: &str) -> String {
        // Compose names networks `<project>_<network>`.
        format!("{}_{network}", self.name)
    }

    /// Takes a service off one of its networks.
    pub fn disconnect(&self, service: &str, network: &str) {
        let container = self.container(service);
        self.docker(&["network", "disconnect", &self.network(network), &container]);
        eprintln!("e2e: {service} disconnected from {network}");
    }

    /// Puts it back, under its service name (the gateway's clusters resolve that name).
    pub fn connect(&self, service: &str, network: &str) {
        let container = self.container(service);
        self.docker(&[
            "network",
            "connect",
            "--alias",
            service,
            &self.network(network),
            &container,
        ]);
        eprintln!("e2e: {service} reconnected to {network}");
    }

    /// A service's log (stdout and stderr), every start of its container included.
    pub fn logs(&self, service: &str) -> String {
        let container = self.container(service);
        let output = Command::new("docker")
            .args(["logs", &container])
            .output()
            .expect("docker logs");
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        text
    }

    /// The memory a container uses now, in MiB, as `docker stats` reports it.
    pub fn memory_mib(&self, service: &str) -> f64 {
        let container = self.container(service);
        let usage = self.docker(&[
            "stats",
            "--no-stream",
            "--format",
            "{{.MemUsage}}",
            &container,
        ]);
        parse_mib(usage.split('/').next().unwrap_or_default())
            .unwrap_or_else(|| panic!("docker stats memory usage: {usage:?}"))
    }

    /// Waits until Envoy is ready and both backends answer through it.
    pub fn wait_ready(&self) {
        let checks = [
            (self.ports.admin, "/ready"),
            (self.ports.keyword, "/healthz"),
            (self.ports.hybrid, "/e2e/embeddings/healthz"),
        ];
        for (port, path) in checks {
            wait_for(&format!("GET 127.0.0.1:{port}{path} → 200"), || {
                http::get(port, path).is_ok_and(|r| r.status == 200)
            });
        }
    }

    /// Registers the signal watcher (see the module doc).
    fn take_down_on_signal(&self) {
        let down = self.down_command();
        let done = Arc::clone(&self.down_once);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT");
                let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM");
                let mut hangup = signal(SignalKind::hangup()).expect("SIGHUP");
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                    _ = hangup.recv() => {}
                }
            });
            eprintln!("e2e: interrupted; taking the compose project down");
            take_down(&down, &done);
            std::process::exit(130);
        });
    }

    /// `compose down` for this project: its program, arguments and environment.
    fn down_command(&self) -> DownCommand {
        let mut argv = self.compose.clone();
        argv.extend([
            "--project-name".to_owned(),
            self.name.clone(),
            "--file".to_owned(),
        ]);
        argv.push(repo().join("e2e/docker-compose.yml").display().to_string());
        argv.extend(["down", "--volumes", "--remove-orphans", "--timeout", "2"].map(String::from));
        DownCommand {
            argv,
            env: self.env.clone(),
        }
    }
}

struct DownCommand {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

/// Runs `down` once, whoever asks first (the test's end or the signal watcher).
fn take_down(down: &DownCommand, done: &Mutex<bool>) {
    let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return;
    }
    *done = true;
    let status = Command::new(&down.argv[0])
        .args(&down.argv[1..])
        .envs(down.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !status.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("e2e: compose down failed: {status:?}");
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for service in self.containers.keys() {
                let log = self.logs(service);
                let tail: Vec<&str> = log.lines().rev().take(300).collect();
                eprintln!("===== e2e: {service} log (last {} lines) =====", tail.len());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        take_down(&self.down_command(), &self.down_once);
        eprintln!("e2e: compose project {} taken down", self.name);
    }
}

/// Polls `ready` every 100 ms for up to 3 minutes (a restarted gateway fetches its tool
/// vectors again while the load goes on: about a minute on two cores).
pub fn wait_for(what: &str, ready: impl FnMut() -> bool) {
    if !ready_within_deadline(ready) {
        panic!("e2e: timed out waiting for {what}");
    }
}

/// [`wait_for`]'s polling, for callers that say more than its panic when `ready` never is.
pub fn ready_within_deadline(mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `12.5MiB`, `1.2GiB`, `900KiB`, `512B` → MiB.
fn parse_mib(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let factor = match unit {
        "B" => 1.0 / (1024.0 * 1024.0),
        "KiB" | "kB" | "KB" => 1.0 / 1024.0,
        "MiB" | "MB" => 1.0,
        "GiB" | "GB" => 1024.0,
        _ => return None,
    };
    Some(number * factor)
}

#[test]
fn parses_docker_stats_memory() {
    assert_eq!(parse_mib("12.5MiB "), Some(12.5));
    assert_eq!(parse_mib("1.5GiB"), Some(1536.0));
    assert_eq!(parse_mib("512KiB"), Some(0.5));
    assert_eq!(parse_mib("lots"), None);
}
