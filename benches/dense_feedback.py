#!/usr/bin/env python3
"""Pseudo-relevance feedback in the vector channel, for questions in other languages (issue 64):
does moving a question's embedding toward its closest tools' embeddings (Rocchio) bring the
translated questions of tests/data/languages/ closer to their English originals?

    .venv/bin/python benches/dense_feedback.py --half 0 [--model e5]

1. Starts `toolsift-embed --model MODEL` behind the caching proxy of `embed_query_calls.py`,
   and runs `benches/languages.py --half H --catalog 200` with hybrid ranking through it, so
   every tool's and question's vector is the one the filter's vector channel reads.
2. Ranks each question's 200-tool catalog by cosine alone (the vector channel; a question the
   keywords cannot read is ranked by it alone), then with feedback: the question's vector plus
   `beta` times the mean of its `m` closest tools' vectors, normalised, ranks again.

Prints Recall@5 of the vector channel per language (the mean of the three datasets) for each
(m, beta), and the hybrid ranking's own Recall@5 (the filter's, from languages.py) beside it.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benches"))
import embed_query_calls as calls  # noqa: E402
import languages  # noqa: E402


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v] if n > 0 else v


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def recall(order, relevant, k):
    top = set(order[:k])
    return sum(1 for r in relevant if r in top) / len(relevant)


def ranked(query, tools):
    """Tool names by cosine with `query`, best first (ties by catalog order)."""
    scores = [(-dot(query, v), i, name) for i, (name, v) in enumerate(tools)]
    return [name for _, _, name in sorted(scores)]


def with_feedback(query, tools, m, beta):
    order = ranked(query, tools)
    by_name = dict(tools)
    mean = [sum(xs) / m for xs in zip(*(by_name[n] for n in order[:m]))]
    return ranked(unit([q + beta * x for q, x in zip(query, mean)]), tools)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(REPO, "target/embed/release/toolsift-embed"))
    p.add_argument("--model", default="e5")
    p.add_argument("--half", type=int, choices=[0, 1], required=True)
    p.add_argument("--feedback", default="1:0.5,1:1,3:0.5,3:1,3:2,5:1",
                   help="m:beta pairs to try")
    args = p.parse_args()
    server = calls.Server(args.binary, args.model)
    cache = {}
    httpd = calls.proxy(server, [[]], cache)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/embeddings"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = os.path.join(tmp, "config.json")
            rows = os.path.join(tmp, "rows.json")
            with open(config, "w") as f:
                json.dump({"ranking": "hybrid", "embeddings": {
                    "cluster": "embeddings", "model": args.model, "query_sentences": 0}}, f)
            out = subprocess.run(
                [sys.executable, os.path.join(REPO, "benches/languages.py"), "--half",
                 str(args.half), "--catalog", "200", "--json", "--config", config,
                 "--embeddings-url", url, "--embeddings-model", args.model, "--rows", rows],
                check=True, capture_output=True, text=True).stdout
            hybrid = json.loads(out)
    finally:
        server.stop()
    vectors = {text: unit(v) for (_, _, text), v in cache.items()}
    tool_vectors = {}
    for text, v in vectors.items():
        name, sep, _ = text.partition(": ")
        if sep:
            tool_vectors.setdefault(name, v)
    forms = [("cosine", None)] + [(f"m{m} beta{b}", (int(m), float(b))) for m, b in
                                  (s.split(":") for s in args.feedback.split(","))]
    results = {}
    for name in languages.NAMES:
        by_lang = {lang: [q for q in languages.read_jsonl(
            os.path.join(languages.LANGUAGES, name, f"{lang}.jsonl")) if q["half"] == args.half]
            for lang in languages.LANGS}
        groups = languages.catalogs(languages.tools_lines(name), by_lang["en"], 200,
                                    f"languages-{name}")
        for tool_lines, group in groups:
            names = [json.loads(t)["function"]["name"] for t in tool_lines]
            tools = [(n, tool_vectors[n]) for n in names if n in tool_vectors]
            ids = {q["id"] for q in group}
            for lang, questions in by_lang.items():
                for q in questions:
                    if q["id"] not in ids:
                        continue
                    v = vectors.get(q["query"].strip())
                    if v is None:
                        continue
                    for form, fb in forms:
                        order = ranked(v, tools) if fb is None else with_feedback(v, tools, *fb)
                        cell = results.setdefault((form, lang), {}).setdefault(name, [])
                        cell.append(recall(order, q["relevant"], 5))
    print(f"half {args.half}, Recall@5 per language, the mean of the three datasets "
          f"(questions found in the cache)")
    print("| form | " + " | ".join(languages.LANGS) + " |")
    print("|---|" + "---|" * len(languages.LANGS))
    print("| hybrid (the filter) | " + " | ".join(
        f"{sum(hybrid[f'{n}/{lang}']['recall@5'] for n in languages.NAMES) / 3:.3f}"
        for lang in languages.LANGS) + " |")
    for form, _ in forms:
        cells = []
        for lang in languages.LANGS:
            per = results.get((form, lang), {})
            means = [sum(v) / len(v) for v in per.values() if v]
            n = sum(len(v) for v in per.values())
            cells.append(f"{sum(means) / max(1, len(means)):.3f} ({n})")
        print(f"| {form} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
