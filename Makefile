# Two entry points: `make run` (install + serve on embedded defaults) and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PORT ?= 8000
HOST ?= 127.0.0.1
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck format install migrate fake-claude fake-exa bench bench-compare mutate mutate-smoke clean

$(STAMP): pyproject.toml
	@py=$$(scripts/find-python) || exit 1; \
	if [ ! -x $(BIN)/python ]; then echo "Creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; fi
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --noinput

# Daphne's --websocket-max-message-size caps what the server *sends* as well, so it stays at
# daphne's default (1 MiB, far above the <= 32 KB live messages). Incoming client frames are
# capped here, and again by the consumer at DEEPTHINK_WS_MAX_FRAME_BYTES (closing with 4413).
# The browser and process tests run daphne with exactly these flags.
DAPHNE_FLAGS := --websocket-max-frame-size 65536

run: migrate
	@echo ""
	@echo "Deep Think on http://$(HOST):$(PORT)/"
	@echo "  Create a login with:  $(BIN)/python manage.py createsuperuser"
	@echo "  Model provider: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL for a local server,"
	@echo "  e.g. 'make fake-claude' in another terminal and ANTHROPIC_BASE_URL=http://127.0.0.1:8765)."
	@echo ""
	DEBUG=$${DEBUG:-1} $(BIN)/daphne $(DAPHNE_FLAGS) -b $(HOST) -p $(PORT) config.asgi:application

# An offline stand-in for the Claude API (the same fake the tests use).
fake-claude: install
	$(BIN)/python -m tests.fakes.anthropic_server --port $${FAKE_PORT:-8765} --delay $${FAKE_DELAY:-0.5}

fake-exa: install
	$(BIN)/python -m tests.fakes.exa_server --port $${FAKE_EXA_PORT:-8766} --delay $${FAKE_DELAY:-0.3}

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy with django-stubs over config, thinking, research and accounts (pyproject [tool.mypy]).
typecheck: install
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Embedded defaults first (SQLite + in-memory layer), then the tests that need real
# PostgreSQL/Redis when DATABASE_URL / REDIS_URL are set (they skip, with a reason, otherwise).
test: install lint typecheck
	env -u DATABASE_URL -u REDIS_URL $(BIN)/pytest
	@# The services tests run in file order: in random order a test's leftover worker threads
	@# can still hold pooled connections when the parallel-start test begins (see #17's note).
	@if [ -n "$${DATABASE_URL:-}$${REDIS_URL:-}" ]; then \
	  echo "== again on DATABASE_URL=$${DATABASE_URL:-<unset>} REDIS_URL=$${REDIS_URL:-<unset>}"; \
	  $(BIN)/pytest -m services -p no:randomly; \
	fi

# Benchmarks (bench/README.md): a throwaway SQLite file, or a throwaway PostgreSQL database
# and the Redis variants when DATABASE_URL / REDIS_URL are set. BENCH_QUICK=1 is the smoke run
# CI does: it checks that the suite works, not its numbers.
bench: install
	$(BIN)/python -m bench.run

# The same benchmarks on BASE (a temporary git worktree) and on this tree, side by side.
bench-compare: install
	$(BIN)/python -m bench.compare $(BASE)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache mutants mutation/.cache

# Mutation testing (mutation/README.md): every covered module, or one with
# MODULE=thinking/capabilities.py. Incremental; the fast suite only; MUTATE_WORKERS=2.
mutate: install
	$(BIN)/python -m mutation.run $(MODULE)

# CI's smoke run: one small module, well under two minutes; the score is printed, not asserted.
# Results stay on this machine (mutation/results/, not in git).
mutate-smoke: install
	$(BIN)/python -m mutation.run --smoke
