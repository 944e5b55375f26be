"""Shared test fixtures: paths to captured real data, an isolated snapshot store."""

from __future__ import annotations

from pathlib import Path

import pytest
from wp_testdata import WITTY_GRAPH


@pytest.fixture
def store_dir(tmp_path, monkeypatch) -> Path:
    """A fresh snapshot store for this test, also exported as WP_MCP_STORE for subprocesses."""
    path = tmp_path / "store"
    monkeypatch.setenv("WP_MCP_STORE", str(path))
    return path


@pytest.fixture(scope="session")
def witty_path() -> Path:
    return WITTY_GRAPH
