"""The MCP benchmark (`make bench-mcp`; numbers in docs/BENCHMARKS.md, "MCP").

For a server with 200 tools (livemcpbench) and one with 2,000 (toolbench), both built with the
official SDK (tests/mcp/server.py, one `tools/list` page, 2026-07-28 revision, JSON answers):
- tokens (o200k) of the tools a client loads at `tools/list`, without and with toolsift;
- the time of `tools/list`, of `find_tools`, of `call_tool` and of a direct `tools/call`, through
  one Envoy with two listeners to the same server: one with toolsift (catalog cached), one
  without. Requests alternate between the two, on kept-alive connections; medians and ratios.
  The tool called declares one argument an `Mcp-Param-*` header (`x-mcp-header`), which every
  call carries: the client's own on direct calls, the gateway's on `call_tool`'s.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from conftest import REPO, SCRATCH, Envoy, McpServer, free_port  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "300"))
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def second_listener(yaml: str, ports: dict) -> str:
    """Adds a copy of the listener without toolsift, on its own port (`ports[10001]`)."""
    start, end = yaml.index("  listeners:\n") + len("  listeners:\n"), yaml.index("\n  clusters:")
    listener = yaml[start:end]
    lines, out, skipping = listener.splitlines(), [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if skipping is not None and indent > skipping:
            continue
        skipping = None
        if line.strip() == "- name: toolsift":
            skipping = indent
            continue
        out.append(line)
    plain = "\n".join(out).replace("name: mcp_ingress", "name: mcp_plain", 1)
    plain = plain.replace(f"port_value: {ports[10000]}", f"port_value: {ports[10001]}", 1)
    return yaml[:end] + "\n" + plain + yaml[end:]


class Connection:
    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.next_id = 0

    def rpc(self, method: str, params: dict, name: str | None = None,
            extra: dict[str, str] | None = None) -> tuple[float, dict]:
        self.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                           "params": {**params, "_meta": ENVELOPE}})
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2026-07-28", "mcp-method": method, "host": "localhost"}
        if name:
            headers["mcp-name"] = name
        headers.update(extra or {})
        start = time.perf_counter()
        self.conn.request("POST", "/mcp", body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - start
        assert response.status == 200, (response.status, data[:300])
        return elapsed * 1000, json.loads(data)


def measure(pairs) -> dict:
    """Runs each (name, with, without) pair ROUNDS times, alternating; medians in ms."""
    out = {}
    for name, with_toolsift, without in pairs:
        a, b = [], []
        for i in range(ROUNDS):
            a.append(with_toolsift(i))
            b.append(without(i))
        out[name] = (statistics.median(a), statistics.median(b),
                     statistics.quantiles(a, n=10)[-1], statistics.quantiles(b, n=10)[-1])
    return out


def tokens(files: list[Path]) -> list[int]:
    run = subprocess.run(
        ["cargo", "run", "--quiet", "--release", "--example", "count_tokens", "--", *map(str, files)],
        cwd=REPO, check=True, capture_output=True, text=True,
    )
    return [int(line.split()[0]) for line in run.stdout.splitlines()]


def header_param(dataset: str, count: int) -> tuple[str, str]:
    """The tool the benchmark calls (the middle one of the first `count`) and a string property
    of it, the first one, that it declares a header: (tool, property)."""
    with open(REPO.parent / f"shared/datasets/{dataset}/tools.jsonl", encoding="utf-8") as f:
        functions = [json.loads(line)["function"] for line in list(f)[:count]]
    for function in functions[count // 2:] + functions[:count // 2]:
        properties = (function.get("parameters") or {}).get("properties") or {}
        for prop, schema in properties.items():
            if isinstance(schema, dict) and schema.get("type") == "string":
                return function["name"], prop
    raise AssertionError(f"no tool of {dataset} has a string parameter")


def bench(dataset: str, count: int) -> None:
    sample, prop = header_param(dataset, count)
    server = McpServer("--dataset", dataset, "--count", str(count), "--page-size", "100000",
                       "--json-response", "--ttl-ms", "3600000",
                       "--header-param", f"{sample}:{prop}:Bench")
    plain = free_port()
    envoy = None
    try:
        envoy = Envoy("envoy-mcp.yaml", {"mcp": {"paths": ["/mcp"]}}, {18200: server.port, 10001: plain},
                      edit=second_listener)
        a, b = Connection(envoy.port), Connection(plain)
        cold, listed = a.rpc("tools/list", {})
        _, full = b.rpc("tools/list", {})
        SCRATCH.mkdir(parents=True, exist_ok=True)
        files = [SCRATCH / f"mcp-list-{count}-plain.json", SCRATCH / f"mcp-list-{count}-toolsift.json"]
        files[0].write_text(json.dumps(full["result"]["tools"]))
        files[1].write_text(json.dumps(listed["result"]["tools"]))
        plain_tokens, toolsift_tokens = tokens(files)
        queries = [json.loads(l)["query"] for l in open(REPO.parent / f"shared/datasets/{dataset}/queries.jsonl")]
        arguments = {prop: "eu-west-1"}
        mirrored = {"mcp-param-bench": "eu-west-1"}
        call = {"name": sample, "arguments": arguments}

        def direct(c: Connection) -> float:
            return c.rpc("tools/call", call, sample, mirrored)[0]

        results = measure([
            ("tools/list", lambda i: a.rpc("tools/list", {})[0], lambda i: b.rpc("tools/list", {})[0]),
            ("find_tools (toolsift) / a tools/call (no filter)",
             lambda i: a.rpc("tools/call", {"name": "find_tools", "arguments": {"query": queries[i % len(queries)]}}, "find_tools")[0],
             lambda i: direct(b)),
            ("call_tool (toolsift, the gateway sends the call and its header) / the tools/call (no filter)",
             lambda i: a.rpc("tools/call", {"name": "call_tool", "arguments": call}, "call_tool")[0],
             lambda i: direct(b)),
            ("a direct tools/call", lambda i: direct(a), lambda i: direct(b)),
        ])
        print(f"\n## {count} tools ({dataset}), uptime: {os.popen('uptime').read().strip()}")
        print(f"tools/list tokens (o200k): without toolsift {plain_tokens:,}, with {toolsift_tokens:,} "
              f"({100 * (1 - toolsift_tokens / plain_tokens):.1f}% fewer); first tools/list through toolsift "
              f"(catalog fetched) {cold:.1f} ms")
        print("| request | with toolsift (median, p90) | without (median, p90) | ratio |")
        print("|---|---:|---:|---:|")
        for name, (ma, mb, pa, pb) in results.items():
            print(f"| {name} | {ma:.2f} ms, {pa:.2f} | {mb:.2f} ms, {pb:.2f} | {ma / mb:.2f} |")
    finally:
        if envoy is not None:
            envoy.stop()
        server.stop()


if __name__ == "__main__":
    bench("livemcpbench", 200)
    bench("toolbench", 2000)
