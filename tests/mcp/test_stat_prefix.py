"""Two toolsift filters in one Envoy, each with its own `stat_prefix`: the MCP route of
envoy-mcp.yaml (`mcp`) and a second listener in filter mode for LLM requests (`llm`, whose
plugin also serves MCP at /mcp, with the same session memory). Both load the same module with
the same `vm_config`, so Envoy runs them in one VM, with one logger and one shared data: their
counters and histograms stay apart in /stats and /stats/prometheus (the shipped
`toolsift_plugin` tag), each log line names its plugin, and one plugin's session memory is not
the other's."""

from __future__ import annotations

import copy
import json
import re
import time
import urllib.request
import uuid

import pytest
from conftest import REPO, Envoy, McpServer, free_port, run, with_cluster
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_llm_gating import DemoUpstream

PINNED = ["find_tools", "call_tool", "fetch_webpage"]
STOCKS = "current stock price of a company"
MEMORY = {"memory": {"session": {"header": "x-session-id"}}}
MCP = {"stat_prefix": "mcp", "mcp": {"paths": ["/mcp"]}, "always_include": ["fetch_webpage"],
       "search": MEMORY, "debug": True}
LLM = {"stat_prefix": "llm", "top_k": 5, "mcp": {"paths": ["/mcp"]}, "always_include": ["fetch_webpage"],
       "search": MEMORY, "debug": True}
REQUEST = json.loads((REPO / "examples/chat-60-tools.json").read_text())


def second_listener(port: int, upstream: int):
    """An `edit` for [`Envoy`]: the template's listener again as `llm_ingress` on `port`, with
    the `llm` plugin, LLM requests (/v1/) sent to the demo upstream on `upstream`."""

    def edit(yaml: str, ports: dict) -> str:
        start = yaml.index("  - name: mcp_ingress")
        end = yaml.index("  clusters:")
        listener = yaml[start:end]
        listener = listener.replace("name: mcp_ingress", "name: llm_ingress")
        listener = listener.replace("stat_prefix: mcp_ingress", "stat_prefix: llm_ingress")
        listener = listener.replace(f"port_value: {ports[10000]}", f"port_value: {port}")
        listener = listener.replace(json.dumps(MCP), json.dumps(LLM))
        route = '              - match: { prefix: "/" }\n'
        listener = listener.replace(
            route,
            '              - match: { prefix: "/v1/" }\n'
            "                route: { cluster: llm, timeout: 300s }\n" + route,
        )
        assert json.dumps(LLM) in listener and "cluster: llm" in listener, listener
        return with_cluster("llm", upstream)(yaml[:end] + listener + yaml[end:], ports)

    return edit


@pytest.fixture(scope="module")
def gateway():
    server = McpServer("--count", "250")
    upstream = DemoUpstream()
    llm_port = free_port()
    envoy = Envoy("envoy-mcp.yaml", MCP, {18200: server.port}, edit=second_listener(llm_port, upstream.port),
                  log_args=("--log-level", "warn", "--component-log-level", "wasm:debug"))
    envoy.llm_port = llm_port
    yield server, envoy
    envoy.stop()
    upstream.stop()
    server.stop()


def client(url: str, headers: dict[str, str]) -> Client:
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None)


async def listed(c: Client) -> list[str]:
    return [t.name for t in (await c.list_tools()).tools]


