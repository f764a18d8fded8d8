//! One Envoy for the tests of a whole `make test` run, each test on listeners and clusters of
//! its own, added through filesystem LDS and CDS.
//!
//! Why: Envoy compiles the whole `.wasm` with V8's optimising tier when it starts, about 2.5 s
//! of CPU (docs/BENCHMARKS.md, "Envoy's start"), and most tests start the shipped `envoy.yaml`
//! with a plugin configuration of their own. A listener added to a running Envoy whose VM
//! configuration is the same reuses that VM: no compile.
//!
//! How: `make test` sets `TOOLSIFT_SHARED_ENVOY` to a directory. The first test that needs a
//! gateway starts Envoy there (in a process group of its own, so that it outlives the test's
//! process) on a bootstrap of the shipped `envoy.yaml` whose listener keeps the VM loaded
//! (the anchor) and whose `dynamic_resources` read `lds.json` and `cds.json` in the directory.
//! Each test then renders its configuration as before and, when the rendered file differs from
//! the anchor's only in its listeners and clusters, adds them under names of its own:
//! - every listener and every cluster the anchor does not have as it is, renamed `<name>_<P>`,
//!   and every reference to them (`cluster`, `cluster_name`, in the plugin's configuration too,
//!   which then names the old name as its `authority`, the default it had);
//! - a `stat_prefix` `P` in every toolsift plugin configuration of the test (one for all of
//!   them, so they add into the same stats as they did in one VM of their own): the test's
//!   stats are `wasmcustom.P.toolsift.*`, its log lines start with `[P]`, and its shared data
//!   is its own (issue 47's item 2 keeps plugins in one VM apart);
//! - the HTTP connection manager's `stat_prefix` suffixed alike.
//!
//! The files are rewritten whole under a lock (read, modify, write aside, rename: Envoy
//! watches the path for moves), and the test's `Drop` takes its resources out again. `make
//! test` stops the Envoy when the suites end (its pid is in `envoy.pid`).
//!
//! What stays a test's own Envoy, as before: Envoy arguments of its own, a bootstrap that
//! differs from the anchor's outside listeners and clusters, a configuration that sets its own
//! `stat_prefix` or is not a JSON object, and whatever a test starts with
//! `Gateway::start_alone`: tests that read Envoy's admin, its memory, or its pid.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{free_port, render_envoy_yaml, repo, try_http, yaml};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The environment variable naming the shared Envoy's directory.
pub const VARIABLE: &str = "TOOLSIFT_SHARED_ENVOY";

/// The anchor's plugin configuration: the shipped default, no traffic ever reaches it.
const ANCHOR_CONFIG: &str = r#"{"top_k": 5, "min_tools": 20}"#;

/// The shared Envoy, once this process has found or started it.
pub struct SharedEnvoy {
    dir: PathBuf,
    pub admin: u16,
    pub log: PathBuf,
    /// The anchor's rendered configuration, as JSON: what a test's must match outside its
    /// listeners and clusters, and the clusters it may use as they are.
    anchor: Value,
}

/// The shared Envoy of this run, or `None` when `make test` did not ask for one.
pub fn envoy() -> Option<&'static SharedEnvoy> {
    static SHARED: OnceLock<Option<SharedEnvoy>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let dir = PathBuf::from(std::env::var_os(VARIABLE)?);
            Some(SharedEnvoy::find_or_start(dir))
        })
        .as_ref()
}

