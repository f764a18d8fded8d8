"""Access rules on what a request hands the provider besides its function tools, judged by the
official SDKs through the real gateway: remote MCP connectors (Anthropic `mcp_servers` through
the beta client, OpenAI Responses `mcp` tools) and Responses `namespace` functions. What the
demo upstream received is read from its log: a denied connector or function never arrives, an
allowed connector arrives narrowed as the rules say, and every other byte is the client's.

The caller is the header `x-group: dev team`, read whole (`"split": "none"`): split at the
space it would be `dev` and `team`, whom no rule names, and every request would be refused."""

import urllib.error
import urllib.request

import anthropic
import openai
import pytest

import conftest
from conftest import QUESTION, WANT, Gateway, Recorder, functions

RULES = [
    {"when": ["dev team"], "allow": [
        "get_*", "search_*", "mcp:github", "mcp_url:*.githubcopilot.com",
        "mcp:github/search_repos", "mcp:github/get_issue", "crm.get_*", "crm.list_*"]},
    {"when": ["*"], "deny": ["*delete*", "mcp_url:evil.example"]},
]


def access(mode="filter", denied="hidden", unknown_paths="deny"):
    return {
        "mode": mode,
        "debug": True,
        "access": {
            "identity": [{"header": "x-group", "split": "none"}],
            "default": "deny",
            "rules": RULES,
            "denied": denied,
            "unknown_paths": unknown_paths,
        },
    }


CALLER = {"x-group": "dev team", "x-demo-model": "scripted", "x-demo-want": WANT}

GITHUB = {"type": "mcp", "server_label": "github", "server_url": "https://api.githubcopilot.com/mcp/",
          "require_approval": "never"}
GITHUB_LISTED = {"type": "mcp", "server_label": "github", "server_url": "https://x.githubcopilot.com/mcp",
                 "allowed_tools": {"tool_names": ["get_issue", "delete_repo"], "read_only": True}}
