#!/usr/bin/env python3
"""Learned tool transitions as a ranking channel (issue 66): measured before anything ships.

    python3 benches/conversations.py          # once: tests/data/conversations/*.jsonl
    python3 benches/transitions.py --mode keyword
    python3 benches/transitions.py --mode hybrid --embeddings-url http://127.0.0.1:PORT/v1/embeddings \
        --embeddings-model all-MiniLM-L6-v2

Every turn of every conversation of tests/data/conversations/ is ranked by the filter's own
code (`toolsift explain --json --config CONFIG REQUEST.json`, the request being the turn's
OpenAI Chat messages and a catalog of 200 tools: the task's relevant tools and tools of the same
dataset drawn at random, seeded, the same catalog for every turn of a conversation). Rankings
are cached in target/transitions/ (one file per mode and model), so a second run only
recomputes the offline part.

Transitions are learned from conversations: for every later turn, each tool called in an
earlier turn counts once towards each tool that turn calls; a tool keeps its MAX_SUCCESSORS
most frequent successors. A turn's transition list is the successors of its history's calls
that are in its catalog, scored by summed counts. The forms, applied offline to the ranking:

  rrf           reciprocal rank fusion of the ranking and the transition list (ties broken by
                name), the list weighted w (RRF k 60, as hybrid ranking fuses its channels);
  share         the ranking's top k-m, then m slots for the best successors not already kept
                (ties broken by their place in the ranking), the ranking filling any left over;
  share_gated   share, with only successors whose summed count is at least c;
  rrf_last      rrf with transitions learned and read from the previous turn's calls only.

A first turn has no history, so no form changes it. Parameters are chosen on half 0 only:
its tasks are split in two by a seeded hash, transitions learned on one part are scored on the
other and the other way round (both folds summed), pooled over datasets. Half 1 is then
reported with transitions learned from all of half 0. Recall@k of a turn is the share of its
relevant tools among the first k; every form sends k tools.

With hybrid ranking `explain` embeds the catalog for every request; this script puts a caching
proxy (in process, keyed on model, role and text) in front of the embeddings server, so each
distinct text is embedded once per run.
"""
import argparse
import concurrent.futures
import http.server
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASETS = os.path.join(os.path.dirname(ROOT), "shared", "datasets")
CONVERSATIONS = os.path.join(ROOT, "tests", "data", "conversations")
NAMES = ["seal_tools", "toolbench", "livemcpbench"]
CATALOG_SIZE = 200
MAX_SUCCESSORS = 10
RRF_K = 60.0
SEED = "66"
KS = (5, 10)

# The parameter grids searched on half 0.
RRF_WEIGHTS = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0]
SHARE_SLOTS = [1, 2, 3]
GATE_COUNTS = [2, 3, 5]


# The conversations' own reading and hash, so that the halves split the same way.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conversations import read_jsonl, stable_hash  # noqa: E402


# ---- ranking every turn with `toolsift explain` ------------------------------------------------

def catalog_for(conversation, tool_lines):
    """The task's relevant tools and random others of its dataset, 200 in all, shuffled: the
    same for every turn of the conversation."""
    rng = random.Random("%s/catalog/%s/%s" % (SEED, conversation["dataset"], conversation["task_id"]))
    relevant = [name for turn in conversation["turns"] for name in turn["relevant"]]
    others = sorted(set(tool_lines) - set(relevant))
    names = relevant + rng.sample(others, CATALOG_SIZE - len(relevant))
    rng.shuffle(names)
    return names


