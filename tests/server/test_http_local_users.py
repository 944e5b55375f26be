"""Loopback is not a boundary between users (issue 32.4): `serve --transport http` on
127.0.0.1 without a token uses its own, kept 0600 in the store's folder, so another local
user (here: a child dropped to ``nobody``) gets 401 and cannot read the token, while the
server's user reads it and gets in; ``--allow-local-users`` is the old, open behaviour.
Over HTTP ``wp_open`` reads no path relative to the server's working directory."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.types import LATEST_PROTOCOL_VERSION
from server_helpers import serve_command, server_env
from wp_nobody import as_nobody as run_as_nobody

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/mcp")
TOKEN_LINE = re.compile(r"bearer token: the first line of (\S+) ")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to drop to nobody)")
INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
               "clientInfo": {"name": "local-user", "version": "0"}},
})  # fmt: skip


def initialize(port: int, token: str | None = None) -> int:
    """The status an initialize request gets (http.client: loaded before any fork)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/mcp", body=INITIALIZE, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def as_nobody(port: int, token_file: Path | None) -> dict:
    """As nobody: try the server and the token file; what the child saw."""

    def attempt() -> dict:
        seen: dict = {"status": initialize(port)}
        if token_file is not None:
            try:
                seen["token"] = token_file.read_text()
            except OSError as exc:
                seen["token_error"] = exc.strerror
        return seen

    return run_as_nobody(attempt)


def stderr_lines(proc: subprocess.Popen, count: int) -> list[str]:
    """The server's first ``count`` stderr lines (read by a thread: a buffered pipe hides
    its second line from a selector once the first is read)."""
    lines: list[str] = []

    def read() -> None:
        while len(lines) < count and (line := proc.stderr.readline()):
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(120)
    assert len(lines) == count, f"the server printed only {lines}"
    return lines


@pytest.fixture
def serve(store_dir: Path) -> Iterator:
    procs = []

    def start(*extra: str, lines: int = 2) -> tuple[int, list[str]]:
        proc = subprocess.Popen(
            serve_command(store_dir, "--transport", "http", "--port", "0", *extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=server_env(),
        )  # fmt: skip
        procs.append(proc)
        printed = stderr_lines(proc, lines)
        match = LISTENING.fullmatch(printed[0].strip())
        assert match, printed
        return int(match.group(1)), printed

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def test_loopback_without_a_token_uses_the_servers_own(serve, store_dir: Path) -> None:
    port, printed = serve()
    token_file = Path(TOKEN_LINE.match(printed[1]).group(1))
    assert token_file.parent == store_dir
    assert token_file.stat().st_mode & 0o777 == 0o600
    token = token_file.read_text().strip()
    assert initialize(port) == 401
    assert initialize(port, token) == 200


def test_the_token_is_kept_across_restarts(serve) -> None:
    _, first = serve()
    token_file = Path(TOKEN_LINE.match(first[1]).group(1))
    token = token_file.read_text()
    port, _ = serve()
    assert token_file.read_text() == token
    assert initialize(port, token.strip()) == 200


@needs_root
@pytest.mark.root
def test_another_local_user_gets_401_and_cannot_read_the_token(serve) -> None:
    port, printed = serve()
    token_file = Path(TOKEN_LINE.match(printed[1]).group(1))
    seen = as_nobody(port, token_file)
    assert seen["status"] == 401
    assert "token" not in seen and seen["token_error"] == "Permission denied"


@needs_root
@pytest.mark.root
def test_allow_local_users_lets_every_local_user_in(serve) -> None:
    port, _ = serve("--allow-local-users", lines=1)
    assert as_nobody(port, None)["status"] == 200


def test_allow_local_users_off_loopback_is_refused(store_dir: Path) -> None:
    done = subprocess.run(
        serve_command(store_dir, "--transport", "http", "--host", "0.0.0.0", "--port", "0",
                      "--allow-local-users"),
        capture_output=True, text=True, timeout=60, env=server_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--allow-local-users is for loopback" in done.stderr


def test_over_http_wp_open_reads_nothing_relative_to_the_servers_cwd(
    store_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root daemon's cwd is not its HTTP clients' folder: it is no allowed root, and a
    relative path is refused (stdio keeps both: the assistant started it where it works)."""
    from wp_mcp.graph.errors import UserError
    from wp_mcp.server.mcp.state import ServerState

    (tmp_path / "graph.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    over_http = ServerState(store_path=store_dir, allow_cwd=False)
    assert tmp_path.resolve() not in over_http.allowed_roots()
    with pytest.raises(UserError, match="is relative: over HTTP give an absolute path"):
        over_http.check_import_path("graph.json")
    with pytest.raises(UserError, match="outside the allowed roots"):
        over_http.check_import_path(str(tmp_path / "graph.json"))
    over_stdio = ServerState(store_path=store_dir)
    assert over_stdio.check_import_path("graph.json") == (tmp_path / "graph.json").resolve()