EVIL = {"type": "mcp", "server_label": "github", "server_url": "https://evil.example/mcp"}
GITLAB = {"type": "mcp", "server_label": "gitlab", "server_url": "https://api.githubcopilot.com/mcp/"}
CRM = {"type": "namespace", "name": "crm", "description": "The CRM.", "tools": [
    {"type": "function", "name": "get_customer", "description": "A customer by id.",
     "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    {"type": "function", "name": "delete_customer", "description": "Delete a customer.",
     "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}},
    {"type": "function", "name": "list_orders", "description": "A customer's orders."},
    {"type": "function", "name": "refund", "description": "Refund an order."}]}
BILLING = {"type": "namespace", "name": "billing", "description": "Billing.", "tools": [
    {"type": "function", "name": "refund", "description": "Refund an order."}]}


@pytest.fixture(scope="module")
def filter_access(tmp_path_factory):
    gateway = Gateway(access(), tmp_path_factory.mktemp("connectors-filter"))
    yield gateway
    gateway.close()


@pytest.fixture(scope="module")
def search_access(tmp_path_factory):
    gateway = Gateway(access("search"), tmp_path_factory.mktemp("connectors-search"))
    yield gateway
    gateway.close()


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    config = access(denied="refused", unknown_paths="pass")
    gateway = Gateway(config, tmp_path_factory.mktemp("connectors-refused"))
    yield gateway
    gateway.close()


def anthropic_client(gw):
    recorder = Recorder()
    http_client = anthropic.DefaultHttpxClient(event_hooks={"response": [recorder.hook]})
    sdk = anthropic.Anthropic(api_key="sk-test", base_url=gw.url, max_retries=0, timeout=60,
                              http_client=http_client, default_headers=CALLER)
    return sdk, recorder


def last_received(gw):
    """The body of the last request the demo upstream received."""
    log = gw.upstream_log()
    assert log, "nothing reached the upstream"
    return log[-1]["body"]


def responses(sdk, streamed, tools):
    args = dict(model="gpt-5", input=QUESTION, tools=tools)
    if streamed:
        with sdk.responses.stream(**args) as stream:
            return stream.get_final_response()
    return sdk.responses.create(**args)


def function_tools():
    return [{"type": "function", **f} for f in functions()]


def denied(recorder):
    """`denied=N` of the last answer's `x-toolsift`."""
    header = recorder.header("x-toolsift")
    return int(header.split("denied=")[1].split()[0])


@pytest.mark.parametrize("streamed", [False, True])
def test_responses_connectors_leave_or_go_narrowed(filter_access, streamed):
    sdk, seen = conftest.openai_client(filter_access, CALLER)
    tools = function_tools() + [GITHUB, EVIL, GITLAB, GITHUB_LISTED]
    response = responses(sdk, streamed, tools)
    assert [i.name for i in response.output if i.type == "function_call"] == [WANT]
    sent = last_received(filter_access)
    connectors = [t for t in sent["tools"] if t.get("type") == "mcp"]
    # The denied ones (its URL, its label) are gone; the allowed ones carry only the tools the
    # rules allow: the exact names where the client listed none, the client's list filtered
    # (its `read_only` kept) where it did.
    assert connectors == [
        dict(GITHUB, allowed_tools=["search_repos", "get_issue"]),
        dict(GITHUB_LISTED, allowed_tools={"tool_names": ["get_issue"], "read_only": True}),
    ]
    # Two connectors denied beside the function tools.
    with_connectors = denied(seen)
    responses(sdk, streamed, function_tools())
    assert with_connectors == denied(seen) + 2


@pytest.mark.parametrize("streamed", [False, True])
def test_anthropic_mcp_servers_leave_or_go_narrowed(filter_access, streamed):
    sdk, seen = anthropic_client(filter_access)
    servers = [
        {"type": "url", "url": "https://evil.example/sse", "name": "github"},
        {"type": "url", "url": "https://api.githubcopilot.com/mcp", "name": "github",
         "authorization_token": "ghp-secret"},
        {"type": "url", "url": "https://api.githubcopilot.com/mcp", "name": "gitlab"},
        {"type": "url", "url": "https://api.githubcopilot.com/mcp", "name": "github",
         "tool_configuration": {"enabled": True, "allowed_tools": ["delete_repo", "search_repos"]}},
    ]
    tools = [{"name": f["name"], "description": f.get("description", ""),
              "input_schema": f.get("parameters", {"type": "object"})} for f in functions()]
    args = dict(model="claude-opus-4-7", max_tokens=256, betas=["mcp-client-2025-04-04"],
                messages=[{"role": "user", "content": QUESTION}], tools=tools, mcp_servers=servers)
    if streamed:
        with sdk.beta.messages.stream(**args) as stream:
            message = stream.get_final_message()
    else:
        message = sdk.beta.messages.create(**args)
    assert [b.name for b in message.content if b.type == "tool_use"] == [WANT]
    sent = last_received(filter_access)
    assert sent["mcp_servers"] == [
        dict(servers[1], tool_configuration={"allowed_tools": ["search_repos", "get_issue"]}),
        dict(servers[3], tool_configuration={"enabled": True, "allowed_tools": ["search_repos"]}),
    ]
    with_connectors = denied(seen)
    del args["mcp_servers"]
    sdk.beta.messages.create(**args)
    assert with_connectors == denied(seen) + 2


def assert_namespaces_governed(sent):
    spaces = [t for t in sent["tools"] if t.get("type") == "namespace"]
    assert [s["name"] for s in spaces] == ["crm"], "an emptied namespace leaves"
    assert [f["name"] for f in spaces[0]["tools"]] == ["get_customer", "list_orders"]
    assert spaces[0]["tools"][0] == CRM["tools"][0], "a kept function goes as it was"
    names = [t.get("name") for t in sent["tools"] if t.get("type") == "function"]
    assert "delete_file" not in names and WANT in names


@pytest.mark.parametrize("streamed", [False, True])
def test_namespace_functions_governed_in_filter_mode(filter_access, streamed):
    sdk, _ = conftest.openai_client(filter_access, CALLER)
    responses(sdk, streamed, function_tools() + [CRM, BILLING])
    assert_namespaces_governed(last_received(filter_access))


@pytest.mark.parametrize("streamed", [False, True])
def test_namespace_functions_governed_in_search_mode(search_access, streamed):
    sdk, _ = conftest.openai_client(search_access, CALLER)
    responses(sdk, streamed, function_tools() + [CRM, BILLING])
    for entry in search_access.upstream_log():
        assert_namespaces_governed(entry["body"])


def test_a_denied_connector_refuses_the_request_under_refused(refusing):
    sdk, _ = conftest.openai_client(refusing, CALLER)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        responses(sdk, False, function_tools() + [GITHUB, EVIL])
    body = refused.value.body
    assert body["code"] == "access_denied", body
    assert "mcp_url:evil.example" in body["message"], body


def post(gw, path):
    request = urllib.request.Request(f"{gw.url}{path}", data=b'{"model":"m","input":"hi"}',
                                     headers={"content-type": "application/json", **CALLER})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_unknown_paths_are_denied_or_passed_and_counted(filter_access, refusing):
    sdk, _ = conftest.openai_client(filter_access, CALLER)
    with pytest.raises(openai.NotFoundError) as denied:
        sdk.embeddings.create(model="text-embedding-3-small", input="hi")
    assert denied.value.body["code"] == "unknown_path", denied.value.body
    assert filter_access.stat("toolsift.access.unknown_paths") == 1
    # With it off (the default) the path passes ungoverned, counted: the upstream answers.
    status, body = post(refusing, "/v1/embeddings")
    assert b"unknown_path" not in body, body
    assert refusing.stat("toolsift.access.unknown_paths") == 1
    # An LLM path is no unknown path.
    status, _ = post(refusing, "/v1/responses")
    assert status in (200, 403)
    assert refusing.stat("toolsift.access.unknown_paths") == 1
