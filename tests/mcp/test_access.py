"""Access rules on MCP routes, through the real Envoy: Envoy's own `jwt_authn` verifies tokens
this test signs (ES256, a local JWKS whose key the test makes) and leaves their payload in the
dynamic metadata, where toolsift reads the caller's `groups`. The official SDK client, on both
protocol revisions, with `denied: "hidden"` and `denied: "refused"`, against an SDK-built server
(250 livemcpbench tools) that records every `tools/call` it receives.

Group `finance` may use `get_*` tools for AAPL and MSFT only; group `dev` the `npm*` tools; no one
`npmDeprecated` or a tool that declares `destructiveHint` (the server marks `get_cashflow`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import jwt
import pytest
from conftest import Envoy, McpServer, run
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

MODES = ["legacy", "2026-07-28"]
ISSUER = "https://issuer.toolsift.test"
AUDIENCE = "toolsift-tests"
ALWAYS = ["get_current_stock_price", "npmLatest", "fetch_webpage"]


def access(denied: str) -> dict:
    return {
        "identity": [{"metadata": "envoy.filters.http.jwt_authn", "claim": "groups"}],
        "default": "deny",
        "rules": [
            {"when": ["finance"], "allow": ["get_*"], "arguments": {"get_*": {"symbol": ["AAPL", "MSFT"]}}},
            {"when": ["dev"], "allow": ["npm*"]},
            {"when": ["*"], "deny": ["npmDeprecated"], "deny_annotations": ["destructiveHint"]},
        ],
        "denied": denied,
    }


class Issuer:
    """An ES256 key pair, its JWKS, and tokens signed with it."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.kid = uuid.uuid4().hex
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        jwk.update({"kid": self.kid, "alg": "ES256", "use": "sig"})
        self.jwks = json.dumps({"keys": [jwk]})

    def token(self, groups: list[str], subject: str = "user") -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "groups": groups, "iat": now, "exp": now + 3600}
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": self.kid})


def with_jwt_authn(jwks: str):
    """An `edit` for conftest's Envoy: Envoy's jwt_authn before toolsift, a token optional (a
    request without one passes it, and toolsift sees no identity), its payload in metadata."""

    def edit(yaml: str, ports: dict[int, int]) -> str:
        block = f"""          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                tests:
                  issuer: {ISSUER}
                  audiences: [{AUDIENCE}]
                  local_jwks:
                    inline_string: {json.dumps(jwks)}
                  payload_in_metadata: jwt_payload
              rules:
              - match: {{ prefix: "/" }}
                requires:
                  requires_any:
                    requirements:
                    - provider_name: tests
                    - allow_missing: {{}}
"""
        marker = "          - name: toolsift\n"
        assert marker in yaml
        return yaml.replace(marker, block + marker, 1)

    return edit


@pytest.fixture(scope="module")
def issuer():
    return Issuer()


@pytest.fixture(scope="module")
def server():
    server = McpServer("--count", "250", "--annotate", "get_cashflow:destructiveHint")
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["hidden", "refused"])
def gateway(request, server, issuer):
    config = {"mcp": {"paths": ["/mcp"]}, "always_include": ALWAYS, "access": access(request.param)}
    envoy = Envoy("envoy-mcp.yaml", config, {18200: server.port}, edit=with_jwt_authn(issuer.jwks))
    yield request.param, envoy
    envoy.stop()


def client(envoy: Envoy, mode: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(envoy.url, http_client=http), mode=mode, cache=None)


def names(tools) -> list[str]:
    return [t["name"] if isinstance(t, dict) else t.name for t in tools]


def decisions(envoy: Envoy, since: int) -> list[str]:
    """The `toolsift` field of the access log lines written after byte `since` of Envoy's log."""
    time.sleep(0.3)
    out = []
    for line in envoy.log.read_text()[since:].splitlines():
        if line.startswith("{") and '"toolsift"' in line:
            decision = json.loads(line)["toolsift"]
            if decision:
                out.append(decision)
    return out


def log_size(envoy: Envoy) -> int:
    return len(envoy.log.read_text())


