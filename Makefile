# One entry point for people and machines. `make setup` is idempotent.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.rechain-installed
NATIVE_SRC := $(shell find workers/native/src -name '*.rs') workers/native/Cargo.toml
PY_SRC := pyproject.toml
DEMO := demo
# The benchmark peers build outside the tree, beside their cached binary (benchmarks/peers/build.sh).
PEERS_TARGET := $(HOME)/.cache/rechain/peers/target

.PHONY: setup demo test system-deps test-rust test-py bench lint fmt clean soak infra-check fuzz

# Bytecode is compiled here because the CLI's start-up is part of every (incremental) run and
# an environment may forbid writing it (PYTHONDONTWRITEBYTECODE).
setup: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 pipeline workers schemas benchmarks tests > /dev/null

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python $(NATIVE_SRC) $(PY_SRC)
	$(BIN)/pip install -q "setuptools>=68" "setuptools-rust>=1.9" wheel
	$(BIN)/pip install -q --no-build-isolation -e ".[dev]"
	# Test oracle for the Core block index; it pins python-bitcoinlib 0.11 but runs on 0.12.
	$(BIN)/pip install -q --no-deps "blockchain-parser==0.1.6" "ripemd-hash==1.0.1"
	touch $(STAMP)

demo: setup
	rm -rf $(DEMO)
	$(BIN)/rechain gen bitcoin $(DEMO)/node --blocks 20000 --side-branches 5 --orphans 3 --tx-per-block 1:4
	$(BIN)/rechain btc reindex --config configs/local-demo.toml
	$(BIN)/rechain btc status --data $(DEMO)/data
	$(BIN)/rechain query --data $(DEMO)/data "SELECT status, count(*) AS blocks, max(height) AS top FROM headers GROUP BY status ORDER BY blocks DESC"
	$(BIN)/rechain query --data $(DEMO)/data "SELECT script_type, count(*) AS outputs, sum(value) AS sats FROM outputs WHERE in_best_chain GROUP BY 1 ORDER BY 2 DESC"
	$(BIN)/rechain gen eth $(DEMO)/eth --blocks 20000 --format era1 --network dev --tx-per-block 0:20
	$(BIN)/rechain eth import --config configs/local-demo.toml
	$(BIN)/rechain query --data $(DEMO)/eth-data "SELECT type, count(*) AS txs, sum(gas_used) AS gas, count(DISTINCT from_address) AS senders FROM eth_transactions GROUP BY 1 ORDER BY 1"

test: setup system-deps test-rust test-py

# Debian packages the oracles need (installed when run as root, else the command to run).
system-deps:
	bash tests/system-deps.sh

test-rust:
	cd workers/native && cargo test --profile ci --quiet

test-py:
	RAY_AUTH_MODE=disabled $(BIN)/pytest -q -rs -m "not slow" tests benchmarks/tests

bench: setup
	$(BIN)/python benchmarks/btc_headers.py
	$(BIN)/python benchmarks/btc_full.py
	$(BIN)/python benchmarks/btc_incremental.py
	$(BIN)/python benchmarks/btc_core_index.py
	$(BIN)/python benchmarks/btc_scripts.py
	$(BIN)/python benchmarks/btc_utxo.py
	$(BIN)/python benchmarks/flow_replay.py
	$(BIN)/python benchmarks/flow_checkpoint.py
	$(BIN)/python benchmarks/eth_headers.py
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/btc_full_scaling.py
	$(BIN)/python benchmarks/btc_publish_prints.py
	$(BIN)/python benchmarks/charts.py
	$(BIN)/python benchmarks/results_table.py --write benchmarks/README.md

lint: setup
	$(BIN)/ruff check pipeline workers schemas tests benchmarks
	$(BIN)/ruff format --check pipeline workers schemas tests benchmarks
	$(BIN)/mypy pipeline workers schemas
	$(BIN)/python benchmarks/results_table.py --check benchmarks/README.md
	$(BIN)/python -m rechain.schemas.readme_tables --check
	cd workers/native && cargo fmt --check && cargo clippy --profile ci --all-targets -- -D warnings
	cd benchmarks/peers && cargo fmt --check && CARGO_TARGET_DIR=$(PEERS_TARGET) cargo clippy --locked -- -D warnings

fmt: setup
	$(BIN)/ruff format pipeline workers schemas tests benchmarks
	$(BIN)/ruff check --fix pipeline workers schemas tests benchmarks
	cd workers/native && cargo fmt
	cd benchmarks/peers && cargo fmt

clean:
	rm -rf $(VENV) workers/native/target build *.egg-info $(DEMO)

soak: setup
	RAY_AUTH_MODE=disabled RECHAIN_KILL_POINTS=200 $(BIN)/pytest -q -rxX tests/test_btc_kill.py tests/test_flow_kill.py tests/test_memory_budget.py

# Every fuzz target for FUZZ_SECONDS (default 60) each: cargo-fuzz when nightly is present,
# else the stable harness (workers/native/tests/fuzz.rs). Prints executions per target.
fuzz:
	workers/native/fuzz/run.sh

# Offline checks of infra/: OpenTofu fmt + rendering, HCL rules, checkov, promtool, dashboard.
infra-check:
	bash infra/check.sh
