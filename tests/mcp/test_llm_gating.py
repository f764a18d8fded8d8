"""`gating.mcp` for LLM requests: before the tools of an OpenAI Chat request (60 tools, from
examples/chat-60-tools.json) are chosen, toolsift asks an MCP server's `_tool_gating` (an
SDK-built server, tests/mcp/server.py, on the 2026-07-28 revision) about the latest user text.
The LLM is the demo upstream, which rejects what a provider rejects (a `tool_choice` naming a
tool it was not sent) and reports the tools it received."""

from __future__ import annotations

import copy
import json
import subprocess
import urllib.request

import pytest
from conftest import BIN_DIR, REPO, SCRATCH, Envoy, McpServer, free_port, with_cluster

RULES = [
    {"match": "crashing", "exclude": ["update_salesforce_opportunity", "send_email"]},
    {"match": "^/logs\\b", "claim": "get_pod_logs"},
]
REQUEST = json.loads((REPO / "examples/chat-60-tools.json").read_text())


class DemoUpstream:
    """The demo upstream on a port it picks itself (it names it on stderr)."""

    def __init__(self):
        binary = BIN_DIR / "toolsift-demo-upstream"
        assert binary.exists(), f"{binary} not found: run `make mcp-test` (make test does it)"
        self.proc = subprocess.Popen([str(binary), "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # "demo upstream listening on 127.0.0.1:PORT", once it listens.
        line = self.proc.stderr.readline().decode()
        assert "listening on" in line, f"the demo upstream did not start: {line!r}"
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


@pytest.fixture(scope="module")
def peers():
    rules = SCRATCH / "gating-llm.json"
    SCRATCH.mkdir(parents=True, exist_ok=True)
    rules.write_text(json.dumps(RULES))
    server = McpServer("--count", "10", "--gating", str(rules))
    upstream = DemoUpstream()
    yield server, upstream
    upstream.stop()
    server.stop()


def gateway(peers, claim: str) -> Envoy:
    server, upstream = peers
    config = {"debug": True, "gating": {"mcp": {"cluster": "mcp", "authority": "localhost"}, "claim": claim}}
    return Envoy("envoy.yaml", config, {18000: upstream.port}, edit=with_cluster("mcp", server.port))


def post(envoy: Envoy, question: str) -> tuple[int, dict, dict]:
    body = copy.deepcopy(REQUEST)
    body["messages"][-1]["content"] = question
    req = urllib.request.Request(f"http://127.0.0.1:{envoy.port}/v1/chat/completions",
                                 data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, dict(r.headers), json.load(r)


def test_excluded_tools_leave_the_request(peers):
    server, upstream = peers
    envoy = gateway(peers, "tool_choice")
    try:
        before = server.counts()["gating"]
        status, headers, answer = post(envoy, REQUEST["messages"][-1]["content"])
        assert status == 200
        received = answer["toolsift_demo"]["tools"]
        assert len(received) == 5
        assert "update_salesforce_opportunity" not in received and "get_pods" in received, received
        assert headers["x-toolsift"] == "kept=5 total=58 gating=excluded:2", headers["x-toolsift"]
        assert server.counts()["gating"] == before + 1
        assert envoy.stat("toolsift.mcp.gating.calls") == 1
    finally:
        envoy.stop()


def test_a_claim_names_the_tool_in_tool_choice(peers):
    server, upstream = peers
    envoy = gateway(peers, "tool_choice")
    try:
        status, headers, answer = post(envoy, "/logs what is the weather in Paris?")
        assert status == 200, answer  # the demo refuses a tool_choice naming a tool it was not sent
        assert "get_pod_logs" in answer["toolsift_demo"]["tools"]
        assert "claimed:get_pod_logs" in headers["x-toolsift"]
    finally:
        envoy.stop()


def test_a_claim_answered_by_the_gateway_never_calls_the_model(peers):
    server, upstream = peers
    envoy = gateway(peers, "answer")
    try:
        answered = lambda: envoy.envoy_stat("cluster.llm.upstream_rq_completed")  # noqa: E731
        status, headers, answer = post(envoy, "/logs checkout")
        assert status == 200
        call = answer["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_pod_logs"
        assert answer["choices"][0]["finish_reason"] == "tool_calls"
        # The request's headers went upstream (nothing is held), its body never did: no answer.
        assert answered() == 0
        assert "claimed:get_pod_logs" in headers["x-toolsift"]
        assert envoy.stat("toolsift.mcp.gating.answered") == 1
        # No claim: the model answers as usual.
        status, _, answer = post(envoy, "what is the weather in Paris?")
        assert "toolsift_demo" in answer
        assert answered() == 1
    finally:
        envoy.stop()


def test_an_unreachable_gating_server_changes_nothing(peers):
    server, upstream = peers
    config = {"gating": {"mcp": {"cluster": "mcp", "authority": "localhost", "timeout_ms": 200}}}
    envoy = Envoy("envoy.yaml", config, {18000: upstream.port}, edit=with_cluster("mcp", free_port()))
    try:
        status, headers, answer = post(envoy, REQUEST["messages"][-1]["content"])
        assert status == 200
        assert len(answer["toolsift_demo"]["tools"]) == 5
        assert "gating" not in headers["x-toolsift"]
        assert envoy.stat("toolsift.mcp.gating.failed") == 1
    finally:
        envoy.stop()
