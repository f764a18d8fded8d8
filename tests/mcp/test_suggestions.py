"""`suggestions` over MCP: a second MCP server (tests/mcp/server.py with other tools of the same
dataset, its list in pages) is the suggestion catalog, fetched by the gateway through an Envoy
cluster. A `find_tools` whose best match is weak gets up to `k` of its tools, marked
`"suggested": true`, never callable: a client that calls one anyway is refused by the gateway,
and the server behind it never sees the call. The official SDK's client, both revisions."""

from __future__ import annotations

import json
import time

import pytest
from conftest import REPO, Envoy, McpServer, run, with_cluster
from mcp import Client
from mcp.shared.exceptions import MCPError

MODES = ["legacy", "2026-07-28"]
DATASET = REPO.parent / "shared" / "datasets" / "livemcpbench"
SERVED, SUGGESTED = 40, 90


def dataset_tools() -> list[dict]:
    with open(DATASET / "tools.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["function"] for line in list(f)[: SERVED + SUGGESTED]]


def gateway_config(min_score: float) -> dict:
    return {
        "mcp": {"paths": ["/mcp"]},
        "debug": True,
        "suggestions": {
            "min_score": min_score,
            "k": 2,
            "mcp": {"cluster": "suggest", "authority": "localhost", "refresh_seconds": 10},
        },
    }


@pytest.fixture(scope="module")
def servers():
    served = McpServer("--count", str(SERVED))
    suggested = McpServer("--start", str(SERVED), "--count", str(SUGGESTED), "--page-size", "40")
    yield served, suggested
    suggested.stop()
    served.stop()


def start(servers, min_score: float) -> Envoy:
    served, suggested = servers
    envoy = Envoy("envoy-mcp.yaml", gateway_config(min_score), {18200: served.port},
                  edit=with_cluster("suggest", suggested.port))
    deadline = time.time() + 20
    while envoy.stat("toolsift.suggestions.fetched") < 1:
        assert time.time() < deadline, "the suggestion server's list was never fetched"
        time.sleep(0.1)
    return envoy


def find(envoy: Envoy, mode: str, query: str) -> dict:
    async def main():
        async with Client(envoy.url, mode=mode) as client:
            result = await client.call_tool("find_tools", {"query": query})
            return result.structured_content

    return run(main())


@pytest.mark.parametrize("mode", MODES)
def test_a_weak_search_gets_tools_of_the_suggestion_server_never_callable(servers, mode):
    served, suggested = servers
    envoy = start(servers, min_score=1000)
    try:
        # Every page of the suggestion server was read (90 tools in 3 pages of 40).
        assert suggested.counts()["lists"] >= 3
        wanted = dataset_tools()[SERVED + 45]
        result = find(envoy, mode, wanted["description"])
        suggestions = result["suggestions"]
        assert 1 <= len(suggestions) <= 2, result
        assert suggestions[0]["name"] == wanted["name"], suggestions
        for s in suggestions:
            assert s["suggested"] is True
            assert s["source"] == "MCP server suggest"
            assert "inputSchema" not in s
        assert "do not call them" in result["suggestions_note"]
        assert envoy.stat("toolsift.mcp.suggested") == len(suggestions)

        # Calling a suggestion (directly, or through call_tool) never reaches either server.
        before = (len(served.calls()), len(suggested.calls()))

        async def call_it():
            async with Client(envoy.url, mode=mode) as client:
                try:
                    await client.call_tool(wanted["name"], {})
                except MCPError as e:
                    return str(e)
                return "answered"

        assert "find_tools" in run(call_it())
        assert (len(served.calls()), len(suggested.calls())) == before
    finally:
        envoy.stop()


def test_a_search_with_a_good_match_gets_none(servers):
    envoy = start(servers, min_score=0.5)
    try:
        served_tool = dataset_tools()[5]
        result = find(envoy, "2026-07-28", served_tool["description"])
        assert result["tools"][0]["name"] == served_tool["name"], result
        assert "suggestions" not in result
        assert envoy.stat("toolsift.mcp.suggested") == 0
    finally:
        envoy.stop()