/// Whether a test's configuration was added, or why not.
pub enum Attach {
    Added(Lease),
    /// The listener's port was taken before Envoy bound it: try another.
    PortTaken,
    /// The configuration cannot share the Envoy (the reason, for the curious).
    Alone(&'static str),
}

/// A test's listeners and clusters in the shared Envoy, taken out on drop.
pub struct Lease {
    dir: PathBuf,
    admin: u16,
    listeners: Vec<String>,
    clusters: Vec<String>,
    /// The `stat_prefix` given to the test's plugins.
    pub prefix: String,
    /// The length of the shared log when the test's resources were added.
    pub log_start: u64,
}

impl Drop for Lease {
    /// Takes the listeners out and waits until Envoy has (they refuse connections then, as
    /// a stopped Envoy's did), then the clusters.
    fn drop(&mut self) {
        update(&self.dir, "lds.json", |r| {
            retain_unnamed(r, &self.listeners)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let listed = admin_get(self.admin, "/listeners").unwrap_or_default();
            if !self
                .listeners
                .iter()
                .any(|n| listed.contains(&format!("{n}::")))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        update(&self.dir, "cds.json", |r| retain_unnamed(r, &self.clusters));
    }
}

impl Lease {
    /// The test's part of the shared log since it was added: every line but those of another
    /// plugin (`wasm log …: [Q] …`), so that Envoy's own lines and anything the VM says
    /// without a plugin (a trap) stay in.
    pub fn log_text(&self, log: &Path) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(log) {
            let _ = file.seek(SeekFrom::Start(self.log_start));
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        let own = format!("[{}]", self.prefix);
        text.lines()
            .filter(|line| match plugin_head(line) {
                Some(head) => head == own,
                None => true,
            })
            .fold(String::new(), |mut out, line| {
                out.push_str(line);
                out.push('\n');
                out
            })
    }
}

/// The `[P]` a plugin's log line starts its message with, if the line is a plugin's.
fn plugin_head(line: &str) -> Option<&str> {
    let after = &line[line.find("wasm log ")? + "wasm log ".len()..];
    let message = &after[after.find(": ")? + 2..];
    let end = message.find(']')?;
    message.starts_with('[').then(|| &message[..=end])
}

fn retain_unnamed(resources: &mut Vec<Value>, names: &[String]) {
    resources.retain(|r| !names.iter().any(|n| r["name"] == json!(n)));
}

/// Rewrites the xDS file `name` under the directory's lock: read, `edit` its resources, write
/// aside, rename over it (Envoy watches the path for moves).
fn update(dir: &Path, name: &str, edit: impl FnOnce(&mut Vec<Value>)) {
    let _lock = lock(dir);
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let mut resources = doc["resources"].as_array().cloned().unwrap_or_default();
    edit(&mut resources);
    doc["resources"] = Value::Array(resources);
    let aside = dir.join(format!("{name}.{}", std::process::id()));
    std::fs::write(&aside, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    std::fs::rename(&aside, &path).unwrap();
}

/// The directory's lock, held until it drops (every test process takes it to change the xDS
/// files, and the first to start Envoy): a directory made and removed, which only one process
/// can make (`File::lock` is newer than the crate's rust-version). One older than a minute was
/// left by a process killed while holding it, and is taken over.
struct Lock(PathBuf);

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn lock(dir: &Path) -> Lock {
    let path = dir.join("lock");
    loop {
        match std::fs::create_dir(&path) {
            Ok(()) => return Lock(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let age = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok());
                if age.is_some_and(|age| age > Duration::from_secs(60)) {
                    let _ = std::fs::remove_dir(&path);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

fn admin_get(admin: u16, path: &str) -> Option<String> {
    let r = try_http(admin, "GET", path, &[], b"").ok()?;
    (r.status == 200).then(|| String::from_utf8_lossy(&r.body).into_owned())
}

impl SharedEnvoy {
    fn find_or_start(dir: PathBuf) -> SharedEnvoy {
        std::fs::create_dir_all(&dir).unwrap();
        let anchor_yaml = render_envoy_yaml(ANCHOR_CONFIG, free_port(), free_port(), free_port());
        let anchor = yaml::load_yaml(&anchor_yaml).remove(0);
        let log = dir.join("envoy.log");
        let _lock = lock(&dir);
        if let Ok(port) = std::fs::read_to_string(dir.join("admin")) {
            let admin: u16 = port.trim().parse().unwrap();
            assert!(
                admin_get(admin, "/ready").is_some(),
                "the shared Envoy in {} is gone; its log ends:\n{}",
                dir.display(),
                tail(&log)
            );
            return SharedEnvoy {
                dir,
                admin,
                log,
                anchor,
            };
        }
        for file in ["lds.json", "cds.json"] {
            std::fs::write(dir.join(file), r#"{"resources": []}"#).unwrap();
        }
        for attempt in 1..=3 {
            let admin = free_port();
            let yaml = render_envoy_yaml(ANCHOR_CONFIG, free_port(), admin, free_port())
                .replace("name: llm_ingress", "name: anchor")
                + &format!(
                    "dynamic_resources:\n  lds_config:\n    resource_api_version: V3\n    path_config_source: {{ path: {lds} }}\n  cds_config:\n    resource_api_version: V3\n    path_config_source: {{ path: {cds} }}\n",
                    lds = dir.join("lds.json").display(),
                    cds = dir.join("cds.json").display(),
                );
            let config = dir.join("envoy.yaml");
            std::fs::write(&config, yaml).unwrap();
            let mut child = Command::new(super::envoy_binary());
            child
                .arg("-c")
                .arg(&config)
                .args([
                    "--concurrency",
                    "1",
                    "--disable-hot-restart",
                    "--log-level",
                    "info",
                ])
                .args(["--file-flush-interval-msec", "50"])
                // xDS from files needs a node, as from a server.
                .args([
                    "--service-node",
                    "toolsift-tests",
                    "--service-cluster",
                    "toolsift-tests",
                ])
                // A listener a test took out is drained this long (Envoy's default: 10 min,
                // with its plugin and catalogs kept in the VM all the while).
                .args(["--drain-time-s", "1"])
                .arg("--log-path")
                .arg(&log)
                .current_dir(repo())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // Not in the test's process group: nextest ends a test's group with it.
            std::os::unix::process::CommandExt::process_group(&mut child, 0);
            let mut child = child.spawn().expect("start the shared envoy");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                if admin_get(admin, "/ready").is_some() {
                    std::fs::write(dir.join("envoy.pid"), child.id().to_string()).unwrap();
                    std::fs::write(dir.join("admin"), admin.to_string()).unwrap();
                    return SharedEnvoy {
                        dir,
                        admin,
                        log,
                        anchor,
                    };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if attempt == 3 || !text.contains("Address already in use") {
                panic!(
                    "the shared Envoy did not become ready; {}",
                    super::envoy_failure(&text)
                );
            }
        }
        unreachable!("the third attempt returns or panics")
    }

    /// Adds the test's rendered Envoy configuration under names of its own, and waits until its
    /// listeners are active.
    pub fn attach(&self, rendered: &str) -> Attach {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let Some(mut test) = yaml::load_yaml(rendered).into_iter().next() else {
            return Attach::Alone("no document");
        };
        if outside_resources(&test) != outside_resources(&self.anchor) {
            return Attach::Alone("the bootstrap differs outside listeners and clusters");
        }
        let prefix = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let anchor_clusters = &self.anchor["static_resources"]["clusters"];
        let mut renamed = BTreeMap::new();
        let mut clusters = Vec::new();
        for mut cluster in take(&mut test["static_resources"]["clusters"]) {
            if anchor_clusters
                .as_array()
                .is_some_and(|a| a.contains(&cluster))
            {
                continue;
            }
            let name = cluster["name"].as_str().unwrap_or_default().to_owned();
            let new = format!("{name}_{prefix}");
            cluster["name"] = json!(new);
            cluster["@type"] = json!("type.googleapis.com/envoy.config.cluster.v3.Cluster");
            renamed.insert(name, new);
            clusters.push(cluster);
        }
        for cluster in &mut clusters {
            rename_clusters(cluster, &renamed);
        }
        let vm = &self.anchor["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
            ["typed_config"]["http_filters"][0]["typed_config"]["config"]["vm_config"];
        let mut listeners = Vec::new();
        let mut plugins = 0;
        for mut listener in take(&mut test["static_resources"]["listeners"]) {
            rename_clusters(&mut listener, &renamed);
            if let Err(why) = prefix_plugins(&mut listener, vm, &prefix, &renamed, &mut plugins) {
                return Attach::Alone(why);
            }
            let name = listener["name"].as_str().unwrap_or_default();
            listener["name"] = json!(format!("{name}_{prefix}"));
            listener["@type"] = json!("type.googleapis.com/envoy.config.listener.v3.Listener");
            listeners.push(listener);
        }
        if plugins == 0 {
            return Attach::Alone("no toolsift plugin: its own Envoy starts at once");
        }
        let log_start = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let lease = Lease {
            dir: self.dir.clone(),
            admin: self.admin,
            listeners: names(&listeners),
            clusters: names(&clusters),
            prefix,
            log_start,
        };
        if !clusters.is_empty() {
            update(&self.dir, "cds.json", |r| r.extend(clusters));
            if let Err(log) = self.wait_for("/clusters", &lease.clusters, &lease) {
                drop(lease);
                panic!("the shared Envoy did not add the test's clusters; its log since:\n{log}");
            }
        }
        update(&self.dir, "lds.json", |r| r.extend(listeners));
        match self.wait_for("/listeners", &lease.listeners, &lease) {
            Ok(()) => {
                // Envoy keeps one open file per access-log path, its listeners gone or not: a
                // test that removed its log and logs to the same path again would write to the
                // removed file. Reopened, each path is the file it names now.
                let r = try_http(self.admin, "POST", "/reopen_logs", &[], b"");
                assert!(r.is_ok_and(|r| r.status == 200), "POST /reopen_logs");
                Attach::Added(lease)
            }
            Err(log) if log.contains("Address already in use") => Attach::PortTaken,
            Err(log) => {
                drop(lease);
                panic!("the shared Envoy did not add the test's listeners; its log since:\n{log}")
            }
        }
    }

    /// Waits until every name is listed by the admin endpoint `path` (`name::…` lines), or an
    /// update naming one of them was rejected (the shared log since, then).
    fn wait_for(&self, path: &str, names: &[String], lease: &Lease) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let listed = admin_get(self.admin, path).unwrap_or_default();
            if names
                .iter()
                .all(|n| listed.lines().any(|l| l.starts_with(&format!("{n}::"))))
            {
                return Ok(());
            }
            let log = lease.log_text(&self.log);
            let rejected = log
                .lines()
                .any(|l| l.contains("rejected") && names.iter().any(|n| l.contains(n.as_str())));
            if rejected || Instant::now() > deadline {
                return Err(log);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The configuration without what a test may have of its own: the admin's address, the
/// listeners and the clusters.
fn outside_resources(config: &Value) -> Value {
    let mut rest = config.clone();
    if let Some(map) = rest.as_object_mut() {
        map.remove("admin");
    }
    if let Some(map) = rest["static_resources"].as_object_mut() {
        map.remove("listeners");
        map.remove("clusters");
    }
    rest
}

fn take(value: &mut Value) -> Vec<Value> {
    match value.take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn names(resources: &[Value]) -> Vec<String> {
    resources
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Every `cluster` and `cluster_name` naming a renamed cluster, renamed.
fn rename_clusters(value: &mut Value, renamed: &BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "cluster" || key == "cluster_name" {
                    if let Some(new) = v.as_str().and_then(|name| renamed.get(name)) {
                        *v = json!(new);
                        continue;
                    }
                }
                rename_clusters(v, renamed);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_clusters(v, renamed)),
        _ => {}
    }
}

/// Gives every toolsift plugin in `value` (a Wasm filter on the anchor's VM) the `stat_prefix`
/// `prefix` and its renamed clusters (with the old name as `authority`, which defaults to the
/// cluster's name); suffixes every connection manager's `stat_prefix`. Refuses a Wasm filter
/// on another VM, and a plugin configuration that is not a JSON object or has a prefix.
fn prefix_plugins(
    value: &mut Value,
    vm: &Value,
    prefix: &str,
    renamed: &BTreeMap<String, String>,
    plugins: &mut usize,
) -> Result<(), &'static str> {
    match value {
        Value::Object(map) => {
            let kind = map.get("@type").and_then(Value::as_str).unwrap_or_default();
            if kind.ends_with(".filters.http.wasm.v3.Wasm") {
                let config = &mut map["config"];
                if config["vm_config"] != *vm {
                    return Err("a Wasm filter on a VM of its own");
                }
                let text = config["configuration"]["value"].as_str().unwrap_or("{}");
                let mut plugin: Value =
                    serde_json::from_str(text).map_err(|_| "a plugin configuration not JSON")?;
                let Some(object) = plugin.as_object_mut() else {
                    return Err("a plugin configuration not an object");
                };
                if object.contains_key("stat_prefix") {
                    return Err("a plugin configuration with its own stat_prefix");
                }
                object.insert("stat_prefix".into(), json!(prefix));
                with_authority(&mut plugin, renamed);
                config["configuration"] = json!({
                    "@type": "type.googleapis.com/google.protobuf.StringValue",
                    "value": plugin.to_string(),
                });
                *plugins += 1;
                return Ok(());
            }
            if kind.ends_with("http_connection_manager.v3.HttpConnectionManager") {
                if let Some(Value::String(s)) = map.get_mut("stat_prefix") {
                    *s = format!("{s}_{prefix}");
                }
            }
            for v in map.values_mut() {
                prefix_plugins(v, vm, prefix, renamed, plugins)?;
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter_mut()
            .try_for_each(|v| prefix_plugins(v, vm, prefix, renamed, plugins)),
        _ => Ok(()),
    }
}

/// In a plugin configuration: every `cluster` naming a renamed cluster renamed, with the old
/// name as its `authority` when it has none (what the service saw before), and a suggestion
/// server's as its `source` (which the model reads: `MCP server <cluster>` by default).
fn with_authority(value: &mut Value, renamed: &BTreeMap<String, String>) {
    if let Some(server) = value
        .pointer_mut("/suggestions/mcp")
        .and_then(Value::as_object_mut)
    {
        let old = server
            .get("cluster")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(old) = old.filter(|old| renamed.contains_key(old)) {
            server
                .entry("source")
                .or_insert_with(|| json!(format!("MCP server {old}")));
        }
    }
    with_cluster_authority(value, renamed);
}

fn with_cluster_authority(value: &mut Value, renamed: &BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            let old = map
                .get("cluster")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(new) = old.as_deref().and_then(|old| renamed.get(old)) {
                map.insert("cluster".into(), json!(new));
                if !map.contains_key("authority") {
                    map.insert("authority".into(), json!(old));
                }
            }
            map.values_mut()
                .for_each(|v| with_cluster_authority(v, renamed));
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| with_cluster_authority(v, renamed)),
        _ => {}
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
