"""`wp-mcp serve --transport http` serves each snapshot's HTML picture at /picture/ID, behind
the same bearer token and Host check as MCP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from server_helpers import http_server_running
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty

TOKEN = "picture-token-77a0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(store_dir: Path, witty_path: Path) -> Iterator[tuple[int, str]]:
    snapshot_id = Store(store_dir).put(load_witty(witty_path), label="witty fixture")
    with http_server_running(store_dir, TOKEN) as port:
        yield port, snapshot_id


def test_the_snapshots_picture_is_served_with_the_token(served) -> None:
    port, snapshot_id = served
    for ref in (snapshot_id, snapshot_id[:8], "latest"):
        answer = httpx2.get(f"http://127.0.0.1:{port}/picture/{ref}", headers=AUTH, timeout=60)
        assert answer.status_code == 200, answer.text[:200]
        assert answer.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in answer.headers["content-security-policy"]
        assert '"npu:0"' in answer.text and "runs 69% of its CPU time on NUMA 7" in answer.text


def test_the_picture_needs_the_token_and_a_known_host(served) -> None:
    port, snapshot_id = served
    url = f"http://127.0.0.1:{port}/picture/{snapshot_id}"
    assert httpx2.get(url, timeout=30).status_code == 401
    assert httpx2.get(url, headers={"Authorization": "Bearer nope"}, timeout=30).status_code == 401
    foreign = httpx2.get(url, headers={**AUTH, "Host": "evil.example"}, timeout=30)
    assert foreign.status_code == 421


def test_an_unknown_snapshot_is_one_line_not_a_traceback(served) -> None:
    port, _ = served
    answer = httpx2.get(f"http://127.0.0.1:{port}/picture/{'x' * 5000}", headers=AUTH, timeout=30)
    assert answer.status_code == 404
    assert len(answer.text.splitlines()) == 1 and len(answer.text) < 400
    assert "Traceback" not in answer.text