@pytest.mark.parametrize("mode", MODES)
def test_each_group_lists_and_finds_only_its_tools(gateway, server, issuer, mode):
    denied, envoy = gateway
    since = log_size(envoy)

    async def main(groups):
        async with client(envoy, mode, issuer.token(groups)) as c:
            listed = names((await c.list_tools()).tools)
            stocks = await c.call_tool("find_tools", {"query": "stock price cashflow of a company", "limit": 10})
            packages = await c.call_tool("find_tools", {"query": "npm package latest version deprecated", "limit": 10})
            return listed, names(stocks.structured_content["tools"]), names(packages.structured_content["tools"])

    listed, stocks, packages = run(main(["finance"]))
    assert listed == ["find_tools", "call_tool", "get_current_stock_price"]
    assert stocks and all(n.startswith("get_") for n in stocks), stocks
    assert "get_cashflow" not in stocks, "declared destructive"
    assert packages == [] or all(n.startswith("get_") for n in packages), packages
    listed, stocks, packages = run(main(["dev"]))
    assert listed == ["find_tools", "call_tool", "npmLatest"]
    assert all(n.startswith("npm") for n in stocks + packages), stocks + packages
    assert packages and "npmDeprecated" not in packages, packages
    logged = decisions(envoy, since)
    assert any(d.startswith("mcp=tools/list kept=1 total=250 denied=") for d in logged), logged
    assert any(d.startswith("mcp=find_tools found=get_") and " total=250 denied=" in d for d in logged), logged
    assert envoy.stat("toolsift.access.denied.mcp_tools") > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["direct", "call_tool"])
def test_a_denied_call_never_reaches_the_server(gateway, server, issuer, mode, how):
    denied, envoy = gateway
    server.reset()
    refused = envoy.stat("toolsift.access.denied.mcp_call")
    since = log_size(envoy)

    async def attempt(c, tool, arguments):
        with pytest.raises(MCPError) as error:
            if how == "direct":
                await c.call_tool(tool, arguments)
            else:
                await c.call_tool("call_tool", {"name": tool, "arguments": arguments})
        return error.value

    async def main():
        async with client(envoy, mode, issuer.token(["finance"])) as c:
            errors = [
                await attempt(c, "npmLatest", {"packages": ["react"]}),  # dev's
                await attempt(c, "npmDeprecated", {"packages": ["request"]}),  # no one's
                await attempt(c, "get_cashflow", {"symbol": "AAPL"}),  # destructive
                await attempt(c, "get_dividends", {"symbol": "TSLA"}),  # not this symbol
            ]
            allowed = await c.call_tool("get_dividends", {"symbol": "MSFT"})
            return errors, allowed

    errors, allowed = run(main())
    assert server.calls() == [{"tool": "get_dividends", "arguments": {"symbol": "MSFT"}}]
    assert allowed.structured_content["tool"] == "get_dividends"
    tools, argument = errors[:3], errors[3]
    if denied == "hidden":
        for error, tool in zip(tools, ["npmLatest", "npmDeprecated", "get_cashflow"]):
            assert error.code == -32602
            assert error.message.startswith(f"Unknown tool: {tool}. Search this server's tools with find_tools")
        assert argument.code == -32602
        assert argument.message == 'Invalid arguments for tool get_dividends: `symbol` may not be "TSLA".'
    else:
        assert [e.code for e in errors] == [-32003] * 4
        assert errors[0].message == "toolsift: access denied: tool `npmLatest`: not allowed for this caller"
        assert errors[1].message == "toolsift: access denied: tool `npmDeprecated`: denied by access rule 2 (`npmDeprecated`)"
        assert errors[2].message == "toolsift: access denied: tool `get_cashflow`: access rule 2 denies tools annotated destructiveHint"
        assert "`symbol` may not be \"TSLA\" (access rule 0)" in argument.message
    assert envoy.stat("toolsift.access.denied.mcp_call") == refused + 4
    logged = decisions(envoy, since)
    assert "mcp=refused tool=npmLatest reason=access" in logged, logged
    assert "mcp=refused tool=get_dividends reason=arguments" in logged, logged


@pytest.mark.parametrize("mode", MODES)
def test_a_denied_call_is_refused_with_403_on_the_new_revision(gateway, server, issuer, mode):
    """The statuses, as a client without the SDK sees them."""
    denied, envoy = gateway
    server.reset()
    headers = http_headers(issuer.token(["finance"]))
    if mode != "legacy":
        headers.update({"mcp-protocol-version": mode, "mcp-method": "tools/call", "mcp-name": "npmLatest"})
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "npmLatest", "arguments": {"packages": ["react"]}}}
    if mode == "legacy":
        # A session first: the gateway reads the catalog with it.
        status, answer, session = post(envoy, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, headers)
        assert status == 200 and session, answer
        headers.update({"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"})
    status, answer, _ = post(envoy, body, headers)
    expected = {("hidden", "legacy"): 200, ("refused", "legacy"): 200, ("hidden", "2026-07-28"): 400, ("refused", "2026-07-28"): 403}
    assert status == expected[(denied, mode)]
    assert answer["id"] == 3
    assert answer["error"]["code"] == (-32602 if denied == "hidden" else -32003)
    assert "find_tools" in answer["error"]["message"] if denied == "hidden" else "access denied" in answer["error"]["message"]
    assert server.calls() == []


