#!/usr/bin/env python3
"""Multi-turn conversations built from the shared datasets (issue 66: learned tool transitions).

    python3 benches/conversations.py [--max-tasks 300] [--seed 66] [--out DIR]

A task is one dataset query with at least two relevant tools. Its tools are split over turns
in the order of `relevant`: one tool per turn, at most MAX_TURNS turns (a task with more tools
than that splits them into MAX_TURNS contiguous runs of near-equal length, the last turns
taking the extra ones).

Turn 1 is the dataset's whole query. Its sentences are not aligned with its tools (a sentence
often names two tools, or none), so cutting it to "the sentence about the first tool" would
be a guess per task; and users do state the whole task up front. The assistant then calls turn
1's tool(s): an assistant message with `tool_calls`, a `role: tool` result (short JSON), and a
short text handing back. Each later turn is a short user text that refers back ("ok, now do the
next part with that") with none of a tool's words; the assistant calls that turn's tools the
same way. The filter already ranks such a follow-up by the question before it (src/followup/),
so later turns today rank by turn 1's question: the baseline a transition channel must beat.

The phrasings of the two halves are different sets, so that nothing chosen on half 0 is fitted
to the words of half 1. Which half a task is in comes from a seeded hash of its id.

Writes tests/data/conversations/<dataset>.jsonl, one conversation a line:
{"task_id", "half", "dataset", "turns": [{"messages", "history_calls", "relevant"}]}
where `messages` is the OpenAI Chat conversation up to and including that turn's user text,
`history_calls` the tools called in earlier turns (in order) and `relevant` the tools this
turn needs. Deterministic: the same seed gives the same bytes.
"""
import argparse
import hashlib
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASETS = os.path.join(os.path.dirname(ROOT), "shared", "datasets")
OUT = os.path.join(ROOT, "tests", "data", "conversations")
NAMES = ["seal_tools", "toolbench", "livemcpbench"]
MAX_TURNS = 4

# Later user turns, as people type them after an agent did a first step: they point back and
# name nothing. Two disjoint sets, one per half.
FOLLOW_UPS = {
    0: [
        "ok, now do the next part with that",
        "and what about the rest?",
        "great, go on with what you got",
        "nice. next please",
        "cool, carry on",
        "thanks! now the other thing I said",
        "lovely, go on from there",
        "alright, now the next one with that",
        "good. then the rest",
        "ok and after that?",
        "looks right, on we go",
        "yes, and now whatever comes after",
    ],
    1: [
        "got it, on to the next one",
        "fine, what's next?",
        "ok do the one after that",
        "sounds good, do what's still to do",
        "thx, now all the rest of it",
        "great, you can go from here",
        "yep. on to the next thing",
        "alright then, same again with those",
        "ok now whatever else I asked for",
        "cool, and then the other part",
        "that works, go ahead with the others",
        "nice one, more please",
    ],
}

# What the assistant says after a turn's tool results: mostly hand-backs, some that ask to go
# on, as agents answer. Disjoint per half too.
HAND_BACKS = {
    0: [
        "Done. Here is what I got.",
        "All set, the results are above.",
        "Finished that step.",
        "Here you go.",
        "Shall I continue?",
    ],
    1: [
        "That's done, see the output above.",
        "Completed. Results below.",
        "OK, that part is finished.",
        "Here are the results.",
        "Want me to keep going?",
    ],
}

