#!/usr/bin/env python3
"""Questions in other languages against the shared datasets' catalogs (issue 64).

Runs `toolsift eval` on the translated questions of tests/data/languages/ (the same questions in
English, Spanish, German, French, Portuguese, Japanese, Chinese and Arabic) and prints, per
dataset and language, Recall@5 and @10 of the ranking, what the filter's selection kept (with
`weak_query`: how many questions were too weak to rank by, and the tools they were sent with),
on one half of the questions (`--half 0` chooses, `--half 1` reports).

`--english-traffic` instead measures how often the weak-query rule fires on the shared datasets'
own (English) questions, every one of them, and what the questions it fires on are sent with.

Catalogs: `--catalog full` ranks against the whole shared catalog (1,437 to 4,076 tools);
`--catalog 200` against catalogs of 200 tools as a client sends them (the questions' relevant
tools among tools drawn at random, seeded: one catalog per group of ten questions).

    python3 benches/languages.py --half 1 --catalog 200 [--config CONFIG.json]
        [--embeddings-url http://127.0.0.1:18100/v1/embeddings --embeddings-model NAME]
    python3 benches/languages.py --english-traffic --catalog 200
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASETS = os.path.join(os.path.dirname(ROOT), "shared", "datasets")
LANGUAGES = os.path.join(ROOT, "tests", "data", "languages")
NAMES = ["seal_tools", "toolbench", "livemcpbench"]
LANGS = ["en", "es", "de", "fr", "pt", "ja", "zh", "ar"]
GROUP = 10


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def catalogs(tools, queries, size, seed):
    """Groups of queries, each with a catalog of `size` tools holding their relevant ones."""
    if size is None:
        return [(tools, queries)]
    by_name = {json.loads(t)["function"]["name"]: t for t in tools}
    rng = random.Random(seed)
    out = []
    for start in range(0, len(queries), GROUP):
        group = queries[start:start + GROUP]
        names = []
        for q in group:
            for r in q["relevant"]:
                if r in by_name and r not in names:
                    names.append(r)
        others = [n for n in by_name if n not in names]
        names += rng.sample(others, max(0, size - len(names)))
        rng.shuffle(names)
        out.append(([by_name[n] for n in names[:max(size, len(names))]], group))
    return out


def evaluate(binary, tools, queries, args):
    with tempfile.TemporaryDirectory() as tmp:
        tools_path = os.path.join(tmp, "tools.jsonl")
        queries_path = os.path.join(tmp, "queries.jsonl")
        with open(tools_path, "w", encoding="utf-8") as f:
            f.write("\n".join(tools) + "\n")
        with open(queries_path, "w", encoding="utf-8") as f:
            for q in queries:
                f.write(json.dumps({"id": q["id"], "query": q["query"], "relevant": q["relevant"]},
                                   ensure_ascii=False) + "\n")
        cmd = [binary, "eval", "--tools", tools_path, "--queries", queries_path, "--k", "5,10",
               "--json", "--per-query"]
        if args.config:
            cmd += ["--config", args.config]
        if args.embeddings_url:
            cmd += ["--embeddings-url", args.embeddings_url, "--embeddings-model", args.embeddings_model]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out)


def tools_lines(name):
    with open(os.path.join(DATASETS, name, "tools.jsonl"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def measure(binary, name, queries, args, seed):
    """Per query: recall@5, recall@10, kept relevant share, kept tools, weak, reading."""
    rows = []
    for tools, group in catalogs(tools_lines(name), queries, args.catalog, seed):
        report = evaluate(binary, tools, group, args)
        by_id = {q["id"]: q for q in report["per_query"]}
        # The selection's figures are means over the group: spread them back per query
        # through its ranks (top_k or the weak question's keep).
        for q in group:
            pq = by_id.get(q["id"])
            if pq is None:
                continue
            ranks = [r for r in pq["relevant_ranks"].values()]
            n = len(ranks)
            rec = lambda k: sum(1 for r in ranks if r is not None and r <= k) / n
            rows.append({"recall@5": rec(5), "recall@10": rec(10), "weak": pq["weak"],
                         "reading": pq["reading"], "ranks": ranks})
        rows_group = rows[-len(group):]
        for r in rows_group:
            r["selected_top_k"] = report["selected_top_k"]
    return rows


def measure_group(binary, tools, queries, args):
    """Per query of one catalog, in order: as [`measure`] gives them."""
    report = evaluate(binary, tools, queries, args)
    by_id = {q["id"]: q for q in report["per_query"]}
    rows = []
    for q in queries:
        pq = by_id[q["id"]]
        ranks = list(pq["relevant_ranks"].values())
        rec = lambda k: sum(1 for r in ranks if r is not None and r <= k) / len(ranks)
        rows.append({"recall@5": rec(5), "recall@10": rec(10), "weak": pq["weak"],
                     "reading": pq["reading"], "ranks": ranks,
                     "dense_margin": pq.get("dense_margin"),
                     "selected_top_k": report["selected_top_k"]})
    return rows


def kept(row, args, weak_keep):
    """Relevant share and tools the selection sends (weak: `weak_keep` tools, else top_k)."""
    k = weak_keep if row["weak"] else row["selected_top_k"]
    ranks = row["ranks"]
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks), k


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "toolsift"))
    p.add_argument("--half", type=int, choices=[0, 1])
    p.add_argument("--catalog", default="200", help="'full' or a number of tools")
    p.add_argument("--config")
    p.add_argument("--embeddings-url")
    p.add_argument("--embeddings-model", default="multilingual-e5-small")
    p.add_argument("--english-traffic", action="store_true")
    p.add_argument("--languages", default=",".join(LANGS))
    p.add_argument("--datasets", default=",".join(NAMES))
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--rows", help="write every question's row (ranks, reading, weak, dense "
                   "margin) to this JSON file")
    args = p.parse_args()
    args.catalog = None if args.catalog == "full" else int(args.catalog)
    weak_keep = 128
    if args.config:
        with open(args.config) as f:
            weak_keep = json.load(f).get("weak_query", {}).get("max_k", 128)
    results = {}
    all_rows = {}
    for name in args.datasets.split(","):
        if args.english_traffic:
            queries = read_jsonl(os.path.join(DATASETS, name, "queries.jsonl"))
            rows = measure(args.binary, name, queries, args, f"english-{name}")
            weak = [r for r in rows if r["weak"]]
            sent = [kept(r, args, weak_keep)[1] for r in weak]
            results[name] = {"queries": len(rows), "weak": len(weak),
                             "weak_share": len(weak) / max(1, len(rows)),
                             "weak_tools_mean": sum(min(s, args.catalog or 10**9) for s in sent) / max(1, len(sent))}
            print(f"{name}: {len(weak)} of {len(rows)} English questions weak "
                  f"({100 * len(weak) / max(1, len(rows)):.2f} %)", file=sys.stderr)
            continue
        # Every language's questions are the same questions in the same order: their groups
        # get the same catalogs, so each group is ranked once for all languages (with
        # embeddings, its tools are embedded once).
        langs = args.languages.split(",")
        by_lang = {}
        for lang in langs:
            queries = read_jsonl(os.path.join(LANGUAGES, name, f"{lang}.jsonl"))
            if args.half is not None:
                queries = [q for q in queries if q["half"] == args.half]
            by_lang[lang] = queries
        every = [dict(q, id=f"{lang}|{q['id']}") for lang in langs for q in by_lang[lang]]
        first = by_lang[langs[0]]
        rows_of = {lang: [] for lang in langs}
        for tools, group in catalogs(tools_lines(name), first, args.catalog, f"languages-{name}"):
            ids = {q["id"] for q in group}
            batch = [q for q in every if q["id"].split("|", 1)[1] in ids]
            for row, q in zip(measure_group(args.binary, tools, batch, args), batch):
                rows_of[q["id"].split("|", 1)[0]].append(row)
        if args.rows:
            all_rows[name] = rows_of
        for lang in langs:
            rows = rows_of[lang]
            n = max(1, len(rows))
            kept_rows = [kept(r, args, weak_keep) for r in rows]
            results[f"{name}/{lang}"] = {
                "queries": len(rows),
                "recall@5": sum(r["recall@5"] for r in rows) / n,
                "recall@10": sum(r["recall@10"] for r in rows) / n,
                "weak": sum(r["weak"] for r in rows),
                "selected_recall": sum(k[0] for k in kept_rows) / n,
                "selected_tools": sum(min(k[1], args.catalog or 10**9) for k in kept_rows) / n,
            }
    if args.rows:
        with open(args.rows, "w") as f:
            json.dump(all_rows, f)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    if args.english_traffic:
        print("| dataset | English questions | weak | share | tools sent when weak |")
        print("|---|---|---|---|---|")
        for name, r in results.items():
            print(f"| {name} | {r['queries']} | {r['weak']} | {100 * r['weak_share']:.2f} % | {r['weak_tools_mean']:.0f} |")
        return
    print("| dataset | language | questions | R@5 | R@10 | weak | selected recall | tools sent |")
    print("|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        name, lang = key.split("/")
        print(f"| {name} | {lang} | {r['queries']} | {r['recall@5']:.3f} | {r['recall@10']:.3f} | "
              f"{r['weak']} | {r['selected_recall']:.3f} | {r['selected_tools']:.1f} |")


if __name__ == "__main__":
    main()
