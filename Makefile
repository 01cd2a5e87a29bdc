# Lamina: two commands on a fresh machine.
#   make demo   – set everything up, then run the main job on a local table with local Ray
#   make test   – set everything up, then the gates (ruff lint + format check, mypy) and the whole test suite (cargo test + pytest)
#   make lint   – the gates alone: ruff check, ruff format --check, mypy on the package
# Set-up is idempotent and incremental: a virtualenv in .venv, then an editable install
# (setuptools + setuptools-rust) builds the native extension and installs one package, `lamina`
# (planner/, workers/ and jobs/ as lamina.planner, lamina.workers, lamina.jobs), with the
# dependencies and test extras that pyproject.toml lists (the one place they are written down).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Outside the work tree, so `git clean` and fresh clones on the same machine reuse the Rust build.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/lamina/target
export RAY_AUTH_MODE ?= disabled
PYTEST_ARGS ?=

.PHONY: demo test setup native pytest cargo-test lint bench mutation soak clean

demo: setup
	$(BIN)/python -m lamina.jobs.demo

test: setup lint cargo-test pytest

setup: $(VENV)/.deps native

# Re-run when the build tools change (they are named here and in pyproject.toml).
$(VENV)/.deps: pyproject.toml Makefile
	@command -v cargo >/dev/null || { echo "cargo not found: install the Rust toolchain (rustup) first"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "setuptools>=77" "setuptools-rust>=1.11,<2"  # pyproject.toml's build-system
	touch $@

# The build tools are in the venv already: no isolated build environment to set up on every run.
native: $(VENV)/.deps
	$(BIN)/python -m pip install -q --no-build-isolation -e ".[test]"

cargo-test:
	cargo test --quiet --manifest-path native/Cargo.toml

pytest: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The lint and type gates; configs: [tool.ruff] and [tool.mypy] in pyproject.toml. mypy checks
# the package as installed (planner/ as lamina.planner etc.), which no path option of mypy can
# map: build/typecheck/lamina/ lays it out as symlinks (lamina/'s files, then planner, workers,
# jobs), mypy checks that, and its paths are printed back as the checkout's. (`ruff format
# --check` joins once the whole tree has been formatted.)
TYPECHECK_DIR := build/typecheck

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	rm -rf $(TYPECHECK_DIR) && mkdir -p $(TYPECHECK_DIR)/lamina
	for f in lamina/*; do case $$f in *__pycache__|*.so) ;; *) ln -s "$(CURDIR)/$$f" $(TYPECHECK_DIR)/lamina/ ;; esac; done
	for d in planner workers jobs; do ln -s "$(CURDIR)/$$d" $(TYPECHECK_DIR)/lamina/$$d; done
	@$(BIN)/mypy > build/mypy.out; rc=$$?; \
		sed -E 's#^$(TYPECHECK_DIR)/lamina/(planner|workers|jobs)/#\1/#; s#^$(TYPECHECK_DIR)/##' build/mypy.out; exit $$rc

bench: setup
	$(BIN)/python -m benchmarks.write_read
	$(BIN)/python -m benchmarks.compaction
	$(BIN)/python -m benchmarks.streaming
	$(BIN)/python -m benchmarks.index
	$(BIN)/python -m benchmarks.memtable
	$(BIN)/python -m benchmarks.wal
	$(BIN)/python -m benchmarks.catalog

# Mutation testing of the data-protecting modules (docs/RELIABILITY.md, "Mutation testing").
# Slow (hours on 2 cores: ~4,600 mutants), so never part of `make test` or CI. Config:
# [tool.mutmut] in pyproject.toml; one module:  make mutation MUTATION_MODULES=lamina.commit
# Afterwards `cd build/mutation && ../../.venv/bin/mutmut show NAME` prints a surviving mutant's diff.
MUTATION_MODULES ?= lamina.commit lamina.transaction lamina.records lamina.manifest lamina.zones lamina.deletion lamina.cleanup \
	lamina.filter lamina.index.query lamina.ingest lamina.planner
MUTATION_JOBS ?= 2
# mutmut names a mutant after its file's path and the tests import lamina.planner, so it runs on a
# copy of the tree laid out as installed: planner/, workers/ and jobs/ inside lamina/.
MUTATION_DIR := build/mutation
MUTMUT := $(abspath $(BIN))/mutmut

mutation: setup
	$(BIN)/python -m pip install -q "mutmut>=3"  # the `mutation` extra
	rm -rf $(MUTATION_DIR) && mkdir -p $(MUTATION_DIR)/mutants/lamina
	cp -r lamina tests pyproject.toml $(MUTATION_DIR)/
	for d in planner workers jobs; do cp -r $$d $(MUTATION_DIR)/lamina/$$d; done
	cp lamina/_native*.so $(MUTATION_DIR)/mutants/lamina/
	@cd $(MUTATION_DIR) && for m in $(MUTATION_MODULES); do \
		echo "mutation: $$m (log: $(MUTATION_DIR)/mutants/$$m.log)"; \
		$(MUTMUT) run --max-children $(MUTATION_JOBS) "$$m.*" > mutants/$$m.log 2>&1 \
			|| { tail -40 mutants/$$m.log; exit 1; }; \
	done
	@echo "module                      mutants   killed survived    other   score"
	@cd $(MUTATION_DIR) && $(MUTMUT) results --all true | sed -nE 's/^ *([A-Za-z0-9_.]+)\.x(_|ǁ).*: ([a-z ]+)$$/\1 \3/p' | awk ' \
		{ m = $$1; st = substr($$0, length(m) + 2) } st == "not checked" { next } { n[m]++; N++ } \
		st == "killed" || st == "timeout" { k[m]++; K++ } \
		st == "survived" { s[m]++; S++ } \
		END { for (m in n) printf "%-26s %8d %8d %8d %8d %6.1f%%\n", m, n[m], k[m], s[m], n[m] - k[m] - s[m], 100 * k[m] / n[m] | "sort"; \
		      close("sort"); \
		      if (N) printf "%-26s %8d %8d %8d %8d %6.1f%%\n", "total", N, K, S, N - K - S, 100 * K / N }'
	@cd $(MUTATION_DIR) && $(MUTMUT) results

clean:
	rm -rf $(VENV) demo_table mutants $(MUTATION_DIR)

# The chaos soak (docs/RELIABILITY.md, "Chaos soak"): writers, WAL producers and appliers, compaction,
# index builds and cleanup on one table under S3 faults and SIGKILLs, then a check of every row
# against a model of every committed write. Minutes: SOAK_SECONDS of chaos per backend (s3, local).
SOAK_SECONDS ?= 180
SOAK_SEED ?= 1
SOAK_BACKEND ?= both
SOAK_WRITERS ?= 8

soak: setup
	$(BIN)/python -m benchmarks.soak --backend $(SOAK_BACKEND) --seconds $(SOAK_SECONDS) --seed $(SOAK_SEED) --writers $(SOAK_WRITERS)
