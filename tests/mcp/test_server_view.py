"""What the MCP server sees of the requests the gateway answers: its own view, recorded below
the SDK (tests/mcp/server.py, `/test/seen`: each request that arrived, whether its body ended or
the peer reset it first, and the connections opened), through the real Envoy and .wasm, with the
official SDK's client on both protocol revisions, with and without Envoy's
`allow_on_headers_stop_iteration`.

`hold`: envoy-mcp.yaml as shipped, whose buffer filter after toolsift keeps the request from the
router until its body is whole, so a request the gateway answers is never routed. `bare`: the
same Envoy without that filter, as an operator who adds only the Wasm filter has it: the router
sends the request headers upstream at once, and an answered request reaches the server as
headers followed by a reset. Both are asserted, so neither can change unnoticed; the table
printed at the end (and written to target/test-scratch/mcp-server-view.json) is the one in
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
from conftest import SCRATCH, Envoy, McpServer, run
from mcp import Client
from mcp.shared.exceptions import MCPError

MODES = ["legacy", "2026-07-28"]
CONFIG = {"mcp": {"paths": ["/mcp"]}, "always_include": ["fetch_webpage"]}
# The JSON-RPC ids of the gateway's own catalog pages (src/mcp/exchange/mod.rs, LIST_ID).
GATEWAY_IDS = range(7_400_000_000, 7_400_001_000)
# How long the server is given to notice a reset Envoy sent before the client got its answer.
SETTLE_S = 0.3
BUFFER_FILTER = "- name: envoy.filters.http.buffer"
TABLE: dict[tuple[str, str, str, str], dict[str, int]] = {}


def without_buffer(yaml: str) -> str:
    """`yaml` without envoy-mcp.yaml's buffer filter (the item and its indented body) and the
    route's setting that turns it on."""
    lines = yaml.splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() in (BUFFER_FILTER, "typed_per_filter_config:"):
            indent = len(line) - len(line.lstrip())
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out) + "\n"


def variant(hold: bool, flag: bool):
    def edit(yaml: str, ports) -> str:
        assert BUFFER_FILTER in yaml, "envoy-mcp.yaml lost its buffer filter"
        if not hold:
            yaml = without_buffer(yaml)
            assert BUFFER_FILTER not in yaml
        if flag:
            marker = "                root_id: toolsift\n"
            assert marker in yaml
            yaml = yaml.replace(marker, marker + "                allow_on_headers_stop_iteration: true\n")
        return yaml

    return edit


@pytest.fixture(scope="module")
def server():
    server = McpServer("--count", "250")
    yield server
    server.stop()


@pytest.fixture(scope="module", params=[(h, f) for h in ("hold", "bare") for f in ("flag", "no-flag")], ids=lambda p: "-".join(p))
def gateway(request, server):
    hold, flag = request.param
    envoy = Envoy("envoy-mcp.yaml", CONFIG, {18200: server.port}, edit=variant(hold == "hold", flag == "flag"))
    yield hold, flag, envoy
    envoy.stop()


def view(server: McpServer) -> dict:
    time.sleep(SETTLE_S)
    return server.get("/test/seen")


def posts(seen: dict) -> tuple[list[dict], list[dict]]:
    """The POSTs the server saw: the gateway's own catalog pages, and the others."""
    requests = [r for r in seen["requests"] if r["method"] == "POST"]
    own = [r for r in requests if isinstance(r["id"], int) and r["id"] in GATEWAY_IDS]
    return own, [r for r in requests if r not in own]


