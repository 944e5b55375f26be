"""`wp-mcp serve --transport http`: loopback by default, a bearer token everywhere else."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import http_server_running, registered_tools, serve_command, server_env

TOKEN = "test-token-4f1c"


@pytest.fixture
def http_server(store_dir: Path) -> Iterator[int]:
    with http_server_running(store_dir, TOKEN) as port:
        yield port


def test_requests_without_the_token_are_refused(http_server: int) -> None:
    url = f"http://127.0.0.1:{http_server}/mcp"
    assert httpx2.post(url, json={}).status_code == 401
    wrong = httpx2.post(url, json={}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_foreign_host_and_origin_headers_are_refused(http_server: int) -> None:
    """DNS rebinding: a page on another site must not reach the server, token or not."""
    url = f"http://127.0.0.1:{http_server}/mcp"
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    foreign_host = httpx2.post(url, json=body, headers={**auth, "Host": "evil.example"})
    foreign_origin = httpx2.post(url, json=body, headers={**auth, "Origin": "http://evil.example"})
    assert foreign_host.status_code in (400, 403, 421)
    assert foreign_origin.status_code in (400, 403, 421)


@pytest.mark.anyio
async def test_client_with_the_token_lists_tools(http_server: int) -> None:
    url = f"http://127.0.0.1:{http_server}/mcp"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        tools = await client.list_tools()
        snapshots = await client.call_tool("wp_snapshots", {})
    assert {tool.name for tool in tools.tools} == registered_tools()
    assert not snapshots.is_error


def test_non_loopback_bind_without_a_token_is_refused(store_dir: Path) -> None:
    done = subprocess.run(
        serve_command(store_dir, "--transport", "http", "--host", "0.0.0.0", "--port", "0"),
        capture_output=True, text=True, timeout=60, env=server_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "token" in done.stderr and "Traceback" not in done.stderr
