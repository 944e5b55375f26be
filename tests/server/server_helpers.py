"""Helpers shared by the MCP server tests: spawning `wp-mcp serve`, the pinned node clients."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"


def serve_command(store_dir: Path, *extra: str) -> list[str]:
    """The argv that spawns `wp-mcp serve` on stdio with this store."""
    return [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store_dir), "serve", *extra]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WP_MCP_STORE", None)  # the command line names the store
    env.pop("WP_MCP_TOKEN", None)  # tests choose their own token
    return env


def node_tool(name: str) -> Path:
    """A pinned client from clients/node_modules (installed by .ci/setup.d/30-mcp-clients.sh)."""
    path = CLIENTS / "node_modules" / ".bin" / name
    if shutil.which("node") is None or not path.exists():
        pytest.fail(
            f"{path} is missing: run .ci/setup.d/30-mcp-clients.sh (npm ci in clients/) first"
        )
    return path
