"""Replays a shared dataset as traffic through a gateway in shadow mode (`README.md`, "Shadow
mode"): a catalog of 200 tools (the relevant tools of N queries spread over the dataset, then the
dataset's first others), each query one OpenAI Chat request with `x-demo-model: scripted` and
`x-demo-call` naming its relevant tools, so that the demo upstream's model calls exactly those.
Writes the catalog and the queries as `toolsift eval` reads them, for the Recall@k of the same
data.

    python3 benches/shadow_replay.py DATASET_DIR GATEWAY_URL OUT_DIR [N]
"""

import json
import sys
import urllib.request


def main():
    dataset, url, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 60
    tools = [json.loads(l) for l in open(f"{dataset}/tools.jsonl")]
    every = [json.loads(l) for l in open(f"{dataset}/queries.jsonl")]
    # Spread over the dataset (its queries come grouped by kind: single-tool ones first).
    queries = every[:: max(1, len(every) // n)][:n]
    wanted = {r for q in queries for r in q["relevant"]}
    catalog = [t for t in tools if t["function"]["name"] in wanted]
    for t in tools:
        if len(catalog) >= 200:
            break
        if t["function"]["name"] not in wanted:
            catalog.append(t)
    with open(f"{out}/tools.jsonl", "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in catalog)
    with open(f"{out}/queries.jsonl", "w") as f:
        f.writelines(json.dumps(q) + "\n" for q in queries)
    for q in queries:
        body = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": q["query"]}],
                           "tools": catalog}).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "content-type": "application/json", "x-demo-model": "scripted",
            "x-demo-want": q["relevant"][0], "x-demo-call": ",".join(q["relevant"])})
        with urllib.request.urlopen(request) as response:
            response.read()
    print(f"{len(queries)} requests, {len(catalog)} tools")


if __name__ == "__main__":
    main()
