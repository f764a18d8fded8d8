#!/usr/bin/env python3
"""Issue 66's channel as it ships, through the loop: records → `toolsift calibrate` → the filter.

    python3 benches/conversations.py          # once: tests/data/conversations/*.jsonl
    cargo build --release --bin toolsift
    python3 benches/transitions_loop.py [--replicas N] [--mode hybrid --embeddings-url URL \
        --embeddings-model M]

benches/transitions.py measured the forms offline, on the rankings `toolsift explain` printed.
This script checks what shipped, with no step of its own in between:

1. Every turn of half 0's conversations becomes the access-log record a shadowed request
   writes (`shadow=… calls=… catalog=… history=…`, names percent-encoded as the filter writes
   them): its history's calls, and the turn's relevant tools as its model's calls.
2. `toolsift calibrate` reads those records and prints the calibration, transitions and all.
3. Half 1 is ranked twice by `toolsift explain` (the filter's own code): with the
   calibration in `auto_k.calibration` (the channel on, `channel_weights.transitions` 1) and
   with it off (`channel_weights.transitions` 0), on the same catalogs as benches/transitions.py.

Recall@k of a turn is the share of its relevant tools among the first k of the filter's
ranking: at each k both configurations send k tools. Half 1's catalogs are not half 0's, so
their turns read the calibration's pooled pairs, as a catalog the fleet has not seen does.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transitions import (  # noqa: E402
    KS, NAMES, bootstrap_interval, catalog_for, explain_ranking, mean, parse_arguments, ranking_config,
    read_inputs, recall, start_embeddings_cache, stable_hash)


def encoded(name):
    """A tool name as the filter writes it in a record (`header_safe`: percent-encoded)."""
    return urllib.parse.quote(name, safe="")


def record_lines(half0, tool_lines_by_dataset):
    """One shadowed record per turn of half 0, as the access log's `toolsift` key holds it."""
    lines = []
    for conversation in half0:
        catalog = catalog_for(conversation, tool_lines_by_dataset[conversation["dataset"]])
        # Any 8 hex digits name the catalog; half 0's catalogs are all distinct.
        catalog_id = "%08x" % (stable_hash("66", "catalog", conversation["task_id"]) & 0xFFFFFFFF)
        for i, turn in enumerate(conversation["turns"]):
            calls = ",".join("%s@%d" % (encoded(name), catalog.index(name) % 50 + 1)
                             for name in turn["relevant"])
            record = ("kept=%d total=%d shadow=would_keep:5 calls=%s missed=0 top_k=5 tools=%d "
                      "catalog=%s" % (len(catalog), len(catalog), calls, len(catalog), catalog_id))
            if turn["history_calls"]:
                record += " history=" + ",".join(encoded(n) for n in turn["history_calls"][-16:])
            time = "2026-12-08T00:%02d:%02d.%03dZ" % (len(lines) // 60000 % 60, len(lines) // 1000 % 60,
                                                      len(lines) % 1000)
            lines.append(json.dumps({"start_time": time, "toolsift": record}))
    return lines


def calibrate(binary, lines, workdir):
    log = os.path.join(workdir, "half0.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    done = subprocess.run([binary, "calibrate", "--max-k", "64", log], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("toolsift calibrate failed: %s" % done.stderr.strip())
    return json.loads(done.stdout.splitlines()[0])


def rank(args, half1, tool_lines_by_dataset, config, extra, workdir, label):
    config_path = os.path.join(workdir, "%s.json" % label)
    with open(config_path, "w") as f:
        json.dump(config, f)
    jobs = []
    for conversation in half1:
        lines = tool_lines_by_dataset[conversation["dataset"]]
        catalog = catalog_for(conversation, lines)
        for i, turn in enumerate(conversation["turns"]):
            body = '{"model":"gpt-4o","messages":%s,"tools":[%s]}' % (
                json.dumps(turn["messages"], ensure_ascii=False), ",".join(lines[n] for n in catalog))
            jobs.append(("%s|%s|%d" % (conversation["dataset"], conversation["task_id"], i), body))
    out = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(explain_ranking, args.binary, config_path, extra, body, workdir,
                               "%s%d" % (label, n)): key for n, (key, body) in enumerate(jobs)}
        for future in concurrent.futures.as_completed(futures):
            out[futures[future]] = future.result()
    return out


