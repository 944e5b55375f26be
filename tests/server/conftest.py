"""Fixtures for the MCP server tests: the witty fixture stored in a temporary store (the
root conftest's ``store_dir``), an allowed import folder, and the server in-process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState
from wp_testdata import WITTY_GRAPH as WITTY


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store(store_dir: Path) -> Store:
    return Store(store_dir)


@pytest.fixture
def witty_id(store: Store) -> str:
    return store.put(load_witty(WITTY), label="witty fixture")


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """A directory passed as --allow-dir, holding a copy of the witty fixture."""
    folder = tmp_path / "allowed"
    folder.mkdir()
    shutil.copy(WITTY, folder / "graph.json")
    return folder


@pytest.fixture
def server(store_dir: Path, allowed: Path):
    return build_server(ServerState(store_path=store_dir, allow_dirs=(allowed,)))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: spawns node clients or real collections (seconds per test)"
    )
