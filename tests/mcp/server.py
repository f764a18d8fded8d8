"""An MCP server built with the official Python SDK (`mcp` on PyPI), for toolsift's tests,
demo and benchmarks.

Its tools are a real catalog: the first `--count` tools of a shared dataset
(`../shared/datasets/<name>/tools.jsonl`, OpenAI function format), served as MCP tools
(`name`, `description`, `inputSchema`). Calling a tool records the call and answers with the
tool's name and arguments, so a test can tell which calls reached the server.

Options a test turns on:
- `--start N`: serve the dataset's tools from the N-th on (a second server with other tools).
- `--gating RULES.json`: also expose `_tool_gating` (see below).
- `--toolset N`: also expose `enable_toolset`, which adds N more dataset tools and sends
  `notifications/tools/list_changed` (as servers with dynamic toolsets do).
- `--json-response`: legacy-revision answers as JSON instead of SSE.
- `--ttl-ms`, `--cache-scope`: the 2026-07-28 caching hints on `tools/list`.
- `--page-size`: tools per `tools/list` page (pagination by `nextCursor`).
- `--annotate NAME:HINT` (repeatable): tool NAME declares the MCP annotation HINT
  (`destructiveHint`, `readOnlyHint`, `openWorldHint`, `idempotentHint`) true.
- `--list-delay-ms`: each `tools/list` answers this late (a slow catalog).
- `--only GLOB` (repeatable) and `--without NAME` (repeatable): of those tools, serve only
  the ones whose name matches a GLOB and is no NAME (one caller's share of a catalog).
- `--header-param NAME:PROPERTY:TOKEN` (repeatable): tool NAME's top-level PROPERTY declares
  `"x-mcp-header": TOKEN` (2026-07-28: a client mirrors that argument into `Mcp-Param-TOKEN`,
  and this server refuses a `tools/call` whose header disagrees with the body).

`GET /test/calls` lists every `tools/call` received but `_tool_gating`'s, known tool or not
(`[{"tool", "arguments"}]`), `GET /test/lists` counts the `tools/list` requests; `GET /test/seen`
is the server's view of its connections (below); `POST /test/reset` clears all three.

The view (`/test/seen`) is recorded below the SDK, in the HTTP server and the ASGI app it runs:
every request that arrived (its headers, its `Mcp-Param-*` headers, and the JSON-RPC method, id
and tool of its body), and
whether its body ended (`complete`) or the peer went away first (`reset`, what the SDK logs as
`ClientDisconnect`); and how many TCP connections were opened (`connections`), of which how many
carried no request at all (`empty`: closed again, or still open and idle). Requests to `/test/`
are not recorded.

Run: `.venv/bin/python tests/mcp/server.py --port 18200 --dataset livemcpbench --count 250`.
The line "mcp server listening on 127.0.0.1:PORT" on stderr says it is ready.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import CacheHint, Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

DATASETS = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"


def load_tools(
    dataset: str,
    start: int,
    count: int,
    annotate: dict[str, list[str]] | None = None,
    header_params: dict[str, dict[str, str]] | None = None,
) -> list[types.Tool]:
    """The dataset's tools `start`..`start + count`; `annotate`: tool name → hints it declares;
    `header_params`: tool name → {property: x-mcp-header token}."""
    annotate = annotate or {}
    header_params = header_params or {}
    tools = []
    with open(DATASETS / dataset / "tools.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i < start:
                continue
            if len(tools) >= count:
                break
            function = json.loads(line)["function"]
            schema = function.get("parameters") or {"type": "object", "properties": {}}
            if schema.get("type") != "object":
                schema = {"type": "object", "properties": {}}
            for prop, token in header_params.get(function["name"], {}).items():
                schema["properties"][prop]["x-mcp-header"] = token
            hints = annotate.get(function["name"])
            tools.append(
                types.Tool(
                    name=function["name"],
                    description=function.get("description") or None,
                    input_schema=schema,
                    annotations=types.ToolAnnotations.model_validate({h: True for h in hints}) if hints else None,
                )
            )
    return tools


GATING_TOOL = types.Tool(
    name="_tool_gating",
    description="Tool gating: given the turn's text, says which tools to exclude and which one claims it.",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string"}, "tools": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"],
    },
)


def gating_answer(rules: list[dict[str, Any]], query: str) -> dict[str, Any]:
    """`{"exclude": [...], "claim": name?}` from rules `{"match": regex, "exclude": [...], "claim": name}`."""
    exclude: list[str] = []
    claim = None
    for rule in rules:
        if re.search(rule["match"], query, re.IGNORECASE):
            exclude.extend(rule.get("exclude", []))
            claim = claim or rule.get("claim")
    answer: dict[str, Any] = {"exclude": exclude}
    if claim:
        answer["claim"] = claim
    return answer


class View:
    """What the server saw of its peers (the module docstring says what is recorded)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        # Peer address of each connection opened → whether it carried a request.
        self.connections: dict[str, bool] = {}
        # Peer addresses of the connections closed.
        self.closed: set[str] = set()

    def clear(self) -> None:
        self.requests.clear()
        self.connections.clear()
        self.closed.clear()

    def summary(self) -> dict[str, Any]:
        empty = [peer for peer, used in self.connections.items() if not used]
        return {
            "requests": self.requests,
            "connections": len(self.connections),
            "empty": {
                "closed": sum(1 for peer in empty if peer in self.closed),
                "open": sum(1 for peer in empty if peer not in self.closed),
            },
        }


