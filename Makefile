# Lamina: two commands on a fresh machine.
#   make demo   – set everything up, then run the main job on a local table with local Ray
#   make test   – set everything up, then run the whole test suite (cargo test + pytest)
# Set-up is idempotent and incremental: a virtualenv in .venv, then `maturin develop`
# builds the native extension and installs it with the dependencies and test extras
# that pyproject.toml lists (the one place they are written down).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Outside the work tree, so `git clean` and fresh clones on the same machine reuse the Rust build.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/lamina/target
export RAY_AUTH_MODE ?= disabled
PYTEST_ARGS ?=

.PHONY: demo test setup native pytest cargo-test bench clean

demo: setup
	$(BIN)/python -m jobs.demo

test: setup cargo-test pytest

setup: $(VENV)/.deps native

$(VENV)/.deps: pyproject.toml
	@command -v cargo >/dev/null || { echo "cargo not found: install the Rust toolchain (rustup) first"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "maturin>=1.16,<2"
	touch $@

native: $(VENV)/.deps
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --quiet --extras test

cargo-test:
	cargo test --quiet --manifest-path native/Cargo.toml

pytest: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/python -m benchmarks.write_read
	$(BIN)/python -m benchmarks.compaction
	$(BIN)/python -m benchmarks.index
	$(BIN)/python -m benchmarks.memtable
	$(BIN)/python -m benchmarks.wal

clean:
	rm -rf $(VENV) demo_table
