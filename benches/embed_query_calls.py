#!/usr/bin/env python3
"""How many of a question's sentences to embed (`embeddings.query_sentences`): the recall each
setting gives on the translated questions of tests/data/languages/, and what the filter's call
for a question then costs the embeddings server, for one model of toolsift-embed.

    .venv/bin/python benches/embed_query_calls.py --model e5 --half 0 --sentences 0,1,2,8

1. Starts `toolsift-embed --model MODEL` on a free port, and in front of it a caching proxy:
   each (model, input_type, text) is embedded once for the whole run, so the catalogs' tools
   are embedded once for every setting (the vectors are the server's own).
2. For each setting, runs `benches/languages.py --half H --catalog 200 --json` with hybrid
   ranking (`ranking: hybrid`, defaults otherwise, `query_sentences` the setting) through the
   proxy, and records the calls that carry a question's texts only (every call of a catalog
   after its first: the filter's call for a request whose catalog is embedded).
3. Replays every recorded call to the server directly, one at a time, and times it: what a
   request waits for when its catalog's tools are known.

Prints, per setting: Recall@5 and @10 (the mean over the three datasets) per language, and the
question calls' texts, tokens, latency p50 / p90 / max and the share over 150 ms (the filter's
default `timeout_ms`). Standard library only.
"""

import argparse
import http.client
import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGS = ["en", "es", "de", "fr", "pt", "ja", "zh", "ar"]


class Server:
    """toolsift-embed on a free port."""

    def __init__(self, binary, model):
        self.proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--model", model],
                                     stderr=subprocess.PIPE, text=True, cwd=REPO)
        for line in self.proc.stderr:
            if "listening on" in line:
                self.port = int(line.rsplit(":", 1)[1])
                break
        else:
            sys.exit(f"toolsift-embed did not start: {self.proc.wait()}")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def post(self, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("POST", "/v1/embeddings", body, {"content-type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        if r.status != 200:
            raise RuntimeError(f"embeddings server: {r.status} {data[:200]!r}")
        return json.loads(data)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Proxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def proxy(server, recorded, cache=None):
    """A caching proxy to `server`; calls of question texts only go to `recorded[0]`. `cache`
    (model, input_type, text) → vector, if given, is filled for the caller to read."""
    cache, lock = ({} if cache is None else cache), threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["content-length"])))
            inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
            role = req.get("input_type")
            keys = [(req.get("model"), role, t) for t in inputs]
            with lock:
                missing = [k for k in dict.fromkeys(keys) if k not in cache]
            if missing:
                answer = server.post(json.dumps(dict(req, input=[k[2] for k in missing])))
                with lock:
                    for k, d in zip(missing, sorted(answer["data"], key=lambda d: d["index"])):
                        cache[k] = d["embedding"]
            # The filter sends a question's texts first; a call with no tool text (a tool's
            # text is "name: description …", and a catalog's first call has 200 of them) has
            # at most 1 + 8 inputs.
            if len(inputs) <= 9 and not self.headers.get("x-toolsift-priority"):
                recorded[0].append(req)
            body = json.dumps({"object": "list", "model": req.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": cache[k]}
                for i, k in enumerate(keys)]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = Proxy(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(REPO, "target/embed/release/toolsift-embed"))
    p.add_argument("--toolsift", default=os.path.join(REPO, "target/release/toolsift"))
    p.add_argument("--model", default="e5")
    p.add_argument("--half", type=int, choices=[0, 1], required=True)
    p.add_argument("--sentences", default="0,1,2,8")
    p.add_argument("--datasets", default="seal_tools,toolbench,livemcpbench")
    p.add_argument("--timeout-ms", type=float, default=150.0)
    args = p.parse_args()
    server = Server(args.binary, args.model)
    recorded = [[]]
    httpd = proxy(server, recorded)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/embeddings"
    settings = [int(s) for s in args.sentences.split(",")]
    results, calls = {}, {}
    try:
        for n in settings:
            recorded[0] = []
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump({"ranking": "hybrid", "embeddings": {
                    "cluster": "embeddings", "model": args.model, "query_sentences": n}}, f)
                config = f.name
            started = time.monotonic()
            out = subprocess.run(
                [sys.executable, os.path.join(REPO, "benches/languages.py"), "--half",
                 str(args.half), "--catalog", "200", "--json", "--config", config,
                 "--binary", args.toolsift, "--datasets", args.datasets,
                 "--embeddings-url", url, "--embeddings-model", args.model],
                check=True, capture_output=True, text=True).stdout
            os.unlink(config)
            results[n] = json.loads(out)
            calls[n] = recorded[0]
            print(f"query_sentences {n}: ranked in {time.monotonic() - started:.0f} s, "
                  f"{len(calls[n])} question calls", file=sys.stderr)
        timing = {}
        for n in settings:
            lat, texts, tokens = [], [], []
            for req in calls[n]:
                t0 = time.monotonic()
                answer = server.post(json.dumps(req))
                lat.append(1000 * (time.monotonic() - t0))
                texts.append(len(req["input"]))
                tokens.append(answer.get("usage", {}).get("prompt_tokens", 0))
            timing[n] = (lat, texts, tokens)
    finally:
        httpd.shutdown()
        server.stop()
    datasets = args.datasets.split(",")
    print(f"model {args.model}, half {args.half}: Recall@5 / @10, the mean of "
          f"{', '.join(datasets)}")
    print("| query_sentences | " + " | ".join(LANGS) + " |")
    print("|---|" + "---|" * len(LANGS))
    for n in settings:
        cells = []
        for lang in LANGS:
            rows = [results[n][f"{d}/{lang}"] for d in datasets if f"{d}/{lang}" in results[n]]
            r5 = sum(r["recall@5"] for r in rows) / max(1, len(rows))
            r10 = sum(r["recall@10"] for r in rows) / max(1, len(rows))
            cells.append(f"{r5:.3f} / {r10:.3f}")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()
    print(f"The question calls replayed to the server one at a time ({args.model}):")
    print("| query_sentences | calls | texts, mean | tokens, mean / max | latency p50 / p90 / max "
          f"| over {args.timeout_ms:.0f} ms |")
    print("|---|---|---|---|---|---|")
    for n in settings:
        lat, texts, tokens = timing[n]
        k = max(1, len(lat))
        over = sum(1 for x in lat if x > args.timeout_ms) / k
        print(f"| {n} | {len(lat)} | {sum(texts) / k:.1f} | {sum(tokens) / k:.0f} / "
              f"{max(tokens, default=0)} | {percentile(lat, .5):.0f} / {percentile(lat, .9):.0f}"
              f" / {max(lat, default=0):.0f} ms | {100 * over:.1f} % |")


if __name__ == "__main__":
    main()
