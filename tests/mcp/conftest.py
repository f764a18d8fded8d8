"""MCP through the real gateway: Envoy (from .venv) with the real toolsift.wasm in front of MCP
servers built with the official Python SDK (tests/mcp/server.py), driven by the SDK's own client
over both protocol revisions. Started here, killed when the test module ends.

`make mcp-test` (part of `make test`) builds and installs everything first; a missing piece fails,
never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from shared import Lease, Process, shared_envoy

REPO = Path(__file__).resolve().parents[2]
# Another Envoy binary in TOOLSIFT_ENVOY (as tests/common/mod.rs reads it): `make test-matrix`
# runs parts of this suite on each Envoy version it installs.
ENVOY = Path(os.environ.get("TOOLSIFT_ENVOY") or REPO / ".venv/lib/python3.11/site-packages/envoy/_bin/envoy")
WASM = REPO / "target/wasm32-wasip1/release/toolsift.wasm"
# The native binaries: `make build`'s, or under `make test` the test profile's (the Makefile says).
BIN_DIR = REPO / os.environ.get("TOOLSIFT_BIN_DIR", "target/release")
SERVER = REPO / "tests/mcp/server.py"
SCRATCH = REPO / "target/test-scratch"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(template: str, config: dict[str, Any] | None, ports: dict[int, int]) -> str:
    """`template` (an Envoy config of the repository) with test ports, the absolute wasm path and
    `config` as the plugin configuration (the block under `value: |`); `None` removes the
    toolsift filter (the same Envoy without it)."""
    lines = (REPO / template).read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if config is None and line.strip() == "- name: toolsift":
            indent = len(line) - len(line.lstrip())
            while i < len(lines) and len(lines[i]) - len(lines[i].lstrip()) > indent:
                i += 1
            continue
        if line.strip() == "value: |":
            indent = len(line) - len(line.lstrip())
            out.append(line)
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            out.append(" " * (indent + 2) + json.dumps(config))
            continue
        for old, new in ports.items():
            line = line.replace(f"port_value: {old}", f"port_value: {new}")
        out.append(line.replace("target/wasm32-wasip1/release/toolsift.wasm", str(WASM)))
    return "\n".join(out) + "\n"


def taken(log: Path) -> bool:
    """Whether the process logging to `log` exited because a port it was given had been taken
    since [`free_port`] found it free (another suite runs beside this one): then it starts again
    on other ports."""
    return "address already in use" in log.read_text().lower()


class McpServer(Process):
    """tests/mcp/server.py on a free port, with `args` (see its docstring)."""

    def __init__(self, *args: str):
        SCRATCH.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            self.port = free_port()
            log = SCRATCH / f"mcp-server-{self.port}.log"
            super().__init__([sys.executable, str(SERVER), "--port", str(self.port), *args], log)
            deadline = time.time() + 30
            while time.time() < deadline:
                if "listening on" in log.read_text():
                    return
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            self.stop()
            if not (attempt < 2 and taken(log)):
                break
        raise AssertionError(f"the MCP server did not start:\n{log.read_text()}")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.load(r)

    def calls(self) -> list[dict[str, Any]]:
        return self.get("/test/calls")

    def counts(self) -> dict[str, int]:
        return self.get("/test/lists")

    def reset(self) -> None:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/test/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).read()


class Envoy(Process):
    """Envoy running `template` with the plugin configuration `config` (`None`: no toolsift),
    its upstream ports mapped by `upstreams` (template port → test port); `edit` may change the
    rendered YAML (given it and the ports); `log_args` set Envoy's log levels. With the default
    `log_args`, listeners and clusters of the suite's shared Envoy of `template` where it has one
    (shared.py), unless `alone`."""

    def __init__(self, template: str, config: dict[str, Any] | None, upstreams: dict[int, int], edit=None,
                 log_args: tuple[str, ...] = ("--log-level", "warn"), alone: bool = False):
        for piece in (ENVOY, WASM):
            assert piece.exists(), f"{piece} not found: run `make mcp-test` (make test does it)"
        SCRATCH.mkdir(parents=True, exist_ok=True)
        self.lease: Lease | None = None
        shared = None
        if not alone and config is not None and tuple(log_args) == ("--log-level", "warn"):
            shared = shared_envoy(template, envoy=ENVOY, render=render, free_port=free_port, scratch=SCRATCH)
        if shared is not None:
            self.port, self.admin = free_port(), shared.admin
            ports = {10000: self.port, 9901: self.admin, **upstreams}
            yaml = render(template, config, ports)
            if edit is not None:
                yaml = edit(yaml, ports)
            self.lease = shared.attach(yaml)
            if self.lease is not None:
                self.log = shared.log
                return
        for attempt in range(3):
            self.port, self.admin = free_port(), free_port()
            ports = {10000: self.port, 9901: self.admin, **upstreams}
            yaml = render(template, config, ports)
            if edit is not None:
                yaml = edit(yaml, ports)
            path = SCRATCH / f"envoy-mcp-{self.port}.yaml"
            path.write_text(yaml)
            log = SCRATCH / f"envoy-mcp-{self.port}.log"
            super().__init__(
                [str(ENVOY), "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
                 *log_args, "--file-flush-interval-msec", "50"],
                log,
            )
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/ready", timeout=1) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            self.stop()
            if not (attempt < 2 and taken(log)):
                break
        raise AssertionError(f"Envoy did not become ready:\n{log.read_text()}")

    def stop(self) -> None:
        if self.lease is not None:
            self.lease.detach()
        else:
            super().stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stat(self, name: str) -> int:
        """A toolsift counter (its name without `wasmcustom.`)."""
        return self.envoy_stat(f"wasmcustom.{name}")

    def envoy_stat(self, name: str) -> int:
        """A stat by the name the fixture's own Envoy gave it (renamed in the shared one)."""
        if self.lease is not None:
            name = self.lease.stat_name(name)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/stats?usedonly", timeout=5) as r:
            for line in r.read().decode().splitlines():
                key, _, value = line.partition(": ")
                if key == name:
                    return int(value)
        return 0


def with_cluster(name: str, port: int):
    """An `edit` for [`Envoy`] that adds a STATIC cluster `name` on 127.0.0.1:`port` (a second
    server the gateway calls itself) to the rendered YAML."""

    def edit(yaml: str, ports: dict) -> str:
        return yaml.rstrip("\n") + f"""
  - name: {name}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {port} }}
"""

    return edit


def run(coro):
    return asyncio.run(coro)
