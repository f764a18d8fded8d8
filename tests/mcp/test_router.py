"""toolsift in front of Envoy's mcp_router (docs/examples/envoy-mcp-router.yaml), which merges
two SDK-built servers (livemcpbench tools 1-120 as `catalog`, toolbench tools 1-120 as `tools`)
under one endpoint, naming each tool `{server}__{tool}`. The client lists two tools; find_tools
searches the merged catalog; calls reach the right server through the router. mcp_router speaks
the handshake revisions (sessions), so the client runs in legacy mode."""

from __future__ import annotations

import pytest
from conftest import Envoy, McpServer, free_port, run
from mcp import Client
from mcp.shared.exceptions import MCPError


@pytest.fixture(scope="module")
def gateway():
    catalog = McpServer("--name", "catalog", "--count", "120")
    tools = McpServer("--name", "tools", "--dataset", "toolbench", "--count", "120")
    envoy = Envoy(
        "docs/examples/envoy-mcp-router.yaml",
        {"mcp": {"paths": ["/mcp"]}},
        {18200: catalog.port, 18201: tools.port, 10001: free_port()},
    )
    yield catalog, tools, envoy
    envoy.stop()
    catalog.stop()
    tools.stop()


def test_find_tools_searches_the_merged_catalog_and_calls_reach_each_server(gateway):
    catalog, tools, envoy = gateway
    catalog.reset()
    tools.reset()

    async def main():
        async with Client(envoy.url, mode="legacy") as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            stock = await client.call_tool("find_tools", {"query": "current stock price of a company", "limit": 3})
            nba = await client.call_tool("find_tools", {"query": "NBA players and games", "limit": 3})
            names = lambda r: [t["name"] for t in r.structured_content["tools"]]  # noqa: E731
            first_stock, first_nba = names(stock)[0], names(nba)[0]
            via_meta = await client.call_tool("call_tool", {"name": first_stock, "arguments": {"symbol": "AAPL"}})
            direct = await client.call_tool(first_nba, {})
            with pytest.raises(MCPError) as refused:
                await client.call_tool("catalog__drop_all_tables", {})
            return listed, names(stock), names(nba), via_meta, direct, refused.value

    listed, stock, nba, via_meta, direct, refused = run(main())
    assert listed == ["find_tools", "call_tool"]
    assert stock[0] == "catalog__get_current_stock_price", stock
    assert nba[0].startswith("tools__Free_NBA"), nba
    assert via_meta.structured_content["server"] == "catalog"
    assert direct.structured_content["server"] == "tools"
    # The router strips its prefix: each server saw its own tool's name.
    assert catalog.calls() == [{"tool": "get_current_stock_price", "arguments": {"symbol": "AAPL"}}]
    assert tools.calls() == [{"tool": nba[0].removeprefix("tools__"), "arguments": {}}]
    assert refused.code == -32602
    assert envoy.stat("toolsift.mcp.catalog.fetches") == 1
