# Two commands for a newcomer (README): `make run` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FIXTURE ?= ../shared/fixtures/witty-profiler/graph.json

.PHONY: venv run test lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[test,gpu]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wp-mcp import $(FIXTURE)

test: $(STAMP)
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
