"""`Mcp-Param-*` headers (2026-07-28, SEP-2243) through the gateway: a server tool whose
`inputSchema` marks a property `x-mcp-header` gets that argument mirrored into a header on every
`tools/call`, and the official SDK's server refuses a call whose header is missing or differs
(HTTP 400, HeaderMismatch). A client behind toolsift lists only `find_tools`, `call_tool` and the
`always_include` tools, so it knows no other tool's schema: the gateway adds the headers to the
calls it sends (`call_tool`'s), and sends a direct call of a found tool itself when it came
without them. The server (tests/mcp/server.py) records the headers each request carried.
"""

from __future__ import annotations

import pytest
from conftest import Envoy, McpServer, run
from mcp import Client

MODES = ["legacy", "2026-07-28"]
CONFIG = {"mcp": {"paths": ["/mcp"]}, "always_include": ["fetch_webpage"], "debug": True}


@pytest.fixture(scope="module")
def gateway():
    server = McpServer(
        "--count", "250",
        "--header-param", "get_current_stock_price:symbol:Symbol",
        "--header-param", "fetch_webpage:result_id:Result-Id",
    )
    envoy = Envoy("envoy-mcp.yaml", CONFIG, {18200: server.port})
    yield server, envoy
    envoy.stop()
    server.stop()


def calls_seen(server: McpServer) -> list[tuple[str, dict[str, str]]]:
    """Each `tools/call` that reached the server: its tool and its `Mcp-Param-*` headers."""
    return [
        (r["tool"], r["mcp_params"])
        for r in server.get("/test/seen")["requests"]
        if r["rpc"] == "tools/call" and r["complete"]
    ]


@pytest.mark.parametrize("mode", MODES)
def test_calls_of_tools_the_client_never_saw_listed_carry_their_headers(gateway, mode):
    server, envoy = gateway
    server.reset()

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            found = await client.call_tool("find_tools", {"query": "current stock price of a company"})
            first = found.structured_content["tools"][0]["name"]
            # Not plain ASCII: the header carries it base64-encoded.
            via_meta = await client.call_tool("call_tool", {"name": first, "arguments": {"symbol": "Zürich AG"}})
            direct = await client.call_tool(first, {"symbol": "MSFT"})
            # Listed (always_include): the client knows its schema and mirrors the header itself.
            known = await client.call_tool("fetch_webpage", {"result_id": "r-1"})
            return listed, first, via_meta, direct, known

    listed, first, via_meta, direct, known = run(main())
    assert listed == ["find_tools", "call_tool", "fetch_webpage"]
    assert first == "get_current_stock_price"
    for result in (via_meta, direct, known):
        assert not result.is_error, result
    assert via_meta.structured_content["arguments"] == {"symbol": "Zürich AG"}
    assert direct.structured_content["arguments"] == {"symbol": "MSFT"}
    assert server.calls() == [
        {"tool": first, "arguments": {"symbol": "Zürich AG"}},
        {"tool": first, "arguments": {"symbol": "MSFT"}},
        {"tool": "fetch_webpage", "arguments": {"result_id": "r-1"}},
    ]
    if mode == "legacy":
        # 2025-11-25 has no such headers: the calls go as before.
        assert all(params == {} for _, params in calls_seen(server))
        return
    assert calls_seen(server) == [
        (first, {"mcp-param-symbol": "=?base64?WsO8cmljaCBBRw==?="}),
        (first, {"mcp-param-symbol": "MSFT"}),
        ("fetch_webpage", {"mcp-param-result-id": "r-1"}),
    ]