def admin(envoy: Envoy, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{envoy.admin}{path}", timeout=5) as r:
        return r.read().decode()


def test_two_plugins_in_one_vm_keep_their_stats_logs_and_memory_apart(gateway):
    server, envoy = gateway
    # One session of one caller on one server: the memory keys a session by its `:authority`
    # too, so both listeners are asked for the same host (one the MCP server accepts). Without
    # the prefixes, the second listing holds the first's found tools.
    session = {"x-session-id": str(uuid.uuid4()), "authorization": "Bearer alice", "host": "127.0.0.1:9"}
    llm_mcp = f"http://127.0.0.1:{envoy.llm_port}/mcp"

    async def main():
        async with client(envoy.url, session) as c:
            result = await c.call_tool("find_tools", {"query": STOCKS, "limit": 2})
            found = [t["name"] for t in result.structured_content["tools"]]
            remembered = await listed(c)
        # The same session, caller and server through the other plugin: its memory is its own.
        async with client(llm_mcp, session) as other:
            elsewhere = await listed(other)
        return found, remembered, elsewhere

    found, remembered, elsewhere = run(main())
    assert found[0] == "get_current_stock_price"
    assert remembered == PINNED + found
    assert elsewhere == PINNED, "the llm plugin read the mcp plugin's session memory"

    req = urllib.request.Request(f"http://127.0.0.1:{envoy.llm_port}/v1/chat/completions",
                                 data=json.dumps(copy.deepcopy(REQUEST)).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        assert r.headers["x-toolsift"] == "kept=5 total=60", r.headers["x-toolsift"]
        assert len(json.load(r)["toolsift_demo"]["tools"]) == 5

    # /stats: each plugin's counters under its prefix, nothing outside them.
    stats = dict(line.split(": ", 1) for line in admin(envoy, "/stats?filter=^wasmcustom").splitlines())
    assert not [k for k in stats if k.startswith("wasmcustom.toolsift.")], stats
    for name, llm, mcp in [
        ("tools_in", 60, 0),
        ("tools_out", 5, 0),
        ("mcp.find_tools", 0, 1),
        ("mcp.tools_list", 1, 2),
    ]:
        assert envoy.stat(f"llm.toolsift.{name}") == llm, name
        assert envoy.stat(f"mcp.toolsift.{name}") == mcp, name
    # /stats/prometheus: one series per plugin, told apart by the `toolsift_plugin` label; the
    # filter's time histogram (after the stats flush) only in the plugin that filtered.
    def series(text: str) -> dict[str, float]:
        return {k: float(v) for k, v in (l.rsplit(" ", 1) for l in text.splitlines() if l.startswith("toolsift_"))}

    deadline = time.time() + 20
    count = 'toolsift_filter_time_us_count{toolsift_plugin="llm"}'
    while True:
        prom = series(admin(envoy, "/stats/prometheus"))
        if prom.get(count) == 1 or time.time() > deadline:
            break
        time.sleep(0.25)
    assert prom[count] == 1
    assert prom['toolsift_filter_time_us_count{toolsift_plugin="mcp"}'] == 0
    assert prom['toolsift_filter_time_us_bucket{toolsift_plugin="llm",le="+Inf"}'] == 1
    assert prom['toolsift_tools_in{toolsift_plugin="llm"}'] == 60
    assert prom['toolsift_tools_in{toolsift_plugin="mcp"}'] == 0
    assert prom['toolsift_mcp_tools_list{toolsift_plugin="mcp"}'] == 2
    assert prom['toolsift_mcp_tools_list{toolsift_plugin="llm"}'] == 1
    assert not [k for k in prom if "toolsift_plugin" not in k], "a toolsift series without its plugin"

    # The log: Envoy heads both plugins' lines alike (`wasm log toolsift toolsift`, their name and
    # root id); toolsift's own head names each, in the VM both share.
    log = envoy.log.read_text()
    for plugin in ("mcp", "llm"):
        assert re.search(rf"wasm log toolsift toolsift: \[{plugin}\] configured: ", log), log
    decision = "[llm] toolsift: openai_chat query="
    assert decision in log, log
    assert "[mcp] toolsift: openai_chat" not in log
    # One VM: the worker thread created one and configured both plugins in it.
    def on(tid: str, text: str) -> int:
        return sum(1 for line in log.splitlines() if f"][{tid}][" in line and text in line)

    threads = set(re.findall(r"\]\[(\d+)\]\[info\]\[wasm\].*\] configured: ", log))
    assert any(
        on(t, "Thread-Local Wasm created") == 1 and on(t, "[mcp] configured") == 1 and on(t, "[llm] configured") == 1
        for t in threads
    ), log