def explain_ranking(binary, config_path, extra_args, request, workdir, key):
    """The tools in the filter's rank order, and what it kept (its `kept` count and `weak`)."""
    path = os.path.join(workdir, "%s.json" % key)
    with open(path, "w", encoding="utf-8") as f:
        f.write(request)
    done = subprocess.run([binary, "explain", "--json", "--config", config_path] + extra_args + [path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("toolsift explain failed (%d): %s" % (done.returncode, done.stderr.strip()))
    out = done.stdout
    os.remove(path)
    answer = json.loads(out)
    ranked = [t["name"] for t in sorted(answer["tools"], key=lambda t: t["rank"])]
    return {"ranked": ranked, "kept": answer["kept"], "weak": answer.get("weak"),
            "query": answer["query"]}


def ranking_config(args, embeddings_url):
    """The filter's configuration for `args.mode` (top_k 5), and `explain`'s arguments for it."""
    config = {"top_k": 5}
    extra = []
    if args.mode == "hybrid":
        # As the shipped hybrid configuration (envoy-hybrid.yaml) has it: e5 is sent the whole
        # question only (query_sentences 0); MiniLM keeps the defaults.
        config["ranking"] = "hybrid"
        config["embeddings"] = {"cluster": "embeddings", "model": args.embeddings_model}
        if "e5" in args.embeddings_model:
            config["embeddings"]["query_sentences"] = 0
        extra = ["--embeddings-url", embeddings_url, "--embeddings-model", args.embeddings_model]
    return config, extra


def rank_all(args, conversations_by_dataset, tool_lines_by_dataset, cache_path):
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path, encoding="utf-8") as f:
            cache = json.load(f)
    config, extra = ranking_config(args, args.embeddings_url)
    config["debug"] = True
    jobs = []
    for dataset, conversations in conversations_by_dataset.items():
        lines = tool_lines_by_dataset[dataset]
        for conversation in conversations:
            catalog = None
            for i, turn in enumerate(conversation["turns"]):
                key = "%s|%s|%d" % (dataset, conversation["task_id"], i)
                if key in cache:
                    continue
                if catalog is None:
                    catalog = catalog_for(conversation, lines)
                body = '{"model":"gpt-4o","messages":%s,"tools":[%s]}' % (
                    json.dumps(turn["messages"], ensure_ascii=False),
                    ",".join(lines[name] for name in catalog))
                jobs.append((key, body))
    if jobs:
        print("ranking %d turns (%s)…" % (len(jobs), args.mode), file=sys.stderr)
        with tempfile.TemporaryDirectory() as workdir:
            config_path = os.path.join(workdir, "config.json")
            with open(config_path, "w") as f:
                json.dump(config, f)
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                futures = {pool.submit(explain_ranking, args.binary, config_path, extra, body, workdir,
                                       "r%d" % n): key for n, (key, body) in enumerate(jobs)}
                for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                    cache[futures[future]] = future.result()
                    if done % 200 == 0:
                        print("  %d/%d" % (done, len(jobs)), file=sys.stderr)
        os.makedirs(os.path.dirname(cache_path), exist_ok=True)
        with open(cache_path, "w", encoding="utf-8") as f:
            json.dump(cache, f)
    return cache


# ---- an embeddings cache in front of the server (hybrid) ----------------------------------------

def start_embeddings_cache(upstream):
    """A local /v1/embeddings that answers each (model, role, encoding, text) once from
    `upstream` and from memory after: `explain` embeds its whole catalog on every request."""
    vectors = {}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
            role = (request.get("model"), request.get("input_type"), request.get("encoding_format"))
            with lock:
                missing = sorted({t for t in texts if (role, t) not in vectors})
            if missing:
                forward = dict(request, input=missing)
                upstream_request = urllib.request.Request(
                    upstream, data=json.dumps(forward).encode(), headers={"content-type": "application/json"})
                with urllib.request.urlopen(upstream_request, timeout=600) as answer:
                    data = json.loads(answer.read())["data"]
                with lock:
                    for item in data:
                        vectors[(role, missing[item["index"]])] = item["embedding"]
            body = json.dumps({"object": "list", "model": request.get("model"),
                               "data": [{"object": "embedding", "index": i, "embedding": vectors[(role, t)]}
                                        for i, t in enumerate(texts)],
                               "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return "http://127.0.0.1:%d/v1/embeddings" % server.server_address[1]


# ---- transitions ---------------------------------------------------------------------------------

def learn(conversations, last_only=False):
    """successor lists: tool → {successor: count}, the MAX_SUCCESSORS most frequent kept."""
    counts = defaultdict(lambda: defaultdict(int))
    for conversation in conversations:
        turns = conversation["turns"]
        for i in range(1, len(turns)):
            sources = turns[i - 1]["relevant"] if last_only else turns[i]["history_calls"]
            for earlier in sources:
                for later in turns[i]["relevant"]:
                    counts[earlier][later] += 1
    bounded = {}
    for tool, successors in counts.items():
        best = sorted(successors.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SUCCESSORS]
        bounded[tool] = dict(best)
    return bounded


def successor_scores(transitions, sources, catalog):
    scores = defaultdict(int)
    for source in sources:
        for successor, count in transitions.get(source, {}).items():
            if successor in catalog:
                scores[successor] += count
    return scores


def rrf(ranked, scores, weight, k):
    """The ranking fused with the transition list (ordered by summed count, ties by name)."""
    transition_list = sorted(scores, key=lambda t: (-scores[t], t))
    fused = defaultdict(float)
    for place, tool in enumerate(ranked, 1):
        fused[tool] += 1.0 / (RRF_K + place)
    for place, tool in enumerate(transition_list, 1):
        fused[tool] += weight / (RRF_K + place)
    position = {t: i for i, t in enumerate(ranked)}
    return sorted(fused, key=lambda t: (-fused[t], position.get(t, len(ranked))))[:k]


def share(ranked, scores, slots, k, min_count=1):
    """The ranking's top k-slots, then up to `slots` successors not already kept (ties by
    their place in the ranking), then the ranking again."""
    kept = ranked[:k - slots]
    position = {t: i for i, t in enumerate(ranked)}
    successors = sorted((t for t in scores if scores[t] >= min_count and t not in kept),
                        key=lambda t: (-scores[t], position.get(t, len(ranked))))
    kept = kept + successors[:slots]
    kept += [t for t in ranked if t not in kept][:k - len(kept)]
    return kept


def forms(params):
    """name → (which transitions it reads, function(ranked, scores, k) → top k)."""
    out = {"ranking": ("all", lambda r, s, k: r[:k])}
    if "rrf" in params:
        out["rrf"] = ("all", lambda r, s, k: rrf(r, s, params["rrf"], k))
    if "share" in params:
        out["share"] = ("all", lambda r, s, k: share(r, s, params["share"][k], k))
    if "share_gated" in params:
        out["share_gated"] = ("all", lambda r, s, k: share(r, s, params["share_gated"][k][0], k,
                                                          params["share_gated"][k][1]))
    if "rrf_last" in params:
        out["rrf_last"] = ("last", lambda r, s, k: rrf(r, s, params["rrf_last"], k))
    return out


def recall(kept, relevant):
    return sum(1 for t in relevant if t in kept) / len(relevant)


def score_turns(conversations, rankings, transitions, form):
    """Per turn: (dataset, task, is_later, {k: recall})."""
    source_kind, choose = form
    rows = []
    for conversation in conversations:
        for i, turn in enumerate(conversation["turns"]):
            ranked = rankings["%s|%s|%d" % (conversation["dataset"], conversation["task_id"], i)]["ranked"]
            if i == 0:
                scores = {}
            else:
                sources = conversation["turns"][i - 1]["relevant"] if source_kind == "last" else turn["history_calls"]
                scores = successor_scores(transitions[source_kind], sources, set(ranked))
            rows.append((conversation["dataset"], conversation["task_id"], i > 0,
                         {k: recall(choose(ranked, scores, k), turn["relevant"]) for k in KS}))
    return rows


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def later_recall(rows, k):
    return mean(r[3][k] for r in rows if r[2])


def learned(conversations):
    return {"all": learn(conversations), "last": learn(conversations, last_only=True)}


# ---- choosing parameters on half 0 ------------------------------------------------------------

def choose_parameters(half0, rankings):
    parts = [[c for c in half0 if stable_hash(SEED, "part", c["task_id"]) % 2 == p] for p in (0, 1)]
    folds = [(learned(parts[0]), parts[1]), (learned(parts[1]), parts[0])]

    def later_rows(form):
        rows = []
        for transitions, scored in folds:
            rows += score_turns(scored, rankings, transitions, form)
        return rows

    log = []
    base = later_rows(forms({})["ranking"])
    log.append("ranking: later R@5 %.3f R@10 %.3f" % (later_recall(base, 5), later_recall(base, 10)))
    chosen = {}
    for name in ("rrf", "rrf_last"):
        best = None
        for w in RRF_WEIGHTS:
            rows = later_rows(forms({name: w})[name])
            value = (later_recall(rows, 5) + later_recall(rows, 10)) / 2
            log.append("%s w=%g: later R@5 %.3f R@10 %.3f" % (name, w, later_recall(rows, 5), later_recall(rows, 10)))
            if best is None or value > best[0]:
                best = (value, w)
        chosen[name] = best[1]
    chosen["share"] = {}
    chosen["share_gated"] = {}
    for k in KS:
        best = None
        for m in SHARE_SLOTS:
            rows = later_rows(forms({"share": {kk: m for kk in KS}})["share"])
            log.append("share k=%d m=%d: later R@%d %.3f" % (k, m, k, later_recall(rows, k)))
            if best is None or later_recall(rows, k) > best[0]:
                best = (later_recall(rows, k), m)
        chosen["share"][k] = best[1]
        best = None
        for m in SHARE_SLOTS:
            for c in GATE_COUNTS:
                rows = later_rows(forms({"share_gated": {kk: (m, c) for kk in KS}})["share_gated"])
                log.append("share_gated k=%d m=%d c=%d: later R@%d %.3f" % (k, m, c, k, later_recall(rows, k)))
                if best is None or later_recall(rows, k) > best[0]:
                    best = (later_recall(rows, k), (m, c))
        chosen["share_gated"][k] = best[1]
    return chosen, log


# ---- report ----------------------------------------------------------------------------------

def bootstrap_interval(rows, base_rows, k, draws=2000):
    """95% interval of the later-turn Recall@k difference, tasks resampled (seeded)."""
    by_task = defaultdict(lambda: [0.0, 0.0, 0])
    for row, base in zip(rows, base_rows):
        if row[2]:
            entry = by_task[(row[0], row[1])]
            entry[0] += row[3][k]
            entry[1] += base[3][k]
            entry[2] += 1
    tasks = list(by_task.values())
    rng = random.Random(SEED + "/bootstrap")
    diffs = []
    for _ in range(draws):
        sample = [tasks[rng.randrange(len(tasks))] for _ in tasks]
        turns = sum(t[2] for t in sample)
        diffs.append((sum(t[0] for t in sample) - sum(t[1] for t in sample)) / turns)
    diffs.sort()
    return diffs[int(0.025 * draws)], diffs[int(0.975 * draws)]


def coverage(half1, transitions):
    """Later-turn relevant tools that a history call has a learned transition to."""
    counts = defaultdict(lambda: [0, 0])
    for conversation in half1:
        for turn in conversation["turns"][1:]:
            for tool in turn["relevant"]:
                reached = any(tool in transitions.get(source, {}) for source in turn["history_calls"])
                counts[conversation["dataset"]][0] += reached
                counts[conversation["dataset"]][1] += 1
    counts["pooled"] = [sum(v[0] for v in counts.values()), sum(v[1] for v in counts.values())]
    return counts


def report(args, conversations, rankings):
    half0 = [c for c in conversations if c["half"] == 0]
    half1 = [c for c in conversations if c["half"] == 1]
    chosen, log = choose_parameters(half0, rankings)
    print("## %s%s\n" % (args.mode, " (%s)" % args.embeddings_model if args.mode == "hybrid" else ""))
    print("Choice on half 0 (two folds, later turns, pooled):\n")
    print("```")
    print("\n".join(log))
    print("```\n")
    print("Chosen: rrf w=%g; rrf_last w=%g; share m=%s; share_gated (m, c)=%s\n" % (
        chosen["rrf"], chosen["rrf_last"],
        ", ".join("%d at k=%d" % (chosen["share"][k], k) for k in KS),
        ", ".join("(%d, %d) at k=%d" % (chosen["share_gated"][k] + (k,)) for k in KS)))
    transitions = learned(half0)
    cover = coverage(half1, transitions["all"])
    print("Half 1, later-turn relevant tools with a learned transition from the history's calls: %s\n" % (
        ", ".join("%s %d/%d (%.0f%%)" % (d, v[0], v[1], 100.0 * v[0] / max(1, v[1])) for d, v in cover.items())))
    weak = sum(1 for c in half1 for i in range(len(c["turns"]))
               if rankings["%s|%s|%d" % (c["dataset"], c["task_id"], i)]["weak"])
    print("Half 1 turns the filter found too weak to rank (sent with more than top_k): %d\n" % weak)
    # How the filter read each later turn (src/followup/): as a follow-up of the question
    # (turns joined by U+001E), on its own words with the question only ordering the rest
    # (after U+001F), or alone.
    readings = defaultdict(lambda: defaultdict(int))
    for c in half1:
        for i in range(1, len(c["turns"])):
            query = rankings["%s|%s|%d" % (c["dataset"], c["task_id"], i)]["query"]
            reading = "follow-up" if "\u001e" in query else "own words first" if "\u001f" in query else "alone"
            readings[c["dataset"]][reading] += 1
    print("Half 1 later turns, how the filter read them: %s\n" % "; ".join(
        "%s %s" % (d, ", ".join("%s %d" % kv for kv in sorted(r.items()))) for d, r in readings.items()))
    all_forms = forms(chosen)
    rows = {name: score_turns(half1, rankings, transitions, form) for name, form in all_forms.items()}
    print("Half 1: Recall@5 and @10 of first and later turns (k tools sent by every form); "
          "Δ = later turns against the ranking\n")
    print("| dataset | form | turns (first/later) | first R@5 | first R@10 | later R@5 | later R@10 | Δ later R@5 | Δ later R@10 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dataset in NAMES + ["pooled"]:
        pick = (lambda r: True) if dataset == "pooled" else (lambda r, d=dataset: r[0] == d)
        base = [r for r in rows["ranking"] if pick(r)]
        for name in all_forms:
            sel = [r for r in rows[name] if pick(r)]
            first = [r for r in sel if not r[2]]
            later = [r for r in sel if r[2]]
            line = "| %s | %s | %d/%d | %.3f | %.3f | %.3f | %.3f |" % (
                dataset, name, len(first), len(later), mean(r[3][5] for r in first), mean(r[3][10] for r in first),
                mean(r[3][5] for r in later), mean(r[3][10] for r in later))
            if name == "ranking":
                line += " | |"
            else:
                deltas = []
                for k in KS:
                    d = later_recall(sel, k) - later_recall(base, k)
                    lo, hi = bootstrap_interval(sel, base, k)
                    deltas.append("%+.3f [%+.3f, %+.3f]" % (d, lo, hi))
                line += " %s |" % " | ".join(deltas)
            print(line)
    print("\n(Δ: the difference, and its 95% bootstrap interval over half 1's tasks.)\n")


def parse_arguments(description, more=None):
    """The options of this script and of transitions_loop.py: the ranking and its binary
    (`more`: a function adding a script's own to the parser)."""
    parser = argparse.ArgumentParser(description=description)
    if more:
        more(parser)
    parser.add_argument("--mode", choices=["keyword", "hybrid"], default="keyword")
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "toolsift"))
    parser.add_argument("--embeddings-url")
    parser.add_argument("--embeddings-model")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--conversations", default=CONVERSATIONS,
                        help="the folder of conversations (default %(default)s)")
    args = parser.parse_args()
    if args.mode == "hybrid" and not (args.embeddings_url and args.embeddings_model):
        parser.error("--mode hybrid needs --embeddings-url and --embeddings-model")
    return args


def read_inputs(folder):
    """Each dataset's conversations (from `folder`) and its tools' JSON lines by name."""
    conversations_by_dataset, tool_lines_by_dataset = {}, {}
    for dataset in NAMES:
        conversations_by_dataset[dataset] = read_jsonl(os.path.join(folder, dataset + ".jsonl"))
        with open(os.path.join(DATASETS, dataset, "tools.jsonl"), encoding="utf-8") as f:
            tool_lines_by_dataset[dataset] = {json.loads(line)["function"]["name"]: line.strip()
                                              for line in f if line.strip()}
    return conversations_by_dataset, tool_lines_by_dataset


def main():
    args = parse_arguments(__doc__.split("\n")[0])
    conversations_by_dataset, tool_lines_by_dataset = read_inputs(args.conversations)
    label = args.mode if args.mode == "keyword" else "hybrid-" + args.embeddings_model
    if os.path.abspath(args.conversations) != CONVERSATIONS:
        label += "-" + os.path.basename(os.path.abspath(args.conversations))
    cache_path = os.path.join(ROOT, "target", "transitions", "rankings-%s.json" % label)
    real_url = args.embeddings_url
    if args.mode == "hybrid":
        args.embeddings_url = start_embeddings_cache(real_url)
    rankings = rank_all(args, conversations_by_dataset, tool_lines_by_dataset, cache_path)
    args.embeddings_url = real_url
    conversations = [c for d in NAMES for c in conversations_by_dataset[d]]
    report(args, conversations, rankings)


if __name__ == "__main__":
    main()
