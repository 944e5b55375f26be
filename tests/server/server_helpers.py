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
    """A pinned client from clients/node_modules (`make test` installs them with
    clients/install.sh). Without Node the test skips with the reason; where skips are
    failures (WP_MCP_REQUIRE_EBPF=1, CI) it fails."""
    path = CLIENTS / "node_modules" / ".bin" / name
    if shutil.which("node") is None or not path.exists():
        reason = f"{path.name} is not installed: run clients/install.sh (needs Node.js and npm)"
        if os.environ.get("WP_MCP_REQUIRE_EBPF") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return path
