"""One Envoy per template for the suite's gateways (`envoy-mcp.yaml`, `envoy.yaml`), each fixture
on listeners and clusters of its own, added through filesystem LDS and CDS: the MCP suite's side
of tests/common/shared.rs, which says why (Envoy compiles the whole `.wasm` at every start, about
2.5 s of CPU; a listener added to a running Envoy on the same VM configuration reuses its VM).

The suite is one process whose tests run one after another, so there is no lock: the Envoy starts
at the first gateway that can share it and stops when the process exits. A configuration shares
it when it is rendered from one of `TEMPLATES`, with Envoy's default log arguments, and differs from
the anchor's (the template with `{}` as its plugin configuration) only in listeners and clusters:
- every listener, and every cluster the anchor does not have as it is, is renamed `<name>_<P>`,
  with the references to it (the plugin's configuration naming the old name as `authority`, the
  default it had);
- every toolsift plugin of the fixture gets the `stat_prefix` `P` (one for all of them), the
  connection manager's `stat_prefix` is suffixed alike, and `Envoy.stat` and `Envoy.envoy_stat`
  read the renamed stats.

Envoy's log (stdout and stderr, the access log's lines too) is the shared one: tests read it from
an offset taken before their own requests, as they did.
"""

from __future__ import annotations

import atexit
import copy
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import yaml

# The templates whose gateways share an Envoy: those more than two fixtures use (a shared Envoy
# starts once, so it saves nothing for fewer).
TEMPLATES = ("envoy-mcp.yaml", "envoy.yaml")
WASM_FILTER = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
CONNECTION_MANAGER = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


REPO = Path(__file__).resolve().parents[2]


class Process:
    """A process started in the repository, its stdout and stderr written to `log`."""

    def __init__(self, args: list[str], log: Path):
        self.log = log
        self.file = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self.file, stderr=subprocess.STDOUT, cwd=REPO)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.file.close()


