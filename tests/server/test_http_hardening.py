"""`wp-mcp serve --transport http` against clients that misbehave: bearer scheme in any case,
wrong tokens, a token kept out of `ps`, and sessions opened and never closed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.types import LATEST_PROTOCOL_VERSION
from server_helpers import free_port, serve_command, server_env, wait_listening
from wp_mcp.graph.errors import UserError
from wp_mcp.server.cli.serve import BearerAuth, read_token

TOKEN = "hardening-token-9d2e"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "never-closes", "version": "0"},
    },
}


def authorize(header: bytes | None) -> int:
    """The status BearerAuth answers a request carrying this Authorization header with."""
    statuses: list[int] = []

    async def app(scope: dict, receive: object, send: object) -> None:
        statuses.append(200)

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    headers = [(b"authorization", header)] if header is not None else []
    asyncio.run(BearerAuth(app, TOKEN)({"type": "http", "headers": headers}, None, send))
    return statuses[0]


def test_the_bearer_scheme_is_matched_in_any_case_and_only_the_right_token_passes() -> None:
    for scheme in (b"Bearer", b"bearer", b"BEARER"):
        assert authorize(scheme + b" " + TOKEN.encode()) == 200
    assert authorize(b"Bearer  " + TOKEN.encode() + b" ") == 200  # spacing is not the secret
    assert authorize(b"Bearer " + TOKEN.encode()[:-1]) == 401
    assert authorize(b"Bearer " + TOKEN.encode() + b"x") == 401
    assert authorize(b"Basic " + TOKEN.encode()) == 401
    assert authorize(TOKEN.encode()) == 401
    assert authorize(b"") == 401
    assert authorize(None) == 401


def token_args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(token=None, token_file=str(path))


def test_a_token_file_gives_its_first_line_and_warns_when_others_can_read_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "token"
    secret.write_text(f"  {TOKEN}\nsecond line is ignored\n")
    secret.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        assert read_token(token_args(secret)) == TOKEN
    assert not caplog.records
    secret.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert read_token(token_args(secret)) == TOKEN
    assert "readable by other users" in caplog.text


def test_an_empty_or_missing_token_file_is_a_one_line_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(UserError, match="first line is empty"):
        read_token(token_args(empty))
    with pytest.raises(UserError, match="cannot read"):
        read_token(token_args(tmp_path / "missing"))


@pytest.fixture
def capped_server(
    store_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[int, int]]:
    """A real HTTP server with a token file and the session limits the test asks for."""
    max_sessions, idle_s = request.param
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    secret.chmod(0o600)
    port = free_port()
    proc = subprocess.Popen(
        serve_command(
            store_dir, "--transport", "http", "--port", str(port), "--token-file", str(secret),
            "--max-sessions", str(max_sessions), "--session-idle-s", str(idle_s),
        ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env(),
    )  # fmt: skip
    try:
        wait_listening(port, proc)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def open_session(port: int) -> httpx2.Response:
    """An initialize request whose session the client never closes (lowercase scheme)."""
    return httpx2.post(
        f"http://127.0.0.1:{port}/mcp",
        json=INITIALIZE,
        headers={
            "Authorization": f"bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
    )


def ping(port: int, session: str) -> int:
    """The status a request in ``session`` gets: 200 while it is open, 404 once closed."""
    return httpx2.post(
        f"http://127.0.0.1:{port}/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "mcp-session-id": session,
        },
        timeout=30,
    ).status_code


@pytest.mark.parametrize("capped_server", [(20, 600)], indirect=True)
def test_sessions_never_closed_are_capped_and_never_lock_a_new_client_out(
    capped_server: tuple[int, int],
) -> None:
    """A client that opens sessions and never closes them loses its oldest ones; a new
    client is always let in (the SDK alone answered 503 to everyone for 10 minutes)."""
    port, _ = capped_server
    opened = [open_session(port) for _ in range(320)]
    assert [r.status_code for r in opened] == [200] * 320
    sessions = [r.headers["mcp-session-id"] for r in opened]
    assert [ping(port, s) for s in sessions[-20:]] == [200] * 20  # the 20 most recent
    assert [ping(port, s) for s in sessions[:20]] == [404] * 20  # closed for them
    session = sessions[-1]
    closed = httpx2.delete(
        f"http://127.0.0.1:{port}/mcp",
        headers={"Authorization": f"Bearer {TOKEN}", "mcp-session-id": session},
    )
    assert closed.status_code == 200
    assert open_session(port).status_code == 200
    assert ping(port, sessions[-2]) == 200  # a freed place: nobody else was closed


@pytest.mark.parametrize("capped_server", [(2, 1)], indirect=True)
def test_idle_sessions_expire_and_their_places_go_to_new_ones(
    capped_server: tuple[int, int],
) -> None:
    port, _ = capped_server
    idle = [open_session(port) for _ in range(2)]
    assert [r.status_code for r in idle] == [200, 200]
    # Expiry is awaited, not timed: a refused attempt does not touch the idle sessions.
    deadline = time.monotonic() + 60
    while (fresh := open_session(port)).status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fresh.status_code == 200, "no idle session was ever closed"
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    gone = httpx2.post(
        f"http://127.0.0.1:{port}/mcp",
        json=ping,
        headers={
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "mcp-session-id": idle[0].headers["mcp-session-id"],
        },
        timeout=30,
    )
    assert gone.status_code == 404


def test_a_refused_new_session_closes_no_open_one() -> None:
    """SessionLimit makes room only once a session was opened (in-process, a fake app)."""
    from wp_mcp.server.mcp.http_access import SessionLimit

    closed: list[str] = []
    made = iter(range(100))

    async def app(scope: dict, receive: object, send) -> None:
        headers = dict(scope["headers"])
        if scope["method"] == "DELETE":
            closed.append(headers[b"mcp-session-id"].decode())
            await send({"type": "http.response.start", "status": 200, "headers": []})
        elif headers.get(b"x-refuse"):
            await send({"type": "http.response.start", "status": 400, "headers": []})
        else:
            session = f"s{next(made)}".encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"mcp-session-id", session)]})  # fmt: skip
        await send({"type": "http.response.body", "body": b""})

    limit = SessionLimit(app, max_sessions=2)

    async def post(*headers: tuple[bytes, bytes], client: str = "10.0.0.1") -> None:
        scope = {"type": "http", "path": "/mcp", "method": "POST", "client": (client, 5000),
                 "headers": [(b"host", b"127.0.0.1:1"), *headers]}  # fmt: skip

        async def send(message: dict) -> None:
            pass

        await limit(scope, None, send)

    async def scenario() -> None:
        await post()
        await post()
        for _ in range(5):
            await post((b"x-refuse", b"1"))
        assert closed == [] and limit.open_sessions == 2
        await post((b"mcp-session-id", b"s0"))  # s0 used: s1 is now the least recent
        await post()
        assert closed == ["s1"] and limit.open_sessions == 2

    asyncio.run(scenario())


def test_the_client_that_hoards_sessions_loses_its_own() -> None:
    """Past the limit, the session closed is the least recent one of the client holding the
    most: a client that opens sessions in a loop cannot push another one out."""
    from wp_mcp.server.mcp.http_access import SessionLimit

    closed: list[str] = []
    made = iter(range(100))

    async def app(scope: dict, receive: object, send) -> None:
        if scope["method"] == "DELETE":
            closed.append(dict(scope["headers"])[b"mcp-session-id"].decode())
            headers = []
        else:
            headers = [(b"mcp-session-id", f"s{next(made)}".encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    limit = SessionLimit(app, max_sessions=4)

    async def open_from(client: str) -> None:
        scope = {"type": "http", "path": "/mcp", "method": "POST", "client": (client, 1),
                 "headers": [(b"host", b"127.0.0.1:1")]}  # fmt: skip

        async def send(message: dict) -> None:
            pass

        await limit(scope, None, send)

    async def scenario() -> None:
        await open_from("10.0.0.7")  # s0: the quiet client's one session, the oldest
        for _ in range(10):
            await open_from("10.0.0.9")  # s1… the hoarder's
        assert "s0" not in closed and limit.open_sessions == 4
        assert closed == [f"s{n}" for n in range(1, 8)]

    asyncio.run(scenario())
