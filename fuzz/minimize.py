"""Rebuilds the committed corpus of one fuzz target within a byte budget (`make fuzz-corpus`).

libFuzzer's merge (`-merge=1 -merge_control_file=CONTROL`) has run every input of the committed
corpus and of the last runs' corpus and written, per input, the code edges it covers (the
`COV` lines of CONTROL). This picks inputs greedily by new edges per byte until the budget is
spent, and makes them the target's corpus: the small inputs that reach the most code.

usage: python3 fuzz/minimize.py CONTROL BUDGET_BYTES CORPUS_DIR
"""

import os
import shutil
import sys
import tempfile


def main(control, budget, corpus):
    lines = open(control).read().split("\n")
    count = int(lines[0])
    files = lines[2:2 + count]
    edges = {}
    for line in lines[2 + count:]:
        fields = line.split()
        if fields and fields[0] == "COV":
            edges[int(fields[1])] = set(map(int, fields[2:]))
    sizes = {i: os.path.getsize(files[i]) for i in edges}
    covered, chosen, spent = set(), [], 0
    while True:
        # New edges per byte; 64 bytes of overhead per file favour fewer, fuller inputs.
        gains = ((len(edges[i] - covered) / (sizes[i] + 64), i) for i in edges
                 if i not in chosen and spent + sizes[i] <= budget and edges[i] - covered)
        best = max(gains, default=None)
        if best is None:
            break
        chosen.append(best[1])
        covered |= edges[best[1]]
        spent += sizes[best[1]]
    with tempfile.TemporaryDirectory() as keep:
        for i in chosen:
            shutil.copy(files[i], keep)
        shutil.rmtree(corpus)
        shutil.copytree(keep, corpus)
    total = len(set().union(*edges.values())) if edges else 0
    print(f"{corpus}: {len(chosen)} inputs, {spent} bytes, {len(covered)} of {total} edges")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