def admin_get(admin: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def outside(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration without what a fixture may have of its own: the admin, the listeners and
    the clusters."""
    rest = copy.deepcopy(config)
    rest.pop("admin", None)
    rest.get("static_resources", {}).pop("listeners", None)
    rest.get("static_resources", {}).pop("clusters", None)
    return rest


def rename_clusters(value: Any, renamed: dict[str, str]) -> None:
    """Every `cluster` and `cluster_name` naming a renamed cluster, renamed."""
    if isinstance(value, dict):
        for key, v in value.items():
            if key in ("cluster", "cluster_name") and isinstance(v, str) and v in renamed:
                value[key] = renamed[v]
            else:
                rename_clusters(v, renamed)
    elif isinstance(value, list):
        for v in value:
            rename_clusters(v, renamed)


def with_authority(value: Any, renamed: dict[str, str]) -> None:
    """In a plugin configuration: every renamed `cluster` renamed, with the old name as its
    `authority` when it has none (what the service saw before), and a suggestion server's as its
    `source` (which the model reads: `MCP server <cluster>` by default)."""
    server = value.get("suggestions", {}).get("mcp") if isinstance(value, dict) else None
    if isinstance(server, dict) and server.get("cluster") in renamed:
        server.setdefault("source", f"MCP server {server['cluster']}")
    if isinstance(value, dict):
        old = value.get("cluster")
        if isinstance(old, str) and old in renamed:
            value["cluster"] = renamed[old]
            value.setdefault("authority", old)
        for v in value.values():
            with_authority(v, renamed)
    elif isinstance(value, list):
        for v in value:
            with_authority(v, renamed)


class Lease:
    """A fixture's listeners and clusters in a shared Envoy; `detach` takes them out."""

    def __init__(self, envoy: SharedEnvoy, prefix: str, listeners: list[str], clusters: dict[str, str],
                 http_prefixes: dict[str, str]):
        self.envoy = envoy
        self.prefix = prefix
        self.listeners = listeners
        self.clusters = clusters
        self.http_prefixes = http_prefixes

    def stat_name(self, name: str) -> str:
        """Envoy's name for the fixture's stat `name` (`wasmcustom.…`, `cluster.<c>.…`,
        `http.<prefix>.…`, as the fixture's own Envoy named it)."""
        if name.startswith("wasmcustom."):
            return f"wasmcustom.{self.prefix}.{name[len('wasmcustom.'):]}"
        for kind, names in (("cluster", self.clusters), ("http", self.http_prefixes)):
            for old, new in names.items():
                if name.startswith(f"{kind}.{old}."):
                    return f"{kind}.{new}.{name[len(kind) + len(old) + 2:]}"
        return name

    def detach(self) -> None:
        """The listeners out (waiting until Envoy has: they refuse connections then, as a stopped
        Envoy's did), then the clusters."""
        self.envoy.update("lds.json", lambda r: [x for x in r if x["name"] not in self.listeners])
        self.envoy.wait(lambda: not any(f"{n}::" in admin_get(self.envoy.admin, "/listeners")
                                        for n in self.listeners), "the listeners out")
        names = set(self.clusters.values())
        self.envoy.update("cds.json", lambda r: [x for x in r if x["name"] not in names])


class SharedEnvoy:
    """The shared Envoy of one template."""

    def __init__(self, template: str, envoy: Path, render: Callable[..., str], free_port: Callable[[], int],
                 scratch: Path):
        self.dir = scratch / f"shared-envoy-{template.replace('/', '-')}-{free_port()}"
        self.dir.mkdir(parents=True)
        self.anchor = yaml.safe_load(render(template, {}, {10000: free_port(), 9901: free_port()}))
        self.log = self.dir / "envoy.log"
        self.next = 0
        for name in ("lds.json", "cds.json"):
            (self.dir / name).write_text('{"resources": []}')
        for attempt in range(3):
            self.admin = free_port()
            bootstrap = render(template, {}, {10000: free_port(), 9901: self.admin}) + f"""
dynamic_resources:
  lds_config:
    resource_api_version: V3
    path_config_source: {{ path: {self.dir / 'lds.json'} }}
  cds_config:
    resource_api_version: V3
    path_config_source: {{ path: {self.dir / 'cds.json'} }}
"""
            config = self.dir / "envoy.yaml"
            config.write_text(bootstrap.replace("- name: mcp_ingress", "- name: anchor", 1))
            self.process = Process(
                [str(envoy), "-c", str(config), "--concurrency", "1", "--disable-hot-restart",
                 "--log-level", "warn", "--file-flush-interval-msec", "50",
                 # xDS from files needs a node; a listener taken out is drained this long.
                 "--service-node", "toolsift-tests", "--service-cluster", "toolsift-tests",
                 "--drain-time-s", "1"],
                self.log)
            deadline = time.time() + 60
            while time.time() < deadline and self.process.proc.poll() is None:
                if "LIVE" in admin_get(self.admin, "/ready"):
                    atexit.register(self.process.stop)
                    return
                time.sleep(0.05)
            self.process.stop()
            if attempt == 2 or "address already in use" not in self.log.read_text().lower():
                break
        raise AssertionError(f"the shared Envoy did not become ready:\n{self.log.read_text()}")

    def update(self, name: str, edit: Callable[[list], list]) -> None:
        """Rewrites the xDS file `name`: its resources through `edit`, written aside and moved over
        it (Envoy watches the path for moves)."""
        path = self.dir / name
        doc = json.loads(path.read_text())
        doc["resources"] = edit(doc["resources"])
        aside = self.dir / f"{name}.next"
        aside.write_text(json.dumps(doc))
        aside.replace(path)

    def wait(self, done: Callable[[], bool], what: str, since: int = 0) -> None:
        deadline = time.time() + 30
        while not done():
            if time.time() > deadline:
                raise AssertionError(f"the shared Envoy: not {what}; its log since:\n"
                                     f"{self.log.read_text()[since:]}")
            time.sleep(0.01)

    def attach(self, rendered: str) -> Lease | None:
        """Adds a fixture's rendered configuration under names of its own, or `None` when it cannot
        share this Envoy."""
        test = yaml.safe_load(rendered)
        if outside(test) != outside(self.anchor):
            return None
        prefix = f"m{self.next}"
        self.next += 1
        anchor_clusters = self.anchor["static_resources"]["clusters"]
        renamed: dict[str, str] = {}
        clusters = []
        for cluster in test["static_resources"].get("clusters", []):
            if cluster in anchor_clusters:
                continue
            renamed[cluster["name"]] = f"{cluster['name']}_{prefix}"
            clusters.append(cluster)
        for cluster in clusters:
            rename_clusters(cluster, renamed)
            cluster["name"] = renamed[cluster["name"]]
            cluster["@type"] = CLUSTER
        vm = self.anchor["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
            "typed_config"]["http_filters"][0]["typed_config"]["config"]["vm_config"]
        http_prefixes: dict[str, str] = {}
        plugins = 0

        def prefix_plugins(value: Any) -> bool:
            nonlocal plugins
            if isinstance(value, dict):
                kind = value.get("@type")
                if kind == WASM_FILTER:
                    config = value["config"]
                    if config.get("vm_config") != vm:
                        return False
                    plugin = json.loads(config["configuration"]["value"])
                    if not isinstance(plugin, dict) or "stat_prefix" in plugin:
                        return False
                    plugin["stat_prefix"] = prefix
                    with_authority(plugin, renamed)
                    config["configuration"]["value"] = json.dumps(plugin)
                    plugins += 1
                    return True
                if kind == CONNECTION_MANAGER and "stat_prefix" in value:
                    old = value["stat_prefix"]
                    value["stat_prefix"] = http_prefixes.setdefault(old, f"{old}_{prefix}")
                return all(prefix_plugins(v) for v in value.values())
            if isinstance(value, list):
                return all(prefix_plugins(v) for v in value)
            return True

        listeners = []
        for listener in test["static_resources"].get("listeners", []):
            rename_clusters(listener, renamed)
            if not prefix_plugins(listener):
                return None
            listener["name"] = f"{listener['name']}_{prefix}"
            listener["@type"] = LISTENER
            listeners.append(listener)
        if plugins == 0:
            return None
        lease = Lease(self, prefix, [x["name"] for x in listeners], renamed, http_prefixes)
        since = len(self.log.read_text())
        if clusters:
            self.update("cds.json", lambda r: r + clusters)
            self.wait(lambda: all(f"\n{n}::" in "\n" + admin_get(self.admin, "/clusters") for n in renamed.values()),
                      "the clusters in", since)
        self.update("lds.json", lambda r: r + listeners)
        self.wait(lambda: all(f"{n}::" in admin_get(self.admin, "/listeners") for n in lease.listeners),
                  "the listeners in", since)
        return lease


_SHARED: dict[str, SharedEnvoy] = {}


def shared_envoy(template: str, **start: Any) -> SharedEnvoy | None:
    """The template's shared Envoy, started at its first use; `None` for a template that has
    none."""
    if template not in TEMPLATES:
        return None
    if template not in _SHARED:
        _SHARED[template] = SharedEnvoy(template, **start)
    return _SHARED[template]
