"""toolsift in front of an MCP server with 250 real tools (the first 250 of the livemcpbench
catalog), the official SDK's client on both protocol revisions, and the server answering in SSE
(its default) or JSON."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, Envoy, McpServer, run
from mcp import Client
from mcp.shared.exceptions import MCPError

MODES = ["legacy", "2026-07-28"]
CONFIG = {"mcp": {"paths": ["/mcp"]}, "always_include": ["fetch_webpage"], "debug": True}
DATASET = REPO.parent / "shared" / "datasets" / "livemcpbench"


@pytest.fixture(scope="module", params=["sse", "json"])
def gateway(request):
    args = ["--count", "250"] + (["--json-response"] if request.param == "json" else [])
    server = McpServer(*args)
    envoy = Envoy("envoy-mcp.yaml", CONFIG, {18200: server.port})
    yield server, envoy
    envoy.stop()
    server.stop()


def served_tools() -> list[dict]:
    tools = []
    with open(DATASET / "tools.jsonl", encoding="utf-8") as f:
        for line in list(f)[:250]:
            tools.append(json.loads(line)["function"])
    return tools


@pytest.mark.parametrize("mode", MODES)
def test_the_client_lists_three_tools_instead_of_250(gateway, mode):
    server, envoy = gateway

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            listed = await client.list_tools()
            return [t.name for t in listed.tools]

    assert run(main()) == ["find_tools", "call_tool", "fetch_webpage"]
    assert envoy.stat("toolsift.mcp.tools_list") >= 1
    assert envoy.stat("toolsift.mcp.tokens_saved") > 10_000


@pytest.mark.parametrize("mode", MODES)
def test_find_tools_returns_the_relevant_schemas(gateway, mode):
    """Every livemcpbench query whose tools are all served: find_tools (limit 5) must find one
    of them for most, and every tool it returns carries the server's own schema."""
    server, envoy = gateway
    names = {t["name"] for t in served_tools()}
    queries = []
    with open(DATASET / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            if all(r in names for r in q["relevant"]):
                queries.append(q)
    assert len(queries) >= 30

    async def main():
        hits = 0
        # The server's own definitions, asked directly.
        own = {}
        async with Client(f"http://127.0.0.1:{server.port}/mcp", mode=mode) as direct:
            cursor = None
            while True:
                page = await direct.list_tools(cursor=cursor)
                own.update({t.name: t.model_dump(by_alias=True, exclude_none=True) for t in page.tools})
                if not (cursor := page.next_cursor):
                    break
        assert len(own) == 250
        async with Client(envoy.url, mode=mode) as client:
            for q in queries:
                result = await client.call_tool("find_tools", {"query": q["query"], "limit": 5})
                assert not result.is_error
                found = result.structured_content["tools"]
                assert len(found) <= 5
                assert json.loads(result.content[0].text) == result.structured_content
                for tool in found:
                    assert tool["inputSchema"] == own[tool["name"]]["inputSchema"]
                    assert tool["description"] == own[tool["name"]]["description"]
                    assert tool["score"] > 0 and tool["matched"] == ["bm25"]
                    assert len(tool["_meta"]["toolsift/schemaVersion"]) == 16
                hits += any(t["name"] in q["relevant"] for t in found)
        return hits

    hits = run(main())
    print(f"find_tools found a relevant tool for {hits} of {len(queries)} queries")
    # Keyword ranking finds a relevant tool in the top 5 for about half of these queries
    # (measured: 19 of 36); the floor catches a broken ranking, not a small change.
    assert hits >= len(queries) // 3, f"{hits} of {len(queries)}"


@pytest.mark.parametrize("mode", MODES)
def test_an_empty_query_is_an_error_result(gateway, mode):
    server, envoy = gateway

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            return await client.call_tool("find_tools", {"query": "  "})

    result = run(main())
    assert result.is_error
    assert "needs a query" in result.content[0].text


@pytest.mark.parametrize("mode", MODES)
def test_call_tool_and_direct_calls_execute_on_the_server(gateway, mode):
    server, envoy = gateway
    server.reset()

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            found = await client.call_tool("find_tools", {"query": "current stock price of a company"})
            first = found.structured_content["tools"][0]["name"]
            via_meta = await client.call_tool("call_tool", {"name": first, "arguments": {"symbol": "AAPL"}})
            direct = await client.call_tool(first, {"symbol": "MSFT"})
            return first, via_meta, direct

    first, via_meta, direct = run(main())
    assert first == "get_current_stock_price"
    assert via_meta.structured_content == {"server": "catalog", "tool": first, "arguments": {"symbol": "AAPL"}}
    assert direct.structured_content["arguments"] == {"symbol": "MSFT"}
    assert server.calls() == [
        {"tool": first, "arguments": {"symbol": "AAPL"}},
        {"tool": first, "arguments": {"symbol": "MSFT"}},
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["direct", "call_tool"])
def test_an_unknown_tool_is_an_error_and_never_reaches_the_server(gateway, mode, how):
    server, envoy = gateway
    server.reset()
    refused = envoy.stat("toolsift.mcp.unknown_tool")

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            with pytest.raises(MCPError) as error:
                if how == "direct":
                    await client.call_tool("drop_all_tables", {})
                else:
                    await client.call_tool("call_tool", {"name": "drop_all_tables", "arguments": {}})
            return error.value

    error = run(main())
    assert error.code == -32602
    assert "find_tools" in error.message
    assert server.calls() == []
    assert envoy.stat("toolsift.mcp.unknown_tool") == refused + 1


@pytest.mark.parametrize("mode", MODES)
def test_the_gateway_says_what_its_search_can_do(gateway, mode):
    """`toolsift://capabilities`, listed among the server's resources (this server has none)."""
    server, envoy = gateway

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            listed = await client.list_resources()
            read = await client.read_resource("toolsift://capabilities")
            return [str(r.uri) for r in listed.resources], read

    uris, read = run(main())
    assert uris == ["toolsift://capabilities"]
    capabilities = json.loads(read.contents[0].text)
    assert capabilities["search"]["backends"] == ["keyword"]
    assert capabilities["meta_tools"] == {"find": "find_tools", "call": "call_tool"}
