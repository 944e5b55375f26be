# Two commands for a newcomer (README): `make run` and `make test`. Both set up .venv first:
# `make run` with the runtime only, `make test` (and `make venv`, lint, typecheck) with the test
# extras too. The package is installed editable: a new module, subpackage or skill needs no
# reinstall (docs/architecture.md).
VENV ?= .venv
PY := $(VENV)/bin/python
RUNTIME := $(VENV)/.runtime-stamp
DEV := $(VENV)/.dev-stamp

.PHONY: venv clients run test lint typecheck bench-smoke clean

venv: $(DEV)

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip

$(RUNTIME): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[gpu]'
	touch $@

$(DEV): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,gpu]'
	touch $@ $(RUNTIME)

# The main job: diagnose this host live (collect a window, run every skill, print the report).
run: $(RUNTIME)
	$(VENV)/bin/wp-mcp diagnose --live

# The MCP client tests drive real Node clients; without Node they skip and say why.
clients:
	bash clients/install.sh

test: $(DEV) clients
	$(VENV)/bin/pytest -q

# ruff; the stages' layers contract (pyproject's [tool.importlinter]); no import cycles.
lint: $(DEV)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) .ci/import_cycles.py

# mypy over the package wp_mcp/ (its links lead into the top-level folders; pyproject's [tool.mypy]).
typecheck: $(DEV)
	$(VENV)/bin/mypy

# Every benchmark at its smallest size, so that none rots (benchmarks/README.md).
bench-smoke: $(DEV)
	$(PY) benchmarks/smoke.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
