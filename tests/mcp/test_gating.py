"""`_tool_gating`: a server (60 livemcpbench tools) that exposes the gating tool with the rules
of tests/mcp/gating.json. The gateway calls it before answering find_tools, hides it from the
client, and applies its `exclude` and `claim`."""

from __future__ import annotations

import pytest
from conftest import REPO, Envoy, McpServer, run
from mcp import Client
from mcp.shared.exceptions import MCPError

MODES = ["legacy", "2026-07-28"]
STOCK_BY_DATE = {"get_stock_price_by_date", "get_stock_price_date_range", "get_historical_stock_prices"}


@pytest.fixture(scope="module")
def gateway():
    server = McpServer("--count", "60", "--gating", str(REPO / "tests/mcp/gating.json"))
    envoy = Envoy("envoy-mcp.yaml", {"mcp": {"paths": ["/mcp"]}}, {18200: server.port})
    yield server, envoy
    envoy.stop()
    server.stop()


async def find(url: str, mode: str, query: str) -> list[str]:
    async with Client(url, mode=mode) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        assert listed == ["find_tools", "call_tool"], "the gating tool is never shown"
        result = await client.call_tool("find_tools", {"query": query, "limit": 5})
        return [t["name"] for t in result.structured_content["tools"]]


@pytest.mark.parametrize("mode", MODES)
def test_exclusions_remove_tools_from_the_results(gateway, mode):
    server, envoy = gateway
    server.reset()
    without = run(find(envoy.url, mode, "stock price of a company on a given date"))
    assert STOCK_BY_DATE & set(without), without
    assert server.counts()["gating"] == 1
    gated = run(find(envoy.url, mode, "the current stock price of a company"))
    assert "get_current_stock_price" in gated
    assert not STOCK_BY_DATE & set(gated), gated
    assert server.counts()["gating"] == 2
    assert envoy.stat("toolsift.mcp.gating.excluded") >= 1


@pytest.mark.parametrize("mode", MODES)
def test_a_claim_puts_the_claimed_tool_first(gateway, mode):
    server, envoy = gateway
    found = run(find(envoy.url, mode, "/quote weather forecast for Paris"))
    assert found[0] == "get_current_stock_price", found
    assert envoy.stat("toolsift.mcp.gating.claimed") >= 1


@pytest.mark.parametrize("mode", MODES)
def test_the_gating_tool_cannot_be_called_by_the_client(gateway, mode):
    server, envoy = gateway
    before = server.counts()["gating"]

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            with pytest.raises(MCPError) as error:
                await client.call_tool("_tool_gating", {"query": "/quote"})
            return error.value

    assert run(main()).code == -32602
    assert server.counts()["gating"] == before