RESULT_STATUSES = ["ok", "success", "completed"]


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stable_hash(*parts):
    """An integer from the parts, the same on every run and machine (unlike hash())."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def split_over_turns(tools):
    """Contiguous runs, in order: one tool a turn, at most MAX_TURNS runs of near-equal length."""
    turns = min(len(tools), MAX_TURNS)
    base, extra = divmod(len(tools), turns)
    # The extra tools go to the last turns, so turn 1 stays a single step where it can.
    sizes = [base + (1 if i >= turns - extra else 0) for i in range(turns)]
    runs, start = [], 0
    for size in sizes:
        runs.append(tools[start:start + size])
        start += size
    return runs


def placeholder_arguments(schema, rng):
    """Plausible arguments for a tool call: its required parameters (or its first two) with
    values of their type. The ranking never reads them; they only make the call well formed."""
    properties = (schema or {}).get("properties") or {}
    required = [p for p in (schema or {}).get("required") or [] if p in properties]
    names = required or list(properties)[:2]
    args = {}
    for name in names:
        kind = (properties.get(name) or {}).get("type")
        if kind in ("integer", "number"):
            args[name] = rng.randint(1, 50)
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = "sample-%d" % rng.randint(100, 999)
    return args


def tool_turn_messages(task_id, turn_index, tools, schemas, hand_back, rng):
    """The assistant's calls of `tools`, their results and its hand-back text."""
    calls, results = [], []
    for j, name in enumerate(tools):
        call_id = "call_%012x" % (stable_hash(task_id, turn_index, j, name) % (1 << 48))
        arguments = placeholder_arguments(schemas[name], rng)
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments)}})
        result = {"status": rng.choice(RESULT_STATUSES), "id": "r%05d" % rng.randint(0, 99999),
                  "count": rng.randint(1, 12)}
        results.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    return [{"role": "assistant", "content": None, "tool_calls": calls}] + results + [
        {"role": "assistant", "content": hand_back}]


def conversation(dataset, query, half, schemas, seed):
    task_id = query["id"]
    rng = random.Random("%s/%s/%s" % (seed, dataset, task_id))
    runs = split_over_turns(query["relevant"])
    messages = [{"role": "user", "content": query["query"]}]
    turns, called = [], []
    follow_ups = rng.sample(FOLLOW_UPS[half], len(runs) - 1)
    for i, run in enumerate(runs):
        if i > 0:
            messages.append({"role": "user", "content": follow_ups[i - 1]})
        turns.append({"messages": [dict(m) for m in messages], "history_calls": list(called),
                      "relevant": list(run)})
        messages += tool_turn_messages(task_id, i, run, schemas, rng.choice(HAND_BACKS[half]), rng)
        called += run
    return {"task_id": task_id, "half": half, "dataset": dataset, "turns": turns}


def words(text):
    return set(re.findall(r"[a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()))


# Function words (the filter drops them too); the rest of a phrasing's words are printed when a
# tool has them: common words ("next", "rest", "more") cannot all be avoided in natural text.
STOP = set("a an and the of to for on in at it is be do then now ok what with that this those "
           "from there here me i my you your please go yes yep thanks thx s".split())


def report_overlap(dataset, tools):
    """Which phrasing words a tool of the dataset also has (a diagnostic, printed)."""
    vocabulary = set()
    for t in tools:
        f = t["function"]
        vocabulary |= words(f["name"]) | words(f.get("description") or "")
    for half, texts in FOLLOW_UPS.items():
        shared = sorted({w for text in texts for w in words(text)} & vocabulary - STOP)
        print("  %s half %d: phrasing words some tool also has (beyond function words): %s"
              % (dataset, half, ", ".join(shared) or "none"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-tasks", type=int, default=300)
    parser.add_argument("--seed", default="66")
    parser.add_argument("--out", default=OUT, help="the folder to write (default %(default)s)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for dataset in NAMES:
        tools = read_jsonl(os.path.join(DATASETS, dataset, "tools.jsonl"))
        schemas = {t["function"]["name"]: t["function"].get("parameters") for t in tools}
        queries = [q for q in read_jsonl(os.path.join(DATASETS, dataset, "queries.jsonl"))
                   if len(q["relevant"]) >= 2]
        # A seeded sample, kept in the dataset's order so the file reads as the dataset does.
        chosen = sorted(random.Random("%s/%s" % (args.seed, dataset)).sample(
            range(len(queries)), min(args.max_tasks, len(queries))))
        path = os.path.join(args.out, dataset + ".jsonl")
        halves = [0, 0]
        with open(path, "w", encoding="utf-8") as f:
            for i in chosen:
                query = queries[i]
                half = stable_hash(args.seed, "half", query["id"]) % 2
                halves[half] += 1
                record = conversation(dataset, query, half, schemas, args.seed)
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        print("%s: %d tasks (of %d with 2+ tools), half 0 %d, half 1 %d -> %s"
              % (dataset, len(chosen), len(queries), halves[0], halves[1],
                 os.path.relpath(path, ROOT)))
        report_overlap(dataset, tools)


if __name__ == "__main__":
    main()
