# Two commands for a newcomer (README): `make run` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv clients run test lint typecheck clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test,gpu]'
	touch $(STAMP)

# The main job: diagnose this host live (collect a window, run every skill, print the report).
run: $(STAMP)
	$(VENV)/bin/wp-mcp diagnose --live

# The MCP client tests drive real Node clients; without Node they skip and say why.
clients:
	bash clients/install.sh

test: $(STAMP) clients
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# mypy over the package as installed (the folders are mapped onto wp_mcp.*; see .ci/typecheck.py).
typecheck: $(STAMP)
	$(PY) .ci/typecheck.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
