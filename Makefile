# Two entry points: `make run` (install + serve on embedded defaults) and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PORT ?= 8000
HOST ?= 127.0.0.1
BIN := $(VENV)/bin

.PHONY: run test lint typecheck format install install-dev migrate lock upgrade-lock fake-claude fake-exa fake-searxng fake-tavily bench bench-compare mutate mutate-smoke clean

# The venv holds exactly the versions in uv.lock: `make run` the runtime packages only,
# `make test` (and the other developer targets) the `dev` group too. uv, pinned here, is
# installed from PyPI into .tools/ on first use; it builds $(VENV) with the Python that
# scripts/find-python picks.
UV_VERSION := 0.13.10
UV_HOME := .tools/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
RUN_STAMP := $(VENV)/.synced-run
DEV_STAMP := $(VENV)/.synced-dev
SYNC = py=$$(scripts/find-python) || exit 1; \
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --locked --compile-bytecode --python "$$py" $(1) \
	|| { echo "(if uv.lock is older than pyproject.toml's dependencies: make lock)" >&2; exit 1; }

$(UV):
	@py=$$(scripts/find-python) || exit 1; rm -rf $(UV_HOME); echo "Installing uv $(UV_VERSION) into $(UV_HOME)"; \
	if "$$py" -m pip --version >/dev/null 2>&1; then \
	  "$$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target $(UV_HOME) uv==$(UV_VERSION); \
	else \
	  "$$py" -m venv $(UV_HOME) && $(UV_HOME)/bin/python -m pip install --quiet uv==$(UV_VERSION); \
	fi

# A venv synced with the dev group serves `make run` as it is.
$(RUN_STAMP): pyproject.toml uv.lock | $(UV)
	@if [ ! $(DEV_STAMP) -nt uv.lock ] || [ ! $(DEV_STAMP) -nt pyproject.toml ]; then \
	  $(call SYNC,--no-dev); \
	fi
	@touch $@

$(DEV_STAMP): pyproject.toml uv.lock | $(UV)
	@$(call SYNC,)
	@touch $@

install: $(RUN_STAMP)

install-dev: $(DEV_STAMP)

# After editing the dependencies in pyproject.toml: the lock, other versions kept.
lock: | $(UV)
	py=$$(scripts/find-python) && $(UV) lock --python "$$py"

# Every locked version moved to the newest that pyproject.toml allows.
upgrade-lock: | $(UV)
	py=$$(scripts/find-python) && $(UV) lock --upgrade --python "$$py"

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
	$(BIN)/python -m fakes.anthropic_server --port $${FAKE_PORT:-8765} --delay $${FAKE_DELAY:-0.5}

fake-exa: install
	$(BIN)/python -m fakes.exa_server --port $${FAKE_EXA_PORT:-8766} --delay $${FAKE_DELAY:-0.3}

fake-searxng: install
	$(BIN)/python -m fakes.searxng_server --port $${FAKE_SEARXNG_PORT:-8767} --delay $${FAKE_DELAY:-0.3}

fake-tavily: install
	$(BIN)/python -m fakes.tavily_server --port $${FAKE_TAVILY_PORT:-8768} --delay $${FAKE_DELAY:-0.3}

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy with django-stubs over config, thinking, research and accounts (pyproject [tool.mypy]).
typecheck: install-dev
	$(BIN)/mypy

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Embedded defaults first (SQLite + in-memory layer), then the tests that need real
# PostgreSQL/Redis when DATABASE_URL / REDIS_URL are set (they skip, with a reason, otherwise).
test: install-dev lint typecheck
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
bench: install-dev
	$(BIN)/python -m bench.run

# The same benchmarks on BASE (a temporary git worktree) and on this tree, side by side.
bench-compare: install-dev
	$(BIN)/python -m bench.compare $(BASE)

clean:
	rm -rf $(VENV) .tools .pytest_cache .ruff_cache mutants mutation/.cache

# Mutation testing (mutation/README.md): every covered module, or one with
# MODULE=thinking/provider/capabilities.py. Incremental; the fast suite only; MUTATE_WORKERS=2.
mutate: install-dev
	$(BIN)/python -m mutation.run $(MODULE)

# CI's smoke run: one small module, well under two minutes; the score is printed, not asserted.
# Results stay on this machine (mutation/results/, not in git).
mutate-smoke: install-dev
	$(BIN)/python -m mutation.run --smoke
