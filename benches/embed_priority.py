#!/usr/bin/env python3
"""A query's latency at toolsift-embed while a backfill of a large catalog runs (`make
bench-embed-priority`, docs/BENCHMARKS.md).

Each server binary given (the one before the priority queue, `--old`, and the current one,
`--new`) is started in turn on a free port, `--rounds` times, alternating, on the same machine
in the same run. Against each:

1. quiet: `--quiet` queries one after another, nothing else running: the floor.
2. under backfill: the filter's background fetch of a new catalog, played as the filter sends
   it: `--count` tool texts of the shared toolbench catalog in calls of `--batch` (the
   filter's `max_batch`), `--concurrent` calls in flight at once (2 Envoy workers x
   `max_background_calls` 2), each marked `x-toolsift-priority: background`; meanwhile one
   client sends a query (one text, a toolbench question, as a request's call carries) every
   `--period-ms` and times each one until the backfill is done.

It prints one row per server and round, then the medians of the rounds' p50 and p99. The old
server ignores the header: it serves calls in the order they came.

Standard library only; run it with the project's venv python or any python3.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = os.path.join(REPO, "..", "shared", "datasets", "toolbench")


def tool_text(line):
    """The text the filter embeds for a tool (src/embeddings.rs `tool_text`), near enough:
    name, description, then the parameters' names and descriptions."""
    f = json.loads(line)["function"]
    text = f"{f['name']}: {f.get('description', '')}"
    props = (f.get("parameters") or {}).get("properties") or {}
    params = ", ".join(
        f"{k}: {v.get('description', '')}".rstrip(": ") if isinstance(v, dict) else k
        for k, v in props.items()
    )
    if params:
        text += " " + params
    return text[:2048]


def load(count):
    with open(os.path.join(DATASET, "tools.jsonl"), encoding="utf-8") as f:
        tools = [tool_text(line) for line in f if line.strip()][:count]
    with open(os.path.join(DATASET, "queries.jsonl"), encoding="utf-8") as f:
        queries = [json.loads(line)["query"] for line in f if line.strip()]
    return tools, queries


class Server:
    """A toolsift-embed process on a free port, stopped on exit."""

    def __init__(self, binary):
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stderr.readline().strip()
        prefix = "embeddings server listening on "
        if not line.startswith(prefix):
            self.stop()
            sys.exit(f"{binary} did not start: {line}")
        self.port = int(line.rsplit(":", 1)[1])

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
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def embed(self, inputs, background=False):
        body = json.dumps({"model": "all-MiniLM-L6-v2", "input": inputs})
        headers = {"content-type": "application/json"}
        if background:
            headers["x-toolsift-priority"] = "background"
        started = time.perf_counter()
        self.conn.request("POST", "/v1/embeddings", body=body, headers=headers)
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


def measure(binary, tools, queries, args):
    with Server(binary) as server:
        client = Client(server.port)
        # Warm the model and the connection.
        for q in queries[:5]:
            client.embed([q])
        quiet = [client.embed([q]) for q in queries[5 : 5 + args.quiet]]

        batches = [tools[i : i + args.batch] for i in range(0, len(tools), args.batch)]
        lock = threading.Lock()
        done = threading.Event()

        def backfill():
            c = Client(server.port)
            while True:
                with lock:
                    if not batches:
                        return
                    batch = batches.pop(0)
                c.embed(batch, background=True)

        started = time.perf_counter()
        workers = [threading.Thread(target=backfill) for _ in range(args.concurrent)]
        for w in workers:
            w.start()

        def watch():
            for w in workers:
                w.join()
            done.set()

        threading.Thread(target=watch).start()
        loaded = []
        next_query = 5 + args.quiet
        while not done.is_set():
            tick = time.perf_counter()
            q = queries[next_query % len(queries)]
            next_query += 1
            loaded.append(client.embed([q]))
            pause = args.period_ms / 1000.0 - (time.perf_counter() - tick)
            if pause > 0:
                done.wait(pause)
        backfill_s = time.perf_counter() - started
    return quiet, loaded, backfill_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the server binary before the change")
    parser.add_argument("--new", required=True, help="the server binary after it")
    parser.add_argument("--count", type=int, default=2000, help="tool texts backfilled")
    parser.add_argument("--batch", type=int, default=32, help="texts per background call")
    parser.add_argument("--concurrent", type=int, default=4, help="background calls in flight")
    parser.add_argument("--period-ms", type=float, default=50.0, help="time between queries")
    parser.add_argument("--quiet", type=int, default=50, help="queries with nothing else running")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each server, alternating")
    args = parser.parse_args()

    tools, queries = load(args.count)
    print(
        f"{len(tools)} toolbench tool texts in background calls of {args.batch}, "
        f"{args.concurrent} in flight; a one-text query every {args.period_ms:g} ms; "
        f"{os.cpu_count()} CPUs"
    )
    print(
        "| server | round | quiet p50 (ms) | quiet p99 (ms) | under backfill: queries "
        "| p50 (ms) | p99 (ms) | max (ms) | backfill (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = {"old": [], "new": []}
    for round_ in range(1, args.rounds + 1):
        for name in ("old", "new"):
            binary = getattr(args, name)
            quiet, loaded, backfill_s = measure(binary, tools, queries, args)
            row = (
                percentile(quiet, 50),
                percentile(quiet, 99),
                len(loaded),
                percentile(loaded, 50),
                percentile(loaded, 99),
                max(loaded),
                backfill_s,
            )
            rows[name].append(row)
            print(
                f"| {name} | {round_} | {row[0]:.1f} | {row[1]:.1f} | {row[2]} | {row[3]:.1f} "
                f"| {row[4]:.1f} | {row[5]:.1f} | {row[6]:.1f} |",
                flush=True,
            )
    print()
    print("| server | median of rounds: quiet p50 | under backfill p50 | p99 | backfill (s) |")
    print("|---|---|---|---|---|")
    for name in ("old", "new"):
        r = rows[name]
        med = lambda i: statistics.median(x[i] for x in r)  # noqa: E731
        print(f"| {name} | {med(0):.1f} | {med(3):.1f} | {med(4):.1f} | {med(6):.1f} |")


if __name__ == "__main__":
    main()
