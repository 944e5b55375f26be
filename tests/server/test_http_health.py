"""`wp-mcp serve --transport http` says where it listens and answers a health probe.

Supervisors and scripts learn the address from one stderr line (the bound port, so --port 0
works) and check liveness with GET /healthz, which needs no token because it tells nothing.
"""

from __future__ import annotations

import re
import selectors
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_command, server_env

from wp_mcp import __version__

TOKEN = "health-test-token-9a7e"
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/mcp")


def first_stderr_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The server's first stderr line, or a failure naming what it printed instead."""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError("the server printed nothing on stderr")
    return proc.stderr.readline()


@pytest.fixture
def served_port(store_dir: Path) -> Iterator[int]:
    """A token-protected http server on a port it picks (--port 0); yields the printed port."""
    proc = subprocess.Popen(
        serve_command(store_dir, "--transport", "http", "--port", "0", "--token", TOKEN),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=server_env(),
    )  # fmt: skip
    try:
        line = first_stderr_line(proc)
        match = LISTENING.fullmatch(line.strip())
        assert match, f"expected the listening line, got {line!r}"
        yield int(match.group(1))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_listening_line_names_the_bound_port_and_the_health_probe_needs_no_token(
    served_port: int,
) -> None:
    health = httpx2.get(f"http://127.0.0.1:{served_port}/healthz", timeout=30)
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "server": "wp-mcp", "version": __version__}


@pytest.mark.anyio
async def test_a_server_on_port_0_answers_tools_list(served_port: int) -> None:
    """The Host check knows the port the listener got (built from 0 it answered 421)."""
    url = f"http://127.0.0.1:{served_port}/mcp"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        tools = await client.list_tools()
    assert any(tool.name == "wp_snapshots" for tool in tools.tools)


def test_the_health_probe_opens_nothing_else_without_the_token(served_port: int) -> None:
    base = f"http://127.0.0.1:{served_port}"
    assert httpx2.post(f"{base}/healthz", json={}, timeout=30).status_code == 401
    assert httpx2.post(f"{base}/mcp", json={}, timeout=30).status_code == 401
    assert httpx2.get(f"{base}/picture/latest", timeout=30).status_code == 401


def test_a_busy_port_is_one_line_naming_it(store_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            serve_command(store_dir, "--transport", "http", "--port", str(port)),
            capture_output=True, text=True, timeout=60, env=server_env(),
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"wp-mcp: error: cannot listen on '127.0.0.1':{port}: Address already in use"
    ]
