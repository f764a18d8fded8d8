"""A server whose tool list changes (its `enable_toolset` adds 20 tools and sends
`notifications/tools/list_changed` on the call's event stream): the gateway sees the
notification pass (a direct call) or in the answer it reads (`call_tool`), drops the catalog,
and the next find_tools searches the new tools. The server's cache hints would otherwise keep the
old catalog for a minute."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, Envoy, McpServer, run
from mcp import Client

MODES = ["legacy", "2026-07-28"]


def new_tool() -> dict:
    """The first tool the toolset adds (tool 61 of livemcpbench), and a query made of its name."""
    with open(REPO.parent / "shared/datasets/livemcpbench/tools.jsonl", encoding="utf-8") as f:
        return json.loads(list(f)[60])["function"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["direct", "call_tool"])
def test_list_changed_refreshes_the_catalog(mode, how):
    server = McpServer("--count", "60", "--toolset", "20", "--ttl-ms", "60000")
    envoy = Envoy("envoy-mcp.yaml", {"mcp": {"paths": ["/mcp"], "catalog_ttl_ms": 60000}}, {18200: server.port})
    try:
        tool = new_tool()["name"]
        query = tool.replace("_", " ").replace("-", " ")

        async def main():
            async with Client(envoy.url, mode=mode) as client:
                before = await client.call_tool("find_tools", {"query": query, "limit": 10})
                if how == "direct":
                    await client.call_tool("enable_toolset", {})
                else:
                    await client.call_tool("call_tool", {"name": "enable_toolset", "arguments": {}})
                after = await client.call_tool("find_tools", {"query": query, "limit": 10})
                names = lambda r: [t["name"] for t in r.structured_content["tools"]]  # noqa: E731
                return names(before), names(after)

        before, after = run(main())
        assert tool not in before
        assert tool in after, after
        assert envoy.stat("toolsift.mcp.list_changed") >= 1
        assert envoy.stat("toolsift.mcp.catalog.fetches") >= 2
    finally:
        envoy.stop()
        server.stop()
