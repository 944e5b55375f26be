"""Shared test fixtures: paths to captured real data, an isolated snapshot store."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from wp_testdata import WITTY_GRAPH

# No test reads or writes the machine's own wp-mcp files or settings: the default store
# ($XDG_DATA_HOME/wp-mcp) and config ($XDG_CONFIG_HOME/wp-mcp) resolve under a directory
# this run makes and removes, and no WP_MCP_* variable of the shell that started the run
# applies, in this process and every process a test starts. (A test that ran `serve`
# without --store wrote the user's store; a user's config or limits would change answers.)
_OWN_HOME = Path(tempfile.mkdtemp(prefix="wp-mcp-tests-"))
os.environ["XDG_DATA_HOME"] = str(_OWN_HOME / "data")
os.environ["XDG_CONFIG_HOME"] = str(_OWN_HOME / "config")
for _name in [name for name in os.environ if name.startswith("WP_MCP_")]:
    del os.environ[_name]


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_OWN_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_kept_ebpf_object():
    """A test that ran an in-process server (which keeps its eBPF object between windows,
    collectors/ebpf/compiled.py) leaves none kept for the next test, whose programs must
    unload with its collection."""
    yield
    compiled = sys.modules.get("wp_mcp.collectors.ebpf.compiled")
    if compiled is not None:
        compiled.keep_compiled(False)


@pytest.fixture
def store_dir(tmp_path, monkeypatch) -> Path:
    """A fresh snapshot store for this test, also exported as WP_MCP_STORE for subprocesses."""
    path = tmp_path / "store"
    monkeypatch.setenv("WP_MCP_STORE", str(path))
    return path


@pytest.fixture(scope="session")
def witty_path() -> Path:
    return WITTY_GRAPH
