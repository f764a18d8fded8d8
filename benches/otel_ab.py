"""What the OpenTelemetry path costs, A/B in one run (`make bench-otel`).

Three variants of the same gateway, each in a fresh Envoy (one worker) in front of the demo
upstream, run in mirrored order (A B C C B A) so that a drift of the machine hits each alike:

  A  envoy.yaml as shipped (the JSON access log on stdout, sent to /dev/null), `gen_ai` off;
  B  the same with `gen_ai: true`: the filter's one more filter-state write alone;
  C  docs/examples/envoy-otel.yaml (`gen_ai: true`, the OpenTelemetry access logger splitting
     the records with CEL, OTLP/gRPC to a receiver started here);
  D  (with ORDER=ABCDDCBA) C without its CEL attributes: the logger sending the record whole,
     to tell the export's cost from the splitting's.

Each run sends the same request (the 80 fixture tools, one question) REQUESTS times over one
keep-alive connection after WARMUP, and reads the filter's own time (`toolsift.filter_time_us`,
P50 over the run), the client's latency (median) and Envoy's CPU time per request
(/proc/<pid>/stat, user + system, over the measured requests).
"""

import http.client
import json
import os
import re
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/sdk"))
import conftest  # noqa: E402  (the SDK suite's renderer and ports)

REQUESTS = int(os.environ.get("REQUESTS", "2000"))
WARMUP = 200
TICKS = os.sysconf("SC_CLK_TCK")


class Receiver(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self):
        self.records = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request, context):
        self.records += sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs)
        return logs_service_pb2.ExportLogsServiceResponse()


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def p50_filter_time(admin):
    """The run's P50 of `toolsift.filter_time_us`, once Envoy's stats flush (every 5 s) has
    published it."""
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        with urllib_get(admin, "/stats?filter=toolsift\\.filter_time_us$&format=json") as text:
            for stat in json.loads(text)["stats"]:
                histograms = stat.get("histograms")
                if not histograms or not histograms.get("computed_quantiles"):
                    continue
                at = histograms["supported_quantiles"].index(50.0)
                p50 = histograms["computed_quantiles"][0]["values"][at]["cumulative"]
                if p50 is not None:
                    return float(p50)
        time.sleep(0.5)
    return float("nan")


class urllib_get:
    def __init__(self, port, path):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.conn.request("GET", path)

    def __enter__(self):
        return self.conn.getresponse().read().decode()

    def __exit__(self, *_):
        self.conn.close()


def run(variant, upstream_port, receiver, scratch):
    source, config = {
        "A": ("envoy.yaml", {"top_k": 5, "min_tools": 20}),
        "B": ("envoy.yaml", {"top_k": 5, "min_tools": 20, "gen_ai": True}),
        "C": ("docs/examples/envoy-otel.yaml", {"top_k": 5, "min_tools": 20, "gen_ai": True}),
        "D": ("docs/examples/envoy-otel.yaml", {"top_k": 5, "min_tools": 20, "gen_ai": True}),
    }[variant]
    port, admin = conftest.free_port(), conftest.free_port()
    yaml = scratch / f"envoy-{variant}.yaml"
    text = conftest.render_envoy_yaml(config, port, admin, upstream_port, source, {4317: receiver.port})
    if variant == "D":
        lines = text.splitlines()
        keep = [i for i, line in enumerate(lines)
                if "%CEL(" not in line and not (i + 1 < len(lines) and "%CEL(" in lines[i + 1])]
        text = "\n".join(lines[i] for i in keep) + "\n"
    yaml.write_text(text)
    envoy = subprocess.Popen([conftest.ENVOY, "-c", yaml, "--concurrency", "1", "--disable-hot-restart",
                              "--log-level", "error"], cwd=conftest.REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib_get(admin, "/ready") as text:
                    if "LIVE" in text:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and envoy.poll() is None, "Envoy did not start"
            time.sleep(0.05)
        body = json.dumps({"model": "gpt-4o", "tools": conftest.catalog(),
                           "messages": [{"role": "user", "content": conftest.QUESTION}]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        latencies, cpu_before = [], None
        for i in range(WARMUP + REQUESTS):
            if i == WARMUP:
                cpu_before = cpu_seconds(envoy.pid)
            start = time.perf_counter()
            conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200 and response.getheader("x-toolsift") == "kept=5 total=80"
            if i >= WARMUP:
                latencies.append(time.perf_counter() - start)
        cpu = cpu_seconds(envoy.pid) - cpu_before
        conn.close()
        latencies.sort()
        return {
            "filter_p50_us": p50_filter_time(admin),
            "latency_p50_us": latencies[len(latencies) // 2] * 1e6,
            "envoy_cpu_us_per_request": cpu / REQUESTS * 1e6,
        }
    finally:
        envoy.kill()
        envoy.wait()


def main():
    scratch = Path(os.environ.get("SCRATCH", "/tmp/toolsift-bench-otel"))
    scratch.mkdir(parents=True, exist_ok=True)
    upstream = subprocess.Popen([conftest.UPSTREAM, "--listen", "127.0.0.1:0"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    upstream_port = int(upstream.stderr.readline().decode().rsplit(":", 1)[1])
    receiver = Receiver()
    order = os.environ.get("ORDER", "ABCCBA")
    results = {v: [] for v in sorted(set(order))}
    try:
        for variant in order:
            result = run(variant, upstream_port, receiver, scratch)
            results[variant].append(result)
            print(variant, json.dumps({k: round(v, 1) for k, v in result.items()}), flush=True)
    finally:
        upstream.kill()
        receiver.server.stop(0)
    sent = sum(order.count(v) for v in "CD") * (WARMUP + REQUESTS)
    print(f"OTLP records received: {receiver.records} (variants C and D sent {sent})")
    for key in ("filter_p50_us", "latency_p50_us", "envoy_cpu_us_per_request"):
        means = {v: sum(r[key] for r in rs) / len(rs) for v, rs in results.items()}
        print(f"{key}: " + "  ".join(f"{v} {m:.1f} ({m / means['A']:.3f}x)" for v, m in means.items()))


if __name__ == "__main__":
    main()
