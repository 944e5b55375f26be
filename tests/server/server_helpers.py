"""Helpers shared by the MCP server tests: spawning `wp-mcp serve`, the pinned node clients."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from wp_require import unavailable

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"


def serve_command(store_dir: Path, *extra: str) -> list[str]:
    """The argv that spawns `wp-mcp serve` on stdio with this store."""
    return [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store_dir), "serve", *extra]


def registered_tools() -> set[str]:
    """The tools this checkout's MCP server registers: a served catalogue lists each one."""
    from wp_mcp.server.mcp.tools import load_tools

    return {spec.name for spec in load_tools()}


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
        unavailable(reason)
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("server did not start listening")


@contextlib.contextmanager
def http_server_running(store_dir: Path, token: str, *extra: str) -> Iterator[int]:
    """`wp-mcp serve --transport http` on a free loopback port with ``token``; yields the
    port once it listens and stops the server (by its pid) afterwards."""
    port = free_port()
    proc = subprocess.Popen(
        serve_command(store_dir, "--transport", "http", "--port", str(port), "--token", token, *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env(),
    )  # fmt: skip
    try:
        wait_listening(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
