"""Memory of found tools and search storms on MCP routes (`search.memory`, `search.max_searches`),
through the real Envoy and .wasm, with the official SDK's client in front of an SDK-built server
with 250 livemcpbench tools. A legacy (2025-11-25) client's session is its `Mcp-Session-Id`; on
either revision a client may name its session with the configured header (`x-session-id`)."""

from __future__ import annotations

import uuid

import pytest
from conftest import Envoy, McpServer, run
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

MODES = ["legacy", "2026-07-28"]
PINNED = ["find_tools", "call_tool", "fetch_webpage"]
MAX_SEARCHES = 3
CONFIG = {
    "mcp": {"paths": ["/mcp"]},
    "always_include": ["fetch_webpage"],
    "search": {"max_searches": MAX_SEARCHES, "memory": {"session": {"header": "x-session-id"}}},
}
STOCKS = "current stock price of a company"


@pytest.fixture(scope="module")
def gateway():
    server = McpServer("--count", "250")
    envoy = Envoy("envoy-mcp.yaml", CONFIG, {18200: server.port})
    yield server, envoy
    envoy.stop()
    server.stop()


def client(envoy: Envoy, mode: str, headers: dict[str, str] | None = None) -> Client:
    """The SDK's client, with `headers` on every request, and no list cache of its own (the
    gateway's answer is what is tested)."""
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(envoy.url, http_client=http), mode=mode, cache=None)


async def listed(c: Client) -> list[str]:
    return [t.name for t in (await c.list_tools()).tools]


async def find(c: Client, query: str, limit: int = 2):
    result = await c.call_tool("find_tools", {"query": query, "limit": limit})
    return result, [t["name"] for t in (result.structured_content or {}).get("tools", [])]


def test_a_legacy_session_lists_what_it_found_and_another_does_not(gateway):
    server, envoy = gateway

    async def main():
        async with client(envoy, "legacy") as c:
            before = await listed(c)
            _, found = await find(c, STOCKS)
            after = await listed(c)
        async with client(envoy, "legacy") as other:
            elsewhere = await listed(other)
        return before, found, after, elsewhere

    before, found, after, elsewhere = run(main())
    assert before == PINNED
    assert found[0] == "get_current_stock_price" and len(found) == 2
    assert after == PINNED + found, "found tools follow the pinned ones, first-found first"
    assert elsewhere == PINNED, "another session lists nothing of this one's"


@pytest.mark.parametrize("mode", MODES)
def test_a_session_header_names_the_session_on_both_revisions_within_one_caller(gateway, mode):
    server, envoy = gateway
    session = {"x-session-id": str(uuid.uuid4())}

    async def main():
        async with client(envoy, mode, {**session, "authorization": "Bearer alice"}) as c:
            _, found = await find(c, STOCKS)
        # A new connection of the same session and caller: the tools are listed at once.
        async with client(envoy, mode, {**session, "authorization": "Bearer alice"}) as again:
            same = await listed(again)
        # The same session name with other credentials is another owner's session.
        async with client(envoy, mode, {**session, "authorization": "Bearer mallory"}) as other:
            theirs = await listed(other)
        return found, same, theirs

    found, same, theirs = run(main())
    assert same == PINNED + found
    assert theirs == PINNED


@pytest.mark.parametrize("mode", MODES)
def test_a_repeated_search_is_answered_from_the_first(gateway, mode):
    server, envoy = gateway
    session = {"x-session-id": str(uuid.uuid4())}
    searches = envoy.stat("toolsift.mcp.find_tools")

    async def main():
        async with client(envoy, mode, session) as c:
            first, first_found = await find(c, STOCKS)
            again, again_found = await find(c, "Current STOCK price of a company?")
            return first, first_found, again, again_found

    first, first_found, again, again_found = run(main())
    assert not again.is_error
    assert "inputSchema" in first.structured_content["tools"][0]
    assert again_found == first_found
    assert again.structured_content["tools"] == [{"name": n} for n in first_found]
    assert again.structured_content["note"].startswith("You searched for this already: call one of them")
    assert envoy.stat("toolsift.mcp.find_tools") == searches + 2


@pytest.mark.parametrize("mode", MODES)
def test_a_search_storm_ends_in_an_error_until_a_real_tool_is_called(gateway, mode):
    server, envoy = gateway
    server.reset()
    session = {"x-session-id": str(uuid.uuid4())}
    storms = envoy.stat("toolsift.mcp.search_storms")
    queries = ["weather forecast for a city", "send an email", "search npm packages", STOCKS]

    async def main():
        async with client(envoy, mode, session) as c:
            answers = [await find(c, q) for q in queries]
            # A real call ends the loop: the session searches again.
            called = await c.call_tool("call_tool", {"name": "get_current_stock_price", "arguments": {"symbol": "AAPL"}})
            after, after_found = await find(c, STOCKS)
            return answers, called, after, after_found

    answers, called, after, after_found = run(main())
    assert [a[0].is_error for a in answers] == [False] * MAX_SEARCHES + [True]
    stopped = answers[-1][0]
    assert stopped.content[0].text == (
        f"The tool search stopped after {MAX_SEARCHES} searches: call one of the tools it found, or answer."
    )
    assert envoy.stat("toolsift.mcp.search_storms") == storms + 1
    assert not called.is_error
    assert server.calls() == [{"tool": "get_current_stock_price", "arguments": {"symbol": "AAPL"}}]
    assert not after.is_error and after_found[0] == "get_current_stock_price"
