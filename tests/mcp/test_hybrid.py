"""`ranking: hybrid` over MCP: find_tools ranked with the BM25, exact, parameter-key and vector
channels fused, the vectors from toolsift-embed (all-MiniLM-L6-v2, `make embed`) through an
Envoy cluster, as for LLM requests."""

from __future__ import annotations

import subprocess

import pytest
from conftest import REPO, Envoy, McpServer, run
from mcp import Client


@pytest.fixture(scope="module")
def gateway():
    binary = REPO / "target/embed/release/toolsift-embed"
    assert binary.exists(), f"{binary} not found: run `make embed` (make test does it)"
    embed = subprocess.Popen([str(binary), "--listen", "127.0.0.1:0", "--model", "all-MiniLM-L6-v2"], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = embed.stderr.readline()
    assert line.startswith("embeddings server listening on "), line
    embed_port = int(line.strip().rsplit(":", 1)[1])
    server = McpServer("--count", "60")

    def with_embeddings(yaml: str, ports: dict) -> str:
        return yaml.rstrip("\n") + f"""
  - name: embeddings
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: embeddings
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {embed_port} }}
"""

    config = {
        "mcp": {"paths": ["/mcp"]},
        "ranking": "hybrid",
        # Generous: the machine is shared, and the first search embeds the whole catalog.
        "embeddings": {"cluster": "embeddings", "model": "all-MiniLM-L6-v2", "timeout_ms": 20000, "max_batch": 64},
    }
    envoy = Envoy("envoy-mcp.yaml", config, {18200: server.port}, edit=with_embeddings)
    yield server, envoy
    envoy.stop()
    server.stop()
    embed.terminate()
    embed.wait()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_find_tools_fuses_keyword_and_vector_channels(gateway, mode):
    server, envoy = gateway

    async def main():
        async with Client(envoy.url, mode=mode) as client:
            listed = await client.list_tools()
            result = await client.call_tool("find_tools", {"query": "how much is Apple worth on the market today", "limit": 3})
            return listed.tools[0].description, result.structured_content["tools"]

    description, found = run(main())
    assert "embeddings" in description
    assert found, "found nothing"
    assert any("vector" in t["matched"] for t in found), found
    assert envoy.stat("toolsift.ranking.hybrid") >= 1
    assert envoy.stat("toolsift.embeddings.calls") >= 1
