# Two commands do everything on a fresh machine with Python 3.11+:
#   make run   — virtualenv, install, migrate, start Runbell on SQLite with a demo agent
#                that asks for approval (prints a first user and a sign-in link);
#                Ctrl-C stops it
#   make test  — dev dependencies, then the whole suite
#   make bench — the benchmark suite, quick mode (< 5 min); FULL=1 for the full one.
#                Writes BENCHMARKS.md; never part of `make test` (bench/README.md)
# And from a second terminal while it runs:
#   make login-link [EMAIL=you@example.com] — a new one-time browser sign-in link for
#                the running server (its port is recorded in the database)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 8080
EMAIL ?=
TENANT ?= default

.PHONY: run login-link test lint typecheck sdk bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEVSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP) $@

# Bytecode for src/ (an editable install has none, and PYTHONDONTWRITEBYTECODE=1 machines
# never write it): without it every `runbell` start compiles each module it imports from
# source (~0.2 s of CPU per server start, more than the whole budget of a CLI command).
# compileall skips what is current, so this costs nothing when nothing changed.
COMPILE := $(BIN)/python -m compileall -q src >/dev/null

# The same for tests/: pytest rewrites each test module's asserts and keeps the result in
# __pycache__ only where bytecode is written, so on such machines each of the six xdist
# workers parsed, rewrote and compiled every test module while collecting (22 s of CPU per
# worker; 7 s when the rewritten modules are there). One collection with bytecode writing
# on (19 s) leaves them for the workers. Errors are the real run's to report.
TEST_BYTECODE := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest --collect-only -q -p no:xdist \
	-p no:cacheprovider >/dev/null 2>&1 || true

run: $(STAMP)
	@$(COMPILE)
	$(BIN)/runbell migrate
	$(BIN)/runbell serve --host $(HOST) --port $(PORT) --demo

login-link: $(STAMP)
	@$(COMPILE)
	@$(BIN)/runbell user login-link $(EMAIL) --tenant $(TENANT)

# lint-imports: no logo, no spinner (TERM=dumb), no cache (a stale one hid a broken
# contract after modules moved); a broken contract is still printed.
LINT_IMPORTS := TERM=dumb $(BIN)/lint-imports --no-logo --no-cache

test: $(DEVSTAMP)
	@$(COMPILE)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy
	$(LINT_IMPORTS)
	@$(TEST_BYTECODE)
	$(BIN)/pytest -n 6 --dist loadfile --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

# The SDK's sync client is generated from the async one (scripts/unasync.py).
sdk: $(DEVSTAMP)
	$(BIN)/python scripts/unasync.py

lint: $(DEVSTAMP)
	$(BIN)/ruff check src tests bench scripts

typecheck: $(DEVSTAMP)
	$(BIN)/mypy
	$(LINT_IMPORTS)

bench: $(DEVSTAMP)
	$(BIN)/python -m bench.run $(if $(FULL),--full) --out BENCHMARKS.md $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
