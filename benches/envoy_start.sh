#!/usr/bin/env bash
# Envoy's start with and without toolsift (docs/BENCHMARKS.md, "Envoy's start"): five rounds,
# alternating envoy.yaml and the same file without the toolsift filter, each Envoy on
# --concurrency 1; prints the time until /ready and the CPU time Envoy had used by then and
# 3 s later. Needs `make wasm envoy`; uses ports 10000, 9901 and 18000 as envoy.yaml does.
set -euo pipefail
cd "$(dirname "$0")/.."
envoy=.venv/lib/python3.11/site-packages/envoy/_bin/envoy
bare=$(mktemp --suffix .yaml)
trap 'rm -f "$bare"' EXIT
# envoy.yaml without its `- name: toolsift` filter entry (the lines indented under it).
awk '
  skip && (NF == 0 || match($0, /[^ ]/) - 1 > indent) { next }
  { skip = 0 }
  $1 == "-" && $2 == "name:" && $3 == "toolsift" { skip = 1; indent = match($0, /[^ ]/) - 1; next }
  { print }
' envoy.yaml > "$bare"
cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat"; }
for round in 1 2 3 4 5; do
  for config in "$bare" envoy.yaml; do
    "$envoy" -c "$config" --concurrency 1 --disable-hot-restart --log-level error >/dev/null 2>&1 &
    pid=$!
    start=$(date +%s%N)
    until curl -sf http://127.0.0.1:9901/ready >/dev/null; do sleep 0.02; done
    ready=$(date +%s%N)
    at_ready=$(cpu $pid)
    sleep 3
    later=$(cpu $pid)
    name=$([ "$config" = envoy.yaml ] && echo "with toolsift" || echo "without toolsift")
    echo "round $round, $name: ready after $(( (ready - start) / 1000000 )) ms, CPU ${at_ready} s by then, ${later} s 3 s later"
    kill $pid
    wait $pid 2>/dev/null || true
  done
done
