"""The official SDKs as clients of the real gateway: Envoy (from .venv) with the real
toolsift.wasm in front of the demo upstream, both started here like tests/common/mod.rs starts
them, and the SDKs' own parsers and stream accumulators judging every answer.

`make sdk-test` (part of `make test`) builds everything first; a missing piece fails, never skips.
"""

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Another Envoy binary in TOOLSIFT_ENVOY (as tests/common/mod.rs reads it): `make test-matrix`
# runs parts of this suite on each Envoy version it installs.
ENVOY = Path(os.environ.get("TOOLSIFT_ENVOY") or REPO / ".venv/lib/python3.11/site-packages/envoy/_bin/envoy")
WASM = REPO / "target/wasm32-wasip1/release/toolsift.wasm"
# The native binaries: `make build`'s, or under `make test` the test profile's (the Makefile says).
UPSTREAM = REPO / os.environ.get("TOOLSIFT_BIN_DIR", "target/release") / "toolsift-demo-upstream"

QUESTION = "What is the current weather in Paris?"
WANT = "get_current_weather"
FILTER = {"debug": True}
SEARCH = {"mode": "search", "debug": True}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_envoy_yaml(config, port, admin, upstream, source="envoy.yaml", ports=None):
    """The shipped envoy.yaml (or `source`) with test ports, the absolute wasm path and `config` as
    the plugin configuration (the block under `value: |`), as tests/common/mod.rs renders it;
    `ports` maps more of its ports to the test's."""
    lines = (REPO / source).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.strip() == "value: |":
            indent = len(line) - len(line.lstrip())
            out.append(line)
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            out.append(" " * (indent + 2) + json.dumps(config))
            continue
        line = line.replace("port_value: 10000", f"port_value: {port}")
        line = line.replace("port_value: 9901", f"port_value: {admin}")
        line = line.replace("port_value: 18000", f"port_value: {upstream}")
        for shipped, test in (ports or {}).items():
            line = line.replace(f"port_value: {shipped}", f"port_value: {test}")
        out.append(line.replace("target/wasm32-wasip1/release/toolsift.wasm", str(WASM)))
    return "\n".join(out) + "\n"


class Gateway:
    """The demo upstream and Envoy with toolsift configured by `config`; `url` is the gateway."""

    def __init__(self, config, scratch, source="envoy.yaml", ports=None):
        for path in (ENVOY, WASM, UPSTREAM):
            assert path.exists(), f"{path} is missing: run `make build envoy` (make test does it)"
        self.upstream = subprocess.Popen(
            [UPSTREAM, "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        # "demo upstream listening on 127.0.0.1:PORT"
        line = self.upstream.stderr.readline().decode()
        self.upstream_port = int(line.rsplit(":", 1)[1])
        scratch.mkdir(parents=True, exist_ok=True)
        yaml = scratch / "envoy.yaml"
        self.log = scratch / "envoy.log"
        # A free port is free only until another process binds it (the cargo and MCP suites run
        # beside this one): Envoy then exits, and starts again on other ports (three times at most).
        for attempt in range(3):
            self.port, self.admin = free_port(), free_port()
            yaml.write_text(render_envoy_yaml(config, self.port, self.admin, self.upstream_port,
                                              source, ports))
            self.envoy = subprocess.Popen(
                [ENVOY, "-c", yaml, "--concurrency", "1", "--disable-hot-restart", "--log-level", "info",
                 "--log-path", self.log],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 30
            while not self._ready() and self.envoy.poll() is None:
                assert time.monotonic() < deadline, f"Envoy did not become ready:\n{self.log_text()}"
                time.sleep(0.05)
            if self.envoy.poll() is None:
                break
            assert attempt < 2 and "Address already in use" in self.log_text(), \
                f"Envoy exited before it was ready:\n{self.log_text()}"
        self.url = f"http://127.0.0.1:{self.port}"

    def _ready(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def stat(self, name):
        """A toolsift counter from Envoy's /stats (0 when never incremented)."""
        url = f"http://127.0.0.1:{self.admin}/stats?filter=^wasmcustom\\.{re.escape(name)}$"
        with urllib.request.urlopen(url) as r:
            for line in r.read().decode().splitlines():
                key, _, value = line.partition(": ")
                if key == f"wasmcustom.{name}":
                    return int(value)
        return 0

    def upstream_log(self):
        """What the scripted model received, oldest first."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.upstream_port}/scripted/log") as r:
            return json.load(r)

    def log_text(self):
        return self.log.read_text() if self.log.exists() else ""

    def close(self):
        for process in (self.envoy, self.upstream):
            process.kill()
            process.wait()
        assert "panicked" not in self.log_text(), self.log_text()


def _gateway(config, request, tmp_path_factory):
    gateway = Gateway(config, tmp_path_factory.mktemp(request.fixturename))
    yield gateway
    gateway.close()


@pytest.fixture(scope="session")
def filter_gw(request, tmp_path_factory):
    yield from _gateway(FILTER, request, tmp_path_factory)


@pytest.fixture(scope="session")
def search_gw(request, tmp_path_factory):
    yield from _gateway(SEARCH, request, tmp_path_factory)


def catalog():
    """The 80 fixture tools in OpenAI Chat Completions form."""
    return json.loads((REPO / "tests/fixtures/catalog.json").read_text())


def functions():
    """Each fixture tool's {name, description, parameters}."""
    return [tool["function"] for tool in catalog()]


def scripted(script="search"):
    """Request headers that make the demo upstream's scripted model want WANT."""
    return {"x-demo-model": "scripted", "x-demo-want": WANT, "x-demo-script": script}


def received(text):
    """How many tools the demo upstream's answer `demo upstream received N tools: a, b, …` says
    it received, and the names it lists (the first 20 of a longer list, which ends with
    `... (M more)`)."""
    match = re.fullmatch(
        r"demo upstream received (\d+) tools?(?:: (.*?))?(?:, \.\.\. \((\d+) more\))?",
        text.strip(),
    )
    assert match, text
    names = match.group(2).split(", ") if match.group(2) else []
    count = int(match.group(1))
    assert len(names) + int(match.group(3) or 0) == count, text
    return count, names


def received_tools(text):
    """The tool names the demo upstream's answer lists (every one: a short list)."""
    count, names = received(text)
    assert len(names) == count, text
    return names


def openai_client(gw, headers):
    """An OpenAI SDK client of the gateway sending `headers`, and the recorder of its last
    answer's headers."""
    import openai

    recorder = Recorder()
    http_client = openai.DefaultHttpxClient(event_hooks={"response": [recorder.hook]})
    sdk = openai.OpenAI(api_key="sk-test", base_url=f"{gw.url}/v1", max_retries=0, timeout=60,
                        http_client=http_client, default_headers=headers)
    return sdk, recorder


class Recorder:
    """The headers of the last HTTP response a client received (an httpx event hook), for the
    SDK calls that return only the parsed answer."""

    def __init__(self):
        self.headers = None

    def hook(self, response):
        self.headers = response.headers

    def header(self, name):
        assert self.headers is not None, "no response received"
        return self.headers.get(name)