def http_headers(token: str | None) -> dict[str, str]:
    """A raw client's headers, with `token` as its bearer token."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def post(envoy: Envoy, body, headers: dict[str, str], method: str = "POST") -> tuple[int, dict | None, str | None]:
    """POSTs `body` (bytes, or JSON to write) to the gateway: the status, the JSON-RPC answer
    (the first message of an event stream; `None` when not JSON) and the session id the server
    gave, if any."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(envoy.url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            text, status, session = r.read().decode(), r.status, r.headers.get("mcp-session-id")
    except urllib.error.HTTPError as e:
        text, status, session = e.read().decode(), e.code, None
    if text.startswith("event:") or text.startswith("data:"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    try:
        return status, json.loads(text), session
    except json.JSONDecodeError:
        return status, None, session


@pytest.mark.parametrize("mode", MODES)
def test_two_tenants_with_the_same_catalog_get_only_their_own_answers(gateway, server, issuer, mode):
    """The same server, the same questions: what each tenant gets depends on its own rules,
    whoever asked first, and a tenant's catalog fetch is never another's (the server's lists
    are private on the legacy revision, and jwt_authn keeps the token from the server, so only
    the caller's identity tells the tenants apart)."""
    denied, envoy = gateway
    queries = ["latest version of an npm package", "dividends and news of a company", "search the web"]

    async def answers(groups, subject):
        async with client(envoy, mode, issuer.token(groups, subject)) as c:
            listed = names((await c.list_tools()).tools)
            found = []
            for q in queries:
                result = await c.call_tool("find_tools", {"query": q, "limit": 5})
                found.append(names(result.structured_content["tools"]))
            return listed, found

    # Fresh identities (a group no rule names makes each its own), so nothing is cached yet.
    finance = ["finance", f"tenant-{uuid.uuid4().hex}"]
    dev = ["dev", f"tenant-{uuid.uuid4().hex}"]
    server.reset()
    first_finance = run(answers(finance, "alice"))
    fetched = server.counts()["lists"]
    first_dev = run(answers(dev, "bob"))
    if mode == "legacy":
        assert fetched > 0
        assert server.counts()["lists"] > fetched, "dev's catalog is fetched for dev"
        fetched = server.counts()["lists"]
    again_finance = run(answers(finance, "carol"))
    again_dev = run(answers(dev, "dave"))
    if mode == "legacy":
        assert server.counts()["lists"] == fetched, "each tenant's own catalog, cached"
    assert first_finance == again_finance
    assert first_dev == again_dev
    assert all(n.startswith("get_") for found in first_finance[1] for n in found), first_finance
    assert all(n.startswith("npm") for found in first_dev[1] for n in found), first_dev
    assert server.calls() == []


@pytest.mark.parametrize("mode", MODES)
def test_no_token_is_a_clear_denial(gateway, server, issuer, mode):
    denied, envoy = gateway
    server.reset()
    before = server.counts()["lists"]
    refused = envoy.stat("toolsift.access.denied.mcp_request")

    async def main():
        async with client(envoy, mode, None) as c:
            return await c.list_tools()

    with pytest.raises(BaseException) as error:
        run(main())
    denial = only_mcp_error(error.value)
    assert denial.code == -32003
    assert denial.message == "toolsift: access denied: the request carries no caller identity"
    assert envoy.stat("toolsift.access.denied.mcp_request") > refused
    assert server.counts()["lists"] == before and server.calls() == []
    # Raw: 403 with a JSON-RPC error, on either revision.
    status, answer, _ = post(envoy, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, http_headers(None))
    assert status == 403
    assert answer["error"] == {"code": -32003, "message": "toolsift: access denied: the request carries no caller identity"}
    # A token jwt_authn cannot verify never reaches toolsift: Envoy answers 401.
    forged = Issuer().token(["finance"])
    status, _, _ = post(envoy, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, http_headers(forged))
    assert status == 401


def only_mcp_error(error: BaseException) -> MCPError:
    """The one MCPError in what the SDK raised (its task groups wrap it)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return error


def test_a_batch_holding_tools_requests_is_refused(gateway, server, issuer):
    denied, envoy = gateway
    server.reset()
    headers = {**http_headers(issuer.token(["finance"])), "mcp-protocol-version": "2026-07-28"}
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "npmLatest", "arguments": {"packages": ["x"]}}},
    ]
    status, answer, _ = post(envoy, batch, headers)
    assert status == 400 and answer["error"]["code"] == -32600, answer
    assert answer["error"]["message"].startswith("toolsift: a batch holding tools/list or tools/call"), answer
    # A repeated member, read as the server would read it (the last one), is never passed.
    smuggled = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_dividends","name":"npmLatest",'
        b'"arguments":{"packages":["react"]},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
    )
    headers.update({"mcp-method": "tools/call", "mcp-name": "npmLatest"})
    status, answer, _ = post(envoy, smuggled, headers)
    assert status == 400
    assert answer["error"]["message"].startswith("toolsift: this message cannot be checked"), answer
    assert server.calls() == [] and server.counts()["lists"] == 0
    # Another method with the body of a denied call: the gateway answers it, not the server.
    call = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "npmLatest", "arguments": {"packages": ["react"]}}}
    status, answer, _ = post(envoy, call, headers, method="PUT")
    assert answer["error"]["code"] == (-32602 if denied == "hidden" else -32003), (status, answer)
    assert server.calls() == []


@pytest.fixture(scope="module")
def slow(issuer):
    """A server that answers its catalog 3 s late, and a gateway that waits 1 s for it."""
    server = McpServer("--count", "250", "--list-delay-ms", "3000", "--annotate", "get_cashflow:destructiveHint")
    config = {"mcp": {"paths": ["/mcp"], "timeout_ms": 1000}, "always_include": ALWAYS, "access": access("refused")}
    envoy = Envoy("envoy-mcp.yaml", config, {18200: server.port}, edit=with_jwt_authn(issuer.jwks))
    yield server, envoy
    envoy.stop()
    server.stop()


@pytest.mark.parametrize("mode", MODES)
def test_without_the_catalog_nothing_passes_ungoverned(slow, issuer, mode):
    """Without access rules the server's list would pass through whole; under them, the list is
    refused, and a call whose rules read annotations the gateway could not see is refused too."""
    server, envoy = slow
    server.reset()

    async def main():
        async with client(envoy, mode, issuer.token(["finance"])) as c:
            out = {}
            for what, call in [
                ("list", lambda: c.list_tools()),
                ("allowed_by_name", lambda: c.call_tool("get_dividends", {"symbol": "AAPL"})),
                ("denied_by_name", lambda: c.call_tool("npmLatest", {"packages": ["react"]})),
            ]:
                try:
                    out[what] = await call()
                except MCPError as e:
                    out[what] = e
            return out

    out = run(main())
    assert isinstance(out["list"], MCPError) and out["list"].code == -32603, out["list"]
    assert "cannot read the server's tools" in out["list"].message
    # get_dividends is allowed by name, but a rule denies destructive tools, and the
    # gateway could not read whether it is one.
    assert isinstance(out["allowed_by_name"], MCPError), out["allowed_by_name"]
    assert "cannot read the server's tools" in out["allowed_by_name"].message
    assert isinstance(out["denied_by_name"], MCPError) and out["denied_by_name"].code == -32003
    assert server.calls() == []


def test_a_callers_find_tools_scores_are_those_of_a_server_with_only_its_tools(server, issuer):
    """`find_tools` under access rules ranks by the statistics of the caller's tools alone: for
    group `finance` (the `get_*` tools but the destructive `get_cashflow`), the tools found and
    their scores are those of a gateway whose server only ever listed those tools."""
    governed = Envoy(
        "envoy-mcp.yaml",
        {"mcp": {"paths": ["/mcp"]}, "access": access("hidden")},
        {18200: server.port},
        edit=with_jwt_authn(issuer.jwks),
    )
    share = McpServer("--count", "250", "--only", "get_*", "--without", "get_cashflow")
    alone = Envoy("envoy-mcp.yaml", {"mcp": {"paths": ["/mcp"]}}, {18200: share.port})
    try:

        async def find(envoy: Envoy, token: str | None) -> list[tuple[str, float]]:
            async with client(envoy, "legacy", token) as c:
                found = await c.call_tool(
                    "find_tools", {"query": "stock price history and dividends of a company", "limit": 10}
                )
                return [(t["name"], t["score"]) for t in found.structured_content["tools"]]

        seen = run(find(governed, issuer.token(["finance"])))
        assert len(seen) > 3 and all(name.startswith("get_") for name, _ in seen), seen
        assert seen == run(find(alone, None))
    finally:
        alone.stop()
        share.stop()
        governed.stop()