def rows_of(half1, rankings):
    """Per turn: (dataset, task, is_later, {k: recall})."""
    rows = []
    for c in half1:
        for i, turn in enumerate(c["turns"]):
            ranked = rankings["%s|%s|%d" % (c["dataset"], c["task_id"], i)]["ranked"]
            rows.append((c["dataset"], c["task_id"], i > 0,
                         {k: recall(ranked[:k], turn["relevant"]) for k in KS}))
    return rows


def main():
    args = parse_arguments(__doc__.split("\n")[0], lambda parser: parser.add_argument(
        "--replicas", type=int, default=1,
        help="learn from the records of one replica of this many (half 0's tasks dealt by hash)"))
    conversations_by_dataset, tool_lines_by_dataset = read_inputs(args.conversations)
    conversations = [c for d in NAMES for c in conversations_by_dataset[d]]
    # One replica of several sees its share of the conversations: what a replica learning from
    # its own records alone (issue 66 item 4) would have, against the fleet's calibration.
    half0 = [c for c in conversations if c["half"] == 0
             and stable_hash("66", "replica", c["task_id"]) % args.replicas == 0]
    half1 = [c for c in conversations if c["half"] == 1]
    cached = start_embeddings_cache(args.embeddings_url) if args.mode == "hybrid" else None
    base, extra = ranking_config(args, cached)
    base["shadow"] = {"sample": 0.01}
    with tempfile.TemporaryDirectory() as workdir:
        calibration = calibrate(args.binary, record_lines(half0, tool_lines_by_dataset), workdir)
        pairs = len(calibration.get("transitions", {}).get("pooled", []))
        with_channel = dict(base, auto_k={"keep": 0.95, "max_k": 64, "calibration": calibration},
                            channel_weights={"transitions": 1.0})
        without = dict(with_channel, channel_weights={"transitions": 0.0})
        on = rank(args, half1, tool_lines_by_dataset, with_channel, extra, workdir, "on")
        off = rank(args, half1, tool_lines_by_dataset, without, extra, workdir, "off")
    rows_on, rows_off = rows_of(half1, on), rows_of(half1, off)
    print("## %s: half 1 through the filter, the calibration learned by `toolsift calibrate` from "
          "%s half 0's records (%d pooled pairs)\n" % (
              args.mode + (" (%s)" % args.embeddings_model if args.mode == "hybrid" else ""),
              "one replica's in %d of" % args.replicas if args.replicas > 1 else "all", pairs))
    print("| dataset | turns (first/later) | first R@5 off → on | later R@5 off → on | Δ later R@5 | "
          "later R@10 off → on | Δ later R@10 |")
    print("|---|---|---|---|---|---|---|")
    for dataset in NAMES + ["pooled"]:
        pick = (lambda r: True) if dataset == "pooled" else (lambda r, d=dataset: r[0] == d)
        a = [r for r in rows_on if pick(r)]
        b = [r for r in rows_off if pick(r)]
        first = lambda rows, k: mean(r[3][k] for r in rows if not r[2])  # noqa: E731
        later = lambda rows, k: mean(r[3][k] for r in rows if r[2])  # noqa: E731
        cells = []
        for k in KS:
            lo, hi = bootstrap_interval(a, b, k)
            cells.append("%.3f → %.3f | %+.3f [%+.3f, %+.3f]" % (
                later(b, k), later(a, k), later(a, k) - later(b, k), lo, hi))
        print("| %s | %d/%d | %.3f → %.3f | %s |" % (
            dataset, sum(1 for r in a if not r[2]), sum(1 for r in a if r[2]),
            first(b, 5), first(a, 5), " | ".join(cells)))
    changed_first = sum(1 for c in half1 for key in ["%s|%s|0" % (c["dataset"], c["task_id"])]
                        if on[key]["ranked"] != off[key]["ranked"])
    print("\nFirst turns whose ranking the channel changed: %d of %d.\n" % (changed_first, len(half1)))


if __name__ == "__main__":
    main()