VIEW = View()


def peer_key(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, (tuple, list)) and len(peer) >= 2 else str(peer)


class RecordingProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, noting each connection as it is opened and closed."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.peer_key = peer_key(transport.get_extra_info("peername"))
        VIEW.connections.setdefault(self.peer_key, False)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        VIEW.closed.add(self.peer_key)
        super().connection_lost(exc)


def recording(app):
    """The ASGI app `app`, recording each request into VIEW (but those to /test/)."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith("/test/"):
            if scope["type"] == "http" and scope.get("client"):
                # A test's own connection: not one a client request opened.
                VIEW.connections[peer_key(scope["client"])] = True
            return await app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        entry: dict[str, Any] = {
            "method": scope["method"],
            "mcp_method": headers.get("mcp-method"),
            "mcp_name": headers.get("mcp-name"),
            "mcp_params": {k: v for k, v in headers.items() if k.startswith("mcp-param-")},
            "rpc": None,
            "id": None,
            "tool": None,
            "complete": False,
            "reset": False,
        }
        VIEW.requests.append(entry)
        if scope.get("client"):
            VIEW.connections[peer_key(scope["client"])] = True
        body = bytearray()

        async def watched():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False):
                    entry["complete"] = True
                    try:
                        rpc = json.loads(body) if body else None
                    except ValueError:
                        rpc = None
                    if isinstance(rpc, dict):
                        params = rpc.get("params") if isinstance(rpc.get("params"), dict) else {}
                        entry.update(rpc=rpc.get("method"), id=rpc.get("id"), tool=params.get("name"))
            elif message["type"] == "http.disconnect" and not entry["complete"]:
                entry["reset"] = True
            return message

        return await app(scope, watched, send)

    return wrapped


async def seen(request: Request) -> JSONResponse:
    return JSONResponse(VIEW.summary())


def build(args: argparse.Namespace) -> Server:
    annotate: dict[str, list[str]] = {}
    for pair in args.annotate:
        name, _, hint = pair.partition(":")
        annotate.setdefault(name, []).append(hint)
    header_params: dict[str, dict[str, str]] = {}
    for spec in args.header_param:
        name, prop, token = spec.split(":", 2)
        header_params.setdefault(name, {})[prop] = token
    tools = load_tools(args.dataset, args.start, args.count, annotate, header_params)
    if args.only or args.without:
        tools = [
            t
            for t in tools
            if (not args.only or any(fnmatch.fnmatchcase(t.name, g) for g in args.only))
            and t.name not in args.without
        ]
    extra = load_tools(args.dataset, args.start + args.count, args.toolset) if args.toolset else []
    rules = json.loads(Path(args.gating).read_text()) if args.gating else None
    state: dict[str, Any] = {"calls": [], "lists": 0, "gating": 0}

    def listed() -> list[types.Tool]:
        out = list(tools)
        if rules is not None:
            out.append(GATING_TOOL)
        if extra and not state.get("enabled"):
            out.append(
                types.Tool(
                    name="enable_toolset",
                    description="Enable the extra toolset: adds its tools to this server's tool list.",
                    input_schema={"type": "object", "properties": {}},
                )
            )
        if state.get("enabled"):
            out.extend(extra)
        return out

    async def on_list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        state["lists"] += 1
        if args.list_delay_ms:
            await asyncio.sleep(args.list_delay_ms / 1000)
        all_tools = listed()
        start = int(params.cursor) if params and params.cursor else 0
        page = all_tools[start : start + args.page_size]
        following = start + args.page_size
        cursor = str(following) if following < len(all_tools) else None
        return types.ListToolsResult(tools=page, next_cursor=cursor)

    async def on_call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "_tool_gating" and rules is not None:
            state["gating"] += 1
            answer = gating_answer(rules, str(arguments.get("query", "")))
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(answer))], structured_content=answer
            )
        # Every call that reaches the server, known tool or not: tests check what never does.
        state["calls"].append({"tool": params.name, "arguments": arguments})
        if params.name == "enable_toolset" and extra:
            state["enabled"] = True
            # Request-scoped: it rides this call's response stream (SSE), before the result.
            await ctx.session.send_notification(types.ToolListChangedNotification(), ctx.request_id)
            return types.CallToolResult(content=[types.TextContent(text=f"enabled {len(extra)} tools")])
        if not any(t.name == params.name for t in listed()):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        result = {"server": args.name, "tool": params.name, "arguments": arguments}
        return types.CallToolResult(
            content=[types.TextContent(text=f"{args.name}: {params.name} ran with {json.dumps(arguments)}")],
            structured_content=result,
        )

    hints = {"tools/list": CacheHint(ttl_ms=args.ttl_ms, scope=args.cache_scope)}
    server = Server(args.name, version="1.0", on_list_tools=on_list_tools, on_call_tool=on_call_tool, cache_hints=hints)
    server.test_state = state  # type: ignore[attr-defined]
    return server


async def calls(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.test["calls"])


async def lists(request: Request) -> JSONResponse:
    state = request.app.state.test
    return JSONResponse({"lists": state["lists"], "gating": state["gating"]})


async def reset(request: Request) -> JSONResponse:
    state = request.app.state.test
    state["calls"].clear()
    state["lists"] = 0
    state["gating"] = 0
    VIEW.clear()
    return JSONResponse({})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="catalog")
    parser.add_argument("--dataset", default="livemcpbench")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--count", type=int, default=250)
    parser.add_argument("--toolset", type=int, default=0)
    parser.add_argument("--gating")
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--ttl-ms", type=int, default=60_000)
    parser.add_argument("--cache-scope", choices=["public", "private"], default="public")
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--annotate", action="append", default=[])
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--without", action="append", default=[])
    parser.add_argument("--list-delay-ms", type=int, default=0)
    parser.add_argument("--header-param", action="append", default=[])
    args = parser.parse_args()
    server = build(args)
    app = server.streamable_http_app(
        json_response=args.json_response,
        # Envoy keeps the client's Host; the SDK's DNS-rebinding guard accepts only these.
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "localhost"],
        ),
        custom_starlette_routes=[
            Route("/test/calls", calls, methods=["GET"]),
            Route("/test/lists", lists, methods=["GET"]),
            Route("/test/reset", reset, methods=["POST"]),
            Route("/test/seen", seen, methods=["GET"]),
        ],
    )
    app.state.test = server.test_state  # type: ignore[attr-defined]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: uvicorn writes a response's head and body separately, and
    # with Nagle the body would wait for the peer's delayed ACK (40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(recording(app), log_level="warning", lifespan="on", http=RecordingProtocol)
    uv = uvicorn.Server(config)
    print(f"mcp server listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    uv.run(sockets=[sock])


if __name__ == "__main__":
    main()
