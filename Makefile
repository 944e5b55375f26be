# Two commands for a newcomer (README): `make run` and `make test`. Both set up .venv first:
# `make run` with the runtime only, `make test` (and `make venv`, lint, typecheck) with the test
# extras too. The package is installed editable: a new module, subpackage or skill needs no
# reinstall (docs/architecture.md).
VENV ?= .venv
PY := $(VENV)/bin/python
RUNTIME := $(VENV)/.runtime-stamp
DEV := $(VENV)/.dev-stamp

.PHONY: venv clients run test lint typecheck bench-smoke release clean

venv: $(DEV)

# No setuptools in the venv (9 MB): pip builds the editable install in an isolated environment,
# and the test extras bring it back for the packaging tests.
$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip uninstall -q -y setuptools

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

# A release (CONTRIBUTING.md): the sdist and the wheel into dist/, built offline with the venv's
# setuptools and checked by twine (metadata, long description); PUBLISH=1 also uploads them
# (twine reads TWINE_USERNAME/TWINE_PASSWORD, TWINE_REPOSITORY_URL or ~/.pypirc).
release: $(DEV)
	rm -rf dist
	$(PY) -m pip wheel --no-deps --no-build-isolation --no-index -q -w dist .
	$(PY) -c 'from setuptools import build_meta; build_meta.build_sdist("dist")'
	$(PY) -m twine check --strict dist/*
	@if [ "$(PUBLISH)" = 1 ]; then \
		$(PY) -m twine upload --non-interactive dist/*; \
	else \
		echo "dist/ is built and checked; publish it with: make release PUBLISH=1"; \
	fi

# mypy over the package wp_mcp/ (its links lead into the top-level folders; pyproject's [tool.mypy]).
typecheck: $(DEV)
	$(VENV)/bin/mypy

# Every benchmark at its smallest size, so that none rots (benchmarks/README.md).
bench-smoke: $(DEV)
	$(PY) benchmarks/smoke.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