async def session(server: McpServer, mode: str, envoy: Envoy) -> dict[str, dict]:
    """One client session of gateway-answered and passing requests: the server's view of each."""
    views: dict[str, dict] = {}

    async def step(name: str, action) -> None:
        server.reset()
        await action()
        views[name] = view(server)

    async with Client(envoy.url, mode=mode, cache=None) as client:
        # The legacy handshake's `notifications/initialized` may still be on its way.
        await asyncio.sleep(SETTLE_S)

        async def refused():
            with pytest.raises(MCPError) as error:
                await client.call_tool("drop_all_tables", {})
            assert error.value.code == -32602

        async def find():
            result = await client.call_tool("find_tools", {"query": "current stock price of a company"})
            assert not result.is_error

        async def via_call_tool():
            result = await client.call_tool("call_tool", {"name": "get_current_stock_price", "arguments": {"symbol": "AAPL"}})
            assert result.structured_content["tool"] == "get_current_stock_price"

        async def direct():
            result = await client.call_tool("fetch_webpage", {"result_id": "7"})
            assert result.structured_content["tool"] == "fetch_webpage"

        async def listing():
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["find_tools", "call_tool", "fetch_webpage"]

        await step("tools/list", listing)
        await step("tools/list again", listing)
        await step("find_tools", find)
        await step("unknown tool", refused)
        await step("call_tool", via_call_tool)
        await step("direct call", direct)
    return views


@pytest.mark.parametrize("mode", MODES)
def test_the_server_sees_only_what_it_must(gateway, server, mode):
    hold, flag, envoy = gateway
    views = run(session(server, mode, envoy))
    # Answered by the gateway: call_tool too (with the answer to the call the gateway sent).
    answered = ["tools/list", "tools/list again", "find_tools", "unknown tool", "call_tool"]
    for name, seen in views.items():
        own, others = posts(seen)
        cut = [r for r in others if r["reset"]]
        whole = [r for r in others if not r["reset"]]
        empty = seen["empty"]["closed"] + seen["empty"]["open"]
        TABLE[(mode, hold, flag, name)] = {
            "requests": len(others),
            "resets": len(cut),
            "connections_without_request": empty,
            "catalog_pages": len(own),
        }
        # The gateway's own catalog requests are whole requests, never cut.
        assert all(r["complete"] and not r["reset"] for r in own), (name, own)
        # What the server must see: call_tool's call (sent by the gateway) and the direct call,
        # each one whole request.
        expected = {"call_tool": "get_current_stock_price", "direct call": "fetch_webpage"}.get(name)
        assert [(r["rpc"], r["tool"], r["complete"]) for r in whole] == (
            [("tools/call", expected, True)] if expected else []
        ), (name, seen)
        if expected and mode != "legacy":
            assert whole[0]["mcp_method"] == "tools/call" and whole[0]["mcp_name"] == expected
        if hold == "hold" or name not in answered:
            assert cut == [] and empty == 0, (name, seen)
        else:
            # Without the buffer filter, on every revision (what issue 22 reported, kept
            # visible): the router had sent the request on, and the gateway's answer cut it.
            # The server sees its headers and a reset, or, when the cut came first, a
            # connection opened for nothing.
            assert len(cut) + empty == 1, (name, seen)
            assert all(r["rpc"] is None and not r["complete"] for r in cut), (name, seen)


def test_routing_headers_that_disagree_with_the_body_are_refused_by_the_gateway(gateway, server):
    """2026-07-28: `Mcp-Method: tools/list` on a call of a tool the server does not have. The
    gateway answers what the server would (400, HeaderMismatch), not a tool list, and the call
    goes nowhere."""
    hold, flag, envoy = gateway
    server.reset()
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {
            "name": "drop_all_tables",
            "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}},
        },
    }
    request = urllib.request.Request(
        envoy.url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/list",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    answer = json.loads(refused.value.read())
    assert answer["id"] == 9 and answer["error"]["code"] == -32020
    own, others = posts(view(server))
    assert own == [] and server.calls() == []
    if hold == "hold":
        assert others == []


def test_zz_write_the_table():
    """The measurement, for docs/BENCHMARKS.md (runs last: pytest keeps file order)."""
    assert TABLE, "test_the_server_sees_only_what_it_must did not run"
    rows = [
        {"revision": m, "envoy": h, "flag": f, "request": n, **counts}
        for (m, h, f, n), counts in sorted(TABLE.items())
    ]
    SCRATCH.mkdir(parents=True, exist_ok=True)
    (SCRATCH / "mcp-server-view.json").write_text(json.dumps(rows, indent=1))
    print()
    print("| revision | envoy | flag | client request | requests seen | of them reset | connections without a request | catalog pages |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['revision']} | {r['envoy']} | {r['flag']} | {r['request']} | {r['requests']} | {r['resets']} "
            f"| {r['connections_without_request']} | {r['catalog_pages']} |"
        )
